//! How a VM is marked as proxsync's: the ownership tag `proxsync.<install_id>` (visible in
//! the one listing read per cycle) and an identity marker in the VM's description (set at
//! creation, since a clone cannot set tags):
//! `proxsync-id: install=<id> spec=<name> uid=<uid> mac=<mac>`.
//!
//! The marker is signed: `mac` is an HMAC-SHA256 (first 16 bytes, hex) over the install, the
//! spec, the uid and the VM's VMID, with a per-install secret kept in the state directory
//! ([`MarkerKey`], `marker.key`). A marker typed by hand fails on its MAC; a marker copied with
//! the VM (a clone in the web UI copies the description) fails on its VMID. proxsync never
//! adopts, changes or deletes a VM on a marker that does not verify; such a VM is reported.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The marker line's prefix.
pub const MARKER_PREFIX: &str = "proxsync-id:";

/// The file of the marker secret inside `state_dir`.
pub(crate) const KEY_FILE: &str = "marker.key";

/// The identity a VM's description carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Marker {
    /// The `install_id` of the install that owns the VM.
    pub install: compact_str::CompactString,
    /// The `metadata.name` of the spec the VM is for.
    pub spec: compact_str::CompactString,
    /// A random id (16 hex characters, [`new_uid`]) given the VM when proxsync made or adopted
    /// it; the spec's record keeps it too.
    pub uid: compact_str::CompactString,
    /// The signature over (install, spec, uid, VMID); `None` in markers written by releases
    /// before signing (trusted only where the state database vouches for the VM).
    pub mac: Option<String>,
}

impl Marker {
    /// A marker signed for VM `vmid`.
    pub fn signed(key: &MarkerKey, install: &str, spec: &str, uid: &str, vmid: u32) -> Marker {
        Marker {
            install: install.into(),
            spec: spec.into(),
            uid: uid.into(),
            mac: Some(key.mac(install, spec, uid, vmid)),
        }
    }

    /// Whether the MAC verifies for VM `vmid` with this install's key.
    pub fn verifies(&self, key: &MarkerKey, vmid: u32) -> bool {
        self.mac
            .as_deref()
            .is_some_and(|mac| same_mac(mac, &key.mac(&self.install, &self.spec, &self.uid, vmid)))
    }

    /// The marker line.
    pub(crate) fn line(&self) -> String {
        let mut line = format!(
            "{MARKER_PREFIX} install={} spec={} uid={}",
            self.install, self.spec, self.uid
        );
        if let Some(mac) = &self.mac {
            line.push_str(" mac=");
            line.push_str(mac);
        }
        line
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

    /// `description` with its marker line replaced by this marker's (added when it has none),
    /// keeping every other line a human wrote.
    pub fn replace_in(&self, description: &str) -> String {
        let kept: Vec<&str> = description
            .lines()
            .filter(|l| !l.contains(MARKER_PREFIX))
            .collect();
        if kept.iter().all(|l| l.trim().is_empty()) {
            return self.description();
        }
        format!("{}\n{}", kept.join("\n").trim_end(), self.line())
    }

    /// Finds the marker in a description (PVE may have re-encoded line breaks; any line or
    /// the text after the prefix is accepted). `None` if absent or malformed.
    pub fn parse(description: &str) -> Option<Marker> {
        let start = description.find(MARKER_PREFIX)? + MARKER_PREFIX.len();
        let rest = description[start..].lines().next()?;
        let mut install = None;
        let mut spec = None;
        let mut uid = None;
        let mut mac = None;
        for part in rest.split_whitespace() {
            match part.split_once('=') {
                Some(("install", v)) => install = Some(v),
                Some(("spec", v)) => spec = Some(v),
                Some(("uid", v)) => uid = Some(v),
                Some(("mac", v)) => mac = Some(v),
                _ => {}
            }
        }
        let m = Marker {
            install: install?.into(),
            spec: spec?.into(),
            uid: uid?.into(),
            mac: mac.filter(|m| !m.is_empty()).map(str::to_string),
        };
        (!m.install.is_empty() && !m.spec.is_empty() && !m.uid.is_empty()).then_some(m)
    }
}

/// The secret that signs markers. Kept in `<state_dir>/marker.key` (mode 0600), or in the
/// file `marker_key_file` names, which several installs may share: installs sharing a key
/// trust each other's markers, which a hand-over between shards needs (the new owner verifies
/// the old owner's marker before it adopts). The operator backs it up with the rest of `/etc`
/// and `/var/lib/proxsync`. Lost, the VMs' markers no longer verify: they are reported,
/// nothing is deleted, and they are taken back with `proxsync adopt`.
#[derive(Clone)]
pub struct MarkerKey([u8; 32]);

impl std::fmt::Debug for MarkerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MarkerKey(***)")
    }
}

impl MarkerKey {
    pub(crate) fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(KEY_FILE)
    }

    /// Reads the key in `path`, or makes one there (random, mode 0600) when the file does not
    /// exist. Made with `create_new`, so two installs starting at once on one shared key file
    /// never overwrite each other's key: the second reads the first's.
    pub fn load_or_create_file(path: &Path) -> Result<MarkerKey, String> {
        if let Some(key) = Self::load_file(path)? {
            return Ok(key);
        }
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| "the system's random source failed".to_string())?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::util::state_dir::create_state_dir(dir)
                .map_err(|e| format!("{}: cannot create the directory: {e}", dir.display()))?;
        }
        // Written whole to a file of our own, then linked into place: the link fails if
        // another install sharing the file made it first (then theirs is used), and nobody
        // ever reads a half-written key.
        let staging = path.with_file_name(format!(
            ".{}.{}",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(KEY_FILE),
            std::process::id()
        ));
        let written = write_private(&staging, &bytes)
            .map_err(|e| format!("{}: cannot write the marker key: {e}", path.display()));
        let linked = written.and_then(|()| match std::fs::hard_link(&staging, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(format!(
                "{}: cannot create the marker key: {e}",
                path.display()
            )),
        });
        let _ = std::fs::remove_file(&staging);
        if !linked? {
            return Self::load_file(path)?.ok_or_else(|| {
                format!(
                    "{}: the marker key vanished while being read",
                    path.display()
                )
            });
        }
        tracing::warn!(path = %path.display(), "made a new marker key; back it up with the state directory");
        Ok(MarkerKey(bytes))
    }

    /// Reads the key; `Ok(None)` when the file does not exist. Never shows its content.
    pub fn load(state_dir: &Path) -> Result<Option<MarkerKey>, String> {
        Self::load_file(&Self::path(state_dir))
    }

    /// Reads the key in `path`; `Ok(None)` when the file does not exist. Never shows its
    /// content.
    pub fn load_file(path: &Path) -> Result<Option<MarkerKey>, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "{}: cannot read the marker key: {e}",
                    path.display()
                ));
            }
        };
        let hex = text.trim();
        let bad = || {
            format!(
                "{}: not a marker key (expected 64 hexadecimal characters); restore it from your \
                 backup",
                path.display()
            )
        };
        if hex.len() != 64 {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
                .map_err(|_| bad())?;
        }
        Ok(Some(MarkerKey(bytes)))
    }

    /// A key from bytes (tests).
    pub fn from_bytes(bytes: [u8; 32]) -> MarkerKey {
        MarkerKey(bytes)
    }

    /// HMAC-SHA256 over the fields, NUL-separated, first 16 bytes as hex.
    pub(crate) fn mac(&self, install: &str, spec: &str, uid: &str, vmid: u32) -> String {
        self.sign(&format!(
            "proxsync-marker-v1\0{install}\0{spec}\0{uid}\0{vmid}"
        ))
    }

    /// HMAC-SHA256 over `message`, first 16 bytes as hex.
    fn sign(&self, message: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0);
        let tag = ring::hmac::sign(&key, message.as_bytes());
        tag.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Whether two MACs are equal, in constant time: the comparison does not tell how much of a
/// forged MAC is right.
fn same_mac(got: &str, want: &str) -> bool {
    got.len() == want.len()
        && got
            .bytes()
            .zip(want.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The signed part of the line an exercise (`doctor --exercise`, the conformance suite)
/// writes into the description of each guest it makes, after its pool's sentence:
/// `run=<id> started=<unix seconds> mac=<hex>`. The MAC is an HMAC with the install's
/// [`MarkerKey`] over the pool, the run, its start, the guest's VMID and its identity
/// (`guest::GuestId`; none for a clone, whose identity PVE picks while it copies). A line
/// typed by hand fails on its MAC; one copied onto another guest fails on its VMID or
/// identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExerciseLine {
    /// The run that made the guest (16 hex digits).
    pub run: String,
    /// When that run began, in seconds since the epoch.
    pub started: u64,
    /// HMAC-SHA256 over the pool, run, start, VMID and identity (first 16 bytes, hex).
    pub mac: String,
}

impl ExerciseLine {
    /// The line for guest `vmid` (identity `identity`) of run `run`.
    pub fn signed(
        key: &MarkerKey,
        pool: &str,
        (run, started): (&str, u64),
        vmid: u32,
        identity: Option<&crate::guest::GuestId>,
    ) -> ExerciseLine {
        ExerciseLine {
            run: run.to_string(),
            started,
            mac: key.sign(&Self::message(pool, run, started, vmid, identity)),
        }
    }

    fn message(
        pool: &str,
        run: &str,
        started: u64,
        vmid: u32,
        identity: Option<&crate::guest::GuestId>,
    ) -> String {
        let identity = identity.map(ToString::to_string).unwrap_or_default();
        format!("proxsync-exercise-v1\0{pool}\0{run}\0{started}\0{vmid}\0{identity}")
    }

    /// The whole line: `head` (the pool's sentence), then the signed fields.
    pub fn line(&self, head: &str) -> String {
        format!(
            "{head} run={} started={} mac={}",
            self.run, self.started, self.mac
        )
    }

    /// The first line of `description` that is `head` and the signed fields; `None` if there
    /// is none or it is malformed.
    pub fn parse(description: &str, head: &str) -> Option<ExerciseLine> {
        let head = head.trim();
        let rest = description
            .lines()
            .find_map(|l| l.trim().strip_prefix(head)?.strip_prefix(' '))?;
        let (mut run, mut started, mut mac) = (None, None, None);
        for part in rest.split_whitespace() {
            match part.split_once('=') {
                Some(("run", v)) => run = Some(v),
                Some(("started", v)) => started = v.parse::<u64>().ok(),
                Some(("mac", v)) => mac = Some(v),
                _ => return None,
            }
        }
        let hex = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_hexdigit());
        let (run, mac) = (run.filter(|r| hex(r))?, mac.filter(|m| hex(m))?);
        Some(ExerciseLine {
            run: run.to_string(),
            started: started?,
            mac: mac.to_string(),
        })
    }

    /// Whether the MAC verifies for guest `vmid` of `pool` with identity `identity` (none: a
    /// clone's line, signed before PVE picked its identity).
    pub fn verifies(
        &self,
        key: &MarkerKey,
        pool: &str,
        vmid: u32,
        identity: Option<&crate::guest::GuestId>,
    ) -> bool {
        let message = Self::message(pool, &self.run, self.started, vmid, identity);
        same_mac(&self.mac, &key.sign(&message))
    }
}

/// Writes `bytes` as hex to a new file `path`, mode 0600, synced.
fn write_private(path: &Path, bytes: &[u8; 32]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = options.open(path)?;
    file.write_all(format!("{hex}\n").as_bytes())?;
    file.sync_all()
}

/// What an ownership tag starts with; the install's id follows.
pub const OWNERSHIP_TAG_PREFIX: &str = "proxsync.";

/// The ownership tag of an install.
pub fn ownership_tag(install_id: &str) -> String {
    format!("{OWNERSHIP_TAG_PREFIX}{install_id}")
}

/// Whether `tag` is the ownership tag of `install_id` (as [`ownership_tag`] writes it), with
/// no string made.
pub fn is_ownership_tag_of(tag: &str, install_id: &str) -> bool {
    tag.strip_prefix(OWNERSHIP_TAG_PREFIX) == Some(install_id)
}

/// A new random uid (16 hex characters) from the system's random source.
pub fn new_uid() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // The OS random source failing is near impossible; fall back to time and pid, which
        // is still unique enough for a marker (it only has to differ between specs).
        let t = crate::util::clock::system_now()
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
    fn an_ownership_tag_is_recognised_as_written_and_no_other() {
        assert!(is_ownership_tag_of(&ownership_tag("site-a"), "site-a"));
        for (tag, id) in [
            ("proxsync.site-ab", "site-a"),
            ("proxsync.site-a", "site-ab"),
            ("proxsync.", "site-a"),
            ("site-a", "site-a"),
            ("xproxsync.site-a", "site-a"),
            ("proxsync-site-a", "site-a"),
        ] {
            assert!(!is_ownership_tag_of(tag, id), "{tag} is not {id}'s tag");
        }
    }

    fn key() -> MarkerKey {
        MarkerKey::from_bytes([7; 32])
    }

    /// The marker cache holds one marker per guest between cycles: its install id, spec name
    /// and uid are held inline (issue 47), where each `String` took a heap block.
    #[test]
    fn a_parsed_markers_short_strings_are_held_inline() {
        let signed = Marker::signed(&key(), "site-a", "web-01", &new_uid(), 100);
        let m = Marker::parse(&format!("notes\n{}\n", signed.line())).expect("a marker");
        assert_eq!(m, signed);
        for (what, text) in [("install", &m.install), ("spec", &m.spec), ("uid", &m.uid)] {
            assert!(!text.is_heap_allocated(), "{what} {text:?} is on the heap");
        }
    }

    #[test]
    fn an_exercise_line_verifies_only_for_its_guest_and_key() {
        use crate::guest::GuestId;
        let head = "proxsync-exercise: a throwaway guest";
        let id = GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301").unwrap();
        let other = GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3302").unwrap();
        let line = ExerciseLine::signed(&key(), "px", ("0a1b", 1_700_000_000), 120, Some(&id));
        let text = format!("notes\n{}\n", line.line(head));
        let parsed = ExerciseLine::parse(&text, head).unwrap();
        assert_eq!(parsed, line);
        assert!(parsed.verifies(&key(), "px", 120, Some(&id)));
        assert!(
            !parsed.verifies(&key(), "px", 121, Some(&id)),
            "another VMID"
        );
        assert!(
            !parsed.verifies(&key(), "px", 120, Some(&other)),
            "another guest"
        );
        assert!(!parsed.verifies(&key(), "px", 120, None), "no identity");
        assert!(
            !parsed.verifies(&key(), "py", 120, Some(&id)),
            "another pool"
        );
        let stranger = MarkerKey::from_bytes([8; 32]);
        assert!(
            !parsed.verifies(&stranger, "px", 120, Some(&id)),
            "another key"
        );
        // The unsigned sentence, a forged run or a line inside another proves nothing.
        assert_eq!(ExerciseLine::parse(head, head), None);
        let forged = text.replace("run=0a1b", "run=0a1c");
        assert!(!ExerciseLine::parse(&forged, head).unwrap().verifies(
            &key(),
            "px",
            120,
            Some(&id)
        ));
        assert_eq!(
            ExerciseLine::parse(&format!("x {}", line.line(head)), head),
            None
        );
        assert_eq!(
            ExerciseLine::parse(&format!("{} x=1", line.line(head)), head),
            None
        );
    }

    #[test]
    fn marker_round_trips_through_the_description() {
        let m = Marker::signed(&key(), "main", "web-01", &new_uid(), 105);
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

    #[test]
    fn a_typed_or_copied_marker_does_not_verify() {
        let k = key();
        let m = Marker::signed(&k, "main", "web", "0011223344556677", 105);
        assert!(m.verifies(&k, 105));
        // Copied with the VM to another VMID (a clone in the web UI).
        assert!(!m.verifies(&k, 106));
        // Typed by hand: no MAC, or a made-up one.
        let typed = Marker::parse("proxsync-id: install=main spec=web uid=forged").unwrap();
        assert!(!typed.verifies(&k, 105));
        let guessed = Marker {
            mac: Some("0".repeat(32)),
            ..m.clone()
        };
        assert!(!guessed.verifies(&k, 105));
        // Another install's key.
        assert!(!m.verifies(&MarkerKey::from_bytes([8; 32]), 105));
        // Another spec or uid under the same MAC.
        let moved = Marker {
            spec: "db".into(),
            ..m.clone()
        };
        assert!(!moved.verifies(&k, 105));
    }

    #[test]
    fn a_mac_verifies_only_whole_and_exact() {
        let k = key();
        let m = Marker::signed(&k, "main", "web", "0011223344556677", 105);
        let mac = m.mac.clone().unwrap();
        // Cut short: every character given is right, but it is not the MAC.
        let short = Marker {
            mac: Some(mac[..16].to_string()),
            ..m.clone()
        };
        assert!(!short.verifies(&k, 105));
        // Two characters wrong by the same bit: their differences must not cancel out.
        let flip = |c: u8| (c ^ 1) as char;
        let b = mac.as_bytes();
        let twice: String = [flip(b[0]), flip(b[1])]
            .into_iter()
            .chain(mac[2..].chars())
            .collect();
        let twice = Marker {
            mac: Some(twice),
            ..m.clone()
        };
        assert!(!twice.verifies(&k, 105));
    }

    #[test]
    fn a_marker_needs_every_field() {
        for text in [
            "proxsync-id: install=main spec= uid=0011223344556677",
            "proxsync-id: install=main spec=web uid=",
            "proxsync-id: install=main uid=0011223344556677",
        ] {
            assert_eq!(Marker::parse(text), None, "{text}");
        }
        let m = Marker::parse("proxsync-id: install=main spec=web uid=1 mac=").unwrap();
        assert_eq!(m.mac, None, "an empty mac is none");
    }

    #[test]
    fn an_unreadable_key_file_is_an_error_not_a_new_key() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the key should be: it cannot be read, and no key is made.
        std::fs::create_dir(MarkerKey::path(dir.path())).unwrap();
        let e = MarkerKey::load(dir.path()).unwrap_err();
        assert!(e.contains("cannot read the marker key"), "{e}");
        assert!(MarkerKey::load_or_create_file(&MarkerKey::path(dir.path())).is_err());
    }

    /// The key file appearing between the read and the link (another install sharing the file
    /// made it first) is theirs to keep: it is read, never replaced by this install's new key.
    /// A link that points nowhere stands in for it: it is absent to the read and present to
    /// the link.
    #[cfg(unix)]
    #[test]
    fn a_key_file_made_first_by_another_install_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.key");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        let e = MarkerKey::load_or_create_file(&path).unwrap_err();
        assert!(e.contains("vanished while being read"), "{e}");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert!(
            !dir.path().join("elsewhere").exists(),
            "nothing written through it"
        );
    }

    #[test]
    fn the_marker_line_is_replaced_and_notes_are_kept() {
        let k = key();
        let legacy = "Owner: team-web\nproxsync-id: install=main spec=web uid=0011223344556677";
        let m = Marker::signed(&k, "main", "web", "0011223344556677", 105);
        let next = m.replace_in(legacy);
        assert!(next.starts_with("Owner: team-web\n"), "{next}");
        assert_eq!(Marker::parse(&next), Some(m.clone()));
        assert_eq!(m.replace_in(""), m.description());
    }

    #[test]
    fn a_shared_key_file_is_made_once_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys").join("shared.key");
        let a = MarkerKey::load_or_create_file(&path).unwrap();
        // A second install pointing at the same file uses that key.
        let b = MarkerKey::load_or_create_file(&path).unwrap();
        assert_eq!(a.mac("i", "s", "u", 1), b.mac("i", "s", "u", 1));
        let names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["shared.key"], "no staging file is left");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn the_key_is_made_once_with_mode_0600_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let a = MarkerKey::load_or_create_file(&MarkerKey::path(dir.path())).unwrap();
        let b = MarkerKey::load_or_create_file(&MarkerKey::path(dir.path())).unwrap();
        assert_eq!(a.mac("i", "s", "u", 1), b.mac("i", "s", "u", 1));
        assert_eq!(format!("{a:?}"), "MarkerKey(***)");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(MarkerKey::path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(MarkerKey::path(dir.path()), "not hex").unwrap();
        let e = MarkerKey::load(dir.path()).unwrap_err();
        assert!(
            e.contains("not a marker key") && !e.contains("not hex"),
            "{e}"
        );
    }
}
