//! The read-only web pages (`[web]`, docs/web-ui.md) end to end: a daemon on fakepve with
//! `[web] listen` on a free loopback port; after its first cycle `/` lists the spec under its
//! site and node with its VMID, and `/spec/<name>` shows it Ready, with the security headers.
//! Escaping, the token and the refusals are unit tests in `shell::web::ui`.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::engine::{Workspace, owned_vms, spec};
use common::{FakePve, default_scenario, free_port};

use super::daemon::{Daemon, wait_until};

/// `GET path` on `addr`: the status code and the whole answer (headers and body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the daemon's web listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let code = answer.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, answer)
}

#[test]
fn the_pages_show_a_spec_ready_with_its_vmid() {
    let mut pve = FakePve::start(default_scenario());
    let addr = format!("127.0.0.1:{}", free_port());
    let ws = Workspace::with_extra(&pve, &format!("[web]\nlisten = \"{addr}\"\n"));
    ws.commit_specs(&[("a.yaml", spec("web-01", "pve1", "9000", ""))]);
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    let vmid = owned_vms(&mut pve)
        .into_iter()
        .find(|(_, name)| name == "web-01")
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("web-01 made\n{}", daemon.log()));

    // Ready once its VM is up (a cycle or two on fakepve's task timing).
    let mut page = String::new();
    wait_until("web-01 Ready on its page", Duration::from_secs(30), || {
        let (code, answer) = get(&addr, "/spec/web-01");
        page = answer;
        code == 200
            && page.contains(r#"<td>Ready</td><td class="status-True">True</td><td>Available</td>"#)
    });
    assert!(page.contains("<h1>web-01 <small>VM</small></h1>"), "{page}");
    assert!(
        page.contains(&format!("<dt>VMID</dt><dd>{vmid}</dd>")),
        "{page}"
    );
    // Its effective spec, read from git at the commit it was applied from.
    assert!(page.contains("<h2>Effective spec</h2>"), "{page}");
    assert!(
        page.contains(
            "<pre><code>apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: web-01\n"
        ),
        "{page}"
    );
    // The last cycles, drawn.
    let (_, fleet) = get(&addr, "/");
    assert!(fleet.contains(r#"<svg class="timeline""#), "{fleet}");
    assert!(fleet.contains("action(s)</title></rect>"), "{fleet}");
    let head = page.to_lowercase();
    for header in [
        "content-type: text/html; charset=utf-8",
        "content-security-policy: default-src 'none'; style-src 'self'; img-src 'self'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
        "referrer-policy: no-referrer",
        "cache-control: no-store",
    ] {
        assert!(head.contains(header), "{header} in {page}");
    }

    let (code, fleet) = get(&addr, "/");
    assert_eq!(code, 200, "{fleet}");
    for needle in [
        "<h2>Site lab".to_string(),
        "<h3>Node pve1</h3>".to_string(),
        r#"<a href="/spec/web-01">web-01</a>"#.to_string(),
        format!(r#"<td class="num">{vmid}</td>"#),
        format!(r#"<td class="good" title="Available: VM {vmid} matches the spec">True</td>"#),
        "1 Ready".to_string(),
    ] {
        assert!(fleet.contains(&needle), "{needle} in {fleet}");
    }
    let (code, _) = get(&addr, "/spec/nope");
    assert_eq!(code, 404);
    let (code, _) = get(&addr, "/spec/..%2f_summary");
    assert_eq!(code, 404);
    let (code, orphans) = get(&addr, "/orphans");
    assert_eq!(code, 200, "{orphans}");
    let (code, css) = get(&addr, "/style.css");
    assert_eq!(code, 200, "{css}");
    assert!(
        css.to_lowercase().contains("content-type: text/css"),
        "{css}"
    );
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}

/// Where the browser test finds Chromium: `$PROXSYNC_CHROMIUM`, or Debian's package.
fn chromium() -> std::path::PathBuf {
    let path = std::env::var_os("PROXSYNC_CHROMIUM")
        .map(Into::into)
        .unwrap_or_else(|| std::path::PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "the web UI's browser test needs headless Chromium at {}: install Debian's package \
         (`apt-get install -y chromium`, as scripts/test does) or set PROXSYNC_CHROMIUM",
        path.display()
    );
    path
}

/// Runs Chromium headless on `url` with `args` (`--dump-dom`, `--screenshot=...`), a fresh
/// profile each time, killed after 90 s; its stdout.
fn browse(url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let started = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "chromium on {url}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";
const JS: &str = "javascript:alert(1)";

/// A status file `evil.yaml` and an `_orphans.yaml` whose every string is hostile, as a
/// spec's labels, a guest agent or PVE's messages could make them. Single-quoted YAML: the
/// strings hold no `'`.
fn plant_hostile_status(status: &std::path::Path) {
    let evil = format!(
        "name: evil\nsite: lab\nnode: pve1\nvmId: 666\nvmName: '{IMG}'\nstate: '{SCRIPT}'\n\
         ipAddresses:\n- '{SCRIPT}'\n- '{IMG}'\ntags:\n- '{SCRIPT}'\n- '{JS}'\n\
         labels:\n  link: '{JS}'\n  '{SCRIPT}': '{IMG}'\ncommit: '{IMG}'\nspecFile: '{JS}'\n\
         initialization:\n  provisioned: true\nconditions:\n\
         - type: Ready\n  status: 'False'\n  reason: '{SCRIPT}'\n  message: '{IMG}'\n  lastTransitionTime: '{JS}'\n\
         - type: Synced\n  status: 'False'\n  reason: '{IMG}'\n  message: '{JS}'\n  lastTransitionTime: '{SCRIPT}'\n\
         lastTask:\n  upid: '{SCRIPT}'\n  type: '{IMG}'\n  status: '{JS}'\n  at: '{SCRIPT}'\n\
         backoff:\n  attempts: 3\n  nextAttempt: '{IMG}'\n  category: '{SCRIPT}'\n  message: '{JS}'\n\
         history:\n- at: '{IMG}'\n  action: '{SCRIPT}'\n  outcome: '{IMG}'\n  tasks:\n  - '{JS}'\n  - '{SCRIPT}'\n\
         drift:\n- field: '{SCRIPT}'\n  spec: '{IMG}'\n  guest: '{JS}'\n  atNextStart: true\n"
    );
    std::fs::write(status.join("evil.yaml"), evil).unwrap();
    let orphans = format!(
        "version: 2\norphans:\n- site: '{SCRIPT}'\n  vmId: 7\n  kind: ProxmoxVM\n  node: '{IMG}'\n\
         name: '{SCRIPT}'\n  state: '{JS}'\n  firstSeen: '{IMG}'\n  action: '{SCRIPT}'\n\
         duplicateOf: '{IMG}'\n"
    )
    .replace("\nname:", "\n  name:")
    .replace("\nduplicateOf:", "\n  duplicateOf:");
    std::fs::write(status.join("_orphans.yaml"), orphans).unwrap();
}

/// The elements the templates write; any other in a page's DOM was injected.
const ELEMENTS: &[&str] = &[
    "html", "head", "meta", "title", "link", "body", "header", "nav", "a", "dl", "dt", "dd",
    "time", "code", "span", "p", "main", "footer", "h1", "h2", "h3", "small", "table", "thead",
    "tbody", "tr", "th", "td", "section", "br", "svg", "rect", "pre",
];

/// The names of the elements in `dom`, its tags read past quoted attribute values (a `<`
/// in text is serialized `&lt;`).
fn elements(dom: &str) -> Vec<String> {
    let b = dom.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        if b.get(j) == Some(&b'/') {
            j += 1;
        }
        let start = j;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'!') {
            j += 1;
        }
        names.push(dom[start..j].to_lowercase());
        let mut quote = None;
        while j < b.len() {
            match (quote, b[j]) {
                (None, b'"' | b'\'') => quote = Some(b[j]),
                (Some(q), c) if c == q => quote = None,
                (None, b'>') => break,
                _ => {}
            }
            j += 1;
        }
        i = j + 1;
    }
    names
}

/// The DOM Chromium built holds only the templates' elements, no link off the server, and
/// the hostile strings as text (serialized escaped).
fn assert_dom_inert(url: &str, dom: &str) {
    assert!(dom.contains("</html>"), "{url}: no DOM dumped: {dom}");
    for name in elements(dom) {
        assert!(
            name == "!doctype" || ELEMENTS.contains(&name.as_str()),
            "{url}: an element <{name}> in the DOM: {dom}"
        );
    }
    assert!(
        !dom.contains("onerror=\""),
        "{url}: no attribute made: {dom}"
    );
    assert!(
        !dom.to_lowercase().contains("href=\"javascript"),
        "{url}: {dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{url}: the hostile text is shown as text: {dom}"
    );
}

/// Headless Chromium on the pages of a daemon on fakepve: with hostile strings in the status
/// files, the DOM it builds holds them as text and no element they would inject; a
/// screenshot of the fleet (written to docs/web-ui.png with PROXSYNC_BLESS=1, the README's).
#[test]
fn a_browser_shows_hostile_strings_as_text() {
    let browser = chromium();
    let mut pve = FakePve::start(default_scenario());
    let addr = format!("127.0.0.1:{}", free_port());
    let ws = Workspace::with_extra(&pve, &format!("[web]\nlisten = \"{addr}\"\n"));
    ws.commit_specs(&[
        ("web-01.yaml", spec("web-01", "pve1", "9000", "")),
        ("web-02.yaml", spec("web-02", "pve1", "9000", "")),
        (
            "db-01.yaml",
            spec("db-01", "pve1", "9000", "    powerState: stopped\n"),
        ),
        // Not Ready: the template is on pve1's local storage (the "why" column).
        ("cache-01.yaml", spec("cache-01", "pve2", "9000", "")),
    ]);
    let daemon = Daemon::start(&ws, None);
    daemon.wait_message("READY=1", Duration::from_secs(20), |m| {
        m.contains("READY=1")
    });
    assert_eq!(owned_vms(&mut pve).len(), 3, "{}", daemon.log());
    let _ = browser;
    wait_until("three specs Ready", Duration::from_secs(30), || {
        get(&addr, "/").1.contains("3 Ready")
    });
    // A few more cycles, asked for, so that the timeline has bars to show.
    wait_until("six cycles drawn", Duration::from_secs(60), || {
        let fleet = get(&addr, "/").1;
        let drawn = fleet.matches("</title></rect>").count();
        if drawn < 6 {
            ws.proxsync(&["reconcile"]);
        }
        drawn >= 6
    });
    eprintln!(
        "SUMMARY {}",
        std::fs::read_to_string(ws.path("status").join("_summary.yaml")).unwrap()
    );

    let shot = tempfile::tempdir().unwrap();
    let png = shot.path().join("web-ui.png");
    browse(
        &format!("http://{addr}/"),
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1280,800",
            "--hide-scrollbars",
        ],
    );
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
    if std::env::var_os("PROXSYNC_BLESS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/web-ui.png");
        std::fs::write(&docs, &bytes).unwrap();
        eprintln!("wrote {}", docs.display());
    }

    plant_hostile_status(&ws.path("status"));
    for path in ["/", "/spec/evil", "/orphans"] {
        let url = format!("http://{addr}{path}");
        let dom = browse(&url, &["--dump-dom"]);
        assert_dom_inert(&url, &dom);
        if path == "/spec/evil" {
            assert!(dom.contains(JS), "{dom}");
            assert!(dom.contains("onerror=alert(1)"), "shown as text: {dom}");
        }
    }
    assert!(daemon.stop(), "SIGTERM ends the daemon cleanly");
}
