//! The daemon's TOML configuration (docs/config.md) and the secrets it points at.
//!
//! Parsing is strict: unknown keys are errors, and every error names the key and says what
//! would be valid. Secrets are only ever read from files (or systemd credentials) and are
//! wrapped in [`Secret`], whose `Debug` and `Display` never show the value.

use crate::util::duration::parse_duration;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Where the config lives when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/proxsync/proxsync.toml";

/// A config file larger than this is refused rather than read (a config is a few KiB).
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// A secret value. Never printed by `Debug`/`Display`, never serialised.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` (a token, key or URL read from a file) so that it is never shown.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself; call only where it is put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// An error in the configuration: the file, and a message naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read (missing, not permitted, ...).
    #[error("{path}: cannot read the config: {source}{hint}", hint = read_hint(.path, .source))]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The config file is too large, not UTF-8 or not TOML, or a value in it is wrong.
    #[error("{path}: {message}")]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the key and what would be valid.
        message: String,
    },
    /// A site's API token secret cannot be read.
    #[error("site {site:?}: {message}")]
    Secret {
        /// The `[[site]] name`.
        site: String,
        /// Why, naming the file or credential (never its content).
        message: String,
    },
    /// A `[[receiver]]`'s secret, or `[web] token_file`, cannot be read.
    #[error("{what}: {message}")]
    WebSecret {
        /// `[[receiver]] "name"` or `[web] token_file`.
        what: String,
        /// Why, naming the file or credential (never its content).
        message: String,
    },
    /// A `[[notify]]` target's secret or URL cannot be read, or its URL is refused.
    #[error("[[notify]] {target:?}: {message}")]
    NotifySecret {
        /// The `[[notify]] name`.
        target: String,
        /// Why, naming the file or credential (never its content).
        message: String,
    },
}

/// The whole configuration, with defaults applied and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Which proxsync instance owns a VM: VMs carry the tag `proxsync.<install_id>`.
    pub install_id: String,
    /// `state_dir`: the embedded database, git mirror, control socket and, by default, the marker
    /// key (default `/var/lib/proxsync`).
    pub state_dir: PathBuf,
    /// `status_dir`: where the status files are written (default `<state_dir>/status`).
    pub status_dir: PathBuf,
    /// `marker_key_file`: the marker key, when not `<state_dir>/marker.key` (see
    /// [`Config::marker_key_path`]). Installs that hand specs to each other share one.
    pub marker_key_file: Option<PathBuf>,
    /// `sops_age_identity_file`: the age identities that open SOPS-encrypted specs (see
    /// [`Config::sops_keyring`]).
    pub sops_age_identity_file: Option<PathBuf>,
    /// `container_password_dir`: the directory a container spec's `password: {file: ...}` must
    /// name a file in; `None`: no password file is read (see [`PasswordFiles`]).
    pub container_password_dir: Option<PathBuf>,
    /// `[source]`: the git repository the specs are read from.
    pub source: SourceConfig,
    /// `[[site]]`: the Proxmox VE clusters a spec may name in `site`.
    pub sites: Vec<SiteConfig>,
    /// `[reconcile]`: when cycles run and what limits their actions.
    pub reconcile: ReconcileConfig,
    /// Where transitions are sent (`[[notify]]`); empty: no notifications.
    pub notify: Vec<NotifyConfig>,
    /// Where Prometheus metrics are served (`[metrics] listen`); `None`: not served.
    pub metrics: Option<MetricsListen>,
    /// The daemon's web listener (`[web]`); `None`: none.
    pub web: Option<WebConfig>,
    /// The webhook receivers served at `POST /hooks/<name>` on the web listener
    /// (`[[receiver]]`); none without `[web]`.
    pub receivers: Vec<ReceiverConfig>,
    /// The file this was read from, for messages and for resolving relative paths.
    pub path: PathBuf,
}

/// Where the specs come from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// `path` or `url`: where the repository is.
    pub location: SourceLocation,
    /// `branch`: the branch whose tip is applied (default `main`).
    pub branch: String,
    /// Directory of the repository holding the specs, relative to its root.
    pub dir: PathBuf,
    /// How often a remote is fetched.
    pub interval: Duration,
    /// `selector`: the specs this install manages, by label; `None` manages every spec.
    pub selector: Option<crate::selector::Selector>,
    /// Which signatures a branch tip must carry before its specs are applied; `None` (the
    /// default) applies any commit.
    pub verify: Option<CommitVerification>,
    /// `max_specs`: the most specs the source may hold, each set member counted, counted before
    /// any set is expanded; past it no spec is read (`spec::SpecBudget`).
    pub max_specs: u64,
}

/// `[source] verify`: the tip must be signed by one of these keys (read-only key material;
/// only its path is ever shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitVerification {
    /// `verify = "ssh"`: an ssh signature by a key of this `allowed_signers` file (the format
    /// of ssh-keygen(1) ALLOWED SIGNERS).
    Ssh {
        /// `allowed_signers`: the trusted keys, one `PRINCIPAL KEYTYPE BASE64KEY` line each.
        allowed_signers: PathBuf,
    },
    /// `verify = "openpgp"`: an OpenPGP signature by a key of this keyring (binary or
    /// ASCII-armoured export).
    OpenPgp {
        /// `keyring`: the trusted public keys (`gpg --export KEYID > keyring.gpg`).
        keyring: PathBuf,
    },
}

/// A local repository (bare or not) or a remote URL fetched into a mirror.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceLocation {
    /// `path`: a local repository, read in place.
    Path(PathBuf),
    /// `url`: a remote, fetched every `interval` into a mirror in the state directory.
    Url {
        /// The remote (`ssh://`, `https://`, `file://` or `user@host:path`).
        url: String,
        /// An ssh private key for `ssh://` remotes.
        ssh_key_file: Option<PathBuf>,
        /// A file holding an https access token.
        token_file: Option<PathBuf>,
    },
}

/// One Proxmox VE cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteConfig {
    /// `name`: what specs write in `site:`; also names the credential `<name>.token`.
    pub name: String,
    /// `https://host:8006`, without the `/api2/json` suffix.
    pub endpoint: String,
    /// `user@realm!tokenid`.
    pub token_id: String,
    /// Explicit secret file; when absent the secret is the systemd credential `<name>.token`.
    pub token_secret_file: Option<PathBuf>,
    /// How the site's TLS certificate is checked: `ca_file`, `fingerprint`, else the system's
    /// roots.
    pub trust: Trust,
    /// `connect_timeout`: how long connecting to the endpoint may take (default 10 s).
    pub connect_timeout: Duration,
    /// `request_timeout`: how long one API request may take (default 60 s); waiting for a task
    /// is separate.
    pub request_timeout: Duration,
    /// An HTTP(S) proxy to use; the environment's proxy variables are never used.
    pub proxy: Option<String>,
}

/// How the site's TLS certificate is trusted. Verification is never switched off.
#[derive(Debug, Clone, PartialEq)]
pub enum Trust {
    /// The system's root certificates (a site with a publicly trusted certificate).
    SystemRoots,
    /// A CA file, such as PVE's `/etc/pve/pve-root-ca.pem`.
    CaFile(PathBuf),
    /// The SHA-256 fingerprint of the server's certificate (as `pvenode cert info` shows it).
    Fingerprint([u8; 32]),
}

/// Where the metrics listener binds (`[metrics] listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsListen {
    /// An IP address and port, such as `127.0.0.1:9847`.
    Tcp(std::net::SocketAddr),
    /// An absolute path of a unix socket, such as `/run/proxsync/metrics.sock`.
    Unix(PathBuf),
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Tcp(addr) => write!(f, "{addr}"),
            MetricsListen::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The daemon's web listener (`[web]`): the webhook receivers and the read-only pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfig {
    /// `listen`: an IP address and port (default `127.0.0.1:8787`), or `unix:/path` for a
    /// unix socket behind a reverse proxy.
    pub listen: MetricsListen,
    /// `token_file`: the bearer token of the read-only pages (the hooks authenticate by their
    /// own signatures, not by this token).
    pub token_file: Option<PathBuf>,
    /// `file_url`: where the forge shows a file at a commit, with `{commit}` and `{path}` in
    /// it (`https://github.com/acme/fleet/blob/{commit}/{path}`): a spec's page links to its
    /// file at the applied commit. Checked by [`check_file_url`].
    pub file_url: Option<String>,
}

impl WebConfig {
    /// Reads `token_file`, if one is set.
    pub fn load_token(&self) -> Result<Option<Secret>, ConfigError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        read_secret_file(path, "web token")
            .map(Some)
            .map_err(|message| ConfigError::WebSecret {
                what: "[web] token_file".into(),
                message,
            })
    }
}

/// Where `[web] listen` binds when `[web]` names no address: loopback only.
pub const DEFAULT_WEB_LISTEN: &str = "127.0.0.1:8787";

/// Who sends a `[[receiver]]` its hooks, and so how they are signed and what they say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverKind {
    /// GitHub: `X-Hub-Signature-256`, `X-GitHub-Event`.
    Github,
    /// Gitea: `X-Gitea-Signature`, `X-Gitea-Event`.
    Gitea,
    /// Forgejo: `X-Forgejo-Signature` (or Gitea's), `X-Forgejo-Event` (or Gitea's).
    Forgejo,
    /// GitLab: `X-Gitlab-Token` (the secret itself), `X-Gitlab-Event`.
    Gitlab,
    /// Anything else: `X-Proxsync-Signature: sha256=<hex>`, a JSON body with `ref`.
    Generic,
}

impl ReceiverKind {
    /// The `type` as the config writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverKind::Github => "github",
            ReceiverKind::Gitea => "gitea",
            ReceiverKind::Forgejo => "forgejo",
            ReceiverKind::Gitlab => "gitlab",
            ReceiverKind::Generic => "generic",
        }
    }
}

/// The fewest characters a `[[receiver]]`'s secret may have.
pub const MIN_RECEIVER_SECRET: usize = 16;

/// One `[[receiver]]`: a webhook endpoint at `POST /hooks/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverConfig {
    /// `name`: the last segment of its URL path; 1-63 of `a-z 0-9 -`, unique.
    pub name: String,
    /// `type`: who sends it hooks.
    pub kind: ReceiverKind,
    /// `secret_file`: the HMAC key (GitLab: the token), else the systemd credential
    /// `receiver-<name>.secret`.
    pub secret_file: Option<PathBuf>,
}

impl ReceiverConfig {
    /// Reads the receiver's secret (one line of [`MIN_RECEIVER_SECRET`] to 4096 bytes, never
    /// shown).
    pub fn load_secret(&self) -> Result<Secret, ConfigError> {
        let credential = format!("receiver-{}.secret", self.name);
        secret_path(
            self.secret_file.as_deref(),
            &credential,
            "secret_file",
            "this [[receiver]]",
        )
        .and_then(|p| {
            let secret = read_secret_file(&p, "webhook secret")?;
            let n = secret.expose().chars().count();
            if n < MIN_RECEIVER_SECRET {
                return Err(format!(
                    "webhook secret file {} holds {n} characters; a secret this short is guessed \
                     from one captured hook (GitLab's token, sent as is, by trying): make it \
                     {MIN_RECEIVER_SECRET} or more random characters, such as `openssl rand -hex \
                     32`, and give the forge the same",
                    p.display()
                ));
            }
            Ok(secret)
        })
        .map_err(|message| ConfigError::WebSecret {
            what: format!("[[receiver]] {:?}", self.name),
            message,
        })
    }
}

/// What to do with VMs that carry this install's ownership tag but match no spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrphanPolicy {
    /// Delete stopped orphans after `orphan_grace`; report running ones.
    DeleteStopped,
    /// Only report orphans.
    Report,
}

/// How many actions run at once per node (`[reconcile] concurrency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConcurrencyMode {
    /// Each node's own limit, found by itself up to `max_parallel_per_node`
    /// (`crate::concurrency`).
    Adaptive,
    /// Always `max_parallel_per_node`.
    Fixed,
}

/// Whether proxsync acts on a spec's VM (`spec.managementPolicy`, Crossplane's
/// `managementPolicies`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ManagementPolicy {
    /// Create, change, power and delete the VM as the spec says (the default).
    #[default]
    Full,
    /// Never create, change, start, stop, migrate or delete it: observe it and report how it
    /// differs from the spec.
    Observe,
}

/// `[reconcile]`: how often cycles run, how many actions they take at once, and the limits on
/// deletes, reboots and adoptions.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileConfig {
    /// How often every site is observed and reconciled in full, besides the cycles pushes start
    /// (default 5 min, at least 10 s).
    pub resync_interval: Duration,
    /// The most actions at once per node: the cap of the adaptive limit, or the limit itself
    /// when `concurrency` is fixed.
    pub max_parallel_per_node: u32,
    /// Whether each node's limit is found by itself up to the cap, or is the cap.
    pub concurrency: ConcurrencyMode,
    /// What is done with an orphan: a VM with this install's tag that no spec names.
    pub orphans: OrphanPolicy,
    /// How long an orphan must have been seen before a stopped one is deleted (default 10 min).
    pub orphan_grace: Duration,
    /// Refuse a commit that would delete more than this share of the managed VMs.
    pub max_delete_fraction: f64,
    /// At most this many reboots (for `rebootPolicy`) started per site and cycle.
    pub max_parallel_reboots: u32,
    /// Refuse a cycle that would take over more than this many existing VMs by consent
    /// (`proxsync.io/adopt`): a wrong directory cannot take over a cluster unnoticed.
    pub max_adopt_per_cycle: u32,
    /// The `managementPolicy` of a spec that sets none: `observe` makes the whole install
    /// observe-only.
    pub management_policy: ManagementPolicy,
    /// Directories of the spec repository (as a spec's `specFile` shows its path) whose specs
    /// are observe-only unless they set `managementPolicy`.
    pub observe_paths: Vec<String>,
}

impl ReconcileConfig {
    /// The `managementPolicy` of a spec that sets none, from file `file` (its path in the
    /// spec repository): observe under one of `observe_paths`, else `management_policy`.
    pub fn default_policy(&self, file: &str) -> ManagementPolicy {
        let path = std::path::Path::new(file.trim_start_matches("./"));
        if self.observe_paths.iter().any(|dir| path.starts_with(dir)) {
            ManagementPolicy::Observe
        } else {
            self.management_policy
        }
    }
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            resync_interval: Duration::from_secs(300),
            max_parallel_per_node: 10,
            concurrency: ConcurrencyMode::Adaptive,
            orphans: OrphanPolicy::DeleteStopped,
            orphan_grace: Duration::from_secs(600),
            max_delete_fraction: 0.5,
            max_parallel_reboots: 1,
            max_adopt_per_cycle: 100,
            management_policy: ManagementPolicy::Full,
            observe_paths: Vec::new(),
        }
    }
}

/// What a `[[notify]]` target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyKind {
    /// A generic JSON webhook, signed with HMAC-SHA256.
    Webhook,
    /// A Slack-compatible incoming webhook (`{"text": ...}`).
    Slack,
    /// Commit statuses on Gitea or Forgejo (`forgejo` is accepted as a synonym).
    #[serde(alias = "forgejo")]
    Gitea,
    /// Commit statuses on GitHub (or GitHub Enterprise's `/api/v3`).
    Github,
    /// Commit statuses on GitLab.
    Gitlab,
}

impl NotifyKind {
    /// The `kind` as the config writes it (`forgejo` is read as `gitea`).
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Webhook => "webhook",
            NotifyKind::Slack => "slack",
            NotifyKind::Gitea => "gitea",
            NotifyKind::Github => "github",
            NotifyKind::Gitlab => "gitlab",
        }
    }

    /// True for the forges, which get commit statuses only.
    pub fn is_forge(self) -> bool {
        matches!(
            self,
            NotifyKind::Gitea | NotifyKind::Github | NotifyKind::Gitlab
        )
    }
}

/// Where a target's URL comes from: the config itself, or a file (a Slack webhook URL is a
/// secret: whoever has it can post).
#[derive(Debug, Clone, PartialEq)]
pub enum NotifyUrl {
    /// `url` in the config (GitHub's default `https://api.github.com` when none is given).
    Given(String),
    /// `url_file`, or the systemd credential `notify-<name>.url` when `None`.
    File(Option<PathBuf>),
}

/// One `[[notify]]` target.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    /// `name`: names the target in messages and its credentials (`notify-<name>.*`).
    pub name: String,
    /// `kind`: what the target is, and so what it is sent.
    pub kind: NotifyKind,
    /// `url`, or `url_file`: the URL posted to (webhook, Slack) or the forge's server (GitHub
    /// Enterprise: `https://ghe.example/api/v3`).
    pub url: NotifyUrl,
    /// The webhook's HMAC key, or a forge's API token: this file, else the systemd credential
    /// `notify-<name>.secret` (webhook) / `notify-<name>.token` (forges).
    pub secret_file: Option<PathBuf>,
    /// A forge's repository: `owner/name` (GitLab: the project's path or numeric ID).
    pub repo: Option<String>,
    /// At most one message per this interval; what comes meanwhile is sent together.
    pub min_interval: Duration,
    /// One request, connect included.
    pub timeout: Duration,
    /// Trust this CA instead of the system's roots (a forge with an internal CA).
    pub ca_file: Option<PathBuf>,
    /// An HTTP(S) proxy; the environment's proxy variables are never used.
    pub proxy: Option<String>,
}

impl NotifyConfig {
    /// The credential name of the target's secret when no file is given.
    pub(crate) fn secret_credential(&self) -> String {
        let ext = if self.kind.is_forge() {
            "token"
        } else {
            "secret"
        };
        format!("notify-{}.{ext}", self.name)
    }

    /// Reads the HMAC key (webhook) or API token (forges); `None` for Slack, whose URL is
    /// its secret.
    pub fn load_secret(&self) -> Result<Option<Secret>, ConfigError> {
        if self.kind == NotifyKind::Slack {
            return Ok(None);
        }
        let what = if self.kind.is_forge() {
            "token"
        } else {
            "HMAC secret"
        };
        let path = secret_path(
            self.secret_file.as_deref(),
            &self.secret_credential(),
            "secret_file",
            "this [[notify]]",
        );
        path.and_then(|p| read_secret_file(&p, what))
            .map(Some)
            .map_err(|message| ConfigError::NotifySecret {
                target: self.name.clone(),
                message,
            })
    }

    /// The URL: `url`, else `url_file`, else the credential `notify-<name>.url` (its content
    /// is a secret and is never shown in a message).
    pub fn load_url(&self) -> Result<Secret, ConfigError> {
        let fail = |message: String| ConfigError::NotifySecret {
            target: self.name.clone(),
            message,
        };
        match &self.url {
            NotifyUrl::Given(u) => Ok(Secret::new(u.clone())),
            NotifyUrl::File(file) => {
                let credential = format!("notify-{}.url", self.name);
                let path = secret_path(file.as_deref(), &credential, "url_file", "this [[notify]]")
                    .map_err(fail)?;
                let url = read_secret_file(&path, "URL").map_err(fail)?;
                check_notify_url(url.expose()).map_err(|m| {
                    fail(format!(
                        "the URL in {}: {m} (the content is not shown)",
                        path.display()
                    ))
                })?;
                Ok(url)
            }
        }
    }
}

/// `https://`, or plain `http://` to this machine only (a local relay, tests).
pub(crate) fn check_notify_url(url: &str) -> Result<(), String> {
    // Before parsing: the parser would trim or encode whitespace rather than refuse it.
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace".into());
    }
    let refused = || {
        "must be an https:// URL (plain http only to 127.0.0.1, localhost or [::1]: a \
         notification would cross the network in clear)"
            .to_string()
    };
    // The parser's error names what is wrong, never the URL (which may be a secret).
    let parsed = url::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let local = match parsed.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => return Err(refused()),
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if local => Ok(()),
        _ => Err(refused()),
    }
}

// ---- the file as written -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    install_id: Option<String>,
    state_dir: Option<PathBuf>,
    status_dir: Option<PathBuf>,
    marker_key_file: Option<PathBuf>,
    sops_age_identity_file: Option<PathBuf>,
    container_password_dir: Option<PathBuf>,
    source: Option<RawSource>,
    #[serde(default)]
    site: Vec<RawSite>,
    #[serde(default)]
    reconcile: RawReconcile,
    #[serde(default)]
    notify: Vec<RawNotify>,
    metrics: Option<RawMetrics>,
    web: Option<RawWeb>,
    #[serde(default)]
    receiver: Vec<RawReceiver>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeb {
    listen: Option<String>,
    token_file: Option<PathBuf>,
    file_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReceiver {
    name: String,
    #[serde(rename = "type")]
    kind: ReceiverKind,
    secret_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    name: String,
    #[serde(rename = "type")]
    kind: NotifyKind,
    url: Option<String>,
    url_file: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    repo: Option<String>,
    min_interval: Option<String>,
    timeout: Option<String>,
    ca_file: Option<PathBuf>,
    proxy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    path: Option<PathBuf>,
    url: Option<String>,
    branch: Option<String>,
    dir: Option<PathBuf>,
    interval: Option<String>,
    ssh_key_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    verify: Option<String>,
    allowed_signers: Option<PathBuf>,
    keyring: Option<PathBuf>,
    selector: Option<String>,
    max_specs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSite {
    name: String,
    endpoint: String,
    token_id: String,
    token_secret_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    fingerprint: Option<String>,
    connect_timeout: Option<String>,
    request_timeout: Option<String>,
    proxy: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    resync_interval: Option<String>,
    max_parallel_per_node: Option<i64>,
    concurrency: Option<ConcurrencyMode>,
    orphans: Option<OrphanPolicy>,
    orphan_grace: Option<String>,
    max_delete_fraction: Option<f64>,
    max_parallel_reboots: Option<i64>,
    max_adopt_per_cycle: Option<i64>,
    management_policy: Option<String>,
    observe_paths: Option<Vec<String>>,
}

/// What to do when the config cannot be read: where else it may be named, where the example
/// is, or the group that may read it.
fn read_hint(path: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "; name the config with --config FILE or the PROXSYNC_CONFIG environment variable \
             (default {DEFAULT_PATH}), or start from the example: cp \
             /usr/share/doc/proxsync/examples/proxsync.toml {}",
            path.display()
        ),
        std::io::ErrorKind::PermissionDenied => " (the config and /etc/proxsync are readable by \
             root and the proxsync group only: run as root, or add your user to the group with \
             `sudo adduser $USER proxsync` and log in again)"
            .to_string(),
        _ => String::new(),
    }
}

/// The systemd credential holding the age identities for SOPS-encrypted specs.
pub(crate) const SOPS_CREDENTIAL: &str = "sops-age-identity";

/// Why an encrypted spec cannot be opened when no identity is configured.
pub const NO_SOPS_IDENTITY: &str = "no age identity is configured: set sops_age_identity_file \
     in the config, or pass the systemd credential sops-age-identity (LoadCredential=)";

impl Config {
    /// Reads and validates the config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read_err = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read_err)?.len();
        if len > MAX_CONFIG_BYTES {
            return Err(ConfigError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "the file is {len} bytes; a config may be at most {MAX_CONFIG_BYTES} bytes"
                ),
            });
        }
        let bytes = std::fs::read(path).map_err(read_err)?;
        let text = String::from_utf8(bytes).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "the file is not UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Config::parse(path, &text)
    }

    /// Parses config text; `path` is used for messages and to resolve relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| invalid(describe_toml_error(&e)))?;
        let base = path.parent().unwrap_or(Path::new("."));
        build(raw, base, path).map_err(invalid)
    }

    /// The site with this name.
    pub fn site(&self, name: &str) -> Option<&SiteConfig> {
        self.sites.iter().find(|s| s.name == name)
    }

    /// The PVE tag that marks a VM as owned by this install.
    pub fn ownership_tag(&self) -> String {
        crate::ownership::ownership_tag(&self.install_id)
    }

    /// The marker key file: `marker_key_file` if set, else the systemd credential
    /// `$CREDENTIALS_DIRECTORY/marker.key` when it exists (`LoadCredential=marker.key:...`),
    /// else `<state_dir>/marker.key`.
    pub fn marker_key_path(&self) -> PathBuf {
        if let Some(path) = &self.marker_key_file {
            return path.clone();
        }
        if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") {
            let credential = Path::new(&dir).join(crate::ownership::KEY_FILE);
            if credential.is_file() {
                return credential;
            }
        }
        crate::ownership::MarkerKey::path(&self.state_dir)
    }

    /// Where the age identities for SOPS-encrypted specs are: `sops_age_identity_file` if set,
    /// else the systemd credential `$CREDENTIALS_DIRECTORY/sops-age-identity` when it exists
    /// (`LoadCredential=sops-age-identity:...`); `None` when neither.
    pub fn sops_identity_path(&self) -> Option<PathBuf> {
        if let Some(path) = &self.sops_age_identity_file {
            return Some(path.clone());
        }
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY")?;
        let credential = Path::new(&dir).join(SOPS_CREDENTIAL);
        credential.is_file().then_some(credential)
    }

    /// The keyring that opens SOPS-encrypted specs. Without an identity, or when it cannot be
    /// read, a keyring that says why: every encrypted spec is then `DecryptionFailed`, the
    /// others are unaffected.
    pub fn sops_keyring(&self) -> crate::sops::Keyring {
        match self.sops_identity_path() {
            Some(path) => {
                crate::sops::Keyring::load(&path).unwrap_or_else(crate::sops::Keyring::unavailable)
            }
            None => crate::sops::Keyring::unavailable(NO_SOPS_IDENTITY),
        }
    }

    /// Whether a spec with `labels` is this install's: it matches `[source] selector` (every spec does
    /// without one). The others are other installs' business.
    pub fn selects(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.source
            .selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
    }

    /// What is allowed but unwise in the config (`validate` and `doctor` show it, the daemon
    /// logs it at start): a credential in `[source] url`; `[web] listen` on an address other
    /// than loopback (plain HTTP across the network).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let SourceLocation::Url { url, .. } = &self.source.location
            && crate::redact::has_credentials(url)
        {
            out.push(format!(
                "[source] url = \"{}\" carries a password or token: every local user sees it \
                 in the process list while git fetches, and whoever reads the config has it \
                 (proxsync masks it wherever it prints or writes the URL); put the token in a \
                 file named by [source] token_file, or set up git's credential helper for the \
                 daemon's user, and take it out of the URL",
                crate::redact::urls(url)
            ));
        }
        if let Some(WebConfig {
            listen: MetricsListen::Tcp(addr),
            ..
        }) = &self.web
            && !addr.ip().is_loopback()
        {
            let gitlab = self
                .receivers
                .iter()
                .find(|r| r.kind == ReceiverKind::Gitlab)
                .map(|r| {
                    format!(
                        "; [[receiver]] {:?} (gitlab) is sent its secret itself in every hook, \
                         readable by whoever sees the traffic",
                        r.name
                    )
                })
                .unwrap_or_default();
            out.push(format!(
                "[web] listen = \"{addr}\" serves plain HTTP beyond this host: the hooks' \
                 content crosses the network unencrypted{gitlab}; listen on loopback or \
                 \"unix:/run/proxsync/web.sock\" behind a reverse proxy with TLS"
            ));
        }
        out
    }
}

impl SiteConfig {
    /// Reads the API token secret: `token_secret_file` if set, else the systemd credential
    /// `$CREDENTIALS_DIRECTORY/<site>.token`. Surrounding whitespace is trimmed.
    pub fn load_token_secret(&self) -> Result<Secret, ConfigError> {
        let credential = format!("{}.token", self.name);
        secret_path(
            self.token_secret_file.as_deref(),
            &credential,
            "token_secret_file",
            "this [[site]]",
        )
        .and_then(|path| read_secret_file(&path, "token secret"))
        .map_err(|message| ConfigError::Secret {
            site: self.name.clone(),
            message,
        })
    }
}

/// Where a secret is: the file given, else `$CREDENTIALS_DIRECTORY/<credential>` (systemd's
/// `LoadCredential=`).
fn secret_path(
    file: Option<&Path>,
    credential: &str,
    key: &str,
    block: &str,
) -> Result<PathBuf, String> {
    if let Some(p) = file {
        return Ok(p.to_path_buf());
    }
    match std::env::var_os("CREDENTIALS_DIRECTORY") {
        Some(dir) => Ok(Path::new(&dir).join(credential)),
        None => Err(format!(
            "no {credential} secret: set `{key}` in {block}, or pass the systemd credential \
             `{credential}` (LoadCredential=)"
        )),
    }
}

/// Where a container's root password may be read from (`password: {file: ...}` or
/// `{credential: ...}` in its spec), so that a spec, which anyone who may push to the
/// repository writes, cannot hand one of proxsync's own secrets to a container's root. A file
/// must be in `container_password_dir` (none allowed without it), also after its symlinks are
/// resolved; and neither a file nor a credential may be, by device and inode, a file the config
/// names as a credential or key (a site's token, the marker key, the SOPS identity, a
/// notification's URL or secret, the source's ssh key or token, the config itself), nor be in
/// (or a hard link of a file in) the state directory or the systemd credentials directory. The
/// file read is the file checked (the identity of the open file is compared again).
#[derive(Debug, Clone, Default)]
pub struct PasswordFiles {
    /// `container_password_dir`.
    dir: Option<PathBuf>,
    /// The config file, for messages.
    config: PathBuf,
    /// proxsync's own secret files: what each is, and where.
    own: Vec<(String, PathBuf)>,
    /// Directories whose files are proxsync's: the state directory, the credentials directory.
    own_dirs: Vec<(String, PathBuf)>,
}

/// A file's identity: device and inode.
type FileId = (u64, u64);

/// A file's identity: device and inode.
fn identity(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl Config {
    /// The rules for containers' root password files ([`PasswordFiles`]).
    pub fn password_files(&self) -> PasswordFiles {
        let mut own: Vec<(String, PathBuf)> = vec![
            ("the marker key".into(), self.marker_key_path()),
            ("the proxsync config".into(), self.path.clone()),
        ];
        own.extend((self.sops_identity_path()).map(|p| ("the SOPS age identity".to_string(), p)));
        for site in &self.sites {
            let credential = format!("{}.token", site.name);
            if let Ok(p) = secret_path(site.token_secret_file.as_deref(), &credential, "", "") {
                own.push((format!("site {}'s API token", site.name), p));
            }
        }
        for n in &self.notify {
            let what = format!("[[notify]] {}'s secret", n.name);
            if let Ok(p) = secret_path(n.secret_file.as_deref(), &n.secret_credential(), "", "") {
                own.push((what, p));
            }
            if let NotifyUrl::File(file) = &n.url {
                let credential = format!("notify-{}.url", n.name);
                if let Ok(p) = secret_path(file.as_deref(), &credential, "", "") {
                    own.push((format!("[[notify]] {}'s URL", n.name), p));
                }
            }
        }
        if let SourceLocation::Url {
            ssh_key_file,
            token_file,
            ..
        } = &self.source.location
        {
            own.extend(
                ssh_key_file
                    .iter()
                    .map(|p| ("[source] ssh_key_file".into(), p.clone())),
            );
            own.extend(
                token_file
                    .iter()
                    .map(|p| ("[source] token_file".into(), p.clone())),
            );
        }
        let mut own_dirs = vec![("the state directory".to_string(), self.state_dir.clone())];
        if let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") {
            own_dirs.push(("the credentials directory".into(), PathBuf::from(dir)));
        }
        PasswordFiles {
            dir: self.container_password_dir.clone(),
            config: self.path.clone(),
            own,
            own_dirs,
        }
    }
}

impl PasswordFiles {
    /// Checks the password file `path` a container spec names. `must_exist`: at a create (the
    /// file is read next); `validate` checks a file that is not there (the specs may be
    /// checked on another machine) by its path alone. Errors name the file, never its content.
    pub fn check(&self, path: &str, must_exist: bool) -> Result<(), String> {
        self.checked(path, must_exist).map(|_| ())
    }

    /// The file's canonical path and identity once checked; `None` when it is not there and
    /// need not be.
    fn checked(&self, path: &str, must_exist: bool) -> Result<Option<(PathBuf, FileId)>, String> {
        let Some(dir) = &self.dir else {
            return Err(format!(
                "password file {path:?}: the config allows no password files; set \
                 container_password_dir in {} to the directory holding containers' root \
                 password files (proxsync reads them only from there), or use {{credential: \
                 NAME}}",
                self.config.display()
            ));
        };
        let given = Path::new(path);
        let plain = given.is_absolute()
            && given.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            });
        if !plain || !given.starts_with(dir) || given == dir {
            return Err(format!(
                "password file {path:?} is not in container_password_dir {} (no `..`): proxsync \
                 reads containers' root passwords only from there",
                dir.display()
            ));
        }
        let canonical = match std::fs::canonicalize(given) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => return Ok(None),
            Err(e) => return Err(format!("password file {path}: {e}")),
        };
        let dir_canonical = std::fs::canonicalize(dir)
            .map_err(|e| format!("container_password_dir {}: {e}", dir.display()))?;
        if !canonical.starts_with(&dir_canonical) {
            return Err(format!(
                "password file {path:?} resolves to {}, outside container_password_dir {}",
                canonical.display(),
                dir.display()
            ));
        }
        let meta =
            std::fs::metadata(&canonical).map_err(|e| format!("password file {path}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("password file {path} is not a regular file"));
        }
        let id = identity(&meta);
        self.not_own(path, &canonical, id)?;
        Ok(Some((canonical, id)))
    }

    /// Refuses a file (`canonical`, of identity `id`) that is one of proxsync's own.
    fn not_own(&self, path: &str, canonical: &Path, id: FileId) -> Result<(), String> {
        let own_secret = |what: &str, at: &Path| {
            format!(
                "{path:?} is {what} ({}): a spec may not give one of proxsync's own secrets to \
                 a container as its root password",
                at.display()
            )
        };
        for (what, at) in &self.own {
            if std::fs::metadata(at).is_ok_and(|m| identity(&m) == id) {
                return Err(own_secret(what, at));
            }
        }
        for (what, dir) in &self.own_dirs {
            let Ok(dir) = std::fs::canonicalize(dir) else {
                continue;
            };
            if canonical.starts_with(&dir) {
                return Err(own_secret(&format!("in {what}"), &dir));
            }
            // A hard link of one of its files elsewhere.
            let linked = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .find(|e| {
                    std::fs::symlink_metadata(e.path())
                        .is_ok_and(|m| m.is_file() && identity(&m) == id)
                });
            if let Some(e) = linked {
                return Err(own_secret(&format!("a file of {what}"), &e.path()));
            }
        }
        Ok(())
    }

    /// Reads the password file `path` after [`check`](Self::check), from the very file checked.
    pub fn read(&self, path: &str) -> Result<Secret, String> {
        let (canonical, id) = self
            .checked(path, true)?
            .ok_or_else(|| format!("password file {path} is not there"))?;
        let file =
            std::fs::File::open(&canonical).map_err(|e| format!("password file {path}: {e}"))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("password file {path}: {e}"))?;
        if identity(&meta) != id {
            return Err(format!(
                "password file {path} changed while it was read; try again"
            ));
        }
        read_secret_from(file, meta.len(), &canonical, "root password")
    }

    /// Reads the systemd credential `name` (`$CREDENTIALS_DIRECTORY/<name>`), unless it is one
    /// of the files the config names as a credential or key.
    pub fn read_credential(&self, name: &str) -> Result<Secret, String> {
        let path = secret_path(None, name, "file", "the spec")?;
        let meta = std::fs::metadata(&path)
            .map_err(|e| format!("root password file {}: {e}", path.display()))?;
        let id = identity(&meta);
        for (what, at) in &self.own {
            if std::fs::metadata(at).is_ok_and(|m| identity(&m) == id) {
                return Err(format!(
                    "credential {name:?} is {what} ({}): a spec may not give one of proxsync's \
                     own secrets to a container as its root password",
                    at.display()
                ));
            }
        }
        read_secret_file(&path, "root password")
    }
}

/// Reads a one-line secret file (at most 4 KiB), trimmed. Errors never echo the content.
fn read_secret_file(path: &Path, what: &str) -> Result<Secret, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("{what} file {}: {e}", path.display()))?;
    let len = file
        .metadata()
        .map_err(|e| format!("{what} file {}: {e}", path.display()))?
        .len();
    read_secret_from(file, len, path, what)
}

/// [`read_secret_file`] of an open file of `len` bytes (`path` for messages).
fn read_secret_from(
    mut file: std::fs::File,
    len: u64,
    path: &Path,
    what: &str,
) -> Result<Secret, String> {
    use std::io::Read;
    if len > 4096 {
        return Err(format!(
            "{what} file {} is {len} bytes; a secret file holds one line of at most 4096 bytes",
            path.display()
        ));
    }
    let mut text = String::new();
    (&mut file)
        .take(4097)
        .read_to_string(&mut text)
        .map_err(|e| format!("{what} file {}: {e}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("{what} file {} is empty", path.display()));
    }
    if secret.chars().any(|c| c.is_control() || c.is_whitespace()) {
        // Said without echoing the content: it is a secret even when it is wrong.
        return Err(format!(
            "{what} file {} holds more than one line or contains whitespace; it must hold only \
             the secret",
            path.display()
        ));
    }
    Ok(Secret::new(secret))
}

fn describe_toml_error(e: &toml::de::Error) -> String {
    // toml's message already quotes the line and names the key; keep it on one logical block.
    e.to_string().trim_end().to_string()
}

fn build(raw: RawConfig, base: &Path, path: &Path) -> Result<Config, String> {
    let install_id = raw.install_id.unwrap_or_else(|| "main".to_string());
    if !is_install_id(&install_id) {
        return Err(format!(
            "install_id = {install_id:?}: must be 1-32 characters of a-z, 0-9, '_' or '-', \
             starting with a letter or digit (it becomes the PVE tag `proxsync.<install_id>`)"
        ));
    }
    let state_dir = resolve(
        base,
        raw.state_dir.unwrap_or_else(|| "/var/lib/proxsync".into()),
    );
    let status_dir = match raw.status_dir {
        Some(p) => resolve(base, p),
        None => state_dir.join("status"),
    };

    let marker_key_file = raw.marker_key_file.map(|p| resolve(base, p));
    let sops_age_identity_file = raw.sops_age_identity_file.map(|p| resolve(base, p));
    let container_password_dir = raw.container_password_dir.map(|p| resolve(base, p));
    let source = match raw.source {
        None => {
            return Err(
                "[source] is missing: set `path` (a local repository) or `url` (a remote)".into(),
            );
        }
        Some(s) => build_source(s, base)?,
    };

    let sites = build_sites(raw.site, base)?;
    let reconcile = build_reconcile(raw.reconcile)?;
    let notify = build_notifies(raw.notify, base)?;
    let web = raw.web.map(|w| build_web(w, base)).transpose()?;
    let receivers = build_receivers(raw.receiver, base)?;
    if !receivers.is_empty() && web.is_none() {
        return Err(format!(
            "[[receiver]] {:?} needs the web listener: add [web] with listen = \"{DEFAULT_WEB_LISTEN}\" \
             (an IP address and port) or \"unix:/run/proxsync/web.sock\" (a unix socket)",
            receivers[0].name
        ));
    }

    let metrics = raw
        .metrics
        .and_then(|m| m.listen)
        .map(|l| parse_metrics_listen(&l))
        .transpose()?;
    check_listeners(&state_dir, metrics.as_ref(), web.as_ref())?;

    Ok(Config {
        install_id,
        state_dir,
        status_dir,
        marker_key_file,
        sops_age_identity_file,
        container_password_dir,
        source,
        sites,
        reconcile,
        notify,
        metrics,
        web,
        receivers,
        path: path.to_path_buf(),
    })
}

fn build_sites(raw: Vec<RawSite>, base: &Path) -> Result<Vec<SiteConfig>, String> {
    if raw.is_empty() {
        return Err(
            "no [[site]]: add at least one [[site]] with name, endpoint and token_id".into(),
        );
    }
    let mut sites: Vec<SiteConfig> = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let site = build_site(s, base).map_err(|m| format!("[[site]] #{}: {m}", i + 1))?;
        if sites.iter().any(|other| other.name == site.name) {
            return Err(format!(
                "[[site]] #{}: name = {:?} is used by an earlier [[site]]; site names must be unique",
                i + 1,
                site.name
            ));
        }
        sites.push(site);
    }
    Ok(sites)
}

fn build_reconcile(r: RawReconcile) -> Result<ReconcileConfig, String> {
    let defaults = ReconcileConfig::default();
    let max_parallel_per_node = match r.max_parallel_per_node {
        None => defaults.max_parallel_per_node,
        Some(n) if (1..=64).contains(&n) => n as u32,
        Some(n) => {
            return Err(format!(
                "[reconcile] max_parallel_per_node = {n}: must be between 1 and 64"
            ));
        }
    };
    let max_parallel_reboots = match r.max_parallel_reboots {
        None => defaults.max_parallel_reboots,
        Some(n) if (1..=64).contains(&n) => n as u32,
        Some(n) => {
            return Err(format!(
                "[reconcile] max_parallel_reboots = {n}: must be between 1 and 64"
            ));
        }
    };
    let max_adopt_per_cycle = match r.max_adopt_per_cycle {
        None => defaults.max_adopt_per_cycle,
        Some(n) if (0..=100_000).contains(&n) => n as u32,
        Some(n) => {
            return Err(format!(
                "[reconcile] max_adopt_per_cycle = {n}: must be between 0 (no adoption by \
                 consent) and 100000"
            ));
        }
    };
    let management_policy = match r.management_policy.as_deref() {
        None | Some("full") => ManagementPolicy::Full,
        Some("observe") => ManagementPolicy::Observe,
        Some(other) => {
            return Err(format!(
                "[reconcile] management_policy = {other:?}: must be \"full\" (act on the VMs) or \
                 \"observe\" (only report how they differ from their specs)"
            ));
        }
    };
    let observe_paths: Vec<String> = r
        .observe_paths
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
        .collect();
    if let Some(bad) = observe_paths
        .iter()
        .find(|p| p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == ".."))
    {
        return Err(format!(
            "[reconcile] observe_paths: {bad:?} is not a directory of the spec repository; write \
             it as the specs' paths show it, e.g. \"eu-fra/prod\""
        ));
    }
    let max_delete_fraction = match r.max_delete_fraction {
        None => defaults.max_delete_fraction,
        Some(f) if f > 0.0 && f <= 1.0 => f,
        Some(f) => {
            return Err(format!(
                "[reconcile] max_delete_fraction = {f}: must be greater than 0 and at most 1 \
                 (0.5 refuses a commit that deletes more than half of the managed VMs)"
            ));
        }
    };
    let reconcile = ReconcileConfig {
        resync_interval: opt_duration(
            "[reconcile] resync_interval",
            r.resync_interval,
            defaults.resync_interval,
        )?,
        max_parallel_per_node,
        concurrency: r.concurrency.unwrap_or(defaults.concurrency),
        orphans: r.orphans.unwrap_or(defaults.orphans),
        orphan_grace: opt_duration(
            "[reconcile] orphan_grace",
            r.orphan_grace,
            defaults.orphan_grace,
        )?,
        max_delete_fraction,
        max_parallel_reboots,
        max_adopt_per_cycle,
        management_policy,
        observe_paths,
    };
    if reconcile.resync_interval < Duration::from_secs(10) {
        return Err("[reconcile] resync_interval: must be at least 10s, so an idle daemon never storms the API".into());
    }
    Ok(reconcile)
}

fn build_notifies(raw: Vec<RawNotify>, base: &Path) -> Result<Vec<NotifyConfig>, String> {
    let mut notify: Vec<NotifyConfig> = Vec::new();
    for (i, n) in raw.into_iter().enumerate() {
        let target = build_notify(n, base).map_err(|m| format!("[[notify]] #{}: {m}", i + 1))?;
        if notify.iter().any(|other| other.name == target.name) {
            return Err(format!(
                "[[notify]] #{}: name = {:?} is used by an earlier [[notify]]; names must be unique",
                i + 1,
                target.name
            ));
        }
        notify.push(target);
    }
    Ok(notify)
}

fn build_notify(n: RawNotify, base: &Path) -> Result<NotifyConfig, String> {
    if !is_site_name(&n.name) {
        return Err(format!(
            "name = {:?}: must be 1-63 characters of a-z, 0-9 and '-', starting with a letter",
            n.name
        ));
    }
    let ctx = |m: String| format!("(name = {:?}) {m}", n.name);
    let url = match (n.url, n.url_file) {
        (Some(_), Some(_)) => return Err(ctx("set either url or url_file, not both".into())),
        (Some(u), None) => {
            let u = u.trim_end_matches('/').to_string();
            check_notify_url(&u).map_err(|m| ctx(format!("url = {u:?}: {m}")))?;
            NotifyUrl::Given(u)
        }
        (None, Some(f)) => NotifyUrl::File(Some(resolve(base, f))),
        (None, None) => match n.kind {
            NotifyKind::Github => NotifyUrl::Given("https://api.github.com".into()),
            NotifyKind::Webhook | NotifyKind::Slack => NotifyUrl::File(None),
            NotifyKind::Gitea | NotifyKind::Gitlab => {
                return Err(ctx(format!(
                    "url is missing: give the {} server, such as \"https://git.example\"",
                    n.kind.as_str()
                )));
            }
        },
    };
    match (&n.repo, n.kind.is_forge()) {
        (None, true) => {
            return Err(ctx(format!(
                "repo is missing: a {} target needs the repository holding the specs, \
                 \"owner/name\" (GitLab: the project's path or numeric ID)",
                n.kind.as_str()
            )));
        }
        (Some(_), false) => {
            return Err(ctx(format!(
                "repo applies to gitea, forgejo, github and gitlab targets, not to {}",
                n.kind.as_str()
            )));
        }
        (Some(r), true) if !is_repo_path(r, n.kind) => {
            return Err(ctx(format!(
                "repo = {r:?}: expected \"owner/name\"{}",
                if n.kind == NotifyKind::Gitlab {
                    ", a \"group/subgroup/name\" path or a numeric project ID"
                } else {
                    ""
                }
            )));
        }
        _ => {}
    }
    if n.kind == NotifyKind::Slack && n.secret_file.is_some() {
        return Err(ctx(
            "secret_file does not apply to slack: the webhook URL is the secret (url_file)".into(),
        ));
    }
    if let Some(proxy) = &n.proxy
        && !(proxy.starts_with("http://") || proxy.starts_with("https://"))
    {
        return Err(ctx(format!(
            "proxy = {proxy:?}: must be an http:// or https:// URL"
        )));
    }
    Ok(NotifyConfig {
        url,
        kind: n.kind,
        secret_file: n.secret_file.map(|p| resolve(base, p)),
        repo: n.repo,
        min_interval: opt_duration("min_interval", n.min_interval, Duration::from_secs(10))
            .map_err(ctx)?,
        timeout: opt_duration("timeout", n.timeout, Duration::from_secs(10)).map_err(ctx)?,
        ca_file: n.ca_file.map(|p| resolve(base, p)),
        proxy: n.proxy,
        name: n.name,
    })
}

/// `owner/name` for Gitea and GitHub; for GitLab also deeper group paths or a numeric ID.
fn is_repo_path(repo: &str, kind: NotifyKind) -> bool {
    let parts: Vec<&str> = repo.split('/').collect();
    let part_ok = |p: &&str| {
        !p.is_empty()
            && *p != "."
            && *p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    };
    if kind == NotifyKind::Gitlab {
        let numeric = !repo.is_empty() && repo.chars().all(|c| c.is_ascii_digit());
        numeric || (parts.len() >= 2 && parts.iter().all(part_ok))
    } else {
        parts.len() == 2 && parts.iter().all(part_ok)
    }
}

/// `[metrics] listen`: an IP address and port, or an absolute unix socket path. No host
/// names: the listener binds before any name could be resolved, and one name may mean many.
fn parse_metrics_listen(text: &str) -> Result<MetricsListen, String> {
    if text.starts_with('/') {
        return Ok(MetricsListen::Unix(PathBuf::from(text)));
    }
    text.parse().map(MetricsListen::Tcp).map_err(|_| {
        format!(
            "[metrics] listen = {text:?}: expected an IP address and port such as \
             \"127.0.0.1:9847\" or \"[::1]:9847\", or the absolute path of a unix socket such \
             as \"/run/proxsync/metrics.sock\""
        )
    })
}

/// The control socket's file name in `state_dir` (`shell::control::SOCKET`).
const CONTROL_SOCKET: &str = "control.sock";

/// `[metrics] listen` and `[web] listen` apart from each other and from the control socket:
/// the daemon binds them one after the other, and one bound over another (the control socket
/// is renamed over its path) would leave that one silently unreachable.
fn check_listeners(
    state_dir: &Path,
    metrics: Option<&MetricsListen>,
    web: Option<&WebConfig>,
) -> Result<(), String> {
    let control = state_dir.join(CONTROL_SOCKET);
    let unix = |l: Option<&MetricsListen>| match l {
        Some(MetricsListen::Unix(p)) => Some(p.clone()),
        _ => None,
    };
    for (key, path, prefix) in [
        ("[metrics] listen", unix(metrics), ""),
        ("[web] listen", unix(web.map(|w| &w.listen)), "unix:"),
    ] {
        if path.as_ref() == Some(&control) {
            return Err(format!(
                "{key} = \"{prefix}{}\" is the daemon's control socket (`state_dir`/\
                 {CONTROL_SOCKET}); choose another path in /run/proxsync",
                control.display()
            ));
        }
    }
    if let (Some(m), Some(w)) = (metrics, web)
        && *m == w.listen
    {
        return Err(format!(
            "[web] listen = \"{}\" is also [metrics] listen; the two listeners need their own \
             address or socket",
            w.listen
        ));
    }
    Ok(())
}

/// `[web]`: `listen` an IP address and port or `unix:/absolute/path`; `token_file`.
fn build_web(w: RawWeb, base: &Path) -> Result<WebConfig, String> {
    let text = w.listen.as_deref().unwrap_or(DEFAULT_WEB_LISTEN);
    let listen = match text.strip_prefix("unix:") {
        Some(path) if path.starts_with('/') => MetricsListen::Unix(PathBuf::from(path)),
        _ => text.parse().map(MetricsListen::Tcp).map_err(|_| {
            format!(
                "[web] listen = {text:?}: expected an IP address and port such as \
                 \"{DEFAULT_WEB_LISTEN}\" or \"[::1]:8787\", or \"unix:\" and the absolute path of a \
                 unix socket such as \"unix:/run/proxsync/web.sock\""
            )
        })?,
    };
    if let Some(url) = &w.file_url {
        check_file_url(url).map_err(|why| format!("[web] file_url = {url:?}: {why}"))?;
    }
    Ok(WebConfig {
        listen,
        token_file: w.token_file.map(|p| resolve(base, p)),
        file_url: w.file_url,
    })
}

/// Whether `url` can be `[web] file_url`: an `http(s)://` URL without credentials, made of
/// the characters a URL may hold unescaped, with `{path}` (and `{commit}`, if any) as its only
/// placeholders: what is put in a page's link is then this text and the two values, escaped.
pub fn check_file_url(url: &str) -> Result<(), String> {
    const EXAMPLE: &str = "such as \"https://github.com/acme/fleet/blob/{commit}/{path}\"";
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return Err(format!("must be an https:// or http:// URL, {EXAMPLE}"));
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') || authority.contains('{') {
        return Err(format!(
            "must name the forge's host, without a user or password, {EXAMPLE}"
        ));
    }
    if let Some(c) = url
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&()*+,;=%{}".contains(*c)))
    {
        return Err(format!(
            "{c:?} cannot stand in a URL unescaped; write it %-encoded"
        ));
    }
    if !url.contains("{path}") {
        return Err(format!(
            "must hold {{path}}, the spec file's path, {EXAMPLE}"
        ));
    }
    let unknown = url
        .replace("{path}", "")
        .replace("{commit}", "")
        .contains(['{', '}']);
    if unknown {
        return Err(format!(
            "the only placeholders are {{commit}} and {{path}}, {EXAMPLE}"
        ));
    }
    Ok(())
}

fn build_receivers(raw: Vec<RawReceiver>, base: &Path) -> Result<Vec<ReceiverConfig>, String> {
    let mut receivers: Vec<ReceiverConfig> = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let valid = (1..=63).contains(&r.name.len())
            && r.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid {
            return Err(format!(
                "[[receiver]] #{}: name = {:?}: must be 1-63 characters of a-z, 0-9 and '-' (it is \
                 the last segment of the hook's URL, /hooks/<name>)",
                i + 1,
                r.name
            ));
        }
        if receivers.iter().any(|other| other.name == r.name) {
            return Err(format!(
                "[[receiver]] #{}: name = {:?} is used by an earlier [[receiver]]; names must be \
                 unique",
                i + 1,
                r.name
            ));
        }
        receivers.push(ReceiverConfig {
            name: r.name,
            kind: r.kind,
            secret_file: r.secret_file.map(|p| resolve(base, p)),
        });
    }
    Ok(receivers)
}

fn build_source(s: RawSource, base: &Path) -> Result<SourceConfig, String> {
    let location = match (s.path, s.url) {
        (Some(_), Some(_)) => {
            return Err(
                "[source] has both `path` and `url`: set one (a local repository or a remote)"
                    .into(),
            );
        }
        (None, None) => {
            return Err("[source]: set `path` (a local repository) or `url` (a remote)".into());
        }
        (Some(p), None) => {
            if s.ssh_key_file.is_some() || s.token_file.is_some() {
                return Err("[source] ssh_key_file and token_file apply to a remote `url`, not to a local `path`".into());
            }
            SourceLocation::Path(resolve(base, p))
        }
        (None, Some(url)) => {
            let known = ["ssh://", "https://", "http://", "file://", "git://"];
            let scp_like = url.contains('@') && url.contains(':') && !url.contains("://");
            if !known.iter().any(|k| url.starts_with(k)) && !scp_like || url.starts_with('-') {
                return Err(format!(
                    "[source] url = {:?}: expected ssh://, https://, file:// or user@host:path",
                    crate::redact::urls(&url)
                ));
            }
            SourceLocation::Url {
                url,
                ssh_key_file: s.ssh_key_file.map(|p| resolve(base, p)),
                token_file: s.token_file.map(|p| resolve(base, p)),
            }
        }
    };
    let branch = s.branch.unwrap_or_else(|| "main".into());
    if branch.is_empty()
        || branch.starts_with('-')
        || branch.contains("..")
        || branch
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\".contains(c))
    {
        return Err(format!(
            "[source] branch = {branch:?}: not a valid git branch name"
        ));
    }
    if branch.starts_with("refs/") {
        let hint = branch
            .strip_prefix("refs/heads/")
            .map(|b| format!(": branch = {b:?}"))
            .unwrap_or_default();
        return Err(format!(
            "[source] branch = {branch:?} is a full ref; write the branch's name, as in \
             refs/heads/<name>{hint}"
        ));
    }
    let dir = s.dir.unwrap_or_else(|| ".".into());
    if dir.is_absolute()
        || dir
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!(
            "[source] dir = {:?}: must be a relative path inside the repository, without '..'",
            dir.display()
        ));
    }
    let verify = build_verify(s.verify, s.allowed_signers, s.keyring, base)?;
    let selector = s
        .selector
        .map(|text| {
            crate::selector::Selector::parse(&text).map_err(|e| {
                format!(
                    "[source] selector = {text:?}: {e}; valid: {}",
                    crate::selector::VALID
                )
            })
        })
        .transpose()?;
    Ok(SourceConfig {
        location,
        branch,
        dir,
        interval: opt_duration("[source] interval", s.interval, Duration::from_secs(60))?,
        verify,
        selector,
        max_specs: match s.max_specs {
            None => DEFAULT_MAX_SPECS,
            Some(n) if (1..=MAX_MAX_SPECS).contains(&n) => n,
            Some(n) => {
                return Err(format!(
                    "[source] max_specs = {n}: must be from 1 to {MAX_MAX_SPECS} (each set \
                     member counts as a spec; the default is {})",
                    DEFAULT_MAX_SPECS
                ));
            }
        },
    })
}

/// `[source] max_specs` by default: four times the largest fleet measured (BENCHMARKS.md:
/// 50,000 specs over 10 sites).
pub const DEFAULT_MAX_SPECS: u64 = 200_000;

/// The most `[source] max_specs` may say: ten times the default.
const MAX_MAX_SPECS: u64 = 10 * DEFAULT_MAX_SPECS;

/// `[source] verify` with the key file its kind needs (and not the other kind's).
fn build_verify(
    verify: Option<String>,
    allowed_signers: Option<PathBuf>,
    keyring: Option<PathBuf>,
    base: &Path,
) -> Result<Option<CommitVerification>, String> {
    match (verify.as_deref(), allowed_signers, keyring) {
        (None | Some("none"), None, None) => Ok(None),
        (None | Some("none"), Some(_), _) | (None | Some("none"), _, Some(_)) => Err(
            "[source] allowed_signers and keyring need `verify = \"ssh\"` or `verify = \"openpgp\"`"
                .into(),
        ),
        (Some("ssh"), Some(file), None) => Ok(Some(CommitVerification::Ssh {
            allowed_signers: resolve(base, file),
        })),
        (Some("ssh"), None, _) => Err(
            "[source] verify = \"ssh\" needs `allowed_signers`: the file of trusted keys \
             (lines `PRINCIPAL KEYTYPE BASE64KEY`, see ssh-keygen(1) ALLOWED SIGNERS)"
                .into(),
        ),
        (Some("ssh"), Some(_), Some(_)) => Err(
            "[source] keyring is for verify = \"openpgp\"; with verify = \"ssh\" set only \
             allowed_signers"
                .into(),
        ),
        (Some("openpgp"), None, Some(file)) => Ok(Some(CommitVerification::OpenPgp {
            keyring: resolve(base, file),
        })),
        (Some("openpgp"), _, None) => Err(
            "[source] verify = \"openpgp\" needs `keyring`: a file of the trusted public keys \
             (`gpg --export KEYID > keyring.gpg`)"
                .into(),
        ),
        (Some("openpgp"), Some(_), Some(_)) => Err(
            "[source] allowed_signers is for verify = \"ssh\"; with verify = \"openpgp\" set \
             only keyring"
                .into(),
        ),
        (Some(other), _, _) => Err(format!(
            "[source] verify = {other:?}: must be \"ssh\" (with allowed_signers), \"openpgp\" \
             (with keyring) or \"none\""
        )),
    }
}

fn build_site(s: RawSite, base: &Path) -> Result<SiteConfig, String> {
    if !is_site_name(&s.name) {
        return Err(format!(
            "name = {:?}: must be 1-63 characters of a-z, 0-9 and '-', starting with a letter",
            s.name
        ));
    }
    let ctx = |m: String| format!("(name = {:?}) {m}", s.name);
    let endpoint = s.endpoint.trim_end_matches('/').to_string();
    if !endpoint.starts_with("https://") || endpoint.len() <= "https://".len() {
        return Err(ctx(format!(
            "endpoint = {:?}: must be an https:// URL such as \"https://pve1.example:8006\" \
             (plain http is refused: the token would cross the network in clear)",
            s.endpoint
        )));
    }
    if endpoint.contains("/api2") {
        return Err(ctx(format!(
            "endpoint = {:?}: give the server only, without the /api2/json path",
            s.endpoint
        )));
    }
    if !is_token_id(&s.token_id) {
        return Err(ctx(format!(
            "token_id = {:?}: must be USER@REALM!TOKENID, for example \"proxsync@pve!gitops\"",
            s.token_id
        )));
    }
    let trust = match (s.ca_file, s.fingerprint) {
        (Some(_), Some(_)) => {
            return Err(ctx("set either ca_file or fingerprint, not both".into()));
        }
        (Some(ca), None) => Trust::CaFile(resolve(base, ca)),
        (None, Some(fp)) => Trust::Fingerprint(
            parse_fingerprint(&fp).map_err(|m| ctx(format!("fingerprint = {fp:?}: {m}")))?,
        ),
        (None, None) => Trust::SystemRoots,
    };
    if let Some(proxy) = &s.proxy
        && !(proxy.starts_with("http://") || proxy.starts_with("https://"))
    {
        return Err(ctx(format!(
            "proxy = {proxy:?}: must be an http:// or https:// URL"
        )));
    }
    Ok(SiteConfig {
        name: s.name.clone(),
        endpoint,
        token_id: s.token_id,
        token_secret_file: s.token_secret_file.map(|p| resolve(base, p)),
        trust,
        connect_timeout: opt_duration(
            "connect_timeout",
            s.connect_timeout,
            Duration::from_secs(10),
        )
        .map_err(ctx)?,
        request_timeout: opt_duration(
            "request_timeout",
            s.request_timeout,
            Duration::from_secs(60),
        )
        .map_err(ctx)?,
        proxy: s.proxy,
    })
}

fn resolve(base: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() { p } else { base.join(p) }
}

fn opt_duration(key: &str, value: Option<String>, default: Duration) -> Result<Duration, String> {
    match value {
        None => Ok(default),
        Some(v) => parse_duration(&v).map_err(|m| format!("{key} = {v:?}: {m}")),
    }
}

/// Parses `AB:CD:...` (32 bytes, colons optional, any case) as `pvenode cert info` prints it.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(
            "must be a SHA-256 fingerprint: 32 hex byte pairs separated by ':' \
                    (see `pvenode cert info` on the node)"
                .into(),
        );
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn is_install_id(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn is_site_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `user@realm!tokenid` with PVE's character sets (no separators that could break a header).
fn is_token_id(s: &str) -> bool {
    let Some((user, token)) = s.split_once('!') else {
        return false;
    };
    let Some((name, realm)) = user.rsplit_once('@') else {
        return false;
    };
    let name_ok = !name.is_empty()
        && name.len() <= 60
        && !name.chars().any(|c| {
            c.is_control() || c.is_whitespace() || c == ':' || c == '/' || c == '!' || c == '='
        });
    let realm_ok = !realm.is_empty()
        && realm.len() <= 32
        && realm.starts_with(|c: char| c.is_ascii_alphabetic())
        && realm
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
    let token_ok = !token.is_empty()
        && token.len() <= 64
        && token.starts_with(|c: char| c.is_ascii_alphabetic())
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
    name_ok && realm_ok && token_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
path = "/srv/git/vms.git"

[[site]]
name = "us-sfvalley"
endpoint = "https://pve1.example:8006"
token_id = "proxsync@pve!gitops"
"#;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(Path::new("/etc/proxsync/proxsync.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn observe_paths_are_directories_of_the_repository() {
        let c =
            parse(&(MINIMAL.to_string() + "\n[reconcile]\nobserve_paths = [\"./eu-fra/prod/\"]\n"))
                .unwrap();
        let r = &c.reconcile;
        assert_eq!(r.observe_paths, ["eu-fra/prod"]);
        assert_eq!(
            r.default_policy("eu-fra/prod/db.yaml"),
            ManagementPolicy::Observe
        );
        assert_eq!(
            r.default_policy("./eu-fra/prod/x/y.yaml"),
            ManagementPolicy::Observe
        );
        assert_eq!(
            r.default_policy("eu-fra/production.yaml"),
            ManagementPolicy::Full
        );
        assert_eq!(r.default_policy("eu-fra/app.yaml"), ManagementPolicy::Full);
        assert_eq!(ReconcileConfig::default().max_adopt_per_cycle, 100);
    }

    #[test]
    fn defaults_apply() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.install_id, "main");
        assert_eq!(c.ownership_tag(), "proxsync.main");
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/proxsync"));
        assert_eq!(c.status_dir, PathBuf::from("/var/lib/proxsync/status"));
        assert_eq!(c.source.branch, "main");
        assert_eq!(c.source.dir, PathBuf::from("."));
        assert_eq!(c.source.interval, Duration::from_secs(60));
        assert_eq!(c.reconcile, ReconcileConfig::default());
        assert_eq!(c.reconcile.max_parallel_per_node, 10);
        assert_eq!(c.reconcile.concurrency, ConcurrencyMode::Adaptive);
        assert_eq!(c.sites[0].trust, Trust::SystemRoots);
        assert_eq!(c.sites[0].request_timeout, Duration::from_secs(60));
    }

    /// `[web] listen` on the socket or address another listener of the daemon has: the
    /// control socket (bound after it, renamed over it: the hooks' socket silently gone) or
    /// `[metrics] listen`.
    #[test]
    fn the_web_listener_shares_no_socket_or_address_with_another() {
        let with = |web: &str, metrics: &str| {
            parse(&format!(
                "{MINIMAL}\n[metrics]\nlisten = \"{metrics}\"\n[web]\nlisten = \"{web}\"\n"
            ))
        };
        let control = "unix:/var/lib/proxsync/control.sock";
        let err = with(control, "127.0.0.1:9184").unwrap_err();
        assert!(
            err.contains("[web] listen") && err.contains("control socket"),
            "{err}"
        );
        let err = with("unix:/run/proxsync/a.sock", "/run/proxsync/a.sock").unwrap_err();
        assert!(err.contains("[metrics] listen"), "{err}");
        let err = with("127.0.0.1:9184", "127.0.0.1:9184").unwrap_err();
        assert!(err.contains("[metrics] listen"), "{err}");
        let err = with("127.0.0.1:8787", "/var/lib/proxsync/control.sock").unwrap_err();
        assert!(
            err.contains("[metrics] listen = \"/var/lib") && err.contains("control socket"),
            "{err}"
        );
        assert!(with("unix:/run/proxsync/web.sock", "/run/proxsync/metrics.sock").is_ok());
        assert!(with("127.0.0.1:8787", "127.0.0.1:9184").is_ok());
    }

    /// `branch = "refs/heads/main"`: a full ref name where the branch's is meant. The source
    /// would look for `refs/heads/refs/heads/main` and a hook's `ref` would never match.
    #[test]
    fn a_branch_given_as_a_full_ref_is_refused_naming_the_branch() {
        let with = |branch: &str| {
            parse(&MINIMAL.replace(
                "path = \"/srv/git/vms.git\"",
                &format!("path = \"/srv/git/vms.git\"\nbranch = \"{branch}\""),
            ))
        };
        let err = with("refs/heads/main").unwrap_err();
        assert!(
            err.contains("[source] branch") && err.contains("branch = \"main\""),
            "{err}"
        );
        assert!(with("refs/tags/v1").is_err());
        assert_eq!(with("release/1.0").unwrap().source.branch, "release/1.0");
    }

    #[test]
    fn a_web_listener_beyond_loopback_is_warned_about() {
        let with = |listen: &str, kind: &str| {
            parse(&format!(
                "{MINIMAL}\n[web]\nlisten = \"{listen}\"\n[[receiver]]\nname = \"r\"\ntype = \"{kind}\"\n"
            ))
            .unwrap()
            .warnings()
        };
        let w = with("0.0.0.0:8787", "github");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("[web] listen = \"0.0.0.0:8787\" serves plain HTTP")
                && w[0].contains("TLS"),
            "{w:?}"
        );
        assert!(!w[0].contains("gitlab"), "{w:?}");
        let w = with("[2001:db8::1]:8787", "gitlab");
        assert!(w.len() == 1 && w[0].contains("\"r\" (gitlab)"), "{w:?}");
        assert!(with("127.0.0.1:8787", "gitlab").is_empty());
        assert!(with("[::1]:8787", "gitlab").is_empty());
        assert!(with("unix:/run/proxsync/web.sock", "gitlab").is_empty());
    }

    #[test]
    fn a_credential_in_the_source_url_is_warned_about_and_never_shown() {
        let with = |url: &str| {
            parse(&MINIMAL.replace("path = \"/srv/git/vms.git\"", &format!("url = \"{url}\"")))
                .unwrap()
                .warnings()
        };
        let warnings = with("https://alice:PASSWORD@git.example/vms.git");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("[source] url = \"https://***@git.example/vms.git\" carries"),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("token_file"), "{warnings:?}");
        assert_eq!(with("https://ghp_token@github.com/o/r.git").len(), 1);
        assert!(with("ssh://git@git.example/vms.git").is_empty());
        assert!(with("https://git.example/vms.git").is_empty());
        assert!(parse(MINIMAL).unwrap().warnings().is_empty());
        // An invalid URL's error does not show the password either; nor does one that
        // would be taken for an option.
        let e = parse(&MINIMAL.replace(
            "path = \"/srv/git/vms.git\"",
            "url = \"gopher://alice:PASSWORD@x\"",
        ))
        .unwrap_err();
        assert!(
            !e.contains("PASSWORD") && e.contains("gopher://***@x"),
            "{e}"
        );
        let e = parse(&MINIMAL.replace(
            "path = \"/srv/git/vms.git\"",
            "url = \"-oProxyCommand=x@y:z\"",
        ))
        .unwrap_err();
        assert!(e.contains("expected ssh://"), "{e}");
    }

    #[test]
    fn the_documented_example_parses() {
        let text = r#"
install_id = "main"
state_dir  = "/var/lib/proxsync"
status_dir = "/var/lib/proxsync/status"

[source]
path   = "/srv/git/vms.git"
branch = "main"
dir    = "."
interval = "60s"

[[site]]
name     = "us-sfvalley"
endpoint = "https://pve1.example:8006"
token_id = "proxsync@pve!gitops"
token_secret_file = "/etc/proxsync/us-sfvalley.token"
ca_file  = "/etc/proxsync/us-sfvalley-ca.pem"

[reconcile]
resync_interval = "5m"
max_parallel_per_node = 2
concurrency = "fixed"
orphans = "delete-stopped"
orphan_grace = "10m"
max_delete_fraction = 0.5
"#;
        let c = parse(text).unwrap();
        assert_eq!(c.reconcile.concurrency, ConcurrencyMode::Fixed);
        assert_eq!(c.reconcile.max_parallel_per_node, 2);
        assert_eq!(
            c.sites[0].trust,
            Trust::CaFile("/etc/proxsync/us-sfvalley-ca.pem".into())
        );
        assert_eq!(c.reconcile.orphans, OrphanPolicy::DeleteStopped);
    }

    #[test]
    fn the_packaged_example_config_is_valid() {
        let text = include_str!("../../../packaging/proxsync.toml");
        let c = parse(text).unwrap();
        assert_eq!(c.sites.len(), 2);
        assert_eq!(c.sites[1].name, "eu-fra");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (MINIMAL.replace("[source]", "bogus = 1\n[source]"), "bogus"),
            (
                MINIMAL.replace("branch", "x")
                    + "\n[reconcile]\nresync_interval = \"5 fortnights\"\n",
                "resync_interval",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\nmax_delete_fraction = 1.5\n",
                "max_delete_fraction",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\norphans = \"nuke\"\n",
                "orphans",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\nmanagement_policy = \"watch\"\n",
                "management_policy",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\nobserve_paths = [\"../prod\"]\n",
                "observe_paths",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\nmax_adopt_per_cycle = -1\n",
                "max_adopt_per_cycle",
            ),
            (
                MINIMAL.to_string() + "\n[reconcile]\nconcurrency = \"max\"\n",
                "concurrency",
            ),
            (MINIMAL.replace("https://pve1", "http://pve1"), "endpoint"),
            (
                MINIMAL.replace("proxsync@pve!gitops", "proxsync@pve"),
                "token_id",
            ),
            (
                MINIMAL.replace("path =", "url = \"https://git.example/vms.git\"\npath ="),
                "both `path` and `url`",
            ),
            (
                MINIMAL.replace("name = \"us-sfvalley\"", "name = \"US Valley\""),
                "name = \"US Valley\"",
            ),
            (
                MINIMAL.to_string() + "fingerprint = \"AB:CD\"\n",
                "fingerprint",
            ),
            (
                format!("install_id = \"Main Install\"\n{MINIMAL}"),
                "install_id",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(key), "error {err:?} should name {key:?}");
        }
    }

    #[test]
    fn metrics_listen_is_an_address_or_a_socket_path() {
        assert_eq!(parse(MINIMAL).unwrap().metrics, None);
        assert_eq!(
            parse(&format!("{MINIMAL}\n[metrics]\n")).unwrap().metrics,
            None
        );
        let listen = |v: &str| parse(&format!("{MINIMAL}\n[metrics]\nlisten = \"{v}\"\n"));
        assert_eq!(
            listen("127.0.0.1:9847").unwrap().metrics,
            Some(MetricsListen::Tcp("127.0.0.1:9847".parse().unwrap()))
        );
        assert_eq!(
            listen("[::1]:9847").unwrap().metrics,
            Some(MetricsListen::Tcp("[::1]:9847".parse().unwrap()))
        );
        assert_eq!(
            listen("/run/proxsync/metrics.sock").unwrap().metrics,
            Some(MetricsListen::Unix("/run/proxsync/metrics.sock".into()))
        );
        for bad in ["localhost:9847", "9847", "127.0.0.1", "metrics.sock"] {
            let err = listen(bad).unwrap_err();
            assert!(
                err.contains("[metrics] listen") && err.contains("127.0.0.1:9847"),
                "{bad}: {err}"
            );
        }
        let err = parse(&format!("{MINIMAL}\n[metrics]\nport = 9847\n")).unwrap_err();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn a_selector_and_a_shared_marker_key() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.source.selector, None);
        assert_eq!(c.marker_key_file, None);
        let text = MINIMAL.replace(
            "[source]",
            "marker_key_file = \"keys/shared.key\"\n[source]\nselector = \"tenant-id in (a,b)\"",
        );
        let c = parse(&text).unwrap();
        assert_eq!(
            c.marker_key_path(),
            PathBuf::from("/etc/proxsync/keys/shared.key")
        );
        assert_eq!(
            c.source.selector.as_ref().map(|s| s.to_string()).as_deref(),
            Some("tenant-id in (a,b)")
        );
        let bad = MINIMAL.replace("[source]", "[source]\nselector = \"tenant-id in (a,b\"");
        let e = parse(&bad).unwrap_err();
        assert!(
            e.contains("[source] selector = \"tenant-id in (a,b\"")
                && e.contains("without its ')'")
                && e.contains("key in (a,b)"),
            "{e}"
        );
    }

    #[test]
    fn duplicate_site_names_are_refused() {
        let text = MINIMAL.to_string() + &MINIMAL[MINIMAL.find("[[site]]").unwrap()..];
        assert!(parse(&text).unwrap_err().contains("unique"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("2d").unwrap(),
            Duration::from_secs(2 * 86400)
        );
        for bad in ["", "5", "m", "-5s", "0s", "99999999999999999999s", "400d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn fingerprints() {
        let fp = "AB:".repeat(31) + "CD";
        let bytes = parse_fingerprint(&fp).unwrap();
        assert_eq!(bytes[0], 0xab);
        assert_eq!(bytes[31], 0xcd);
        assert!(parse_fingerprint("AB:CD").is_err());
        assert!(parse_fingerprint(&"ZZ".repeat(32)).is_err());
    }

    #[test]
    fn secrets_never_show() {
        let s = Secret::new("0b3c1f2e-aaaa-bbbb-cccc-123456789abc");
        assert!(!format!("{s:?}").contains("aaaa"));
        assert!(!format!("{s}").contains("aaaa"));
    }

    #[test]
    fn token_secret_from_file_trimmed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.token");
        std::fs::write(&file, "0b3c1f2e-aaaa-bbbb-cccc-123456789abc\n").unwrap();
        let mut c = parse(MINIMAL).unwrap();
        c.sites[0].token_secret_file = Some(file.clone());
        assert_eq!(
            c.sites[0].load_token_secret().unwrap().expose(),
            "0b3c1f2e-aaaa-bbbb-cccc-123456789abc"
        );

        std::fs::write(&file, "line one\nline two\n").unwrap();
        let err = c.sites[0].load_token_secret().unwrap_err().to_string();
        assert!(err.contains("more than one line"), "{err}");
        assert!(
            !err.contains("line one"),
            "the content must not be echoed: {err}"
        );

        c.sites[0].token_secret_file = Some(dir.path().join("missing"));
        assert!(
            c.sites[0]
                .load_token_secret()
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
    }

    #[test]
    fn notify_targets_parse_with_their_defaults() {
        let text = MINIMAL.to_string()
            + r#"
[[notify]]
name = "ops"
type = "webhook"
url = "https://hooks.example/proxsync/"
secret_file = "ops.secret"

[[notify]]
name = "chat"
type = "slack"
url_file = "/etc/proxsync/slack.url"
min_interval = "1m"

[[notify]]
name = "forge"
type = "forgejo"
url = "https://git.example"
repo = "ops/vms"

[[notify]]
name = "gh"
type = "github"
repo = "ops/vms"

[[notify]]
name = "gl"
type = "gitlab"
url = "http://127.0.0.1:8080"
repo = "group/sub/vms"
"#;
        let c = parse(&text).unwrap();
        let n = &c.notify;
        assert_eq!(n.len(), 5);
        assert_eq!(
            n[0].url,
            NotifyUrl::Given("https://hooks.example/proxsync".into())
        );
        assert_eq!(
            n[0].secret_file,
            Some(PathBuf::from("/etc/proxsync/ops.secret"))
        );
        assert_eq!(n[0].min_interval, Duration::from_secs(10));
        assert_eq!(n[0].secret_credential(), "notify-ops.secret");
        assert_eq!(
            n[1].url,
            NotifyUrl::File(Some("/etc/proxsync/slack.url".into()))
        );
        assert_eq!(n[1].min_interval, Duration::from_secs(60));
        assert_eq!(n[2].kind, NotifyKind::Gitea);
        assert_eq!(n[2].secret_credential(), "notify-forge.token");
        assert_eq!(n[3].url, NotifyUrl::Given("https://api.github.com".into()));
        assert_eq!(n[4].repo.as_deref(), Some("group/sub/vms"));
    }

    #[test]
    fn notify_errors_name_the_key() {
        let target = |body: &str| format!("{MINIMAL}\n[[notify]]\nname = \"t\"\n{body}\n");
        let cases = [
            (target("type = \"email\""), "type"),
            (
                target("type = \"webhook\"\nurl = \"http://hooks.example/x\""),
                "url",
            ),
            (
                target("type = \"slack\"\nurl = \"https://h\"\nurl_file = \"u\""),
                "url_file",
            ),
            (target("type = \"gitea\"\nrepo = \"a/b\""), "url is missing"),
            (target("type = \"github\""), "repo is missing"),
            (target("type = \"github\"\nrepo = \"a/../b\""), "repo"),
            (target("type = \"webhook\"\nrepo = \"a/b\""), "repo applies"),
            (
                target("type = \"slack\"\nsecret_file = \"s\""),
                "secret_file",
            ),
            (
                target("type = \"webhook\"\nmin_interval = \"soon\""),
                "min_interval",
            ),
            (target("type = \"webhook\"\nsecret = \"inline\""), "secret"),
            (
                format!(
                    "{}{}",
                    target("type = \"webhook\""),
                    "[[notify]]\nname = \"t\"\ntype = \"slack\"\n"
                ),
                "unique",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(key), "error {err:?} should name {key:?}");
        }
        assert!(check_notify_url("http://localhost:9/x").is_ok());
        assert!(check_notify_url("http://[::1]:9").is_ok());
        assert!(check_notify_url("http://localhost.evil.example/").is_err());
        assert!(check_notify_url("http://127.0.0.1.nip.io/").is_err());
        assert!(check_notify_url("http://127.0.0.1@evil.example/").is_err());
        assert!(check_notify_url("https://").is_err());
        assert!(check_notify_url("https://hooks.example/x y").is_err());
        assert!(check_notify_url("https://hooks.example/services/T0/B0/x").is_ok());
    }

    #[test]
    fn web_and_receivers_parse_with_their_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!((c.web, c.receivers.len()), (None, 0));
        let c = parse(&format!("{MINIMAL}\n[web]\n")).unwrap();
        assert_eq!(
            c.web.unwrap().listen,
            MetricsListen::Tcp("127.0.0.1:8787".parse().unwrap()),
            "loopback by default"
        );
        let c = parse(&format!(
            "{MINIMAL}\n[web]\nlisten = \"unix:/run/proxsync/web.sock\"\ntoken_file = \"web.token\"\n\
             [[receiver]]\nname = \"gh-1\"\ntype = \"github\"\nsecret_file = \"gh.secret\"\n\
             [[receiver]]\nname = \"lab\"\ntype = \"gitlab\"\n"
        ))
        .unwrap();
        let web = c.web.unwrap();
        assert_eq!(
            web.listen,
            MetricsListen::Unix("/run/proxsync/web.sock".into())
        );
        assert_eq!(web.token_file, Some("/etc/proxsync/web.token".into()));
        assert_eq!(c.receivers.len(), 2);
        assert_eq!(c.receivers[0].kind, ReceiverKind::Github);
        assert_eq!(
            c.receivers[0].secret_file,
            Some("/etc/proxsync/gh.secret".into())
        );
        assert_eq!(c.receivers[1].kind, ReceiverKind::Gitlab);
        assert_eq!(c.receivers[1].secret_file, None);
    }

    #[test]
    fn web_and_receiver_errors_name_the_key_and_what_is_valid() {
        let web = format!("{MINIMAL}\n[web]\n");
        let receiver = |body: &str| format!("{web}[[receiver]]\n{body}\n");
        let cases = [
            (
                format!("{MINIMAL}\n[web]\nlisten = \"localhost:8787\"\n"),
                "[web] listen",
            ),
            (
                format!("{MINIMAL}\n[web]\nlisten = \"/run/web.sock\"\n"),
                "unix:",
            ),
            (
                format!("{MINIMAL}\n[web]\nlisten = \"unix:web.sock\"\n"),
                "absolute path",
            ),
            (format!("{MINIMAL}\n[web]\nport = 8787\n"), "port"),
            (
                format!("{MINIMAL}\n[[receiver]]\nname = \"gh\"\ntype = \"github\"\n"),
                "needs the web listener",
            ),
            (
                receiver("name = \"GH\"\ntype = \"github\""),
                "a-z, 0-9 and '-'",
            ),
            (receiver("name = \"a/b\"\ntype = \"github\""), "name"),
            (receiver("name = \"\"\ntype = \"github\""), "1-63"),
            (receiver("name = \"gh\"\ntype = \"bitbucket\""), "generic"),
            (
                receiver("name = \"gh\"\ntype = \"github\"\nsecret = \"x\""),
                "secret",
            ),
            (
                format!(
                    "{}[[receiver]]\nname = \"gh\"\ntype = \"gitea\"\n",
                    receiver("name = \"gh\"\ntype = \"github\"")
                ),
                "unique",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err();
            assert!(err.contains(key), "error {err:?} should name {key:?}");
        }
    }

    #[test]
    fn a_file_url_is_a_plain_url_with_path_and_commit_as_its_only_placeholders() {
        let with = |url: &str| parse(&format!("{MINIMAL}\n[web]\nfile_url = {url:?}\n"));
        for good in [
            "https://github.com/acme/fleet/blob/{commit}/{path}",
            "https://git.example/acme/fleet/src/commit/{commit}/{path}",
            "https://gitlab.example/acme/fleet/-/blob/{commit}/{path}?ref_type=heads",
            "http://127.0.0.1:3000/a/b/src/branch/main/{path}",
        ] {
            let c = with(good).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(c.web.unwrap().file_url.as_deref(), Some(good));
        }
        for (bad, says) in [
            ("github.com/acme/fleet/blob/{commit}/{path}", "https://"),
            ("javascript:alert(1)//{path}", "https://"),
            ("https://github.com/acme/fleet/blob/{commit}", "{path}"),
            (
                "https://github.com/acme/fleet/{branch}/{path}",
                "only placeholders",
            ),
            (
                "https://alice:pw@git.example/{path}",
                "without a user or password",
            ),
            ("https://{path}/x", "host"),
            ("https:///{path}", "host"),
            ("https://git.example/a b/{path}", "%-encoded"),
            ("https://git.example/\"><script>/{path}", "%-encoded"),
        ] {
            let err = with(bad).unwrap_err();
            assert!(
                err.contains("[web] file_url") && err.contains(says),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn receiver_secrets_come_from_files_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let text = MINIMAL.to_string()
            + "[web]\ntoken_file = \"web.token\"\n\
               [[receiver]]\nname = \"gh\"\ntype = \"github\"\nsecret_file = \"gh.secret\"\n";
        let c = Config::parse(&dir.path().join("proxsync.toml"), &text).unwrap();
        let err = c.receivers[0].load_secret().unwrap_err().to_string();
        assert!(
            err.contains("[[receiver]] \"gh\"") && err.contains("gh.secret"),
            "{err}"
        );
        std::fs::write(dir.path().join("gh.secret"), "hook-key-of-16-ch\n").unwrap();
        assert_eq!(
            c.receivers[0].load_secret().unwrap().expose(),
            "hook-key-of-16-ch"
        );
        // Too short to hold: one captured hook and an HMAC key of a few characters is found
        // offline; a GitLab token, which is compared as is, online.
        std::fs::write(dir.path().join("gh.secret"), "hunter2\n").unwrap();
        let err = c.receivers[0].load_secret().unwrap_err().to_string();
        assert!(
            err.contains("[[receiver]] \"gh\"")
                && err.contains("7 characters")
                && err.contains("openssl rand"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "never echoed: {err}");
        std::fs::write(dir.path().join("gh.secret"), "two SECRETWORDS\n").unwrap();
        let err = c.receivers[0].load_secret().unwrap_err().to_string();
        assert!(!err.contains("SECRETWORDS"), "never echoed: {err}");
        std::fs::write(dir.path().join("gh.secret"), "x".repeat(5000)).unwrap();
        let err = c.receivers[0].load_secret().unwrap_err().to_string();
        assert!(err.contains("4096"), "{err}");
        let web = c.web.as_ref().unwrap();
        assert!(
            web.load_token()
                .unwrap_err()
                .to_string()
                .contains("[web] token_file")
        );
        std::fs::write(dir.path().join("web.token"), "t0ken\n").unwrap();
        assert_eq!(web.load_token().unwrap().unwrap().expose(), "t0ken");
    }

    #[test]
    fn notify_secrets_come_from_files_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let text = MINIMAL.to_string()
            + "[[notify]]\nname = \"chat\"\ntype = \"slack\"\nurl_file = \"slack.url\"\n\
               [[notify]]\nname = \"ops\"\ntype = \"webhook\"\nurl = \"https://h.example\"\n\
               secret_file = \"ops.secret\"\n";
        let c = Config::parse(&dir.path().join("proxsync.toml"), &text).unwrap();
        let secret_url = "https://hooks.slack.example/services/T0/B0/SECRETPART";
        std::fs::write(dir.path().join("slack.url"), format!("{secret_url}\n")).unwrap();
        std::fs::write(dir.path().join("ops.secret"), "hmac-key\n").unwrap();
        assert_eq!(c.notify[0].load_url().unwrap().expose(), secret_url);
        assert_eq!(c.notify[0].load_secret().unwrap(), None);
        assert_eq!(
            c.notify[1].load_secret().unwrap().unwrap().expose(),
            "hmac-key"
        );

        // A URL file holding something else is refused without showing it.
        std::fs::write(
            dir.path().join("slack.url"),
            "http://hooks.example/SECRETPART",
        )
        .unwrap();
        let err = c.notify[0].load_url().unwrap_err().to_string();
        assert!(err.contains("https://"), "{err}");
        assert!(
            !err.contains("SECRETPART"),
            "the URL must not be echoed: {err}"
        );
    }

    /// A config in `dir` whose site token is `pve-secret` (no `.token` name to refuse it by), its
    /// marker key `passwords/signing` (inside the password directory, under another name), and,
    /// with `allow`, `container_password_dir = "passwords"`.
    fn password_config(dir: &Path, allow: bool) -> Config {
        std::fs::create_dir_all(dir.join("passwords")).unwrap();
        std::fs::create_dir_all(dir.join("state")).unwrap();
        for (file, text) in [
            ("pve-secret", "tok-3f2a"),
            ("passwords/signing", "key-9c1d"),
            ("passwords/ct-root", "s3cret-root"),
            ("state/kept", "state-thing"),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let allowed = if allow {
            "container_password_dir = \"passwords\"\n"
        } else {
            ""
        };
        let text = format!(
            "state_dir = \"state\"\nmarker_key_file = \"passwords/signing\"\n{allowed}{MINIMAL}\
             token_secret_file = \"pve-secret\"\n"
        );
        Config::parse(&dir.join("proxsync.toml"), &text).unwrap()
    }

    #[test]
    fn a_containers_password_file_is_read_only_from_its_directory_and_never_a_secret_of_ours() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let at = |rel: &str| d.join(rel).display().to_string();

        // No directory allowed: no file at all, and the message names the key.
        let none = password_config(d, false).password_files();
        let why = none.check(&at("passwords/ct-root"), false).unwrap_err();
        assert!(why.contains("container_password_dir"), "{why}");
        assert!(none.read(&at("passwords/ct-root")).is_err());

        let files = password_config(d, true).password_files();
        assert_eq!(
            files.read(&at("passwords/ct-root")).unwrap().expose(),
            "s3cret-root"
        );
        // Not yet there: validate checks the path alone; a create needs the file.
        assert!(files.check(&at("passwords/later"), false).is_ok());
        assert!(files.check(&at("passwords/later"), true).is_err());
        // Outside the directory, or out of it through `..` or a symlink.
        for outside in [
            at("pve-secret"),
            format!("{}/../pve-secret", at("passwords")),
            "passwords/ct-root".to_string(),
        ] {
            let why = files.check(&outside, false).unwrap_err();
            assert!(
                why.contains("not in container_password_dir"),
                "{outside}: {why}"
            );
        }
        std::os::unix::fs::symlink(d.join("pve-secret"), d.join("passwords/via-link")).unwrap();
        let why = files.check(&at("passwords/via-link"), false).unwrap_err();
        assert!(why.contains("outside container_password_dir"), "{why}");
        // The same file as the site's token (a hard link), or the marker key the config keeps
        // in the directory under another name: by device and inode, not by name.
        std::fs::hard_link(d.join("pve-secret"), d.join("passwords/ct-web")).unwrap();
        let why = files.read(&at("passwords/ct-web")).unwrap_err();
        assert!(why.contains("site us-sfvalley's API token"), "{why}");
        assert!(!why.contains("tok-3f2a"), "never the content: {why}");
        let why = files.read(&at("passwords/signing")).unwrap_err();
        assert!(why.contains("the marker key"), "{why}");
        // A hard link of a file of the state directory.
        std::fs::hard_link(d.join("state/kept"), d.join("passwords/ct-state")).unwrap();
        let why = files.read(&at("passwords/ct-state")).unwrap_err();
        assert!(why.contains("the state directory"), "{why}");
    }

    #[test]
    fn max_specs_has_a_default_well_above_the_largest_fleet_and_a_range() {
        assert_eq!(parse(MINIMAL).unwrap().source.max_specs, 200_000);
        let with = |n: &str| {
            parse(&MINIMAL.replace("[source]\n", &format!("[source]\nmax_specs = {n}\n")))
        };
        assert_eq!(with("50").unwrap().source.max_specs, 50);
        for bad in ["0", "2000001"] {
            let why = with(bad).unwrap_err();
            assert!(why.contains("[source] max_specs"), "{why}");
        }
    }

    #[test]
    fn relative_paths_resolve_against_the_config_file() {
        let text =
            MINIMAL.replace("/srv/git/vms.git", "repo") + "token_secret_file = \"t.token\"\n";
        let c = Config::parse(Path::new("/etc/px/proxsync.toml"), &text).unwrap();
        assert_eq!(
            c.source.location,
            SourceLocation::Path("/etc/px/repo".into())
        );
        assert_eq!(
            c.sites[0].token_secret_file,
            Some(PathBuf::from("/etc/px/t.token"))
        );
    }

    #[test]
    fn commit_verification_keys() {
        let with = |extra: &str| {
            parse(&MINIMAL.replace(
                "path = \"/srv/git/vms.git\"",
                &format!("path = \"/srv/git/vms.git\"\n{extra}"),
            ))
        };
        assert_eq!(with("").unwrap().source.verify, None, "off by default");
        assert_eq!(with("verify = \"none\"").unwrap().source.verify, None);
        assert_eq!(
            with("verify = \"ssh\"\nallowed_signers = \"signers\"")
                .unwrap()
                .source
                .verify,
            Some(CommitVerification::Ssh {
                allowed_signers: "/etc/proxsync/signers".into()
            })
        );
        assert_eq!(
            with("verify = \"openpgp\"\nkeyring = \"/etc/proxsync/keys.gpg\"")
                .unwrap()
                .source
                .verify,
            Some(CommitVerification::OpenPgp {
                keyring: "/etc/proxsync/keys.gpg".into()
            })
        );
        for (extra, want) in [
            ("verify = \"ssh\"", "needs `allowed_signers`"),
            ("verify = \"openpgp\"", "needs `keyring`"),
            ("verify = \"gpg\"", "verify = \"gpg\": must be \"ssh\""),
            ("allowed_signers = \"s\"", "need `verify = \"ssh\"`"),
            (
                "verify = \"ssh\"\nallowed_signers = \"s\"\nkeyring = \"k\"",
                "keyring is for verify = \"openpgp\"",
            ),
            (
                "verify = \"openpgp\"\nallowed_signers = \"s\"\nkeyring = \"k\"",
                "allowed_signers is for verify = \"ssh\"",
            ),
        ] {
            let err = with(extra).unwrap_err();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }
}
