//! The metrics listener: `GET /metrics` on `[metrics] listen` (TCP or a unix socket), served
//! by hyper in tasks of its own, so a scrape never waits for the reconcile loop nor the loop
//! for a scrape. Bounded: a few connections at once, each closed after a short while.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use super::Metrics;
use crate::config::MetricsListen;
use crate::telemetry::listener;

/// What a scrape gets: OpenMetrics text (Prometheus asks for it and parses it).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once; a new one beyond ends another (`telemetry::listener::Slots`).
const MAX_CONNECTIONS: usize = 8;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may stay open (keep-alive included).
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// The running listener. [`Server::stop`] ends it (and removes a unix socket's file).
pub(crate) struct Server(listener::Running);

impl Server {
    pub(crate) fn stop(self) {
        self.0.stop();
    }
}

/// Binds `listen` and serves `metrics` there until [`Server::stop`]. Call inside the tokio
/// runtime. The error names the key and the address.
pub(crate) fn serve(listen: &MetricsListen, metrics: Metrics) -> Result<Server, String> {
    listener::serve(
        listen,
        listener::Slots::new(MAX_CONNECTIONS),
        move |stream| serve_connection(stream, metrics.clone()),
    )
    .map(Server)
    .map_err(|e| format!("[metrics] listen = \"{listen}\": cannot listen: {e}"))
}

/// Serves one scrape's connection until it ends or [`CONNECTION_LIFETIME`] passes.
async fn serve_connection(stream: listener::Stream, metrics: Metrics) {
    let service = hyper::service::service_fn(move |req| {
        let metrics = metrics.clone();
        async move { Ok::<_, Infallible>(respond(&req, &metrics)) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Slow connections holding every slot do not keep a scrape out: it is served at once,
    /// the oldest idle connection closed for it. (Before, a full listener dropped the new
    /// connection.)
    #[tokio::test]
    async fn slow_connections_holding_every_slot_do_not_keep_a_scrape_out() {
        let listen = MetricsListen::Tcp("127.0.0.1:0".parse().unwrap());
        let server = serve(&listen, Metrics::off()).unwrap();
        let addr = server.0.local.unwrap();
        let mut slow = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
                .await
                .unwrap();
            slow.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut scrape = tokio::net::TcpStream::connect(addr).await.unwrap();
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(3), scrape.read_to_string(&mut answer))
            .await
            .expect("the scrape is answered at once")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(2), slow[0].read(&mut buf))
            .await
            .expect("the oldest slow connection is closed")
            .unwrap_or(0);
        assert_eq!(n, 0);
        server.stop();
    }
}
