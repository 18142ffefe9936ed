//! What an application container runs, PVE 9.1's options for it: `entrypoint` (the command run
//! as the container's init), `env` (its runtime environment) and a NIC's `hostManaged` (the host
//! configures the interface's addresses). pve-container 6 has them (`src/PVE/LXC/Config.pm`);
//! PVE 9.0 and older refuse them as unknown parameters, so the create's pre-flight, a converge
//! and `doctor` refuse a spec that names one on such a site ([`refusal`]).
//!
//! A container made from an OCI image gets these from the image at its create (pve-container
//! `src/PVE/LXC/Create.pm` `restore_oci_archive`: `entrypoint` from the image's `Entrypoint`
//! and `Cmd`, `env` from its `Env`, and `host-managed=1` on every NIC that does not say
//! otherwise when the entrypoint is not `/sbin/init`), over what the create asked for. The
//! converge after the create then writes the spec's, before the container's first start.

use super::fields::{Ctx, object, string};
use super::yaml::Node;

/// pve-container's `entrypoint` default: an absent key is this.
pub const DEFAULT_ENTRYPOINT: &str = "/sbin/init";
/// The longest `entrypoint` proxsync takes (PVE sets none; one config line stays readable).
pub const MAX_ENTRYPOINT: usize = 4096;
/// At most this many `env` variables.
pub const MAX_ENV: usize = 256;
/// The longest value of one `env` variable.
pub const MAX_ENV_VALUE: usize = 4096;
/// The most bytes of `env` as PVE takes it (`NAME=value` entries and the NULs between them):
/// pveproxy refuses a request body over 512 KiB before the API sees it (pve-http-server
/// `src/PVE/APIServer/AnyEvent.pm` `$limit_max_post`), percent-encoding may triple a value's
/// bytes, and the container's own variables (an image's) are sent with the spec's.
/// [`MAX_ENV`] values of [`MAX_ENV_VALUE`] bytes would be over 1 MiB.
pub const MAX_ENV_BYTES: usize = 64 * 1024;
/// Why white space around `entrypoint` and after an `env` value is refused: PVE writes each as
/// a config line (`entrypoint: ...`, one `lxc.environment.runtime: NAME=value` per variable)
/// and pve-container's `parse_pct_config` reads a line back as `:\s*(.+?)\s*$`, so what the
/// container has would never be what the spec says and every cycle would write it again.
const TRIMMED: &str = "pve-container parse_pct_config";

/// Whether `c` is a control character PVE refuses in `entrypoint` and an `env` value: its
/// patterns take no `\x00`-`\x08`, `\x0a`-`\x1f` or `\x7f` (a tab is allowed). A newline would
/// end the config line (`write_pct_config` dies "detected invalid newline"), a NUL would split
/// `env`.
fn refused_control(c: char) -> bool {
    c.is_control() && c != '\t'
}

/// `entrypoint`: a command line PVE runs as the container's init (`lxc.init.cmd`).
pub(super) fn entrypoint(ctx: &mut Ctx, n: &Node) -> Option<String> {
    let path = "spec.forProvider.entrypoint";
    let s = string(ctx, n, path, "\"nginx -g 'daemon off;'\"")?;
    let checked = if s.trim().is_empty() {
        Err(format!(
            "{path} is empty; name the command the container runs (e.g. /usr/sbin/nginx -g \
             'daemon off;'), or leave entrypoint out for the image's ({DEFAULT_ENTRYPOINT} for \
             a system container)"
        ))
    } else if s.len() > MAX_ENTRYPOINT {
        Err(format!(
            "{path} is {} bytes long; at most {MAX_ENTRYPOINT}",
            s.len()
        ))
    } else if let Some(c) = s.chars().find(|c| refused_control(*c)) {
        Err(format!(
            "{path} holds the control character {c:?}; PVE takes none but a tab"
        ))
    } else if s.trim() != s {
        Err(format!(
            "{path} starts or ends with white space, which PVE drops when it reads the \
             container's config back ({TRIMMED}): remove it"
        ))
    } else {
        Ok(s.to_string())
    };
    ctx.check(n.pos, checked)
}

/// `env`: `{NAME: value}`, in the order written. A name is PVE's `\w+` in ASCII.
pub(super) fn env(ctx: &mut Ctx, n: &Node) -> Option<Vec<(String, String)>> {
    let path = "spec.forProvider.env";
    let obj = object(ctx, n, path, None)?;
    if obj.entries.len() > MAX_ENV {
        ctx.error(
            n.pos,
            format!(
                "{path} has {} variables; at most {MAX_ENV}",
                obj.entries.len()
            ),
        );
        return None;
    }
    let errors = ctx.error_count();
    let mut out = Vec::new();
    for (name, pos, value) in &obj.entries {
        if !env_name_ok(name) {
            ctx.error(
                *pos,
                format!(
                    "{path}: {name:?} is not a variable name PVE takes: letters, digits and _ \
                     only (e.g. NGINX_PORT)"
                ),
            );
            continue;
        }
        let what = format!("{path}.{name}");
        let Some(v) = string(ctx, value, &what, "\"8080\"") else {
            continue;
        };
        let checked = if v.len() > MAX_ENV_VALUE {
            Err(format!(
                "{what} is {} bytes long; at most {MAX_ENV_VALUE}",
                v.len()
            ))
        } else if let Some(c) = v.chars().find(|c| refused_control(*c)) {
            Err(format!(
                "{what} holds the control character {c:?}; PVE takes none but a tab"
            ))
        } else if v.trim_end() != v {
            Err(format!(
                "{what} ends with white space, which PVE drops when it reads the container's \
                 config back ({TRIMMED}): remove it"
            ))
        } else {
            Ok(())
        };
        if ctx.check(value.pos, checked).is_some() {
            out.push((name.to_string(), v.to_string()));
        }
    }
    let bytes: usize = out.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if bytes > MAX_ENV_BYTES {
        ctx.error(
            n.pos,
            format!(
                "{path} is {bytes} bytes as PVE takes it (NAME=value, NUL-separated); at most \
                 {MAX_ENV_BYTES}: PVE's API refuses a request over 512 KiB"
            ),
        );
        return None;
    }
    (ctx.error_count() == errors).then_some(out)
}

/// PVE's `\w+`, in ASCII.
fn env_name_ok(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The environment a container ends up with when the spec's `env` is written into `current`
/// (PVE's `env`: `NAME=value` entries separated by NULs): a variable the spec names takes the
/// spec's value where it stands, one it adds goes at the end, and one it does not name is kept
/// as it is (an OCI image's `PATH`, say). pve-container splits on runs of NULs. A variable the
/// spec names that the container has twice (an image's `Env` may) is kept once, where it first
/// stands: LXC sets `lxc.environment.runtime` entries in order (`setenv`, overwriting), so a
/// later duplicate would win over the spec's value.
pub fn merged_env(current: Option<&str>, want: &[(String, String)]) -> Vec<String> {
    let mut out: Vec<String> = current
        .unwrap_or_default()
        .split('\0')
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    for (name, value) in want {
        let entry = format!("{name}={value}");
        let named = |e: &String| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == name;
        match out.iter().position(named) {
            Some(i) => {
                out[i] = entry;
                let mut seen = 0;
                out.retain(|e| {
                    let later = named(e) && seen > 0;
                    seen += usize::from(named(e));
                    !later
                });
            }
            None => out.push(entry),
        }
    }
    out
}

/// Why the environment `merged` cannot be sent, if it cannot: PVE's API takes `env` only as
/// `NAME=value` entries, each name `\w+` and each value without control characters (its 9.1
/// pattern lets `\x09`-`\x0f` through, pve-container's newer one only a tab; the stricter is
/// asked), and a converge sends the container's own variables back with the spec's. A variable
/// a hand-edited config or an image's `Env` gave the container that PVE would refuse is named
/// (never its value, which may be a secret), with what to do, instead of a 400 every cycle.
pub fn env_refusal(merged: &[String]) -> Option<String> {
    let bad = merged.iter().find(|e| {
        let (name, value) = e.split_once('=').unwrap_or((e.as_str(), ""));
        !env_name_ok(name) || !e.contains('=') || value.chars().any(refused_control)
    })?;
    let name: String = bad
        .split('=')
        .next()
        .unwrap_or_default()
        .chars()
        .take(64)
        .collect();
    Some(format!(
        "the container's env holds variable {name:?}, which PVE's API refuses (a name of \
         letters, digits and _, a value without control characters but a tab); setting the \
         spec's env sends the container's variables back with it, so nothing is sent: fix or \
         remove that variable on the container (pct set --env, or its config file), or remove \
         env from the spec"
    ))
}

/// The options of these a container spec names, as its fields are written: what a site older
/// than PVE 9.1 refuses ([`refusal`]).
pub fn named(ct: &super::ContainerSpec) -> Vec<String> {
    let mut out = Vec::new();
    if ct.entrypoint.is_some() {
        out.push("entrypoint".to_string());
    }
    if !ct.env.is_empty() {
        out.push("env".to_string());
    }
    for (i, nic) in ct.networks.iter().flatten().enumerate() {
        if nic.host_managed.is_some() {
            out.push(format!("networks[{i}].hostManaged"));
        }
    }
    out
}

/// Why a site whose Proxmox VE release is `release` (`version`, as it says it) refuses the
/// container options `named` (`entrypoint`, `env`, `networks[0].hostManaged`), if it does.
pub fn refusal(named: &[String], release: (u32, u32, u32), version: &str) -> Option<String> {
    let since = super::oci::OCI_SINCE;
    let (are, them) = match named.len() {
        1 => ("is an option", "it"),
        _ => ("are options", "them"),
    };
    (!named.is_empty() && release < since).then(|| {
        format!(
            "{} {are} of Proxmox VE {}.{} (pve-container 6); this site runs {version}, which \
             refuses {them}: remove {them} from the spec, or upgrade the cluster",
            named.join(", "),
            since.0,
            since.1,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container spec with `extra` under `forProvider`: its specs and its diagnostics.
    fn parse(extra: &str) -> (Vec<crate::spec::Spec>, Vec<String>) {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: ct-01\nspec:\n  \
             forProvider:\n    site: lab\n    node: pve1\n    template: {{oci: \"nginx:1.27\"}}\n\
             {extra}"
        );
        let (specs, diags) = crate::spec::parse_file("ct.yaml", yaml.as_bytes());
        (specs, diags.into_iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn entrypoint_env_and_host_managed_are_read_in_the_order_written() {
        let (specs, diags) = parse(
            "    entrypoint: \"/docker-entrypoint.sh nginx -g 'daemon off;'\"\n    env: {PORT: \"8080\", \
             A_B: \"x=y\\tz\"}\n    networks:\n      - {name: eth0, bridge: vmbr0, ip: dhcp, \
             hostManaged: true}\n",
        );
        assert_eq!(diags, Vec::<String>::new());
        let ct = specs[0].container().expect("a container");
        assert_eq!(
            ct.entrypoint.as_deref(),
            Some("/docker-entrypoint.sh nginx -g 'daemon off;'")
        );
        assert_eq!(ct.env, env_of(&[("PORT", "8080"), ("A_B", "x=y\tz")]));
        assert_eq!(ct.networks.as_ref().unwrap()[0].host_managed, Some(true));
        assert_eq!(
            named(ct),
            ["entrypoint", "env", "networks[0].hostManaged"].map(String::from)
        );
        // Without them, the spec names none and its hash holds none.
        let (plain, _) = parse("");
        assert!(named(plain[0].container().unwrap()).is_empty());
        let hash = crate::spec::hash::spec_hash;
        assert_ne!(hash(&plain[0]), hash(&specs[0]));
    }

    /// A spec that names none of the options hashes as it did before they existed (d4f56fa):
    /// an upgrade takes no container for changed.
    #[test]
    fn a_spec_without_them_keeps_its_hash() {
        let (specs, diags) =
            parse("    networks:\n      - {name: eth0, bridge: vmbr0, ip: dhcp, firewall: true}\n");
        assert_eq!(diags, Vec::<String>::new());
        assert_eq!(crate::spec::hash::spec_hash(&specs[0]), "21cec3c5867fe398");
    }

    /// Each bad value is refused where it is written, with what would be valid.
    #[test]
    fn bad_entrypoints_and_variables_are_refused_at_their_line() {
        for (extra, want) in [
            (
                "    entrypoint: \"\"\n",
                "ct.yaml:10:17: error: spec.forProvider.entrypoint is empty",
            ),
            ("    entrypoint: \"a\\nb\"\n", "control character '\\n'"),
            ("    entrypoint: 5\n", "must be a string"),
            (
                "    env: {A-B: x}\n",
                "ct.yaml:10:11: error: spec.forProvider.env: \"A-B\" is not a variable name",
            ),
            ("    env: {PORT: 8080}\n", "write it quoted"),
            ("    env: {A: \"x\\0y\"}\n", "control character '\\0'"),
            ("    entrypoint: \"nginx \"\n", "ends with white space"),
            (
                "    entrypoint: \"\\tnginx\"\n",
                "starts or ends with white space",
            ),
            (
                "    env: {A: \"x \"}\n",
                "spec.forProvider.env.A ends with white space",
            ),
            ("    env: {A: \"x\\t\"}\n", "ends with white space"),
            ("    env: {A: \"  \"}\n", "ends with white space"),
            ("    env: [A]\n", "spec.forProvider.env must be a mapping"),
            (
                "    networks:\n      - {name: eth0, bridge: vmbr0, ip6: auto, hostManaged: true}\n",
                "SLAAC is not supported",
            ),
            (
                "    networks:\n      - {name: eth0, bridge: vmbr0, ip6: auto}\n",
                "add hostManaged: false to the NIC",
            ),
            (
                "    networks:\n      - {name: eth0, bridge: vmbr0, hostManaged: yes}\n",
                "write true or false",
            ),
        ] {
            let (specs, diags) = parse(extra);
            assert!(specs.is_empty(), "{extra}: {diags:?}");
            assert!(diags.iter().any(|d| d.contains(want)), "{extra}: {diags:?}");
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The spec's variables replace theirs in place and are added at the end; the others stay.
    #[test]
    fn env_is_merged_into_what_the_container_has() {
        let image = "PATH=/usr/local/bin:/usr/bin\0NGINX_VERSION=1.27.0\0\0PORT=80";
        let want = env_of(&[("PORT", "8080"), ("MODE", "a=b")]);
        assert_eq!(
            merged_env(Some(image), &want),
            [
                "PATH=/usr/local/bin:/usr/bin",
                "NGINX_VERSION=1.27.0",
                "PORT=8080",
                "MODE=a=b"
            ]
        );
        assert_eq!(merged_env(None, &want), ["PORT=8080", "MODE=a=b"]);
        // A name the container has twice is set once, where it first stands: LXC would
        // take the later one.
        assert_eq!(
            merged_env(
                Some("PORT=80\0PATH=/bin\0PORT=81\0PORT=82"),
                &env_of(&[("PORT", "2")])
            ),
            ["PORT=2", "PATH=/bin"]
        );
        // A name that is a prefix of another is not taken for it.
        assert_eq!(
            merged_env(Some("PORTS=1"), &env_of(&[("PORT", "2")])),
            ["PORTS=1", "PORT=2"]
        );
    }

    /// A variable PVE's API would refuse, which the container has from elsewhere, is named
    /// (escaped, without its value) instead of sent back.
    #[test]
    fn a_variable_pve_refuses_is_named_not_sent() {
        let ok = ["PATH=/usr/bin".to_string(), "A=tab\there".to_string()];
        assert_eq!(env_refusal(&ok), None);
        for bad in [
            "EVIL=\u{1b}[31m",
            "X=a\nb",
            "A-B=1",
            "NOEQUALS",
            "\u{1b}]0;=x",
        ] {
            let merged = [ok[0].clone(), bad.to_string()];
            let why = env_refusal(&merged).unwrap_or_else(|| panic!("{bad:?} refused"));
            assert!(!why.contains('\u{1b}') && !why.contains('\n'), "{why}");
            assert!(!why.contains("[31m"), "no value: {why}");
        }
        let why = env_refusal(&["SECRET=x\ny".to_string()]).unwrap();
        assert!(
            why.contains("\"SECRET\"") && !why.contains("x\\ny"),
            "{why}"
        );
    }

    #[test]
    fn the_options_are_refused_before_pve_9_1_naming_the_release() {
        let named = vec!["entrypoint".to_string(), "env".to_string()];
        let why = refusal(&named, (9, 0, 11), "9.0.11").expect("refused");
        assert!(
            why.contains("entrypoint, env are options of Proxmox VE 9.1"),
            "{why}"
        );
        assert!(why.contains("this site runs 9.0.11"), "{why}");
        assert_eq!(refusal(&named, (9, 1, 0), "9.1.0"), None);
        assert_eq!(refusal(&[], (8, 4, 1), "8.4.1"), None);
    }

    /// What the spec's variables add up to is bounded: pveproxy refuses a request body over
    /// 512 KiB, which 128 values of 4096 bytes (a spec file under 1 MiB) would be over.
    #[test]
    fn a_large_environment_is_refused() {
        let vars = |n: usize, len: usize| {
            let entries: Vec<String> = (0..n)
                .map(|i| format!("V{i}: \"{}\"", "x".repeat(len)))
                .collect();
            format!("    env: {{{}}}\n", entries.join(", "))
        };
        let (specs, diags) = parse(&vars(128, MAX_ENV_VALUE));
        assert!(specs.is_empty(), "{diags:?}");
        assert!(
            diags.iter().any(|d| d.contains("bytes as PVE takes it")),
            "{diags:?}"
        );
        let (specs, diags) = parse(&vars(15, MAX_ENV_VALUE));
        assert_eq!(diags, Vec::<String>::new());
        assert_eq!(specs.len(), 1);
    }

    #[test]
    fn control_characters_but_a_tab_are_refused() {
        assert!(!refused_control('\t'));
        for c in ['\0', '\n', '\r', '\u{1b}', '\u{7f}', '\u{85}'] {
            assert!(refused_control(c), "{c:?}");
        }
        assert!(env_name_ok("NGINX_PORT_2"));
        for bad in ["", "A-B", "A B", "É", "A=B"] {
            assert!(!env_name_ok(bad), "{bad:?}");
        }
    }
}
