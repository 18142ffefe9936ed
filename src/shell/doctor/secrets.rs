//! The secrets the daemon reads from files at start and at each reload, beyond the sites'
//! tokens: `[web] token_file`, each `[[receiver]]`'s and each `[[notify]]`'s. A daemon that
//! cannot read one refuses to start (or to reload); doctor says so before. Never shows one.

use super::{Check, Level, check};
use crate::config::Config;

pub(crate) fn check_secrets(config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    let mut push = |subject: String, result: Result<(), String>, what: &str| {
        out.push(match result {
            Ok(()) => check(Level::Ok, subject, format!("{what} read"), None),
            Err(e) => check(
                Level::Fail,
                subject,
                e,
                Some(
                    "write the file (one line), readable by the proxsync user alone: \
                     install -m 0400 -o proxsync -g proxsync /dev/null FILE, then fill it"
                        .into(),
                ),
            ),
        });
    };
    if let Some(web) = config.web.as_ref().filter(|w| w.token_file.is_some()) {
        let read = web.load_token().map(|_| ()).map_err(|e| e.to_string());
        push("web token".into(), read, "the pages' bearer token");
    }
    for r in &config.receivers {
        let read = r.load_secret().map(|_| ()).map_err(|e| e.to_string());
        push(format!("receiver {}", r.name), read, "its secret");
    }
    for n in &config.notify {
        let read = (n.load_url().map(|_| ()))
            .and_then(|()| n.load_secret().map(|_| ()))
            .map_err(|e| e.to_string());
        push(format!("notify {}", n.name), read, "its URL and secret");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each secret file the daemon needs is checked: a missing one fails, naming the key and
    /// the file, and no secret's content is ever in the report.
    #[test]
    fn each_secret_file_is_read_and_none_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("web.token"), "web-token-0123456789abcdef\n").unwrap();
        std::fs::write(d.join("gh.secret"), "hook-key-of-16-chars\n").unwrap();
        let text = format!(
            "state_dir = \"{}\"\n[source]\npath = \"/srv/vms\"\n[[site]]\nname = \"lab\"\n\
             endpoint = \"https://pve:8006\"\ntoken_id = \"a@pve!b\"\n\
             [web]\ntoken_file = \"web.token\"\n\
             [[receiver]]\nname = \"gh\"\ntype = \"github\"\nsecret_file = \"gh.secret\"\n\
             [[receiver]]\nname = \"lab\"\ntype = \"gitlab\"\nsecret_file = \"gone.secret\"\n\
             [[notify]]\nname = \"chat\"\ntype = \"slack\"\nurl_file = \"slack.url\"\n",
            d.join("state").display()
        );
        let config = Config::parse(&d.join("proxsync.toml"), &text).unwrap();
        let checks = check_secrets(&config);
        let line = |subject: &str| {
            checks
                .iter()
                .find(|c| c.subject == subject)
                .unwrap_or_else(|| panic!("{subject} in {checks:?}"))
        };
        assert_eq!(line("web token").level, Level::Ok);
        assert_eq!(line("receiver gh").level, Level::Ok);
        let lab = line("receiver lab");
        assert_eq!(lab.level, Level::Fail);
        assert!(lab.message.contains("gone.secret"), "{lab}");
        let chat = line("notify chat");
        assert_eq!(chat.level, Level::Fail);
        assert!(chat.message.contains("slack.url"), "{chat}");
        let report: String = checks.iter().map(ToString::to_string).collect();
        assert!(
            !report.contains("web-token-0123") && !report.contains("hook-key-of"),
            "{report}"
        );
        assert!(crate::shell::doctor::failed(&checks));
    }
}
