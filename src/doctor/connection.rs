//! Reaching a site: its endpoint, DNS, TCP, the token's secret, TLS and authentication.

use crate::config::{SiteConfig, Trust};

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
