//! For every row of `pve::texts`, the suite's step that provokes PVE into those words, or why
//! no step does (a text a healthy cluster says only under load, without quorum, with a full
//! storage, or of things the suite never makes). The unit tests hold the list and the table
//! to each other, and the in-memory run to the list.

/// How the suite meets one row of `pve::texts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cover {
    /// The step named provokes these words.
    Step(&'static str),
    /// The step named provokes these words on the PVE releases of this row, and the other row's
    /// (same meaning) on the others.
    OrOther(&'static str, &'static str),
    /// Not provoked, and why.
    Not(&'static str),
}

const LOAD: &str = "load: a lock's timeout, said only when a node or its storage is too busy";
const QUORUM: &str = "a cluster without quorum";
const SPACE: &str = "a full storage";
const HA: &str = "HA resources, groups and rules: the suite makes none";
const AGENT: &str =
    "a guest agent's answers: the suite's guests run no agent and it makes no agent call";
const SNAPSHOT: &str = "snapshots: the suite takes, rolls back and deletes none";

/// Each row of `pve::texts::TEXTS` by its pattern.
pub(crate) const COVERAGE: &[(&str, Cover)] = &[
    (
        "VM is locked (*)",
        Cover::Step("vm write while a clone holds its lock"),
    ),
    (
        "CT is locked (*)",
        Cover::Step("ct write while a clone holds its lock"),
    ),
    ("can't lock file '*' - got timeout", Cover::Not(LOAD)),
    (
        "cfs-lock '*' error: got lock request timeout",
        Cover::Not(LOAD),
    ),
    ("'*'-locked command timed out - aborting", Cover::Not(LOAD)),
    (
        "checksum mismatch (file change by other user?)",
        Cover::Step("vm write with a stale digest"),
    ),
    (
        "checksum missmatch (file change by other user?)",
        Cover::OrOther(
            "vm write with a stale digest",
            "checksum mismatch (file change by other user?)",
        ),
    ),
    (
        "detected modified configuration - file changed by other user? Try again.",
        Cover::Step("ct write with a stale digest"),
    ),
    (
        "checksum mismatch: got '*' != expect '*'",
        Cover::Not("an upload damaged on its way"),
    ),
    ("No QEMU guest agent configured", Cover::Not(AGENT)),
    ("QEMU guest agent is not running", Cover::Not(AGENT)),
    ("qmp command 'guest-*' failed - *", Cover::Not(AGENT)),
    ("snapshot feature is not available", Cover::Not(SNAPSHOT)),
    ("snapshot name '*' already used", Cover::Not(SNAPSHOT)),
    ("snapshot '*' does not exist", Cover::Not(SNAPSHOT)),
    (
        "VM # is not running",
        Cover::Not("an agent call to a stopped VM: the suite makes no agent call"),
    ),
    (
        "refusing to override existing file '*'",
        Cover::Not("a pull or download of a file already there: the exercise pulls nothing"),
    ),
    (
        "VM # already exists on node '*'",
        Cover::Step("vm create onto a taken VMID"),
    ),
    (
        "CT # already exists on node '*'",
        Cover::Step("ct create onto a taken VMID"),
    ),
    (
        "unable to create VM #: config file already exists",
        Cover::Step("vm clone onto a taken VMID"),
    ),
    (
        "VM # already exists",
        Cover::Not("/cluster/nextid's answer for a taken VMID: a read the client turns into false"),
    ),
    (
        "Configuration file '*' does not exist",
        Cover::Step("vm config after its delete"),
    ),
    (
        "unable to find configuration file for VM # on node '*'",
        Cover::Not("a request naming a VM on a node it is not on: the suite follows its guests"),
    ),
    ("cluster not ready - no quorum?", Cover::Not(QUORUM)),
    ("no quorum!", Cover::Not(QUORUM)),
    ("No space left on device", Cover::Not(SPACE)),
    ("Disk quota exceeded", Cover::Not(SPACE)),
    ("not enough free space (# < #)", Cover::Not(SPACE)),
    (
        "Permission check failed",
        Cover::Not("a token lacking a privilege: doctor's privilege check reads them"),
    ),
    (
        "Method '*' not implemented",
        Cover::Not("an API call PVE lacks: doctor's version check"),
    ),
    (
        "unable to parse volume ID '*'",
        Cover::Not("a malformed volume id: proxsync's own checks refuse them before sending"),
    ),
    (
        "unable to parse directory volume name '*'",
        Cover::Step("ct create from a .tgz archive"),
    ),
    (
        "volume '*:*' does not exist",
        Cover::Not("an image the spec names and the storage lacks: doctor's image check"),
    ),
    (
        "volume *:* does not exist",
        Cover::Not("an image the spec names and the storage lacks: doctor's image check"),
    ),
    (
        "VM is paused - cannot shutdown",
        Cover::Not("a paused VM: the suite pauses none"),
    ),
    ("CT # not running", Cover::Step("ct stop while stopped")),
    ("VM # not running", Cover::Step("vm reboot while stopped")),
    (
        "CT # already running",
        Cover::Step("ct start while running"),
    ),
    (
        "VM # already running",
        Cover::Step("vm start while running"),
    ),
    (
        "disk is already at specified size",
        Cover::Step("ct resize to the size it has"),
    ),
    ("unable to shrink disk size", Cover::Step("ct shrink")),
    (
        "you can't convert a template to a template",
        Cover::Not("a VM converted to a template: the suite converts none"),
    ),
    (
        "you can't convert a VM to template if VM is running",
        Cover::Not("a VM converted to a template: the suite converts none"),
    ),
    ("shrinking disks is not supported", Cover::Step("vm shrink")),
    (
        "MTU size '#' is bigger than bridge MTU '#'",
        Cover::Step("ct create with an MTU above its bridge's"),
    ),
    (
        "Full clone of a running container is only possible from a snapshot",
        Cover::OrOther(
            "ct full clone while running",
            "Cannot do full clones on a running container without snapshots",
        ),
    ),
    (
        "Cannot do full clones on a running container without snapshots",
        Cover::OrOther(
            "ct full clone while running",
            "Full clone of a running container is only possible from a snapshot",
        ),
    ),
    (
        "can't clone VM to node '*' (VM uses local storage)",
        Cover::Not("a clone to another node from local storage: the suite clones on its node"),
    ),
    (
        "can't clone CT to node '*' (CT uses local storage)",
        Cover::Not("a clone to another node from local storage: the suite clones on its node"),
    ),
    ("no such resource '*'", Cover::Not(HA)),
    ("no such ha group '*'", Cover::Not(HA)),
    ("no such ha rule '*'", Cover::Not(HA)),
    (
        "service '*' in error state, must be disabled and fixed first",
        Cover::Not(HA),
    ),
    (
        "pool '*' does not exist",
        Cover::Step("pool read of a missing pool"),
    ),
];

/// The rows a run was meant to provoke and did not (each with the step that should have):
/// empty when every `Step` row was met, and each `OrOther` row or its other was.
pub fn unmet(report: &super::Report) -> Vec<String> {
    let mut out = Vec::new();
    for (pattern, cover) in COVERAGE {
        let met = match cover {
            Cover::Step(_) => super::provoked(report, pattern),
            Cover::OrOther(_, other) => {
                super::provoked(report, pattern) || super::provoked(report, other)
            }
            Cover::Not(_) => true,
        };
        if !met {
            let step = match cover {
                Cover::Step(s) | Cover::OrOther(s, _) => s,
                Cover::Not(_) => "",
            };
            out.push(format!("{pattern:?} (step {step:?})"));
        }
    }
    out
}
