//! How a VM is marked as proxsync's: the ownership tag `proxsync.<install_id>` (visible in
//! the one listing read per cycle) and an identity marker in the VM's description (set at
//! creation, since a clone cannot set tags): `proxsync-id: install=<id> spec=<name> uid=<uid>`.
//! proxsync never changes or deletes a VM that does not carry both.

/// The marker line's prefix.
pub const MARKER_PREFIX: &str = "proxsync-id:";

/// The identity a VM's description carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Marker {
    pub install: String,
    pub spec: String,
    pub uid: String,
}

impl Marker {
    /// The marker line.
    pub fn line(&self) -> String {
        format!(
            "{MARKER_PREFIX} install={} spec={} uid={}",
            self.install, self.spec, self.uid
        )
    }

    /// The VM description proxsync writes: a sentence for the humans in the web UI, then the
    /// marker line.
    pub fn description(&self) -> String {
        format!(
            "Managed by proxsync (install {}) from spec {}. Changes to CPU, memory, disk, \
             network, tags and power state are reverted; edit the spec instead.\n{}",
            self.install,
            self.spec,
            self.line()
        )
    }

    /// Finds the marker in a description (PVE may have re-encoded line breaks; any line or
    /// the text after the prefix is accepted). `None` if absent or malformed.
    pub fn parse(description: &str) -> Option<Marker> {
        let start = description.find(MARKER_PREFIX)? + MARKER_PREFIX.len();
        let rest = description[start..].lines().next()?;
        let mut install = None;
        let mut spec = None;
        let mut uid = None;
        for part in rest.split_whitespace() {
            match part.split_once('=') {
                Some(("install", v)) => install = Some(v),
                Some(("spec", v)) => spec = Some(v),
                Some(("uid", v)) => uid = Some(v),
                _ => {}
            }
        }
        let m = Marker {
            install: install?.to_string(),
            spec: spec?.to_string(),
            uid: uid?.to_string(),
        };
        (!m.install.is_empty() && !m.spec.is_empty() && !m.uid.is_empty()).then_some(m)
    }
}

/// The ownership tag of an install.
pub fn ownership_tag(install_id: &str) -> String {
    format!("proxsync.{install_id}")
}

/// A new random uid (16 hex characters) from the system's random source.
pub fn new_uid() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // The OS random source failing is near impossible; fall back to time and pid, which
        // is still unique enough for a marker (it only has to differ between specs).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = ((t as u64) ^ u64::from(std::process::id())).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips_through_the_description() {
        let m = Marker {
            install: "main".into(),
            spec: "web-01".into(),
            uid: new_uid(),
        };
        assert_eq!(m.uid.len(), 16);
        assert_eq!(Marker::parse(&m.description()), Some(m.clone()));
        // A human added notes around it in the web UI.
        let edited = format!("Owner: team-web\n\n{}\nmore notes", m.description());
        assert_eq!(Marker::parse(&edited), Some(m));
    }

    #[test]
    fn no_marker_no_ownership() {
        assert_eq!(Marker::parse("a VM someone made by hand"), None);
        assert_eq!(Marker::parse("proxsync-id: install=main spec=web-01"), None);
        assert_eq!(Marker::parse("proxsync-id: install= spec=a uid=b"), None);
        assert_ne!(new_uid(), new_uid());
    }
}
