use super::files::check_name;
use super::*;
use crate::util::time::{MAX_UNIX, MIN_UNIX};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, UNIX_EPOCH};

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

const T0: u64 = 1_740_830_400; // 2025-03-01T12:00:00Z

fn cond(kind: &'static str, status: ConditionStatus, reason: Reason) -> ConditionInput {
    ConditionInput::new(kind, status, reason, format!("{kind} is {reason}"))
}

fn spec(name: &str) -> SpecStatus {
    SpecStatus {
        name: name.to_string(),
        kind: Default::default(),
        template: false,
        site: "lab".into(),
        node: "pve1".into(),
        vm_id: Some(101),
        vm_name: "web-01".into(),
        state: "running".into(),
        ip_addresses: vec!["10.0.0.5".into()],
        tags: vec![],
        labels: BTreeMap::new(),
        commit: Some("0123456".into()),
        spec_file: Some("vms/web-01.yaml".into()),
        provisioned: true,
        conditions: vec![
            cond(kinds::READY, ConditionStatus::True, Reason::Available),
            cond(kinds::RECONCILING, ConditionStatus::False, Reason::UpToDate),
            cond(kinds::STALLED, ConditionStatus::False, Reason::NotStalled),
            cond(
                kinds::NODE_HEALTHY,
                ConditionStatus::True,
                Reason::NodeOnline,
            ),
            cond(kinds::PROVISIONED, ConditionStatus::True, Reason::Created),
        ],
        last_task: None,
        backoff: None,
        history: vec![],
        observed_generation: Some("sha256:abc".into()),
        drift: vec![],
    }
}

fn set(s: &mut SpecStatus, kind: &'static str, status: ConditionStatus, reason: Reason) {
    s.conditions.retain(|c| c.kind != kind);
    s.conditions.push(cond(kind, status, reason));
}

fn get<'a>(f: &'a SpecFile, kind: &str) -> &'a Condition {
    f.condition(kind).expect("condition present")
}

fn tmpdir() -> (tempfile::TempDir, StatusDir) {
    let d = tempfile::tempdir().unwrap();
    let sd = StatusDir::open(&d.path().join("status")).unwrap();
    (d, sd)
}

// ---- timestamps ----

#[test]
fn rfc3339_known_values() {
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(t(T0)), "2025-03-01T12:00:00Z");
    assert_eq!(rfc3339(t(951_782_400)), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(t(1_735_689_599)), "2024-12-31T23:59:59Z");
    assert_eq!(
        rfc3339(t(T0) + Duration::from_millis(999)),
        "2025-03-01T12:00:00Z"
    );
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(1)),
        "1969-12-31T23:59:59Z"
    );
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_millis(500)),
        "1969-12-31T23:59:59Z"
    );
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(86_400 * 365)),
        "1969-01-01T00:00:00Z"
    );
    // clamped, never a 5-digit year
    assert_eq!(
        rfc3339(t(MAX_UNIX as u64 + 10_000_000)),
        "9999-12-31T23:59:59Z"
    );
    assert_eq!(rfc3339(t(MAX_UNIX as u64)), "9999-12-31T23:59:59Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(MIN_UNIX.unsigned_abs())),
        "0000-01-01T00:00:00Z"
    );
}

#[test]
fn rfc3339_round_trips() {
    let mut s = MIN_UNIX;
    while s <= MAX_UNIX {
        let time = if s >= 0 {
            UNIX_EPOCH + Duration::from_secs(s as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
        };
        let text = rfc3339(time);
        assert_eq!(parse_rfc3339(&text), Some(time), "{text}");
        s += 86_400 * 13 + 3_607; // walks every month and leap day over the whole range
    }
    for s in (0..400 * 366 * 86_400u64).step_by(86_400) {
        let text = rfc3339(t(s));
        assert_eq!(parse_rfc3339(&text), Some(t(s)), "{text}");
    }
}

#[test]
fn parse_rfc3339_accepts_offsets_and_fractions() {
    assert_eq!(parse_rfc3339("2025-03-01T12:00:00Z"), Some(t(T0)));
    assert_eq!(parse_rfc3339("2025-03-01t12:00:00z"), Some(t(T0)));
    assert_eq!(parse_rfc3339("2025-03-01T14:30:00+02:30"), Some(t(T0)));
    assert_eq!(parse_rfc3339("2025-03-01T07:00:00-05:00"), Some(t(T0)));
    assert_eq!(
        parse_rfc3339("2025-03-01T12:00:00.25Z"),
        Some(t(T0) + Duration::from_millis(250))
    );
    assert_eq!(
        parse_rfc3339("2025-03-01T12:00:00.123456789123Z"),
        Some(t(T0) + Duration::from_nanos(123_456_789))
    );
    assert_eq!(
        parse_rfc3339("2024-02-29T00:00:00Z"),
        Some(t(1_709_164_800))
    );
    assert_eq!(
        parse_rfc3339("2016-12-31T23:59:60Z"),
        Some(t(1_483_228_800))
    );
}

#[test]
fn parse_rfc3339_rejects_garbage() {
    for bad in [
        "",
        "2025",
        "2025-03-01",
        "2025-03-01 12:00:00Z",
        "2025-03-01T12:00:00",
        "2025-03-01T12:00:00ZZ",
        "2025-03-01T12:00:00.Z",
        "2025-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2025-13-01T00:00:00Z",
        "2025-00-01T00:00:00Z",
        "2025-04-31T00:00:00Z",
        "2025-03-00T00:00:00Z",
        "2025-03-01T24:00:00Z",
        "2025-03-01T12:60:00Z",
        "2025-03-01T12:00:61Z",
        "2025-03-01T12:00:00+24:00",
        "2025-03-01T12:00:00+0200",
        "2025-03-01T12:00:00+02:00x",
        "+025-03-01T12:00:00Z",
        "2025-03-01T1é:00:00Z",
        "２０２５-03-01T12:00:00Z",
        "2025-03-01T12:00:00.\u{1F600}Z",
        "not a date at all, really",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
    }
}

// ---- names ----

#[test]
fn refuses_names_that_are_not_dns_labels() {
    let (_d, mut sd) = tmpdir();
    let long = "a".repeat(64);
    for bad in [
        "", "_summary", "_orphans", "../etc", "a/b", ".hidden", "Web", "web_01", "-web", "web-",
        "web.01", "web 01", "wéb", "a\0b", &long,
    ] {
        let mut s = spec("x");
        s.name = bad.to_string();
        assert!(
            matches!(sd.write_spec(&s, t(T0)), Err(StatusError::InvalidName(_))),
            "{bad:?}"
        );
        assert!(matches!(
            sd.remove_spec(bad),
            Err(StatusError::InvalidName(_))
        ));
        assert!(matches!(
            sd.read_spec(bad),
            Err(StatusError::InvalidName(_))
        ));
    }
    assert!(
        fs::read_dir(sd.path()).unwrap().next().is_none(),
        "nothing written"
    );
    for good in ["a", "0", "web-01", "a--b", &"a".repeat(63)] {
        let mut s = spec("x");
        s.name = good.to_string();
        assert!(sd.write_spec(&s, t(T0)).unwrap(), "{good:?}");
    }
}

#[test]
fn invalid_name_error_is_bounded() {
    let err = check_name(&"X".repeat(100_000)).unwrap_err().to_string();
    assert!(err.len() < 400, "{}", err.len());
}

// ---- conditions ----

#[test]
fn first_visit_writes_every_standard_condition_in_order() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    s.provisioned = false;
    s.conditions = vec![
        ConditionInput::new("Zeta", ConditionStatus::True, Reason::NotReady, ""),
        cond(
            kinds::REBOOT_PENDING,
            ConditionStatus::False,
            Reason::NoPendingChanges,
        ),
        ConditionInput::new("Alpha", ConditionStatus::False, Reason::NotReady, ""),
        cond(kinds::RECONCILING, ConditionStatus::True, Reason::Creating),
    ];
    assert!(sd.write_spec(&s, t(T0)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    let order: Vec<&str> = f.conditions.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        order,
        [
            "Ready",
            "Reconciling",
            "Stalled",
            "NodeHealthy",
            "Provisioned",
            "RebootPending",
            "Alpha",
            "Zeta"
        ]
    );
    for k in [
        kinds::READY,
        kinds::STALLED,
        kinds::NODE_HEALTHY,
        kinds::PROVISIONED,
    ] {
        let c = get(&f, k);
        assert_eq!(c.status, ConditionStatus::Unknown, "{k}");
        assert_eq!(c.reason, Reason::NotYetObserved.as_str(), "{k}");
    }
    assert_eq!(get(&f, kinds::RECONCILING).reason, "Creating");
    for c in &f.conditions {
        assert_eq!(c.last_transition_time, "2025-03-01T12:00:00Z");
        assert!(!c.reason.is_empty());
    }
    assert!(!f.initialization.provisioned);
}

#[test]
fn status_is_quoted_so_yaml_readers_do_not_see_booleans() {
    let (_d, mut sd) = tmpdir();
    sd.write_spec(&spec("web-01"), t(T0)).unwrap();
    let text = fs::read_to_string(sd.path().join("web-01.yaml")).unwrap();
    assert!(text.starts_with("# Written by proxsync"), "{text}");
    assert!(!text.contains("status: True"), "{text}");
    assert!(!text.contains("status: False"), "{text}");
    assert!(
        text.contains("status: \"True\"") || text.contains("status: 'True'"),
        "{text}"
    );
    assert!(text.contains("type: Ready"), "{text}");
    assert!(text.contains("lastTransitionTime:"), "{text}");
    assert!(text.contains("vmId: 101"), "{text}");
    assert!(text.contains("provisioned: true"), "{text}");
    // the commit looks like a number: it must stay a string
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(f.commit.as_deref(), Some("0123456"));
}

#[test]
fn unchanged_content_is_not_rewritten() {
    let (_d, mut sd) = tmpdir();
    let s = spec("web-01");
    assert!(sd.write_spec(&s, t(T0)).unwrap());
    let path = sd.path().join("web-01.yaml");
    let before = fs::read(&path).unwrap();
    for i in 1..5 {
        assert!(!sd.write_spec(&s, t(T0 + i * 30)).unwrap());
    }
    assert_eq!(fs::read(&path).unwrap(), before);
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(f.updated_at.as_deref(), Some("2025-03-01T12:00:00Z"));
}

#[test]
fn transition_time_moves_only_when_status_changes() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    set(
        &mut s,
        kinds::READY,
        ConditionStatus::False,
        Reason::Creating,
    );
    set(
        &mut s,
        kinds::RECONCILING,
        ConditionStatus::True,
        Reason::Creating,
    );
    sd.write_spec(&s, t(T0)).unwrap();

    // reason and message change, status does not: time stays, file changes
    set(
        &mut s,
        kinds::READY,
        ConditionStatus::False,
        Reason::WaitingForTask,
    );
    set(
        &mut s,
        kinds::RECONCILING,
        ConditionStatus::True,
        Reason::WaitingForTask,
    );
    assert!(sd.write_spec(&s, t(T0 + 60)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(get(&f, kinds::READY).reason, "WaitingForTask");
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:00:00Z"
    );
    assert_eq!(f.updated_at.as_deref(), Some("2025-03-01T12:01:00Z"));

    // status changes: that condition's time moves, the others keep theirs
    set(
        &mut s,
        kinds::READY,
        ConditionStatus::True,
        Reason::Available,
    );
    assert!(sd.write_spec(&s, t(T0 + 120)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:02:00Z"
    );
    assert_eq!(
        get(&f, kinds::RECONCILING).last_transition_time,
        "2025-03-01T12:00:00Z"
    );
    assert_eq!(
        get(&f, kinds::STALLED).last_transition_time,
        "2025-03-01T12:00:00Z"
    );

    // the engine omits a standard condition: Unknown / NotYetObserved, time moves
    s.conditions.retain(|c| c.kind != kinds::NODE_HEALTHY);
    assert!(sd.write_spec(&s, t(T0 + 180)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    let nh = get(&f, kinds::NODE_HEALTHY);
    assert_eq!(
        (nh.status, nh.reason.as_str()),
        (ConditionStatus::Unknown, "NotYetObserved")
    );
    assert_eq!(nh.last_transition_time, "2025-03-01T12:03:00Z");
}

#[test]
fn restarted_writer_keeps_times_and_does_not_rewrite() {
    let d = tempfile::tempdir().unwrap();
    let mut s = spec("web-01");
    {
        let mut sd = StatusDir::open(d.path()).unwrap();
        assert!(sd.write_spec(&s, t(T0)).unwrap());
    }
    let path = d.path().join("web-01.yaml");
    let before = fs::read(&path).unwrap();
    let mut sd = StatusDir::open(d.path()).unwrap();
    assert!(!sd.write_spec(&s, t(T0 + 3600)).unwrap());
    assert_eq!(fs::read(&path).unwrap(), before);

    set(
        &mut s,
        kinds::STALLED,
        ConditionStatus::True,
        Reason::PermissionDenied,
    );
    let mut sd = StatusDir::open(d.path()).unwrap();
    assert!(sd.write_spec(&s, t(T0 + 7200)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(
        get(&f, kinds::STALLED).last_transition_time,
        "2025-03-01T14:00:00Z"
    );
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:00:00Z"
    );
}

#[test]
fn provisioned_never_reverts() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    s.provisioned = false;
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::False,
        Reason::NotCreated,
    );
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert!(!f.initialization.provisioned);

    s.provisioned = true;
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::True,
        Reason::Created,
    );
    sd.write_spec(&s, t(T0 + 60)).unwrap();

    // the engine forgets (VM vanished, state db lost...): the file does not
    s.provisioned = false;
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::False,
        Reason::NotCreated,
    );
    sd.write_spec(&s, t(T0 + 120)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert!(f.initialization.provisioned);
    let p = get(&f, kinds::PROVISIONED);
    assert_eq!(
        (p.status, p.reason.as_str()),
        (ConditionStatus::True, "Created")
    );
    assert_eq!(p.last_transition_time, "2025-03-01T12:01:00Z");

    // omitted entirely, and after a restart
    s.conditions.retain(|c| c.kind != kinds::PROVISIONED);
    let mut sd = StatusDir::open(sd.path()).unwrap();
    sd.write_spec(&s, t(T0 + 180)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert!(f.initialization.provisioned);
    assert_eq!(get(&f, kinds::PROVISIONED).status, ConditionStatus::True);
    assert_eq!(
        get(&f, kinds::PROVISIONED).last_transition_time,
        "2025-03-01T12:01:00Z"
    );
}

#[test]
fn provisioned_flag_and_condition_agree() {
    let (_d, mut sd) = tmpdir();
    // condition True, flag false: the flag follows
    let mut s = spec("a");
    s.provisioned = false;
    sd.write_spec(&s, t(T0)).unwrap();
    assert!(
        sd.read_spec("a")
            .unwrap()
            .unwrap()
            .initialization
            .provisioned
    );
    // flag true, condition Unknown on the first visit: the condition follows
    let mut s = spec("b");
    s.conditions.retain(|c| c.kind != kinds::PROVISIONED);
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("b").unwrap().unwrap();
    assert_eq!(get(&f, kinds::PROVISIONED).status, ConditionStatus::True);
    assert_eq!(get(&f, kinds::PROVISIONED).reason, "Created");
    // Adopted replaces Created without moving the time (status unchanged)
    let mut s = spec("b");
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::True,
        Reason::Adopted,
    );
    sd.write_spec(&s, t(T0 + 60)).unwrap();
    let f = sd.read_spec("b").unwrap().unwrap();
    assert_eq!(get(&f, kinds::PROVISIONED).reason, "Adopted");
    assert_eq!(
        get(&f, kinds::PROVISIONED).last_transition_time,
        "2025-03-01T12:00:00Z"
    );
}

#[test]
fn duplicate_and_typeless_conditions() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    s.conditions = vec![
        cond(kinds::READY, ConditionStatus::False, Reason::Failed),
        cond(kinds::READY, ConditionStatus::True, Reason::Available),
        ConditionInput::new(
            kinds::STALLED,
            ConditionStatus::False,
            Reason::NotStalled,
            "x",
        ),
        ConditionInput::new("", ConditionStatus::True, Reason::NotReady, "dropped"),
    ];
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(f.conditions.len(), 5);
    assert_eq!(get(&f, kinds::READY).reason, "Failed");
    assert_eq!(get(&f, kinds::STALLED).reason, "NotStalled");
}

#[test]
fn custom_conditions_are_dropped_when_no_longer_reported() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    set(
        &mut s,
        kinds::REBOOT_PENDING,
        ConditionStatus::True,
        Reason::PendingChanges,
    );
    sd.write_spec(&s, t(T0)).unwrap();
    assert!(
        sd.read_spec("web-01")
            .unwrap()
            .unwrap()
            .condition("RebootPending")
            .is_some()
    );
    s.conditions.retain(|c| c.kind != kinds::REBOOT_PENDING);
    assert!(sd.write_spec(&s, t(T0 + 60)).unwrap());
    assert!(
        sd.read_spec("web-01")
            .unwrap()
            .unwrap()
            .condition("RebootPending")
            .is_none()
    );
}

// ---- other fields ----

#[test]
fn history_is_capped_most_recent_first() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    // given oldest first on purpose
    s.history = (0..25)
        .map(|i| AttemptSummary {
            at: t(T0 + i * 60),
            action: format!("attempt {i}"),
            outcome: "TaskFailed".into(),
            tasks: Vec::new(),
            took_ms: None,
        })
        .collect();
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(f.history.len(), MAX_HISTORY);
    assert_eq!(f.history[0].action, "attempt 24");
    assert_eq!(f.history[9].action, "attempt 15");
    assert_eq!(f.history[0].at, "2025-03-01T12:24:00Z");
}

#[test]
fn task_backoff_and_fields_round_trip() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    s.last_task = Some(TaskSummary {
        upid: "UPID:pve1:000A1B2C:0B3C4D5E:67C2F000:qmclone:101:root@pam!proxsync:".into(),
        kind: "qmclone".into(),
        status: "WARNINGS: 2".into(),
        at: t(T0),
    });
    s.backoff = Some(BackoffSummary {
        attempts: 3,
        next_attempt: t(T0 + 240),
        category: "NetworkError".into(),
        message: "connect timed out".into(),
    });
    s.vm_id = None;
    s.commit = None;
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    let task = f.last_task.as_ref().unwrap();
    assert_eq!(task.kind, "qmclone");
    assert_eq!(task.status, "WARNINGS: 2");
    assert_eq!(task.at, "2025-03-01T12:00:00Z");
    let b = f.backoff.as_ref().unwrap();
    assert_eq!(
        (b.attempts, b.next_attempt.as_str()),
        (3, "2025-03-01T12:04:00Z")
    );
    assert_eq!(f.vm_id, None);
    assert_eq!(f.commit, None);
    assert_eq!(f.observed_generation.as_deref(), Some("sha256:abc"));
    assert_eq!(f.spec_file.as_deref(), Some("vms/web-01.yaml"));
    assert_eq!(f.ip_addresses, ["10.0.0.5"]);
    let text = fs::read_to_string(sd.path().join("web-01.yaml")).unwrap();
    assert!(!text.contains("vmId"), "{text}");
    assert!(text.contains("nextAttempt:"), "{text}");
}

#[test]
fn tags_and_labels_are_written_and_read_back_and_absent_when_none() {
    let (_d, mut sd) = tmpdir();
    let s = spec("web-01");
    sd.write_spec(&s, t(T0)).unwrap();
    let text = fs::read_to_string(sd.path().join("web-01.yaml")).unwrap();
    assert!(
        !text.contains("tags:") && !text.contains("labels:"),
        "{text}"
    );

    let mut s = spec("web-01");
    s.tags = vec!["frontend".into(), "web".into()];
    s.labels = BTreeMap::from([("role".to_string(), "db".to_string())]);
    assert!(
        sd.write_spec(&s, t(T0 + 10)).unwrap(),
        "a new tag is a change"
    );
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(f.tags, ["frontend", "web"]);
    assert_eq!(f.labels.get("role").map(String::as_str), Some("db"));
    let text = fs::read_to_string(sd.path().join("web-01.yaml")).unwrap();
    assert!(
        text.contains("tags:") && text.contains("role: db"),
        "{text}"
    );
}

#[test]
fn long_messages_are_truncated_on_a_char_boundary() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    let long = "é".repeat(3000); // 2 bytes each
    s.conditions.push(ConditionInput::new(
        kinds::REBOOT_PENDING,
        ConditionStatus::True,
        Reason::PendingChanges,
        long.clone(),
    ));
    s.backoff = Some(BackoffSummary {
        attempts: 1,
        next_attempt: t(T0),
        category: "ProxmoxError".into(),
        message: "x".repeat(5000),
    });
    sd.write_spec(&s, t(T0)).unwrap();
    let f = sd.read_spec("web-01").unwrap().unwrap();
    let m = &get(&f, kinds::REBOOT_PENDING).message;
    assert!(m.len() <= MAX_MESSAGE_BYTES, "{}", m.len());
    assert!(m.ends_with('…'));
    assert!(m.starts_with("éé"));
    let b = &f.backoff.unwrap().message;
    assert!(b.len() <= MAX_MESSAGE_BYTES && b.ends_with('…'));
    assert_eq!(clip("short"), "short");
    assert_eq!(clip(&"a".repeat(1024)), "a".repeat(1024));
    assert_eq!(clip(&"a".repeat(1025)).len(), 1024);
}

/// Text YAML would read as something else, or that a consumer of the files (Ansible, Slack, a
/// terminal) would act on: every one is written and read back as the same string.
const NASTY: &[&str] = &[
    "True",
    "false",
    "null",
    "~",
    "yes",
    "No",
    "on",
    "0x1F",
    "1e3",
    "0123",
    "12:30:00",
    "2025-03-01",
    "- item",
    "key: value",
    "# comment",
    "&anchor",
    "*alias",
    "!tag",
    "|",
    ">",
    "'single'",
    "\"double\"",
    "back\\slash",
    "line1\nline2\n",
    "tab\there",
    "  leading and trailing  ",
    "",
    "\u{0}\u{1}\u{7f}\u{85}\u{2028}\u{feff}",
    "---",
    "...",
    "{a: 1}",
    "[1, 2]",
    "% directive",
    "@at",
    "`tick`",
    "ünïcödé ✓ 😀",
    "\r\n",
    "a: b # c",
    "? q",
    "=",
    "<<",
    "{{ lookup('pipe','touch MARK') }}",
    "{% raw %}",
    "!unsafe x",
    "!!python/object/apply:os.system ['touch MARK']",
    "<!channel> <https://evil.example|click>",
    "\u{1b}[2J\u{1b}]0;title\u{7}",
    "\u{202e}gpj.exe",
    "vms/{{ x }}.yaml",
];

#[test]
fn hostile_strings_round_trip() {
    let (_d, mut sd) = tmpdir();
    for (i, v) in NASTY.iter().enumerate() {
        let mut s = spec("web-01");
        s.vm_name = v.to_string();
        s.spec_file = Some(v.to_string());
        s.tags = vec![v.to_string()];
        s.labels = BTreeMap::from([(v.to_string(), v.to_string())]);
        s.node = v.to_string();
        s.state = v.to_string();
        s.ip_addresses = vec![v.to_string(), "::1".into()];
        s.commit = Some(v.to_string());
        s.conditions.push(ConditionInput::new(
            kinds::REBOOT_PENDING,
            ConditionStatus::True,
            Reason::PendingChanges,
            v.to_string(),
        ));
        s.history = vec![AttemptSummary {
            at: t(T0),
            action: v.to_string(),
            outcome: v.to_string(),
            tasks: Vec::new(),
            took_ms: None,
        }];
        sd.write_spec(&s, t(T0 + i as u64)).unwrap();
        let f = sd
            .read_spec("web-01")
            .unwrap()
            .unwrap_or_else(|| panic!("{v:?} did not parse back"));
        assert_eq!(f.vm_name, *v);
        assert_eq!(f.node, *v);
        assert_eq!(f.state, *v);
        assert_eq!(f.ip_addresses, ["::1"], "only an address is written");
        assert_eq!(f.commit.as_deref(), Some(*v));
        assert_eq!(f.spec_file.as_deref(), Some(*v));
        assert_eq!(f.tags, [*v]);
        assert_eq!(f.labels, BTreeMap::from([(v.to_string(), v.to_string())]));
        assert_eq!(get(&f, kinds::REBOOT_PENDING).message, *v);
        assert_eq!(f.history[0].action, *v);
        // and the writer sees its own file as unchanged
        let mut fresh = StatusDir::open(sd.path()).unwrap();
        assert!(
            !fresh.write_spec(&s, t(T0 + 1000)).unwrap(),
            "{v:?} rewritten after reload"
        );
    }
}

#[test]
fn corrupt_file_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    for junk in [
        &b"{{{{ not yaml"[..],
        b"\xff\xfe\x00garbage",
        b"name: [1, 2",
        b"- a list\n- not a map\n",
        b"conditions: 7\n",
        b"&a [*a, *a]",
        b"",
    ] {
        fs::write(d.path().join("web-01.yaml"), junk).unwrap();
        let mut sd = StatusDir::open(d.path()).unwrap();
        assert!(sd.write_spec(&spec("web-01"), t(T0)).unwrap(), "{junk:?}");
        let f = sd.read_spec("web-01").unwrap().unwrap();
        assert_eq!(f.name, "web-01");
        assert_eq!(
            get(&f, kinds::READY).last_transition_time,
            "2025-03-01T12:00:00Z"
        );
    }
    // a file that belongs to another name, or carries a bad timestamp
    let mut sd = StatusDir::open(d.path()).unwrap();
    let text = fs::read_to_string(d.path().join("web-01.yaml")).unwrap();
    fs::write(d.path().join("web-02.yaml"), &text).unwrap();
    assert!(sd.write_spec(&spec("web-02"), t(T0 + 60)).unwrap());
    let f = sd.read_spec("web-02").unwrap().unwrap();
    assert_eq!(f.name, "web-02");
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:01:00Z"
    );

    fs::write(
        d.path().join("web-01.yaml"),
        text.replace("2025-03-01T12:00:00Z", "yesterday"),
    )
    .unwrap();
    let mut sd = StatusDir::open(d.path()).unwrap();
    assert!(sd.write_spec(&spec("web-01"), t(T0 + 120)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:02:00Z"
    );
}

#[test]
fn oversized_file_is_treated_as_absent() {
    let (_d, mut sd) = tmpdir();
    let big = format!("name: web-01\nvmName: {}\n", "a".repeat(2 * 1024 * 1024));
    fs::write(sd.path().join("web-01.yaml"), big).unwrap();
    assert!(sd.read_spec("web-01").unwrap().is_none());
    assert!(sd.write_spec(&spec("web-01"), t(T0)).unwrap());
    assert!(sd.read_spec("web-01").unwrap().is_some());
}

#[test]
fn a_file_deleted_behind_our_back_is_rewritten() {
    let (_d, mut sd) = tmpdir();
    let s = spec("web-01");
    sd.write_spec(&s, t(T0)).unwrap();
    fs::remove_file(sd.path().join("web-01.yaml")).unwrap();
    assert!(sd.write_spec(&s, t(T0 + 60)).unwrap());
    assert!(sd.read_spec("web-01").unwrap().is_some());
}

#[test]
fn files_are_0644_and_no_temp_files_remain() {
    let (_d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    for i in 0..3 {
        s.state = format!("state-{i}");
        sd.write_spec(&s, t(T0 + i)).unwrap();
    }
    sd.write_summary(&summary()).unwrap();
    sd.write_orphans(&[orphan(1, 900)], t(T0)).unwrap();
    let mode = fs::metadata(sd.path().join("web-01.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    let mut names: Vec<String> = fs::read_dir(sd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "_index.jsonl",
            "_orphans.yaml",
            "_summary.yaml",
            "web-01.yaml"
        ]
    );
}

#[test]
fn open_creates_the_directory_and_cleans_old_temps() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("a/b/status");
    let sd = StatusDir::open(&dir).unwrap();
    assert!(dir.is_dir());
    drop(sd);
    let stale = dir.join(".web-01.yaml.tmp-1");
    fs::write(&stale, "x").unwrap();
    let old = crate::util::clock::system_now() - Duration::from_secs(3600);
    File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let fresh = dir.join(".web-02.yaml.tmp-2");
    fs::write(&fresh, "x").unwrap();
    let other = dir.join("notes.txt");
    fs::write(&other, "x").unwrap();
    StatusDir::open(&dir).unwrap();
    assert!(!stale.exists());
    assert!(fresh.exists(), "another process may be writing it");
    assert!(other.exists());
    // a file where the directory should be
    assert!(StatusDir::open(&other).is_err());
}

#[test]
fn spec_names_and_remove() {
    let (_d, mut sd) = tmpdir();
    for n in ["web-02", "db", "web-01"] {
        sd.write_spec(&spec(n), t(T0)).unwrap();
    }
    sd.write_summary(&summary()).unwrap();
    sd.write_orphans(&[], t(T0)).unwrap();
    for junk in [
        ".web-03.yaml.tmp-9",
        "README",
        "Upper.yaml",
        "x.yml",
        "x.yaml.bak",
    ] {
        fs::write(sd.path().join(junk), "x").unwrap();
    }
    fs::create_dir(sd.path().join("dir.yaml")).unwrap();
    assert_eq!(sd.spec_names().unwrap(), ["db", "web-01", "web-02"]);
    sd.remove_spec("web-01").unwrap();
    sd.remove_spec("web-01").unwrap(); // already gone: fine
    sd.remove_spec("never").unwrap();
    assert_eq!(sd.spec_names().unwrap(), ["db", "web-02"]);
    assert!(sd.read_spec("web-01").unwrap().is_none());
    // a spec added again starts afresh
    let mut s = spec("web-01");
    s.provisioned = false;
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::False,
        Reason::NotCreated,
    );
    assert!(sd.write_spec(&s, t(T0 + 600)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert!(!f.initialization.provisioned);
    assert_eq!(
        get(&f, kinds::READY).last_transition_time,
        "2025-03-01T12:10:00Z"
    );
}

// ---- summary and orphans ----

fn summary() -> SummaryStatus {
    SummaryStatus {
        commit: Some("abc123".into()),
        source_error: None,
        refused_commit: None,
        last_request: Some(RequestSummary {
            spec: Some("web-01".into()),
            handled_at: t(T0),
        }),
        notify_failures: vec![],
        rewind: None,
        specs: 3,
        ready: 2,
        stalled: 1,
        backing_off: 0,
        invalid: 0,
        sites: vec![SiteSummary {
            name: "lab".into(),
            reachable: true,
            quorate: true,
            nodes_online: vec!["pve1".into(), "pve2".into()],
            nodes_offline: vec!["pve3".into()],
            error: None,
            parallel: vec![("pve1".into(), 6), ("pve2".into(), 2)],
        }],
        last_cycle: t(T0),
        cycle_ms: 420,
        refused: vec!["refused to delete 7 of 10 managed VMs (max_delete_fraction 0.5)".into()],
        sets: Vec::new(),
        images: Vec::new(),
        cycle: Default::default(),
    }
}

#[test]
fn recent_cycles_are_kept_oldest_first_across_a_restart_and_capped() {
    let (d, mut sd) = tmpdir();
    let cycle = |i: u64| SummaryStatus {
        last_cycle: t(T0 + i * 60),
        cycle_ms: i,
        cycle: crate::status::CycleMark {
            actions: i as u32,
            failed: (i % 2) as u32,
            sites_down: 1,
        },
        ..summary()
    };
    for i in 0..20 {
        sd.write_summary(&cycle(i)).unwrap();
    }
    // A restarted writer reads them back and goes on.
    let mut sd = StatusDir::open(&d.path().join("status")).unwrap();
    for i in 20..40 {
        sd.write_summary(&cycle(i)).unwrap();
    }
    // The same cycle written again keeps one entry; cycles ending within one second each
    // have theirs.
    assert!(!sd.write_summary(&cycle(39)).unwrap());
    let f = sd.read_summary().unwrap().unwrap();
    assert_eq!(f.recent_cycles.len(), crate::status::RECENT_CYCLES);
    for ms in [1, 2] {
        let mut again = cycle(39);
        again.last_cycle += std::time::Duration::from_millis(ms);
        again.cycle_ms = 40 + ms;
        assert!(sd.write_summary(&again).unwrap());
    }
    let f = sd.read_summary().unwrap().unwrap();
    assert_eq!(f.recent_cycles.len(), crate::status::RECENT_CYCLES);
    let f = sd.read_summary().unwrap().unwrap();
    let ms: Vec<u64> = f.recent_cycles.iter().map(|c| c.ms).collect();
    assert_eq!(ms, (12..40).chain([41, 42]).collect::<Vec<u64>>());
    let last = &f.recent_cycles[RECENT_CYCLES - 3];
    assert_eq!((last.actions, last.failed, last.sites_down), (39, 1, 1));
    assert_eq!(last.at, f.last_cycle);
}

#[test]
fn summary_round_trips_and_skips_identical_writes() {
    let (_d, mut sd) = tmpdir();
    let s = summary();
    assert!(sd.write_summary(&s).unwrap());
    assert!(!sd.write_summary(&s).unwrap());
    let f = sd.read_summary().unwrap().unwrap();
    assert_eq!(f.commit.as_deref(), Some("abc123"));
    assert_eq!((f.specs, f.ready, f.stalled), (3, 2, 1));
    assert_eq!(f.sites[0].nodes_offline, ["pve3"]);
    assert_eq!(
        f.sites[0].parallel_per_node,
        [("pve1".to_string(), 6), ("pve2".to_string(), 2)].into()
    );
    assert_eq!(f.last_cycle, "2025-03-01T12:00:00Z");
    assert_eq!(f.cycle_ms, 420);
    assert!(f.refused[0].starts_with("refused to delete 7 of 10"));
    let text = fs::read_to_string(sd.path().join(SUMMARY_FILE)).unwrap();
    assert!(
        text.contains("backingOff: 0") && text.contains("nodesOnline:"),
        "{text}"
    );

    let mut sd = StatusDir::open(sd.path()).unwrap();
    assert!(!sd.write_summary(&s).unwrap(), "identical after restart");
    let mut s2 = s.clone();
    s2.last_cycle = t(T0 + 30);
    s2.source_error = Some("git fetch failed: connection refused".into());
    assert!(sd.write_summary(&s2).unwrap());
    assert_eq!(
        sd.read_summary().unwrap().unwrap().source_error.as_deref(),
        Some("git fetch failed: connection refused")
    );
    assert!(
        !text.contains("refusedCommit"),
        "absent unless refused: {text}"
    );

    let mut s3 = s2.clone();
    s3.refused_commit = Some(crate::source::verify::Refusal {
        commit: "f00d".repeat(10),
        kind: crate::gate::commit::RefusalKind::UnverifiedSignature,
        reason: "the commit is not signed".into(),
    });
    assert!(sd.write_summary(&s3).unwrap());
    let f = sd.read_summary().unwrap().unwrap();
    let refused = f.refused_commit.expect("refusedCommit written");
    assert_eq!(refused.commit, "f00d".repeat(10));
    assert_eq!(refused.reason, "UnverifiedSignature");
    assert_eq!(refused.message, "the commit is not signed");
    let text = fs::read_to_string(sd.path().join(SUMMARY_FILE)).unwrap();
    assert!(text.contains("refusedCommit:"), "{text}");
    assert!(!text.contains("rewind"), "absent unless rewound: {text}");

    let mut s4 = s3.clone();
    s4.rewind = Some(crate::status::RewindSummary {
        commit: "beef".repeat(10),
        from: "cafe".repeat(10),
        since: t(T0),
    });
    assert!(sd.write_summary(&s4).unwrap());
    let f = sd.read_summary().unwrap().unwrap();
    let rewind = f.rewind.expect("rewind written");
    assert_eq!(
        (
            rewind.commit.as_str(),
            rewind.from.as_str(),
            rewind.since.as_str()
        ),
        (
            "beef".repeat(10).as_str(),
            "cafe".repeat(10).as_str(),
            "2025-03-01T12:00:00Z"
        )
    );
}

#[test]
fn hostile_strings_round_trip_through_the_summary_and_orphans() {
    let (_d, mut sd) = tmpdir();
    for (i, v) in NASTY.iter().enumerate() {
        let v = v.to_string();
        let mut s = summary();
        s.commit = Some(v.clone());
        s.source_error = Some(v.clone());
        s.refused_commit = Some(crate::source::verify::Refusal {
            commit: v.clone(),
            kind: crate::gate::commit::RefusalKind::UnverifiedSignature,
            reason: v.clone(),
        });
        s.last_request = Some(RequestSummary {
            spec: Some(v.clone()),
            handled_at: t(T0),
        });
        s.notify_failures = vec![NotifyFailure {
            target: v.clone(),
            kind: v.clone(),
            failures: 1,
            last_error: v.clone(),
            since: t(T0),
        }];
        s.sites[0].name = v.clone();
        s.sites[0].nodes_online = vec![v.clone()];
        s.sites[0].error = Some(v.clone());
        s.sites[0].parallel = vec![(v.clone(), 3)];
        s.refused = vec![v.clone()];
        s.sets = vec![SetSummary {
            name: v.clone(),
            desired: 2,
            ready: 1,
            not_ready: vec![v.clone()],
        }];
        s.last_cycle = t(T0 + i as u64);
        assert!(sd.write_summary(&s).unwrap(), "{v:?}");
        let f = sd
            .read_summary()
            .unwrap()
            .unwrap_or_else(|| panic!("{v:?} did not parse back"));
        let site = &f.sites[0];
        let refused = f.refused_commit.as_ref().unwrap();
        let request = f.last_request.as_ref().unwrap();
        let notify = &f.notify_failures[0];
        let set = &f.sets[0];
        for got in [
            f.commit.as_deref(),
            f.source_error.as_deref(),
            Some(refused.commit.as_str()),
            Some(refused.message.as_str()),
            request.spec.as_deref(),
            Some(notify.target.as_str()),
            Some(notify.kind.as_str()),
            Some(notify.last_error.as_str()),
            Some(site.name.as_str()),
            Some(site.nodes_online[0].as_str()),
            site.error.as_deref(),
            site.parallel_per_node.keys().next().map(String::as_str),
            Some(f.refused[0].as_str()),
            Some(set.name.as_str()),
            Some(set.not_ready[0].as_str()),
        ] {
            assert_eq!(got, Some(v.as_str()));
        }

        let orphan = OrphanEntry {
            site: v.clone(),
            vm_id: 7,
            kind: crate::guest::GuestKind::Lxc,
            node: v.clone(),
            name: Some(v.clone()),
            state: v.clone(),
            first_seen: t(T0),
            action: v.clone(),
            duplicate_of: Some(v.clone()),
        };
        sd.write_orphans(&[orphan], t(T0)).unwrap();
        let o = &sd.read_orphans().unwrap().expect("parses back").orphans[0];
        for got in [&o.site, &o.node, &o.state, &o.action] {
            assert_eq!(*got, v);
        }
        assert_eq!(o.name.as_deref(), Some(v.as_str()));
        assert_eq!(o.duplicate_of.as_deref(), Some(v.as_str()));
    }
}

#[test]
fn a_url_password_in_a_source_error_is_not_written() {
    let d = tempfile::tempdir().unwrap();
    let mut sd = StatusDir::open(d.path()).unwrap();
    let mut s = summary();
    s.source_error = Some(
        "source https://alice:PASSWORD@git.example/x.git: git fetch failed: unable to access \
         'https://alice:PASSWORD@git.example/x.git/'"
            .into(),
    );
    sd.write_summary(&s).unwrap();
    let text = fs::read_to_string(sd.path().join(SUMMARY_FILE)).unwrap();
    assert!(!text.contains("PASSWORD"), "{text}");
    assert!(text.contains("https://***@git.example/x.git"), "{text}");
}

fn orphan(vm_id: u32, age: u64) -> OrphanEntry {
    OrphanEntry {
        site: "lab".into(),
        vm_id,
        kind: Default::default(),
        node: "pve1".into(),
        name: Some(format!("old-{vm_id}")),
        state: "stopped".into(),
        first_seen: t(T0 - age),
        action: "reported".into(),
        duplicate_of: None,
    }
}

#[test]
fn orphans_are_sorted_and_written_only_on_change() {
    let (_d, mut sd) = tmpdir();
    let list = [orphan(120, 60), orphan(105, 3600)];
    assert!(sd.write_orphans(&list, t(T0)).unwrap());
    assert!(!sd.write_orphans(&list, t(T0 + 30)).unwrap());
    let rev = [orphan(105, 3600), orphan(120, 60)];
    assert!(
        !sd.write_orphans(&rev, t(T0 + 60)).unwrap(),
        "order does not matter"
    );
    let f = sd.read_orphans().unwrap().unwrap();
    assert_eq!(
        f.orphans.iter().map(|o| o.vm_id).collect::<Vec<_>>(),
        [105, 120]
    );
    assert_eq!(f.orphans[0].first_seen, "2025-03-01T11:00:00Z");
    assert_eq!(f.updated_at.as_deref(), Some("2025-03-01T12:00:00Z"));

    let mut sd = StatusDir::open(sd.path()).unwrap();
    assert!(
        !sd.write_orphans(&list, t(T0 + 90)).unwrap(),
        "identical after restart"
    );
    assert!(sd.write_orphans(&[], t(T0 + 120)).unwrap());
    let f = sd.read_orphans().unwrap().unwrap();
    assert!(f.orphans.is_empty());
    assert_eq!(f.updated_at.as_deref(), Some("2025-03-01T12:02:00Z"));
    let text = fs::read_to_string(sd.path().join(ORPHANS_FILE)).unwrap();
    assert!(text.contains("orphans: []"), "{text}");
}

/// Each entry names its guest's kind in the words of a spec file's `kind`, and the file its
/// version; a file of version 1 (neither) is rewritten once, even with the same list.
#[test]
fn orphans_name_their_kind_and_a_version_1_file_is_rewritten() {
    let (_d, sd) = tmpdir();
    let path = sd.path().join(ORPHANS_FILE);
    fs::write(&path, "orphans: []\nupdatedAt: \"2025-03-01T11:00:00Z\"\n").unwrap();
    let mut sd = StatusDir::open(sd.path()).unwrap();
    assert_eq!(sd.read_orphans().unwrap().unwrap().version, 0);
    assert!(
        sd.write_orphans(&[], t(T0)).unwrap(),
        "rewritten in version 2"
    );
    assert!(
        !sd.write_orphans(&[], t(T0 + 30)).unwrap(),
        "then only on change"
    );
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains("\nversion: 2\n"), "{text}");

    let container = OrphanEntry {
        kind: crate::guest::GuestKind::Lxc,
        ..orphan(120, 60)
    };
    assert!(
        sd.write_orphans(&[orphan(105, 0), container], t(T0))
            .unwrap()
    );
    let f = sd.read_orphans().unwrap().unwrap();
    assert_eq!(f.version, ORPHANS_VERSION);
    let kinds: Vec<Option<&str>> = f.orphans.iter().map(|o| o.kind.as_deref()).collect();
    assert_eq!(kinds, [Some("ProxmoxVM"), Some("ProxmoxLXC")]);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains("  kind: ProxmoxLXC\n"), "{text}");
}

// ---- reasons and docs ----

#[test]
fn stalled_reasons_name_the_categories() {
    for c in crate::category::Category::ALL {
        assert_eq!(Reason::for_category(c).as_str(), c.as_str());
        assert_eq!(Reason::from(c), Reason::for_category(c));
        // Exactly the categories that can stall are `Stalled` reasons.
        assert_eq!(
            reasons::STALLED.contains(&Reason::from(c)),
            c.needs_human(),
            "{c}"
        );
    }
}

/// The reasons docs/status.md documents in its "Conditions" section, by the `###` heading
/// they are under (`Ready`, ..., `Other error categories`): the reason column of the tables
/// (`| True | `Available` | ... |`) and the operator entries (`#### `StaleLock``).
fn documented_reasons(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let quoted = |s: &str| {
        let s = s.trim();
        let word = s.strip_prefix('`')?.strip_suffix('`')?;
        word.chars()
            .all(|c| c.is_ascii_alphanumeric())
            .then(|| word.to_string())
    };
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    let mut in_conditions = false;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            in_conditions = h == "Conditions";
            continue;
        }
        if !in_conditions {
            continue;
        }
        if let Some(h) = line.strip_prefix("### ") {
            section = h.trim_matches('`').to_string();
        } else if let Some(h) = line.strip_prefix("#### ") {
            let reason = quoted(h).unwrap_or_else(|| panic!("not a reason heading: {line}"));
            found.entry(section.clone()).or_default().insert(reason);
        } else if line.starts_with('|')
            && let Some(reason) = line.split('|').nth(2).and_then(quoted)
        {
            found.entry(section.clone()).or_default().insert(reason);
        }
    }
    found
}

#[test]
fn docs_and_reasons_agree() {
    let doc = include_str!("../../docs/status.md");
    let documented = documented_reasons(doc);
    let names = |list: &[Reason]| -> BTreeSet<String> {
        list.iter().map(|r| r.as_str().to_string()).collect()
    };
    // Each condition's reasons are exactly those its section lists.
    for (kind, list) in [
        (kinds::READY, reasons::READY),
        (kinds::RECONCILING, reasons::RECONCILING),
        (kinds::STALLED, reasons::STALLED),
        (kinds::NODE_HEALTHY, reasons::NODE_HEALTHY),
        (kinds::PROVISIONED, reasons::PROVISIONED),
        (kinds::REBOOT_PENDING, reasons::REBOOT_PENDING),
        (kinds::SYNCED, reasons::SYNCED),
        (kinds::SUSPENDED, reasons::SUSPENDED),
    ] {
        assert_eq!(
            documented.get(kind),
            Some(&names(list)),
            "docs/status.md, ### `{kind}`"
        );
    }
    // Every reason is documented, and every documented reason is one.
    let all: BTreeSet<String> = documented.values().flatten().cloned().collect();
    assert_eq!(all, names(&Reason::ALL));
    // The categories that never stall are listed apart, each with an entry.
    let others: Vec<Reason> = crate::category::Category::ALL
        .into_iter()
        .filter(|c| !c.needs_human())
        .map(Reason::from)
        .collect();
    assert_eq!(
        documented.get("Other error categories"),
        Some(&names(&others))
    );
}

#[test]
fn docs_cover_every_kind_and_field() {
    let doc = include_str!("../../docs/status.md");
    for k in kinds::ORDER {
        assert!(
            doc.contains(&format!("`{k}`")),
            "docs/status.md lacks condition `{k}`"
        );
    }
    for field in [
        "name",
        "site",
        "node",
        "vmId",
        "vmName",
        "state",
        "ipAddresses",
        "commit",
        "specFile",
        "observedGeneration",
        "initialization.provisioned",
        "conditions",
        "lastTask",
        "backoff",
        "history",
        "drift",
        "atNextStart",
        "updatedAt",
        "lastTransitionTime",
        "sourceError",
        "backingOff",
        "lastCycle",
        "cycleMs",
        "recentCycles",
        "sitesDown",
        "refused",
        "nodesOnline",
        "nodesOffline",
        "firstSeen",
        "quorate",
        "reachable",
        "refusedCommit",
        "rewind",
    ] {
        assert!(
            doc.contains(&format!("`{field}`")),
            "docs/status.md lacks field `{field}`"
        );
    }
}

#[test]
fn parse_rfc3339_never_panics_on_mutations() {
    let good = "2025-03-01T12:00:00.123+02:00";
    let subs = ['0', '9', 'Z', 'T', '-', ':', '.', '+', ' ', 'é', '\0', '😀'];
    for cut in 0..=good.len() {
        let _ = parse_rfc3339(&good[..cut]);
        let _ = parse_rfc3339(&good[cut..]);
    }
    for (i, _) in good.char_indices() {
        for c in subs {
            let mut s = String::new();
            s.push_str(&good[..i]);
            s.push(c);
            s.push_str(&good[i + 1..]);
            let _ = parse_rfc3339(&s);
            let mut ins = good.to_string();
            ins.insert(i, c);
            let _ = parse_rfc3339(&ins);
        }
    }
    assert!(parse_rfc3339("9999-12-31T23:59:59-23:59").is_some());
    assert!(parse_rfc3339("0000-01-01T00:00:00+23:59").is_some());
}

#[test]
fn restarted_writer_restores_provisioned_and_keeps_other_types_times() {
    // The writer keeps only what the next file carries over (`Carried`), read back from the
    // file after a restart: Provisioned's reason and message, and every type's time.
    let d = tempfile::tempdir().unwrap();
    let mut s = spec("web-01");
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::True,
        Reason::Adopted,
    );
    s.conditions
        .push(cond("Degraded", ConditionStatus::True, Reason::Failed));
    assert!(
        StatusDir::open(d.path())
            .unwrap()
            .write_spec(&s, t(T0))
            .unwrap()
    );

    s.provisioned = false;
    set(
        &mut s,
        kinds::PROVISIONED,
        ConditionStatus::False,
        Reason::NotCreated,
    );
    s.commit = Some("89abcdef".into());
    let mut sd = StatusDir::open(d.path()).unwrap();
    assert!(sd.write_spec(&s, t(T0 + 60)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    let p = get(&f, kinds::PROVISIONED);
    assert_eq!(
        (p.status, p.reason.as_str(), p.message.as_str()),
        (ConditionStatus::True, "Adopted", "Provisioned is Adopted")
    );
    assert_eq!(p.last_transition_time, "2025-03-01T12:00:00Z");
    assert_eq!(
        get(&f, "Degraded").last_transition_time,
        "2025-03-01T12:00:00Z"
    );
    // and that file is now the one compared with: the same status writes nothing
    assert!(!sd.write_spec(&s, t(T0 + 120)).unwrap());
    s.conditions.retain(|c| c.kind != "Degraded");
    s.conditions
        .push(cond("Degraded", ConditionStatus::False, Reason::Failed));
    assert!(sd.write_spec(&s, t(T0 + 180)).unwrap());
    let f = sd.read_spec("web-01").unwrap().unwrap();
    assert_eq!(
        get(&f, "Degraded").last_transition_time,
        "2025-03-01T12:03:00Z"
    );
}

#[test]
fn last_status_keeps_what_notifications_read_and_a_hash_of_the_rest() {
    let mut s = spec("web-01");
    let h = s.content_hash();
    assert_eq!(s.clone().content_hash(), h);
    let last = LastStatus::of(&s, h);
    assert!(last.ready && last.stalled().is_none());
    assert!(
        last.notes.is_none(),
        "a spec with nothing to say holds no texts"
    );

    s.ip_addresses.push("10.0.0.6".into());
    assert_ne!(s.content_hash(), h, "any field changes the hash");
    set(&mut s, kinds::READY, ConditionStatus::False, Reason::Failed);
    set(
        &mut s,
        kinds::STALLED,
        ConditionStatus::True,
        Reason::PermissionDenied,
    );
    let last = LastStatus::of(&s, s.content_hash());
    assert!(!last.ready);
    assert_eq!(
        last.stalled(),
        Some((Reason::PermissionDenied, "Stalled is PermissionDenied"))
    );
}

// ---- the status index ----

/// What a test reads of an index row.
#[derive(Debug, serde::Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct IndexRow {
    name: String,
    state: String,
    vm_id: Option<u32>,
}

fn index_rows(sd: &StatusDir) -> Option<Vec<(String, String)>> {
    let rows = super::index::read_rows::<IndexRow>(sd.path(), |r| &r.name)?;
    Some(rows.into_values().map(|r| (r.name, r.state)).collect())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

fn with_state(name: &str, state: &str) -> SpecStatus {
    let mut s = spec(name);
    s.state = state.into();
    s
}

#[test]
fn the_index_follows_every_write_and_removal() {
    let (_d, mut sd) = tmpdir();
    for name in ["a", "b", "c"] {
        sd.write_spec(&with_state(name, "running"), t(T0)).unwrap();
    }
    assert_eq!(index_rows(&sd), None, "not in place before the cycle ends");
    sd.finish_writes();
    assert_eq!(
        index_rows(&sd),
        Some(pairs(&[
            ("a", "running"),
            ("b", "running"),
            ("c", "running")
        ]))
    );

    sd.write_spec(&with_state("b", "stopped"), t(T0 + 1))
        .unwrap();
    sd.remove_spec("c").unwrap();
    assert_eq!(index_rows(&sd), None, "a cycle's writes under way");
    sd.finish_writes();
    assert_eq!(
        index_rows(&sd),
        Some(pairs(&[("a", "running"), ("b", "stopped")]))
    );
    let mode = fs::metadata(sd.path().join(super::index::INDEX_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn a_new_process_rebuilds_the_index_from_every_file() {
    let (d, mut sd) = tmpdir();
    for name in ["a", "b", "c"] {
        sd.write_spec(&with_state(name, "running"), t(T0)).unwrap();
    }
    sd.finish_writes();
    drop(sd);
    // Written by another process (an older release) since: the index is behind the directory.
    let mut other = StatusDir::open(&d.path().join("status")).unwrap();
    other
        .write_spec(&with_state("c", "stopped"), t(T0))
        .unwrap();
    let mut sd = StatusDir::open(&d.path().join("status")).unwrap();
    sd.write_spec(&with_state("a", "paused"), t(T0 + 1))
        .unwrap();
    assert_eq!(
        index_rows(&sd),
        None,
        "the old index is gone at the first write"
    );
    sd.finish_writes();
    assert_eq!(
        index_rows(&sd),
        Some(pairs(&[
            ("a", "paused"),
            ("b", "running"),
            ("c", "stopped")
        ])),
        "the files this process did not write are read"
    );
}

#[test]
fn a_crash_in_a_cycle_or_a_later_write_makes_readers_read_the_files() {
    let (_d, mut sd) = tmpdir();
    sd.write_spec(&with_state("a", "running"), t(T0)).unwrap();
    sd.finish_writes();
    assert!(index_rows(&sd).is_some());
    // Killed between a file and the end of its cycle: `writing` is the index's last word.
    sd.write_spec(&with_state("a", "stopped"), t(T0 + 1))
        .unwrap();
    let path = sd.path().to_path_buf();
    drop(sd);
    assert!(
        super::index::read_rows::<IndexRow>(&path, |r| &r.name).is_none(),
        "{}",
        fs::read_to_string(path.join(super::index::INDEX_FILE)).unwrap()
    );

    let (_d, mut sd) = tmpdir();
    sd.write_spec(&with_state("a", "running"), t(T0)).unwrap();
    sd.finish_writes();
    assert!(super::index::is_current(sd.path()));
    let index = fs::metadata(sd.path().join(super::index::INDEX_FILE))
        .and_then(|m| m.modified())
        .unwrap();
    File::open(sd.path())
        .unwrap()
        .set_modified(index + Duration::from_secs(2))
        .unwrap();
    assert_eq!(index_rows(&sd), None, "the directory is newer");
}

#[test]
fn the_index_is_compacted_once_it_holds_more_old_lines_than_rows() {
    let (_d, mut sd) = tmpdir();
    sd.write_spec(&with_state("a", "running"), t(T0)).unwrap();
    sd.write_spec(&with_state("b", "running"), t(T0)).unwrap();
    sd.finish_writes();
    for i in 0..1100 {
        sd.write_spec(&with_state("a", &format!("s{i}")), t(T0))
            .unwrap();
    }
    sd.finish_writes();
    let text = fs::read_to_string(sd.path().join(super::index::INDEX_FILE)).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert_eq!(
        index_rows(&sd),
        Some(pairs(&[("a", "s1099"), ("b", "running")]))
    );
    // Appended to again after the compaction.
    sd.write_spec(&with_state("b", "stopped"), t(T0)).unwrap();
    sd.finish_writes();
    assert_eq!(
        index_rows(&sd),
        Some(pairs(&[("a", "s1099"), ("b", "stopped")]))
    );
}

#[test]
fn after_a_start_each_file_is_read_once_for_its_commit_and_its_next_version() {
    let (d, mut sd) = tmpdir();
    let mut s = spec("web-01");
    sd.write_spec(&s, t(T0)).unwrap();
    let path = d.path().join("status/web-01.yaml");
    let first = fs::read_to_string(&path).unwrap();
    assert!(first.contains("2025-03-01T12:00:00Z"), "{first}");
    drop(sd);

    let mut w = Writer::new(StatusDir::open(&d.path().join("status")).unwrap());
    let hash = s.observed_generation.clone().unwrap();
    let commit = w.commit_of("web-01", Version::Valid(&hash), "c2");
    // Changed on disk after that read: the writer goes by what it read.
    fs::write(
        &path,
        first.replace("2025-03-01T12:00:00Z", "2025-01-01T00:00:00Z"),
    )
    .unwrap();
    s.state = "stopped".into();
    s.commit = Some(commit);
    w.write_spec_if_changed(s, t(T0 + 60)).unwrap();
    let next = fs::read_to_string(&path).unwrap();
    assert!(next.contains("state: stopped"), "{next}");
    assert!(
        next.contains("lastTransitionTime: \"2025-03-01T12:00:00Z\""),
        "the transition times of the file read for the commit: {next}"
    );
}

#[test]
fn the_index_never_writes_through_a_link_planted_in_the_directory() {
    let (d, mut sd) = tmpdir();
    let outside = d.path().join("outside.txt");
    fs::write(&outside, "keep me").unwrap();
    std::os::unix::fs::symlink(&outside, sd.path().join("._index.jsonl.tmp")).unwrap();
    sd.write_spec(&with_state("a", "running"), t(T0)).unwrap();
    sd.finish_writes();
    assert_eq!(fs::read_to_string(&outside).unwrap(), "keep me");
    assert_eq!(index_rows(&sd), Some(pairs(&[("a", "running")])));

    // The index itself replaced by a link: not appended through, not read.
    fs::remove_file(sd.path().join(super::index::INDEX_FILE)).unwrap();
    std::os::unix::fs::symlink(&outside, sd.path().join(super::index::INDEX_FILE)).unwrap();
    sd.write_spec(&with_state("a", "stopped"), t(T0 + 1))
        .unwrap();
    sd.finish_writes();
    assert_eq!(fs::read_to_string(&outside).unwrap(), "keep me");
    assert_eq!(index_rows(&sd), None);
}
