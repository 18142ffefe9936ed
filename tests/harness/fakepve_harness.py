#!/usr/bin/env python3
"""A fakepve (fake Proxmox VE API) server for proxsync's Rust integration tests, driven by JSON lines.

    python fakepve_harness.py < commands          # the scenario is the first line of stdin
    python fakepve_harness.py --scenario FILE      # or a JSON file

It makes a self-signed certificate in a private temp dir, serves a FakePve over TLS on
127.0.0.1 (or the scenario's host) with a free port (or the scenario's port), and prints

    {"ready": true, "url": "https://127.0.0.1:PORT", "host": ..., "port": ..., "ca_file": ...}

(or {"ready": false, "error": "..."} and exit status 2). Then every stdin line is a command

    {"id": N, "cmd": "fail", "args": {...}}  ->  {"id": N, "ok": true, "result": ...}
                                              or  {"id": N, "ok": false, "error": "..."}

answered in order. On stdin EOF, {"cmd": "stop"}, SIGTERM or SIGINT it stops the server, removes
its temp dir and exits, so a crashed test never leaves it behind. stdout carries only protocol
lines; anything else (logs, warnings) goes to stderr. See COMMANDS below for the commands.

COMMANDS (the methods of `Commands`; each keyword parameter is an arg). Besides fakepve's own
faults and state commands, the harness models real PVE where fakepve 0.5.0 differs:

    create_timing(create_secs=0, clone_secs=0, answer_delay=0)
        qmcreate and qmclone tasks take create_secs / clone_secs PVE seconds (times time_scale,
        so time_scale must be > 0). Meanwhile a created VM's config holds only `lock: create`, a
        clone's only `lock: clone` and the `# qmclone temporary file` comment (GET config shows it
        as `description`), and /cluster/resources lists the VM with no `name`; a clone with
        `target` stays on the source node. Name, description and tags appear when the task ends.
        answer_delay: the POST's answer (the UPID) comes that many PVE seconds after the locked
        VM exists. All zero (the default) turns it off.
    template_timing(secs=0)
        A VM's `qmtemplate` task takes secs PVE seconds (times time_scale), as qemu-server's
        `template` runs it: under lock_config (a flock; no `lock:` in the config) the config gets
        `template: 1` at the task's start, so GET config and /cluster/resources say template=1
        while its disks are still `vm-N-disk-M`; they are renamed `base-N-disk-M`
        (vdisk_create_base) at the task's end, when the flock goes. Meanwhile a config write or a
        destroy waits for the flock and fails `can't lock file '/var/lock/qemu-server/lock-N.conf'
        - got timeout`, and a clone of the VM (clone_vm's lock_config_shared, 1 s) fails so too.
        templating() lists the VMIDs whose task still runs, clones_while_templating() the clone
        requests ([{vmid, newid}]) that came meanwhile. 0 (the default) turns it off.
    new_vm_timing(start_secs=0)
        A VM made by a create or clone takes start_secs PVE seconds to start (fakepve's
        per-VM `start_secs`, which set_vm changes one VM at a time).
    clone_contention(max_clones=None, wait_secs=10)
        A node's storage takes max_clones clones at once: a qmclone task started while that many
        are cloning on its node waits wait_secs PVE seconds (lock_file_full's default timeout)
        and fails with `clone failed: can't lock file '/var/lock/pve-manager/pve-storage-ID' -
        got timeout`, leaving nothing at its VMID (see HarnessPve.task). Needs create_timing's
        clone_secs > 0. None turns it off.
    lose_answer(method, suffix, status=596, message='Connection timed out', times=1)
        The next `times` matching requests are carried out, then the client gets `status` with
        reason `message` and no body (pveproxy passing on a failed forward) instead of the answer.
    lost_answers()
        [{method, path, status, body}] of the answers lose_answer threw away (the UPIDs, ...).
    garble(rate=0.6, seed=0, paths=None, max_mutations=3)
        A broken server or proxy garbling successful answers at random: with probability rate (drawn
        from the harness's own random.Random(seed), so a run repeats given the same request order) a
        2xx answer `{"data": ...}` gets 1 to max_mutations mutations, each at a random place inside
        `data` (a dict key or list index at a random depth, data's own keys or items included): the
        value becomes null, a huge or negative number (2**63, 1e300, -1, -2**31) or an odd string
        ("", "garbage", NUL, an emoji, "-1", "NaN", 10 KiB), or the key or the list item is dropped.
        A scalar or empty `data` (a POST's UPID, null) is replaced as a whole. Only the answer sent is
        garbled: the request is carried out as sent (a create still creates the VM). Error answers
        (4xx, 5xx, fail's, lose_answer's) and the login ticket (/access/ticket) are never garbled.
        paths: path substrings (["/cluster/resources", "/config"]): only the answers to requests whose
        path holds one of them. rate=0 turns it off; lose_answer, flaky_network and slow_network work
        alongside it (a lost or dropped answer is not garbled).
    garbled(reset=False)
        {answers, garbled, by_path}: the answers garble could have garbled while on, how many it did,
        and those by API path without /api2/json (`/nodes/pve1/qemu/100/config`); reset=True zeroes
        them after reading.
    backup(vmid, secs=30, single=False)
        A vzdump job: a `vzdump` task with an EMPTY id (a job over several guests; single=True: the
        id is vmid, as a one-guest vzdump), the guest (a VM or a container) holding `lock: backup`
        for secs PVE seconds.
    hold_config_lock(vmid, secs=None) / release_config_lock(vmid) / snapshot_lock(vmid, lock) /
    unlock(vmid)
        Another process holding the guest's config file lock (a write meanwhile waits, then fails
        with `can't lock file '...' - got timeout`), a lock left in its config, the lock cleared: a
        VM's or a container's.
    hibernate(vmid)
        The VM as after `qm suspend --todisk`: stopped, `lock: suspended`, no task; start resumes.
    set_standalone(on=True)
        A standalone node (scenario key `standalone`; one node only): GET /cluster/status answers as
        pve-manager's get_status does without a cluster, no `cluster` entry and the node with nodeid 0;
        off again is the node after `pvecm create`.

    task_with_log(node='pve1', type='qmstart', id='', lines=0, error=None, secs=0)
        A task with `lines` log lines, failing with `error` (or OK) after secs PVE seconds (times
        time_scale); returns its UPID.
    connections()
        How many client connections (address and port) requests came on. A connection kept alive
        and idle for 5 s is closed, as pveproxy closes it (PVEPROXY_IDLE_SECS).
    task_polls(reset=False)
        {in_flight, max_in_flight, status, listings}: GET requests under /nodes/{node}/tasks (a
        task's status or log, a node's task listing) being answered now, the most at once, and how
        many status reads and listings were answered (since the last reset=True, which zeroes them).

Containers speak pve-container's words, not qemu-server's (fakepve 0.5.0's `fakepve.lxc` already does, so
the harness adds only the commands above for containers; tests/it/client/fake_fidelity.rs checks each):
a locked container is refused `CT is locked (<lock>)` (pve-guest-common src/PVE/AbstractConfig.pm
check_lock, `die $class->guest_type() . " is locked ($conf->{lock})\n"`, pve-container src/PVE/LXC/Config.pm
guest_type `CT`), a stale digest `detected modified configuration - file changed by other user? Try again.`
(pve-common src/PVE/Tools.pm assert_if_modified, from pve-container src/PVE/API2/LXC/Config.pm update_vm and
src/PVE/API2/LXC.pm resize_vm), a config lock held too long `can't lock file
'/run/lock/lxc/pve-config-N.lock' - got timeout` (pve-container LXC/Config.pm config_file_lock, pve-common
lock_file_full); a container clone (src/PVE/API2/LXC.pm clone_vm) puts `lock: disk` on its SOURCE
(`set_lock($vmid, 'disk')`) for the whole copy (ct_timing's clone_secs), so a second clone of one CT template
meanwhile is refused at once, 500 `CT is locked (disk)`, and the lock goes when the vzclone task ends, well or
not (`remove_lock($vmid, 'disk')`); a container's backup holds `lock: backup` (src/PVE/VZDump/LXC.pm lock_vm).

Containers' volumes, weights, NICs and templates as pve-container and pve-storage take them (fakepve 0.5.0
does not): a new volume `STORAGE:GB` is `int($size_gb * 1024)` MiB, written so into its config (src/PVE/LXC.pm
create_disks), on LVM in whole 4 MiB extents (lvcreate rounds up); `resize` compares the volume's real size
(volume_size_info), not the config's size= (API2/LXC.pm resize_vm); `cpuunits` is stored at most 10000
(pve-common CGroup.pm clamp_cpu_shares on cgroup v2, from create_vm and update_vm); a NIC's `mtu` above its
bridge's is refused before anything, `netN: MTU size 'X' is bigger than bridge MTU 'Y'` (LXC/Config.pm
update_pct_config, at create and update); a vztmpl archive's name is checked as pve-storage's parse_volname
does (`.tar.gz|.tar.xz|.tar.zst`, `.tar.bz2` from PVE 8.3, a bare `.tar` from 9.1, any case; else
`unable to parse directory volume name 'vztmpl/NAME'`). A container's reboot, and a shutdown with
forceStop, kill it after the timeout (LXC.pm vm_reboot, vm_stop), counted in hard_stops. The HA manager's
stop of a container is clean (PVECT.pm shutdown passes no forceStop): one not down within the timeout keeps
running and its service goes to `error`; its relocation shuts it down within HA's own 60 s, whatever
`timeout` the migrate request named, and one not down by then stays where it is.

Power, clone, resize and logs as qemu-server / pve-manager do (fakepve 0.5.0 does not): a paused VM
refuses `shutdown` without forceStop (`VM is paused - cannot shutdown`) and is stopped with it; `stop`
with `overrule-shutdown` aborts the VM's running qmshutdown (a 400 for an HA-managed VM); a clone with
`target` needs every source volume on shared storage (`can't clone VM to node 'X' (VM uses local
storage)`); `PUT .../resize` is a `resize` task that grows the drive's `size=` (never shrinks); task logs
answer `total`.

    ha_resources() / remove_ha(vmid)
        The HA resources made through `/cluster/ha/resources` ({vmid: config}), a container's
        (`ct:N`) too; a person's `ha-manager remove vm:N`.
    ha_groups() / ha_rules() / set_ha_group(group, nodes, restricted=0, comment=None) /
    set_ha_rule(rule, resources, nodes, strict=0, comment=None)
        PVE 8's HA groups and PVE 9's node-affinity rules; a person's group or rule.
    hard_stops()
        {vmid: n}: how often the HA stack stopped a VM hard, or a container was killed after its
        shutdown's timeout (its reboot, a forceStop shutdown).
    migrate_timing(secs=0)
        A qemu migration (`qmigrate`) holds `lock: migrate` for secs PVE seconds before the VM is
        on its target (times time_scale).

HA resources as pve-ha-manager's API2/HA/Resources.pm: `GET`/`POST /cluster/ha/resources`, `GET`/
`PUT`/`DELETE .../{sid}` (`no such resource`, `already defined`, `digest`, Sys.Audit to read,
Sys.Console to change); the CRM starts or stops the VM `ha_delay` PVE seconds after the state. A
container is `ct:N` (PVECT.pm: `resource 'ct:N' - guest with ID N is not a container` for a VM), its
start and stop the same `hastart`/`hastop` tasks, which set the resource's state as a VM's do. The
version decides groups or rules (pve-ha-manager 4.x for PVE 8, 5.x for 9): PVE 8 has
`/cluster/ha/groups` and no rules (501) nor `purge`; PVE 9 has `/cluster/ha/rules` (node-affinity)
once no group is left, refuses a resource's `group` then ("ha groups have been migrated to rules"),
reads resources without it, and from 9.1 a resource's DELETE purges it from the rules (`purge`,
default 1), deleting a rule left empty (before 9.1 `purge` is refused and no rule touched). A service in `error` (set_vm ha_state=error) refuses every change but
`state=disabled` and every `hastart`. A shutdown or stop of an HA-managed VM is an `hastop` task
that sets the resource's state to `stopped`; the HA stack then shuts the guest down with
`forceStop` after the timeout (a stop: at once), counting each hard stop.

Qemu migration as qemu-server does it (fakepve 0.5.0 has none): `GET .../migrate` answers the
precondition (`allowed_nodes`, `not_allowed_nodes` with `unavailable_storages`, `local_disks` with
CD-ROM images and the cloud-init drive as `cdrom`, `local_resources`); `POST .../migrate` refuses a
running VM without `online`, then a `qmigrate` task dies on local devices, a local CD-ROM image and
an attached local disk of a running VM without `with-local-disks`; an HA-managed VM gets an
`hamigrate` task and moves `ha_delay` later.

Config updates as qemu-server makes them (fakepve 0.5.0 stores values as sent): a NIC sent
without a MAC gets a fresh one; `S:N` allocates a disk at once; a deleted disk is detached to
`unusedN`; on a running VM what its `hotplug` features allow (default network,disk,usb) applies at
once (a NIC's bridge, tag, trunks, firewall and rate always; a new scsi/virtio disk or NIC with
hotplug; the balloon target; memory with memory hotplug and NUMA) and the rest stays pending
(cores, sockets, cpu, numa, bios, machine, scsihw, vga, serial0, ostype, agent on/off, EFI/TPM).
On a VM with `protection` set, an update deleting a drive or an `unusedN` that is set dies before
any change (`can't remove drive 'scsi1' - protection mode enabled`; a POST's qmconfig task fails with
it), as qemu-server's update_vm_api checks it in its delete loop.
Scenario key `pools`: pool ids that exist.

    store_file(storage, name, size=0, content='iso', ctime=None)
        A file on a storage (someone's upload), listed with `size` and `ctime` (default: now).

    remote_file(url, size=1048576, data=None, status=200)
        A file the fake internet serves at url (there is no real one): `data` (a string, its UTF-8
        bytes) or else `size` bytes of repeated sha256(url + counter); returns {url, size, sha256,
        sha512} of those bytes, for a download's `checksum`. status other than 200: wget gets that
        HTTP error (the task fails `download failed: exit code 8`); a URL never registered is a
        network failure (`download failed: exit code 4`).
    download_timing(secs=0)
        A download task's wget takes secs PVE seconds (times time_scale).
    downloads()
        [{node, storage, filename, url, content, checksum, checksum_algorithm}]: the download-url
        requests past the schema and permission checks, in order (filename as sent).
    oci_image(reference, size=1048576, entrypoint=None, cmd=None, env=None)
        The fake registry holds OCI image `reference`: oci-registry-pull (PVE 9.1) stores it as a
        vztmpl .tar of `size` bytes; a reference it does not hold fails the task as skopeo does. Its
        config's Entrypoint and Cmd (lists) and Env (["NAME=value", ...]) are what a container
        created from the archive gets, over the create's parameters, as pve-container's
        restore_oci_archive writes them.
    skopeo(installed=True)
        Without skopeo, oci-registry-pull refuses at once (500 `Install 'skopeo' ...`).
    oci_pulls()
        [{node, storage, reference, filename}]: the oci-registry-pull requests past the schema and
        permission checks, in order.

POST /nodes/{node}/storage/{storage}/download-url as pve-storage src/PVE/API2/Storage/Status.pm
download_url and pve-common src/PVE/Tools.pm download_file_from_url (PVE 9.1; fakepve 0.5.0 demands
Sys.Audit and Sys.Modify on `/`, checks no name, names the task after the storage and always succeeds):
Datastore.AllocateTemplate on /storage/{storage} and Sys.Audit+Sys.Modify on `/` or Sys.AccessNetwork on
/nodes/{node}; `checksum` and `checksum-algorithm` each require the other; before the task
`can't upload to storage type 'T', not a file based storage!`, `storage 'S' is not configured for
content-type 'C'`, and the normalised name's extension, 400 {filename: `wrong file extension`} (iso;
vztmpl, whose `.tar.bz2` and bare `.tar` follow the fake's `version` as container templates do) or {filename: `invalid filename or wrong extension`} (import: .ova .qcow2 .raw .vmdk). The
`download` task, its id the normalised file name: `decompression not supported for C` (compression but
not iso); an existing file: same checksum -> `OK, got correct file already, no need to download` (task
OK), other -> `checksum mismatch: got 'X' != expect 'Y', aborting`, none -> `refusing to override
existing file 'PATH'` (a file the harness has no bytes of counts as `size` NUL bytes); wget
(`download failed: exit code 4|8|3`); a wrong checksum of the bytes `checksum mismatch: got 'X' !=
expect 'Y'`; else the file is stored (listed as `STORAGE:C/NAME`). Storages are one model for all
nodes, as in fakepve: a download to a local storage on one node shows on every node.

    set_datacenter(options)
        datacenter.cfg as GET /cluster/options answers it (scenario key `datacenter`), e.g.
        {"user-tag-access": {"user-allow": "list", "user-allow-list": ["web"]}, "registered-tags": [...]}
        or {"next-id": {"lower": 5000}}.
    add_ct(vmid, node='pve1', status='stopped', name=None, config=None, template=False)
        A container, as fakepve makes it: listed as `lxc`, its VMID taken for VMs too. Scenario key
        `cts`: [{vmid, name, node, status, config, template, lock, pool}] (a CT template to clone:
        template true).
    destroy_timing(secs=0)
        A VM's qmdestroy task takes secs PVE seconds before it frees the volumes and removes the
        config (fakepve 0.5.0 removes them at once), so a stop can land while it runs.
    ct_timing(create_secs=0, clone_secs=0, destroy_secs=0, migrate_secs=0, start_secs=0, create_tail_secs=0)
        A container's vzcreate, vzclone, vzdestroy and vzmigrate take these PVE seconds; a
        container made by a vzcreate takes start_secs PVE seconds to start (fakepve's
        per-container `start_secs`); a vzcreate writes the new container's whole config without its
        `create` lock create_tail_secs before it ends (pve-container writes it after the OS
        detection, then sets the container up).
    snapshot_timing(secs=0)
        A container's vzsnapshot, vzrollback and vzdelsnapshot take secs PVE seconds (fakepve's ct_secs
        `snapshot`, `rollback`, `delsnapshot`), holding `lock: snapshot`, `rollback` or `snapshot-delete`
        meanwhile (pve-guest-common src/PVE/AbstractConfig.pm __snapshot_prepare, snapshot_rollback,
        snapshot_delete), so a config write meanwhile is refused `CT is locked (snapshot)`.
    ct(vmid), cts(), set_ct(vmid, config=None, status=None, lock=None, ha_state=None, shutdown_secs=None)
        A container's dump (config, pending, status, lock, ha_state); every container; a person's
        change (shutdown_secs: how long its init takes to shut it down).
    volume_size(volume)
        A container volume's real size in bytes, which its config's size= may not say (None: not made
        by the harness).
    add_vm_before(method, suffix, vmid, **add_vm args)
        Before the next METHOD request whose path ends with suffix is carried out, add VM vmid as
        add_vm does: someone else making a guest between proxsync's listing and its request.
    set_vm_before(method, suffix, vmid, **set_vm args)
        The same for set_vm: someone starting a VM between proxsync's read and its request.
    set_bridge_mtu(bridge, mtu=None)
        The bridge's MTU in /etc/network/interfaces (listed as `mtu`; default 1500). Scenario key
        `bridge_mtus`: {"vmbr1": 9000}.
    set_node_memory(node, maxmem=None, mem=None)
        A node's memory as /cluster/resources?type=node lists it: `maxmem` the host's, `mem` what is in
        use, its running guests' memory added to the `mem` set here (fakepve 0.5.0 lists 2 of 8 GiB
        for every node). Scenario key `node_memory`: {"pve2": {"maxmem": 34359738368}}.

A storage option `alloc_secs`: making a volume there takes that many PVE seconds, so a synchronous
`PUT .../config` that makes one (a new disk, `efidisk0`, `tpmstate0`) passes pveproxy's 30 s and is
answered `596 Connection timed out` after the change was made; `POST .../config` is not.

Permissions qemu-server checks on a VM's options (fakepve 0.5.0 checks each key's VM.Config.*
only): `startup` needs Sys.Modify on `/`; a custom CPU model Mapping.Use on /mapping/cpu/NAME (PVE
9.1.15+, else Sys.Audit on /nodes); each NIC SDN.Use on /sdn/zones/localnetwork/BRIDGE, or on
.../BRIDGE/TAG for its VLAN tag and each trunk VLAN; at create, update and (the source's) clone.
The network listing shows a bridge only to a caller with SDN.Audit or SDN.Use on it (or a VLAN
below it). A start dies on a virtio NIC whose MTU is below 576 or above its bridge's. Windows
guests get a pinned machine version at create and on an ostype change, as Machine.pm pins it.

The VMID range as pve-manager PVE/API2/Cluster.pm and pve-cluster src/PVE/DataCenterConfig.pm
keep it (fakepve 0.5.0 has a fixed 100..1000000 and no PUT /cluster/options): `PUT /cluster/options`
takes `next-id` as `[lower=N][,upper=N]` (lower 100..999999999, upper 100..1000000000, `lower >
upper` refused) and `delete`; `GET /cluster/options` answers it parsed (`{lower, upper}`) with the
rest of datacenter.cfg, always with `mac_prefix` (the default `BC:24:11`); `GET /cluster/nextid`
answers the first id in [lower, upper) no guest has.

GET /nodes/{node}/certificates/info as pve-manager PVE/API2/Certificates.pm `info`: `pve-root-ca.pem` (the
cluster's root CA, one per fake: the certificate it serves, which is the tests' ca_file) and `pve-ssl.pem`,
with pve-common's SHA-256 `fingerprint` (upper-case colon hex); any user may read it.

A container's rollback with `start=1` needs no VM.PowerMgmt (fakepve 0.5.0 demands it, as qemu-server's
rollback does from 9.1.10, commit 7ba9640b): pve-container src/PVE/API2/LXC/Snapshot.pm rollback checks only
VM.Snapshot or VM.Snapshot.Rollback and starts the container with `PVE::API2::LXC::Status->vm_start`, a
direct call that runs no permission check.

Permissions as PVE evaluates them: GET /cluster/status needs Sys.Audit on `/` itself; GET
/access/permissions?path=P answers the effective privileges on exactly P (grants propagate down
the tree), without `path` the same for `/`, the top-level paths and every path with a grant; GET
/cluster/options answers everything only with Sys.Audit on `/`, and `allowed-tags` always.

GET /nodes/{node}/tasks honours `source` (archive, the default: finished tasks; active: running
ones with status RUNNING; all), `typefilter`, `userfilter`, `statusfilter`, `errors`, `since`,
`until`, `vmid`, `start` and `limit`, and answers `total`, as pve-manager's PVE/API2/Tasks.pm.
"""

import argparse
import asyncio
import contextvars
import hashlib
import http
import inspect
import json
import os
import random
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

from aiohttp import web

from fakepve import FakePve, TaskError, __version__, settle, shapes
from fakepve import schema as pve_schema
from fakepve.certs import make_cert
from fakepve.model import PveError
from fakepve.routing import die, param_error, split_list
from fakepve.lxc import SIZE_UNITS, format_size
from fakepve.qemu import DRIVE_KEY, NET_MODELS, NEW_DISK, drives_of, is_cdrom, join_drive, split_drive, volume_ref, with_mac
from fakepve.lxc import NEW_DISK as CT_NEW_DISK, mount_type, parse_mount, print_mount, split_props, volume_owner
from fakepve.lxc import parse_size as parse_ct_size
from fakepve.server import SECRET_FORM, USER, ok, params

# stdout is the protocol channel: keep a handle on it and send stray prints to stderr.
PROTOCOL = sys.stdout
sys.stdout = sys.stderr

SCENARIO_KEYS = ('pools', 'host', 'port', 'user', 'password', 'nodes', 'storages', 'vms', 'cts', 'files', 'tokens', 'users',
                 'grants', 'version', 'time_scale', 'quorate', 'bridges', 'bridge_mtus', 'cluster_name', 'datacenter',
                 'standalone', 'node_memory', 'remote_files')
# FakeVm attributes set_vm (and add_vm) may change.
VM_ATTRS = ('shutdown_secs', 'start_secs', 'stop_secs', 'start_error', 'agent', 'agent_hangs', 'acpi', 'status',
            'qmpstatus', 'ha_state', 'stats', 'uptime')
# Model settings set_model may change.
MODEL_ATTRS = ('time_scale', 'lock_wait', 'ticket_ttl', 'shutdown_default_timeout', 'ha_delay', 'tfa', 'version',
               'release_version', 'quorate', 'max_requests', 'body_timeout', 'cluster_name')
DEFAULT_BRIDGES = ('vmbr0',)
# pve-cluster src/PVE/DataCenterConfig.pm: the Proxmox OUI, datacenter.cfg's default mac_prefix.
PROXMOX_OUI = 'BC:24:11'
STOP_TIMEOUT = 3.0
# pveproxy closes a kept-alive connection idle for this many real seconds: pve-http-server
# src/PVE/APIServer/AnyEvent.pm makes each client's AnyEvent::Handle with `timeout =>
# $self->{timeout}` (`$self->{timeout} = 5 if !$self->{timeout}`; pve-manager's pveproxy sets
# none), set again after each response, and its on_error disconnects. aiohttp's own default is
# 3630 s.
PVEPROXY_IDLE_SECS = 5

# pveproxy's forward timeout (PVE seconds), pve-http-server PVE/APIServer/AnyEvent.pm proxy_request.
PROXY_TIMEOUT = 30.0
# garble's replacement values: huge and negative numbers, odd strings.
GARBLE_NUMBERS = (2 ** 63, 1e300, -1, -2 ** 31)
GARBLE_STRINGS = ('', 'garbage', '\u0000', '\U0001f4a5', '-1', 'NaN', 'x' * 10240)
API_PREFIX = re.compile(r'^/api2/(?:json|extjs)(?=/|$)')
# pve-storage src/PVE/Storage.pm $VZTMPL_EXT_RE_1 (any case), as Plugin.pm parse_volname matches a
# vztmpl volume: `vztmpl/([^/]+$VZTMPL_EXT_RE_1)$`; .tar.bz2 from pve-storage 8.2.6 (PVE 8.3), a bare
# .tar from 9.0.15 (PVE 9.1).
VZTMPL_NAME = re.compile(r'^vztmpl/[^/]+\.(?:(tar)(?!\.)|tar\.(gz|xz|zst|bz2))$', re.I)
# LVM's default physical extent: lvcreate and lvresize round a volume up to whole extents.
LVM_EXTENT = 4 * 1024 ** 2
# pve-common src/PVE/CGroup.pm clamp_cpu_shares on cgroup v2 (the only mode of PVE 9, PVE 8's default).
CGROUP_V2_MAX_SHARES = 10000
# pve-ha-manager src/PVE/HA/Resources/PVECT.pm shutdown: `my $shutdown_timeout = $timeout // 60`.
HA_SHUTDOWN_TIMEOUT = 60
# download-url (pve-storage src/PVE/API2/Storage/Status.pm download_url, PVE 9.1): the checksum algorithms
# of `checksum-algorithm`, pve-storage Plugin.pm KNOWN_COMPRESSION_FORMATS (`compression`'s enum), and the
# file name checks on the normalised name: `m![^/]+$ISO_EXT_RE_0$!` (ISO_EXT_RE_0 = qr/\.(?:iso|img)/i),
# `m![^/]+$VZTMPL_EXT_RE_1$!` (the vztmpl names VZTMPL_NAME takes) and
# `m!${SAFE_CHAR_CLASS_RE}+$UPLOAD_IMPORT_EXT_RE_1$!` (SAFE_CHAR_CLASS_RE = [a-zA-Z0-9\-\.\+\=\_],
# UPLOAD_IMPORT_EXT_RE_1 = qr/\.(ova|qcow2|raw|vmdk)/, case-sensitive). None is anchored at the start.
DOWNLOAD_ALGORITHMS = ('md5', 'sha1', 'sha224', 'sha256', 'sha384', 'sha512')
KNOWN_COMPRESSION_FORMATS = ('gz', 'lzo', 'zst', 'bz2')
DOWNLOAD_ISO_NAME = re.compile(r'[^/]+\.(?:iso|img)\Z', re.I)
DOWNLOAD_VZTMPL_NAME = re.compile(r'[^/]+\.(?:(tar)|tar\.(gz|xz|zst|bz2))\Z', re.I)
DOWNLOAD_IMPORT_NAME = re.compile(r'[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)\Z')
DOWNLOAD_TEMPLATE = '/nodes/{node}/storage/{storage}/download-url'
# wget's exit statuses (wget(1) EXIT STATUS) as run_command reports them: 3 file I/O error, 4 network
# failure, 8 server issued an error response.
WGET_IO_ERROR, WGET_NETWORK_FAILURE, WGET_SERVER_ERROR = 3, 4, 8


OCI_TEMPLATE = '/nodes/{node}/storage/{storage}/oci-registry-pull'
# PVE 9.1's `env` and `entrypoint` patterns (pve-container src/PVE/LXC/Config.pm as 9.1 shipped it:
# `\x10`, not `\x0a`, so \x09-\x0f pass), in Python (`\w` in ASCII, as proxsync's checks take it).
CT_ENV = re.compile(r'(?:\w+=[^\x00-\x08\x10-\x1F\x7F]*)(?:\0\w+=[^\x00-\x08\x10-\x1F\x7F]*)*', re.ASCII)
CT_ENTRYPOINT = re.compile(r'[^\x00-\x08\x10-\x1F\x7F]+')
# pve-storage 9.1 src/PVE/API2/Storage/Status.pm oci_registry_pull's `reference` pattern, in Python.
OCI_REFERENCE = re.compile(
    r'(?:(?:[a-zA-Z\d]|[a-zA-Z\d][a-zA-Z\d-]*[a-zA-Z\d])(?:\.(?:[a-zA-Z\d]|[a-zA-Z\d][a-zA-Z\d-]*[a-zA-Z\d]))*'
    r'(?::\d+)?/)?[a-z\d]+(?:(?:[._]|__|[-]*)[a-z\d]+)*(?:/[a-z\d]+(?:(?:[._]|__|[-]*)[a-z\d]+)*)*'
    r':\w[\w.-]{0,127}', re.ASCII)


def normalize_content_filename(filename):
    """pve-storage src/PVE/Storage.pm normalize_content_filename: `chomp`, everything up to the last
    slash or backslash dropped, every character but [a-zA-Z0-9_.-] made `_`."""
    if filename.endswith('\n'):
        filename = filename[:-1]
    filename = re.sub(r'^.*[/\\]', '', filename)
    return re.sub(r'[^a-zA-Z0-9_.-]', '_', filename)


def encode_text(text):
    """pve-common src/PVE/Tools.pm encode_text (a task's worker id): uri_escape of the UTF-8 bytes with
    the unsafe set `^\x20-\x39\x3b-\x7e`, i.e. control and high-bit bytes and `:` as %XX."""
    return ''.join(chr(b) if 0x20 <= b <= 0x7e and b != 0x3a else '%{0:02X}'.format(b)
                   for b in text.encode('utf-8'))


def add_remote_file(pve, url, size=1048576, data=None, status=200):
    """Commands.remote_file, and the scenario's `remote_files`."""
    if not re.match(r'https?://', str(url)):
        raise BadArgs('url must start with http:// or https://')
    if data is not None:
        body = str(data).encode('utf-8')
    else:
        if int(size) < 0:
            raise BadArgs('size must not be negative')
        body = remote_bytes(str(url), int(size))
    pve.remote_files[str(url)] = {'data': body, 'status': int(status)}
    return {'url': str(url), 'size': len(body), 'sha256': hashlib.sha256(body).hexdigest(),
            'sha512': hashlib.sha512(body).hexdigest()}


def remote_bytes(url, size):
    """remote_file's stand-in content: `size` bytes of repeated sha256(url + counter), the same for a url
    every run."""
    out = bytearray()
    counter = 0
    seed = url.encode('utf-8')
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, 'big')).digest()
        counter += 1
    return bytes(out[:size])


def file_digests(data=None, zeros=0):
    """{algorithm: lower-case hex digest} of data, or of `zeros` NUL bytes (hashed a MiB at a time)."""
    hashes = dict((name, hashlib.new(name)) for name in DOWNLOAD_ALGORITHMS)
    if data is not None:
        for h in hashes.values():
            h.update(data)
    else:
        chunk = bytes(min(zeros, 1024 ** 2))
        left = zeros
        while left > 0:
            piece = chunk if left >= len(chunk) else chunk[:left]
            for h in hashes.values():
                h.update(piece)
            left -= len(piece)
    return dict((name, h.hexdigest()) for name, h in hashes.items())


class BadArgs(Exception):
    """A command's arguments are wrong."""


def garble_value(rng, old, kind=None):
    """A replacement for old of this kind ('null', 'number', 'string'; None: any), never old itself."""
    for _ in range(20):
        kind = kind or rng.choice(('null', 'number', 'string'))
        new = None if kind == 'null' else rng.choice(GARBLE_NUMBERS if kind == 'number' else GARBLE_STRINGS)
        if not (type(new) is type(old) and new == old):
            return new
        kind = None
    return new


def garble_once(rng, data):
    """data (a fresh copy, parsed from the answer) with one mutation at a random place: a depth among
    those data has, then one of the dict keys or list indexes at that depth (0: data's own), then null,
    a number, an odd string or a drop of the key or item. A scalar or empty data is replaced whole."""
    places = {}
    stack = [((), data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            children = list(node.items())
        elif isinstance(node, list):
            children = list(enumerate(node))
        else:
            continue
        for key, child in children:
            places.setdefault(len(path), []).append(path + (key,))
            stack.append((path + (key,), child))
    if not places:
        return garble_value(rng, data)
    where = rng.choice(places[rng.choice(sorted(places))])
    container = data
    for key in where[:-1]:
        container = container[key]
    kind = rng.choice(('null', 'number', 'string', 'drop'))
    if kind == 'drop':
        del container[where[-1]]  # the key from its dict, the item from its list
    else:
        container[where[-1]] = garble_value(rng, container[where[-1]], kind)
    return data


def jsonable(value):
    """Whatever the model holds, as something json.dumps takes."""
    if isinstance(value, dict):
        return dict((str(k), jsonable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class GuestList(list):
    """The fake's VMs in their order, indexed by VMID. fakepve 0.5.0 finds a VM by walking the list
    (Model.vm), once per request: at 5,000 guests a site the walk was 11 % of fakepve's CPU in the
    50,000-spec bench (py-spy), time the benchmarks then charged to proxsync. fakepve and the harness
    change the list only by append and remove; any other change is refused, so the index cannot go
    stale. Like the walk, a VMID listed twice finds the first."""

    def __init__(self, items=()):
        super().__init__(items)
        self._first = {}
        for vm in self:
            self._first.setdefault(vm.vmid, vm)

    def append(self, vm):
        super().append(vm)
        self._first.setdefault(vm.vmid, vm)

    def remove(self, vm):
        super().remove(vm)
        if self._first.get(vm.vmid) is vm:
            del self._first[vm.vmid]
            other = next((v for v in self if v.vmid == vm.vmid), None)
            if other is not None:
                self._first[vm.vmid] = other

    def first(self, vmid):
        """The first VM with this VMID (an int), or None."""
        return self._first.get(vmid)

    def _refused(self, *args, **kwargs):
        raise TypeError('GuestList changes only by append and remove (its VMID index)')

    insert = extend = pop = clear = sort = reverse = __setitem__ = __delitem__ = __iadd__ = __imul__ = _refused


# Privileges fakepve's require() lets pass in the request being handled (see HarnessPve.require).
_UNCHECKED_PRIVS = contextvars.ContextVar('unchecked_privs', default=())


class HarnessPve(FakePve):
    """FakePve plus what the harness needs: configurable bridges and a request log with query strings."""

    def require(self, user, path, priv):
        """fakepve's permission check, but for the privileges PVE does not check in this request."""
        if priv in _UNCHECKED_PRIVS.get():
            return
        super().require(user, path, priv)

    async def _lxc_rollback(self, user, v):
        """A container's rollback as pve-container src/PVE/API2/LXC/Snapshot.pm rollback does it: only
        the route's VM.Snapshot or VM.Snapshot.Rollback, even with start=1, whose
        `PVE::API2::LXC::Status->vm_start` is a direct call that checks nothing (fakepve 0.5.0 demands
        VM.PowerMgmt, as qemu-server's rollback does from 9.1.10)."""
        token = _UNCHECKED_PRIVS.set(('VM.PowerMgmt',))
        try:
            return await super()._lxc_rollback(user, v)
        finally:
            _UNCHECKED_PRIVS.reset(token)

    async def _agent_call(self, match, values):
        """An agent call, after qemu-server's assert_agent_available (src/PVE/QemuServer/Agent.pm):
        no `agent` in the config, a VM not running, an agent that does not answer its 3 s guest-ping
        (qga_check_running), each in PVE's words, before fakepve's answer."""
        vm = self.find(values['node'], values['vmid'])
        if vm.config.get('agent') is None:
            raise PveError(500, 'No QEMU guest agent configured')
        if vm.status != 'running':
            raise PveError(500, 'VM {0} is not running'.format(vm.vmid))
        if vm.agent is None:
            raise PveError(500, 'QEMU guest agent is not running')
        if vm.agent_hangs:
            await self.pause(3)
            raise PveError(500, 'QEMU guest agent is not running')
        return await super()._agent_call(match, values)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.vms = GuestList(self.vms)
        # node -> bridge names GET /nodes/{node}/network lists (nodes not listed get DEFAULT_BRIDGES).
        self.bridges = {}
        self.default_bridges = list(DEFAULT_BRIDGES)
        # Parallel to self.requests: (sequence number, query string, redacted).
        self.request_meta = []
        self.request_seq = 0
        # create_timing: PVE seconds a qmcreate / qmclone task takes, and the delay of its answer.
        self.create_secs = 0.0
        self.clone_secs = 0.0
        self.answer_delay = 0.0
        # vmid -> the name a VM gets when its create/clone task ends (it has none until then).
        self.unborn = {}
        # new_vm_timing: PVE seconds the start of a VM made by a create or clone takes.
        self.new_vm_start_secs = 0.0
        # ct_timing: PVE seconds the start of a container made by a create takes.
        self.new_ct_start_secs = 0.0
        # clone_contention: clones one node's storage takes at once (None: no limit), how long a
        # further one waits for the storage lock, the clones cloning per node, and the storage
        # of each clone in flight (newid -> storage id, for the lock file's name).
        self.clone_limit = None
        self.clone_lock_wait = 10.0
        self.cloning = {}
        self.clone_storage = {}
        # create_timing's listed_name: the listing names a VM in its window `VM <vmid>`.
        self.window_listed_name = False
        # lose_answer rules, (METHOD, suffix) -> {'status', 'message', 'times'}; the answers lost.
        self.lost_rules = {}
        self.lost = []
        # garble: the share of successful answers garbled (0: off), the path substrings it garbles
        # (None: every path), the most mutations per answer, its own random generator (apart from
        # fakepve's, which flaky_network and slow_network draw from) and its counts.
        self.garble_rate = 0.0
        self.garble_paths = None
        self.garble_max = 3
        self.garble_random = random.Random(0)
        self.garble_counts = {'answers': 0, 'garbled': 0, 'by_path': {}}
        # UPIDs of qmshutdown tasks a stop with overrule-shutdown aborted.
        self.overruled_shutdowns = set()
        # vmid -> HA resource config ({state, group, max_restart, max_relocate, comment}).
        self.ha_resources = {}
        # HA groups (PVE 8): id -> {nodes: {node: priority}, restricted, nofailback, comment}.
        self.ha_groups = {}
        # HA rules (PVE 9): id -> {type, resources: [sid], nodes: {node: priority}, strict, disable,
        # comment, order}.
        self.ha_rules = {}
        # vmid -> how often the HA stack stopped the VM hard (its guest did not power off in time).
        self.hard_stops = {}
        # migrate_timing: PVE seconds a qmigrate task holds the VM's `migrate` lock.
        self.migrate_secs = 0.0
        # datacenter.cfg as GET /cluster/options answers it (`user-tag-access`, `registered-tags`, ...).
        self.datacenter = {}
        # add_vm_before rules, in order: (METHOD, suffix, add_vm arguments).
        self.before_rules = []
        # set_vm_before rules, in order: (METHOD, suffix, vmid, set_vm attributes).
        self.set_before_rules = []
        # bridge -> its MTU where /etc/network/interfaces sets one (the listing's `mtu`); else 1500.
        self.bridge_mtus = {}
        # task_polls: GETs under /nodes/{node}/tasks in flight now, the most at once, and counts.
        self.task_polls = {'in_flight': 0, 'max_in_flight': 0, 'status': 0, 'listings': 0}
        # connections: the (address, port) of each client connection a request came on.
        self.connections_seen = set()
        # standalone: a node that is not in a cluster (no corosync): /cluster/status as get_status answers it then.
        self.standalone = False
        # The cluster's root CA, /etc/pve/pve-root-ca.pem, as (PEM text, DER bytes): the certificate the fake serves.
        self.root_ca = None
        # ct_timing's create_tail: PVE seconds a vzcreate goes on after it wrote the new container's
        # whole config without its `create` lock (pve-container API2/LXC.pm create_vm writes the
        # config after the OS detection, then sets the container up), and the containers in a
        # vzcreate now.
        self.ct_create_tail_secs = 0.0
        self.ct_creating = set()
        # volume id -> its real size in bytes (a container volume's, which its config's size= may not
        # say: pve-container writes the size asked for, LVM makes whole extents).
        self.volume_sizes = {}
        # node -> {'maxmem', 'mem'}: its memory as pvestatd reports it (mem: in use besides the running
        # guests, whose memory is added); unset: fakepve's 8 GiB and 2 GiB.
        self.node_memory = {}
        # destroy_timing: PVE seconds a VM's qmdestroy takes before it removes the VM.
        self.vm_destroy_secs = 0.0
        # template_timing: PVE seconds a qmtemplate task takes (0: fakepve's, at once), and the
        # VMs whose qmtemplate worker holds their config lock now (vmid -> holder).
        self.template_secs = 0.0
        self.templating = {}
        self.clones_while_templating = []
        # download-url: the fake internet (url -> {'data': bytes, 'status': HTTP status}, see remote_file),
        # PVE seconds a download takes (download_timing), the requests received (downloads) and the
        # digests of the bytes of each file a download stored ((storage, volname) -> (size, digests)).
        self.remote_files = {}
        self.download_secs = 0.0
        self.download_requests = []
        # oci-registry-pull (PVE 9.1): the fake registry (reference -> size, see oci_image), whether
        # skopeo is installed, and the requests received (oci_pulls). A pull takes download_timing's secs.
        self.oci_images = {}
        # reference -> its image config (oci_image), (storage, volname) -> the reference a pull
        # stored there, and vmid -> the image config a running vzcreate applies at its end.
        self.oci_configs = {}
        self.oci_archives = {}
        self.oci_creating = {}
        self.skopeo = True
        self.oci_requests = []
        self.downloaded = {}
        # fakepve 0.5.0's vendored schema has `compression` with `enum: null` (the API dump lost Status.pm's
        # `enum => $PVE::Storage::Plugin::KNOWN_COMPRESSION_FORMATS`), on which its validator crashes
        # (500 `internal error`): give it PVE's enum, so a bad value is the schema's 400.
        compression = pve_schema.load().paths[DOWNLOAD_TEMPLATE]['POST']['parameters']['properties']['compression']
        if compression.get('enum') is None:
            compression['enum'] = list(KNOWN_COMPRESSION_FORMATS)

    def _maxdisk(self, ct):
        """A running container's `maxdisk` as pve-container's vmstatus lists it: its root file system's
        `df` total (`PVE::Tools::df("/proc/$pid/root/")`), a few percent below the volume's size (ext4's
        own metadata); a stopped one's, the size in its config (fakepve 0.5.0 lists that always)."""
        size = super()._maxdisk(ct)
        return size * 97 // 100 if ct.status == 'running' else size

    async def _lxc_migrate(self, user, v):
        """pve-container API2/LXC.pm migrate_vm of an HA-managed container: after the same checks,
        an `hamigrate` task that only hands `ha-manager migrate ct:N TARGET` to the HA manager and
        ends (the request's `timeout` goes nowhere); ha_delay PVE seconds later the LRM relocates it
        (pve-ha-manager PVECT.pm migrate: a clean shutdown within HA's own 60 s, an offline
        migration holding lock `migrate`, a start on the target while its state is `started`; a
        container not down in time stays where it is, running). fakepve 0.5.0 moves it inside the
        task."""
        ct = self._here(v)
        if ct is None or not ct.ha_managed:
            return await super()._lxc_migrate(user, v)
        target = v['target']
        if target == v['node']:
            raise PveError(400, 'Parameter verification failed.', {'target': 'target is local node.'})
        self.need_quorum()
        if target not in self.nodes:
            raise PveError(500, "no such cluster node '{0}'".format(target))
        if ct.status == 'running' and not v.get('online') and not v.get('restart'):
            raise PveError(500, "can't migrate running container without --online or --restart")

        async def relocate():
            await self.pause(self.ha_delay)
            # PVECT.pm migrate: `$class->shutdown($haenv, $id)`, no timeout: HA's own 60 s, clean, whatever
            # `timeout` the request named. A container still up then makes migrate_vm die `can't migrate
            # running container without --online or --restart`; the LRM answers ERROR and the CRM puts
            # the service back to `started` where it is (Manager.pm next_state_migrate_relocate).
            if ct.status == 'running' and ct.shutdown_secs > HA_SHUTDOWN_TIMEOUT:
                return
            ct.status, ct.pid = 'stopped', None
            ct.lock = 'migrate'
            try:
                await self.pause(self.ct_secs['migrate'])
                ct.node = target
            finally:
                ct.lock = None
            if ct.ha_state == 'started':
                self._apply(ct)
                ct.status, ct.started_at, ct.pid = 'running', time.time(), next(self._ct_pids)

        async def ha():
            asyncio.ensure_future(relocate())
            return 'Requesting HA migration for CT {0} to node {1}'.format(ct.vmid, target)
        return await self._ct_task(ct, 'hamigrate', user, ha, lock=False)

    async def _lxc_create(self, user, v):
        if not v.get('restore'):
            self._check_vztmpl_name(v.get('ostemplate', ''))
        self._ct_checks(v)
        # Noted before fakepve's create starts the task; its body's first ceph_io comes right
        # after it wrote the unlocked config.
        if not v.get('restore'):
            self.ct_creating.add(int(v['vmid']))
            sid, _, volname = str(v.get('ostemplate', '')).partition(':')
            reference = self.oci_archives.get((sid, volname))
            if reference is not None:
                self.oci_creating[int(v['vmid'])] = self.oci_configs.get(reference, {})
        try:
            return await super()._lxc_create(user, v)
        except Exception:
            self.ct_creating.discard(int(v['vmid']))
            raise

    # ---- containers' volumes, weights, NICs and templates as pve-container and pve-storage take
    # them (fakepve 0.5.0 allocates `GB * 1024**3` bytes, resizes by the config's size=, keeps any
    # cpuunits, takes any MTU and any vztmpl name).

    def _real_size(self, sid, size):
        """The size a volume of `size` bytes has on storage sid: whole 4 MiB extents on LVM (pve-storage
        LVMPlugin.pm / LvmThinPlugin.pm alloc_image `lvcreate ... ${size}k`, which LVM rounds up)."""
        if self.storages.get(sid, {}).get('type') in ('lvm', 'lvmthin'):
            return -(-size // LVM_EXTENT) * LVM_EXTENT
        return size

    def _realise(self, vmid, key, value, taken, default_storage=None):
        """pve-container src/PVE/LXC.pm create_disks: a new volume `STORAGE:GB` is `int($size_gb * 1024)
        * 1024` KiB, whole MiB with the rest cut off, and that size is written into the config
        (`$mountpoint->{size} = $size_kb * 1024`); the volume itself may be larger (_real_size)."""
        mount = parse_mount(value)
        found = CT_NEW_DISK.match(mount.get('volume', ''))
        if not found:
            return super()._realise(vmid, key, value, taken, default_storage)
        sid, gb = found.group(1), float(found.group(2))
        mount['volume'] = self._allocate(vmid, sid, taken)
        size = int(gb * 1024) * 1024 * 1024
        mount['size'] = format_size(size) if size else '0'
        self.volume_sizes[mount['volume']] = self._real_size(sid, size)
        return print_mount(mount, key == 'rootfs')

    def _ct_volume_size(self, mount):
        """volume_size_info of a container's volume: its real size (the config's when the harness did
        not make it)."""
        real = self.volume_sizes.get(mount.get('volume'))
        if real is not None:
            return real
        return parse_ct_size(mount.get('size', '')) or 4 * 1024 ** 3

    async def _lxc_resize(self, user, v):
        """pve-container src/PVE/API2/LXC.pm resize_vm: `volume_size_info` of the volume, not the config's
        size=, is compared with the request (`unable to shrink disk size`, `disk is already at specified
        size`, before the task and again in it); the config then says the size asked for
        (`$mp->{size} = $newsize`), the volume has it in whole extents on LVM."""
        ct = self._find_ct(v['node'], v['vmid'])
        disk = v['disk']
        text = str(v['size'])
        extend = text.startswith('+')
        request = parse_ct_size(text.lstrip('+'))
        if request is None:
            raise PveError(500, 'invalid size string')
        if ct.lock:
            raise PveError(500, 'CT is locked ({0})'.format(ct.lock))
        self._check_modify_perm(user, ct.vmid, None, ct.config, {'disk': disk, 'size': text}, [],
                                ct.config.get('unprivileged'))
        if v.get('digest') and v['digest'] != ct.digest():
            raise PveError(500, 'detected modified configuration - file changed by other user? Try again.')

        def plan():
            value = ct.config.get(disk)
            if value is None:
                raise PveError(500, 'format error\nvolume: property is missing and it is not optional')
            mount = parse_mount(value)
            if mount_type(mount['volume']) != 'volume':
                raise PveError(500, "unable to parse volume ID '{0}'".format(mount['volume']))
            owner = volume_owner(mount['volume'])
            if owner not in (None, ct.vmid):
                raise PveError(500, "can't resize mount point owned by another container ({0})".format(owner))
            sid = mount['volume'].split(':')[0]
            self.require(user, '/storage/' + sid, 'Datastore.AllocateSpace')
            size = self._ct_volume_size(mount)
            new = size + request if extend else request
            if new < size:
                raise PveError(500, 'unable to shrink disk size')
            if new == size:
                raise PveError(500, 'disk is already at specified size')
            return mount, sid, new
        plan()

        async def body():
            try:
                mount, sid, new = plan()
            except PveError as e:
                raise TaskError(e.message) from e
            await self.ceph_io(ct, [disk])
            await self.pause(self.ct_secs['resize'])
            mount['size'] = format_size(new)
            self.volume_sizes[mount['volume']] = self._real_size(sid, new)
            ct.config[disk] = print_mount(mount, disk == 'rootfs')
        return await self._ct_task(ct, 'resize', user, body)

    def _ct_checks(self, values):
        """What pve-container's create and update do to their parameters before anything is written:
        `cpuunits` clamped (API2/LXC.pm create_vm, API2/LXC/Config.pm update_vm:
        `PVE::CGroup::clamp_cpu_shares`, at most 10000 on cgroup v2), and each NIC's MTU checked against
        its bridge's (LXC/Config.pm update_pct_config: `die "$opt: MTU size '$mtu' is bigger than bridge
        MTU '$bridge_mtu'\n"`, the bridge's from read_bridge_mtu: here its set MTU, else 1500)."""
        if values.get('cpuunits') not in (None, ''):
            values['cpuunits'] = min(int(values['cpuunits']), CGROUP_V2_MAX_SHARES)
        # PVE 9.1's schema patterns of `env` and `entrypoint` (fakepve skips Perl `(?^:...)`
        # patterns): a 400 from the API before anything is written.
        for key, pattern in (('env', CT_ENV), ('entrypoint', CT_ENTRYPOINT)):
            if values.get(key) not in (None, '') and not pattern.fullmatch(str(values[key])):
                raise param_error(**{key: 'value does not match the regex pattern'})
        for key in sorted(k for k in values if re.fullmatch(r'net\d+', k)):
            props = split_props(values[key])[1]
            if props.get('mtu'):
                mtu, bridge_mtu = int(props['mtu']), int(self.bridge_mtus.get(props.get('bridge'), 1500))
                if mtu > bridge_mtu:
                    raise PveError(500, "{0}: MTU size '{1}' is bigger than bridge MTU '{2}'".format(
                        key, mtu, bridge_mtu))

    def _check_vztmpl_name(self, ostemplate):
        """pve-storage Plugin.pm parse_volname (from create_vm's check_volume_access): a vztmpl volume is
        named `NAME.tar.{gz,xz,zst}`, `.tar.bz2` from PVE 8.3 and a bare `.tar` from PVE 9.1, any case;
        anything else dies `unable to parse directory volume name 'vztmpl/NAME'`."""
        sid, colon, volname = str(ostemplate).partition(':')
        if not colon or not volname.startswith('vztmpl/'):
            return
        m = VZTMPL_NAME.match(volname)
        version = self._version_tuple(self.version)
        ok = m is not None and not (
            (m.group(2) or '').lower() == 'bz2' and version < (8, 3, 0)
            or m.group(1) is not None and version < (9, 1, 0))
        if not ok:
            raise PveError(500, "unable to parse directory volume name '{0}'".format(volname))

    async def _lxc_config_put(self, user, v):
        self._ct_checks(v)
        return await super()._lxc_config_put(user, v)

    async def _ct_powerdown(self, ct, timeout, force):
        """pve-container src/PVE/LXC.pm vm_stop with a clean shutdown: a container that does not stop
        within the timeout is killed when forced, counted in hard_stops (as the HA stack's hard stops of a
        VM are): a shutdown with forceStop, and every reboot (vm_reboot: `vm_stop($vmid, 0, $timeout, 1);
        # kill if timeout exceeds`; fakepve's vzreboot forces it)."""
        if force and ct.shutdown_secs > timeout:
            self.hard_stops[ct.vmid] = self.hard_stops.get(ct.vmid, 0) + 1
        await super()._ct_powerdown(ct, timeout, force)

    async def ceph_io(self, vm, keys=None):
        await super().ceph_io(vm, keys)
        if getattr(vm, 'vmid', None) in self.ct_creating and hasattr(vm, 'guest') and vm.guest.startswith('lxc/'):
            self.ct_creating.discard(vm.vmid)
            await self.pause(self.ct_create_tail_secs)

    def _record(self, request, body):
        super()._record(request, body)
        query = SECRET_FORM.sub(rb'\g<1>***', request.query_string.encode()).decode('utf-8', 'replace')
        self.request_meta.append((self.request_seq, query))
        self.request_seq += 1
        excess = len(self.request_meta) - len(self.requests)
        if excess > 0:
            del self.request_meta[:excess]

    # ------------------------------------------------------------ task listing

    TASK_GET = re.compile(r'^/api2/(?:json|extjs)/nodes/[^/]+/tasks(/[^/]+/(status|log))?/?$')

    async def start(self, certfile, keyfile):
        """fakepve's start, with pveproxy's idle timeout on kept-alive connections
        (PVEPROXY_IDLE_SECS)."""
        import ssl
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(certfile, keyfile)
        if self.network.get('seed') is not None:
            self._random.seed(self.network['seed'])
        self.runner = web.AppRunner(self._build_app(), keepalive_timeout=PVEPROXY_IDLE_SECS)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port, ssl_context=ctx).start()
        if not self.port:
            self.port = self.runner.addresses[0][1]

    @web.middleware
    async def _middleware(self, request, handler):
        """fakepve's middleware, counting the task reads in flight (task_polls): what a client's
        task polling asks of a site at once, latency included; and the connections requests
        came on (connections)."""
        peer = request.transport.get_extra_info('peername') if request.transport else None
        if peer:
            self.connections_seen.add(tuple(peer[:2]))
        match = self.TASK_GET.match(request.path) if request.method == 'GET' else None
        if match is None:
            return await super()._middleware(request, handler)
        polls = self.task_polls
        polls['in_flight'] += 1
        polls['max_in_flight'] = max(polls['max_in_flight'], polls['in_flight'])
        try:
            return await super()._middleware(request, handler)
        finally:
            polls['in_flight'] -= 1
            if match.group(2) == 'status':
                polls['status'] += 1
            elif match.group(1) is None:
                polls['listings'] += 1

    # ---- config updates, as qemu-server's update_vm_api and vmconfig_hotplug_pending make them.
    # fakepve 0.5.0 stores an update's values as sent and queues every change of a running VM
    # but a few options. PVE (PVE/API2/Qemu.pm, PVE/QemuServer.pm) also: gives a NIC sent without
    # a MAC a fresh one (parse_net in 'add macaddr'); allocates a new disk `S:N` at once
    # (create_disks); detaches a deleted disk to `unusedN` rather than dropping its volume
    # (vmconfig_delete_or_detach_drive without force); and applies at once on a running VM what
    # its `hotplug` features allow (default network,disk,usb), leaving the rest pending.

    @staticmethod
    def _hotplug_features(config):
        value = str(config.get('hotplug', '1'))
        if value == '1':
            return {'network', 'disk', 'usb'}
        if value == '0':
            return set()
        return set(x for x in value.split(',') if x)

    @staticmethod
    def _net_needs_replug(old, new):
        """vmconfig_update_net: model, MAC, queues or MTU changes replug the NIC (network hotplug)."""
        def nic(value):
            props = split_props(value)[1]
            model = next((k for k in props if k in NET_MODELS), props.get('model'))
            mac = props.get(model) if model in props else props.get('macaddr')
            return model, (mac or '').upper(), props.get('queues'), props.get('mtu')
        return nic(old) != nic(new)

    @staticmethod
    def _agent_applies_live(old, new):
        """vmconfig_update_agent: with an agent set, only fstrim_cloned_disks changes live."""
        def rest(value):
            return sorted(x for x in str(value or '').split(',') if not x.startswith('fstrim_cloned_disks'))
        return old is not None and rest(old) == rest(new)

    def _applies_live(self, vm, key, value, features):
        """vmconfig_hotplug_pending for one pending change of a running VM."""
        old = vm.config.get(key)
        if key == 'balloon':
            return (old is None or str(old) != '0') == (str(value) != '0')
        if re.fullmatch(r'net\d+', key):
            if old is None:
                return 'network' in features
            return 'network' in features or not self._net_needs_replug(old, value)
        if key in ('efidisk0', 'tpmstate0'):
            return False
        if DRIVE_KEY.match(key):
            return old is None and 'disk' in features and not re.match(r'(ide|sata)\d', key)
        if key == 'memory':
            return 'memory' in features and str(vm.config.get('numa', '0')) == '1'
        if key == 'vcpus':
            return 'cpu' in features
        return False

    def _deletes_live(self, key, features):
        if re.fullmatch(r'net\d+', key):
            return 'network' in features
        if DRIVE_KEY.match(key):
            return 'disk' in features and not re.match(r'(ide|sata|efidisk|tpmstate)\d', key)
        return False

    def _detach(self, vm, volume_value):
        """vmconfig_register_unused_drive: the volume stays, as the first free unusedN."""
        volume, props = split_drive(volume_value)
        if is_cdrom(volume, props) or volume.endswith(':cloudinit') or 'cloudinit' in volume:
            return
        n = 0
        while 'unused{0}'.format(n) in vm.config:
            n += 1
        vm.config['unused{0}'.format(n)] = volume

    def _deallocate(self, volume_value):
        """try_deallocate_drive: the volume is freed on its storage."""
        volume, _props = split_drive(volume_value)
        sid, name = volume_ref(volume)
        if sid is not None:
            (self.storages.get(sid) or {}).get('volumes', {}).pop(name, None)

    @staticmethod
    def _protected(vm):
        """PVE::AbstractConfig::check_protection's test: `protection` set in the current config
        (Perl truth: not absent, empty or 0)."""
        return str(vm.config.get('protection', '') or '') not in ('', '0')

    def _check_drive_protection(self, vm, deletes):
        """update_vm_api's `delete` loop (qemu-server PVE/API2/Qemu.pm) runs before any change
        is written and checks each drive and unusedN key that is set (now or pending) with
        PVE::AbstractConfig::check_protection against the config as it is: the whole update dies
        with `can't remove drive 'scsi1' - protection mode enabled` (`can't remove unused disk
        'VOLUME' - ...` for unusedN), new disks included, and a `protection=0` in the same update
        is not applied yet. fakepve 0.5.0 checks protection only on the VM's destroy."""
        if not self._protected(vm):
            return
        for key in deletes:
            value = vm.config.get(key, vm.pending.get(key))
            if value is None:
                continue  # PVE warns "cannot delete 'KEY' - not set" and goes on
            if re.fullmatch(r'unused\d+', key):
                raise PveError(500, "can't remove unused disk '{0}' - protection mode enabled".format(
                    split_drive(str(value))[0]))
            if DRIVE_KEY.match(key):
                raise PveError(500, "can't remove drive '{0}' - protection mode enabled".format(key))

    async def _apply_config(self, vm, user, p):
        p = dict(p)
        digest = p.get('digest')
        if digest and digest != vm.digest():
            raise PveError(500, 'checksum mismatch (file change by other user?)')
        self._check_lock(vm)
        self._check_drive_protection(vm, [k for k in str(p.get('delete', '') or '').split(',') if k])
        running = vm.status == 'running'
        features = self._hotplug_features(vm.config)
        self._pin_on_ostype(vm, p)
        for key in list(p):
            if re.fullmatch(r'net\d+', key):
                p[key] = with_mac(p[key])
            elif DRIVE_KEY.match(key) and NEW_DISK.match(split_drive(str(p[key]))[0]):
                self._qm_check_drive(user, vm.vmid, None, key, str(p[key]), None)
                p[key], _made = self._qm_new_drive(vm.vmid, key, str(p[key]), None)
        # update_vm_api's `force` (not a config key): a deleted disk's volume is deallocated
        # (vmconfig_delete_or_detach_drive with $force -> try_deallocate_drive), not kept.
        force = str(p.pop('force', '0')).lower() in ('1', 'true')
        deletes = [k for k in str(p.get('delete', '') or '').split(',') if k]
        detached = {k: vm.config[k] for k in deletes if DRIVE_KEY.match(k) and k in vm.config}
        live_deletes = [k for k in deletes if not running or self._deletes_live(k, features)]
        agent_before = vm.config.get('agent')
        await super()._apply_config(vm, user, p)
        if running:
            # fakepve applies `agent` at once; PVE only when vmconfig_update_agent allows it.
            if 'agent' in p and not self._agent_applies_live(agent_before, p['agent']):
                vm.pending['agent'] = p['agent']
                if agent_before is None:
                    vm.config.pop('agent', None)
                else:
                    vm.config['agent'] = agent_before
            for key in [k for k, v in list(vm.pending.items()) if v is not None and k in p]:
                if self._applies_live(vm, key, vm.pending[key], features):
                    vm.config[key] = vm.pending.pop(key)
            for key in live_deletes:
                if key in vm.pending and vm.pending[key] is None:
                    del vm.pending[key]
                    vm.config.pop(key, None)
        for key in live_deletes:
            if key in detached:
                if force:
                    self._deallocate(detached[key])
                else:
                    self._detach(vm, detached[key])

    @staticmethod
    def _status_type(status):
        """PVE::UPID::normalize_status_type (pve-common src/PVE/UPID.pm)."""
        if not status:
            return 'unknown'
        if status == 'OK':
            return 'ok'
        if status.startswith('WARNINGS: ') and status[len('WARNINGS: '):].isdigit():
            return 'warning'
        if status == 'unexpected status':
            return 'unknown'
        return 'error'

    async def _task_list(self, request):
        """GET /nodes/{node}/tasks as pve-manager PVE/API2/Tasks.pm `node_tasks` answers it.

        source 'active' reads /var/log/pve/tasks/active: the running tasks, each given
        `$task->{status} = 'RUNNING' if !$task->{status}`, their user left as in the UPID (a
        token's tasks show user 'user@realm!token', no tokenid). 'archive' (the default) reads
        the index of FINISHED tasks, newest first, status = the exit status ('OK', the error, or
        'WARNINGS: n'), user split into user and tokenid. 'all' is active then archive. Tasks
        finished here count as archived at once (PVE lists a just-finished, not yet archived task
        under active with its exit status for a moment). `start`/`limit` count over both parts;
        `total` is the number of matching tasks.
        """
        node = request.match_info['node']
        user = request[USER]
        p = self._verify(request, await params(request))
        source = p.get('source') or 'archive'
        start, limit = int(p.get('start') or 0), int(p.get('limit', 50))
        typefilter, userfilter = p.get('typefilter'), p.get('userfilter')
        vmid, since, until = p.get('vmid'), p.get('since'), p.get('until')
        wanted = {'ok': True, 'warning': True, 'error': True, 'unknown': True}
        errors_only = str(p.get('errors', 0)).lower() in ('1', 'true')
        if p.get('statusfilter') is not None and not errors_only:
            wanted = dict.fromkeys(wanted, False)
            for item in re.split(r'[\s,;]+', str(p['statusfilter'])):
                if item:
                    wanted[item.lower()] = True
        elif errors_only:
            wanted['ok'] = False
        audit = self.allowed(user, '/nodes/' + node, 'Sys.Audit')
        count = 0
        out = []

        def keep(view):
            # $filter_task: returns 1 (skip) or 0 (keep), counting every match for `total`.
            nonlocal count, limit
            if userfilter and userfilter.lower() not in view['user'].lower():
                return False
            # $check_task_user: a token sees its own tasks, a user its own and (archived) its tokens'.
            full = view['user'] + '!' + view['tokenid'] if view.get('tokenid') else view['user']
            if not (audit or user in (full, view['user'])):
                return False
            if typefilter and view['type'] != typefilter:
                return False
            if vmid and (not view.get('id') or view['id'] != str(vmid)):
                return False
            if since is not None and view['starttime'] < int(since):
                return False
            if until is not None and view['starttime'] > int(until):
                return False
            if not wanted.get(self._status_type(view.get('status'))):
                return False
            count += 1
            if count - 1 < start or limit <= 0:
                return False
            limit -= 1
            return True

        mine = [t for t in self.tasklog if t['node'] == node]
        if source in ('active', 'all'):
            for task in sorted((t for t in mine if t['status'] == 'running'), key=lambda t: -t['starttime']):
                view = dict((k, v) for k, v in task.items() if k not in ('log', 'status', 'exitstatus', 'endtime'))
                if keep(view):
                    view['status'] = 'RUNNING'
                    out.append(view)
        if source != 'active':
            done = [(t.get('endtime') or 0, i, t) for i, t in enumerate(mine) if t['status'] != 'running']
            for _end, _i, task in sorted(done, key=lambda e: (-e[0], -e[1])):
                view = dict((k, v) for k, v in task.items() if k not in ('log', 'status', 'exitstatus'))
                view['status'] = task.get('exitstatus') or 'unexpected status'
                if '!' in view['user']:
                    view['user'], _, view['tokenid'] = view['user'].partition('!')
                if keep(view):
                    out.append(view)
        return web.json_response({'data': out, 'total': count})

    async def _task_log(self, request):
        """GET .../tasks/{upid}/log as pve-manager PVE/API2/Tasks.pm read_task_log: `my ($count,
        $lines) = PVE::Tools::dump_logfile($filename, $start, $limit);
        $rpcenv->set_result_attrib('total', $count);` (`limit` 0 reads to the end). fakepve 0.5.0
        sends no `total`."""
        p = self._verify(request, await params(request))
        lines = self._get_task(request)['log']
        start = int(p.get('start') or 0)
        limit = int(p['limit']) if p.get('limit') is not None else 50
        numbered = [{'n': n + 1, 't': t} for n, t in enumerate(lines)]
        page = numbered[start:] if limit == 0 else numbered[start:start + limit]
        return web.json_response({'data': page, 'total': len(lines)})

    # ------------------------------------------------------- create and clone timing

    async def task(self, node, ttype, tid, user, body, vm=None, lock=True, log=()):
        """fakepve's task(), plus create_timing's lock window for qmcreate and qmclone, and
        destroy_timing's qmdestroy."""
        if ttype == 'qmdestroy' and vm is not None and self.vm_destroy_secs:
            destroy, secs = body, self.vm_destroy_secs

            async def slow_destroy():
                await self.pause(secs)
                return await destroy()
            return await super().task(node, ttype, tid, user, slow_destroy, vm=vm, lock=lock, log=log)
        if ttype == 'vzcreate' and vm is not None:
            vm.start_secs = self.new_ct_start_secs
            image = self.oci_creating.pop(vm.vmid, None)
            if image is not None:
                create = body

                async def oci_create():
                    out = await create()
                    self._restore_oci_config(vm, image)
                    return out
                body = oci_create
        secs = {'qmcreate': self.create_secs, 'qmclone': self.clone_secs}.get(ttype)
        if secs is not None and vm is not None:
            vm.start_secs = self.new_vm_start_secs
        if secs is None or vm is None or not (secs or self.answer_delay):
            return await super().task(node, ttype, tid, user, body, vm=vm, lock=lock, log=log)
        storage = self.clone_storage.pop(vm.vmid, None) if ttype == 'qmclone' else None
        contended = ttype == 'qmclone' and self.clone_limit is not None
        # The VM exists now, made by _qm_create / _qm_clone. PVE first writes a config holding
        # only the lock: AbstractConfig::create_and_lock_config (`$conf->{lock} = $lock //
        # 'create'`) for a create, `file_set_contents($conffile, "# qmclone temporary file\nlock:
        # clone\n")` in the clone worker; the full config is written at the task's end.
        final_config, final_name = vm.config, vm.name
        if ttype == 'qmclone':
            # parse_vm_config turns a `#` line into the description (trailing space stripped).
            vm.config = {'description': ' qmclone temporary file', 'lock': 'clone'}
        else:
            vm.config = {'lock': 'create'}
        # vmstatus: `$d->{name} = $conf->{name} || "VM $vmid"`; /cluster/resources takes the name
        # from pvestatd's RRD data, which has none for a config without one.
        vm.name = 'VM {0}'.format(vm.vmid)
        self.unborn[vm.vmid] = final_name

        async def slow():
            try:
                if contended and self.cloning.get(node, 0) >= self.clone_limit:
                    await self.storage_lock_timeout(vm, storage)
                self.cloning[node] = self.cloning.get(node, 0) + 1
                try:
                    await self.pause(secs)
                finally:
                    self.cloning[node] -= 1
            finally:
                # The body goes on from the config fakepve made (a create's body writes its own).
                vm.config, vm.name = final_config, final_name
                self.unborn.pop(vm.vmid, None)
            return await body()

        upid = await super().task(node, ttype, tid, user, slow, vm=vm, lock=lock, log=log)
        await self.pause(self.answer_delay)
        return upid

    async def storage_lock_timeout(self, vm, storage):
        """clone_contention: a clone that finds its node's storage taking as many clones as it can.
        pve-storage src/PVE/Storage/Plugin.pm (at 0c56bad) `cluster_lock_storage` takes a local
        storage's lock with `PVE::Tools::lock_file("$lockdir/$lockid", $timeout, ...)`, lockid
        `pve-storage-$storeid`, lockdir `/var/lock/pve-manager` (a shared one: pve-cluster's cfs
        lock); pve-common src/PVE/Tools.pm (at f665029) `lock_file_full` waits `$timeout = 10 if
        !$timeout` seconds and sets `$@ = "can't lock file '$filename' - $@"` with `got timeout`.
        qemu-server src/PVE/API2/Qemu.pm (at e6352be6) `clone_vm` then frees the volumes it made,
        removes the firewall config and `unlink $conffile; # avoid races -> last thing before die`,
        and dies `"clone failed: $err"`: the task fails and nothing is left at the VMID."""
        await self.pause(self.clone_lock_wait)
        if vm in self.vms:
            self.vms.remove(vm)
        raise TaskError("clone failed: can't lock file '/var/lock/pve-manager/pve-storage-{0}' - got timeout".format(
            storage or 'local-lvm'))

    async def _qm_clone(self, v, user):
        """qemu-server src/PVE/API2/Qemu.pm clone_vm: to another node, every volume of the source
        (disks, an ISO in a CD-ROM drive, the cloud-init drive; `$check_storage_access_clone` skips
        only `none` and `cdrom`) must be on shared storage: `die "can't clone VM to node '$target'
        (VM uses local storage)\n" if $target && !$sharedvm`. fakepve 0.5.0 checks only the target
        storage. Before that, `check_bridge_access` and `$check_cpu_model_access` on the source's config
        (see _option_checks)."""
        node, target = v['node'], v.get('target')
        source = self.vm(int(v['vmid']))
        if source is not None and source.vmid in self.templating:
            self.clones_while_templating.append({'vmid': source.vmid, 'newid': v.get('newid')})
            # clone_vm: `lock_config_shared($vmid, 1, ...)` on a stopped source waits 1 s for the
            # flock the qmtemplate worker holds (template_timing).
            try:
                await self.acquire(source, 'clone-{0}'.format(v.get('newid')), wait=1)
            except TaskError as e:
                raise PveError(500, str(e)) from e
            self.release(source, 'clone-{0}'.format(v.get('newid')))
        if source is not None:
            conf = (source.snapshots.get(v.get('snapname')) if v.get('snapname') else source.config) or {}
            self._option_checks(user, dict((k, x) for k, x in conf.items() if k == 'cpu' or re.fullmatch(r'net\d+', k)))
        if target and target not in (node, 'localhost') and target in self.nodes:
            src = self.vm(int(v['vmid']))
            if src is not None and src.node == node:
                conf = src.snapshots.get(v.get('snapname')) if v.get('snapname') else src.config
                for key, volume, _props in drives_of(conf or {}):
                    if not volume or volume in ('none', 'cdrom'):
                        continue
                    sid, _name = volume_ref(volume)
                    if sid is None or not (self.storages.get(sid) or {}).get('shared'):
                        raise PveError(500, "can't clone VM to node '{0}' (VM uses local storage)".format(target))
        if self.clone_limit is not None:
            self.clone_storage[int(v['newid'])] = v.get('storage') or self._clone_source_storage(source)
        return await super()._qm_clone(v, user)

    async def _qm_template(self, v, user):
        """template_timing: qemu-server src/PVE/API2/Qemu.pm `template` as it runs on a real node.
        Under `PVE::QemuConfig->lock_config($vmid, $updatefn)` (a flock on
        /var/lock/qemu-server/lock-N.conf, no `lock:` property) it loads the config, check_lock,
        dies on snapshots, on `you can't convert a template to a template`, on a running VM, then
        `$conf->{template} = 1; write_config` and forks the `qmtemplate` worker, which inherits
        the flock and runs template_create: each disk `vdisk_create_base` (renamed
        base-N-disk-M) with a write_config after each. So from the task's start the config (and
        the listing) says template=1 while the disks are still `vm-N-disk-M`, and the config lock
        is held until the task ends (a config write, a destroy, a clone's shared lock of the source
        wait for it and fail `can't lock file ... - got timeout`). template_secs is how long the
        conversion takes; at 0 fakepve's own (everything at once) answers."""
        if not (self.template_secs and self.time_scale):
            return await super()._qm_template(v, user)
        vm = self.find(v['node'], v['vmid'])
        disk = v.get('disk')
        holder = 'qmtemplate-{0}'.format(vm.vmid)
        try:
            await self.acquire(vm, holder)
        except TaskError as e:
            raise PveError(500, str(e)) from e
        try:
            self._check_lock(vm)
            if vm.snapshots:
                raise die('unable to create template, because VM contains snapshots')
            if vm.template and not disk:
                raise die("you can't convert a template to a template")
            if vm.status == 'running':
                raise die("you can't convert a VM to template if VM is running")
        except BaseException:
            self.release(vm, holder)
            raise
        vm.template = True
        vm.config['template'] = 1
        self.templating[vm.vmid] = holder
        secs = self.template_secs

        async def body():
            try:
                await self.pause(secs)
                if vm in self.vms:
                    for key, volume, props in drives_of(vm.config, skip_cdrom=True):
                        if disk and key != disk:
                            continue
                        vm.config[key] = join_drive(self._qm_rename_volume(volume), props)
            finally:
                self.templating.pop(vm.vmid, None)
                self.release(vm, holder)
        return await self.task(vm.node, 'qmtemplate', vm.vmid, user, body, vm=vm, lock=False)

    @staticmethod
    def _clone_source_storage(source):
        """The storage of the source's first disk (a clone without `storage` allocates there)."""
        for _key, volume, _props in drives_of((source.config if source else None) or {}):
            sid, _name = volume_ref(volume) if volume and volume not in ('none', 'cdrom') else (None, None)
            if sid:
                return sid
        return None

    @staticmethod
    def _vm_maxdisk(vm):
        """A VM's maxdisk as PVE lists it: the size of the first disk of its boot order that is
        not a CD-ROM (qemu-server PVE/QemuServer/Drive.pm bootdisk_size and get_bootdisks,
        which vmstatus reports), the legacy bootdisk without an order, 0 without either. fakepve
        takes the alphabetically first drive, so a VM whose efidisk0 or sata0 sorts before its
        boot disk would be listed with that drive's size."""
        conf = vm.config
        boot = str(conf.get('boot') or '')
        if 'order=' in boot:
            order = boot.split('order=', 1)[1].split(',')[0]
            disks = [d for d in re.split(r'[;\s]+', order) if d]
        elif conf.get('bootdisk'):
            disks = [str(conf['bootdisk'])]
        else:
            disks = []
        for key in disks:
            value = str(conf.get(key) or '')
            if not re.fullmatch(r'(ide|sata|scsi|virtio)\d+', key) or not value:
                continue
            if 'media=cdrom' in value or value.split(',')[0] in ('none', 'cdrom'):
                continue
            m = re.search(r'size=(\d+(?:\.\d+)?)([KMGT])?', value)
            return int(float(m.group(1)) * SIZE_UNITS.get(m.group(2) or 'G', 1)) if m else 0
        return 0

    def vm(self, vmid):
        """The VM with this id, or None (fakepve's Model.vm, through the index of GuestList)."""
        return self.vms.first(vmid)

    def _node_used(self, node):
        """The memory a node's running guests hold (their configured memory, MiB)."""
        used = 0
        for guest in list(self.vms) + list(self.cts):
            if guest.node == node and guest.status == 'running':
                used += int(str(guest.config.get('memory') or 512)) * 1024 ** 2
        return used

    async def _resources(self, request):
        """fakepve's /cluster/resources, and a node's memory as pvestatd reports it: `maxmem` the host's,
        `mem` what is in use, the running guests' memory included (fakepve 0.5.0 lists 2 of 8 GiB
        for every node, whatever runs there); node_memory sets a node's total and its own use."""
        response = await super()._resources(request)
        if response.status != 200:
            return response
        # Nothing to change in a listing of guests alone while none is being made: answered as
        # fakepve wrote it (decoding and encoding 5,000 guests again cost 0.25 s a listing).
        if request.query.get('type') == 'vm' and not self.unborn:
            return response
        body = json.loads(response.text)
        for item in body.get('data') or []:
            if item.get('type') == 'node' and 'maxmem' in item:
                own = self.node_memory.get(item['node'], {})
                item['maxmem'] = int(own.get('maxmem', item['maxmem']))
                item['mem'] = min(item['maxmem'], int(own.get('mem', item['mem'])) + self._node_used(item['node']))
            if item.get('type') == 'qemu' and item.get('vmid') in self.unborn:
                if self.window_listed_name:
                    item['name'] = 'VM {0}'.format(item['vmid'])
                else:
                    item.pop('name', None)
        return web.json_response(body, status=response.status)

    # ------------------------------------------------------------ power

    @staticmethod
    def _flag(p, key):
        return str(p.get(key, '0')).lower() in ('1', 'true')

    async def _do_shutdown(self, vm, user, p):
        """qemu-server src/PVE/API2/Qemu.pm vm_shutdown: before forking, `if
        (PVE::QemuServer::vm_is_paused($vmid)) { if ($param->{forceStop}) { warn "VM is paused -
        stop instead of shutdown\n"; $shutdown = 0; } else { die "VM is paused - cannot
        shutdown\n"; } }`. fakepve 0.5.0 shuts a paused VM down like a running one."""
        self._need_running(vm)
        if vm.qmpstatus == 'paused':
            if not self._flag(p, 'forceStop'):
                raise PveError(500, 'VM is paused - cannot shutdown')
            if not vm.ha_managed:
                self._check_lock(vm)

                async def body():
                    await self.pause(vm.stop_secs)
                    vm.status = vm.qmpstatus = 'stopped'
                    vm.started_at = None
                return await self.task(vm.node, 'qmshutdown', vm.vmid, user, body, vm=vm)
        if vm.ha_managed:
            self._check_lock(vm)
            timeout = 60 if p.get('timeout') in (None, '') else int(p['timeout'])
            return await self._ha_stop_task(vm, user, timeout)
        return await super()._do_shutdown(vm, user, p)

    async def _do_stop(self, vm, user, p):
        """vm_stop: `overrule-shutdown` is refused for an HA-managed VM (`raise_param_exc({
        'overrule-shutdown' => "Not applicable for HA resources." })`); otherwise the qmstop worker
        first aborts the VM's running qmshutdown tasks (`abort_guest_tasks($rpcenv, 'qmshutdown',
        $vmid)`), so the stop does not wait behind their config lock."""
        overrule = self._flag(p, 'overrule-shutdown')
        if overrule and vm.ha_managed:
            raise PveError(400, 'Parameter verification failed.',
                           {'overrule-shutdown': 'Not applicable for HA resources.'})
        if overrule:
            for task in self.tasklog:
                if task['type'] == 'qmshutdown' and task['id'] == str(vm.vmid) and task['status'] == 'running':
                    self.overruled_shutdowns.add(task['upid'])
        if vm.ha_managed:
            if not p.get('skiplock'):
                self._check_lock(vm)
            return await self._ha_stop_task(vm, user, 0)
        return await super()._do_stop(vm, user, p)

    async def _powerdown(self, vm, p):
        """fakepve's _powerdown, in one-second steps so a stop with overrule-shutdown can abort it
        (the task then fails as a killed worker does: `received interrupt`)."""
        timeout = int(p.get('timeout') or self.shutdown_default_timeout)
        mine = [t['upid'] for t in self.tasklog
                if t['type'] == 'qmshutdown' and t['id'] == str(vm.vmid) and t['status'] == 'running']
        secs = vm.shutdown_secs if vm.acpi and vm.shutdown_secs <= timeout else timeout
        waited = 0.0
        while waited < secs:
            step = min(1.0, secs - waited)
            await self.pause(step)
            waited += step
            if any(u in self.overruled_shutdowns for u in mine):
                raise TaskError('received interrupt')
        if vm.acpi and vm.shutdown_secs <= timeout:
            vm.status = vm.qmpstatus = 'stopped'
            return None
        if self._flag(p, 'forceStop'):
            vm.status = vm.qmpstatus = 'stopped'
            return 'VM still running - terminating now with SIGTERM'
        raise TaskError('VM quit/powerdown failed - got timeout')

    # ------------------------------------------------------------ lost answers

    async def _answer(self, request, handler, generic, path_node):
        for i, (method, suffix, kwargs) in enumerate(self.before_rules):
            if request.method == method and self._failure_matches(request, generic, suffix):
                del self.before_rules[i]
                add_vm(self, **kwargs)
                break
        for i, (method, suffix, vmid, attrs) in enumerate(self.set_before_rules):
            if request.method == method and self._failure_matches(request, generic, suffix):
                del self.set_before_rules[i]
                vm = self.vm(vmid)
                if vm is not None:
                    set_vm_attrs(vm, attrs)
                break
        rule = None
        for (method, suffix), candidate in list(self.lost_rules.items()):
            if request.method == method and self._failure_matches(request, generic, suffix):
                rule = candidate
                candidate['times'] -= 1
                if candidate['times'] <= 0:
                    del self.lost_rules[(method, suffix)]
                break
        response = await super()._answer(request, handler, generic, path_node)
        if rule is None:
            return self._garble(request, response)
        self.lost.append({'method': request.method, 'path': request.path, 'status': response.status,
                          'body': getattr(response, 'text', None)})
        # pveproxy (pve-http-server src/PVE/APIServer/AnyEvent.pm, proxy_request) forwards with
        # `timeout => 30` and answers with AnyEvent::HTTP's pseudo status and reason:
        # `my $msg = delete $hdr->{Reason}; ... HTTP::Response->new($code, $msg, $header, $body)`,
        # the body undef on a failed forward. So: status line `596 Connection timed out`, no body.
        lost = web.Response(status=rule['status'], reason=rule['message'], body=b'')
        lost.force_close()
        return lost

    # ------------------------------------------------------------ garbled answers

    def _garble(self, request, response):
        """The answer, garbled at random if garble is on and it is a successful `{"data": ...}` one
        (see garble in COMMANDS). It works on a copy parsed from the serialized answer, after the
        handler did its work, so the model never sees a garbled value."""
        if not self.garble_rate or not isinstance(response, web.Response) or not 200 <= response.status < 300:
            return response
        if response.content_type != 'application/json' or not isinstance(response.body, (bytes, bytearray)):
            return response
        path = request.path
        if path.rstrip('/').endswith('/access/ticket'):
            return response
        if self.garble_paths is not None and not any(p in path for p in self.garble_paths):
            return response
        try:
            body = json.loads(response.text)
        except ValueError:
            return response
        if not isinstance(body, dict) or 'data' not in body:
            return response
        counts = self.garble_counts
        counts['answers'] += 1
        rng = self.garble_random
        if rng.random() >= self.garble_rate:
            return response
        plain = json.dumps(body)
        data = body['data']
        for _ in range(rng.randint(1, self.garble_max)):
            data = garble_once(rng, data)
        # Mutations may undo each other (a scalar data replaced twice, back to what it was): go on
        # until the client sees something else.
        for _ in range(20):
            if json.dumps(dict(body, data=data)) != plain:
                break
            data = garble_once(rng, data)
        body['data'] = data
        response.text = json.dumps(body)
        response.headers.pop('Content-Length', None)
        counts['garbled'] += 1
        key = API_PREFIX.sub('', path) or '/'
        counts['by_path'][key] = counts['by_path'].get(key, 0) + 1
        return response

    # fakepve registers every _routes_* table in front of its catch-all route (see fakepve/routing.py);
    # fakepve itself answers /nodes/{node}/network with a fixed vmbr0 and eno1.
    def _routes_harness(self):
        return [('GET', '/nodes/{node}/network', self._harness_network),
                ('PUT', '/nodes/{node}/qemu/{vmid}/resize', self._harness_resize),
                ('GET', '/cluster/options', self._harness_cluster_options),
                ('GET', '/nodes/{node}/certificates/info', self._harness_certificates_info),
                ('PUT', '/cluster/options', self._harness_set_cluster_options),
                ('GET', '/nodes/{node}/qemu/{vmid}/migrate', self._harness_migrate_check),
                ('POST', '/nodes/{node}/qemu/{vmid}/migrate', self._harness_migrate),
                ('GET', '/cluster/ha/resources', self._harness_ha_list),
                ('POST', '/cluster/ha/resources', self._harness_ha_create),
                ('GET', '/cluster/ha/resources/{sid}', self._harness_ha_read),
                ('PUT', '/cluster/ha/resources/{sid}', self._harness_ha_update),
                ('DELETE', '/cluster/ha/resources/{sid}', self._harness_ha_delete),
                ('GET', '/cluster/ha/groups', self._harness_ha_groups_list),
                ('POST', '/cluster/ha/groups', self._harness_ha_group_create),
                ('GET', '/cluster/ha/groups/{group}', self._harness_ha_group_read),
                ('PUT', '/cluster/ha/groups/{group}', self._harness_ha_group_update),
                ('DELETE', '/cluster/ha/groups/{group}', self._harness_ha_group_delete),
                ('GET', '/cluster/ha/rules', self._harness_ha_rules_list),
                ('POST', '/cluster/ha/rules', self._harness_ha_rule_create),
                ('GET', '/cluster/ha/rules/{rule}', self._harness_ha_rule_read),
                ('PUT', '/cluster/ha/rules/{rule}', self._harness_ha_rule_update),
                ('DELETE', '/cluster/ha/rules/{rule}', self._harness_ha_rule_delete),
                ('POST', DOWNLOAD_TEMPLATE, self._harness_download_url)]

    # ------------------------------------------------------------ oci-registry-pull

    def _lxc_routes(self, router, node):
        """fakepve's container routes, and oci-registry-pull beside them (one call per API format)."""
        super()._lxc_routes(router, node)
        router.add_post(node + '/storage/{storage}/oci-registry-pull', self._oci_registry_pull)

    async def _oci_registry_pull(self, request):
        """POST /nodes/{node}/storage/{storage}/oci-registry-pull as pve-storage 9.1 src/PVE/API2/Storage/Status.pm
        oci_registry_pull does it. fakepve 0.5.0 has no such route (its schema is older), nor does PVE before
        9.1: 501 `Method ... not implemented` there.

        The schema's 400s (`reference` required and matching its pattern, `filename` 1-255 characters, no
        other parameter); the permission check (Datastore.AllocateTemplate on /storage/{storage} and
        Sys.AccessNetwork on /nodes/{node}); then, before the task, 500 `die`s in this order: `Install
        'skopeo' to pull OCI images from registries.` (skopeo(False)), storage_check_enabled, `can't upload
        to storage type '$type', not a file based storage!`, `storage '$storage' is not configured for
        content-type 'vztmpl'`, and over a file of the name on the node `refusing to override existing file
        '$filename'` (the name normalize_content_filename(filename // reference) . '.tar'). The task
        `ociregistrypull` (worker id: encode_text of the name) runs skopeo (download_timing's secs): a
        reference the fake registry (oci_image) does not hold fails `command 'skopeo copy docker://REF
        oci-archive:PATH' failed: exit code 1`; else the archive is stored, on this node alone when the
        storage is not shared."""
        user = request[USER]
        node, sid = request.match_info['node'], request.match_info['storage']
        if self._version_tuple(self.version) < (9, 1, 0):
            raise PveError(501, "Method 'POST /nodes/{0}/storage/{1}/oci-registry-pull' not implemented"
                           .format(node, sid))
        form = await request.post()
        errors = {k: 'property is not defined in schema and the schema does not allow additional properties'
                  for k in form if k not in ('reference', 'filename')}
        reference, filename = form.get('reference'), form.get('filename')
        if reference is None:
            errors['reference'] = 'property is missing and it is not optional'
        elif not OCI_REFERENCE.fullmatch(reference):
            errors['reference'] = "value does not match the regex pattern"
        if filename is not None and not 1 <= len(filename) <= 255:
            errors['filename'] = 'value must be at least 1 and at most 255 characters long'
        if errors:
            raise PveError(400, 'Parameter verification failed.', errors)
        self.require(user, '/storage/' + sid, 'Datastore.AllocateTemplate')
        self.require(user, '/nodes/' + node, 'Sys.AccessNetwork')
        if not self.skopeo:
            raise PveError(500, "Install 'skopeo' to pull OCI images from registries.")
        store = self._check_enabled(sid, node)
        self._need_file_storage(store, "can't upload to storage type '{0}', not a file based storage!")
        if 'vztmpl' not in split_list(store.get('content')):
            raise PveError(500, "storage '{0}' is not configured for content-type 'vztmpl'".format(sid))
        name = normalize_content_filename(filename if filename is not None else reference) + '.tar'
        self._active_store(sid, node)
        volname = 'vztmpl/' + name
        vol = self._volumes(sid).get(volname)
        if vol is not None and self._on_node(sid, vol, node):
            raise PveError(500, "refusing to override existing file '{0}'".format(name))
        self.oci_requests.append({'node': node, 'storage': sid, 'reference': reference, 'filename': filename})
        dest = self._volume_path(sid, volname, 'vztmpl')

        async def body():
            await self.pause(self.download_secs)
            size = self.oci_images.get(reference)
            if size is None:
                raise TaskError("command 'skopeo copy docker://{0} oci-archive:{1}.tmp.{2}' failed: exit code 1"
                                .format(reference, dest, os.getpid()))
            self.store_file(sid, name, size, 'vztmpl')
            self.oci_archives[(sid, volname)] = reference
            if not self.storages[sid].get('shared'):
                self.storages[sid]['volumes'][volname]['nodes'] = {node}
            return None

        return ok(await self.task(node, 'ociregistrypull', encode_text(name), user, body, lock=False))

    @staticmethod
    def _restore_oci_config(ct, image):
        """What pve-container 6 src/PVE/LXC/Create.pm restore_oci_archive writes into a config from
        the image's, over the create's parameters: `entrypoint` (Entrypoint then Cmd, as
        PVE::Tools::cmd2string quotes them), `cmode: console` and `host-managed=1` on every NIC that
        does not say otherwise, when that command is not /sbin/init; `env` from Env."""
        init = image.get('Entrypoint', []) + image.get('Cmd', [])
        if init and init[0] != '/sbin/init':
            ct.config['entrypoint'] = ' '.join(shlex.quote(a) for a in init)
            ct.config['cmode'] = 'console'
            for key in [k for k in ct.config if re.fullmatch(r'net\d+', k)]:
                _, props = split_props(ct.config[key])
                if 'host-managed' not in props:
                    ct.config[key] = ct.config[key] + ',host-managed=1'
        if image.get('Env'):
            ct.config['env'] = '\0'.join(image['Env'])

    # ------------------------------------------------------------ download-url

    async def _download_url(self, request):
        """fakepve's own hand-written download-url route is added before the `_routes_*` tables (its
        _build_app), so the harness's table entry alone would never be reached: this override sends the
        request through the same schema-checked handler (parameters, permissions, node) instead."""
        return await self._stateful_handler(DOWNLOAD_TEMPLATE, self._harness_download_url)(request)

    def _vztmpl_name_ok(self, match):
        """VZTMPL_EXT_RE_1 by version, as _check_vztmpl_name: `.tar.bz2` from PVE 8.3, a bare `.tar` from 9.1."""
        version = self._version_tuple(self.version)
        return match is not None and not (
            (match.group(2) or '').lower() == 'bz2' and version < (8, 3, 0)
            or match.group(1) is not None and version < (9, 1, 0))

    def _existing_digests(self, sid, volname, vol):
        """The digests of a file on the storage: a download's bytes, else (someone's upload, store_file,
        a scenario file: bytes the harness never saw) `size` NUL bytes."""
        size = int(vol.get('size') or 0)
        known = self.downloaded.get((sid, volname))
        if known is not None and known[0] == size:
            return known[1]
        return file_digests(zeros=size)

    async def _harness_download_url(self, values, user):
        """POST /nodes/{node}/storage/{storage}/download-url as pve-storage src/PVE/API2/Storage/Status.pm
        download_url (PVE 9.1) and pve-common src/PVE/Tools.pm download_file_from_url do it.

        fakepve 0.5.0 differs: it demands Sys.Audit and Sys.Modify on `/` always (PVE: Datastore.AllocateTemplate
        on /storage/{storage} and either Sys.Audit+Sys.Modify on `/` or Sys.AccessNetwork on /nodes/{node},
        checked here from the schema), takes its own `size` parameter, stores the file as sent without a name
        or extension check, names the task after the storage (PVE: `encode_text($filename)`), and never
        fails: no checksum, no existing file, no wget error. Here the bytes come from remote_file's fake
        internet.

        Before the task (500 `die`s in this order, after the schema's 400s and the 403s):
        storage_check_enabled (does not exist, disabled, not on the node); `can't upload to storage type
        '$type', not a file based storage!`; `storage '$storage' is not configured for content-type
        '$content'`; the normalised file name's extension (raise_param_exc, 400: `wrong file extension`
        for iso and vztmpl, `invalid filename or wrong extension` for import); activate_storage.
        `compression` outside KNOWN_COMPRESSION_FORMATS is the schema's enum 400 (HarnessPve.__init__
        puts the enum fakepve 0.5.0's schema lacks back). A compressed ISO is stored as downloaded (not
        decompressed; the checksum is checked on the downloaded bytes).

        The `download` task (worker id: the normalised file name, encode_text'd): with `compression`
        for other content than iso it dies `decompression not supported for $content`; then
        download_file_from_url into `$path/$filename` (the storage's iso, vztmpl or import dir):
        an existing file with a checksum: the same -> `OK, got correct file already, no need to
        download`, task OK; else `checksum mismatch: got 'X' != expect 'Y', aborting`; an existing
        file without one: `refusing to override existing file '$dest'`. Then wget (download_timing's
        secs): a URL not registered fails `download failed: exit code 4` (network failure), one
        registered with a status other than 200 `download failed: exit code 8` (server error); more
        bytes than the storage's `avail` `download failed: exit code 3` (file I/O error). Then the
        checksum of the bytes (`if ($checksum)`: Perl truth, so "" and "0" check nothing), compared
        lower-cased: `checksum mismatch: got 'X' != expect 'Y'`. Then the file is stored (store_file)
        and its bytes' digests remembered for a later download's existing-file check."""
        node, sid, content, url = values['node'], values['storage'], values['content'], values['url']
        compression = values.get('compression')
        checksum, algorithm = values.get('checksum'), values.get('checksum-algorithm')
        self.download_requests.append({'node': node, 'storage': sid, 'filename': values['filename'], 'url': url,
                                       'content': content, 'checksum': checksum, 'checksum_algorithm': algorithm})
        store = self._check_enabled(sid, node)
        self._need_file_storage(store, "can't upload to storage type '{0}', not a file based storage!")
        if content not in split_list(store.get('content')):
            raise PveError(500, "storage '{0}' is not configured for content-type '{1}'".format(sid, content))
        filename = normalize_content_filename(values['filename'])
        if content == 'iso':
            if not DOWNLOAD_ISO_NAME.search(filename):
                raise param_error(filename='wrong file extension')
        elif content == 'vztmpl':
            if not self._vztmpl_name_ok(DOWNLOAD_VZTMPL_NAME.search(filename)):
                raise param_error(filename='wrong file extension')
        elif not DOWNLOAD_IMPORT_NAME.search(filename):
            raise param_error(filename='invalid filename or wrong extension')
        self._active_store(sid, node)
        volname = '{0}/{1}'.format(content, filename)
        dest = self._volume_path(sid, volname, content)
        if checksum in (None, '', '0'):
            checksum = algorithm = None
        holder = {}

        async def body():
            # The task's record: the newest one when fakepve runs the body inline (time_scale 0), else
            # the one the handler noted once task() returned (a task body runs only after that).
            log = (holder.get('record') or self.tasklog[-1])['log']
            if compression and content != 'iso':
                raise TaskError('decompression not supported for {0}'.format(content))
            log.append('downloading {0} to {1}'.format(url, dest))
            vol = self._volumes(sid).get(volname)
            if vol is not None and not self._on_node(sid, vol, node):
                vol = None
            if vol is not None:
                if not algorithm:
                    raise TaskError("refusing to override existing file '{0}'".format(dest))
                got = self._existing_digests(sid, volname, vol)[algorithm]
                if got == checksum.lower():
                    log.append('calculating checksum of existing file...OK, got correct file already, '
                               'no need to download')
                    return None
                log.append('calculating checksum of existing file...')
                raise TaskError("checksum mismatch: got '{0}' != expect '{1}', aborting".format(got, checksum))
            await self.pause(self.download_secs)
            remote = self.remote_files.get(url)
            # wget --progress=dot:giga's own lines, roughly.
            stamp = time.strftime('%Y-%m-%d %H:%M:%S')
            host = re.sub(r'^https?://([^/:?#]*).*$', r'\1', url, flags=re.S)
            log.append('--{0}--  {1}'.format(stamp, url))
            if remote is None:
                log.append('Resolving {0} ({0})... failed: Name or service not known.'.format(host))
                log.append("wget: unable to resolve host address '{0}'".format(host))
                raise TaskError('download failed: exit code {0}'.format(WGET_NETWORK_FAILURE))
            if remote['status'] != 200:
                try:
                    phrase = http.HTTPStatus(remote['status']).phrase
                except ValueError:
                    phrase = 'Error'
                log.append('HTTP request sent, awaiting response... {0} {1}'.format(remote['status'], phrase))
                log.append('{0} ERROR {1}: {2}.'.format(stamp, remote['status'], phrase))
                raise TaskError('download failed: exit code {0}'.format(WGET_SERVER_ERROR))
            data = remote['data']
            log.append('HTTP request sent, awaiting response... 200 OK')
            log.append('Length: {0}'.format(len(data)))
            if len(data) > self.storages[sid].get('avail', float('inf')):
                log.append('Cannot write to {0!r} (No space left on device).'.format(dest))
                raise TaskError('download failed: exit code {0}'.format(WGET_IO_ERROR))
            digests = file_digests(data)
            if algorithm:
                got = digests[algorithm]
                if got != checksum.lower():
                    log.append('calculating checksum...')
                    raise TaskError("checksum mismatch: got '{0}' != expect '{1}'".format(got, checksum))
                log.append('calculating checksum...OK, checksum verified')
            # rename($tmpdest, $dest): a file that appeared meanwhile is replaced.
            old = self.storages[sid].get('volumes', {}).pop(volname, None)
            if old is not None and 'avail' in self.storages[sid]:
                self.storages[sid]['avail'] += int(old.get('size') or 0)
            nodes = set(old.get('nodes', ())) if old is not None else set()
            self.store_file(sid, filename, len(data), content)
            if not self.storages[sid].get('shared'):
                self.storages[sid]['volumes'][volname]['nodes'] = nodes | {node}
            self.downloaded[(sid, volname)] = (len(data), digests)
            return "download of '{0}' to '{1}' finished".format(url, dest)

        upid = await self.task(node, 'download', encode_text(filename), user, body, lock=False)
        holder['record'] = self.tasks[upid]
        return upid

    def _on_node(self, sid, vol, node):
        """Whether volume `vol` of storage `sid` is on `node`. fakepve 0.5.0 keeps one set of volumes per
        storage for every node; a storage storage.cfg does not mark `shared` (a `dir` such as `local`) is
        one directory per node in PVE. A file download-url put on a node that is not shared is kept with
        the nodes it was downloaded to (`nodes`), and is on those alone; other volumes are on every node."""
        nodes = vol.get('nodes')
        return nodes is None or self.storages[sid].get('shared') or node in nodes

    async def _content_list(self, v, user):
        """GET /nodes/{node}/storage/{storage}/content, without the downloaded files of a storage that is
        not shared which are on other nodes (see _on_node)."""
        out = await super()._content_list(v, user)
        vols = self._volumes(v['storage'])
        return [item for item in out
                if self._on_node(v['storage'], vols.get(item['volid'].split(':', 1)[1], {}), v['node'])]

    # ------------------------------------------------------------ permissions

    async def _cluster_status(self, request):
        """GET /cluster/status: pve-manager PVE/API2/Cluster.pm get_status, `check => ['perm', '/',
        ['Sys.Audit']]` (fakepve 0.5.0 checks nothing): on `/` itself; a grant on /nodes does not do.

        A standalone node (no cluster configured, `get_members` empty) gets get_status's "fake entry for
        local node if no cluster defined": no `cluster` entry, one node entry with nodeid 0, local and
        online (fakepve 0.5.0 always answers a cluster entry)."""
        self.require(request[USER], '/', 'Sys.Audit')
        if not self.standalone:
            return await super()._cluster_status(request)
        node = sorted(self.nodes)[0]
        return ok([{'type': 'node', 'id': 'node/' + node, 'name': node, 'ip': '192.0.2.11', 'local': 1,
                    'nodeid': 0, 'online': 1, 'level': ''}])

    # ------------------------------------------------------------ certificates

    async def _harness_certificates_info(self, values, user):
        """GET /nodes/{node}/certificates/info as pve-manager PVE/API2/Certificates.pm `info` answers it
        (`permissions => { user => 'all' }`, `proxyto => 'node'`; fakepve 0.5.0 has no such route): for
        '/etc/pve/pve-root-ca.pem', the node's pve-ssl.pem and pveproxy-ssl.pem, those that exist, each as
        pve-common PVE/Certificate.pm get_certificate_info makes it (`fingerprint` =
        Net::SSLeay::X509_get_fingerprint($cert, 'sha256'), upper-case colon hex; `filename` = the base name).

        The root CA is the cluster's one (pve-cluster src/PVE/Cluster/Setup.pm gen_pveca_cert makes it once,
        on the cluster file system, so every node answers the same); the fake serves a self-signed
        certificate, which is its own CA and the one the tests' clients trust (ca_file), as pve-root-ca.pem
        is for a real cluster. It stands for both files."""
        from cryptography import x509
        pem, der = self.root_ca
        cert = x509.load_der_x509_certificate(der)
        digest = hashlib.sha256(der).hexdigest().upper()
        fingerprint = ':'.join(digest[i:i + 2] for i in range(0, len(digest), 2))

        def oneline(name):
            return ''.join('/{0}={1}'.format(a.rfc4514_attribute_name, a.value) for a in name)
        info = {'fingerprint': fingerprint, 'subject': oneline(cert.subject), 'issuer': oneline(cert.issuer),
                'notbefore': int(cert.not_valid_before_utc.timestamp()),
                'notafter': int(cert.not_valid_after_utc.timestamp()), 'san': [], 'pem': pem,
                'public-key-type': 'id-ecPublicKey', 'public-key-bits': 256}
        return [dict(info, filename='pve-root-ca.pem'), dict(info, filename='pve-ssl.pem')]

    def _effective(self, who, path):
        """The privileges `who` holds on exactly `path`, by fakepve's own check (grants propagate down
        the tree, pools cover their members)."""
        privs = set(shapes.PRIVILEGES)
        if not str(self.version).startswith('9'):
            privs.add('VM.Monitor')  # PVE 8's; pve-access-control 9.0.2 dropped it
        for grants in (self.acl or {}).values():
            for _path, granted in grants:
                privs |= set(granted)
        return set(p for p in privs if self._has(who, path, p))

    async def _permissions(self, v, user):
        """GET /access/permissions as pve-access-control PVE/API2/AccessControl.pm `permissions`: with
        `path`, `{path => $rpcenv->permissions($userid, $path)}` (the effective privileges on exactly that
        path) or {} when none; without, get_effective_permissions: the same for `/`, the top-level paths
        (/access /access/groups /nodes /pool /sdn /storage /vms) and every path with an ACL. fakepve 0.5.0
        lists the grants themselves (a grant on /nodes shows under /nodes, a grant on / under / only)."""
        who = v.get('userid') or user
        if v.get('path') is not None:
            paths = [str(v['path'])]
        else:
            paths = set(['/', '/access', '/access/groups', '/nodes', '/pool', '/sdn', '/storage', '/vms'])
            for grants in (self.acl or {}).values():
                paths |= set(path for path, _privs in grants)
        out = {}
        for path in sorted(paths):
            held = self._effective(who, path)
            if held:
                out[path] = dict.fromkeys(sorted(held), 1)
        return out

    async def _harness_cluster_options(self, values, user):
        """GET /cluster/options as pve-manager PVE/API2/Cluster.pm get_options: all of datacenter.cfg with
        Sys.Audit on `/`, else only `console` and `tag-style`; always `allowed-tags` (the tags the caller may
        set: the user-allow-list unless `none`, plus existing tags when `free`/`existing`; registered tags
        only with Sys.Modify on `/`; PVE::GuestHelpers::get_allowed_tags)."""
        dc = self.datacenter
        if self._has(user, '/', 'Sys.Audit'):
            res = dict(dc)
            # pve-cluster src/PVE/DataCenterConfig.pm parse_datacenter_config: `$res->{mac_prefix} =
            # $PROXMOX_OUI if !defined($res->{mac_prefix})` (since pve-cluster 8.0.5).
            res.setdefault('mac_prefix', PROXMOX_OUI)
        else:
            res = dict((k, dc[k]) for k in ('console', 'tag-style') if k in dc)
        privileged = self._has(user, '/', 'Sys.Modify')
        access = dc.get('user-tag-access') or {}
        allow = access.get('user-allow', 'free')
        allowed = set()
        if allow != 'none' or privileged:
            allowed |= set(access.get('user-allow-list') or [])
        if allow in ('free', 'existing') or privileged:
            for vm in self.vms:
                allowed |= set(t for t in re.split(r'[;, ]+', str(vm.config.get('tags') or '')) if t)
        registered = set(dc.get('registered-tags') or [])
        allowed = allowed | registered if privileged else allowed - registered
        res['allowed-tags'] = sorted(allowed)
        return res

    async def _harness_set_cluster_options(self, values, user):
        """PUT /cluster/options as pve-manager PVE/API2/Cluster.pm set_options: Sys.Modify on `/`; each
        option given replaces the stored one, `delete` removes options. `next-id` is checked against
        pve-cluster's next_id_format (DataCenterConfig.pm: lower 100..999999999, upper 100..1000000000)
        and, when datacenter.cfg is written, `lower ($lower) <= upper ($upper) boundary rule broken`; it is
        kept parsed, as GET answers it. Other options are kept as sent."""
        self.require(user, '/', 'Sys.Modify')
        values = dict(values)
        delete = [k for k in re.split(r'[,;\s]+', str(values.pop('delete', '') or '')) if k]
        if 'next-id' in values:
            values['next-id'] = self._parse_next_id(values['next-id'])
        dc = dict(self.datacenter)
        dc.update(values)
        for key in delete:
            dc.pop(key, None)
        next_id = dc.get('next-id')
        if next_id:
            lower, upper = self._next_id_range(next_id)
            if lower > upper:
                raise PveError(500, 'lower ({0}) <= upper ({1}) boundary rule broken'.format(lower, upper))
        self.datacenter = dc
        return None

    @staticmethod
    def _parse_next_id(text):
        """next_id_format as PVE::JSONSchema::parse_property_string checks it; values stay strings, as
        Perl keeps them (JSON::XS sends them as strings)."""
        bounds = {'lower': (100, 999999999), 'upper': (100, 1000000000)}
        out = {}
        for part in [p for p in str(text).split(',') if p]:
            key, sep, value = part.partition('=')
            if not sep or key not in bounds:
                raise param_error(**{'next-id': "invalid format - property '{0}' not defined".format(key)})
            if not re.fullmatch(r'[+-]?\d+', value):
                raise param_error(**{'next-id': "invalid format - type check ('integer') failed - got '{0}'"
                                     .format(value)})
            low, high = bounds[key]
            if not low <= int(value) <= high:
                raise param_error(**{'next-id': 'invalid format - value must be in {0}..{1}'.format(low, high)})
            out[key] = value
        return out

    @staticmethod
    def _next_id_range(next_id):
        """(lower, upper) of a parsed `next-id`, PVE's defaults for what it leaves out."""
        next_id = next_id or {}
        return int(next_id.get('lower', 100)), int(next_id.get('upper', 1000 * 1000))

    async def _nextid(self, v, user):
        """GET /cluster/nextid as pve-manager PVE/API2/Cluster.pm nextid: with `vmid`, it or `VM N already
        exists`; else the first id in [lower, upper) of datacenter.cfg's `next-id` that no guest has, or
        `unable to get any free VMID in range [lower, upper]`. fakepve 0.5.0 ignores `next-id`."""
        if v.get('vmid') not in (None, ''):
            return await super()._nextid(v, user)
        lower, upper = self._next_id_range(self.datacenter.get('next-id'))
        taken = set(vm.vmid for vm in self.vms) | set(ct.vmid for ct in self.cts)
        for vmid in range(lower, upper):
            if vmid not in taken:
                return str(vmid)
        raise PveError(500, 'unable to get any free VMID in range [{0}, {1}]'.format(lower, upper))

    # ------------------------------------------------------------ resize

    @staticmethod
    def _parse_size(text):
        """PVE::JSONSchema::parse_size: `32G`, `512M`, bytes without a unit."""
        m = re.fullmatch(r'(\d+(?:\.\d+)?)([KMGT])?', str(text or '').strip())
        if not m:
            return 0
        return int(float(m.group(1)) * SIZE_UNITS.get(m.group(2) or '', 1))

    async def _harness_resize(self, values, user):
        """PUT /nodes/{node}/qemu/{vmid}/resize as qemu-server src/PVE/API2/Qemu.pm resize_vm: a
        `resize` task (`fork_worker('resize', $vmid, ...)`) that locks the config, checks the digest
        (`checksum mismatch (file change by other user?)`) and lock, `disk '$disk' does not exist`,
        `you can't resize a cdrom`, takes `size` as `+N[KMGT]` (added) or absolute, dies `shrinking
        disks is not supported`, does nothing for the same size, else writes `size=` in the drive.
        fakepve 0.5.0 answers it from the schema with a UPID and changes nothing. The schema's checks
        (a `disk` that is no drive key, like `net0`, is a 400) run before this."""
        vm = self.find(values['node'], int(values['vmid']))
        disk, sizestr, digest = values['disk'], str(values['size']), values.get('digest')

        async def body():
            if digest and digest != vm.digest():
                raise TaskError('checksum mismatch (file change by other user?)')
            if vm.lock and not values.get('skiplock'):
                raise TaskError('VM is locked ({0})'.format(vm.lock))
            if not vm.config.get(disk):
                raise TaskError("disk '{0}' does not exist".format(disk))
            volume, props = split_drive(vm.config[disk])
            if is_cdrom(volume, props):
                raise TaskError("you can't resize a cdrom")
            sid, name = volume_ref(volume)
            vol = (self.storages.get(sid) or {}).get('volumes', {}).get(name) if sid else None
            size = int((vol or {}).get('size') or self._parse_size(props.get('size')))
            m = re.fullmatch(r'(\+)?(\d+(?:\.\d+)?)([KMGT])?', sizestr)
            if not m:
                raise TaskError('internal error')
            new = float(m.group(2)) * SIZE_UNITS.get(m.group(3) or '', 1)
            if m.group(1):
                new += size
            new = int(new)
            if new < size:
                raise TaskError('shrinking disks is not supported')
            if new == size:
                return None
            if vol is not None:
                vol['size'] = new
            props['size'] = format_size(new)
            vm.config[disk] = join_drive(volume, props)
            return 'resized {0} to {1}'.format(disk, format_size(new))
        return await self.task(vm.node, 'resize', vm.vmid, user, body, vm=vm,
                               log=['update VM {0}: resize --disk {1} --size {2}'.format(vm.vmid, disk, sizestr)])

    # ------------------------------------------------------------ HA resources

    HA_DEFAULTS = {'state': 'started', 'max_restart': 1, 'max_relocate': 1}
    HA_ERROR = "service '{0}' in error state, must be disabled and fixed first"

    def _pve9(self):
        return self._version_tuple(self.version) >= (9, 0, 0)

    def _groups_migrated(self):
        """PVE::HA::Config::have_groups_been_migrated (pve-ha-manager 5.x, PVE 9): true when no group is
        left (the CRM migrates them to rules once every node runs 9.x; a new 9.x cluster has none). PVE 8
        (pve-ha-manager 4.x) has groups and no rules."""
        return self._pve9() and not self.ha_groups

    @staticmethod
    def _ha_sid(guest):
        """The guest's service id: `vm:N`, a container's `ct:N`."""
        return '{0}:{1}'.format('ct' if _is_ct(guest) else 'vm', guest.vmid)

    def _ha_vm(self, sid, creating=False):
        """The guest a service id names. PVE::HA::Config::parse_sid: `vm:N`, `ct:N`, or a bare N
        (its type from the cluster's VM list); `no such resource` for another, or for a guest of
        the other type. Creating one checks it as PVEVM.pm / PVECT.pm `exists` do: `resource 'ct:N'
        does not exist in cluster`, `resource 'ct:N' - guest with ID N is not a container`."""
        m = re.fullmatch(r'(?:(vm|ct):)?(\d+)', str(sid))
        vmid = int(m.group(2)) if m else None
        guest = (self.vm(vmid) or self.ct(vmid)) if m else None
        if m and creating:
            kind = m.group(1) or ('ct' if _is_ct(guest) else 'vm')
            full = '{0}:{1}'.format(kind, vmid)
            if guest is None:
                raise PveError(500, "resource '{0}' does not exist in cluster".format(full))
            if (kind == 'ct') != _is_ct(guest):
                raise PveError(500, "resource '{0}' - guest with ID {1} is not a {2}".format(
                    full, vmid, 'container' if kind == 'ct' else 'VM'))
        elif guest is not None and m.group(1) and (m.group(1) == 'ct') != _is_ct(guest):
            guest = None
        if guest is None:
            raise PveError(500, "no such resource '{0}'".format(sid))
        return guest

    def _ha_config(self, vm):
        """The resource's config: the harness's record, else one made by set_vm(ha_state=...)."""
        res = self.ha_resources.get(vm.vmid)
        if res is None and vm.ha_state is not None:
            res = {'state': 'started' if vm.ha_state in ('started', 'error') else vm.ha_state}
        return res

    def _ha_stop_now(self, vm, timeout):
        """The LRM's stop: PVE/HA/Resources/PVEVM.pm shutdown, `$params->{timeout} = $shutdown_timeout;
        $params->{forceStop} = 1` (a timeout of 0: vm_stop). A guest that does not power off within the
        timeout is stopped hard, counted in hard_stops. A container's (PVECT.pm shutdown) passes no
        forceStop: one that does not stop within the timeout keeps running (vm_stop `--nokill`: "container
        did not stop"), the LRM answers ERROR ("unable to stop service ... (still running)") and the CRM
        puts the service in `error` (Manager.pm next_state_request_stop); a timeout of 0 stops it."""
        if _is_ct(vm):
            if vm.status != 'running':
                return
            if timeout and vm.shutdown_secs > timeout:
                vm.ha_state = 'error'
                return
            vm.status = 'stopped'
            vm.pid = None
            return
        if vm.status == 'running':
            if not (timeout and vm.acpi and vm.shutdown_secs <= timeout):
                self.hard_stops[vm.vmid] = self.hard_stops.get(vm.vmid, 0) + 1
            vm.status = vm.qmpstatus = 'stopped'
            vm.started_at = None

    def _ha_apply(self, vm, state):
        """The CRM acting on a requested state: the manager's state at once, the start or stop
        ha_delay PVE seconds later (before the request returns at time_scale 0). `ignored`: the
        VM leaves the manager; API calls act on it directly. `stopped` and `disabled` stop it through
        the LRM's shutdown with its default timeout, 60 s, then hard; `disabled` leaves the service
        `stopped` (Manager.pm next_state_error: only `disabled` gets a service out of `error`)."""
        if state == 'ignored':
            vm.ha_state = None
            return
        vm.ha_state = 'stopped' if state == 'disabled' else state

        def act():
            if state == 'started' and vm.status != 'running' and _is_ct(vm):
                self._apply(vm)
                vm.status = 'running'
                vm.started_at = time.time()
                vm.pid = next(self._ct_pids)
            elif state == 'started' and vm.status != 'running':
                vm.apply_pending()
                vm.status = vm.qmpstatus = 'running'
                vm.started_at = time.time()
            elif state in ('stopped', 'disabled'):
                self._ha_stop_now(vm, 60)
        if self.time_scale and self.ha_delay:
            async def later():
                await self.pause(self.ha_delay)
                act()
            asyncio.ensure_future(later())
        else:
            act()

    async def _ct_ha(self, ct, user, state, timeout=None):
        """pve-container vm_start / vm_stop / vm_shutdown for an HA-managed container: the same
        `hastart` and `hastop` tasks as a VM's (`ha-manager set ct:N --state started`, `ha-manager
        crm-command stop ct:N TIMEOUT`), which fakepve 0.5.0 runs without the resource's config."""
        if state == 'started':
            return await self._ha_start_task(ct, user)
        return await self._ha_stop_task(ct, user, 0 if timeout is None else int(timeout))

    async def _ha_start_task(self, vm, user):
        """qemu-server vm_start for an HA-managed VM: an `hastart` task running `ha-manager set vm:N
        --state started`, which the HA API refuses for a service in `error` (API2/HA/Resources.pm
        check_service_state); run_command then dies `command '...' failed: exit code 255`."""
        log = ['Requesting HA start for {0} {1}'.format('CT' if _is_ct(vm) else 'VM', vm.vmid)]
        if vm.ha_state == 'error':
            cmd = "ha-manager set {0} --state started".format(self._ha_sid(vm))

            async def refused():
                raise TaskError("command '{0}' failed: exit code 255".format(cmd))
            return await self.task(vm.node, 'hastart', vm.vmid, user, refused, lock=False,
                                   log=log + [self.HA_ERROR.format(self._ha_sid(vm))])

        async def body():
            res = self.ha_resources.get(vm.vmid)
            if res is not None:
                res['state'] = 'started'
            self._ha_apply(vm, 'started')
        return await self.task(vm.node, 'hastart', vm.vmid, user, body, lock=False, log=log)

    async def _ha_stop_task(self, vm, user, timeout):
        """qemu-server vm_shutdown (timeout `$param->{timeout} // 60`) and vm_stop (0) for an HA-managed
        VM: an `hastop` task running `ha-manager crm-command stop vm:N TIMEOUT`; the CRM then sets the
        resource's state to `stopped` (Manager.pm: `update_service_config(... state => 'stopped')`) and
        the LRM stops it, hard after the timeout (_ha_stop_now)."""
        async def body():
            res = self.ha_resources.get(vm.vmid)
            if res is not None:
                res['state'] = 'stopped'
            vm.ha_state = 'stopped'

            def act():
                self._ha_stop_now(vm, timeout)
            if self.time_scale and self.ha_delay:
                async def later():
                    await self.pause(self.ha_delay)
                    act()
                asyncio.ensure_future(later())
            else:
                act()
        return await self.task(vm.node, 'hastop', vm.vmid, user, body, lock=False,
                               log=['Requesting HA stop for {0} {1}'.format('CT' if _is_ct(vm) else 'VM', vm.vmid)])

    def _ha_answer(self, vm, res):
        sid = self._ha_sid(vm)
        out = {'sid': sid, 'type': sid.split(':')[0], 'digest': self._digest(res)}
        out.update({k: v for k, v in res.items() if v is not None})
        if self._groups_migrated():
            # Resources.pm $api_copy_config: `delete $scfg->{group} if $exclude_group_property`.
            out.pop('group', None)
        return out

    @staticmethod
    def _digest(obj):
        return 'ha{0}'.format(abs(hash(json.dumps(obj, sort_keys=True, default=str))) % 10 ** 12)

    async def _harness_ha_list(self, values, user):
        """GET /cluster/ha/resources (Sys.Audit on /)."""
        self.require(user, '/', 'Sys.Audit')
        guests = sorted(list(self.vms) + list(self.cts), key=lambda v: v.vmid)
        return [self._ha_answer(vm, self._ha_config(vm)) for vm in guests if self._ha_config(vm) is not None]

    async def _harness_ha_read(self, values, user):
        """GET /cluster/ha/resources/{sid}: pve-ha-manager API2/HA/Resources.pm read; `no such
        resource 'vm:N'` (500) when the VM is not an HA resource."""
        self.require(user, '/', 'Sys.Audit')
        vm = self._ha_vm(values['sid'])
        res = self._ha_config(vm)
        if res is None:
            raise PveError(500, "no such resource '{0}'".format(values['sid']))
        return self._ha_answer(vm, res)

    def _ha_params(self, values):
        res = {}
        for key in ('state', 'group', 'comment'):
            if values.get(key) is not None:
                res[key] = str(values[key])
        for key in ('max_restart', 'max_relocate'):
            if values.get(key) is not None:
                res[key] = int(values[key])
        if res.get('state') == 'enabled':
            res['state'] = 'started'
        return res

    def _ha_group_param(self, values, update):
        """Resources.pm create and update: `die "invalid parameter 'group': ha groups have been migrated
        to rules\n" if defined($param->{group}) && have_groups_been_migrated()`; update also `HA group
        '$group' does not exist`."""
        group = values.get('group')
        if group is None:
            return
        if self._groups_migrated():
            raise PveError(500, "invalid parameter 'group': ha groups have been migrated to rules")
        if update and str(group) not in self.ha_groups:
            raise PveError(500, "HA group '{0}' does not exist".format(group))

    async def _harness_ha_create(self, values, user):
        """POST /cluster/ha/resources (Sys.Console on /): quorum, `group` (see _ha_group_param), the VM
        must exist, `resource ID 'vm:N' already defined`; the CRM then acts on the state."""
        self.require(user, '/', 'Sys.Console')
        self.need_quorum()
        self._ha_group_param(values, update=False)
        vm = self._ha_vm(values.get('sid', ''), creating=True)
        if self._ha_config(vm) is not None:
            raise PveError(500, "resource ID '{0}' already defined".format(self._ha_sid(vm)))
        res = dict(self.HA_DEFAULTS)
        res.update(self._ha_params(values))
        self.ha_resources[vm.vmid] = res
        self._ha_apply(vm, res['state'])
        return None

    async def _harness_ha_update(self, values, user):
        """PUT /cluster/ha/resources/{sid} (Sys.Console on /): `group`, then check_service_state (a
        service in `error` takes only `state=disabled`: `service 'vm:N' in error state, must be
        disabled and fixed first`), `digest`, `delete`, the state."""
        self.require(user, '/', 'Sys.Console')
        self._ha_group_param(values, update=True)
        vm = self._ha_vm(values['sid'])
        if vm.ha_state == 'error' and values.get('state') != 'disabled':
            raise PveError(500, self.HA_ERROR.format(self._ha_sid(vm)))
        res = self._ha_config(vm)
        if res is None:
            raise PveError(500, "no such resource '{0}'".format(values['sid']))
        if values.get('digest') and values['digest'] != self._ha_answer(vm, res)['digest']:
            raise PveError(500, 'detected modified configuration - file changed by other user? Try again.')
        res = dict(res)
        for key in str(values.get('delete') or '').replace(';', ',').split(','):
            res.pop(key.strip(), None)
        res.update(self._ha_params(values))
        self.ha_resources[vm.vmid] = res
        self._ha_apply(vm, res.get('state', 'started'))
        return None

    def _ha_purge(self):
        """`purge` came with pve-ha-manager 5.0.7 (commits "api: add purge parameter for resource
        deletion" and "fix #6613: update rules containing the resource to be deleted", November 2025),
        which PVE 9.1 ships; 9.0 and 8.x have no `purge` and touch no rule."""
        return self._version_tuple(self.version) >= (9, 1, 0)

    async def _harness_ha_delete(self, values, user):
        """DELETE /cluster/ha/resources/{sid}: `cannot delete service 'vm:N', not HA managed!`. From
        PVE 9.1 (_ha_purge; Config.pm delete_service_from_config) `purge`, default 1, removes the
        resource from every rule and deletes a rule left without resources; before, the schema refuses
        `purge` and no rule is touched."""
        self.require(user, '/', 'Sys.Console')
        if not self._ha_purge() and values.get('purge') is not None:
            raise param_error(purge='property is not defined in schema and the schema does not allow '
                                    'additional properties')
        vm = self._ha_vm(values['sid'])
        if self._ha_config(vm) is None:
            raise PveError(500, "cannot delete service '{0}', not HA managed!".format(self._ha_sid(vm)))
        self.ha_resources.pop(vm.vmid, None)
        vm.ha_state = None
        if self._ha_purge() and str(values.get('purge', 1)).lower() not in ('0', 'false'):
            sid = self._ha_sid(vm)
            for rule_id in list(self.ha_rules):
                rule = self.ha_rules[rule_id]
                if sid in rule['resources']:
                    rule['resources'].remove(sid)
                    if not rule['resources']:
                        del self.ha_rules[rule_id]
        return None

    # ---- HA groups (PVE 8, and PVE 9 until the CRM migrated them) and node-affinity rules (PVE 9):
    # pve-ha-manager src/PVE/API2/HA/Groups.pm and Rules.pm.

    @staticmethod
    def _parse_nodes(text):
        """pve-ha-node-list / pve-ha-group-node-list: `node[:priority]`, comma separated (priority 0)."""
        out = {}
        for part in [x for x in re.split(r'[,;\s]+', str(text or '')) if x]:
            node, _sep, prio = part.partition(':')
            out[node] = int(prio or 0)
        return out

    @staticmethod
    def _encode_nodes(nodes):
        """encode_value: `node:priority`, or `node` for priority 0."""
        return ','.join('{0}:{1}'.format(n, p) if p else n for n, p in sorted(nodes.items()))

    def _no_rules_on_8(self, method, path):
        if not self._pve9():
            raise PveError(501, "Method '{0} {1}' not implemented".format(method, path))

    def _group_answer(self, group_id):
        g = self.ha_groups[group_id]
        out = {'group': group_id, 'type': 'group', 'nodes': self._encode_nodes(g['nodes']),
               'digest': self._digest(self.ha_groups)}
        out.update({k: g[k] for k in ('restricted', 'nofailback', 'comment') if g.get(k) is not None})
        return out

    def _groups_gate(self, what):
        if self._groups_migrated():
            raise PveError(500, 'cannot {0}: ha groups have been migrated to rules'.format(what))

    async def _harness_ha_groups_list(self, values, user):
        self.require(user, '/', 'Sys.Audit')
        self._groups_gate('index groups')
        return [self._group_answer(g) for g in sorted(self.ha_groups)]

    async def _harness_ha_group_read(self, values, user):
        self.require(user, '/', 'Sys.Audit')
        self._groups_gate('read group')
        if values['group'] not in self.ha_groups:
            raise PveError(500, "no such ha group '{0}'".format(values['group']))
        return self._group_answer(values['group'])

    def _group_values(self, values, group):
        if values.get('nodes') is not None:
            group['nodes'] = self._parse_nodes(values['nodes'])
        for key in ('restricted', 'nofailback'):
            if values.get(key) is not None:
                group[key] = 1 if str(values[key]).lower() in ('1', 'true') else 0
        if values.get('comment') is not None:
            group['comment'] = str(values['comment'])
        return group

    async def _harness_ha_group_create(self, values, user):
        """POST /cluster/ha/groups: `nodes` required, `ha group ID 'X' already defined`; PVE 9 with no
        group left: `cannot create group: ha groups have been migrated to rules`."""
        self.require(user, '/', 'Sys.Console')
        self.need_quorum()
        self._groups_gate('create group')
        group_id = values['group']
        if group_id in self.ha_groups:
            raise PveError(500, "ha group ID '{0}' already defined".format(group_id))
        if not values.get('nodes'):
            raise param_error(nodes='property is missing and it is not optional')
        self.ha_groups[group_id] = self._group_values(values, {})
        return None

    async def _harness_ha_group_update(self, values, user):
        self.require(user, '/', 'Sys.Console')
        self._groups_gate('update group')
        group_id = values['group']
        if values.get('digest') and values['digest'] != self._digest(self.ha_groups):
            raise PveError(500, 'detected modified configuration - file changed by other user? Try again.')
        if group_id not in self.ha_groups:
            raise PveError(500, "no such ha group '{0}'".format(group_id))
        group = self._group_values(values, dict(self.ha_groups[group_id]))
        for key in [k for k in re.split(r'[,;\s]+', str(values.get('delete') or '')) if k]:
            group.pop(key, None)
        self.ha_groups[group_id] = group
        return None

    async def _harness_ha_group_delete(self, values, user):
        """DELETE /cluster/ha/groups/{group}: `ha group is used by service 'vm:N'` (or `ct:N`) while a
        resource names it."""
        self.require(user, '/', 'Sys.Console')
        self._groups_gate('delete group')
        group_id = values['group']
        if group_id not in self.ha_groups:
            raise PveError(500, "no such ha group '{0}'".format(group_id))
        for vmid, res in sorted(self.ha_resources.items()):
            if res.get('group') == group_id:
                guest = self.vm(vmid) or self.ct(vmid)
                sid = self._ha_sid(guest) if guest is not None else 'vm:{0}'.format(vmid)
                raise PveError(500, "ha group is used by service '{0}'".format(sid))
        del self.ha_groups[group_id]
        return None

    def _rule_answer(self, rule_id):
        """Rules.pm $get_api_ha_rule: the rule with its defaults (strict 0, disable 0), `resources` and
        `nodes` encoded, `digest` and `order`."""
        r = self.ha_rules[rule_id]
        out = {'rule': rule_id, 'type': r['type'], 'resources': ','.join(sorted(r['resources'])),
               'digest': self._digest(self.ha_rules), 'order': r['order'], 'disable': r.get('disable', 0)}
        if r['type'] == 'node-affinity':
            out['nodes'] = self._encode_nodes(r['nodes'])
            out['strict'] = r.get('strict', 0)
        if r.get('comment') is not None:
            out['comment'] = r['comment']
        return out

    def _ha_managed_sid(self, sid):
        """Whether `sid` (vm:N or ct:N) names an HA resource of a guest of that type."""
        m = re.fullmatch(r'(vm|ct):(\d+)', sid)
        if not m or int(m.group(2)) not in self.ha_resources:
            return False
        guest = self.vm(int(m.group(2))) or self.ct(int(m.group(2)))
        return guest is not None and self._ha_sid(guest) == sid

    def _rule_values(self, values, rule):
        if values.get('resources') is not None:
            rule['resources'] = sorted(set(x for x in re.split(r'[,;\s]+', str(values['resources'])) if x))
            if not rule['resources']:
                raise PveError(500, 'no resources were specified')
            unmanaged = [sid for sid in rule['resources'] if not self._ha_managed_sid(sid)]
            if unmanaged:
                raise PveError(500, 'cannot use unmanaged resource(s) {0}.'.format(', '.join(unmanaged)))
        if values.get('nodes') is not None:
            rule['nodes'] = self._parse_nodes(values['nodes'])
            if not rule['nodes']:
                raise PveError(500, 'no nodes were specified')
            missing = [n for n in sorted(rule['nodes']) if n not in self.nodes]
            if missing:
                raise PveError(500, 'cannot use non-existent node(s) {0}.'.format(', '.join(missing)))
        for key in ('strict', 'disable'):
            if values.get(key) is not None:
                rule[key] = 1 if str(values[key]).lower() in ('1', 'true') else 0
        if values.get('comment') is not None:
            rule['comment'] = str(values['comment'])
        return rule

    async def _harness_ha_rules_list(self, values, user):
        self._no_rules_on_8('GET', '/cluster/ha/rules')
        self.require(user, '/', 'Sys.Audit')
        out = [self._rule_answer(r) for r in sorted(self.ha_rules, key=lambda r: self.ha_rules[r]['order'])]
        if values.get('resource'):
            out = [r for r in out if values['resource'] in r['resources'].split(',')]
        return out

    async def _harness_ha_rule_read(self, values, user):
        self._no_rules_on_8('GET', '/cluster/ha/rules/{rule}')
        self.require(user, '/', 'Sys.Audit')
        if values['rule'] not in self.ha_rules:
            raise PveError(500, "no such ha rule '{0}'".format(values['rule']))
        return self._rule_answer(values['rule'])

    async def _harness_ha_rule_create(self, values, user):
        """POST /cluster/ha/rules: `cannot create ha rule: ha groups have not been migrated yet`, `HA rule
        'X' already defined`, `cannot use unmanaged resource(s) ...`, `cannot use non-existent node(s)
        ...`. Only node-affinity rules are modelled."""
        self._no_rules_on_8('POST', '/cluster/ha/rules')
        self.require(user, '/', 'Sys.Console')
        self.need_quorum()
        if not self._groups_migrated():
            raise PveError(500, 'cannot create ha rule: ha groups have not been migrated yet')
        if values.get('type') != 'node-affinity':
            raise BadArgs('the harness models node-affinity rules only')
        rule_id = values['rule']
        if rule_id in self.ha_rules:
            raise PveError(500, "HA rule '{0}' already defined".format(rule_id))
        if not values.get('nodes'):
            raise PveError(500, 'no nodes were specified')
        order = max([r['order'] for r in self.ha_rules.values()] + [0]) + 1
        self.ha_rules[rule_id] = self._rule_values(values, {'type': 'node-affinity', 'order': order})
        return None

    async def _harness_ha_rule_update(self, values, user):
        """PUT /cluster/ha/rules/{rule}: `type` required by the schema; `digest`, `HA rule 'X' does not
        exist`, `delete`, the same checks as create."""
        self._no_rules_on_8('PUT', '/cluster/ha/rules/{rule}')
        self.require(user, '/', 'Sys.Console')
        if not self._groups_migrated():
            raise PveError(500, 'cannot update ha rule: ha groups have not been migrated yet')
        if not values.get('type'):
            raise param_error(type='property is missing and it is not optional')
        if values.get('digest') and values['digest'] != self._digest(self.ha_rules):
            raise PveError(500, 'detected modified configuration - file changed by other user? Try again.')
        rule_id = values['rule']
        if rule_id not in self.ha_rules:
            raise PveError(500, "HA rule '{0}' does not exist".format(rule_id))
        rule = self._rule_values(values, dict(self.ha_rules[rule_id]))
        for key in [k for k in re.split(r'[,;\s]+', str(values.get('delete') or '')) if k]:
            rule.pop(key, None)
        self.ha_rules[rule_id] = rule
        return None

    async def _harness_ha_rule_delete(self, values, user):
        """DELETE /cluster/ha/rules/{rule}: `delete $rules->{ids}->{$ruleid}`, no error for a missing one."""
        self._no_rules_on_8('DELETE', '/cluster/ha/rules/{rule}')
        self.require(user, '/', 'Sys.Console')
        self.ha_rules.pop(values['rule'], None)
        return None

    # ------------------------------------------------------------ migrate

    async def migrate(self, vmid, target, secs=20, user='root@pam'):
        """fakepve's migrate (the `migrate` command: a migration started by someone else), with
        the lock written in the config as PVE's set_lock does (fakepve 0.5.0 sets it only on the
        model, so GET config showed no lock)."""
        vm = self.guest(vmid)
        self.nodes.setdefault(target, {'online': True})

        async def body():
            vm.lock = 'migrate'
            vm.config['lock'] = 'migrate'
            try:
                await self.pause(secs)
                vm.node = target
            finally:
                vm.lock = None
                vm.config.pop('lock', None)
            return 'migration finished successfully'
        return await self.task(vm.node, 'qmigrate', vmid, user, body, vm=vm, lock=False,
                               log=["starting migration of VM {0} to node '{1}'".format(vmid, target)])

    def _storage_on(self, sid, node):
        """Whether storage `sid` is enabled on `node` (its `nodes` list, when set)."""
        store = self.storages.get(sid)
        if store is None or store.get('disable'):
            return False
        nodes = [n for n in str(store.get('nodes') or '').replace(';', ',').split(',') if n]
        return not nodes or node in nodes

    def _migrate_local_disks(self, vm):
        """qemu-server src/PVE/API2/Qemu.pm $check_vm_disks_local: every volume of the config on
        storage that is not shared, CD-ROM images and the cloud-init drive included (`cdrom => 1`),
        an empty drive (`none`) skipped; `unusedN` volumes with `is_unused => 1`."""
        out = []
        for key, volume, props in drives_of(vm.config):
            if not volume or volume == 'none':
                continue
            sid, _name = volume_ref(volume)
            if sid is not None and (self.storages.get(sid) or {}).get('shared'):
                continue
            disk = {'volid': volume}
            if is_cdrom(volume, props) or 'cloudinit' in volume:
                disk['cdrom'] = 1
            else:
                disk['size'] = self._parse_size(props.get('size'))
            out.append(disk)
        for key in sorted(k for k in vm.config if re.fullmatch(r'unused\d+', k)):
            volume = vm.config[key]
            sid, _name = volume_ref(volume)
            if sid is None or not (self.storages.get(sid) or {}).get('shared'):
                out.append({'volid': volume, 'is_unused': 1})
        return out

    @staticmethod
    def _migrate_local_resources(vm):
        """PVE::QemuMigrate::Helpers::check_local_resources: passed-through PCI and USB devices
        (not spice USB), serial and parallel ports on host devices, ivshmem."""
        out = []
        for key in sorted(vm.config):
            value = str(vm.config[key])
            if re.fullmatch(r'hostpci\d+', key) or key == 'ivshmem':
                out.append(key)
            elif re.fullmatch(r'usb\d+', key) and 'spice' not in value:
                out.append(key)
            elif re.fullmatch(r'(serial|parallel)\d+', key) and value.startswith('/dev/'):
                out.append(key)
        return out

    async def _harness_migrate_check(self, values, user):
        """GET /nodes/{node}/qemu/{vmid}/migrate as migrate_vm_precondition: quorum, the config on
        this node, its lock (`VM is locked (...)`), then `running`, `allowed_nodes`,
        `not_allowed_nodes` ({node: {unavailable_storages}}), `local_disks`, `local_resources`.
        fakepve 0.5.0 has no qemu migration."""
        self.require(user, '/vms/{0}'.format(values['vmid']), 'VM.Migrate')
        self.need_quorum()
        vm = self.find(values['node'], int(values['vmid']))
        self._check_lock(vm)
        allowed, not_allowed = [], {}
        sids = sorted({volume_ref(v)[0] for _k, v, _p in drives_of(vm.config)
                       if v and v not in ('none', 'cdrom') and volume_ref(v)[0]})
        for node in sorted(self.nodes):
            if node == vm.node:
                continue
            missing = [sid for sid in sids if not self._storage_on(sid, node)]
            if missing:
                not_allowed[node] = {'unavailable_storages': missing}
            else:
                allowed.append(node)
        return {'running': 1 if vm.status == 'running' else 0, 'allowed_nodes': allowed,
                'not_allowed_nodes': not_allowed, 'local_disks': self._migrate_local_disks(vm),
                'local_resources': self._migrate_local_resources(vm), 'mapped-resources': [],
                'mapped-resource-info': {}, 'has-dbus-vmstate': 1}

    async def _harness_migrate(self, values, user):
        """POST /nodes/{node}/qemu/{vmid}/migrate as migrate_vm and PVE::QemuMigrate: `target is
        local node.` (400), quorum, `no such cluster node`, the lock, `can't migrate running VM
        without --online`, storage availability on the target; an HA-managed VM gets an `hamigrate`
        task and the HA manager moves it later; else a `qmigrate` task holding lock `migrate`
        that dies on local devices, a local CD-ROM image (`can't migrate VM - check log`) and an
        attached local disk of a running VM without `with-local-disks`, then moves the VM (a
        running VM keeps running)."""
        node, vmid, target = values['node'], int(values['vmid']), values.get('target', '')
        self.require(user, '/vms/{0}'.format(vmid), 'VM.Migrate')
        if target == node:
            raise PveError(400, 'Parameter verification failed.', {'target': 'target is local node.'})
        self.need_quorum()
        if target not in self.nodes:
            raise PveError(500, "no such cluster node '{0}'".format(target))
        vm = self.find(node, vmid)
        self._check_lock(vm)
        online = str(values.get('online', '0')) in ('1', 'true')
        local_disks = str(values.get('with-local-disks', '0')) in ('1', 'true')
        if vm.status == 'running' and not online:
            raise PveError(500, "can't migrate running VM without --online")
        for _key, volume, _props in drives_of(vm.config):
            sid = volume_ref(volume)[0] if volume and volume not in ('none', 'cdrom') else None
            if sid and not self._storage_on(sid, target):
                raise PveError(500, "storage '{0}' is not available on node '{1}'".format(sid, target))
        blockers = self._migrate_local_resources(vm)
        disks = self._migrate_local_disks(vm)

        async def move():
            if blockers:
                raise TaskError("can't migrate VM which uses local devices: {0}".format(', '.join(blockers)))
            for disk in disks:
                if disk.get('cdrom') and 'cloudinit' not in disk['volid']:
                    raise TaskError("can't migrate VM - check log")
            attached = [d for d in disks if not d.get('cdrom') and not d.get('is_unused')]
            if vm.status == 'running' and attached and not local_disks:
                raise TaskError("can't live migrate attached local disks without with-local-disks option")
            vm.lock = 'migrate'
            vm.config['lock'] = 'migrate'
            try:
                await self.pause(self.migrate_secs)
                vm.node = target
            finally:
                vm.lock = None
                vm.config.pop('lock', None)
            return 'migration finished successfully'
        if vm.ha_managed:
            async def later():
                await self.pause(self.ha_delay)
                try:
                    await move()
                except TaskError:
                    pass  # the HA manager logs it; the VM stays

            async def ha():
                asyncio.ensure_future(later())
                return 'Requesting HA migration for VM {0} to node {1}'.format(vmid, target)
            return await self.task(vm.node, 'hamigrate', vmid, user, ha, vm=vm, lock=False)
        return await self.task(vm.node, 'qmigrate', vmid, user, move, vm=vm, lock=False,
                               log=["starting migration of VM {0} to node '{1}'".format(vmid, target)])

    # ---- machine pinning, as qemu-server's PVE/QemuServer/Machine.pm does it (fakepve 0.5.0
    # keeps `machine` as sent).

    @staticmethod
    def _windows_version(ostype):
        """PVE/QemuServer/Helpers.pm windows_version: wxp/w2k/w2k3 5, w2k8/wvista 6, winN N, else 0."""
        ostype = str(ostype or '')
        if ostype in ('wxp', 'w2k3', 'w2k'):
            return 5
        if ostype in ('w2k8', 'wvista'):
            return 6
        m = re.fullmatch(r'win(\d+)', ostype)
        return int(m.group(1)) if m else 0

    def _installed_machine_version(self):
        """latest_installed_machine_version: the release's QEMU major.minor and the highest +pveN
        of $PVE_MACHINE_VERSION for it (PVE 9.x ships QEMU 10.0: 10.0+pve1; 8.4 ships 9.2: 9.2+pve1)."""
        return '10.0+pve1' if not str(self.version).startswith('8') else '9.2+pve1'

    def _pin_machine(self, machine, ostype):
        """check_and_pin_machine_string: for a Windows ostype, a machine without a version (absent,
        `pc`, `q35`, `virt`) becomes `pc-i440fx-V` / `pc-q35-V` / `virt-V` (windows_get_pinned_machine_version;
        absent is the arch default `pc`), its other options kept. Returns the machine string to write
        (print_machine), '' when there is none."""
        parts = [x for x in str(machine or '').split(',') if x]
        kind, rest = None, []
        for part in parts:
            key, sep, val = part.partition('=')
            if not sep:
                kind = part
            elif key == 'type':
                kind = val
            else:
                rest.append(part)
        if kind in (None, 'pc', 'q35', 'virt') and self._windows_version(ostype):
            base = {None: 'pc-i440fx', 'pc': 'pc-i440fx', 'q35': 'pc-q35', 'virt': 'virt'}[kind]
            kind = '{0}-{1}'.format(base, self._installed_machine_version())
        return ','.join(([kind] if kind else []) + rest)

    async def _qm_create(self, v, user):
        """create_vm: `always pin Windows' machine version on create` (check_and_pin_machine_string)."""
        v = dict(v)
        self._option_checks(user, v)
        pinned = self._pin_machine(v.get('machine'), v.get('ostype'))
        if pinned:
            v['machine'] = pinned
        return await super()._qm_create(v, user)

    def _pin_on_ostype(self, vm, p):
        """update_vm_api on an `ostype` change: `Check if machine version pinning is needed when
        switching OS type, just like upon creation. Skip if 'machine' is explicitly set or removed at
        the same time`; the result goes to pending (applied at once on a stopped VM)."""
        deletes = [k for k in re.split(r'[,;\s]+', str(p.get('delete') or '')) if k]
        if 'ostype' not in p or 'machine' in p or 'machine' in deletes or 'machine' in vm.pending:
            return
        pinned = self._pin_machine(vm.config.get('machine'), p['ostype'])
        if pinned:
            p['machine'] = pinned

    # ---- permissions qemu-server checks on a VM's options, and the bridges a token may see
    # (fakepve 0.5.0 checks each key's VM.Config.* privilege only).

    @staticmethod
    def _version_tuple(version):
        return tuple(int(x) for x in (re.findall(r'\d+', str(version)) + ['0', '0', '0'])[:3])

    def _cpu_model_privilege(self, cputype):
        """PVE/API2/Qemu.pm $check_cpu_model_access for a custom model (`custom-NAME`): Mapping.Use on
        /mapping/cpu/NAME from qemu-server 9.1.13 (commit "api: gate VM custom CPU model assignment with
        Mapping.Use"; pve-manager 9.1.15 depends on it), Sys.Audit on /nodes before."""
        name = cputype[len('custom-'):]
        if self._version_tuple(self.version) >= (9, 1, 15):
            return '/mapping/cpu/' + name, 'Mapping.Use'
        return '/nodes', 'Sys.Audit'

    @staticmethod
    def _cputype(value):
        """pve-vm-cpu-conf's cputype: the bare first value or `cputype=`."""
        first, props = split_props(str(value or ''))
        return props.get('cputype', first)

    def _vnet_paths(self, value):
        """pve-guest-common PVE/GuestHelpers.pm check_vnet_access for one netN value (zone
        `localnetwork`: the harness has no SDN VNets): with `tag`, /sdn/zones/localnetwork/BRIDGE/TAG;
        with `trunks`, the same for each VLAN of them (get_tags_from_trunk: `a-b` is every VLAN from a
        to b); with neither, /sdn/zones/localnetwork/BRIDGE."""
        _first, props = split_props(str(value))
        bridge = props.get('bridge')
        if not bridge:
            return []
        base = '/sdn/zones/localnetwork/' + bridge
        tags = set()
        if props.get('tag'):
            tags.add(int(props['tag']))
        for part in [x for x in str(props.get('trunks') or '').split(';') if x]:
            lo, _sep, hi = part.partition('-')
            if hi and int(hi) > int(lo):
                tags.update(range(int(lo), int(hi) + 1))
            else:
                tags.add(int(lo))
        return [base + '/' + str(t) for t in sorted(tags)] if tags else [base]

    def _option_checks(self, user, params, deletes=(), existing=None):
        """What create_vm and update_vm_api check beyond each key's VM.Config.* privilege, before any
        change (root@pam is exempt from all):
        - $check_vm_modify_config_perm: `special case for startup since it changes host behaviour`,
          `$rpcenv->check_full($authuser, "/", ['Sys.Modify'])`, for a set or a deleted startup
          (since 2016: 8.4 and 9.x);
        - $check_cpu_model_access: a custom CPU model needs _cpu_model_privilege, unless the VM's
          current model is the same;
        - PVE::QemuServer::check_bridge_access: SDN.Use on each NIC's _vnet_paths (a deleted NIC's
          current value too)."""
        if user == 'root@pam':
            return
        if 'startup' in params or 'startup' in deletes:
            self.require(user, '/', 'Sys.Modify')
        if params.get('cpu') is not None:
            cputype = self._cputype(params['cpu'])
            current = self._cputype((existing or {}).get('cpu')) if existing else None
            if cputype and cputype.startswith('custom-') and cputype != current:
                path, priv = self._cpu_model_privilege(cputype)
                self.require(user, path, priv)
        nets = [params[k] for k in sorted(params) if re.fullmatch(r'net\d+', k)]
        nets += [(existing or {})[k] for k in deletes if re.fullmatch(r'net\d+', k) and k in (existing or {})]
        for value in nets:
            for path in self._vnet_paths(value):
                self.require(user, path, 'SDN.Use')

    async def _config_put(self, request):
        """update_vm_api's checks before any change (see _option_checks). The synchronous PUT makes
        new volumes while the client waits: on a storage whose `alloc_secs` (a scenario storage option)
        pass pveproxy's 30 s forward timeout (pve-http-server PVE/APIServer/AnyEvent.pm proxy_request,
        `timeout => 30`), the change is made and the client gets `596 Connection timed out` with no
        body. The asynchronous POST makes them in its qmconfig task instead."""
        await self._config_request_checks(request)
        p = await params(request)
        slow = 0.0
        for key in p:
            if DRIVE_KEY.match(key):
                found = NEW_DISK.match(split_drive(str(p[key]))[0])
                if found and found.group(1):
                    slow += float((self.storages.get(found.group(1)) or {}).get('alloc_secs') or 0)
        response = await super()._config_put(request)
        if slow <= PROXY_TIMEOUT:
            return response
        lost = web.Response(status=596, reason='Connection timed out', body=b'')
        lost.force_close()
        return lost

    async def _config_post(self, request):
        """The same checks, before the qmconfig task is forked."""
        await self._config_request_checks(request)
        return await super()._config_post(request)

    async def _config_request_checks(self, request):
        p = await params(request)
        vm = self._vm(request)
        deletes = [k for k in re.split(r'[,;\s]+', str(p.get('delete') or '')) if k]
        self._option_checks(request[USER], p, deletes, vm.config)

    def _may_see_bridge(self, user, bridge):
        """pve-manager PVE/API2/Network.pm index lists a bridge only if the caller may access it:
        RPCEnvironment::check_sdn_bridge(user, 'localnetwork', bridge, ['SDN.Audit', 'SDN.Use']): on
        /sdn/zones/localnetwork/BRIDGE, or on a VLAN path below it that has an ACL."""
        path = '/sdn/zones/localnetwork/' + bridge
        privs = ('SDN.Audit', 'SDN.Use')
        if any(self.allowed(user, path, p) for p in privs):
            return True
        below = set(acl_path for grants in (self.acl or {}).values() for acl_path, _p in grants
                    if acl_path.startswith(path + '/'))
        return any(self.allowed(user, vlan, p) for vlan in below for p in privs)

    def _nic_mtu_error(self, vm):
        """PVE/QemuServer.pm print_netdevice_full at start, for a virtio NIC on a bridge: `mtu` absent or 1
        is the bridge's; below 576 `netdev netN: MTU 'M' is smaller than the IP minimum MTU '576'`; above
        the bridge's (read_bridge_mtu) `netdev netN: MTU 'M' is bigger than the bridge MTU 'B'`."""
        config = dict(vm.config)
        config.update(dict((k, v) for k, v in vm.pending.items() if v is not None))
        for key in sorted((k for k in config if re.fullmatch(r'net\d+', k)), key=lambda k: int(k[3:])):
            first, props = split_props(str(config[key]))
            model = (first or '').partition('=')[0] if first else None
            model = next((k for k in props if k in NET_MODELS), model or props.get('model'))
            if model != 'virtio' or not props.get('bridge') or not props.get('mtu'):
                continue
            mtu, bridge_mtu = int(props['mtu']), int(self.bridge_mtus.get(props['bridge'], 1500))
            if mtu == 1:
                continue
            if mtu < 576:
                return "netdev {0}: MTU '{1}' is smaller than the IP minimum MTU '576'".format(key, mtu)
            if mtu > bridge_mtu:
                return ("netdev {0}: MTU '{1}' is bigger than the bridge MTU '{2}' - adjust the MTU for the network "
                        "device in the VM configuration, while ensuring that the bridge is configured as desired."
                        .format(key, mtu, bridge_mtu))
        return None

    async def _do_start(self, vm, user, p):
        """vm_start dies in its worker when a virtio NIC's MTU does not fit its bridge (_nic_mtu_error);
        an HA-managed VM gets an `hastart` task (_ha_start_task)."""
        if vm.ha_managed and not vm.template:
            return await self._ha_start_task(vm, user)
        error = self._nic_mtu_error(vm)
        if error is None:
            return await super()._do_start(vm, user, p)

        async def body():
            raise TaskError(error)
        return await self.task(vm.node, 'qmstart', vm.vmid, user, body, vm=vm)

    def bridges_of(self, node):
        return self.bridges.get(node, self.default_bridges)

    async def _harness_network(self, values, user):
        node = values['node']
        kind = values.get('type')
        out = []
        if kind in (None, 'bridge', 'any_bridge', 'any_local_bridge'):
            for idx, name in enumerate(self.bridges_of(node)):
                if not self._may_see_bridge(user, name):
                    continue
                item = {'iface': name, 'type': 'bridge', 'method': 'manual', 'method6': 'manual',
                        'families': ['inet'], 'priority': 3 + idx, 'active': 1, 'autostart': 1, 'exists': 1,
                        'bridge_ports': 'eno1' if idx == 0 else '', 'bridge_stp': 'off', 'bridge_fd': '0'}
                if name in self.bridge_mtus:
                    item['mtu'] = self.bridge_mtus[name]
                if idx == 0:
                    item.update(method='static', address='192.0.2.11', netmask='255.255.255.0',
                                cidr='192.0.2.11/24', gateway='192.0.2.1')
                out.append(item)
        if kind in (None, 'eth'):
            out.append({'iface': 'eno1', 'type': 'eth', 'method': 'manual', 'method6': 'manual',
                        'families': ['inet'], 'priority': 2, 'active': 1, 'exists': 1})
        return out


# ------------------------------------------------------------------ scenario


def _node_list(value):
    if not isinstance(value, list):
        raise BadArgs('nodes: expected a list of {name, online}')
    out = []
    for item in value:
        if isinstance(item, str):
            item = {'name': item}
        if not isinstance(item, dict) or 'name' not in item:
            raise BadArgs('nodes: each entry needs a name: {0!r}'.format(item))
        out.append((str(item['name']), bool(item.get('online', True))))
    return out


def set_storage(pve, name, options):
    """Merge options into the storage `name` (made if new) with the keys fakepve's state needs."""
    if not isinstance(options, dict):
        raise BadArgs('storage {0}: expected an object of options'.format(name))
    store = pve.storages.setdefault(name, {'active': 1, 'files': set()})
    for key, val in options.items():
        if key == 'files':
            val = set(val)
        elif key == 'content' and isinstance(val, list):
            val = ','.join(val)
        store[key] = val
    store.setdefault('type', 'dir')
    store.setdefault('files', set())
    store.setdefault('active', 1)
    if store['type'] in ('dir', 'btrfs') and 'path' not in store:
        store['path'] = '/mnt/pve/' + name
    if store['type'] == 'lvmthin':
        store.setdefault('vgname', 'pve')
        store.setdefault('thinpool', 'data')
    if store['type'] == 'lvm':
        store.setdefault('vgname', 'pve')
    if store['type'] == 'zfspool':
        store.setdefault('pool', 'rpool/data')
    return store


def add_vm(pve, vmid, name=None, node='pve1', status='stopped', template=False, config=None, tags=None, lock=None,
           pool=None, pending=None, qmpstatus=None, **attrs):
    """Add a VM; attrs are the VM_ATTRS."""
    vmid = int(vmid)
    if pve.guest(vmid) is not None:
        raise BadArgs('VM {0} already exists'.format(vmid))
    config = dict(config or {})
    if name is None:
        name = config.get('name') or 'VM {0}'.format(vmid)
    if tags is not None:
        config['tags'] = ';'.join(tags) if isinstance(tags, list) else str(tags)
    if template:
        config.setdefault('template', 1)
    if lock:
        config['lock'] = lock
    vm = pve.add_vm(vmid, name, node=node, status=status, qmpstatus=qmpstatus, config=config, pending=pending,
                    template=bool(template), lock=lock, pool=pool)
    set_vm_attrs(vm, attrs)
    return vm


def set_vm_attrs(vm, attrs):
    unknown = sorted(set(attrs) - set(VM_ATTRS))
    if unknown:
        raise BadArgs('unknown VM attributes {0}; allowed: {1}'.format(', '.join(unknown), ', '.join(VM_ATTRS)))
    # status first: it sets qmpstatus too, which a given qmpstatus (paused) then overrides.
    for key, val in sorted(attrs.items(), key=lambda kv: kv[0] != 'status'):
        if key == 'status':
            if val not in ('running', 'stopped'):
                raise BadArgs("status must be 'running' or 'stopped'")
            vm.status = vm.qmpstatus = val
            vm.started_at = time.time() if val == 'running' else None
        elif key == 'stats':
            vm.stats = dict(val or {})
        elif key == 'uptime':
            # Seconds since a running VM started, as the listing says (a start in the past).
            vm.started_at = time.time() - float(val) if vm.status == 'running' else None
        elif key == 'agent':
            # An agent that answers runs in a VM whose config enables it (qemu-server asks the
            # config first: assert_agent_available).
            vm.agent = val
            if val is not None and vm.config.get('agent') is None:
                vm.config['agent'] = '1'
        else:
            setattr(vm, key, val)


def set_bridges(pve, bridges, node=None):
    if isinstance(bridges, dict):
        if node is not None:
            raise BadArgs('give bridges as a list when node is given')
        for name, names in bridges.items():
            set_bridges(pve, names, name)
        return
    if not isinstance(bridges, list) or not all(isinstance(b, str) for b in bridges):
        raise BadArgs('bridges: expected a list of names, or {node: [names]}')
    if node is None:
        pve.default_bridges = list(bridges)
        pve.bridges = {}
    else:
        pve.bridges[node] = list(bridges)


def set_standalone(pve, on):
    if on and len(pve.nodes) != 1:
        raise BadArgs('a standalone node is one node; nodes: {0}'.format(', '.join(sorted(pve.nodes))))
    pve.standalone = on


def apply_scenario(pve, sc):
    unknown = sorted(set(sc) - set(SCENARIO_KEYS))
    if unknown:
        raise BadArgs('unknown scenario keys {0}; known: {1}'.format(', '.join(unknown), ', '.join(SCENARIO_KEYS)))
    if 'nodes' in sc:
        pve.nodes = {}
        for name, online in _node_list(sc['nodes']):
            pve.add_node(name, online)
    for name, options in (sc.get('storages') or {}).items():
        set_storage(pve, name, options)
    for vm in sc.get('vms') or []:
        if not isinstance(vm, dict) or 'vmid' not in vm:
            raise BadArgs('vms: each entry needs a vmid: {0!r}'.format(vm))
        add_vm(pve, **vm)
    for ct in sc.get('cts') or []:
        if not isinstance(ct, dict) or 'vmid' not in ct:
            raise BadArgs('cts: each entry needs a vmid: {0!r}'.format(ct))
        add_container(pve, **ct)
    for f in sc.get('files') or []:
        pve.store_file(f['storage'], f['name'], int(f.get('size', 0)), f.get('content', 'iso'))
    for tok in sc.get('tokens') or []:
        pve.apitokens[tok['id']] = tok['secret']
    pve.users.update(sc.get('users') or {})
    for g in sc.get('grants') or []:
        pve.grant(g['user'], g['path'], *g['privs'])
    if 'version' in sc:
        pve.version = str(sc['version'])
        pve.release_version = '.'.join(pve.version.split('.')[:2])
    if 'time_scale' in sc:
        pve.time_scale = float(sc['time_scale'])
    if 'quorate' in sc:
        pve.quorate = bool(sc['quorate'])
    if 'cluster_name' in sc:
        pve.cluster_name = str(sc['cluster_name'])
    if sc.get('standalone'):
        set_standalone(pve, True)
    if 'bridges' in sc:
        set_bridges(pve, sc['bridges'])
    # bridge -> MTU, as /etc/network/interfaces sets it (see set_bridge_mtu).
    for bridge, mtu in (sc.get('bridge_mtus') or {}).items():
        pve.bridge_mtus[bridge] = int(mtu)
    if 'datacenter' in sc:
        pve.datacenter = dict(sc['datacenter'])
    # node -> {maxmem, mem} in bytes (see set_node_memory).
    for node, memory in (sc.get('node_memory') or {}).items():
        pve.node_memory[str(node)] = dict(memory)
    for name in sc.get('pools') or []:
        pve.pools.setdefault(str(name), set())
        pve._pool_meta(str(name))
    # [{url, size?, data?, status?}]: the fake internet download-url fetches from (remote_file).
    for f in sc.get('remote_files') or []:
        if not isinstance(f, dict) or 'url' not in f:
            raise BadArgs('remote_files: each entry needs a url: {0!r}'.format(f))
        add_remote_file(pve, **f)


# ------------------------------------------------------------------ commands


CT_ARGS = ('vmid', 'name', 'node', 'status', 'config', 'template', 'lock', 'pool')


def add_container(pve, **kwargs):
    """A container (fakepve's FakeCt) with its config; `template: true` makes a CT template."""
    unknown = sorted(set(kwargs) - set(CT_ARGS))
    if unknown:
        raise BadArgs('cts: unknown keys {0}; known: {1}'.format(', '.join(unknown), ', '.join(CT_ARGS)))
    kwargs['vmid'] = int(kwargs['vmid'])
    try:
        return pve.add_ct(**kwargs)
    except ValueError as e:
        raise BadArgs(str(e)) from None


def _is_ct(guest):
    """Whether a guest of the model is a container (fakepve's, listed as lxc/N)."""
    return str(getattr(guest, 'guest', '')).startswith('lxc/')


def dump_ct(ct):
    return jsonable({
        'vmid': ct.vmid, 'name': ct.name, 'node': ct.node, 'status': ct.status, 'template': ct.template,
        'lock': ct.lock, 'pool': ct.pool, 'config': ct.config, 'pending': ct.pending,
        'ha_state': ct.ha_state,
    })


def vm_of(pve, vmid):
    vm = pve.vm(int(vmid))
    if vm is None:
        raise BadArgs('no VM {0}'.format(vmid))
    return vm


def guest_of(pve, vmid):
    """The VM or container with this id (fakepve's guest())."""
    guest = pve.guest(int(vmid))
    if guest is None:
        raise BadArgs('no VM or container {0}'.format(vmid))
    return guest


def guest_type(guest):
    """PVE's word for the guest in its messages: qemu-server's and pve-container's guest_type."""
    return 'CT' if _is_ct(guest) else 'VM'


def set_guest_lock(guest, lock):
    """The lock in the guest's config (None: cleared). fakepve keeps a VM's in its config too; a
    container's config shows its `lock` attribute."""
    guest.lock = lock
    if not _is_ct(guest):
        if lock is None:
            guest.config.pop('lock', None)
        else:
            guest.config['lock'] = lock


def dump_vm(vm):
    return jsonable({
        'vmid': vm.vmid, 'name': vm.name, 'node': vm.node, 'status': vm.status, 'qmpstatus': vm.qmpstatus,
        'template': bool(vm.template), 'lock': vm.lock, 'pool': vm.pool, 'config': vm.config,
        'pending': vm.pending, 'snapshots': sorted(vm.snapshots), 'ha_state': vm.ha_state,
        'config_lock_held': vm.lock_holder is not None,
        'attrs': dict((k, getattr(vm, k)) for k in VM_ATTRS if k not in ('status', 'qmpstatus', 'ha_state', 'uptime')),
    })


class Commands(object):
    """One method per command; its keyword parameters are the command's args."""

    def __init__(self, pve, stop):
        self.pve = pve
        self.stop_event = stop

    def ping(self):
        return {'pong': True, 'fakepve': __version__}

    def add_ceph_storage(self, name='ceph-pool', pool='rbd'):
        """A shared RBD storage; VMs with disks on it feel ceph_slow and ceph_down."""
        self.pve.add_ceph_storage(name, pool)
        return None

    def ceph_slow(self, secs, health='HEALTH_WARN'):
        """Every RBD-backed operation (a clone to the storage, a start) takes secs PVE seconds longer."""
        self.pve.ceph_slow(secs, health)
        return None

    def stop(self):
        self.stop_event.set()
        return None

    # faults
    def fail(self, method, suffix=None, path=None, status=None, message=None, error=None, html=False, times=None):
        """Answer METHOD requests whose path ends with suffix (or matches a schema template) with an error."""
        suffix = suffix or path
        if not suffix:
            raise BadArgs('fail needs suffix (or path)')
        self.pve.fail(method.upper(), suffix, status=status, message=message, html=html, error=error, times=times)
        return None

    def clear_failures(self, method=None, suffix=None, path=None):
        suffix = suffix or path
        if method is None and suffix is None:
            self.pve.failures.clear()
        else:
            for key in [k for k in self.pve.failures
                        if (method is None or k[0] == method.upper()) and (suffix is None or k[1] == suffix)]:
                del self.pve.failures[key]
        return None

    def failures(self):
        return [dict(rule, method=m, suffix=s) for (m, s), rule in self.pve.failures.items()]

    def errors_for(self, method, path, params=None):
        return jsonable(self.pve.errors_for(method.upper(), path, params))

    def flaky_network(self, drop_rate=0.0, hang_rate=0.0, hang_secs=120, seed=None):
        self.pve.flaky_network(float(drop_rate), float(hang_rate), hang_secs, seed)
        if seed is not None:
            self.pve._random.seed(seed)
        return None

    def slow_network(self, latency, jitter=0.0, node=None):
        self.pve.slow_network(float(latency), float(jitter), node)
        return None

    def set_node_offline(self, node, offline=True):
        if node not in self.pve.nodes:
            raise BadArgs('no node {0!r}; nodes: {1}'.format(node, ', '.join(sorted(self.pve.nodes))))
        self.pve.set_node_offline(node, bool(offline))
        return None

    def set_standalone(self, on=True):
        """A standalone node (on) or a cluster (off, as after `pvecm create`): what /cluster/status answers."""
        set_standalone(self.pve, bool(on))

    def lose_quorum(self):
        self.pve.lose_quorum()

    def regain_quorum(self):
        self.pve.regain_quorum()

    async def hold_config_lock(self, vmid, secs=None):
        """Hold the guest's config lock for secs PVE seconds (None: until release_config_lock): a
        VM's (/var/lock/qemu-server/lock-N.conf) or a container's (/run/lock/lxc/pve-config-N.lock)."""
        vm = guest_of(self.pve, vmid)
        try:
            await self.pve.hold_config_lock(vm.vmid, secs)
        except TaskError as e:
            raise BadArgs('config lock of {0} {1} is already held: {2}'.format(guest_type(vm), vm.vmid, e)) from None
        return None

    def release_config_lock(self, vmid):
        self.pve.release_config_lock(guest_of(self.pve, vmid).vmid)

    def snapshot_lock(self, vmid, lock='snapshot'):
        set_guest_lock(guest_of(self.pve, vmid), lock)

    def unlock(self, vmid):
        set_guest_lock(guest_of(self.pve, vmid), None)

    def time_scale(self, value):
        self.pve.time_scale = float(value)

    def revoke_tickets(self):
        self.pve.revoke_tickets()

    async def backup(self, vmid, secs=30, single=False):
        """A vzdump job backing up the VM for secs PVE seconds; returns the task's UPID.

        pve-manager PVE/API2/VZDump.pm: `$taskid = $local_vmids->[0] if scalar(@{$local_vmids})
        == 1; ... fork_worker('vzdump', $taskid, ...)`: a job over several guests (a scheduled
        backup) has an EMPTY id, so `GET .../tasks?vmid=N` does not list it; single=True gives
        the one-guest id. The guest holds `lock: backup` meanwhile (a VM: VZDump::QemuServer prepare; a
        container: pve-container src/PVE/VZDump/LXC.pm lock_vm, `set_lock($vmid, 'backup')`).
        """
        pve = self.pve
        vm = guest_of(pve, vmid)
        if vm.lock:
            raise BadArgs('{0} is locked ({1})'.format(guest_type(vm), vm.lock))
        set_guest_lock(vm, 'backup')

        async def body():
            try:
                await pve.pause(secs)
            finally:
                if vm.lock == 'backup':
                    set_guest_lock(vm, None)
            return 'INFO: Finished Backup of {0} {1}'.format(guest_type(vm), vm.vmid)
        return await pve.task(vm.node, 'vzdump', vm.vmid if single else '', 'root@pam', body, lock=False,
                              log=['INFO: starting new backup job: vzdump {0}'.format(vm.vmid)])

    async def task_with_log(self, node='pve1', type='qmstart', id='', lines=0, error=None, secs=0):  # noqa: A002
        """A task of `type` on node with `lines` log lines (`line 1` ...), ending after secs PVE
        seconds (times time_scale) with `error` (a TASK ERROR) or OK; returns its UPID."""
        if node not in self.pve.nodes:
            raise BadArgs('no node {0!r}'.format(node))
        if float(secs) < 0:
            raise BadArgs('secs must not be negative')

        async def body():
            await self.pve.pause(float(secs))
            if error:
                raise TaskError(error)
            return None
        return await self.pve.task(node, type, id, 'root@pam', body, lock=False,
                                   log=['line {0}'.format(i) for i in range(1, int(lines) + 1)])

    def connections(self):
        """How many client connections requests came on (see COMMANDS)."""
        return len(self.pve.connections_seen)

    def task_polls(self, reset=False):
        """{in_flight, max_in_flight, status, listings} of the task reads (see COMMANDS)."""
        polls = dict(self.pve.task_polls)
        if reset:
            self.pve.task_polls.update(max_in_flight=self.pve.task_polls['in_flight'], status=0, listings=0)
        return polls

    def hibernate(self, vmid):
        """The VM as `qm suspend --todisk` leaves it (qemu-server QemuServer/RunState.pm: `quit`,
        then `$conf->{lock} = 'suspended'`): stopped, locked `suspended`, no task; start resumes."""
        vm = vm_of(self.pve, vmid)
        vm.status = vm.qmpstatus = 'stopped'
        vm.started_at = None
        vm.lock = 'suspended'
        vm.config['lock'] = 'suspended'
        return dump_vm(vm)

    def create_timing(self, create_secs=0, clone_secs=0, answer_delay=0, listed_name=False):
        """qmcreate / qmclone take create_secs / clone_secs PVE seconds with PVE's lock window, and
        their POST answers answer_delay PVE seconds after the locked VM exists (see COMMANDS).
        listed_name: /cluster/resources names a VM in its window `VM <vmid>` (as once pvestatd
        has reported it: vmstatus's `$conf->{name} || "VM $vmid"`) instead of no name."""
        values = [float(v) for v in (create_secs, clone_secs, answer_delay)]
        if any(v < 0 for v in values):
            raise BadArgs('times must not be negative')
        self.pve.create_secs, self.pve.clone_secs, self.pve.answer_delay = values
        self.pve.window_listed_name = bool(listed_name)

    def template_timing(self, secs=0):
        """A VM's qmtemplate takes secs PVE seconds: template=1 at its start, disks renamed at its
        end, the config lock held meanwhile (see COMMANDS). 0 turns it off."""
        if float(secs) < 0:
            raise BadArgs('times must not be negative')
        self.pve.template_secs = float(secs)

    def templating(self):
        """The VMIDs whose qmtemplate task (template_timing) still runs."""
        return sorted(self.pve.templating)

    def clones_while_templating(self):
        """[{vmid, newid}]: the clone requests of a VM whose qmtemplate task still ran."""
        return list(self.pve.clones_while_templating)

    def destroy_timing(self, secs=0):
        """A VM's qmdestroy takes secs PVE seconds before it removes the VM (see COMMANDS)."""
        if float(secs) < 0:
            raise BadArgs('times must not be negative')
        self.pve.vm_destroy_secs = float(secs)

    def ct_timing(self, create_secs=0, clone_secs=0, destroy_secs=0, migrate_secs=0, start_secs=0,
                  create_tail_secs=0):
        """vzcreate / vzclone / vzdestroy / vzmigrate take these PVE seconds (fakepve's ct_secs); a
        container made by a vzcreate takes start_secs PVE seconds to start; a vzcreate goes on
        create_tail_secs more after it wrote the config without its lock."""
        values = [float(v) for v in (create_secs, clone_secs, destroy_secs, migrate_secs, start_secs,
                                     create_tail_secs)]
        if any(v < 0 for v in values):
            raise BadArgs('times must not be negative')
        for key, value in zip(('create', 'clone', 'destroy', 'migrate'), values):
            self.pve.ct_secs[key] = value
        self.pve.new_ct_start_secs = values[4]
        self.pve.ct_create_tail_secs = values[5]

    def snapshot_timing(self, secs=0):
        """A container's vzsnapshot, vzrollback and vzdelsnapshot take secs PVE seconds, holding their
        locks meanwhile (see COMMANDS)."""
        value = float(secs)
        if value < 0:
            raise BadArgs('times must not be negative')
        for key in ('snapshot', 'rollback', 'delsnapshot'):
            self.pve.ct_secs[key] = value

    def new_vm_timing(self, start_secs=0):
        """A VM made by a create or clone takes start_secs PVE seconds to start."""
        value = float(start_secs)
        if value < 0:
            raise BadArgs('times must not be negative')
        self.pve.new_vm_start_secs = value

    def clone_contention(self, max_clones=None, wait_secs=10):
        """At most max_clones clones at once per node; a further one fails after wait_secs PVE
        seconds with PVE's storage-lock timeout (see COMMANDS). None: no limit."""
        if max_clones is not None and (isinstance(max_clones, bool) or not isinstance(max_clones, int)
                                       or max_clones < 0):
            raise BadArgs('max_clones must be a whole number >= 0 or null')
        wait = float(wait_secs)
        if wait < 0:
            raise BadArgs('times must not be negative')
        self.pve.clone_limit = max_clones
        self.pve.clone_lock_wait = wait

    def ha_resources(self):
        """{vmid: config} of the HA resources made through the API."""
        return {str(k): v for k, v in self.pve.ha_resources.items()}

    def remove_ha(self, vmid):
        """A person removes the guest's HA resource (`ha-manager remove vm:N` or `ct:N`)."""
        vm = self.pve.vm(int(vmid)) or self.pve.ct(int(vmid))
        if vm is None:
            raise BadArgs('no guest {0}'.format(vmid))
        self.pve.ha_resources.pop(vm.vmid, None)
        vm.ha_state = None

    def ha_groups(self):
        """{group: {nodes, restricted, nofailback, comment}} (PVE 8's HA groups)."""
        return jsonable(self.pve.ha_groups)

    def ha_rules(self):
        """{rule: {type, resources, nodes, strict, disable, comment, order}} (PVE 9's HA rules)."""
        return jsonable(self.pve.ha_rules)

    def set_ha_group(self, group, nodes, restricted=0, comment=None):
        """A person's HA group (`ha-manager groupadd`): nodes as `pve1:2,pve2`."""
        self.pve.ha_groups[group] = {'nodes': self.pve._parse_nodes(nodes), 'restricted': int(restricted),
                                     'comment': comment}

    def set_ha_rule(self, rule, resources, nodes, strict=0, comment=None):
        """A person's node-affinity rule (`ha-manager rules add node-affinity`): resources as `vm:100`,
        nodes as `pve1:2,pve2`."""
        order = max([r['order'] for r in self.pve.ha_rules.values()] + [0]) + 1
        self.pve.ha_rules[rule] = {'type': 'node-affinity', 'order': order, 'strict': int(strict),
                                   'resources': sorted(x for x in str(resources).split(',') if x),
                                   'nodes': self.pve._parse_nodes(nodes), 'comment': comment}

    def hard_stops(self):
        """{vmid: n}: how often the HA stack stopped a VM hard (its guest did not power off in time), or a
        container was killed after its shutdown's timeout."""
        return {str(k): v for k, v in self.pve.hard_stops.items()}

    def migrate_timing(self, secs=0):
        """A qmigrate task holds `lock: migrate` for secs PVE seconds (see COMMANDS)."""
        if float(secs) < 0:
            raise BadArgs('secs must not be negative')
        self.pve.migrate_secs = float(secs)

    def lose_answer(self, method, suffix=None, path=None, status=596, message='Connection timed out', times=1):
        """Carry out the next `times` METHOD requests whose path ends with suffix (or match a schema
        template), then answer `status message` with no body instead, as pveproxy does when its
        forward to the node fails after the node got the request."""
        suffix = suffix or path
        if not suffix:
            raise BadArgs('lose_answer needs suffix (or path)')
        if int(times) < 1:
            raise BadArgs('times must be at least 1')
        if '\n' in message or '\r' in message:
            raise BadArgs('message must be one line (it is the reason phrase)')
        self.pve.lost_rules[(method.upper(), suffix)] = {'status': int(status), 'message': message,
                                                         'times': int(times)}

    def lost_answers(self):
        """The answers lose_answer threw away, oldest first: [{method, path, status, body}]."""
        return list(self.pve.lost)

    def garble(self, rate=0.6, seed=0, paths=None, max_mutations=3):
        """A broken server or proxy: garble a share `rate` of the successful `{"data": ...}` answers
        (of requests whose path holds one of `paths`, if given) with 1 to max_mutations mutations each,
        drawn from random.Random(seed); errors and the login ticket never. rate=0 turns it off."""
        try:
            rate = float(rate)
            max_mutations = int(max_mutations)
        except (TypeError, ValueError):
            raise BadArgs('rate must be a number and max_mutations an integer') from None
        if not 0 <= rate <= 1:
            raise BadArgs('rate must be between 0 and 1')
        if max_mutations < 1:
            raise BadArgs('max_mutations must be at least 1')
        if isinstance(paths, str):
            paths = [paths]
        if paths is not None:
            if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
                raise BadArgs('paths must be a non-empty list of path substrings, or null for every path')
            paths = list(paths)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise BadArgs('seed must be an integer')
        self.pve.garble_rate = rate
        self.pve.garble_paths = paths
        self.pve.garble_max = max_mutations
        self.pve.garble_random.seed(seed)

    def garbled(self, reset=False):
        """{answers, garbled, by_path}: the answers garble could have garbled while on, how many it
        garbled, and those by API path; reset=True zeroes the counts after reading them."""
        counts = self.pve.garble_counts
        out = {'answers': counts['answers'], 'garbled': counts['garbled'], 'by_path': dict(counts['by_path'])}
        if reset:
            self.pve.garble_counts = {'answers': 0, 'garbled': 0, 'by_path': {}}
        return out

    async def migrate(self, vmid, target, secs=20):
        return await self.pve.migrate(vm_of(self.pve, vmid).vmid, target, secs)

    def set_model(self, **settings):
        unknown = sorted(set(settings) - set(MODEL_ATTRS))
        if unknown:
            raise BadArgs('unknown settings {0}; allowed: {1}'.format(', '.join(unknown), ', '.join(MODEL_ATTRS)))
        for key, val in settings.items():
            setattr(self.pve, key, val)

    def set_datacenter(self, options):
        """Replace datacenter.cfg as GET /cluster/options shows it, e.g. {"user-tag-access": {"user-allow":
        "list", "user-allow-list": ["a"]}, "registered-tags": ["b"]} or {"next-id": {"lower": 5000}}."""
        self.pve.datacenter = dict(options)

    def add_ct(self, vmid, node='pve1', status='stopped', name=None, config=None, template=False):
        """Add a container (fakepve's own): /cluster/resources lists it as `lxc`, and its VMID is taken."""
        ct = add_container(self.pve, vmid=vmid, node=node, status=status, name=name, config=config,
                           template=template)
        return {'vmid': ct.vmid, 'node': ct.node, 'status': ct.status}

    def ct(self, vmid):
        """A container's dump: vmid, name (hostname), node, status, template, lock, config, pending."""
        ct = self.pve.ct(int(vmid))
        if ct is None:
            raise BadArgs('no container {0}'.format(vmid))
        return dump_ct(ct)

    def cts(self):
        """Every container's dump, like ct."""
        return [dump_ct(ct) for ct in self.pve.cts]

    def set_ct(self, vmid, config=None, status=None, lock=None, ha_state=None, shutdown_secs=None):
        """Change a container as a person would: config keys (None removes one), its status, its lock,
        its HA state as the listing shows it (`error`: the HA manager gave up on it); shutdown_secs: how
        long its init takes to shut it down (PVE seconds)."""
        ct = self.pve.ct(int(vmid))
        if ct is None:
            raise BadArgs('no container {0}'.format(vmid))
        if shutdown_secs is not None:
            ct.shutdown_secs = float(shutdown_secs)
        for key, value in (config or {}).items():
            if value is None:
                ct.config.pop(key, None)
            else:
                ct.config[key] = value
        if status is not None:
            ct.status = status
        if lock is not None:
            ct.lock = lock or None
        if ha_state is not None:
            ct.ha_state = ha_state or None
        return dump_ct(ct)

    def add_vm_before(self, method, suffix, vmid, **kwargs):
        """Before the next METHOD request whose path ends with suffix (or matches a schema template) is
        carried out, add VM vmid as add_vm does: another user's guest appearing between proxsync's
        listing and its request."""
        if not suffix:
            raise BadArgs('add_vm_before needs suffix')
        self.pve.before_rules.append((method.upper(), suffix, dict(kwargs, vmid=int(vmid))))

    def set_vm_before(self, method, suffix, vmid, **attrs):
        """Before the next METHOD request whose path ends with suffix (or matches a schema template) is
        carried out, set VM vmid's attributes as set_vm does: someone starting or stopping it between
        proxsync's read and its request."""
        if not suffix:
            raise BadArgs('set_vm_before needs suffix')
        vm_of(self.pve, vmid)
        unknown = sorted(set(attrs) - set(VM_ATTRS))
        if unknown:
            raise BadArgs('unknown VM attributes {0}; allowed: {1}'.format(', '.join(unknown), ', '.join(VM_ATTRS)))
        self.pve.set_before_rules.append((method.upper(), suffix, int(vmid), dict(attrs)))

    # state
    def set_vm(self, vmid, **attrs):
        set_vm_attrs(vm_of(self.pve, vmid), attrs)
        return dump_vm(vm_of(self.pve, vmid))

    def add_vm(self, vmid, **kwargs):
        return dump_vm(add_vm(self.pve, vmid, **kwargs))

    def remove_vm(self, vmid):
        """Remove a VM at once, as a person's `qm destroy` on the node would (no task, no checks)."""
        vm = vm_of(self.pve, vmid)
        self.pve.vms.remove(vm)

    def add_node(self, name, online=True):
        self.pve.add_node(name, bool(online))

    def set_bridges(self, bridges, node=None):
        set_bridges(self.pve, bridges, node)

    def set_node_memory(self, node, maxmem=None, mem=None):
        """A node's memory as /cluster/resources?type=node lists it: maxmem, the host's (bytes), and mem,
        what it uses besides its running guests, whose memory is added; None keeps fakepve's 8 GiB / 2 GiB."""
        own = self.pve.node_memory.setdefault(str(node), {})
        if maxmem is not None:
            own['maxmem'] = int(maxmem)
        if mem is not None:
            own['mem'] = int(mem)
        return dict(own)

    def volume_size(self, volume):
        """A container volume's real size in bytes (None: the harness did not make it)."""
        return self.pve.volume_sizes.get(volume)

    def set_bridge_mtu(self, bridge, mtu=None):
        """The bridge's MTU as /etc/network/interfaces sets it (the network listing's `mtu`); None: the
        default 1500, not listed."""
        if mtu is None:
            self.pve.bridge_mtus.pop(bridge, None)
        else:
            self.pve.bridge_mtus[bridge] = int(mtu)

    def set_storage(self, name, **options):
        return jsonable(set_storage(self.pve, name, options))

    def store_file(self, storage, name, size=0, content='iso', ctime=None):
        if storage not in self.pve.storages:
            raise BadArgs('no storage {0!r}'.format(storage))
        self.pve.store_file(storage, name, int(size), content)
        if ctime is not None:
            self.pve.storages[storage]['volumes']['{0}/{1}'.format(content, name)]['ctime'] = int(ctime)

    def remote_file(self, url, size=1048576, data=None, status=200):
        """A file the fake internet serves at url for download-url: `data` (a string, as UTF-8) or else
        `size` bytes derived from the url (remote_bytes); status other than 200 is an HTTP error (wget
        exits 8). Returns {url, size, sha256, sha512} of the bytes. The scenario key `remote_files`
        takes the same arguments, one object per file."""
        return add_remote_file(self.pve, url, size, data, status)

    def download_timing(self, secs=0):
        """A download task's wget takes secs PVE seconds (times time_scale)."""
        if float(secs) < 0:
            raise BadArgs('times must not be negative')
        self.pve.download_secs = float(secs)

    def oci_image(self, reference, size=1048576, entrypoint=None, cmd=None, env=None):
        """The fake registry holds OCI image `reference` (an archive of `size` bytes when pulled),
        whose config says Entrypoint, Cmd and Env."""
        self.pve.oci_images[reference] = int(size)
        self.pve.oci_configs[reference] = {'Entrypoint': list(entrypoint or []), 'Cmd': list(cmd or []),
                                           'Env': list(env or [])}

    def skopeo(self, installed=True):
        """Whether the nodes have skopeo (without it oci-registry-pull refuses at once)."""
        self.pve.skopeo = bool(installed)

    def oci_pulls(self):
        """The oci-registry-pull requests that passed the schema and permission checks, in order:
        [{node, storage, reference, filename (as sent, or null)}]."""
        return [dict(r) for r in self.pve.oci_requests]

    def downloads(self):
        """The download-url requests that passed the schema and permission checks, in order:
        [{node, storage, filename (as sent), url, content, checksum, checksum_algorithm}]."""
        return [dict(r) for r in self.pve.download_requests]

    def add_token(self, id, secret):  # noqa: A002 - the protocol's name
        if '!' not in id or '@' not in id:
            raise BadArgs("token id must look like 'user@realm!tokenid'")
        self.pve.apitokens[id] = secret

    def remove_token(self, id):  # noqa: A002
        self.pve.apitokens.pop(id, None)

    def add_user(self, userid, password):
        self.pve.users[userid] = password

    def grant(self, user, path, privs):
        """Give user (or token) privs on path. The first grant turns permission checks on for all but root@pam."""
        if isinstance(privs, str):
            privs = [privs]
        self.pve.grant(user, path, *privs)

    def revoke_all(self):
        """Forget every grant: everyone may do anything again."""
        self.pve.acl = None

    def vm(self, vmid):
        return dump_vm(vm_of(self.pve, vmid))

    def vms(self):
        return [dump_vm(vm) for vm in self.pve.vms]

    def nodes(self):
        return jsonable(self.pve.nodes)

    def storages(self):
        return jsonable(self.pve.storages)

    def requests(self, since=0):
        """The request log: [{seq, method, path, query, body}] with seq >= since; secrets are redacted."""
        out = []
        for (method, path, body), (seq, query) in zip(self.pve.requests, self.pve.request_meta, strict=True):
            if seq >= since:
                out.append({'seq': seq, 'method': method, 'path': path, 'query': query,
                            'body': body.decode('utf-8', 'replace')})
        return out

    def clear_requests(self):
        """Empty the log; sequence numbers keep counting."""
        self.pve.requests.clear()
        self.pve.request_meta.clear()

    def tasks(self, since=0):
        return jsonable(self.pve.tasklog[since:])


def answer_id(msg):
    return msg.get('id') if isinstance(msg, dict) else None


async def run_command(commands, line):
    try:
        msg = json.loads(line)
    except ValueError as e:
        return {'id': None, 'ok': False, 'error': 'not JSON: {0}'.format(e)}
    rid = answer_id(msg)
    if not isinstance(msg, dict) or not isinstance(msg.get('cmd'), str):
        return {'id': rid, 'ok': False, 'error': 'expected {"id": N, "cmd": "...", "args": {...}}'}
    name, args = msg['cmd'], msg.get('args') or {}
    fn = getattr(commands, name, None) if not name.startswith('_') else None
    if fn is None or not callable(fn):
        known = sorted(n for n in dir(commands) if not n.startswith('_') and callable(getattr(commands, n)))
        return {'id': rid, 'ok': False, 'error': 'unknown command {0!r}; known: {1}'.format(name, ', '.join(known))}
    if not isinstance(args, dict):
        return {'id': rid, 'ok': False, 'error': 'args must be an object'}
    try:
        inspect.signature(fn).bind(**args)
    except TypeError as e:
        return {'id': rid, 'ok': False, 'error': 'bad args for {0}: {1}'.format(name, e)}
    try:
        result = fn(**args)
        if inspect.isawaitable(result):
            result = await result
        return {'id': rid, 'ok': True, 'result': jsonable(result)}
    except BadArgs as e:
        return {'id': rid, 'ok': False, 'error': '{0}: {1}'.format(name, e)}
    except PveError as e:
        return {'id': rid, 'ok': False, 'error': '{0}: {1} {2}'.format(name, e.status, e.message)}
    except Exception as e:  # noqa: BLE001 - a bad command must never end the harness
        traceback.print_exc(file=sys.stderr)
        return {'id': rid, 'ok': False, 'error': '{0}: {1}: {2}'.format(name, type(e).__name__, e)}


def emit(obj):
    PROTOCOL.write(json.dumps(obj, default=str) + '\n')
    PROTOCOL.flush()


def start_reader(loop, queue):
    """Feed stdin lines to the loop from a daemon thread; None at EOF."""
    def read():
        try:
            for raw in sys.stdin.buffer:
                line = raw.decode('utf-8', 'replace').strip()
                if line:
                    asyncio.run_coroutine_threadsafe(queue.put(line), loop)
        except Exception:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
        finally:
            try:
                asyncio.run_coroutine_threadsafe(queue.put(None), loop)
            except RuntimeError:  # the loop is already closed
                pass
    thread = threading.Thread(target=read, name='stdin', daemon=True)
    thread.start()


async def main_async(scenario, tmp):
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sc = dict(scenario)
    host = str(sc.get('host') or '127.0.0.1')
    port = int(sc.get('port') or 0)
    pve = HarnessPve(user=sc.get('user', 'root@pam'), password=sc.get('password', 'secret'), host=host, port=port)
    try:
        apply_scenario(pve, sc)
        certfile, keyfile, der = make_cert(tmp, hosts=(host,))
        with open(certfile, encoding='ascii') as fh:
            pve.root_ca = (fh.read(), der)
        await pve.start(certfile, keyfile)
        os.unlink(keyfile)  # loaded; nobody else needs it
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        emit({'ready': False, 'error': '{0}: {1}'.format(type(e).__name__, e)})
        await pve.stop()
        return 2
    emit({'ready': True, 'url': pve.url, 'host': pve.host, 'port': pve.port, 'ca_file': certfile,
          'fakepve': __version__, 'pid': os.getpid()})
    queue = asyncio.Queue()
    start_reader(loop, queue)
    commands = Commands(pve, stop)
    try:
        while not stop.is_set():
            getter = asyncio.ensure_future(queue.get())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait((getter, stopper), return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                break
            stopper.cancel()
            line = getter.result()
            if line is None:
                break
            emit(await run_command(commands, line))
    finally:
        try:
            await asyncio.wait_for(settle(), STOP_TIMEOUT)
            # aiohttp waits for open requests (a hung one, with flaky_network) up to its own timeout.
            await asyncio.wait_for(pve.stop(), STOP_TIMEOUT)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            pass
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--scenario', help='JSON scenario file (default: the first line of stdin)')
    args = parser.parse_args()
    try:
        if args.scenario:
            with open(args.scenario, encoding='utf-8') as fh:
                scenario = json.load(fh)
        else:
            line = sys.stdin.buffer.readline()
            if not line.strip():
                raise ValueError('expected the scenario as one JSON line on stdin')
            scenario = json.loads(line)
        if not isinstance(scenario, dict):
            raise ValueError('the scenario must be a JSON object')
    except (OSError, ValueError) as e:
        emit({'ready': False, 'error': 'bad scenario: {0}'.format(e)})
        return 2
    tmp = tempfile.mkdtemp(prefix='proxsync-fakepve-')
    try:
        return asyncio.run(main_async(scenario, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    code = main()
    sys.stderr.flush()
    PROTOCOL.flush()
    # The stdin reader thread may still be blocked in read(); don't wait for it.
    os._exit(code)
