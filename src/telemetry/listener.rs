//! What the daemon's two HTTP listeners share (`[metrics] listen`, `[web] listen`): binding a
//! TCP address or a unix socket, the accept loop, and the connections served at once.
//!
//! When all slots are taken, a new connection ends the oldest of the peer that holds the most
//! rather than being refused: a client that means it (a forge's hook, a scrape) sends its
//! request within milliseconds of connecting, so connections that never finish theirs
//! (slowloris) cannot keep it out, and a flood of new connections from one address ends its
//! own; only one from as many addresses as there are slots could end another's.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

use crate::config::MetricsListen;

/// A connection's byte stream, TCP or unix.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A connection as the serving function gets it.
pub(crate) type Stream = Box<dyn Io>;

/// Whose a connection is: its IP address (IPv6: its /64, what one host is usually given);
/// `None` on a unix socket (all from the reverse proxy, or the daemon's own group).
pub(crate) type Peer = Option<IpAddr>;

fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.into(),
            None => Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1)).into(),
        },
        v4 => v4,
    }
}

/// A listening socket, TCP or unix.
trait Listener: Send + 'static {
    type Stream: Io;
    fn accept_one(&self) -> impl Future<Output = std::io::Result<(Self::Stream, Peer)>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<(Self::Stream, Peer)> {
        let (stream, peer) = self.accept().await?;
        Ok((stream, Some(peer_key(peer.ip()))))
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<(Self::Stream, Peer)> {
        let (stream, _) = self.accept().await?;
        Ok((stream, None))
    }
}

/// A running listener: [`Running::stop`] ends it and removes a unix socket's file.
pub(crate) struct Running {
    task: tokio::task::JoinHandle<()>,
    socket: Option<PathBuf>,
    /// The TCP address bound (port 0 resolved).
    #[cfg_attr(not(test), allow(dead_code))]
    pub local: Option<SocketAddr>,
}

impl Running {
    pub(crate) fn stop(self) {
        self.task.abort();
        if let Some(path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds `listen` and, until [`Running::stop`], serves each connection with `serve` in a task
/// of its own, holding one of `slots`. Call inside the tokio runtime.
pub(crate) fn serve<F, Fut>(
    listen: &MetricsListen,
    slots: Arc<Slots>,
    serve: F,
) -> std::io::Result<Running>
where
    F: Fn(Stream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = move |stream: Stream, peer: Peer| slots.spawn(peer, serve(stream));
    match listen {
        MetricsListen::Tcp(addr) => {
            let listener = std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::TcpListener::from_std)?;
            let local = listener.local_addr().ok();
            Ok(Running {
                task: tokio::spawn(accept_loop(listener, serve)),
                socket: None,
                local,
            })
        }
        MetricsListen::Unix(path) => Ok(Running {
            task: tokio::spawn(accept_loop(bind_unix(path)?, serve)),
            socket: Some(path.clone()),
            local: None,
        }),
    }
}

/// Gives each connection `listener` accepts to `serve`, pausing while accepting fails.
async fn accept_loop<L: Listener>(listener: L, serve: impl Fn(Stream, Peer) + Send + 'static) {
    let mut pause = Pause::default();
    loop {
        match listener.accept_one().await {
            Ok((stream, peer)) => {
                pause.reset();
                serve(Box::new(stream), peer);
            }
            Err(_) => pause.wait().await,
        }
    }
}

/// The growing pause while accept fails (out of descriptors: EMFILE), so the loop does not
/// spin: 10 ms doubling to 1 s, back to 10 ms after an accepted connection.
#[derive(Default)]
struct Pause(Option<Duration>);

impl Pause {
    async fn wait(&mut self) {
        let d = self.0.map_or(Duration::from_millis(10), |d| {
            (d * 2).min(Duration::from_secs(1))
        });
        self.0 = Some(d);
        tokio::time::sleep(d).await;
    }

    fn reset(&mut self) {
        self.0 = None;
    }
}

/// Binds a unix socket at `path` (0660: the daemon's group may connect, or a reverse proxy in
/// it), replacing a stale socket but never one a process listens on, nor another kind of file.
pub(crate) fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
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

/// How long a new connection waits for the slot of the one it ended.
const SLOT_WAIT: Duration = Duration::from_secs(1);

/// The connections being served, oldest first, each with its peer and the handle that ends
/// it (see the module's doc).
pub(crate) struct Slots {
    max: usize,
    permits: Arc<Semaphore>,
    live: std::sync::Mutex<Live>,
}

#[derive(Default)]
struct Live {
    next: u64,
    conns: std::collections::VecDeque<(u64, Peer, tokio::task::AbortHandle)>,
}

impl Live {
    /// Ends the oldest connection of the peer holding the most.
    fn evict(&mut self) {
        let count = |p: &Peer| self.conns.iter().filter(|(_, q, _)| q == p).count();
        let most = self.conns.iter().map(|(_, p, _)| count(p)).max();
        let Some(i) = self
            .conns
            .iter()
            .position(|(_, p, _)| Some(count(p)) == most)
        else {
            return;
        };
        if let Some((_, _, task)) = self.conns.remove(i) {
            task.abort();
        }
    }
}

impl Slots {
    /// `max` connections served at once.
    pub(crate) fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max,
            permits: Arc::new(Semaphore::new(max)),
            live: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `serve`, a connection from `peer`, in a task of its own once it holds a slot,
    /// ending another connection when all are taken.
    fn spawn(self: &Arc<Self>, peer: Peer, serve: impl Future<Output = ()> + Send + 'static) {
        let mine = self.clone();
        // Locked until the task is listed, so that it cannot end (and be forgotten) before.
        let mut live = self.lock();
        let id = live.next;
        live.next += 1;
        let task = tokio::spawn(async move {
            // The permit of the connection ended for this one comes when its task is dropped.
            let permit =
                tokio::time::timeout(SLOT_WAIT, mine.permits.clone().acquire_owned()).await;
            if let Ok(Ok(_permit)) = permit {
                serve.await;
            }
            mine.lock().conns.retain(|(i, _, _)| *i != id);
        });
        if live.conns.len() >= self.max {
            live.evict();
        }
        live.conns.push_back((id, peer, task.abort_handle()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_addresses_and_ipv6_64s() {
        let key = |s: &str| peer_key(s.parse().unwrap()).to_string();
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::");
    }
}
