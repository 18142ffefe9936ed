//! The HTTP requests of each target type, built from a message (pure: no I/O, no clock).
//!
//! - webhook: `POST <url>` with a JSON body `{version, id, timestamp, install_id, dropped,
//!   truncated, events}` and `X-Proxsync-Signature-256: sha256=<hex HMAC-SHA256 of the body>`;
//! - slack: `POST <url>` with `{"text": ...}`, one line per event;
//! - gitea/forgejo, github, gitlab: one commit status per commit, context
//!   `proxsync/<install_id>`.

use serde::Serialize;

use super::events::{CommitState, Event};
use crate::config::{NotifyKind, Secret};

/// At most this many events go in one webhook message; the rest are counted (`truncated`).
pub(crate) const MAX_WEBHOOK_EVENTS: usize = 200;

/// At most this many lines of events go in one Slack message.
pub(crate) const MAX_SLACK_LINES: usize = 20;

/// The signature header of a webhook.
pub const SIGNATURE_HEADER: &str = "X-Proxsync-Signature-256";

/// The version of the webhook body's shape (its `version`): 2 since the events about a guest
/// name its `kind`; 1 had no `version` field. docs/output.md.
pub(crate) const WEBHOOK_VERSION: u32 = 2;

/// What one send carries: the events of the batches coalesced, and how many batches the
/// queue dropped before them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    pub events: Vec<Event>,
    pub dropped: u64,
}

/// One request to send.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub url: String,
    /// Header name and value; `sensitive` ones are marked so for reqwest (never logged).
    pub headers: Vec<Header>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub name: &'static str,
    pub value: String,
    pub sensitive: bool,
}

fn header(name: &'static str, value: impl Into<String>) -> Header {
    Header {
        name,
        value: value.into(),
        sensitive: false,
    }
}

/// `sha256=<hex>`: HMAC-SHA256 of `body` keyed with `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, body);
    format!("sha256={}", hex(tag.as_ref()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Serialize)]
struct WebhookBody<'a> {
    /// [`WEBHOOK_VERSION`].
    version: u32,
    /// Unique per message (retries resend the same body): receivers drop repeats by it.
    id: &'a str,
    /// Unix seconds when the message was made: receivers drop old ones.
    timestamp: u64,
    install_id: &'a str,
    /// Batches dropped because the queue was full (this target was too slow or down).
    dropped: u64,
    /// Events left out of this message (over [`MAX_WEBHOOK_EVENTS`]).
    truncated: usize,
    events: &'a [Event],
}

/// The generic webhook's request: the exact body bytes are what the signature covers.
pub(crate) fn webhook(
    url: &str,
    key: &Secret,
    install_id: &str,
    msg: &Message,
    id: &str,
    timestamp: u64,
) -> Request {
    let shown = msg.events.len().min(MAX_WEBHOOK_EVENTS);
    let body = serde_json::to_vec(&WebhookBody {
        version: WEBHOOK_VERSION,
        id,
        timestamp,
        install_id,
        dropped: msg.dropped,
        truncated: msg.events.len() - shown,
        events: &msg.events[..shown],
    })
    .unwrap_or_default();
    Request {
        url: url.to_string(),
        headers: vec![
            header("Content-Type", "application/json"),
            header(SIGNATURE_HEADER, signature(key.expose().as_bytes(), &body)),
            header("X-Proxsync-Delivery", id),
        ],
        body,
    }
}

/// A Slack-compatible incoming webhook's request: `{"text": ...}` in Slack's mrkdwn.
pub(crate) fn slack(url: &str, install_id: &str, msg: &Message) -> Request {
    let mut lines = vec![format!(
        "*proxsync* ({}): {} {}",
        escape(install_id),
        msg.events.len(),
        if msg.events.len() == 1 {
            "change"
        } else {
            "changes"
        }
    )];
    lines.extend(msg.events.iter().take(MAX_SLACK_LINES).map(slack_line));
    if msg.events.len() > MAX_SLACK_LINES {
        lines.push(format!("…and {} more", msg.events.len() - MAX_SLACK_LINES));
    }
    if msg.dropped > 0 {
        lines.push(format!(
            "({} earlier batches were dropped: this target was too slow)",
            msg.dropped
        ));
    }
    let body =
        serde_json::to_vec(&serde_json::json!({ "text": lines.join("\n") })).unwrap_or_default();
    Request {
        url: url.to_string(),
        headers: vec![header("Content-Type", "application/json")],
        body,
    }
}

/// One line of a Slack message.
fn slack_line(e: &Event) -> String {
    let line = match e {
        Event::SpecStalled {
            spec,
            reason,
            message,
        } => format!(":red_circle: `{spec}` Stalled: {reason}: {message}"),
        Event::SpecReady { spec } => format!(":large_green_circle: `{spec}` Ready"),
        Event::SpecDrifted { spec, message } => {
            format!(":warning: `{spec}` drifted (observe-only, not applied): {message}")
        }
        Event::SpecSuspended { spec, message } => {
            format!(":double_vertical_bar: `{spec}` {message}")
        }
        Event::SpecResumed { spec, kind } => format!(
            ":arrow_forward: `{spec}` resumed: proxsync acts on its {} again",
            kind.noun()
        ),
        Event::SpecUnhealthy { spec, message, .. } => {
            format!(":ambulance: `{spec}` unhealthy: {message}")
        }
        Event::SpecDeleted {
            spec,
            site,
            vmid,
            kind,
        } => format!(
            ":wastebasket: `{spec}` removed: {} on {site} deleted",
            kind.named(*vmid)
        ),
        Event::SpecReleased {
            spec,
            site,
            vmid,
            kind,
        } => format!(
            ":link: `{spec}` removed: {} on {site} released (it stays)",
            kind.named(*vmid)
        ),
        Event::OrphanFound {
            site,
            vmid,
            kind,
            name,
            duplicate_of,
        } => format!(
            ":grey_question: orphan {}{} on {site}{}",
            kind.named(*vmid),
            name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default(),
            duplicate_of
                .as_ref()
                .map(|s| format!(", a second {} of spec `{s}`", kind.noun()))
                .unwrap_or_default()
        ),
        Event::OrphanDeleted { site, vmid, kind } => {
            format!(
                ":wastebasket: orphan {} on {site} deleted",
                kind.named(*vmid)
            )
        }
        Event::DeletesRefused { reasons } => {
            format!(":no_entry: deletes refused: {}", reasons.join("; "))
        }
        Event::SiteUnreachable { site, error } => {
            format!(":warning: site {site} unreachable: {error}")
        }
        Event::SiteReachable { site } => format!(":white_check_mark: site {site} reachable again"),
        Event::CommitState {
            commit,
            state,
            description,
            ..
        } => format!(
            "{} commit {}: {}",
            match state {
                CommitState::Success => ":white_check_mark:",
                CommitState::Pending => ":hourglass_flowing_sand:",
                CommitState::Failure | CommitState::Refused => ":x:",
            },
            short(commit),
            description
        ),
        Event::CommitRefused { commit, reason } => {
            format!(":x: commit {} refused: {reason}", short(commit))
        }
        Event::CommitRewound { commit, from } => format!(
            ":rewind: commit {} rewinds the branch: it does not descend from {}, the commit \
             applied before it",
            short(commit),
            short(from)
        ),
    };
    // One line per event: a line break in a message (a spec file's path, PVE's words) would
    // start what reads as another event.
    let line: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    escape(&super::clip_chars(&line, 500))
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Slack's three control characters, as Slack's "Escaping text" asks: `&`, `<` and `>` as
/// `&amp;`, `&lt;` and `&gt;`, so no text is read as markup (`<!channel>`, `<!here>`,
/// `<@U123>`, `<https://x|label>`).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The forge's word for a state.
fn forge_state(kind: NotifyKind, state: CommitState) -> &'static str {
    match (kind, state) {
        (NotifyKind::Gitlab, CommitState::Pending) => "running",
        (NotifyKind::Gitlab, CommitState::Failure | CommitState::Refused) => "failed",
        (_, CommitState::Pending) => "pending",
        (_, CommitState::Success) => "success",
        (_, CommitState::Failure) => "failure",
        (_, CommitState::Refused) => "error",
    }
}

/// The commit-status requests of a forge: one per commit, its latest state only.
pub(crate) fn commit_statuses(
    kind: NotifyKind,
    base: &str,
    repo: &str,
    token: &Secret,
    install_id: &str,
    msg: &Message,
) -> Vec<Request> {
    let context = format!("proxsync/{install_id}");
    // The last state of each commit wins; commits keep the order they first appeared in.
    let mut latest: Vec<(&str, CommitState, &str)> = Vec::new();
    for (commit, state, description) in msg.events.iter().filter_map(Event::commit_status) {
        match latest.iter_mut().find(|(c, _, _)| *c == commit) {
            Some(entry) => *entry = (commit, state, description),
            None => latest.push((commit, state, description)),
        }
    }
    latest
        .into_iter()
        .filter(|(commit, _, _)| is_commit_id(commit))
        .map(|(commit, state, description)| {
            let description = super::clip_chars(description, 140);
            let state = forge_state(kind, state);
            let (url, body, auth) = match kind {
                NotifyKind::Gitlab => (
                    format!(
                        "{base}/api/v4/projects/{}/statuses/{commit}",
                        repo.replace('/', "%2F")
                    ),
                    serde_json::json!({"state": state, "name": context, "description": description}),
                    ("PRIVATE-TOKEN", token.expose().to_string()),
                ),
                NotifyKind::Github => (
                    format!("{base}/repos/{repo}/statuses/{commit}"),
                    serde_json::json!({"state": state, "context": context, "description": description}),
                    ("Authorization", format!("Bearer {}", token.expose())),
                ),
                _ => (
                    format!("{base}/api/v1/repos/{repo}/statuses/{commit}"),
                    serde_json::json!({"state": state, "context": context, "description": description}),
                    ("Authorization", format!("token {}", token.expose())),
                ),
            };
            let mut headers = vec![
                header("Content-Type", "application/json"),
                Header {
                    name: auth.0,
                    value: auth.1,
                    sensitive: true,
                },
            ];
            if kind == NotifyKind::Github {
                headers.push(header("Accept", "application/vnd.github+json"));
                headers.push(header("X-GitHub-Api-Version", "2022-11-28"));
            }
            Request {
                url,
                headers,
                body: serde_json::to_vec(&body).unwrap_or_default(),
            }
        })
        .collect()
}

/// A full SHA-1 or SHA-256 commit id (it goes into a URL path).
fn is_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::GuestKind;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn state(commit: &str, state: CommitState) -> Event {
        Event::CommitState {
            commit: commit.into(),
            state,
            description: format!("{state:?}"),
            stalled: vec![],
        }
    }

    #[test]
    fn the_signature_is_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_webhook_body_is_signed_as_sent_and_capped() {
        let msg = Message {
            events: (0..250)
                .map(|i| Event::SpecReady {
                    spec: format!("s{i}"),
                })
                .collect(),
            dropped: 3,
        };
        let r = webhook(
            "https://h.example/x",
            &Secret::new("k"),
            "main",
            &msg,
            "abc",
            1_700_000_000,
        );
        let sig = r
            .headers
            .iter()
            .find(|h| h.name == SIGNATURE_HEADER)
            .unwrap();
        assert_eq!(sig.value, signature(b"k", &r.body));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["id"], "abc");
        assert_eq!(v["timestamp"], 1_700_000_000);
        assert_eq!(v["dropped"], 3);
        assert_eq!(v["truncated"], 50);
        assert_eq!(v["events"].as_array().unwrap().len(), MAX_WEBHOOK_EVENTS);
        assert_eq!(
            v["events"][0],
            serde_json::json!({"type": "spec_ready", "spec": "s0"})
        );
    }

    /// The events about one guest of each kind, and the Slack line each makes.
    fn guest_events(kind: GuestKind) -> Vec<(Event, &'static str)> {
        let site = || "lab".to_string();
        let pick = |vm: &'static str, ct: &'static str| match kind {
            GuestKind::Qemu => vm,
            GuestKind::Lxc => ct,
        };
        vec![
            (
                Event::SpecResumed {
                    spec: "web".into(),
                    kind,
                },
                pick(
                    ":arrow_forward: `web` resumed: proxsync acts on its VM again",
                    ":arrow_forward: `web` resumed: proxsync acts on its container again",
                ),
            ),
            (
                Event::SpecDeleted {
                    spec: "web".into(),
                    site: site(),
                    vmid: 101,
                    kind,
                },
                pick(
                    ":wastebasket: `web` removed: VM 101 on lab deleted",
                    ":wastebasket: `web` removed: container 101 on lab deleted",
                ),
            ),
            (
                Event::SpecReleased {
                    spec: "web".into(),
                    site: site(),
                    vmid: 101,
                    kind,
                },
                pick(
                    ":link: `web` removed: VM 101 on lab released (it stays)",
                    ":link: `web` removed: container 101 on lab released (it stays)",
                ),
            ),
            (
                Event::OrphanFound {
                    site: site(),
                    vmid: 120,
                    kind,
                    name: Some("old".into()),
                    duplicate_of: Some("web".into()),
                },
                pick(
                    ":grey_question: orphan VM 120 (old) on lab, a second VM of spec `web`",
                    ":grey_question: orphan container 120 (old) on lab, a second container of \
                     spec `web`",
                ),
            ),
            (
                Event::OrphanDeleted {
                    site: site(),
                    vmid: 120,
                    kind,
                },
                pick(
                    ":wastebasket: orphan VM 120 on lab deleted",
                    ":wastebasket: orphan container 120 on lab deleted",
                ),
            ),
        ]
    }

    #[test]
    fn slack_names_each_guests_kind() {
        for kind in [GuestKind::Qemu, GuestKind::Lxc] {
            let (events, lines): (Vec<Event>, Vec<&str>) = guest_events(kind).into_iter().unzip();
            let r = slack(
                "https://hooks.example/T/B/X",
                "main",
                &Message { events, dropped: 0 },
            );
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let text = v["text"].as_str().unwrap();
            assert_eq!(text.lines().skip(1).collect::<Vec<_>>(), lines, "{kind:?}");
        }
    }

    /// The webhook's body says its version, and each event about a guest its kind, in the
    /// words of `plan --json` (`qemu`, `lxc`).
    #[test]
    fn the_webhook_body_is_version_2_and_names_each_guests_kind() {
        for (kind, word) in [(GuestKind::Qemu, "qemu"), (GuestKind::Lxc, "lxc")] {
            let events: Vec<Event> = guest_events(kind).into_iter().map(|(e, _)| e).collect();
            let n = events.len();
            let msg = Message { events, dropped: 0 };
            let r = webhook(
                "https://h.example/x",
                &Secret::new("k"),
                "main",
                &msg,
                "id",
                1,
            );
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(v["version"], WEBHOOK_VERSION);
            assert_eq!(WEBHOOK_VERSION, 2);
            for i in 0..n {
                assert_eq!(v["events"][i]["kind"], word, "{}", v["events"][i]);
            }
            assert_eq!(
                v["events"][1],
                serde_json::json!({"type": "spec_deleted", "spec": "web", "site": "lab",
                                   "vmid": 101, "kind": word})
            );
            assert_eq!(
                v["events"][4],
                serde_json::json!({"type": "orphan_deleted", "site": "lab", "vmid": 120,
                                   "kind": word})
            );
        }
    }

    #[test]
    fn slack_text_is_escaped_and_capped() {
        let mut events = vec![Event::SpecStalled {
            spec: "web".into(),
            reason: "ImageNotFound".into(),
            message: "no <template> & no volume".into(),
        }];
        events.extend((0..30).map(|i| Event::SpecReady {
            spec: format!("s{i}"),
        }));
        let r = slack(
            "https://hooks.example/T/B/X",
            "main",
            &Message { events, dropped: 0 },
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let text = v["text"].as_str().unwrap();
        assert!(
            text.contains("no &lt;template&gt; &amp; no volume"),
            "{text}"
        );
        assert!(text.contains("…and 11 more"), "{text}");
        assert_eq!(text.lines().count(), 1 + MAX_SLACK_LINES + 1);
    }

    /// Text a committer (a spec file's path, a label in a validation message), PVE or a guest
    /// (an error, a VM's name) can put in an event's strings.
    const HOSTILE: &[&str] = &[
        "<!channel>",
        "<!here|here>",
        "<https://evil.example/login|click to re-authenticate>",
        "<@U0123ABC> <#C0123ABC>",
        "&lt;!channel&gt; & &amp;",
        "line1\n:large_green_circle: `db-01` Ready\r\n",
        "{{ lookup('pipe','touch MARK') }}",
        "\"quoted\" \\back\\slash\u{0}\u{1b}[2J\u{7f}\u{85}\u{2028}\u{202e}",
        "</script><script>alert(1)</script>",
    ];

    /// One event of every kind, each string field `s`.
    fn every_event(s: &str) -> Vec<Event> {
        let s = || s.to_string();
        vec![
            Event::SpecStalled {
                spec: s(),
                reason: s(),
                message: s(),
            },
            Event::SpecReady { spec: s() },
            Event::SpecDrifted {
                spec: s(),
                message: s(),
            },
            Event::SpecSuspended {
                spec: s(),
                message: s(),
            },
            Event::SpecResumed {
                spec: s(),
                kind: GuestKind::Lxc,
            },
            Event::SpecDeleted {
                spec: s(),
                site: s(),
                vmid: 1,
                kind: GuestKind::Lxc,
            },
            Event::SpecReleased {
                spec: s(),
                site: s(),
                vmid: 1,
                kind: GuestKind::Qemu,
            },
            Event::OrphanFound {
                site: s(),
                vmid: 1,
                kind: GuestKind::Lxc,
                name: Some(s()),
                duplicate_of: Some(s()),
            },
            Event::OrphanDeleted {
                site: s(),
                vmid: 1,
                kind: GuestKind::Lxc,
            },
            Event::DeletesRefused {
                reasons: vec![s(), s()],
            },
            Event::SiteUnreachable {
                site: s(),
                error: s(),
            },
            Event::SiteReachable { site: s() },
            Event::CommitState {
                commit: s(),
                state: CommitState::Failure,
                description: s(),
                stalled: vec![super::super::events::StalledSpec {
                    spec: s(),
                    reason: s(),
                    message: s(),
                }],
            },
            Event::CommitRefused {
                commit: s(),
                reason: s(),
            },
            Event::CommitRewound {
                commit: s(),
                from: s(),
            },
        ]
    }

    #[test]
    fn hostile_text_reaches_slack_as_text_one_line_per_event() {
        for h in HOSTILE {
            let events = every_event(h);
            let r = slack(
                "https://hooks.example/T/B/X",
                "main",
                &Message {
                    events: events.clone(),
                    dropped: 0,
                },
            );
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let text = v["text"].as_str().unwrap();
            // No markup at all: proxsync's messages never link or mention.
            assert!(!text.contains(['<', '>']), "{text}");
            for (at, _) in text.match_indices('&') {
                let rest = &text[at..];
                assert!(
                    ["&amp;", "&lt;", "&gt;"]
                        .iter()
                        .any(|e| rest.starts_with(e)),
                    "{text}"
                );
            }
            assert_eq!(text.lines().count(), 1 + events.len(), "{text}");
            assert!(
                !text.contains(|c: char| c.is_control() && c != '\n'),
                "{text:?}"
            );
            // Slack shows the text as it was, its line breaks as spaces.
            let shown = text
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            let flat: String = h
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            assert!(shown.contains(&flat), "{flat:?} not in {shown}");
        }
    }

    #[test]
    fn hostile_text_reaches_the_webhook_as_it_was_signed() {
        for h in HOSTILE {
            let events = every_event(h);
            let msg = Message {
                events: events.clone(),
                dropped: 0,
            };
            let r = webhook("https://h.example/x", &Secret::new("k"), h, &msg, "id", 1);
            let sig = r
                .headers
                .iter()
                .find(|x| x.name == SIGNATURE_HEADER)
                .unwrap();
            assert_eq!(sig.value, signature(b"k", &r.body));
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(v["install_id"], *h);
            assert_eq!(v["events"], serde_json::to_value(&events).unwrap());
            assert_eq!(v["events"][0]["message"], *h);
        }
    }

    #[test]
    fn hostile_text_reaches_a_forge_as_its_description_only() {
        let token = Secret::new("t");
        for h in HOSTILE {
            let msg = Message {
                events: vec![
                    Event::CommitState {
                        commit: SHA.into(),
                        state: CommitState::Failure,
                        description: h.to_string(),
                        stalled: vec![],
                    },
                    // A commit id that is no commit id goes in no URL.
                    Event::CommitRefused {
                        commit: h.to_string(),
                        reason: h.to_string(),
                    },
                ],
                dropped: 0,
            };
            for kind in [NotifyKind::Gitea, NotifyKind::Github, NotifyKind::Gitlab] {
                let rs =
                    commit_statuses(kind, "https://g.example", "ops/vms", &token, "main", &msg);
                assert_eq!(rs.len(), 1, "{kind:?}");
                assert!(
                    rs[0].url.ends_with(&format!("/statuses/{SHA}")),
                    "{}",
                    rs[0].url
                );
                let v: serde_json::Value = serde_json::from_slice(&rs[0].body).unwrap();
                assert_eq!(v["description"], *h, "{kind:?}");
                for header in &rs[0].headers {
                    assert!(!header.value.contains(*h), "{kind:?}");
                }
            }
        }
    }

    #[test]
    fn a_rewind_is_told_with_both_commits_and_posts_no_commit_status() {
        let from = "fedcba9876543210fedcba9876543210fedcba98";
        let msg = Message {
            events: vec![Event::CommitRewound {
                commit: SHA.into(),
                from: from.into(),
            }],
            dropped: 0,
        };
        let r = webhook(
            "https://h.example/x",
            &Secret::new("k"),
            "main",
            &msg,
            "id",
            1,
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["events"][0],
            serde_json::json!({"type": "commit_rewound", "commit": SHA, "from": from})
        );
        let r = slack("https://hooks.example/T/B/X", "main", &msg);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert!(
            v["text"].as_str().unwrap().contains(
                ":rewind: commit 0123456789ab rewinds the branch: it does not descend from \
                 fedcba987654, the commit applied before it"
            ),
            "{v}"
        );
        let token = Secret::new("t");
        assert!(
            commit_statuses(NotifyKind::Gitea, "https://g", "o/r", &token, "main", &msg).is_empty()
        );
    }

    #[test]
    fn forges_get_the_latest_state_per_commit_in_their_words() {
        let msg = Message {
            events: vec![
                state(SHA, CommitState::Pending),
                Event::SpecReady { spec: "a".into() },
                state(SHA, CommitState::Failure),
                state("not-a-sha/../x", CommitState::Success),
            ],
            dropped: 0,
        };
        let token = Secret::new("t0k");
        let cases = [
            (
                NotifyKind::Gitea,
                format!("https://git.example/api/v1/repos/ops/vms/statuses/{SHA}"),
                ("Authorization", "token t0k"),
                "failure",
                "context",
            ),
            (
                NotifyKind::Github,
                format!("https://api.github.com/repos/ops/vms/statuses/{SHA}"),
                ("Authorization", "Bearer t0k"),
                "failure",
                "context",
            ),
            (
                NotifyKind::Gitlab,
                format!("https://gl.example/api/v4/projects/ops%2Fvms/statuses/{SHA}"),
                ("PRIVATE-TOKEN", "t0k"),
                "failed",
                "name",
            ),
        ];
        for (kind, url, auth, word, context_key) in cases {
            let base = match kind {
                NotifyKind::Github => "https://api.github.com",
                NotifyKind::Gitlab => "https://gl.example",
                _ => "https://git.example",
            };
            let rs = commit_statuses(kind, base, "ops/vms", &token, "main", &msg);
            assert_eq!(rs.len(), 1, "{kind:?}: one commit, one status");
            assert_eq!(rs[0].url, url);
            let h = rs[0].headers.iter().find(|h| h.name == auth.0).unwrap();
            assert_eq!(h.value, auth.1);
            assert!(h.sensitive);
            let v: serde_json::Value = serde_json::from_slice(&rs[0].body).unwrap();
            assert_eq!(v["state"], word, "{kind:?}");
            assert_eq!(v[context_key], "proxsync/main", "{kind:?}");
        }
        let pending = Message {
            events: vec![state(SHA, CommitState::Pending)],
            dropped: 0,
        };
        let gl = commit_statuses(
            NotifyKind::Gitlab,
            "https://g",
            "7",
            &token,
            "main",
            &pending,
        );
        let v: serde_json::Value = serde_json::from_slice(&gl[0].body).unwrap();
        assert_eq!(v["state"], "running");
        assert!(gl[0].url.contains("/projects/7/"));
    }
}
