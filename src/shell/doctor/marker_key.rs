//! The marker key (`<state_dir>/marker.key`, or `marker_key_file`): the secret proxsync signs
//! VM markers with. Present, valid and private, or absent (made at the first start). Its
//! content is never shown.

use std::path::Path;

use super::{Check, Level, check};
use crate::ownership::MarkerKey;

pub(super) fn check_marker_key(path: &Path) -> Check {
    let subject = "marker key";
    match MarkerKey::load_file(path) {
        Ok(None) => check(
            Level::Warn,
            subject,
            format!("{} does not exist", path.display()),
            Some(
                "it will be made at the first start; back it up with the state directory — if \
                 lost, no marker verifies and each VM must be confirmed with `proxsync adopt`"
                    .into(),
            ),
        ),
        // The error names the file and what is wrong, never the content.
        Err(e) => check(
            Level::Fail,
            subject,
            e,
            Some(format!(
                "restore {} from your backup (proxsync will not start without a valid key)",
                path.display()
            )),
        ),
        Ok(Some(_key)) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                if let Ok(meta) = std::fs::metadata(path) {
                    let mode = meta.permissions().mode() & 0o777;
                    if mode & 0o077 != 0 {
                        return check(
                            Level::Warn,
                            subject,
                            format!(
                                "{} has mode {mode:04o}: group or others can {} it",
                                path.display(),
                                if mode & 0o044 != 0 { "read" } else { "access" }
                            ),
                            Some(format!("chmod 600 {}", path.display())),
                        );
                    }
                }
            }
            check(
                Level::Ok,
                subject,
                format!(
                    "{} is valid and private; back it up with the state directory",
                    path.display()
                ),
                None,
            )
        }
    }
}
