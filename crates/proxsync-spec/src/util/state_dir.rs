//! The state directory's creation, shared by everyone who writes into it.

use std::path::Path;

/// Creates `state_dir` with mode 0700 if it is missing (its parents as the umask says); an
/// existing directory is left as it is (systemd's `StateDirectory=` makes it with
/// `StateDirectoryMode=`). Everyone creating files in `state_dir` calls this first, so the
/// directory never exists with the umask's mode.
pub fn create_state_dir(state_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if state_dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = state_dir.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(state_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && state_dir.is_dir() => Ok(()),
        other => other,
    }
}
