//! A rename of `metadata.name`: may a VM's marker be re-signed from spec `from` to spec `to`?
//!
//! The evidence is the marker the VM carries and, when the state database has one, the old
//! spec's record. The VM must carry this install's marker naming `from` with the old spec's uid
//! (the recorded one, or without a record the marker's own), trusted because its MAC verifies
//! for this VMID or because the record names this VMID and that uid. A marker that already
//! names `to` with that uid is a re-label whose answer was lost: only the record has to move.
//! And the VM must be on the site the new spec names: a rename never moves a VM between
//! clusters (the site-change rule applies instead, see `plan`).
//!
//! The planner asks with what the cycle's observation saw (its view of a VM the records know
//! carries the marker the record vouches for); `execute` asks again with a config it has just
//! read, right before it writes the marker.

use super::identity::VerifiedMarker;
use super::permit::{Act, MarkerId, Permit, own};
use crate::guest::GuestKind;
use crate::ownership::Marker;

/// What is known of the VM a rename would re-label.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// What the VMID holds (a VM or a container): only the messages use it.
    pub kind: GuestKind,
    /// The VMID the VM is at.
    pub vmid: u32,
    /// The site the VM is listed on.
    pub site: &'a str,
    /// The marker its config carries (`None`: none, or not read).
    pub marker: Option<&'a Marker>,
    /// The marker's MAC verifies for `vmid` with this install's key. (An observed view says so
    /// too for a VM a record vouches for; the record is then given as well.)
    pub mac_verifies: bool,
    /// The old spec's record, when the state database has one with a VM.
    pub record: Option<Recorded<'a>>,
}

/// The old spec's record: where its VM is and the uid its marker carries.
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    /// The site of the record's VM.
    pub site: &'a str,
    /// The VMID of the record's VM.
    pub vmid: u32,
    /// The uid the record holds.
    pub uid: &'a str,
}

/// A re-label the evidence allows, with the uid the new marker carries (the old spec's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relabel {
    /// The marker names the old spec: sign one for the new spec.
    Resign {
        /// The old spec's uid.
        uid: String,
    },
    /// The marker already names the new spec with the old spec's uid (the write was made, its
    /// answer lost): nothing to write, the record moves.
    Done {
        /// The old spec's uid, which the marker carries.
        uid: String,
    },
}

/// Why a VM's marker may not be re-signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The VM is the old spec's, but on another site than the new spec names. (`kind`: what
    /// it is, for the message.)
    OtherSite {
        /// A VM or a container.
        kind: GuestKind,
        /// The site the VM is on.
        vm_site: String,
        /// The site the new spec names.
        spec_site: String,
    },
    /// Nothing shows guest `vmid` (of `kind`) is the old spec's: what was found.
    NotShown {
        /// A VM or a container.
        kind: GuestKind,
        /// The guest's VMID.
        vmid: u32,
        /// What was found instead.
        why: Unshown,
    },
}

/// What showed a guest is not the old spec's, for a rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unshown {
    /// The spec names itself as the one it is renamed from.
    SelfRename {
        /// The spec.
        to: String,
    },
    /// The old spec's record names another guest or site.
    RecordElsewhere {
        /// The old spec.
        from: String,
        /// The VMID the record names.
        recorded_vmid: u32,
        /// The site the record names.
        recorded_site: String,
        /// The site the guest is listed on.
        site: String,
    },
    /// The guest carries no marker.
    NoMarker {
        /// The old spec.
        from: String,
    },
    /// Its marker is another install's.
    OtherInstall {
        /// The install the marker names.
        install: String,
        /// This install.
        ours: String,
    },
    /// Its marker names another spec than the old or the new one.
    OtherSpec {
        /// The spec the marker names.
        carries: String,
        /// The old spec.
        from: String,
    },
    /// Its marker's uid is not the old spec's recorded one: another guest.
    OtherUid {
        /// The uid the marker carries.
        carries: String,
        /// The old spec.
        from: String,
        /// The uid the record holds.
        recorded: String,
    },
    /// Its marker does not verify and no record vouches for it.
    Unverified {
        /// The old spec.
        from: String,
    },
    /// The gate does not let this install act on it at all.
    NotOurs(super::refusal::Refusal),
}

impl serde::Serialize for Refused {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// May the marker of the VM in `ev` be re-signed from spec `from` to spec `to`, whose site is
/// `to_site`? The identity is judged first, so `OtherSite` means the VM is `from`'s.
pub fn may_relabel(
    install_id: &str,
    from: &str,
    to: &str,
    to_site: &str,
    ev: &Evidence<'_>,
) -> Result<Relabel, Refused> {
    let (vmid, kind) = (ev.vmid, ev.kind);
    let not_shown = |why: Unshown| Err(Refused::NotShown { kind, vmid, why });
    if from == to {
        return not_shown(Unshown::SelfRename { to: to.into() });
    }
    if let Some(r) = ev.record
        && (r.site != ev.site || r.vmid != vmid)
    {
        return not_shown(Unshown::RecordElsewhere {
            from: from.into(),
            recorded_vmid: r.vmid,
            recorded_site: r.site.into(),
            site: ev.site.into(),
        });
    }
    let Some(m) = ev.marker else {
        return not_shown(Unshown::NoMarker { from: from.into() });
    };
    if m.install != install_id {
        return not_shown(Unshown::OtherInstall {
            install: m.install.to_string(),
            ours: install_id.into(),
        });
    }
    if m.spec != from && m.spec != to {
        return not_shown(Unshown::OtherSpec {
            carries: m.spec.to_string(),
            from: from.into(),
        });
    }
    let uid = ev.record.map(|r| r.uid).unwrap_or(m.uid.as_str());
    if m.uid != uid {
        return not_shown(Unshown::OtherUid {
            carries: m.uid.to_string(),
            from: from.into(),
            recorded: uid.into(),
        });
    }
    let vouched = ev.record.is_some_and(|r| !r.uid.is_empty());
    if !ev.mac_verifies && !vouched {
        return not_shown(Unshown::Unverified { from: from.into() });
    }
    if ev.site != to_site {
        return Err(Refused::OtherSite {
            kind,
            vm_site: ev.site.to_string(),
            spec_site: to_site.to_string(),
        });
    }
    let uid = uid.to_string();
    Ok(if m.spec == from {
        Relabel::Resign { uid }
    } else {
        Relabel::Done { uid }
    })
}

/// A re-label `execute` may carry out on the VM it has just read.
#[derive(Debug)]
pub enum Relabeled {
    /// Write the marker `Permit` allows: the new spec's, with the old spec's uid.
    Resign(Permit),
    /// The marker already names the new spec with that uid: only the record moves.
    Done {
        /// The old spec's uid, which the marker carries.
        uid: String,
    },
}

impl Relabeled {
    /// The uid the new spec's marker carries: the old spec's.
    pub fn uid(&self) -> &str {
        match self {
            Relabeled::Resign(p) => match p.act() {
                Act::Relabel { marker } => &marker.uid,
                _ => "",
            },
            Relabeled::Done { uid } => uid,
        }
    }
}

/// [`may_relabel`] asked of a VM whose marker `vm` verified (its MAC, or the old spec's record
/// `record` vouching for it) on a checked site, right before the write: the permit to write the
/// new spec's marker, with the old spec's uid.
pub fn relabel(
    vm: &VerifiedMarker,
    from: &str,
    to: &str,
    to_site: &str,
    record: Option<Recorded<'_>>,
) -> Result<Relabeled, Refused> {
    own(vm).map_err(|r| Refused::NotShown {
        kind: vm.kind(),
        vmid: vm.vmid(),
        why: Unshown::NotOurs(r),
    })?;
    let ev = Evidence {
        kind: vm.kind(),
        vmid: vm.vmid(),
        site: vm.site(),
        marker: Some(vm.marker()),
        mac_verifies: vm.signed(),
        record,
    };
    Ok(match may_relabel(vm.install(), from, to, to_site, &ev)? {
        Relabel::Resign { uid } => {
            let marker = MarkerId {
                install: vm.install().to_string(),
                spec: to.to_string(),
                uid,
            };
            Relabeled::Resign(Permit::new(vm.site(), vm.vmid(), Act::Relabel { marker }))
        }
        Relabel::Done { uid } => Relabeled::Done { uid },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(spec: &str, uid: &str) -> Marker {
        Marker {
            install: "main".into(),
            spec: spec.into(),
            uid: uid.into(),
            mac: Some("00".into()),
        }
    }

    fn ask(ev: &Evidence<'_>) -> Result<Relabel, Refused> {
        may_relabel("main", "old", "new", "lab", ev)
    }

    const RECORD: Recorded<'static> = Recorded {
        site: "lab",
        vmid: 100,
        uid: "u1",
    };

    fn evidence<'a>(
        m: &'a Marker,
        mac_verifies: bool,
        record: Option<Recorded<'static>>,
    ) -> Evidence<'a> {
        Evidence {
            kind: GuestKind::Qemu,
            vmid: 100,
            site: "lab",
            marker: Some(m),
            mac_verifies,
            record,
        }
    }

    fn refused(r: Result<Relabel, Refused>) -> String {
        match r {
            Err(r @ Refused::NotShown { .. }) => r.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn the_old_specs_verified_marker_is_resigned_with_its_uid() {
        let m = marker("old", "u1");
        let resign = Ok(Relabel::Resign { uid: "u1".into() });
        assert_eq!(ask(&evidence(&m, true, Some(RECORD))), resign);
        // After a lost database: the marker's own uid, its MAC the evidence.
        assert_eq!(ask(&evidence(&m, true, None)), resign);
        // A marker from before signing: the record vouches for it.
        assert_eq!(ask(&evidence(&m, false, Some(RECORD))), resign);
    }

    #[test]
    fn a_marker_already_naming_the_new_spec_with_the_uid_completes_the_rename() {
        let m = marker("new", "u1");
        let done = Ok(Relabel::Done { uid: "u1".into() });
        assert_eq!(ask(&evidence(&m, true, Some(RECORD))), done);
        assert_eq!(ask(&evidence(&m, false, Some(RECORD))), done);
        assert_eq!(ask(&evidence(&m, true, None)), done);
    }

    #[test]
    fn another_uid_spec_install_or_vm_is_refused() {
        let other_uid = marker("new", "u2");
        assert!(refused(ask(&evidence(&other_uid, true, Some(RECORD)))).contains("uid u2"));
        let other_spec = marker("db", "u1");
        assert!(refused(ask(&evidence(&other_spec, true, Some(RECORD)))).contains("spec db"));
        let mut theirs = marker("old", "u1");
        theirs.install = "other".into();
        assert!(refused(ask(&evidence(&theirs, true, Some(RECORD)))).contains("install other"));
        let m = marker("old", "u1");
        let elsewhere = Recorded {
            vmid: 101,
            ..RECORD
        };
        assert!(refused(ask(&evidence(&m, true, Some(elsewhere)))).contains("VM 101"));
        let none = Evidence {
            marker: None,
            ..evidence(&m, true, Some(RECORD))
        };
        assert!(refused(ask(&none)).contains("no proxsync marker"));
        assert!(
            refused(may_relabel(
                "main",
                "old",
                "old",
                "lab",
                &evidence(&m, true, None)
            ))
            .contains("itself")
        );
    }

    #[test]
    fn an_unverified_marker_without_a_record_is_refused() {
        let m = marker("old", "u1");
        assert!(refused(ask(&evidence(&m, false, None))).contains("does not verify"));
        let blank = Recorded { uid: "", ..RECORD };
        let m_blank = marker("old", "");
        // A record without a uid vouches for nothing.
        assert!(ask(&evidence(&m_blank, false, Some(blank))).is_err());
    }

    #[test]
    fn the_old_specs_vm_on_another_site_is_never_relabelled() {
        let m = marker("old", "u1");
        let r = may_relabel(
            "main",
            "old",
            "new",
            "eu",
            &evidence(&m, true, Some(RECORD)),
        );
        assert_eq!(
            r,
            Err(Refused::OtherSite {
                kind: GuestKind::Qemu,
                vm_site: "lab".into(),
                spec_site: "eu".into()
            })
        );
        // Identity first: a VM that is not the old spec's is NotShown, wherever it is.
        let other = marker("db", "u1");
        let r = may_relabel("main", "old", "new", "eu", &evidence(&other, true, None));
        assert!(matches!(r, Err(Refused::NotShown { .. })), "{r:?}");
    }

    /// A container's refusals name it as one; the decisions are a VM's.
    #[test]
    fn a_containers_refusals_say_container() {
        let m = marker("old", "u1");
        let ct = |m, record| Evidence {
            kind: GuestKind::Lxc,
            vmid: 100,
            site: "lab",
            marker: m,
            mac_verifies: false,
            record,
        };
        assert_eq!(
            refused(ask(&ct(None, None))),
            "container 100 carries no proxsync marker: it is not shown to be spec old's; nothing \
             is re-labelled"
        );
        let elsewhere = Recorded { vmid: 7, ..RECORD };
        assert_eq!(
            refused(ask(&ct(Some(&m), Some(elsewhere)))),
            "the record of spec old names container 7 on site lab, not container 100 on site lab"
        );
        let why = refused(ask(&ct(Some(&m), None)));
        assert!(
            why.starts_with(
                "container 100's marker does not verify (copied from another container"
            ) && why.ends_with(
                "if it is spec old's container, remove the annotation and confirm it \
                 with proxsync adopt"
            ),
            "{why}"
        );
        let on_lab = ct(Some(&m), Some(RECORD));
        let far = may_relabel("main", "old", "new", "eu", &on_lab).unwrap_err();
        assert!(
            far.to_string().starts_with(
                "the container is on site lab and the renamed spec names site eu: a \
                 rename never moves a container between clusters"
            ),
            "{far}"
        );
    }

    fn verified(spec: &str, uid: &str, vouched: Option<&str>) -> VerifiedMarker {
        let key = crate::gate::identity::tests::key();
        let site = crate::gate::site::tests::checked("lab");
        let d = match vouched {
            Some(_) => format!("proxsync-id: install=main spec={spec} uid={uid}"),
            None => Marker::signed(&key, "main", spec, uid, 100).description(),
        };
        crate::gate::identity::verify(
            &site,
            &key,
            "main",
            crate::guest::GuestKind::Qemu,
            100,
            Some(&d),
            None,
            vouched,
        )
        .unwrap()
    }

    #[test]
    fn the_permit_writes_the_new_specs_marker_with_the_old_uid() {
        let r = relabel(
            &verified("old", "u1", None),
            "old",
            "new",
            "lab",
            Some(RECORD),
        )
        .unwrap();
        let Relabeled::Resign(permit) = &r else {
            panic!("{r:?}");
        };
        assert_eq!(
            permit.act(),
            &Act::Relabel {
                marker: MarkerId {
                    install: "main".into(),
                    spec: "new".into(),
                    uid: "u1".into()
                }
            }
        );
        assert_eq!((permit.site(), permit.vmid(), r.uid()), ("lab", 100, "u1"));
        // Vouched for by the old spec's record (a marker from before signing).
        let vouched = verified("old", "u1", Some("u1"));
        assert!(matches!(
            relabel(&vouched, "old", "new", "lab", Some(RECORD)),
            Ok(Relabeled::Resign(_))
        ));
        // Already re-labelled: nothing to write.
        let done = relabel(
            &verified("new", "u1", None),
            "old",
            "new",
            "lab",
            Some(RECORD),
        );
        assert!(matches!(done, Ok(Relabeled::Done { .. })), "{done:?}");
        // Another uid than the record's, another site: no permit.
        let other = relabel(
            &verified("old", "u2", None),
            "old",
            "new",
            "lab",
            Some(RECORD),
        );
        assert!(other.is_err());
        let eu = relabel(
            &verified("old", "u1", None),
            "old",
            "new",
            "eu",
            Some(RECORD),
        );
        assert!(matches!(eu, Err(Refused::OtherSite { .. })), "{eu:?}");
    }
}
