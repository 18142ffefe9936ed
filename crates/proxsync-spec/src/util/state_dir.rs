//! The state directory's creation, shared by everyone who writes into it, and who may write
//! into it: a command run as root in a directory the service user owns would leave files the
//! service cannot open (`Permission denied` at its next start), so it is refused instead.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Creates `state_dir` with mode 0700 if it is missing (its parents as the umask says); an
/// existing directory is left as it is (systemd's `StateDirectory=` makes it with
/// `StateDirectoryMode=`). Everyone creating files in `state_dir` calls this first, so the
/// directory never exists with the umask's mode.
///
/// An existing directory another user owns is refused to root (see the module's doc): the
/// error says to run as that user.
pub fn create_state_dir(state_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if state_dir.is_dir() {
        return may_write(state_dir);
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

/// Whether this process may make files in the existing `state_dir`: not as root when another
/// user owns it.
fn may_write(state_dir: &Path) -> std::io::Result<()> {
    let owner = std::fs::metadata(state_dir)?.uid();
    // The effective uid, without libc: /proc/self belongs to it.
    let me = std::fs::metadata("/proc/self").map_or(owner, |m| m.uid());
    match root_in_others_dir(state_dir, me, owner, user_name(owner).as_deref()) {
        None => Ok(()),
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )),
    }
}

/// The refusal of a process of uid `me` making files in `state_dir`, which uid `owner` (named
/// `name`) owns: only root in another user's directory is refused.
pub(crate) fn root_in_others_dir(
    state_dir: &Path,
    me: u32,
    owner: u32,
    name: Option<&str>,
) -> Option<String> {
    if me != 0 || owner == 0 {
        return None;
    }
    let user = name.map_or_else(|| format!("#{owner}"), str::to_string);
    let shown = name.map_or_else(
        || format!("uid {owner}"),
        |n| format!("user {n} (uid {owner})"),
    );
    Some(format!(
        "{} belongs to {shown} and this runs as root: files made now would be root's, and the \
         service, running as that user, could not open them. Run the command as that user: \
         `sudo -u {user} proxsync ...`",
        state_dir.display()
    ))
}

/// What to add to an error opening `file` in `state_dir` that was refused permission: the
/// file is someone else's (made by a command run as root?) and how to give it back.
pub fn permission_hint(state_dir: &Path, file: &Path, e: &std::io::Error) -> String {
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return String::new();
    }
    let owner = |p: &Path| std::fs::metadata(p).map(|m| m.uid()).ok();
    let who = owner(state_dir).and_then(user_name);
    let file_owner = owner(file).map_or_else(String::new, |u| match user_name(u) {
        Some(n) => format!(" (it belongs to {n})"),
        None => format!(" (it belongs to uid {u})"),
    });
    format!(
        "; {} is not this user's{file_owner}, as when a command was run as root: give the state \
         directory back to the service's user: `chown -R {}: {}`",
        file.display(),
        who.as_deref().unwrap_or("proxsync"),
        state_dir.display()
    )
}

/// The name of user `uid` in `/etc/passwd`, if it is there.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_refused_in_the_service_users_directory() {
        let dir = Path::new("/var/lib/proxsync");
        let why = root_in_others_dir(dir, 0, 998, Some("proxsync")).expect("refused");
        assert!(
            why.starts_with("/var/lib/proxsync belongs to user proxsync (uid 998)"),
            "{why}"
        );
        assert!(why.ends_with("`sudo -u proxsync proxsync ...`"), "{why}");
        let unnamed = root_in_others_dir(dir, 0, 998, None).expect("refused");
        assert!(
            unnamed.contains("uid 998") && unnamed.contains("sudo -u #998"),
            "{unnamed}"
        );
    }

    #[test]
    fn the_owner_and_root_in_roots_directory_may_write() {
        let dir = Path::new("/var/lib/proxsync");
        assert_eq!(root_in_others_dir(dir, 998, 998, Some("proxsync")), None);
        assert_eq!(root_in_others_dir(dir, 0, 0, Some("root")), None);
        // Another unprivileged user is stopped by the directory's mode, not here.
        assert_eq!(root_in_others_dir(dir, 1000, 998, None), None);
    }

    #[test]
    fn a_refused_open_says_how_to_give_the_directory_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("proxsync.redb");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let hint = permission_hint(dir.path(), &file, &denied);
        assert!(hint.contains("chown -R "), "{hint}");
        assert!(
            hint.ends_with(&format!(": {}`", dir.path().display())),
            "{hint}"
        );
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(permission_hint(dir.path(), &file, &other), "");
    }
}
