//! One proxsync per state directory: the daemon, `run --once` and `adopt` hold an exclusive
//! advisory lock (`flock`) on `<state_dir>/lock` while they run, with their PID written in it.
//!
//! Two processes on one state directory would plan from one database while each acts on its
//! own view: two creates of one spec, or a delete racing a converge. redb refuses a second
//! open of its file too, but says only that the database is in use; this lock comes first and
//! names the process that holds it. The kernel drops the lock when the process dies, however
//! it dies, so a crash never leaves a stale lock behind (the file stays; it is not the lock).

use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// The lock file's name inside `state_dir`.
pub const LOCK_FILE: &str = "lock";

/// Held while this process may act for its state directory; dropping it releases the lock.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Takes the lock, or says which process holds it and what to do.
    pub fn acquire(state_dir: &Path) -> Result<InstanceLock, String> {
        let path = state_dir.join(LOCK_FILE);
        let io_err = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", path.display());
        crate::util::state_dir::create_state_dir(state_dir).map_err(|e| {
            format!(
                "{}: cannot create the state directory: {e}",
                state_dir.display()
            )
        })?;
        let mut file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| io_err("cannot open the lock file", e))?
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(held_message(&mut file, state_dir, &path)),
            Err(TryLockError::Error(e)) => return Err(io_err("cannot lock", e)),
        }
        // Ours now: say who holds it, for the next one who tries.
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| io_err("cannot write the PID", e))?;
        Ok(InstanceLock { _file: file })
    }
}

/// The refusal when another process holds the lock: its PID (as it wrote it) and what to do.
fn held_message(file: &mut File, state_dir: &Path, path: &Path) -> String {
    let mut text = String::new();
    // A PID is a few bytes; a file that says more (or is unreadable) names no PID.
    let _ = file.take(32).read_to_string(&mut text);
    let holder = match text.trim().parse::<u32>() {
        Ok(pid) => format!("PID {pid}"),
        Err(_) => "another process".to_string(),
    };
    format!(
        "state directory {} is in use by another proxsync ({holder} holds {}): only one \
         proxsync may run per state directory. Stop it first (systemctl stop proxsync), or give \
         this one its own state_dir",
        state_dir.display(),
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = InstanceLock::acquire(&state).unwrap();
        let e = InstanceLock::acquire(&state).unwrap_err();
        assert!(
            e.contains(&format!("PID {}", std::process::id()))
                && e.contains(&state.display().to_string())
                && e.contains("only one proxsync may run per state directory"),
            "{e}"
        );
        drop(first);
        // Released with its holder: the next one takes it.
        let _again = InstanceLock::acquire(&state).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(state.join(LOCK_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
