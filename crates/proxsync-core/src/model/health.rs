//! What the daemon's health checks found of a guest (`health` in `proxsync` makes the checks),
//! and the judgement of it against the spec's `health`: healthy, starting, failing, unhealthy.
//! Plain values: nothing a guest says is kept as text (an agent's error, an HTTP reason
//! phrase), only what proxsync names itself, so no guest can write into a status file.

// `core::net`: the address is a value here; nothing connects.
use core::net::SocketAddr;

use crate::spec::health::Health;

/// One check of one round.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Probe {
    /// What was checked.
    pub check: Check,
    /// `None`: it passed.
    pub failure: Option<Failure>,
}

/// What a check asks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Check {
    /// The guest agent answers `POST .../agent/ping`.
    Agent,
    /// A TCP connection to the address.
    Tcp(SocketAddr),
    /// An HTTP `GET` of the path.
    Http(SocketAddr, String),
}

/// Why a check failed, in proxsync's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// No answer within `checkTimeout` (seconds).
    NoAnswer(u32),
    /// The connection was refused: nothing listens on the port.
    Refused,
    /// The address cannot be reached (no route, host unreachable).
    Unreachable,
    /// The connection was reset or closed before an answer.
    Reset,
    /// Another error of the connection.
    Connection,
    /// The HTTP answer had another status.
    Status(u16),
    /// The answer is not HTTP.
    NotHttp,
    /// The VM has no guest agent configured (`agent` is off in its config).
    AgentNotConfigured,
    /// The guest agent does not answer PVE.
    AgentNotRunning,
    /// PVE could not be asked, or answered otherwise (its HTTP status; 0: no answer).
    Pve(u16),
    /// The guest reports no address to connect to, and the spec names none.
    NoAddress,
}

/// What the daemon keeps of one spec's guest between its checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GuestHealth {
    /// The guest checked: another VMID starts afresh.
    pub vmid: u32,
    /// When the guest's current run began (unix ms): a restart starts afresh.
    pub boot_ms: u64,
    /// The last round (unix ms).
    pub checked_ms: u64,
    /// The last round's checks, in the spec's order (agent, tcp, http).
    pub probes: Vec<Probe>,
    /// Failed rounds in a row.
    pub failures: u32,
    /// The first round that passed in this run (unix ms); `None`: none yet.
    pub passed_ms: Option<u64>,
    /// Since when the guest has counted as unhealthy (unix ms).
    pub unhealthy_since_ms: Option<u64>,
}

/// A spec's running guest that has not passed its health checks, as the planner counts it:
/// not Ready (its dependants wait, a set's roll counts it unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unwell {
    /// Started within its `timeout` (created, restarted) and not passed yet, or not checked yet.
    Pending,
    /// Failed `failures` rounds in a row, or did not pass within its `timeout`: a set's roll
    /// stops at it.
    Unhealthy,
}

impl Verdict {
    /// What the planner makes of this verdict: `None` when the guest counts as healthy.
    pub fn unwell(self) -> Option<Unwell> {
        match self {
            Verdict::Healthy | Verdict::Failing { .. } => None,
            Verdict::Starting { .. } => Some(Unwell::Pending),
            Verdict::Unhealthy { .. } => Some(Unwell::Unhealthy),
        }
    }
}

/// The judgement of a guest's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The last round passed.
    Healthy,
    /// It passed before, and the last `failures` rounds failed: fewer than the spec's number.
    Failing {
        /// Failed rounds in a row.
        failures: u32,
        /// The spec's `failures`.
        of: u32,
    },
    /// Started (or created, or restarted) within `timeout` and not passed yet: no failure
    /// counts until `until_ms`.
    Starting {
        /// When `timeout` runs out (unix ms).
        until_ms: u64,
    },
    /// It failed `failures` rounds in a row after passing, or never passed within `timeout`.
    Unhealthy {
        /// Since when (unix ms).
        since_ms: u64,
        /// It never passed in this run.
        never_passed: bool,
    },
}

impl GuestHealth {
    /// A guest not checked yet, in its run that began at `boot_ms`.
    pub fn new(vmid: u32, boot_ms: u64) -> GuestHealth {
        GuestHealth {
            vmid,
            boot_ms,
            checked_ms: 0,
            probes: Vec::new(),
            failures: 0,
            passed_ms: None,
            unhealthy_since_ms: None,
        }
    }

    /// Records a round made at `now_ms` against `health`.
    pub fn record(&mut self, health: &Health, probes: Vec<Probe>, now_ms: u64) {
        let passed = probes.iter().all(|p| p.failure.is_none());
        self.checked_ms = now_ms;
        self.probes = probes;
        if passed {
            self.failures = 0;
            self.passed_ms.get_or_insert(now_ms);
            self.unhealthy_since_ms = None;
            return;
        }
        self.failures = self.failures.saturating_add(1);
        let starting = self.passed_ms.is_none() && now_ms < self.deadline_ms(health);
        let enough = self.passed_ms.is_some() && self.failures >= health.failures;
        let never = self.passed_ms.is_none() && !starting;
        if (enough || never) && self.unhealthy_since_ms.is_none() {
            self.unhealthy_since_ms = Some(now_ms);
        }
    }

    /// When a guest that has not passed yet counts as unhealthy: `timeout` after its start.
    pub fn deadline_ms(&self, health: &Health) -> u64 {
        self.boot_ms
            .saturating_add(u64::from(health.timeout_secs) * 1000)
    }

    /// The judgement at `now_ms`.
    pub fn verdict(&self, health: &Health, now_ms: u64) -> Verdict {
        if let Some(since_ms) = self.unhealthy_since_ms {
            return Verdict::Unhealthy {
                since_ms,
                never_passed: self.passed_ms.is_none(),
            };
        }
        match self.passed_ms {
            Some(_) if self.failures == 0 => Verdict::Healthy,
            Some(_) => Verdict::Failing {
                failures: self.failures,
                of: health.failures,
            },
            None if now_ms < self.deadline_ms(health) => Verdict::Starting {
                until_ms: self.deadline_ms(health),
            },
            None => Verdict::Unhealthy {
                since_ms: self.deadline_ms(health),
                never_passed: true,
            },
        }
    }

    /// The first failed check of the last round.
    pub fn first_failure(&self) -> Option<(&Check, Failure)> {
        self.probes
            .iter()
            .find_map(|p| Some((&p.check, p.failure?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(failures: u32) -> Health {
        let (specs, diags) = crate::spec::parse_file(
            "h.yaml",
            format!(
                "apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata: {{name: h}}\nspec:\n  \
                 forProvider:\n    site: s\n    node: n\n    image: \"9000\"\n    health: \
                 {{tcp: {{port: 22}}, timeout: 1m, failures: {failures}}}\n"
            )
            .as_bytes(),
        );
        assert!(diags.is_empty(), "{diags:?}");
        *specs[0].health.clone().unwrap()
    }

    fn probe(ok: bool) -> Vec<Probe> {
        vec![Probe {
            check: Check::Tcp("192.0.2.10:22".parse().unwrap()),
            failure: (!ok).then_some(Failure::Refused),
        }]
    }

    #[test]
    fn a_starting_guest_has_its_timeout_before_a_failure_counts() {
        let h = health(3);
        let mut g = GuestHealth::new(100, 1_000_000);
        g.record(&h, probe(false), 1_010_000);
        assert_eq!(
            g.verdict(&h, 1_010_000),
            Verdict::Starting {
                until_ms: 1_060_000
            }
        );
        g.record(&h, probe(false), 1_061_000);
        assert_eq!(
            g.verdict(&h, 1_061_000),
            Verdict::Unhealthy {
                since_ms: 1_061_000,
                never_passed: true
            }
        );
        // Not checked again past the deadline: unhealthy since the deadline all the same.
        let fresh = GuestHealth::new(100, 1_000_000);
        assert_eq!(
            fresh.verdict(&h, 2_000_000),
            Verdict::Unhealthy {
                since_ms: 1_060_000,
                never_passed: true
            }
        );
    }

    #[test]
    fn a_healthy_guest_counts_failures_before_it_is_unhealthy_and_recovers_at_once() {
        let h = health(3);
        let mut g = GuestHealth::new(100, 0);
        g.record(&h, probe(true), 10);
        assert_eq!(g.verdict(&h, 10), Verdict::Healthy);
        g.record(&h, probe(false), 20);
        g.record(&h, probe(false), 30);
        assert_eq!(g.verdict(&h, 30), Verdict::Failing { failures: 2, of: 3 });
        g.record(&h, probe(false), 40);
        assert_eq!(
            g.verdict(&h, 40),
            Verdict::Unhealthy {
                since_ms: 40,
                never_passed: false
            }
        );
        g.record(&h, probe(false), 50);
        assert_eq!(
            g.verdict(&h, 50),
            Verdict::Unhealthy {
                since_ms: 40,
                never_passed: false
            },
            "since the first round that made it so"
        );
        g.record(&h, probe(true), 60);
        assert_eq!(g.verdict(&h, 60), Verdict::Healthy);
        assert_eq!(g.first_failure(), None);
    }
}
