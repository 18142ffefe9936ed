//! `forProvider.health`: what "working" means for a guest, which the daemon checks after a
//! create, after a restart and at each full cycle: its guest agent answers a ping (a VM's
//! only: a container has none), a TCP port takes a connection, an HTTP path answers with the
//! status expected. Checked against the address the spec names, else the guest's first usable
//! address (its agent's, a container's interfaces). Pure: the checks themselves are the
//! daemon's (`health` in `proxsync`).

use std::net::IpAddr;

use serde::Serialize;

use super::diag::Pos;
use super::fields::{Ctx, enum_field, object, string};
use super::hardware::{bool_field, int_field};
use super::yaml::{Node, Value};
use crate::guest::GuestKind;

/// The fields of `health`.
pub(crate) const FIELDS: &[&str] = &[
    "agent",
    "tcp",
    "http",
    "address",
    "timeout",
    "checkTimeout",
    "failures",
];
const TCP_FIELDS: &[&str] = &["port"];
const HTTP_FIELDS: &[&str] = &["port", "path", "expect"];

/// Default `timeout`: how long a guest that was just created, started or restarted has to
/// pass its checks before a failing one counts.
pub const DEFAULT_TIMEOUT_SECS: u32 = 300;
/// Default `checkTimeout`: how long one check may take.
pub const DEFAULT_CHECK_TIMEOUT_SECS: u32 = 5;
/// The longest `checkTimeout`: a cycle waits for its checks.
pub const MAX_CHECK_TIMEOUT_SECS: u32 = 30;
/// Default `failures`: failed checks in a row before a guest that passed counts as unhealthy.
pub const DEFAULT_FAILURES: u32 = 3;
/// The longest HTTP path: it goes in one request line.
pub const MAX_PATH: usize = 1024;

/// `health`: the checks and their limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `agent: true`: the guest agent answers `POST .../agent/ping` (a VM's only).
    pub agent: bool,
    /// `tcp: {port}`: the port takes a connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<u16>,
    /// `http: {port, path, expect}`: a `GET` answers with the status expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCheck>,
    /// `address`: where `tcp` and `http` connect; `None`: the guest's first usable address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// `timeout`, seconds: how long a (re)started guest has to pass.
    pub timeout_secs: u32,
    /// `checkTimeout`, seconds: how long one check may take.
    pub check_timeout_secs: u32,
    /// `failures`: failed checks in a row before a guest that passed counts as unhealthy.
    pub failures: u32,
    /// Where `health` is written.
    #[serde(skip)]
    pub pos: Pos,
}

/// `http`: the request and the answer that passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpCheck {
    /// The TCP port.
    pub port: u16,
    /// The path asked for: visible ASCII only, starting with `/` (it goes in the request line
    /// as written).
    pub path: String,
    /// The status that passes; `None`: any 2xx.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<u16>,
}

impl Health {
    /// Whether a check answered with the HTTP status `code` passes.
    pub fn http_passes(&self, code: u16) -> bool {
        match self.http.as_ref().and_then(|h| h.expect) {
            Some(expect) => code == expect,
            None => (200..300).contains(&code),
        }
    }

    /// Whether a check needs an address to connect to.
    pub fn connects(&self) -> bool {
        self.tcp.is_some() || self.http.is_some()
    }
}

/// `health` of a guest of `kind`, if written (`Some(None)`: absent; `None`: an error, reported).
pub(super) fn health_field(
    ctx: &mut Ctx,
    fp: &super::fields::Obj,
    kind: GuestKind,
) -> Option<Option<Health>> {
    let Some(n) = fp.get("health") else {
        return Some(None);
    };
    health(ctx, n, kind).map(Some)
}

fn health(ctx: &mut Ctx, n: &Node, kind: GuestKind) -> Option<Health> {
    let path = "spec.forProvider.health";
    let obj = object(ctx, n, path, Some(FIELDS))?;
    let errors = ctx.error_count();
    let agent = match obj.get("agent") {
        Some(a) => bool_field(ctx, a, "health.agent").unwrap_or_default(),
        None => false,
    };
    if agent && kind == GuestKind::Lxc {
        let at = obj.key_pos("agent").unwrap_or(n.pos);
        ctx.error(
            at,
            format!(
                "{path}.agent: a container has no guest agent; check it with tcp: {{port: N}} \
                 or http: {{port: N, path: /...}} instead"
            ),
        );
    }
    let tcp = obj.get("tcp").and_then(|t| {
        let o = object(ctx, t, &format!("{path}.tcp"), Some(TCP_FIELDS))?;
        let p = o.required(ctx, "port", "the TCP port to connect to, e.g. 22")?;
        port(ctx, p, "health.tcp.port")
    });
    let http = obj.get("http").and_then(|h| http(ctx, h));
    let address = obj.get("address").and_then(|a| address(ctx, a));
    let timeout_secs = obj.get("timeout").map_or(Some(DEFAULT_TIMEOUT_SECS), |t| {
        duration(ctx, t, &format!("{path}.timeout"), 10, 86_400)
    });
    let check_timeout_secs =
        obj.get("checkTimeout")
            .map_or(Some(DEFAULT_CHECK_TIMEOUT_SECS), |t| {
                duration(
                    ctx,
                    t,
                    &format!("{path}.checkTimeout"),
                    1,
                    MAX_CHECK_TIMEOUT_SECS,
                )
            });
    let failures = obj.get("failures").map_or(Some(DEFAULT_FAILURES), |f| {
        int_field(ctx, f, "health.failures", 1, 100).map(|f| f as u32)
    });
    if !agent && obj.get("tcp").is_none() && obj.get("http").is_none() {
        ctx.error(
            n.pos,
            format!(
                "{path} names no check; write at least one of agent: true (a VM's), tcp: {{port: \
                 N}} or http: {{port: N, path: /...}}"
            ),
        );
    }
    if ctx.error_count() > errors {
        return None;
    }
    Some(Health {
        agent,
        tcp,
        http,
        address,
        timeout_secs: timeout_secs?,
        check_timeout_secs: check_timeout_secs?,
        failures: failures?,
        pos: n.pos,
    })
}

/// The fields of `changePolicy`.
pub(crate) const CHANGE_FIELDS: &[&str] = &["snapshot", "rollback", "keep"];
/// Default `keep`: the snapshots of proxsync's own a guest keeps after a change that passed.
pub const DEFAULT_KEEP: u32 = 1;
/// The most snapshots `keep` may ask for: each holds the guest's disks as they were.
pub const MAX_KEEP: u32 = 10;

/// `changePolicy.snapshot`: before which changes proxsync snapshots the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SnapshotWhen {
    /// Before a change that waits for the guest's next start (a running guest's change PVE
    /// keeps pending); held where no snapshot can be taken.
    BeforeRestart,
    /// Before any change of the guest's config; held where no snapshot can be taken.
    BeforeAnyChange,
    /// As `BeforeRestart`, and applied unprotected where no snapshot can be taken.
    IfPossible,
    /// Never.
    Never,
}

/// `changePolicy.rollback`: what follows a change after which the guest is unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RollbackWhen {
    /// Roll back to the snapshot taken before the change and start the guest.
    OnUnhealthy,
    /// Report it only.
    Never,
}

/// `changePolicy`: what guards a change of the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangePolicy {
    /// When a snapshot is taken.
    pub snapshot: SnapshotWhen,
    /// Whether an unhealthy guest is rolled back.
    pub rollback: RollbackWhen,
    /// How many of proxsync's own snapshots a guest keeps after a change that passed.
    pub keep: u32,
    /// Where `changePolicy` is written.
    #[serde(skip)]
    pub pos: Pos,
}

impl ChangePolicy {
    /// Whether a change is snapshotted first: any change, or one that waits for a restart.
    pub fn snapshots(&self, waits_for_restart: bool) -> bool {
        match self.snapshot {
            SnapshotWhen::BeforeAnyChange => true,
            SnapshotWhen::BeforeRestart | SnapshotWhen::IfPossible => waits_for_restart,
            SnapshotWhen::Never => false,
        }
    }
}

/// `changePolicy`, read against the spec's `health` (`Some(None)`: absent; `None`: an error,
/// reported).
pub(super) fn change_policy_field(
    ctx: &mut Ctx,
    fp: &super::fields::Obj,
) -> Option<Option<ChangePolicy>> {
    let Some(n) = fp.get("changePolicy") else {
        return Some(None);
    };
    let path = "spec.forProvider.changePolicy";
    let obj = object(ctx, n, path, Some(CHANGE_FIELDS))?;
    let snapshot = match obj.get("snapshot") {
        Some(s) => enum_field(
            ctx,
            s,
            &format!("{path}.snapshot"),
            &[
                ("BeforeRestart", SnapshotWhen::BeforeRestart),
                ("BeforeAnyChange", SnapshotWhen::BeforeAnyChange),
                ("IfPossible", SnapshotWhen::IfPossible),
                ("Never", SnapshotWhen::Never),
            ],
        ),
        None => Some(SnapshotWhen::BeforeRestart),
    };
    let rollback = match obj.get("rollback") {
        Some(r) => enum_field(
            ctx,
            r,
            &format!("{path}.rollback"),
            &[
                ("OnUnhealthy", RollbackWhen::OnUnhealthy),
                ("Never", RollbackWhen::Never),
            ],
        ),
        None => Some(RollbackWhen::OnUnhealthy),
    };
    let keep = obj.get("keep").map_or(Some(DEFAULT_KEEP), |k| {
        int_field(ctx, k, "changePolicy.keep", 0, u64::from(MAX_KEEP)).map(|k| k as u32)
    });
    let (snapshot, rollback, keep) = (snapshot?, rollback?, keep?);
    let health = fp.get("health").is_some();
    let at = |key: &str| obj.key_pos(key).unwrap_or(n.pos);
    if rollback == RollbackWhen::OnUnhealthy && snapshot == SnapshotWhen::Never {
        ctx.error(
            at("rollback"),
            format!(
                "{path}.rollback: OnUnhealthy rolls back to the snapshot taken before a change, \
                 and snapshot: Never takes none; write snapshot: BeforeRestart, or rollback: Never"
            ),
        );
        return None;
    }
    if rollback == RollbackWhen::OnUnhealthy && !health {
        ctx.error(
            at("rollback"),
            format!(
                "{path}.rollback: OnUnhealthy (the default) needs health: to say when the guest \
                 is unhealthy; add health: {{tcp: {{port: N}}}} (or agent: true, http: ...), or \
                 write rollback: Never"
            ),
        );
        return None;
    }
    Some(Some(ChangePolicy {
        snapshot,
        rollback,
        keep,
        pos: n.pos,
    }))
}

fn port(ctx: &mut Ctx, n: &Node, field: &str) -> Option<u16> {
    int_field(ctx, n, field, 1, 65_535).map(|p| p as u16)
}

fn http(ctx: &mut Ctx, n: &Node) -> Option<HttpCheck> {
    let path = "spec.forProvider.health.http";
    let o = object(ctx, n, path, Some(HTTP_FIELDS))?;
    let port = o
        .required(ctx, "port", "the TCP port of the HTTP server, e.g. 80")
        .and_then(|p| port(ctx, p, "health.http.port"));
    let url_path = match o.get("path") {
        Some(p) => url_path(ctx, p, &format!("{path}.path")),
        None => Some("/".to_string()),
    };
    let expect = match o.get("expect") {
        Some(e) => int_field(ctx, e, "health.http.expect", 100, 599).map(|c| Some(c as u16)),
        None => Some(None),
    };
    Some(HttpCheck {
        port: port?,
        path: url_path?,
        expect: expect?,
    })
}

/// An HTTP path as it goes in the request line: `/` first, then visible ASCII only (no space,
/// which would end the path, and no control character, which would end the line).
fn url_path(ctx: &mut Ctx, n: &Node, path: &str) -> Option<String> {
    let s = string(ctx, n, path, "\"/healthz\"")?;
    let checked = if !s.starts_with('/') {
        Err(format!("{path} {s:?} must start with /, e.g. /healthz"))
    } else if s.len() > MAX_PATH {
        Err(format!(
            "{path} is {} bytes long; at most {MAX_PATH}",
            s.len()
        ))
    } else if let Some(c) = s.chars().find(|c| !c.is_ascii_graphic()) {
        Err(format!(
            "{path} holds {c:?}; a path is visible ASCII only: write a space as %20 and any \
             other character percent-encoded"
        ))
    } else {
        Ok(s.to_string())
    };
    ctx.check(n.pos, checked)
}

/// An IP address literal, IPv4 or IPv6, that a connection can go to.
fn address(ctx: &mut Ctx, n: &Node) -> Option<IpAddr> {
    let path = "spec.forProvider.health.address";
    let s = string(ctx, n, path, "\"192.0.2.10\"")?;
    let checked = match s.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() || ip.is_multicast() => Err(format!(
            "{path} {s:?} is not an address a connection can go to; name the guest's address"
        )),
        Ok(ip) => Ok(ip),
        Err(_) => Err(format!(
            "{path} {s:?} is not an IP address; write one such as 192.0.2.10 or 2001:db8::10 \
             (no host name: it would be looked up on the daemon's machine, not the guest's \
             network)"
        )),
    };
    ctx.check(n.pos, checked)
}

/// A duration in `min..=max` seconds, written with a unit.
fn duration(ctx: &mut Ctx, n: &Node, path: &str, min: u32, max: u32) -> Option<u32> {
    if let Value::Int(i) = n.value {
        ctx.error(
            n.pos,
            format!("{path} must be a duration with a unit, e.g. \"{i}s\" or \"{i}m\"; found the number {i}"),
        );
        return None;
    }
    let s = string(ctx, n, path, "\"5m\"")?;
    let d = ctx.check(
        n.pos,
        crate::util::duration::parse_duration(s).map_err(|e| format!("{path} {s:?}: {e}")),
    )?;
    let secs = d.as_secs();
    if secs < u64::from(min) || secs > u64::from(max) || d.subsec_nanos() != 0 {
        ctx.error(
            n.pos,
            format!(
                "{path} {s:?} is outside {} .. {} (whole seconds)",
                short_secs(min),
                short_secs(max)
            ),
        );
        return None;
    }
    Some(secs as u32)
}

/// Seconds as the largest whole unit: `10s`, `1m`, `1d`.
fn short_secs(secs: u32) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> (Option<Health>, Vec<String>) {
        let (specs, diags) = crate::spec::parse_test_spec(extra);
        (
            specs.into_iter().next().and_then(|s| s.health.map(|h| *h)),
            diags,
        )
    }

    #[test]
    fn health_is_read_with_its_defaults() {
        let (h, diags) = parse(
            "    health:\n      agent: true\n      tcp: {port: 22}\n      http: {port: 8080, path: /healthz?full=1, expect: 204}\n",
        );
        assert!(diags.is_empty(), "{diags:?}");
        let h = h.unwrap();
        assert!(h.agent);
        assert_eq!(h.tcp, Some(22));
        assert_eq!(
            h.http,
            Some(HttpCheck {
                port: 8080,
                path: "/healthz?full=1".into(),
                expect: Some(204)
            })
        );
        assert_eq!(
            (h.address, h.timeout_secs, h.check_timeout_secs, h.failures),
            (None, 300, 5, 3)
        );
        assert!(h.http_passes(204) && !h.http_passes(200));
        let (h, _) = parse(
            "    health:\n      http: {port: 80}\n      address: \"2001:db8::10\"\n      timeout: 10m\n      checkTimeout: 2s\n      failures: 1\n",
        );
        let h = h.unwrap();
        assert_eq!(h.http.as_ref().unwrap().path, "/");
        assert!(h.http_passes(200) && h.http_passes(299) && !h.http_passes(301));
        assert_eq!(
            (
                h.address.unwrap().to_string(),
                h.timeout_secs,
                h.check_timeout_secs,
                h.failures
            ),
            ("2001:db8::10".to_string(), 600, 2, 1)
        );
        assert!(parse("").0.is_none(), "absent: no checks");
    }

    #[test]
    fn bad_health_is_refused_at_its_line() {
        for (extra, want) in [
            (
                "    health: {}\n",
                "web.yaml:9:13: error: spec.forProvider.health names no check",
            ),
            (
                "    health: {agent: yes}\n",
                "health.agent must be true or false",
            ),
            ("    health: {tcp: {port: 0}}\n", "health.tcp.port"),
            (
                "    health: {tcp: {}}\n",
                "missing required field spec.forProvider.health.tcp.port",
            ),
            (
                "    health: {tcp: {port: 22}, ping: true}\n",
                "unknown field \"ping\" in spec.forProvider.health",
            ),
            (
                "    health: {http: {port: 80, path: healthz}}\n",
                "must start with /",
            ),
            (
                "    health: {http: {port: 80, path: \"/a b\"}}\n",
                "a path is visible ASCII only",
            ),
            (
                "    health: {http: {port: 80, path: \"/a\\r\\nX-Injected: 1\"}}\n",
                "a path is visible ASCII only",
            ),
            (
                "    health: {http: {port: 80, expect: 700}}\n",
                "health.http.expect",
            ),
            (
                "    health: {tcp: {port: 22}, address: db.example}\n",
                "is not an IP address",
            ),
            (
                "    health: {tcp: {port: 22}, address: 0.0.0.0}\n",
                "is not an address a connection can go to",
            ),
            (
                "    health: {tcp: {port: 22}, timeout: 5}\n",
                "must be a duration with a unit",
            ),
            (
                "    health: {tcp: {port: 22}, timeout: 2d}\n",
                "is outside 10s .. 1d",
            ),
            (
                "    health: {tcp: {port: 22}, checkTimeout: 2m}\n",
                "is outside 1s .. 30s",
            ),
            (
                "    health: {tcp: {port: 22}, failures: 0}\n",
                "health.failures",
            ),
        ] {
            let (h, diags) = parse(extra);
            assert!(h.is_none(), "{extra}");
            assert!(diags.iter().any(|d| d.contains(want)), "{extra}: {diags:?}");
        }
    }

    #[test]
    fn a_container_has_no_agent_to_ping() {
        let yaml = "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata: {name: ct}\nspec:\n  \
                    forProvider:\n    site: s\n    node: n\n    template: local:vztmpl/t.tar.zst\n    \
                    health: {agent: true}\n";
        let (specs, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
        assert!(specs.is_empty());
        assert!(
            diags.iter().any(|d| d.to_string().contains(
                "ct.yaml:9:14: error: spec.forProvider.health.agent: a container has no guest agent"
            )),
            "{diags:?}"
        );
        let ok = yaml.replace("{agent: true}", "{tcp: {port: 80}}");
        let (specs, diags) = crate::spec::parse_file("ct.yaml", ok.as_bytes());
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(specs[0].health.as_ref().unwrap().tcp, Some(80));
    }
}
