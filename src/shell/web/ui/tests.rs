use super::*;

use std::collections::BTreeMap;
use std::path::Path;

use crate::status::{
    AttemptRecord, BackoffRecord, Condition, ConditionStatus, Initialization, OrphanRecord,
    OrphansFile, RefusedCommitRecord, SiteRecord, SpecFile, SummaryFile, TaskRecord,
};

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";
const JS: &str = "javascript:alert(1)";

fn write_yaml<T: serde::Serialize>(dir: &Path, file: &str, value: &T) {
    let text = serde_saphyr::to_string(value).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

fn condition(kind: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
    Condition {
        kind: kind.into(),
        status,
        reason: reason.into(),
        message: message.into(),
        last_transition_time: "2026-11-28T10:00:00Z".into(),
    }
}

fn spec_file(name: &str, site: &str, node: &str, vm_id: u32) -> SpecFile {
    SpecFile {
        name: name.into(),
        site: site.into(),
        node: node.into(),
        vm_id: Some(vm_id),
        vm_name: name.into(),
        state: "running".into(),
        ip_addresses: vec!["10.0.0.5".into()],
        commit: Some("3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d".into()),
        initialization: Initialization { provisioned: true },
        conditions: vec![
            condition("Ready", ConditionStatus::True, "Available", ""),
            condition("Stalled", ConditionStatus::False, "NotStalled", ""),
        ],
        ..Default::default()
    }
}

fn summary() -> SummaryFile {
    SummaryFile {
        commit: Some("3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d".into()),
        specs: 2,
        ready: 2,
        sites: vec![SiteRecord {
            name: "lab".into(),
            reachable: true,
            quorate: true,
            nodes_online: vec!["pve1".into()],
            ..Default::default()
        }],
        last_cycle: "2026-11-28T10:00:00Z".into(),
        cycle_ms: 42,
        ..Default::default()
    }
}

/// A status directory with `web-01` (lab/pve1, VMID 101) and `dns-01` (a container on
/// fra/fra1, VMID 4100), a summary and no orphans.
fn fleet_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    write_yaml(
        d.path(),
        "web-01.yaml",
        &spec_file("web-01", "lab", "pve1", 101),
    );
    let mut dns = spec_file("dns-01", "fra", "fra1", 4100);
    dns.kind = Some("ProxmoxLXC".into());
    dns.conditions[0] = condition(
        "Ready",
        ConditionStatus::False,
        "Stalled",
        "the node is offline",
    );
    write_yaml(d.path(), "dns-01.yaml", &dns);
    write_yaml(d.path(), "_summary.yaml", &summary());
    d
}

/// The status files with every string a spec, a guest or PVE can put there set to hostile
/// values: one spec `evil`, the summary and the orphans.
fn hostile_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let mut f = spec_file("evil", SCRIPT, IMG, 666);
    f.name = SCRIPT.into();
    f.vm_name = IMG.into();
    f.state = SCRIPT.into();
    f.kind = Some(IMG.into());
    f.ip_addresses = vec![SCRIPT.into(), IMG.into(), JS.into()];
    f.tags = vec![SCRIPT.into(), JS.into()];
    f.labels = BTreeMap::from([
        (SCRIPT.to_string(), IMG.to_string()),
        ("link".to_string(), JS.to_string()),
    ]);
    f.commit = Some(IMG.into());
    f.spec_file = Some(JS.into());
    f.observed_generation = Some(SCRIPT.into());
    f.updated_at = Some(IMG.into());
    f.conditions = vec![
        condition("Ready", ConditionStatus::False, SCRIPT, IMG),
        condition(SCRIPT, ConditionStatus::Unknown, JS, SCRIPT),
        condition("Synced", ConditionStatus::False, IMG, JS),
        condition("Suspended", ConditionStatus::True, "Suspended", IMG),
        condition("RebootPending", ConditionStatus::True, IMG, SCRIPT),
    ];
    f.conditions[0].last_transition_time = IMG.into();
    f.last_task = Some(TaskRecord {
        upid: SCRIPT.into(),
        kind: IMG.into(),
        status: JS.into(),
        at: SCRIPT.into(),
    });
    f.backoff = Some(BackoffRecord {
        attempts: 3,
        next_attempt: IMG.into(),
        category: SCRIPT.into(),
        message: JS.into(),
    });
    f.history = vec![AttemptRecord {
        at: IMG.into(),
        action: SCRIPT.into(),
        outcome: IMG.into(),
        tasks: vec![JS.into(), SCRIPT.into()],
        took_ms: None,
    }];
    f.drift = vec![crate::status::DriftRecord {
        field: SCRIPT.into(),
        spec: IMG.into(),
        guest: JS.into(),
        at_next_start: true,
    }];
    write_yaml(d.path(), "evil.yaml", &f);
    let mut s = summary();
    s.commit = Some(SCRIPT.into());
    s.source_error = Some(IMG.into());
    s.last_cycle = SCRIPT.into();
    s.refused = vec![SCRIPT.into(), JS.into()];
    s.recent_cycles = vec![crate::status::CycleRecord {
        at: SCRIPT.into(),
        ms: 5,
        actions: 1,
        failed: 0,
        sites_down: 0,
    }];
    s.refused_commit = Some(RefusedCommitRecord {
        commit: IMG.into(),
        reason: SCRIPT.into(),
        message: JS.into(),
    });
    s.sites[0].name = SCRIPT.into();
    s.sites[0].error = Some(IMG.into());
    s.sets = vec![crate::status::SetSummary {
        name: SCRIPT.into(),
        desired: 1,
        ready: 0,
        not_ready: vec![IMG.into()],
    }];
    write_yaml(d.path(), "_summary.yaml", &s);
    write_yaml(
        d.path(),
        "_orphans.yaml",
        &OrphansFile {
            version: 2,
            orphans: vec![OrphanRecord {
                site: SCRIPT.into(),
                vm_id: 7,
                kind: Some(IMG.into()),
                node: IMG.into(),
                name: Some(SCRIPT.into()),
                state: JS.into(),
                first_seen: IMG.into(),
                action: SCRIPT.into(),
                duplicate_of: Some(IMG.into()),
            }],
            updated_at: None,
        },
    );
    d
}

fn get(dir: &Path, page: Page<'_>) -> (u16, HeaderMap, String) {
    get_with(
        &Pages::new(dir.to_path_buf(), None),
        page,
        &HeaderMap::new(),
    )
}

fn get_with(pages: &Pages, page: Page<'_>, headers: &HeaderMap) -> (u16, HeaderMap, String) {
    request(pages, &Method::GET, page, headers)
}

fn request(
    pages: &Pages,
    method: &Method,
    page: Page<'_>,
    headers: &HeaderMap,
) -> (u16, HeaderMap, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let response = rt.block_on(respond(method, headers, page, pages));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = rt.block_on(http_body_util::BodyExt::collect(response.into_body()));
    let body = String::from_utf8(body.unwrap().to_bytes().to_vec()).unwrap();
    (status, headers, body)
}

/// Every element the templates write; an injected one is not among them.
const ELEMENTS: &[&str] = &[
    "!DOCTYPE", "html", "head", "meta", "title", "link", "body", "header", "nav", "a", "dl", "dt",
    "dd", "time", "code", "span", "p", "main", "footer", "h1", "h2", "h3", "small", "table",
    "thead", "tbody", "tr", "th", "td", "section", "br", "svg", "rect", "pre",
];

/// `html` holds no element but the templates' own, every link is to a path of this server,
/// and the hostile strings are there only escaped.
fn assert_inert(html: &str) {
    assert_inert_but_for(html, "/");
}

/// [`assert_inert`], links allowed to start with `/` or `forge`.
fn assert_inert_but_for(html: &str, forge: &str) {
    for (i, _) in html.match_indices('<') {
        let rest = &html[i + 1..];
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let tag: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '!')
            .collect();
        assert!(
            ELEMENTS.contains(&tag.as_str()),
            "element <{tag}> at {i}: {}",
            &html[i..(i + 80).min(html.len())]
        );
    }
    for (i, _) in html.match_indices("href=") {
        let value = &html[i + 5..];
        assert!(
            value.starts_with("\"/") || value.starts_with(&format!("\"{forge}")),
            "a link off the server: {value:.60}"
        );
    }
    assert!(
        !html.contains(" src=\""),
        "nothing is loaded but the stylesheet"
    );
    assert!(!html.contains("<script"));
    assert!(!html.contains("<img"));
    assert!(!html.contains(IMG), "no attribute is closed early");
    assert!(!html.to_lowercase().contains("href=\"javascript"));
}

#[test]
fn the_fleet_page_shows_every_spec_by_site_and_node() {
    let d = fleet_dir();
    let (code, _, html) = get(d.path(), Page::Fleet);
    assert_eq!(code, 200, "{html}");
    assert_inert(&html);
    assert!(html.contains(r#"<meta http-equiv="refresh" content="10">"#));
    assert!(html.contains(r#"<link rel="stylesheet" href="/style.css">"#));
    for needle in [
        "<h2>Site fra",
        "<h2>Site lab <small>reachable, quorate</small>",
        "<h3>Node fra1</h3>",
        "<h3>Node pve1</h3>",
        r#"<a href="/spec/web-01">web-01</a>"#,
        r#"<a href="/spec/dns-01">dns-01</a>"#,
        r#"<td class="num">101</td>"#,
        r#"<td class="num">4100</td>"#,
        "<td>container</td>",
        "<td>VM</td>",
        r#"<td class="good" title="Available">True</td>"#,
        "the node is offline",
        "3f2c9a1e0b7d",
        "took 42 ms",
        "Orphans (0)",
    ] {
        assert!(html.contains(needle), "{needle} in {html}");
    }
    // Sites sorted: fra before lab.
    assert!(html.find("Site fra").unwrap() < html.find("Site lab").unwrap());
}

#[test]
fn the_fleet_page_draws_the_last_cycles_as_an_svg_timeline() {
    let d = fleet_dir();
    let cycle = |at: &str, ms, actions, failed, sites_down| crate::status::CycleRecord {
        at: at.into(),
        ms,
        actions,
        failed,
        sites_down,
    };
    let mut s = summary();
    s.recent_cycles = vec![
        cycle("2026-11-28T09:58:00Z", 12, 0, 0, 0),
        cycle("2026-11-28T09:59:00Z", 3400, 4, 0, 0),
        cycle("2026-11-28T10:00:00Z", 42, 1, 1, 0),
        cycle("2026-11-28T10:00:30Z", 0, 0, 0, 1),
    ];
    write_yaml(d.path(), "_summary.yaml", &s);
    let (code, _, html) = get(d.path(), Page::Fleet);
    assert_eq!(code, 200, "{html}");
    assert_inert(&html);
    for needle in [
        r#"<svg class="timeline" width="56" height="48" viewBox="0 0 56 48""#,
        // The longest cycle is the whole height; an instant one still 3 px.
        r#"<rect x="14" y="0" width="10" height="48" class="acted">"#,
        r#"<rect x="42" y="45" width="10" height="3" class="failed">"#,
        r#"class="idle"><title>2026-11-28T09:58:00Z"#,
        "3400 ms, 4 action(s)</title>",
        "42 ms, 1 action(s), 1 failed</title>",
        "1 site(s) unreadable</title>",
        "4 cycle(s) since",
        "5 action(s), 1 failed; the longest took 3400 ms",
    ] {
        assert!(html.contains(needle), "{needle} in {html}");
    }
    // No cycle recorded (a summary from before recentCycles): no timeline.
    write_yaml(d.path(), "_summary.yaml", &summary());
    let (_, _, html) = get(d.path(), Page::Fleet);
    assert!(!html.contains("<svg"), "{html}");
}

#[test]
fn the_spec_page_shows_conditions_history_and_backoff() {
    let d = fleet_dir();
    let mut f = spec_file("web-01", "lab", "pve1", 101);
    f.tags = vec!["frontend".into()];
    f.labels = BTreeMap::from([("role".to_string(), "web".to_string())]);
    f.history = vec![AttemptRecord {
        at: "2026-11-28T09:59:00Z".into(),
        action: "clone from template 9000".into(),
        outcome: "OK".into(),
        tasks: vec![
            "UPID:pve1:000A1A2B:0B3C4C5D:67C2F0A0:qmclone:9000:proxsync@pve!gitops:".into(),
        ],
        took_ms: Some(12_340),
    }];
    f.backoff = Some(BackoffRecord {
        attempts: 2,
        next_attempt: "2026-11-28T10:05:00Z".into(),
        category: "Transient".into(),
        message: "PVE answered 500".into(),
    });
    f.drift = vec![crate::status::DriftRecord {
        field: "memory".into(),
        spec: "4096 MiB".into(),
        guest: "2048 MiB".into(),
        at_next_start: true,
    }];
    write_yaml(d.path(), "web-01.yaml", &f);
    let (code, _, html) = get(d.path(), Page::Spec("web-01"));
    assert_eq!(code, 200, "{html}");
    assert_inert(&html);
    for needle in [
        "<h1>web-01 <small>VM</small></h1>",
        "<dd>101</dd>",
        "<code>10.0.0.5</code>",
        r#"<span class="tag">frontend</span>"#,
        r#"<span class="tag">role=web</span>"#,
        "<code>3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d</code>",
        r#"<td>Ready</td><td class="status-True">True</td><td>Available</td>"#,
        "2026-11-28T10:00:00Z",
        "clone from template 9000</td><td class=\"num\">12.3 s</td>",
        "<code>UPID:pve1:000A1A2B:0B3C4C5D:67C2F0A0:qmclone:9000:proxsync@pve!gitops:</code>",
        "2 attempt(s)",
        "Transient: PVE answered 500",
        "<td>memory</td><td>4096 MiB</td><td>2048 MiB</td><td>at the guest's next start</td>",
    ] {
        assert!(html.contains(needle), "{needle} in {html}");
    }
}

/// With `[web] file_url`, a spec's page links its file at the applied commit, the path
/// %-encoded; a commit or path the daemon would not write gets no link.
#[test]
fn a_spec_links_its_file_at_the_applied_commit_on_the_forge() {
    const FORGE: &str = "https://git.example/acme/fleet/src/commit/{commit}/{path}";
    let d = fleet_dir();
    let pages = Pages::new(d.path().to_path_buf(), None).with_file_url(FORGE);
    let page = |f: &SpecFile| {
        write_yaml(d.path(), "web-01.yaml", f);
        let (code, _, html) = get_with(&pages, Page::Spec("web-01"), &HeaderMap::new());
        assert_eq!(code, 200, "{html}");
        html
    };
    let mut f = spec_file("web-01", "lab", "pve1", 101);
    f.spec_file = Some("specs/eu fra/web-01.yaml".into());
    let html = page(&f);
    assert!(
        html.contains(
            "<a href=\"https://git.example/acme/fleet/src/commit/\
             3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d/specs/eu%20fra/web-01.yaml\" \
             rel=\"noopener noreferrer\"><code>specs/eu fra/web-01.yaml</code></a>"
        ),
        "{html}"
    );
    for (commit, path) in [
        (Some("not-a-commit"), "specs/web-01.yaml"),
        (None, "specs/web-01.yaml"),
        (
            Some(f.commit.clone().unwrap().as_str()),
            "specs/../../evil.yaml",
        ),
        (Some(f.commit.clone().unwrap().as_str()), "/etc/passwd"),
    ] {
        f.commit = commit.map(str::to_string);
        f.spec_file = Some(path.into());
        let html = page(&f);
        assert!(!html.contains("git.example"), "{commit:?} {path}: {html}");
        assert!(html.contains(&format!("<code>{path}</code>")), "{html}");
    }
    // Hostile strings in the path are %-encoded in the link and escaped in its text.
    f.commit = Some("3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d".into());
    f.spec_file = Some(format!("a/{SCRIPT}{IMG}.yaml"));
    let html = page(&f);
    assert!(html.contains("/a/%3Cscript%3Ealert%281%29"), "{html}");
    assert_inert_but_for(&html, "https://git.example/");
}

#[test]
fn an_unknown_or_invalid_spec_name_is_not_found() {
    let d = fleet_dir();
    std::fs::write(d.path().join("Upper.yaml"), "name: Upper\n").unwrap();
    let long = "a".repeat(64);
    std::fs::write(d.path().join(format!("{long}.yaml")), "name: a\n").unwrap();
    for name in [
        "nope",
        "",
        "_summary",
        "_orphans",
        "..",
        "../web-01",
        "..%2fweb-01",
        "web-01.yaml",
        "web-01/",
        "a/b",
        "Upper",
        "-a",
        "%2e%2e",
        &long,
    ] {
        let (code, headers, html) = get(d.path(), Page::Spec(name));
        assert_eq!(code, 404, "{name}: {html}");
        assert_eq!(headers[CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(html.contains("Not found"), "{html}");
    }
}

#[test]
fn hostile_strings_appear_only_escaped() {
    let d = hostile_dir();
    for page in [Page::Fleet, Page::Spec("evil"), Page::Orphans] {
        let (code, _, html) = get(d.path(), page);
        assert_eq!(code, 200, "{html}");
        assert_inert(&html);
        // There, as text.
        assert!(html.contains("alert(1)"), "{html}");
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;")
                || html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }
    let (_, _, html) = get(d.path(), Page::Spec("evil"));
    assert!(html.contains(JS), "javascript: stays text: {html}");
    assert!(html.contains("onerror=alert(1)"));
}

#[test]
fn an_empty_or_missing_status_directory_is_a_page_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, html) = get(d.path(), Page::Fleet);
    assert_eq!(code, 200, "{html}");
    assert!(html.contains("No <code>_summary.yaml</code> yet"), "{html}");
    let (code, _, html) = get(d.path(), Page::Orphans);
    assert_eq!(code, 200, "{html}");
    let gone = d.path().join("gone");
    let (code, _, html) = get(&gone, Page::Fleet);
    assert_eq!(code, 503, "{html}");
    assert!(!gone.exists(), "a page never creates the status directory");
    let (code, _, _) = get(&gone, Page::Spec("web-01"));
    assert_eq!(code, 404);
}

#[test]
fn the_orphans_page_shows_what_happens_and_the_refusals() {
    let d = fleet_dir();
    let mut s = summary();
    s.refused = vec!["refused to delete 7 of 10 managed VMs (max_delete_fraction 0.5)".into()];
    s.refused_commit = Some(RefusedCommitRecord {
        commit: "abc123".into(),
        reason: "UnverifiedSignature".into(),
        message: "not signed by a trusted key".into(),
    });
    write_yaml(d.path(), "_summary.yaml", &s);
    write_yaml(
        d.path(),
        "_orphans.yaml",
        &OrphansFile {
            version: 2,
            orphans: vec![OrphanRecord {
                site: "lab".into(),
                vm_id: 123,
                kind: Some("ProxmoxVM".into()),
                node: "pve1".into(),
                name: Some("old-web".into()),
                state: "stopped".into(),
                first_seen: "2026-11-28T09:00:00Z".into(),
                action: "will delete after 2026-11-29T09:00:00Z".into(),
                duplicate_of: None,
            }],
            updated_at: None,
        },
    );
    let (code, _, html) = get(d.path(), Page::Orphans);
    assert_eq!(code, 200, "{html}");
    assert_inert(&html);
    for needle in [
        r#"<td class="num">123</td>"#,
        "old-web",
        "will delete after 2026-11-29T09:00:00Z",
        "Safety valve: refused to delete 7 of 10 managed VMs",
        "<code>abc123</code> (UnverifiedSignature): not signed by a trusted key",
        "Orphans (1)",
    ] {
        assert!(html.contains(needle), "{needle} in {html}");
    }
}

fn assert_security_headers(headers: &HeaderMap) {
    assert_eq!(
        headers[CONTENT_SECURITY_POLICY],
        "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; \
         base-uri 'none'; form-action 'none'"
    );
    assert_eq!(headers[X_FRAME_OPTIONS], "DENY");
    assert_eq!(headers[X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(headers[REFERRER_POLICY], "no-referrer");
    assert_eq!(headers[CACHE_CONTROL], "no-store");
}

#[test]
fn every_answer_carries_the_security_headers() {
    let d = fleet_dir();
    let pages = Pages::new(d.path().to_path_buf(), None);
    let none = HeaderMap::new();
    for (page, code, content_type) in [
        (Page::Fleet, 200, "text/html; charset=utf-8"),
        (Page::Spec("web-01"), 200, "text/html; charset=utf-8"),
        (Page::Spec("nope"), 404, "text/html; charset=utf-8"),
        (Page::Orphans, 200, "text/html; charset=utf-8"),
        (Page::Style, 200, "text/css; charset=utf-8"),
    ] {
        let (got, headers, _) = get_with(&pages, page, &none);
        assert_eq!(got, code);
        assert_eq!(headers[CONTENT_TYPE], content_type);
        assert_security_headers(&headers);
    }
    let (_, _, css) = get_with(&pages, Page::Style, &none);
    assert!(css.contains("body {"), "{css}");
}

#[test]
fn only_get_and_head_are_allowed() {
    let d = fleet_dir();
    let pages = Pages::new(d.path().to_path_buf(), None);
    let (code, _, html) = request(&pages, &Method::HEAD, Page::Fleet, &HeaderMap::new());
    assert_eq!(code, 200, "{html}");
    for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let (code, headers, _) = request(&pages, &method, Page::Fleet, &HeaderMap::new());
        assert_eq!(code, 405, "{method}");
        assert_eq!(headers[ALLOW], "GET, HEAD");
        assert_security_headers(&headers);
    }
}

#[test]
fn a_token_is_asked_for_when_one_is_set() {
    let d = fleet_dir();
    let pages = Pages::new(d.path().to_path_buf(), Some("s3cret-t0ken"));
    let with = |value: &str| {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    };
    for headers in [
        HeaderMap::new(),
        with("Bearer wrong"),
        with("Bearer s3cret-t0ke"),
        with("Bearer s3cret-t0ken0"),
        with("Bearer"),
        with("Basic czNjcmV0LXQwa2Vu"),
        with("s3cret-t0ken"),
        with("Token s3cret-t0ken"),
    ] {
        for page in [
            Page::Fleet,
            Page::Spec("web-01"),
            Page::Orphans,
            Page::Style,
        ] {
            let (code, h, body) = get_with(&pages, page, &headers);
            assert_eq!(code, 401, "{headers:?}: {body}");
            assert_eq!(h[WWW_AUTHENTICATE], "Bearer");
            assert_security_headers(&h);
            assert!(!body.contains("s3cret"));
        }
        // Refused before the method is looked at.
        let (code, _, _) = request(&pages, &Method::POST, Page::Fleet, &headers);
        assert_eq!(code, 401);
    }
    for headers in [with("Bearer s3cret-t0ken"), with("bearer  s3cret-t0ken ")] {
        for page in [Page::Fleet, Page::Spec("web-01"), Page::Orphans] {
            let (code, _, body) = get_with(&pages, page, &headers);
            assert_eq!(code, 200, "{body}");
            assert!(!body.contains("s3cret"), "no secret on a page");
        }
    }
}

#[test]
fn routes() {
    assert_eq!(route("/"), Some(Page::Fleet));
    assert_eq!(route("/orphans"), Some(Page::Orphans));
    assert_eq!(route("/style.css"), Some(Page::Style));
    assert_eq!(route("/spec/web-01"), Some(Page::Spec("web-01")));
    assert_eq!(route("/spec/../x"), Some(Page::Spec("../x")));
    assert_eq!(route("/spec"), None);
    assert_eq!(route("/orphans/"), None);
    assert_eq!(route("/metrics"), None);
    assert_eq!(route("//"), None);
}

/// Through the listener: HEAD has no body, a page needs the token, a hook does not.
#[tokio::test]
async fn through_the_listener_head_has_no_body_and_hooks_need_no_token() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = fleet_dir();
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let routes = super::super::Routes {
        receivers: vec![],
        branch: "main".into(),
        pages: Pages::new(d.path().to_path_buf(), Some("t0ken")),
    };
    let config = crate::config::WebConfig {
        listen: crate::config::MetricsListen::Tcp("127.0.0.1:0".parse().unwrap()),
        token_file: None,
        file_url: None,
    };
    let web = super::super::serve(
        &config,
        routes,
        tx,
        crate::telemetry::metrics::Metrics::new("main"),
    )
    .unwrap();
    let send = async |head: &str| {
        let mut s = tokio::net::TcpStream::connect(web.local()).await.unwrap();
        s.write_all(format!("{head}\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).to_string()
    };
    let answer = send("GET / HTTP/1.1").await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let answer = send("GET / HTTP/1.1\r\nauthorization: Bearer t0ken").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("web-01"), "{answer}");
    let answer = send("HEAD /spec/web-01 HTTP/1.1\r\nauthorization: Bearer t0ken").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "no body: {answer}");
    // The hooks' paths are not the pages': no token asked (no receiver of that name).
    let answer = send("POST /hooks/gh HTTP/1.1\r\ncontent-length: 0").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    web.stop();
}

/// A benchmark, not a check: `cargo test --lib shell::web::ui::tests::fleet_page_bench --
/// --ignored --nocapture`. The fleet page over N status files (`BENCH_WEB_SPECS`, 10,000 by
/// default): how long a request takes and how large the page is.
#[test]
#[ignore]
fn fleet_page_bench() {
    let n: usize = std::env::var("BENCH_WEB_SPECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let d = tempfile::tempdir().unwrap();
    for i in 0..n {
        let name = format!("vm-{i:05}");
        let node = format!("pve{}", i % 8);
        write_yaml(
            d.path(),
            &format!("{name}.yaml"),
            &spec_file(&name, "lab", &node, 100 + i as u32),
        );
    }
    write_yaml(d.path(), "_summary.yaml", &summary());
    let t = std::time::Instant::now();
    let sd = crate::status::StatusDir::reader(d.path());
    let names = sd.spec_names().unwrap();
    let parsed = crate::util::par::map(names, |n| sd.read_spec(&n).unwrap().is_some());
    assert!(parsed.iter().all(|p| *p));
    println!("parsing alone: {} ms", t.elapsed().as_millis());
    for round in 0..3 {
        let t = std::time::Instant::now();
        let (code, _, html) = get(d.path(), Page::Fleet);
        assert_eq!(code, 200);
        println!(
            "round {round}: {n} specs: {} ms, {} KiB",
            t.elapsed().as_millis(),
            html.len() / 1024
        );
    }
}

/// Runs `f` on a thread of its own: its result, or `None` when it has not returned within
/// `secs` (the thread is left behind).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).ok()
}

fn mkfifo(path: &Path) -> bool {
    std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

/// A status file that is a FIFO: the pages answer at once rather than wait for ever for a
/// writer (each such request held a blocking thread until the daemon stopped).
#[test]
fn a_fifo_in_the_status_directory_does_not_hang_a_page() {
    let d = fleet_dir();
    if !mkfifo(&d.path().join("stuck.yaml")) {
        eprintln!("mkfifo unavailable; skipping");
        return;
    }
    let dir = d.path().to_path_buf();
    let got = within(5, move || get(&dir, Page::Spec("stuck")).0);
    assert_eq!(got, Some(404), "/spec/stuck answers, a 404");
    // The summary, which every page reads.
    std::fs::remove_file(d.path().join("_summary.yaml")).unwrap();
    assert!(mkfifo(&d.path().join("_summary.yaml")));
    for page in ["fleet", "orphans", "spec"] {
        let dir = d.path().to_path_buf();
        let got = within(5, move || {
            let page = match page {
                "fleet" => Page::Fleet,
                "orphans" => Page::Orphans,
                _ => Page::Spec("web-01"),
            };
            let (code, _, html) = get(&dir, page);
            (code, html.contains("No <code>_summary.yaml</code> yet"))
        });
        assert_eq!(got, Some((200, true)), "{page}");
    }
}

/// A status file that is a symlink to a file elsewhere (here a valid status file outside
/// the directory): `/spec/<name>` does not show it, as the fleet page does not list it.
#[test]
fn a_symlinked_status_file_is_not_followed() {
    let d = fleet_dir();
    let outside = tempfile::tempdir().unwrap();
    let mut f = spec_file("elsewhere", "lab", "pve1", 300);
    f.vm_name = "read-from-outside".into();
    write_yaml(outside.path(), "elsewhere.yaml", &f);
    std::os::unix::fs::symlink(
        outside.path().join("elsewhere.yaml"),
        d.path().join("linked.yaml"),
    )
    .unwrap();
    let (code, _, html) = get(d.path(), Page::Spec("linked"));
    assert_eq!(code, 404, "{html}");
    assert!(!html.contains("read-from-outside"), "{html}");
    let (code, _, html) = get(d.path(), Page::Fleet);
    assert_eq!(code, 200);
    assert!(!html.contains("/spec/linked"), "{html}");
    // A symlinked summary is not read either.
    std::fs::rename(
        d.path().join("_summary.yaml"),
        outside.path().join("s.yaml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("s.yaml"),
        d.path().join("_summary.yaml"),
    )
    .unwrap();
    let (_, _, html) = get(d.path(), Page::Fleet);
    assert!(html.contains("No <code>_summary.yaml</code> yet"), "{html}");
}

/// Renders are bounded: with every render slot taken (renders still running for requests
/// that may be gone), a page request waits `RENDER_WAIT` at most, holding no thread, then
/// is a 503 with `Retry-After`; the stylesheet, which renders nothing, is served. Once a
/// slot is free, pages render again.
#[test]
fn renders_are_bounded_and_a_request_beyond_them_is_busy() {
    let d = fleet_dir();
    let pages = Pages::new(d.path().to_path_buf(), None);
    let held = pages
        .renders
        .clone()
        .try_acquire_many_owned(MAX_RENDERS as u32)
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    for page in [Page::Fleet, Page::Orphans, Page::Spec("web-01")] {
        let started = rt.block_on(async { tokio::time::Instant::now() });
        let response = rt.block_on(respond(&Method::GET, &HeaderMap::new(), page, &pages));
        let waited = rt.block_on(async { started.elapsed() });
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(waited >= RENDER_WAIT, "{waited:?}");
        assert_eq!(response.headers()[RETRY_AFTER], "5");
        assert_security_headers(response.headers());
    }
    let response = rt.block_on(respond(
        &Method::GET,
        &HeaderMap::new(),
        Page::Style,
        &pages,
    ));
    assert_eq!(response.status(), StatusCode::OK);
    drop(held);
    let (code, _, html) = get_with(&pages, Page::Fleet, &HeaderMap::new());
    assert_eq!(code, 200, "{html}");
    assert_eq!(pages.renders.available_permits(), MAX_RENDERS);
}

#[test]
fn a_host_by_address_or_localhost_is_an_address() {
    let is = |host: Option<&str>| {
        let mut headers = HeaderMap::new();
        if let Some(h) = host {
            headers.insert(HOST, HeaderValue::from_str(h).unwrap());
        }
        host_is_an_address(&headers)
    };
    for host in [
        None,
        Some("127.0.0.1"),
        Some("127.0.0.1:8787"),
        Some("192.0.2.7:80"),
        Some("localhost"),
        Some("LocalHost:8787"),
        Some("[::1]"),
        Some("[::1]:8787"),
        Some("[2001:db8::1]:8787"),
    ] {
        assert!(is(host), "{host:?}");
    }
    for host in [
        "rebind.example",
        "rebind.example:8787",
        "127.0.0.1.rebind.example:8787",
        "localhost.rebind.example",
        "localhost.",
        "127.0.0.1:8787@rebind.example",
        "127.0.0.1:x",
        "[::1]x",
        "[::1",
        "[rebind.example]:8787",
        "",
    ] {
        assert!(!is(Some(host)), "{host}");
    }
}

/// DNS rebinding: a site the operator's browser visits makes its own host name resolve to
/// the listener's address, then reads the pages as its own. Without a token, on TCP, a page
/// answers only a request to an address or `localhost`; with a token (which such a site
/// cannot send), or on a unix socket (a reverse proxy's), any host.
#[test]
fn without_a_token_a_tcp_listener_answers_no_other_sites_host_name() {
    let d = fleet_dir();
    let token = d.path().join("web.token");
    std::fs::write(&token, "a-long-enough-web-token\n").unwrap();
    let config = |web: &str| {
        let text = format!(
            "status_dir = \"{}\"\n[source]\npath = \"/srv/git/vms.git\"\n[[site]]\n\
             name = \"lab\"\nendpoint = \"https://pve1.example:8006\"\n\
             token_id = \"proxsync@pve!gitops\"\n[web]\n{web}\n",
            d.path().display()
        );
        crate::config::Config::parse(&d.path().join("proxsync.toml"), &text).unwrap()
    };
    let headers = |host: &str, bearer: bool| {
        let mut h = HeaderMap::new();
        h.insert(HOST, HeaderValue::from_str(host).unwrap());
        if bearer {
            h.insert(
                AUTHORIZATION,
                HeaderValue::from_static("Bearer a-long-enough-web-token"),
            );
        }
        h
    };
    let tcp = Pages::load(&config("listen = \"127.0.0.1:8787\"")).unwrap();
    for page in [
        Page::Fleet,
        Page::Spec("web-01"),
        Page::Orphans,
        Page::Style,
    ] {
        let (code, h, body) = get_with(&tcp, page, &headers("rebind.example:8787", false));
        assert_eq!(code, 421, "{body}");
        assert_security_headers(&h);
        assert!(!body.contains("web-01"), "{body}");
    }
    for host in ["127.0.0.1:8787", "localhost:8787"] {
        let (code, _, html) = get_with(&tcp, Page::Fleet, &headers(host, false));
        assert_eq!(code, 200, "{host}: {html}");
        assert!(html.contains("web-01"));
    }
    let with_token = Pages::load(&config(&format!(
        "listen = \"127.0.0.1:8787\"\ntoken_file = \"{}\"",
        token.display()
    )))
    .unwrap();
    let (code, _, _) = get_with(&with_token, Page::Fleet, &headers("proxsync.example", true));
    assert_eq!(code, 200);
    let (code, _, _) = get_with(&with_token, Page::Fleet, &headers("rebind.example", false));
    assert_eq!(code, 401);
    let unix = Pages::load(&config(&format!(
        "listen = \"unix:{}\"",
        d.path().join("web.sock").display()
    )))
    .unwrap();
    let (code, _, _) = get_with(&unix, Page::Fleet, &headers("proxsync.example", false));
    assert_eq!(code, 200);
}
