//! Reaching a site: its endpoint, DNS, TCP, the token's secret, TLS and authentication.

use super::{Check, Level, check};
use crate::config::{SiteConfig, Trust};
use crate::pve::types::Version;
use crate::pve::{Client, ClientOptions, Error, TransportKind};

pub(super) fn trust_text(trust: &Trust) -> String {
    match trust {
        Trust::SystemRoots => "system roots".into(),
        Trust::CaFile(p) => format!("ca_file {}", p.display()),
        Trust::Fingerprint(fp) => format!(
            "pinned fingerprint {}",
            crate::pve::tls::format_fingerprint(fp)
        ),
    }
}

pub(super) fn trust_fix(site: &SiteConfig) -> String {
    format!(
        "copy /etc/pve/pve-root-ca.pem from a node of {} and set ca_file to it, or set fingerprint \
         to the SHA-256 that `pvenode cert info` shows for pveproxy-ssl.pem",
        site.name
    )
}

/// `<site> <what>`: the subject of a site's check.
fn subject(site: &SiteConfig, what: &str) -> String {
    let name = site.name.as_str();
    format!("{name} {what}")
}

/// The `host:port` of the site's endpoint (443 when it names no port); `None` (with a failed
/// check) when the endpoint is not https://.
pub(super) fn endpoint_addr(site: &SiteConfig, out: &mut Vec<Check>) -> Option<String> {
    let subject = |what: &str| subject(site, what);
    let Some(authority) = site
        .endpoint
        .strip_prefix("https://")
        .map(|a| a.split('/').next().unwrap_or(a))
    else {
        out.push(check(
            Level::Fail,
            subject("endpoint"),
            format!("{:?} is not https://", site.endpoint),
            None,
        ));
        return None;
    };
    Some(
        if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:443")
        },
    )
}

/// Resolves the endpoint; the first address, or `None` (with a failed check).
pub(super) async fn resolve(
    site: &SiteConfig,
    addr: &str,
    out: &mut Vec<Check>,
) -> Option<std::net::SocketAddr> {
    let subject = |what: &str| subject(site, what);
    let resolved: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(site.connect_timeout, tokio::net::lookup_host(addr)).await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(e)) => {
                out.push(check(
                    Level::Fail,
                    subject("dns"),
                    format!("cannot resolve {addr}: {e}"),
                    Some("check the site's endpoint and this host's DNS".into()),
                ));
                return None;
            }
            Err(_) => {
                out.push(check(
                    Level::Fail,
                    subject("dns"),
                    format!("resolving {addr} timed out"),
                    Some("check this host's DNS resolver".into()),
                ));
                return None;
            }
        };
    let Some(first) = resolved.first().copied() else {
        out.push(check(
            Level::Fail,
            subject("dns"),
            format!("{addr} resolves to nothing"),
            None,
        ));
        return None;
    };
    out.push(check(
        Level::Ok,
        subject("dns"),
        format!("{addr} -> {first}"),
        None,
    ));
    Some(first)
}

/// Opens a TCP connection to the endpoint; false (with a failed check) when it cannot.
pub(super) async fn connect(
    site: &SiteConfig,
    first: std::net::SocketAddr,
    out: &mut Vec<Check>,
) -> bool {
    let subject = |what: &str| subject(site, what);
    match tokio::time::timeout(site.connect_timeout, tokio::net::TcpStream::connect(first)).await {
        Ok(Ok(_)) => out.push(check(
            Level::Ok,
            subject("tcp"),
            format!("connected to {first}"),
            None,
        )),
        Ok(Err(e)) => {
            out.push(check(
                Level::Fail,
                subject("tcp"),
                format!("cannot connect to {first}: {e}"),
                Some(
                    "check that pveproxy runs on the node and port 8006 is open from this host"
                        .into(),
                ),
            ));
            return false;
        }
        Err(_) => {
            out.push(check(
                Level::Fail,
                subject("tcp"),
                format!(
                    "connecting to {first} timed out after {:?}",
                    site.connect_timeout
                ),
                Some("check firewalls between this host and the node (port 8006)".into()),
            ));
            return false;
        }
    }
    true
}

/// The site's client (reads the token's secret and sets up TLS trust), or `None` (with a
/// failed check).
pub(super) fn client(site: &SiteConfig, out: &mut Vec<Check>) -> Option<Client> {
    let subject = |what: &str| subject(site, what);
    let options = match ClientOptions::for_site(site) {
        Ok(o) => o,
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject("token"),
                e.to_string(),
                Some(
                    "create the token (pveum user token add) and store its secret in the file"
                        .into(),
                ),
            ));
            return None;
        }
    };
    match Client::new(options) {
        Ok(c) => Some(c),
        Err(e) => {
            out.push(check(
                Level::Fail,
                subject("tls"),
                e.to_string(),
                Some(trust_fix(site)),
            ));
            None
        }
    }
}

/// The first real request: TLS and authentication. PVE's version, or `None` (with a failed
/// check).
pub(super) async fn authenticate(
    site: &SiteConfig,
    client: &Client,
    out: &mut Vec<Check>,
) -> Option<Version> {
    let subject = |what: &str| subject(site, what);
    // Any HTTP answer, even a 401, means the handshake verified the certificate.
    let tls_ok = || {
        check(
            Level::Ok,
            subject("tls"),
            format!("certificate verified ({})", trust_text(&site.trust)),
            None,
        )
    };
    match client.version().await {
        Ok(v) => {
            out.push(tls_ok());
            out.push(check(
                Level::Ok,
                subject("auth"),
                format!("token {} accepted", site.token_id),
                None,
            ));
            Some(v)
        }
        Err(
            e @ Error::Transport {
                kind: TransportKind::Tls,
                ..
            },
        ) => {
            out.push(check(
                Level::Fail,
                subject("tls"),
                e.to_string(),
                Some(trust_fix(site)),
            ));
            None
        }
        Err(e) if e.status() == Some(401) => {
            out.push(tls_ok());
            out.push(check(
                Level::Fail,
                subject("auth"),
                format!("token {} refused: {}", site.token_id, e.pve_message()),
                Some(format!(
                    "check token_id and the secret file; list tokens with `pveum user token list {}`",
                    site.token_id.split('!').next().unwrap_or("")
                )),
            ));
            None
        }
        Err(e) => {
            out.push(check(Level::Fail, subject("api"), e.to_string(), None));
            None
        }
    }
}
