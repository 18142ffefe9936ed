//! A VM's identity: is the VM at a VMID this install's, and which spec's?
//!
//! The evidence is the marker in the VM's description (`ownership`): its MAC over install,
//! spec, uid and VMID verifies with the marker key, or the state database vouches for the VM
//! (the record of the spec names this VMID and the marker's uid: a marker from before signing,
//! or signed with a lost key). A marker typed by hand fails on its MAC; one copied with the VM
//! (a clone in the web UI) fails on its VMID; neither is vouched for by a record.
//!
//! [`verify`] is the one marker check: every decision about a VM's identity goes through it,
//! and its answer, a [`VerifiedMarker`], is what the permits of [`super::permit`] are made from.
//! It is made only here, from a config read on a site whose cluster was checked
//! ([`super::site::SiteChecked`]).

use super::site::SiteChecked;
use crate::guest::{GuestId, GuestKind};
use crate::ownership::{Marker, MarkerKey};

/// Why a marker is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Its MAC verifies for the VMID with the marker key.
    Mac,
    /// The state database vouches for it: the spec's record names this VMID and the marker's
    /// uid.
    Record,
    /// The guest carries no marker line at all (a person edited its notes), and its own
    /// identity (a VM's smbios1 uuid, a container's first NIC's MAC) is the one the spec's
    /// record keeps for this VMID: the marker is the record's, written back by converge.
    Identity,
}

/// A VM's marker, verified for its VMID on a checked site. Made only by [`verify`] (a marker of
/// this install) and [`verify_handed`] (a marker of another install, signed with a shared key).
#[derive(Debug, PartialEq, Eq)]
pub struct VerifiedMarker {
    site: String,
    /// What the VMID holds, as the caller read it: only the messages about it use it.
    kind: GuestKind,
    vmid: u32,
    marker: Marker,
    trust: Trust,
    /// The marker names this install (`verify`), not another one (`verify_handed`).
    own: bool,
}

impl VerifiedMarker {
    /// The site the VM is on.
    pub(crate) fn site(&self) -> &str {
        &self.site
    }

    /// The VMID the marker verified for.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    /// What the VMID holds (a VM or a container), for the messages that name it.
    pub(crate) fn kind(&self) -> GuestKind {
        self.kind
    }

    /// The install the marker names.
    pub fn install(&self) -> &str {
        &self.marker.install
    }

    /// The spec the marker names.
    pub fn spec(&self) -> &str {
        &self.marker.spec
    }

    /// The uid the marker carries: the unique id of the spec's guest.
    pub fn uid(&self) -> &str {
        &self.marker.uid
    }

    pub(crate) fn marker(&self) -> &Marker {
        &self.marker
    }

    /// Why the marker is trusted.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// The marker names this install (else another install handed the VM over).
    pub(crate) fn is_own(&self) -> bool {
        self.own
    }

    /// The marker is the signed one the VM should carry (its MAC verifies for this VMID); else
    /// converge writes it signed.
    pub fn signed(&self) -> bool {
        self.trust == Trust::Mac
    }
}

/// A guest not shown to be this install's (or the spec's): which, of which kind, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOurs {
    /// What the VMID holds, for the words.
    pub kind: GuestKind,
    /// The guest.
    pub vmid: u32,
    /// Why.
    pub why: NotShown,
}

/// Why a guest's marker (or its identity) does not show it is this install's or the spec's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotShown {
    /// Its description carries no marker.
    NoMarker,
    /// Its marker names another install.
    OtherInstall {
        /// The install the marker names.
        install: String,
        /// This install.
        ours: String,
    },
    /// Its marker names another spec.
    OtherSpec {
        /// The spec the marker names.
        carries: String,
        /// The spec asked for.
        wanted: String,
    },
    /// Its marker does not verify and no record vouches for it.
    Unverified,
    /// Not a marker of the spec from another install.
    NotHanded {
        /// The spec the marker names.
        carries: String,
        /// The install the marker names.
        install: String,
        /// The spec asked for.
        wanted: String,
    },
    /// Another install's marker that does not verify with this install's key.
    HandedUnverified {
        /// The install the marker names.
        install: String,
    },
    /// Its notes hold a marker line that is not the spec's.
    ForeignLine {
        /// The spec.
        spec: String,
    },
    /// Neither a marker line nor the install's tag.
    NoTag {
        /// The install's ownership tag.
        tag: String,
    },
    /// No marker line, and no identity recorded to recognise it by.
    NoIdentityRecorded {
        /// The spec.
        spec: String,
    },
    /// No marker line, and its config shows no identity to compare.
    NoIdentityShown {
        /// The identity recorded.
        want: GuestId,
    },
    /// No marker line, and its identity is not the recorded one.
    IdentityDiffers {
        /// The identity its config shows.
        found: GuestId,
        /// The identity recorded.
        want: GuestId,
    },
}

/// Whether `description`, the config of guest `vmid` (a `kind`) on `site`, carries this
/// install's marker (and, when `spec` is given, that spec's) and the marker is to be trusted: its
/// MAC verifies for this VMID, or the state database vouches for the VM (`vouched_uid`: the uid
/// recorded for the spec whose record names this VMID). A marker typed by hand or copied from
/// another VM is never trusted. `kind` only words the messages: the decision is the same.
// Many arguments because: the guest read (site, kind, VMID, description), the key and install
// it is judged with, and what the caller expects (spec, record).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    site: &SiteChecked,
    key: &MarkerKey,
    install_id: &str,
    kind: GuestKind,
    vmid: u32,
    description: Option<&str>,
    spec: Option<&str>,
    vouched_uid: Option<&str>,
) -> Result<VerifiedMarker, NotOurs> {
    let marker = parsed(kind, vmid, description)?;
    let not_ours = |why| NotOurs { kind, vmid, why };
    if marker.install != install_id {
        return Err(not_ours(NotShown::OtherInstall {
            install: marker.install.to_string(),
            ours: install_id.to_string(),
        }));
    }
    if let Some(spec) = spec.filter(|s| *s != marker.spec) {
        return Err(not_ours(NotShown::OtherSpec {
            carries: marker.spec.to_string(),
            wanted: spec.to_string(),
        }));
    }
    let trust = if marker.verifies(key, vmid) {
        Trust::Mac
    } else if vouched_uid.is_some_and(|uid| !uid.is_empty() && uid == marker.uid) {
        Trust::Record
    } else {
        return Err(not_ours(NotShown::Unverified));
    };
    Ok(VerifiedMarker {
        site: site.site().to_string(),
        kind,
        vmid,
        marker,
        trust,
        own: true,
    })
}

/// Whether `description`, the config of guest `vmid` (a `kind`) on `site`, carries the marker
/// of spec `spec` for another install, whose MAC verifies with this install's key (installs that
/// hand VMs over share one). Only a MAC counts: no record of this install vouches for another's
/// VM.
pub fn verify_handed(
    site: &SiteChecked,
    key: &MarkerKey,
    install_id: &str,
    kind: GuestKind,
    vmid: u32,
    description: Option<&str>,
    spec: &str,
) -> Result<VerifiedMarker, NotOurs> {
    let marker = parsed(kind, vmid, description)?;
    let not_ours = |why| NotOurs { kind, vmid, why };
    if marker.spec != spec || marker.install == install_id {
        return Err(not_ours(NotShown::NotHanded {
            carries: marker.spec.to_string(),
            install: marker.install.to_string(),
            wanted: spec.to_string(),
        }));
    }
    if !marker.verifies(key, vmid) {
        let install = marker.install;
        return Err(not_ours(NotShown::HandedUnverified {
            install: install.to_string(),
        }));
    }
    Ok(VerifiedMarker {
        site: site.site().to_string(),
        kind,
        vmid,
        marker,
        trust: Trust::Mac,
        own: false,
    })
}

/// What a record knows of the guest it names, for [`verify_by_identity`].
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    /// The spec whose record it is.
    pub spec: &'a str,
    /// The record's uid: the marker written back carries it.
    pub uid: &'a str,
    /// The guest's own identity as the record keeps it for this VMID.
    pub identity: Option<&'a GuestId>,
}

/// Whether the guest `vmid` (a `kind`) on `site`, which the spec's record names, is still the
/// spec's although its description carries no marker line (a person replaced the notes): it
/// still carries this install's ownership tag (a guest without both is never taken back), and
/// its own identity as its config shows it now (`found`) is the one the record keeps for this
/// VMID (`recorded`). Then the record's marker (this install, the spec, the record's uid)
/// stands for it, and converge writes it back below the person's text; a delete or release
/// waits for the marker itself ([`super::permit::remove`]). A description with any marker
/// line (another spec's, another install's, one that does not verify) is not judged here: the
/// marker check ([`verify`]) refused it, and a person decides. `notes`: the config's
/// description and tags.
// Many arguments because: the guest read (site, kind, VMID, description, identity), the
// install, and what the record knows.
#[allow(clippy::too_many_arguments)]
pub fn verify_by_identity(
    site: &SiteChecked,
    install_id: &str,
    kind: GuestKind,
    vmid: u32,
    (description, tags): (Option<&str>, &[String]),
    found: Option<&GuestId>,
    recorded: Recorded<'_>,
) -> Result<VerifiedMarker, NotOurs> {
    let not_ours = |why| NotOurs { kind, vmid, why };
    let spec = recorded.spec.to_string();
    if description.is_some_and(|d| d.contains(crate::ownership::MARKER_PREFIX)) {
        return Err(not_ours(NotShown::ForeignLine { spec }));
    }
    let tag = crate::ownership::ownership_tag(install_id);
    if !tags.contains(&tag) {
        return Err(not_ours(NotShown::NoTag { tag }));
    }
    let (want, found) = match (recorded.identity, found) {
        (Some(want), Some(found)) => (want, found),
        (None, _) => return Err(not_ours(NotShown::NoIdentityRecorded { spec })),
        (Some(want), None) => {
            let want = want.clone();
            return Err(not_ours(NotShown::NoIdentityShown { want }));
        }
    };
    if want.kind() != kind || want != found || recorded.uid.is_empty() {
        return Err(not_ours(NotShown::IdentityDiffers {
            found: found.clone(),
            want: want.clone(),
        }));
    }
    Ok(VerifiedMarker {
        site: site.site().to_string(),
        kind,
        vmid,
        marker: Marker {
            install: install_id.into(),
            spec: recorded.spec.into(),
            uid: recorded.uid.into(),
            mac: None,
        },
        trust: Trust::Identity,
        own: true,
    })
}

fn parsed(kind: GuestKind, vmid: u32, description: Option<&str>) -> Result<Marker, NotOurs> {
    description.and_then(Marker::parse).ok_or(NotOurs {
        kind,
        vmid,
        why: NotShown::NoMarker,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gate::site::tests::checked;

    pub(crate) fn key() -> MarkerKey {
        MarkerKey::from_bytes([7; 32])
    }

    fn signed(install: &str, spec: &str, uid: &str, vmid: u32) -> String {
        Marker::signed(&key(), install, spec, uid, vmid).description()
    }

    fn ask(description: &str, vmid: u32, spec: Option<&str>, vouched: Option<&str>) -> String {
        match verify(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Qemu,
            vmid,
            Some(description),
            spec,
            vouched,
        ) {
            Ok(v) => format!("{:?} {} {}", v.trust(), v.spec(), v.uid()),
            // What the user reads: the refusal's Display, not its field.
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_signed_marker_of_this_install_verifies_for_its_vmid() {
        let d = signed("main", "web", "u1", 100);
        assert_eq!(ask(&d, 100, Some("web"), None), "Mac web u1");
        assert_eq!(ask(&d, 100, None, None), "Mac web u1");
        let v = verify(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Qemu,
            100,
            Some(&d),
            None,
            None,
        )
        .unwrap();
        assert_eq!((v.site(), v.vmid(), v.install()), ("lab", 100, "main"));
        assert!(v.signed());
        // Human notes around it change nothing.
        let noted = format!("owner: ops\n{d}\nmore");
        assert_eq!(ask(&noted, 100, Some("web"), None), "Mac web u1");
    }

    #[test]
    fn a_copied_typed_or_foreign_marker_is_not_ours() {
        // Copied with the VM to another VMID (a clone in the web UI).
        let d = signed("main", "web", "u1", 100);
        assert!(ask(&d, 101, Some("web"), None).contains("does not verify"));
        // A marker of VM 100 is no evidence for VM 101 even where a record names uid u1 for
        // another VMID: only the caller's record of *this* VMID vouches.
        assert!(ask(&d, 101, Some("web"), Some("u2")).contains("does not verify"));
        // Typed by hand, or with a made-up MAC.
        let typed = "proxsync-id: install=main spec=web uid=u1";
        assert!(ask(typed, 100, Some("web"), None).contains("does not verify"));
        let guessed = format!("{typed} mac={}", "0".repeat(32));
        assert!(ask(&guessed, 100, Some("web"), None).contains("does not verify"));
        // Another spec, another install, none at all.
        assert!(ask(&d, 100, Some("db"), None).contains("spec web, not of db"));
        let theirs = signed("other", "web", "u1", 100);
        assert!(ask(&theirs, 100, None, None).contains("install other"));
        assert!(ask("made by hand", 100, None, None).contains("no proxsync marker"));
        assert!(
            verify(
                &checked("lab"),
                &key(),
                "main",
                GuestKind::Qemu,
                100,
                None,
                None,
                None
            )
            .unwrap_err()
            .to_string()
            .contains("no proxsync marker")
        );
        // Signed with another key (a lost key, another install's key).
        let other_key = Marker::signed(&MarkerKey::from_bytes([8; 32]), "main", "web", "u1", 100);
        assert!(ask(&other_key.description(), 100, None, None).contains("does not verify"));
    }

    #[test]
    fn the_record_vouches_only_for_its_uid() {
        // A marker from before signing, or signed with a lost key: the record vouches.
        let old = "proxsync-id: install=main spec=web uid=u1";
        assert_eq!(ask(old, 100, Some("web"), Some("u1")), "Record web u1");
        assert!(ask(old, 100, Some("web"), Some("u2")).contains("does not verify"));
        assert!(ask(old, 100, Some("web"), Some("")).contains("does not verify"));
        let v = verify(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Qemu,
            100,
            Some(old),
            None,
            Some("u1"),
        )
        .unwrap();
        assert!(!v.signed());
    }

    #[test]
    fn a_containers_refusals_name_the_container() {
        let lxc = |vmid: u32, description: Option<&str>, spec: Option<&str>| {
            let site = checked("lab");
            let k = key();
            verify(
                &site,
                &k,
                "main",
                GuestKind::Lxc,
                vmid,
                description,
                spec,
                None,
            )
            .unwrap_err()
            .to_string()
        };
        let d = signed("main", "dns", "u1", 105);
        assert_eq!(
            lxc(106, Some(&d), None),
            "container 106's marker does not verify (copied from another container, typed by \
             hand, or signed with a lost marker key) and no record vouches for it"
        );
        assert_eq!(
            lxc(105, Some(&d), Some("web")),
            "container 105 carries the marker of spec dns, not of web"
        );
        assert_eq!(
            lxc(105, None, None),
            "container 105 carries no proxsync marker in its description"
        );
        let theirs = signed("other", "dns", "u1", 105);
        let v = verify_handed(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Lxc,
            105,
            Some(&theirs),
            "dns",
        )
        .unwrap();
        assert_eq!(
            (v.kind(), v.kind().named(v.vmid())),
            (GuestKind::Lxc, "container 105".to_string())
        );
        let why = verify_handed(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Lxc,
            105,
            Some(&theirs),
            "web",
        )
        .unwrap_err();
        assert!(
            why.to_string()
                .starts_with("container 105 carries the marker of spec dns of install other"),
            "{why}"
        );
    }

    #[test]
    fn a_handed_over_marker_verifies_only_by_its_mac() {
        let theirs = signed("other", "web", "u1", 100);
        let v = verify_handed(
            &checked("lab"),
            &key(),
            "main",
            GuestKind::Qemu,
            100,
            Some(&theirs),
            "web",
        )
        .unwrap();
        assert_eq!((v.install(), v.spec(), v.uid()), ("other", "web", "u1"));
        // Copied to another VMID, another spec, or this install's own marker: refused.
        assert!(
            verify_handed(
                &checked("lab"),
                &key(),
                "main",
                GuestKind::Qemu,
                101,
                Some(&theirs),
                "web"
            )
            .is_err()
        );
        assert!(
            verify_handed(
                &checked("lab"),
                &key(),
                "main",
                GuestKind::Qemu,
                100,
                Some(&theirs),
                "db"
            )
            .is_err()
        );
        let ours = signed("main", "web", "u1", 100);
        assert!(
            verify_handed(
                &checked("lab"),
                &key(),
                "main",
                GuestKind::Qemu,
                100,
                Some(&ours),
                "web"
            )
            .is_err()
        );
    }

    /// A guest whose notes lost the marker line is the spec's only with this install's tag and
    /// the recorded identity of its kind, read now, and a uid to write back; any marker line
    /// (another spec's, a typed one) is for a person.
    #[test]
    fn identity_stands_for_a_missing_marker_only_with_the_tag_and_the_recorded_id() {
        let uuid = GuestId::uuid("3f2504e0-4f89-11d3-9a0c-0305e82c3301").unwrap();
        let other = GuestId::uuid("0b4a5d3e-1111-4222-8333-944455556666").unwrap();
        let mac = GuestId::hwaddr("BC:24:11:5E:0A:01").unwrap();
        let tagged = vec!["proxsync.main".to_string(), "web".to_string()];
        let ask = |description: Option<&str>,
                   tags: &[String],
                   found: Option<&GuestId>,
                   recorded: Option<&GuestId>,
                   uid: &str| {
            verify_by_identity(
                &checked("lab"),
                "main",
                GuestKind::Qemu,
                100,
                (description, tags),
                found,
                Recorded {
                    spec: "web",
                    uid,
                    identity: recorded,
                },
            )
        };
        let v = ask(Some("Owner: ops"), &tagged, Some(&uuid), Some(&uuid), "u1").unwrap();
        assert_eq!(
            (v.trust(), v.spec(), v.uid(), v.install()),
            (Trust::Identity, "web", "u1", "main")
        );
        assert!(!v.signed(), "converge writes the line back, signed");
        assert_eq!(v.vmid(), 100);
        assert!(ask(None, &tagged, Some(&uuid), Some(&uuid), "u1").is_ok());

        let refused = [
            ask(
                Some("proxsync-id: install=main spec=db uid=u9"),
                &tagged,
                Some(&uuid),
                Some(&uuid),
                "u1",
            ),
            ask(
                Some("Owner: ops"),
                &["web".to_string()],
                Some(&uuid),
                Some(&uuid),
                "u1",
            ),
            ask(Some("Owner: ops"), &tagged, Some(&uuid), None, "u1"),
            ask(Some("Owner: ops"), &tagged, None, Some(&uuid), "u1"),
            ask(Some("Owner: ops"), &tagged, Some(&other), Some(&uuid), "u1"),
            ask(Some("Owner: ops"), &tagged, Some(&mac), Some(&mac), "u1"),
            ask(Some("Owner: ops"), &tagged, Some(&uuid), Some(&uuid), ""),
        ];
        for (i, r) in refused.iter().enumerate() {
            assert!(r.is_err(), "case {i}: {r:?}");
        }
        assert!(
            refused[1]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("nor the tag proxsync.main"),
            "{:?}",
            refused[1]
        );
        assert!(
            refused[4]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("is not the recorded"),
            "{:?}",
            refused[4]
        );
    }
}
