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
pub(crate) const LOCK_FILE: &str = "lock";

/// Held while this process may act for its state directory; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct InstanceLock {
    _file: File,
}

/// The lock file of `doctor --exercise` inside `state_dir`: one exercise at a time, which the
/// daemon's lock does not block.
pub(crate) const EXERCISE_LOCK_FILE: &str = "exercise.lock";

/// Held while this process runs an exercise; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct ExerciseLock {
    _file: File,
    /// The run the last holder of the lock wrote (it has ended: the lock was free).
    pub previous_run: Option<String>,
}

impl ExerciseLock {
    /// Takes the exercise's lock for run `run`, or says which process holds it.
    pub(crate) fn acquire(state_dir: &Path, run: &str) -> Result<ExerciseLock, String> {
        let path = state_dir.join(EXERCISE_LOCK_FILE);
        let io_err = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", path.display());
        let (mut file, taken) = take(state_dir, &path)?;
        let mut text = String::new();
        // A PID and a run are a few bytes; more is no holder's.
        let _ = (&file).take(64).read_to_string(&mut text);
        let mut words = text.split_whitespace();
        let (pid, previous_run) = (
            words.next().and_then(|p| p.parse::<u32>().ok()),
            words
                .find_map(|w| w.strip_prefix("run="))
                .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(str::to_string),
        );
        if !taken {
            let holder = pid.map_or("another process".to_string(), |p| format!("PID {p}"));
            let run = previous_run
                .map(|r| format!(", run {r}"))
                .unwrap_or_default();
            return Err(format!(
                "another proxsync doctor --exercise ({holder}{run}) holds {}: two exercises \
                 at once could take each other's guests. Wait for it to end",
                path.display()
            ));
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{} run={run}", std::process::id()))
            .map_err(|e| io_err("cannot write the PID", e))?;
        Ok(ExerciseLock {
            _file: file,
            previous_run,
        })
    }
}

/// Opens the lock file `path` (made, mode 0600, with `state_dir` when missing) and tries to
/// lock it: the file, and whether this process holds the lock now.
fn take(state_dir: &Path, path: &Path) -> Result<(File, bool), String> {
    let io_err = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", path.display());
    crate::util::state_dir::create_state_dir(state_dir).map_err(|e| {
        format!(
            "{}: cannot use the state directory: {e}",
            state_dir.display()
        )
    })?;
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                let hint = crate::util::state_dir::permission_hint(state_dir, path, &e);
                io_err("cannot open the lock file", e) + &hint
            })?
    };
    match file.try_lock() {
        Ok(()) => Ok((file, true)),
        Err(TryLockError::WouldBlock) => Ok((file, false)),
        Err(TryLockError::Error(e)) => Err(io_err("cannot lock", e)),
    }
}

/// Why the instance lock was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotLocked {
    /// Another process holds it (a running daemon): which, and what to do.
    Held(String),
    /// The lock file could not be made, opened or written (a state directory another user
    /// owns, a full disk): no process holds it, and nothing may be written.
    Failed(String),
}

impl std::fmt::Display for NotLocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLocked::Held(why) | NotLocked::Failed(why) => f.write_str(why),
        }
    }
}

impl InstanceLock {
    /// Takes the lock, or says which process holds it (or why it could not be taken) and what
    /// to do.
    pub(crate) fn acquire(state_dir: &Path) -> Result<InstanceLock, NotLocked> {
        let path = state_dir.join(LOCK_FILE);
        let io_err = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", path.display());
        let (mut file, taken) = take(state_dir, &path).map_err(NotLocked::Failed)?;
        if !taken {
            return Err(NotLocked::Held(held_message(&mut file, state_dir, &path)));
        }
        // Ours now: say who holds it, for the next one who tries.
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| NotLocked::Failed(io_err("cannot write the PID", e)))?;
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
    use crate::util::once_free;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = InstanceLock::acquire(&state).unwrap();
        let NotLocked::Held(e) = InstanceLock::acquire(&state).unwrap_err() else {
            panic!("a held lock is Held");
        };
        assert!(
            e.contains(&format!("PID {}", std::process::id()))
                && e.contains(&state.display().to_string())
                && e.contains("only one proxsync may run per state directory"),
            "{e}"
        );
        drop(first);
        // Released with its holder: the next one takes it.
        let again = once_free(|| InstanceLock::acquire(&state));
        // The exercise's lock is another: the daemon's does not block it, a second does.
        let first = ExerciseLock::acquire(&state, "0a1b").unwrap();
        assert_eq!(first.previous_run, None);
        let e = ExerciseLock::acquire(&state, "0c0d").unwrap_err();
        assert!(
            e.contains(&format!("PID {}, run 0a1b", std::process::id()))
                && e.contains(EXERCISE_LOCK_FILE),
            "{e}"
        );
        drop(first);
        // The next holder learns the last one's run, ended.
        let next = once_free(|| ExerciseLock::acquire(&state, "0c0d"));
        assert_eq!(next.previous_run.as_deref(), Some("0a1b"));
        drop((again, next));
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
