//! What a spec's history says happened ([`Note`]): the guest named by its kind, and what is
//! kept.

use std::fmt;

use crate::guest::GuestKind;
use crate::model::Note;

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::MadeAnew { kind, vmid } => write!(
                f,
                "{} is gone (PVE says VMID {vmid} is free): making the spec a new one",
                kind.named(*vmid)
            ),
            Note::TakenByConsent { kind, vmid } => {
                write!(f, "{} taken over by the spec's consent", kind.named(*vmid))
            }
            Note::DriveDetached { vmid, slot, volume } => write!(
                f,
                "{slot} ({volume}) is no longer in the spec: detached, not destroyed; PVE keeps \
                 the volume as an unusedN entry of VM {vmid} until a person deletes it"
            ),
            Note::VolumeDestroyed { kind, slot, volume } => {
                let destroy = kind.destroy_field();
                let what = match kind {
                    GuestKind::Qemu => "disk",
                    GuestKind::Lxc => "volume",
                };
                write!(
                    f,
                    "{slot} ({volume}) destroyed as {destroy} asks; its data is gone. {destroy} \
                     never applies to {slot} again: a {what} put there later is kept"
                )
            }
            Note::ProtectionCleared { kind, vmid } => write!(
                f,
                "{}: its removed spec managed protection; cleared to delete it",
                kind.named(*vmid)
            ),
            Note::MarkerWrittenBack {
                kind,
                vmid,
                identity,
            } => {
                write!(
                    f,
                    "{} carries no marker line (its notes were edited); its ",
                    kind.named(*vmid)
                )?;
                if let Some(id) = identity {
                    write!(f, "{id}")?;
                }
                f.write_str(" is the recorded one: the marker line is written back below the notes")
            }
            Note::Failed { category, message } => write!(f, "{category}: {message}"),
            Note::Retrying { category, message } => {
                write!(f, "trying again after {category}: {message}")
            }
            Note::StillRunning { upid } => write!(f, "task {upid} still running"),
        }
    }
}
