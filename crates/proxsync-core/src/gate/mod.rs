//! The one gate for destructive and identity-changing actions.
//!
//! Deleting a VM, releasing it, handing it over or taking it over, re-labelling its marker (a
//! rename), detaching or destroying a disk, and attaching an image or a cloud-init seed to a VM
//! are allowed only on verified evidence, and every such decision is made here, not at the
//! call site. The evidence, by kind:
//! - the VM's marker: its MAC over install, spec, uid and VMID verifies with the marker key,
//!   or the state database vouches for the VM (its record names this VMID and the marker's uid);
//! - the volumes proxsync recorded when it wrote them (a disk's volume id, a seed's upload);
//! - the commit chain: the applied commit verifies and descends from the last applied one, or
//!   an operator accepted it;
//! - the site's identity: the cluster a site's endpoint reaches is the one recorded at first
//!   contact, or an operator accepted the change;
//! - an HA group or rule proxsync made (`ha.nodes`): its mark, and the record naming it.
//!
//! Each file below holds one kind of evidence as pure functions (no I/O, no clock): callers
//! read what PVE and the state database say and hand it in; the answer is a permit or a
//! refusal that says what is wrong and what to do.
//!
//! A [`permit::Permit`] is the only way such a call reaches Proxmox VE: the client's
//! destructive calls take one, and a config write with a guarded edit without its permit is
//! refused before it is sent ([`permit::check_write`]). Only the decision functions here make
//! one, each from verified evidence: [`identity::VerifiedMarker`] (made on a
//! [`site::SiteChecked`]), the recorded volumes, the rename evidence, the HA mark.
//! The planner's side, the evidence each kind of planned action needs, is
//! `plan::evidence`: it reads the plan's actions, so it stands above the planner, which asks
//! the gate (a rename's evidence) and so stands above it.

pub mod commit;
pub mod ha;
pub mod identity;
pub mod permit;
pub(crate) mod refusal;
pub mod rename;
pub mod site;
pub mod volume;
