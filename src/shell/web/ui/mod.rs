//! The read-only web pages on the `[web]` listener (issue #44): `GET /` (the fleet by site and
//! node), `/spec/<name>` (one spec), `/orphans`, and `/style.css`. Server-rendered HTML from
//! askama templates (`templates/web/`), every value HTML-escaped by the template engine; no
//! JavaScript, no forms: nothing on a page changes anything. A page is built from the status
//! files alone (`StatusDir`'s readers, in a blocking task), so it never touches the engine or
//! PVE. With `[web] token_file`, every page asks for `Authorization: Bearer <token>`; the
//! hooks keep their own signatures. docs/web-ui.md.

mod view;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{
    ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, HeaderMap,
    HeaderValue, REFERRER_POLICY, RETRY_AFTER, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use hyper::{Method, Response, StatusCode};
use ring::hmac;
use tokio::sync::Semaphore;

use crate::config::{Config, MetricsListen};

/// The stylesheet served at `/style.css` (the only resource the pages load).
const STYLE: &str = include_str!("../../../../templates/web/style.css");

/// The Content-Security-Policy of every answer: nothing but the stylesheet may load, no
/// script, no frame, no form.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
                              frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Pages rendered at once. A render (the fleet page parses every status file, on every core)
/// runs in a blocking task that nothing can stop: a client that goes away, or whose
/// connection a newer one ends, leaves it running. Without a bound, a loop of requests each
/// dropped at once piles up renders side by side, each holding a thread and the whole fleet
/// in memory, beside the reconcile loop.
const MAX_RENDERS: usize = 2;
/// How long a request waits for a render slot before it is answered 503. While it waits it
/// holds no thread: a dropped request gives its place up and renders nothing.
const RENDER_WAIT: Duration = Duration::from_secs(5);

/// What the pages need: where the status files are, and the bearer token if one is set.
pub(crate) struct Pages {
    /// `None`: no pages, every page path a 404 ([`Pages::none`]).
    status_dir: Option<PathBuf>,
    token: Option<Token>,
    /// `[web] file_url`: where a spec's page links its file at the applied commit.
    file_url: Option<String>,
    /// Where a spec's page reads its effective text (`None`: not shown).
    source: Option<crate::source::SpecSource>,
    /// [`MAX_RENDERS`] permits; a render's blocking task holds one until it ends.
    renders: Arc<Semaphore>,
    /// Answer only a request whose `Host` is an IP address or `localhost`
    /// ([`host_is_an_address`]): on TCP without a token, against DNS rebinding.
    addresses_only: bool,
}

/// The bearer token, kept as its HMAC under a fixed key: a presented token is compared by
/// `hmac::verify` (constant time, whatever the lengths), never byte by byte.
struct Token(hmac::Tag);

/// The key of [`Token`]'s HMAC. Not a secret: it only makes the comparison one of two
/// fixed-length tags in constant time.
const TOKEN_KEY: &[u8] = b"proxsync web token";

impl Token {
    fn new(token: &str) -> Token {
        Token(hmac::sign(&Self::key(), token.as_bytes()))
    }

    fn key() -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, TOKEN_KEY)
    }

    fn matches(&self, presented: &[u8]) -> bool {
        hmac::verify(&Self::key(), presented, self.0.as_ref()).is_ok()
    }
}

impl Pages {
    /// The pages of `config`: its status directory and `[web] token_file` (read now).
    pub(crate) fn load(config: &Config) -> Result<Pages, String> {
        let token = match &config.web {
            Some(web) => web.load_token().map_err(|e| e.to_string())?,
            None => None,
        };
        let mut pages = Pages::new(
            config.status_dir.clone(),
            token.as_ref().map(|t| t.expose()),
        );
        pages.file_url = config.web.as_ref().and_then(|w| w.file_url.clone());
        pages.source = Some(crate::source::SpecSource::of(config));
        // Without a token, a page on a TCP address answers whoever can reach it, a web page
        // in the operator's browser too once its own host name resolves to this address (DNS
        // rebinding: the browser then takes the answer for that site's own and lets its
        // script read the fleet). Such a request names that host name; one by address or as
        // `localhost` cannot come from another site. A unix socket is reached by a reverse
        // proxy, which a browser cannot be pointed at by DNS alone.
        pages.addresses_only = token.is_none()
            && config
                .web
                .as_ref()
                .is_some_and(|w| matches!(w.listen, MetricsListen::Tcp(_)));
        Ok(pages)
    }

    /// Pages reading `status_dir`, asking for `token` when one is given.
    pub(crate) fn new(status_dir: PathBuf, token: Option<&str>) -> Pages {
        Pages {
            status_dir: Some(status_dir),
            token: token.map(Token::new),
            file_url: None,
            source: None,
            renders: Arc::new(Semaphore::new(MAX_RENDERS)),
            addresses_only: false,
        }
    }

    /// These pages, linking each spec's file with `file_url` (a checked `[web] file_url`).
    #[cfg(test)]
    pub(crate) fn with_file_url(self, file_url: &str) -> Pages {
        Pages {
            file_url: Some(file_url.to_string()),
            ..self
        }
    }

    /// No pages: every page path is a 404, as before there were pages (the listener's own
    /// tests, which are about the hooks).
    #[cfg(test)]
    pub(crate) fn none() -> Pages {
        Pages {
            status_dir: None,
            token: None,
            file_url: None,
            source: None,
            renders: Arc::new(Semaphore::new(MAX_RENDERS)),
            addresses_only: false,
        }
    }

    /// Whether `headers` carry the token (always, when none is set).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        headers
            .get(AUTHORIZATION)
            .and_then(|v| {
                let v = v.as_bytes();
                let (scheme, rest) = v.split_at(v.iter().position(|b| *b == b' ')?);
                scheme
                    .eq_ignore_ascii_case(b"bearer")
                    .then(|| rest.trim_ascii())
            })
            .is_some_and(|presented| token.matches(presented))
    }
}

/// Whether `headers`' `Host` names the server by an IP address or as `localhost` (any port),
/// or is absent (no browser sends a request without one): no other site's host name.
fn host_is_an_address(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let port_ok = |port: &str| port.is_empty() || port.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(ip, port)| {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some_and(port_ok))
        });
    }
    let (name, port) = host.split_once(':').unwrap_or((host, ""));
    port_ok(port)
        && (name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok())
}

/// A page of the UI.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Page<'a> {
    /// `/`: the fleet.
    Fleet,
    /// `/spec/<name>`: one spec (the name not yet checked).
    Spec(&'a str),
    /// `/orphans`.
    Orphans,
    /// `/style.css`.
    Style,
}

/// The page at `path`, if it is one.
pub(crate) fn route(path: &str) -> Option<Page<'_>> {
    match path {
        "/" => Some(Page::Fleet),
        "/orphans" => Some(Page::Orphans),
        "/style.css" => Some(Page::Style),
        _ => path.strip_prefix("/spec/").map(Page::Spec),
    }
}

/// Answers a request for `page`: the token, then the method, then the page.
pub(crate) async fn respond(
    method: &Method,
    headers: &HeaderMap,
    page: Page<'_>,
    pages: &Pages,
) -> Response<Full<Bytes>> {
    let Some(dir) = pages.status_dir.clone() else {
        return text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n".into(),
        );
    };
    if !pages.authorized(headers) {
        let mut response = text(
            StatusCode::UNAUTHORIZED,
            "text/plain; charset=utf-8",
            "a bearer token is needed: Authorization: Bearer <[web] token_file>\n".into(),
        );
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    if pages.addresses_only && !host_is_an_address(headers) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            "text/plain; charset=utf-8",
            "without [web] token_file, the pages answer a request to an IP address or \
             localhost only (not a host name: DNS rebinding); open http://127.0.0.1:<port>/ \
             or set [web] token_file\n"
                .into(),
        );
    }
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the pages are read-only: GET or HEAD\n".into(),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let job = match page {
        Page::Style => {
            return text(StatusCode::OK, "text/css; charset=utf-8", STYLE.into());
        }
        Page::Fleet => Job::Fleet,
        Page::Orphans => Job::Orphans,
        Page::Spec(name) => Job::Spec(name.to_string()),
    };
    let Ok(Ok(permit)) =
        tokio::time::timeout(RENDER_WAIT, pages.renders.clone().acquire_owned()).await
    else {
        let mut response = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            "busy: other pages are being rendered; retry in a few seconds\n".into(),
        );
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("5"));
        return response;
    };
    let links = view::Links {
        file_url: pages.file_url.clone(),
        source: pages.source.clone(),
    };
    // Reading the status files (10,000 at most a few MiB) and git objects is blocking work.
    // The permit goes with it: the slot is free again when the render ends, not when the
    // request does.
    let rendered = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        job.render(&dir, &links)
    })
    .await
    .unwrap_or_else(|_| view::failed("the page could not be rendered"));
    text(rendered.0, "text/html; charset=utf-8", rendered.1)
}

/// A page to render, owned so that it can go to a blocking task.
enum Job {
    Fleet,
    Orphans,
    Spec(String),
}

impl Job {
    fn render(self, dir: &std::path::Path, links: &view::Links) -> (StatusCode, String) {
        let now = crate::util::clock::system_now();
        match self {
            Job::Fleet => view::fleet(dir, now),
            Job::Orphans => view::orphans(dir, now),
            Job::Spec(name) => view::spec(dir, &name, now, links),
        }
    }
}

/// An answer of `status` with `body`, carrying every header the pages always send.
fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests;
