//! A guest's health checks in words: the `Healthy` condition's message, and `Ready`'s while
//! the guest is not healthy. Only proxsync's own words, the spec's checks and numbers: nothing
//! a guest said is kept to be said (see `model::health`).

use std::fmt;

use crate::guest::GuestKind;
use crate::model::health::{Check, Failure, GuestHealth, Verdict};
use crate::spec::health::Health;
use crate::util::time::rfc3339_secs;

fn when(ms: u64) -> String {
    rfc3339_secs((ms / 1000) as i64)
}

/// `Healthy`'s message.
pub(super) fn say(
    f: &mut fmt::Formatter<'_>,
    kind: GuestKind,
    guest: &GuestHealth,
    verdict: Verdict,
    health: &Health,
) -> fmt::Result {
    match verdict {
        Verdict::Healthy => {
            write!(f, "{} passes its checks: ", kind.named(guest.vmid))?;
            checks(f, guest, health)
        }
        Verdict::Failing { failures, of } => {
            write!(
                f,
                "{} failed its last {failures} round(s) of checks; it counts as unhealthy after \
                 {of} in a row: ",
                kind.named(guest.vmid)
            )?;
            checks(f, guest, health)
        }
        Verdict::Starting { until_ms } => {
            write!(
                f,
                "{} started at {} and has until {} (health.timeout) to pass its checks",
                kind.named(guest.vmid),
                when(guest.boot_ms),
                when(until_ms)
            )?;
            if guest.probes.is_empty() {
                return f.write_str("; not checked yet");
            }
            f.write_str("; last round: ")?;
            checks(f, guest, health)
        }
        Verdict::Unhealthy {
            since_ms,
            never_passed,
        } => {
            match never_passed {
                true => write!(
                    f,
                    "{} has not passed its checks since it started at {} (health.timeout \
                     ran out at {})",
                    kind.named(guest.vmid),
                    when(guest.boot_ms),
                    when(since_ms)
                )?,
                false => write!(
                    f,
                    "{} is unhealthy since {}, after {} failed round(s) of checks in a row",
                    kind.named(guest.vmid),
                    when(since_ms),
                    guest.failures
                )?,
            }
            if !guest.probes.is_empty() {
                f.write_str(": ")?;
                checks(f, guest, health)?;
            }
            write!(
                f,
                ". proxsync does not restart it: look at the {} (`{} status {}`, its console); \
                 it is checked again each minute and is Healthy once a round passes",
                kind.noun(),
                kind.cli(),
                guest.vmid
            )
        }
    }
}

/// `Ready` False while the guest is not healthy.
pub(super) fn not_ready(
    f: &mut fmt::Formatter<'_>,
    kind: GuestKind,
    vmid: u32,
    verdict: Option<Verdict>,
) -> fmt::Result {
    match verdict {
        None => write!(
            f,
            "{} matches the spec and waits for its first health check; see Healthy",
            kind.named(vmid)
        ),
        Some(Verdict::Starting { until_ms }) => write!(
            f,
            "{} matches the spec and waits to pass its health checks (until {}); see Healthy",
            kind.named(vmid),
            when(until_ms)
        ),
        _ => write!(
            f,
            "{} matches the spec but is not healthy; see Healthy",
            kind.named(vmid)
        ),
    }
}

/// Each check of the last round and its answer, `; `-separated.
fn checks(f: &mut fmt::Formatter<'_>, guest: &GuestHealth, health: &Health) -> fmt::Result {
    for (i, p) in guest.probes.iter().enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        match &p.check {
            Check::Agent => f.write_str("agent ping")?,
            Check::Tcp(addr) => write!(f, "tcp {addr}")?,
            Check::Http(addr, path) => write!(f, "http GET {addr}{path}")?,
        }
        match p.failure {
            None if matches!(p.check, Check::Http(..)) => f.write_str(" answered as expected")?,
            None => f.write_str(" ok")?,
            Some(failure) => {
                f.write_str(": ")?;
                say_failure(f, failure, health)?;
            }
        }
    }
    Ok(())
}

fn say_failure(f: &mut fmt::Formatter<'_>, failure: Failure, health: &Health) -> fmt::Result {
    match failure {
        Failure::NoAnswer(secs) => write!(f, "no answer within {secs}s (health.checkTimeout)"),
        Failure::Refused => f.write_str("connection refused (nothing listens on the port)"),
        Failure::Unreachable => f.write_str("the address cannot be reached"),
        Failure::Reset => f.write_str("the connection was closed before an answer"),
        Failure::Connection => f.write_str("the connection failed"),
        Failure::Status(code) => {
            write!(f, "answered HTTP {code}, expected ")?;
            match health.http.as_ref().and_then(|h| h.expect) {
                Some(expect) => write!(f, "{expect}"),
                None => f.write_str("2xx"),
            }
        }
        Failure::NotHttp => f.write_str("the answer is not HTTP"),
        Failure::AgentNotConfigured => f.write_str(
            "the VM has no guest agent configured (PVE: No QEMU guest agent configured); set \
             its agent option",
        ),
        Failure::AgentNotRunning => {
            f.write_str("the guest agent does not answer (PVE: QEMU guest agent is not running)")
        }
        Failure::Pve(0) => f.write_str("PVE did not answer"),
        Failure::Pve(status) => write!(f, "PVE answered HTTP {status}"),
        Failure::NoAddress => {
            f.write_str("the guest reports no address to connect to; name one in health.address")
        }
    }
}

/// The checks `health` names, for `plan` and a rolled-back change: `agent ping, tcp 22,
/// http GET :80/healthz`.
pub fn check_list(h: &Health) -> String {
    let mut checks = Vec::new();
    if h.agent {
        checks.push("agent ping".to_string());
    }
    if let Some(port) = h.tcp {
        checks.push(format!("tcp {port}"));
    }
    if let Some(http) = &h.http {
        checks.push(format!("http GET :{}{}", http.port, http.path));
    }
    checks.join(", ")
}

/// Why a guarded change was rolled back, in proxsync's words.
pub fn rolled_back_why(health: Option<&Health>) -> String {
    match health {
        Some(h) => format!(
            "its health checks ({}) did not pass within {} s of the change",
            check_list(h),
            h.timeout_secs
        ),
        None => "it was unhealthy after the change".into(),
    }
}

/// The description of the snapshot taken before a change of spec `spec`.
pub fn snapshot_description(spec: &str) -> String {
    format!("taken by proxsync before a change of spec {spec}")
}

#[cfg(test)]
mod tests {
    use crate::guest::GuestKind;
    use crate::model::health::{Check, Failure, GuestHealth, Probe, Verdict};
    use crate::plan::ConditionText;

    #[test]
    fn each_verdict_says_the_checks_and_what_to_do() {
        let (specs, _) = crate::spec::parse_file(
            "h.yaml",
            b"apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {name: h}\nspec:\n  \
              forProvider:\n    site: s\n    node: n\n    image: \"9000\"\n    health: \
              {agent: true, http: {port: 8080, path: /healthz, expect: 204}}\n",
        );
        let health = specs[0].health.clone().unwrap();
        let addr = "192.0.2.10:8080".parse().unwrap();
        let mut guest = GuestHealth::new(100, 1_700_000_000_000);
        guest.probes = vec![
            Probe {
                check: Check::Agent,
                failure: None,
            },
            Probe {
                check: Check::Http(addr, "/healthz".into()),
                failure: Some(Failure::Status(503)),
            },
        ];
        guest.failures = 3;
        let text = |verdict| {
            ConditionText::Health {
                kind: GuestKind::Qemu,
                guest: &guest,
                verdict,
                health: &health,
            }
            .to_string()
        };
        let unhealthy = text(Verdict::Unhealthy {
            since_ms: 1_700_000_600_000,
            never_passed: false,
        });
        assert_eq!(
            unhealthy,
            "VM 100 is unhealthy since 2023-11-14T22:23:20Z, after 3 failed round(s) of checks in \
             a row: agent ping ok; http GET 192.0.2.10:8080/healthz: answered HTTP 503, expected \
             204. proxsync does not restart it: look at the VM (`qm status 100`, its console); it \
             is checked again each minute and is Healthy once a round passes"
        );
        let starting = text(Verdict::Starting {
            until_ms: 1_700_000_300_000,
        });
        assert!(
            starting.starts_with(
                "VM 100 started at 2023-11-14T22:13:20Z and has until 2023-11-14T22:18:20Z"
            ),
            "{starting}"
        );
        let not_ready = ConditionText::NotHealthy {
            kind: GuestKind::Lxc,
            vmid: 101,
            verdict: Some(Verdict::Unhealthy {
                since_ms: 0,
                never_passed: false,
            }),
        };
        let waiting = ConditionText::WaitingForDependencies {
            kind: GuestKind::Qemu,
            on: "db-01",
            elsewhere: false,
            not_healthy: true,
        };
        assert_eq!(
            waiting.to_string(),
            "waiting for db-01 to be Ready (dependsOn), and its guest has not passed its health \
             checks yet: the VM is not created, started or rebooted until then"
        );
        assert_eq!(
            not_ready.to_string(),
            "container 101 matches the spec but is not healthy; see Healthy"
        );
    }
}
