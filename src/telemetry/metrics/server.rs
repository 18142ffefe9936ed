//! The metrics listener: `GET /metrics` on `[metrics] listen` (TCP or a unix socket), served
//! by hyper in tasks of its own, so a scrape never waits for the reconcile loop nor the loop
//! for a scrape. Bounded: a few connections at once, each closed after a short while.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

use super::Metrics;
use crate::config::MetricsListen;

/// What a scrape gets: OpenMetrics text (Prometheus asks for it and parses it).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 8;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may stay open (keep-alive included).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// The running listener. [`Server::stop`] ends it (and removes a unix socket's file).
pub(crate) struct Server {
    task: tokio::task::JoinHandle<()>,
    socket: Option<PathBuf>,
}

impl Server {
    pub(crate) fn stop(self) {
        self.task.abort();
        if let Some(path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds `listen` and serves `metrics` there until [`Server::stop`]. Call inside the tokio
/// runtime. The error names the key and the address.
pub(crate) fn serve(listen: &MetricsListen, metrics: Metrics) -> Result<Server, String> {
    let fail = |e: std::io::Error| format!("[metrics] listen = \"{listen}\": cannot listen: {e}");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    match listen {
        MetricsListen::Tcp(addr) => {
            let listener = std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::TcpListener::from_std)
                .map_err(fail)?;
            let task = tokio::spawn(async move {
                loop {
                    if let Ok((stream, _)) = listener.accept().await {
                        spawn_connection(stream, &metrics, &slots);
                    }
                }
            });
            Ok(Server { task, socket: None })
        }
        MetricsListen::Unix(path) => {
            let listener = bind_unix(path).map_err(fail)?;
            let task = tokio::spawn(async move {
                loop {
                    if let Ok((stream, _)) = listener.accept().await {
                        spawn_connection(stream, &metrics, &slots);
                    }
                }
            });
            Ok(Server {
                task,
                socket: Some(path.clone()),
            })
        }
    }
}

/// Binds a unix socket at `path` (0660: the daemon's group may scrape, or a reverse proxy in
/// it may connect), replacing a stale socket but never one a process listens on, nor another
/// kind of file.
pub(crate) fn bind_unix(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = path.symlink_metadata() {
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket",
            ));
        }
        // A socket some process still accepts on (another daemon given the same path) is
        // not taken from it; one nobody listens on is stale.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "the socket is in use: another process listens on it",
            ));
        }
        std::fs::remove_file(path)?;
    }
    // Bound under a name of its own, given its mode, then renamed into place: at `path` the
    // socket never has the umask's mode, not even for a moment.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let unready = path.with_file_name(format!(
        ".{}.{}.binding",
        name.as_deref().unwrap_or("socket"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&unready);
    let listener = tokio::net::UnixListener::bind(&unready)?;
    let placed = std::fs::set_permissions(&unready, std::fs::Permissions::from_mode(0o660))
        .and_then(|()| std::fs::rename(&unready, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&unready);
        return Err(e);
    }
    Ok(listener)
}

/// Serves one connection in a task of its own, or drops it when all slots are taken.
fn spawn_connection<S>(stream: S, metrics: &Metrics, slots: &Arc<Semaphore>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(slot) = slots.clone().try_acquire_owned() else {
        return;
    };
    let metrics = metrics.clone();
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req| {
            let metrics = metrics.clone();
            async move { Ok::<_, Infallible>(respond(&req, &metrics)) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
        drop(slot);
    });
}

/// `GET`/`HEAD /metrics`: the metrics; another method there: 405; any other path: 404.
fn respond(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = Response::new(Full::new(Bytes::from(metrics.encode())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE_HEADER,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
