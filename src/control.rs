//! The daemon's control socket: `proxsync reconcile [NAME]` asks the running daemon to
//! reconcile now, and `proxsync plan` reads the daemon's state records through it (redb lets
//! one process hold the database). One line per request (`reconcile`, `reconcile NAME` or
//! `records`), one line back (`ok ...` or `error ...`). The socket lives in `state_dir`
//! (`control.sock`, mode 0660 from the moment it appears there), so the daemon's group can
//! use it and nobody else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

/// The socket's file name inside `state_dir`.
pub const SOCKET: &str = "control.sock";

/// A request the daemon received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The spec to reconcile now, or `None` for every spec.
    pub spec: Option<String>,
}

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET)
}

/// Listens on the socket and forwards each valid reconcile request; answers `records` from
/// `store`. Replaces a stale socket file.
pub fn serve(
    state_dir: &Path,
    requests: mpsc::Sender<Request>,
    store: Option<std::sync::Arc<crate::state::Store>>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let path = socket_path(state_dir);
    crate::state::create_state_dir(state_dir)?;
    let listener = bind_private(state_dir, &path)?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let requests = requests.clone();
            let store = store.clone();
            tokio::spawn(async move {
                let _ = handle(stream, requests, store).await;
            });
        }
    }))
}

/// Binds the socket so that it never exists at `path` with the umask's mode: bound in a fresh
/// 0700 directory inside `state_dir`, set to 0660 there, then renamed over `path` (which also
/// replaces a stale socket in one step). The umask is process-wide, so it is not touched.
fn bind_private(state_dir: &Path, path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let staging = state_dir.join(format!(".ctl-{}", std::process::id()));
    if staging.symlink_metadata().is_ok() {
        // Left by a process that had this pid and died before cleaning up.
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let result = (|| {
        let tmp = staging.join(SOCKET);
        let listener = UnixListener::bind(&tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))?;
        std::fs::rename(&tmp, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

async fn handle(
    stream: UnixStream,
    requests: mpsc::Sender<Request>,
    store: Option<std::sync::Arc<crate::state::Store>>,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    // A request is one short line; a client that sends nothing is dropped.
    let mut reader = BufReader::new(read.take(1024));
    let n = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line))
        .await
        .unwrap_or(Ok(0))?;
    if line.trim() == "records" {
        let reply = match store.as_ref().map(|s| s.specs()) {
            Some(Ok(records)) => match serde_json::to_string(&records) {
                Ok(json) => format!("ok {json}\n"),
                Err(e) => format!("error {e}\n"),
            },
            Some(Err(e)) => format!("error {e}\n"),
            None => "error no state database\n".to_string(),
        };
        return write.write_all(reply.as_bytes()).await;
    }
    let reply = match parse(&line[..n.min(line.len())]) {
        Ok(req) => {
            let what = req.spec.clone().unwrap_or_else(|| "every spec".into());
            match requests.send(req).await {
                Ok(()) => format!("ok reconcile of {what} queued\n"),
                Err(_) => "error the daemon is stopping\n".to_string(),
            }
        }
        Err(e) => format!("error {e}\n"),
    };
    write.write_all(reply.as_bytes()).await
}

use tokio::io::AsyncReadExt;

fn parse(line: &str) -> Result<Request, String> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("reconcile"), None, None) => Ok(Request { spec: None }),
        (Some("reconcile"), Some(name), None) if crate::status::valid_name(name) => Ok(Request {
            spec: Some(name.to_string()),
        }),
        (Some("reconcile"), Some(name), None) => Err(format!("{name:?} is not a spec name")),
        _ => Err("expected `reconcile` or `reconcile NAME`".into()),
    }
}

/// Sends a request to the running daemon and returns its answer.
pub async fn request(state_dir: &Path, spec: Option<&str>) -> Result<String, String> {
    let path = socket_path(state_dir);
    let mut stream = UnixStream::connect(&path).await.map_err(|e| {
        format!(
            "cannot reach the daemon at {}: {e} (is `proxsync run` running, with this config's state_dir? \
             `systemctl status proxsync`)",
            path.display()
        )
    })?;
    let line = match spec {
        Some(name) => format!("reconcile {name}\n"),
        None => "reconcile\n".to_string(),
    };
    stream
        .write_all(line.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stream).read_line(&mut reply),
    )
    .await
    .map_err(|_| "the daemon did not answer within 10 s".to_string())?
    .map_err(|e| e.to_string())?;
    match reply.trim_end().strip_prefix("ok ") {
        Some(ok) => Ok(ok.to_string()),
        None => Err(reply.trim_end().trim_start_matches("error ").to_string()),
    }
}

/// The running daemon's state records (for `proxsync plan` while the daemon holds the
/// database).
pub async fn records(
    state_dir: &Path,
) -> Result<std::collections::BTreeMap<String, crate::state::SpecRecord>, String> {
    let path = socket_path(state_dir);
    let mut stream = UnixStream::connect(&path)
        .await
        .map_err(|e| format!("cannot reach the daemon at {}: {e}", path.display()))?;
    stream
        .write_all(b"records\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        BufReader::new(stream).read_line(&mut reply),
    )
    .await
    .map_err(|_| "the daemon did not answer within 30 s".to_string())?
    .map_err(|e| e.to_string())?;
    match reply.trim_end().strip_prefix("ok ") {
        Some(json) => serde_json::from_str(json)
            .map_err(|e| format!("unreadable records from the daemon: {e}")),
        None => Err(reply.trim_end().trim_start_matches("error ").to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(parse("reconcile\n"), Ok(Request { spec: None }));
        assert_eq!(
            parse("reconcile web-01\n"),
            Ok(Request {
                spec: Some("web-01".into())
            })
        );
        assert!(parse("reconcile ../etc\n").is_err());
        assert!(parse("delete everything\n").is_err());
        assert!(parse("").is_err());
    }

    #[tokio::test]
    async fn a_request_reaches_the_daemon_and_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        let store =
            std::sync::Arc::new(crate::state::Store::open(&dir.path().join("state")).unwrap());
        store
            .put("web-01", &crate::state::SpecRecord::default())
            .unwrap();
        // A stale socket file from an earlier run is replaced.
        std::fs::write(socket_path(dir.path()), "stale").unwrap();
        let server = serve(dir.path(), tx, Some(store)).unwrap();
        {
            use std::os::unix::fs::{FileTypeExt, PermissionsExt};
            let meta = std::fs::symlink_metadata(socket_path(dir.path())).unwrap();
            assert!(meta.file_type().is_socket());
            assert_eq!(meta.permissions().mode() & 0o777, 0o660);
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| n.to_string_lossy().starts_with(".ctl-"))
                .collect();
            assert!(
                left.is_empty(),
                "the staging directory is removed: {left:?}"
            );
        }
        let recs = records(dir.path()).await.unwrap();
        assert!(recs.contains_key("web-01"), "{recs:?}");
        let answer = request(dir.path(), Some("web-01")).await.unwrap();
        assert!(answer.contains("web-01"), "{answer}");
        assert_eq!(
            rx.recv().await,
            Some(Request {
                spec: Some("web-01".into())
            })
        );
        let err = request(dir.path(), Some("Not/A/Name")).await.unwrap_err();
        assert!(err.contains("not a spec name"), "{err}");
        server.abort();
        let gone = tempfile::tempdir().unwrap();
        let err = request(gone.path(), None).await.unwrap_err();
        assert!(err.contains("is `proxsync run` running"), "{err}");
    }
}
