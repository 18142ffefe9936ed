//! A typed async client for the parts of the Proxmox VE API proxsync needs.
//!
//! Truth is PVE's own API schema (`shared/pve-api/apidata.json`, PVE 9.1; 8.4 beside it) and
//! PVE's wording, not what other tools claim. In particular there is no `importdisk` HTTP
//! endpoint (it is a `qm` command): disks are imported with the `import-from=` drive option.
//!
//! **Authentication.** An API token (`Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET`)
//! is the primary way; a user and password for a ticket plus `CSRFPreventionToken` is the
//! fallback. With a token the effective user is `user@realm!tokenid`, not `root@pam`, so
//! root-only options (`skiplock`, absolute `import-from` paths) are never used.
//!
//! **TLS.** A site trusts the system roots, a CA file or a pinned SHA-256 fingerprint
//! ([`tls`]); verification cannot be switched off. Connect and request timeouts are explicit;
//! the environment's proxy variables are ignored unless a proxy is configured.
//!
//! **Retries.** Only reads (GET) are retried, on transport failures and 502-504, with
//! jittered exponential pauses within a time budget. A create, clone, config change or delete
//! is sent once: when its outcome is unknown ([`Error::outcome_unknown`]: a transport error,
//! 502-504, pveproxy's 595-597, an unreadable answer) the caller must look, not resend; only
//! [`Error::surely_not_executed`] proves nothing was done.
//!
//! **Seam.** [`Pve`] is the set of calls `execute` and `observe` make; [`Client`] implements
//! it by calling its own methods, and unit tests use an in-memory fake (`fake`: this crate's
//! tests, and the crates above with the feature `fake`).
//!
//! **Logging.** Each request is logged at debug level with method, path, status and duration.
//! The token travels only in a header marked sensitive; no secret is ever logged.
//!
//! # Calls
//!
//! | call | PVE endpoint | answers | what can fail (category) |
//! |---|---|---|---|
//! | [`Client::version`] | `GET /version` | at once | Authentication, Network |
//! | [`Client::cluster_status`], [`Client::cluster_health`] | `GET /cluster/status` | at once | Network |
//! | [`Client::root_ca_fingerprint`] | `GET /nodes/{node}/certificates/info` | at once | Network; Decode when `pve-root-ca.pem` is not listed |
//! | [`Client::vm_resources`] | `GET /cluster/resources?type=vm` | at once | Network; VMs of offline nodes show `unknown` |
//! | [`Client::next_id`], [`Client::vmid_is_free`] | `GET /cluster/nextid[?vmid=N]` | at once | 400 `VM N already exists` (taken) |
//! | [`Client::node_storages`] | `GET /nodes/{node}/storage` | at once | 595 NodeUnhealthy (node offline) |
//! | [`Client::storage_content`] | `GET /nodes/{node}/storage/{storage}/content` | at once | 500 storage missing/inactive |
//! | [`Client::download_url`] | `POST /nodes/{node}/storage/{storage}/download-url` | task `download` (id: the file name) | 400 bad file name; 500 storage not file based or without the content; task: `checksum mismatch: got 'X' != expect 'Y'`, `download failed: exit code 8` |
//! | [`Client::oci_registry_pull`] | `POST /nodes/{node}/storage/{storage}/oci-registry-pull` (PVE 9.1) | task `ociregistrypull` (id: the file name) | 400 bad reference; 500 storage not file based or without `vztmpl`, no `skopeo`, `refusing to override existing file`; task: skopeo's failure |
//! | [`Client::node_bridges`] | `GET /nodes/{node}/network?type=any_bridge` | at once | 595 NodeUnhealthy |
//! | [`Client::vm_config`] | `GET /nodes/{node}/qemu/{vmid}/config` | at once | 500 `Configuration file ... does not exist` (NotFound) |
//! | [`Client::set_config`] | `PUT .../config` (+`digest`) | at once | Lock, Conflict (`digest` mismatch), 400 Configuration; NotPermitted (a guarded edit without the gate's permit, nothing sent) |
//! | [`Client::set_config_async`] | `POST .../config` (+`digest`) | a task when needed, else at once | as above; TaskFailed |
//! | [`Client::create_vm`] | `POST /nodes/{node}/qemu` | task `qmcreate` | AlreadyExists (VMID taken), 400, Quota, ImageNotFound, TaskFailed |
//! | [`Client::clone_vm`] | `POST .../qemu/{template}/clone` | task `qmclone` | Lock (template busy), AlreadyExists, Quota, TaskFailed |
//! | [`Client::template_vm`] | `POST .../qemu/{vmid}/template` | task `qmtemplate` | Lock, 500 `you can't convert a template to a template` (AlreadyTemplate), `you can't convert a VM to template if VM is running`, snapshots; TaskFailed |
//! | [`Client::resize_disk`] | `PUT .../resize` | task `resize` (PVE 8+), at once before | 500 shrinking refused, Lock |
//! | [`Client::start_vm`], [`Client::shutdown_vm`], [`Client::stop_vm`] | `POST .../status/{start,shutdown,stop}` | task | Lock, NodeUnhealthy, TaskFailed |
//! | [`Client::migrate_precondition`], [`Client::migrate_vm`] | `GET`/`POST .../migrate` | at once; task `qmigrate` (`hamigrate` when HA-managed) | Lock, 500 `can't migrate running VM without --online`, TaskFailed (`local cdrom image`, local devices) |
//! | [`Client::delete_vm`] | `DELETE .../qemu/{vmid}?purge=1&destroy-unreferenced-disks=1`, with the gate's permit | task `qmdestroy` | Lock, running VM refused, TaskFailed; NotPermitted (nothing sent) |
//! | [`Client::active_vm_tasks`], [`Client::active_tasks`] | `GET /nodes/{node}/tasks?source=active[&vmid=N]` | at once | who holds a VM's lock ([`LockHolder`]); running tasks say `RUNNING` |
//! | [`Client::agent_interfaces`] | `GET .../agent/network-get-interfaces` | at once | 500 `QEMU guest agent is not running` |
//! | [`Client::agent_ping`] | `POST .../agent/ping` (a health check) | at once | 500 `No QEMU guest agent configured`, `QEMU guest agent is not running`, `qmp command 'guest-ping' failed - got timeout` |
//! | [`Client::permissions`] | `GET /access/permissions` | at once | the token's effective privileges |
//! | [`Client::task_status`], [`Client::task_log_tail`] | `GET /nodes/{node}/tasks/{upid}/{status,log}` | at once | Network |
//! | [`Client::wait_task`] | polls the status, or the node's active listing when several waits share a node ([`tasks`]); at most [`TASK_POLLS_PER_SITE`] task reads per site at once | until stopped or our timeout | TaskFailed with the log's last lines; our timeout is `StillRunning`, never a failure |
//!
//! Every failure keeps PVE's text verbatim ([`Error::pve_message`]) and maps to a
//! [`crate::category::Category`] ([`Error::category`]). The PVE texts proxsync recognises, what
//! each means, and where PVE says it, are one table: [`texts`].

mod api;
#[cfg(feature = "client")]
mod calls;
#[cfg(feature = "client")]
mod client;
mod error;
pub mod ha;
mod meter;
pub(crate) mod migrate;
pub(crate) mod pace;
pub mod permit;
pub(crate) mod task;
#[cfg(feature = "client")]
pub mod tasks;
pub mod texts;
#[cfg(feature = "client")]
pub mod tls;
pub mod types;
pub mod values;

pub use api::{CloneRequest, Download, VmParams, percent_encode};
#[cfg(feature = "client")]
pub use calls::Pve;
#[cfg(feature = "client")]
pub use client::{Client, ClientOptions, Credentials, POOL_IDLE};
pub use error::{Error, Summary, TransportKind, is_lock_timeout};
pub use meter::{Meter, NoMeter};
pub use task::{LockHolder, TaskOutcome, Upid};
#[cfg(feature = "client")]
pub use tasks::TASK_POLLS_PER_SITE;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
