#!/usr/bin/env python3
"""proxsync benchmarks (issue 6): what an idle cycle, a push, creating N VMs and a start-up
cost at 100, 1,000 and 10,000 specs, side by side with an Ansible playbook
(community.proxmox.proxmox_kvm) creating the same VMs against the same fakepve setup.

Run through bench/run, which installs fakepve and Ansible and builds the release binary:

    bench/run            # 100, 1,000 and 10,000 specs, Ansible at 100
    bench/run --quick    # 100 specs only

Everything runs on 127.0.0.1: one fakepve (tests/harness/fakepve_harness.py) per size, the
daemon (`proxsync run`) with a notify socket of ours, a bare git repository of specs. Figures
are reported, never judged: the run fails only if something does not work at all.
"""

import argparse
import hashlib
import hmac
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, 'tests', 'harness', 'fakepve_harness.py')
TOKEN_USER = 'proxsync@pve'
TOKEN_NAME = 'bench'
TOKEN_ID = TOKEN_USER + '!' + TOKEN_NAME
TOKEN_SECRET = '0b3c2d1e-proxsync-bench-0000-000000000006'
TEMPLATE_VMID = 9000
TEMPLATE_NAME = 'debian-12-template'
INSTALL_ID = 'bench'
SITE = 'bench'
NODE = 'pve1'
# --sites/--nodes: the fleet's layout. Spec i is on site (i-1) % SITES, node ((i-1) // SITES) % NODES;
# each site is a fakepve process of its own with NODES nodes and its own template.
FLEET = {'sites': 1, 'nodes': 1}
LATENCY = 0.005          # seconds per request while creating (fakepve slow_network)
CLK_TCK = os.sysconf('SC_CLK_TCK')
# The install's marker key (`<state_dir>/marker.key`), fixed so the pre-made VMs' markers can be
# signed as proxsync signs them (HMAC-SHA256 over install, spec, uid and VMID, 16 bytes in hex).
MARKER_KEY = '5ca1ab1e' * 8
DAEMON_PREFIX = []       # --daemon-prefix: a wrapper command for `proxsync run` (heaptrack, perf)
POLL = 0.005             # sleep between two polls of the request log (push to first write)


def log(*args):
    print('[bench %s]' % time.strftime('%H:%M:%S'), *args, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ fakepve


def marker_mac(spec, uid, vmid):
    msg = 'proxsync-marker-v1\0%s\0%s\0%s\0%d' % (INSTALL_ID, spec, uid, vmid)
    return hmac.new(bytes.fromhex(MARKER_KEY), msg.encode(), hashlib.sha256).hexdigest()[:32]


def site_name(s):
    return SITE if FLEET['sites'] == 1 else 'site%02d' % s


def placement(i):
    """(site index, node name) of spec i (and of its pre-made VM)."""
    return (i - 1) % FLEET['sites'], 'pve%d' % ((i - 1) // FLEET['sites'] % FLEET['nodes'] + 1)


def scenario(prepopulate=0, site=0):
    """Nodes pve1..pveK (one by default), storage local-lvm, template 9000 on pve1, our token; the
    pre-made VMs of specs 1..prepopulate placed on this site; tasks run at real time (time_scale 1,
    and they take no PVE seconds), so slow_network's latency is real."""
    vms = [{
        'vmid': TEMPLATE_VMID, 'name': TEMPLATE_NAME, 'node': NODE, 'status': 'stopped', 'template': True,
        'config': {'name': TEMPLATE_NAME, 'scsi0': 'local-lvm:base-9000-disk-0,size=2G',
                   'scsihw': 'virtio-scsi-single', 'net0': 'virtio=BC:24:11:00:90:00,bridge=vmbr0',
                   'memory': '2048', 'cores': 2, 'ostype': 'l26', 'boot': 'order=scsi0', 'template': 1},
    }]
    for i in range(1, prepopulate + 1):
        if placement(i)[0] != site:
            continue
        vmid = 20000 + i
        name = spec_name(i)
        uid = '%016x' % (0xbe0c40000000 + i)
        vms.append({
            'vmid': vmid, 'name': name, 'node': placement(i)[1], 'status': 'running',
            'tags': ['proxsync.' + INSTALL_ID],
            'config': {'name': name, 'scsi0': 'local-lvm:vm-%d-disk-0,size=2G' % vmid,
                       'scsihw': 'virtio-scsi-single', 'net0': 'virtio=BC:24:11:%02X:%02X:%02X,bridge=vmbr0' % (
                           (vmid >> 16) & 255, (vmid >> 8) & 255, vmid & 255),
                       'memory': '2048', 'cores': 2, 'ostype': 'l26', 'boot': 'order=scsi0',
                       'description': 'Managed by proxsync (install %s) from spec %s.\n'
                                      'proxsync-id: install=%s spec=%s uid=%s mac=%s' % (
                                          INSTALL_ID, name, INSTALL_ID, name, uid,
                                          marker_mac(name, uid, vmid))},
        })
    return {
        'nodes': [{'name': 'pve%d' % (k + 1), 'online': True} for k in range(FLEET['nodes'])],
        'bridges': ['vmbr0'],
        'storages': {
            'local': {'type': 'dir', 'path': '/var/lib/vz', 'content': 'iso,import,vztmpl,snippets'},
            'local-lvm': {'type': 'lvmthin', 'vgname': 'pve', 'thinpool': 'data', 'content': 'images,rootdir'},
        },
        'vms': vms,
        'tokens': [{'id': TOKEN_ID, 'secret': TOKEN_SECRET}],
        'time_scale': 1,
    }


class FakePve:
    """tests/harness/fakepve_harness.py in a child process, driven over JSON lines."""

    def __init__(self, python, sc, logfile):
        self.err = open(logfile, 'w')
        self.proc = subprocess.Popen([python, HARNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, bufsize=1)
        self.proc.stdin.write(json.dumps(sc) + '\n')
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        ready = json.loads(line) if line else {'ready': False, 'error': 'no answer (see %s)' % logfile}
        if not ready.get('ready'):
            self.stop()
            raise RuntimeError('fakepve did not start: %s' % ready.get('error'))
        self.url, self.port, self.ca_file = ready['url'], ready['port'], ready['ca_file']
        self.version = ready.get('fakepve')
        self.next_id = 0
        self.lock = threading.Lock()
        self.call('set_model', max_requests=5_000_000)

    def call(self, cmd, **args):
        with self.lock:
            self.next_id += 1
            self.proc.stdin.write(json.dumps({'id': self.next_id, 'cmd': cmd, 'args': args}) + '\n')
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('fakepve exited')
        answer = json.loads(line)
        if not answer.get('ok'):
            raise RuntimeError('fakepve %s: %s' % (cmd, answer.get('error')))
        return answer.get('result')

    def requests(self, since=0):
        return self.call('requests', since=since)

    def cpu_s(self):
        return proc_cpu_s(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


class Fleet:
    """Several fakepve processes (one per site), answering like one FakePve: a command goes to
    each, requests and CPU are summed."""

    def __init__(self, python, n, logfile):
        self.fakes = [None] * FLEET['sites']
        errors = []

        def start(s):
            try:
                self.fakes[s] = FakePve(python, scenario(n, s), '%s.%s' % (logfile, site_name(s)))
            except Exception as e:  # reported below, after the others started or failed
                errors.append(e)
        # Side by side: each builds its own VMs (seconds per thousand).
        threads = [threading.Thread(target=start, args=(s,)) for s in range(FLEET['sites'])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]

    def call(self, cmd, **args):
        return [f.call(cmd, **args) for f in self.fakes]

    def requests(self, since=0):
        return [r for f in self.fakes for r in f.requests(since)]

    def cpu_s(self):
        return sum(f.cpu_s() for f in self.fakes)

    def stop(self):
        for f in self.fakes:
            if f:
                f.stop()


def count_requests(reqs):
    by_method = {}
    by_path = {}
    for r in reqs:
        by_method[r['method']] = by_method.get(r['method'], 0) + 1
        path = re.sub(r'/api2/json', '', r['path'])
        path = re.sub(r'/\d+(?=/|$)', '/{vmid}', path)
        path = re.sub(r'/UPID:[^/]+', '/{upid}', path)
        key = r['method'] + ' ' + path
        by_path[key] = by_path.get(key, 0) + 1
    return {'total': len(reqs), 'by_method': by_method,
            'by_path': dict(sorted(by_path.items(), key=lambda kv: -kv[1]))}


# ------------------------------------------------------------------ processes


def die_with_parent():
    """In the child: SIGTERM when the benchmark dies, so no daemon outlives it."""
    try:
        import ctypes
        ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def proc_cpu_s(pid):
    """utime + stime of the whole process (exited threads included), in seconds."""
    with open('/proc/%d/stat' % pid) as fh:
        fields = fh.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def find_descendant(pid, binary, timeout=30):
    """The first descendant of `pid` running `binary` (a daemon started under a wrapper)."""
    target = os.path.realpath(binary)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        todo = [pid]
        while todo:
            p = todo.pop()
            try:
                if p != pid and os.path.realpath('/proc/%d/exe' % p) == target:
                    return p
                with open('/proc/%d/task/%d/children' % (p, p)) as fh:
                    todo += [int(c) for c in fh.read().split()]
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError('no %s process under the wrapper (pid %d)' % (binary, pid))


def proc_status_kb(pid, key):
    with open('/proc/%d/status' % pid) as fh:
        for line in fh:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    return None


class Daemon:
    """`proxsync run` with a notify socket of our own (NOTIFY_SOCKET)."""

    def __init__(self, binary, config, state_dir, logfile, tmp):
        self.state_dir = state_dir
        self.sock_path = os.path.join(tmp, 'notify-%d.sock' % time.monotonic_ns())
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.sock_path)
        self.sock.settimeout(0.2)
        self.messages = []          # (monotonic time, line)
        self.cond = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # PROXSYNC_BENCH_LOG: the daemon's log filter (e.g. info,proxsync::daemon=debug for timings).
        env = dict(os.environ, NOTIFY_SOCKET=self.sock_path,
                   PROXSYNC_LOG=os.environ.get('PROXSYNC_BENCH_LOG', 'info'))
        self.err = open(logfile, 'a')
        self.started = time.monotonic()
        prefix = [a.replace('{log}', os.path.splitext(os.path.basename(logfile))[0]) for a in DAEMON_PREFIX]
        self.proc = subprocess.Popen(prefix + [binary, 'run', '--config', config], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err,
                                     preexec_fn=die_with_parent)
        # Under a wrapper (--daemon-prefix, e.g. heaptrack) the daemon is a descendant: measure and
        # stop that process, so the wrapper sees it end and finishes its own output.
        self.pid = self.proc.pid if not DAEMON_PREFIX else find_descendant(self.proc.pid, binary)

    def _read(self):
        while not self.closed:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            now = time.monotonic()
            with self.cond:
                for line in data.decode('utf-8', 'replace').splitlines():
                    if line:
                        self.messages.append((now, line))
                self.cond.notify_all()

    def statuses(self):
        with self.cond:
            return [(t, m[len('STATUS='):]) for t, m in self.messages if m.startswith('STATUS=')]

    def wait(self, pred, timeout, what):
        """Waits for a message (time, line) satisfying pred, among those after index `start`."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, m in self.messages:
                    if pred(t, m):
                        return t, m
                if self.proc.poll() is not None:
                    raise RuntimeError('proxsync exited (%s) while waiting for %s' % (self.proc.returncode, what))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError('no %s within %ss' % (what, timeout))
                self.cond.wait(min(left, 0.5))

    def wait_ready(self, timeout):
        t, _ = self.wait(lambda t, m: m == 'READY=1', timeout, 'READY=1')
        return t

    def wait_status_after(self, after, timeout, what='STATUS='):
        """The first STATUS= line after `after`: (time, the line without `STATUS=`)."""
        t, m = self.wait(lambda t, m: t > after and m.startswith('STATUS='), timeout, what)
        return t, m[len('STATUS='):]

    def reconcile(self):
        """`proxsync reconcile` over the control socket (what the CLI sends)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(os.path.join(self.state_dir, 'control.sock'))
        s.sendall(b'reconcile\n')
        reply = s.makefile().readline()
        s.close()
        if not reply.startswith('ok'):
            raise RuntimeError('reconcile: %s' % reply.strip())

    def cpu_s(self):
        return proc_cpu_s(self.pid)

    def hwm_kb(self):
        return proc_status_kb(self.pid, 'VmHWM')

    def rss_kb(self):
        return proc_status_kb(self.pid, 'VmRSS')

    def stop(self):
        if self.proc.poll() is None:
            if self.pid != self.proc.pid:
                try:
                    os.kill(self.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            else:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(600 if DAEMON_PREFIX else 60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.closed = True
        self.sock.close()
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass
        self.err.close()


STATUS_RE = re.compile(r'^(\d+) specs: (\d+) Ready')


def ready_count(status_line):
    m = STATUS_RE.match(status_line)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


# ------------------------------------------------------------------ workspace


def spec_name(i):
    return 'vm-%05d' % i


def spec_text(i, tags=None):
    extra = '    tags: [%s]\n' % ', '.join(tags) if tags else ''
    return ('apiVersion: proxsync.io/v1\nkind: ProxmoxVM\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n'
            '    site: {site}\n    node: {node}\n    image: "{tpl}"\n    cpu: 2\n    memory: 2Gi\n    disk: 2Gi\n'
            '    storage: local-lvm\n    network: vmbr0\n{extra}').format(
                name=spec_name(i), site=site_name(placement(i)[0]), node=placement(i)[1], tpl=TEMPLATE_VMID,
                extra=extra)


class Workspace:
    def __init__(self, base, fake, n, reconcile='', state_root=None):
        """state_root: where the state and status directories go (default: under base), e.g. a
        file system of its own to measure the status writes on."""
        self.dir = base
        self.n = n
        self.repo = os.path.join(base, 'checkout')
        self.bare = os.path.join(base, 'vms.git')
        self.state = os.path.join(state_root or base, 'state')
        self.status = os.path.join(state_root or base, 'status')
        self.config = os.path.join(base, 'proxsync.toml')
        os.makedirs(self.repo)
        os.makedirs(self.state, mode=0o700)
        key = os.path.join(self.state, 'marker.key')
        with open(key, 'w') as fh:
            fh.write(MARKER_KEY + '\n')
        os.chmod(key, 0o600)
        token = os.path.join(base, 'site.token')
        with open(token, 'w') as fh:
            fh.write(TOKEN_SECRET + '\n')
        os.chmod(token, 0o600)
        fakes = getattr(fake, 'fakes', [fake])
        with open(self.config, 'w') as fh:
            fh.write('install_id = "%s"\nstate_dir = "%s"\nstatus_dir = "%s"\n\n'
                     '[source]\npath = "%s"\nbranch = "main"\n\n'
                     '[reconcile]\nresync_interval = "1h"\n%s' % (INSTALL_ID, self.state, self.status, self.bare,
                                                                   reconcile))
            for s, f in enumerate(fakes):
                fh.write('\n[[site]]\nname = "%s"\nendpoint = "%s"\ntoken_id = "%s"\n'
                         'token_secret_file = "%s"\nca_file = "%s"\n' % (
                             site_name(s), f.url, TOKEN_ID, token, f.ca_file))
        git(['init', '-q', '--bare', '-b', 'main', self.bare])
        self.git('init', '-q', '-b', 'main')
        # `.md`: proxsync reads it as documentation. Any other file would count as an unread
        # spec, leaving the set incomplete (nothing planned as removed: a lighter plan).
        with open(os.path.join(self.repo, 'README.md'), 'w') as fh:
            fh.write('proxsync benchmark specs\n')
        self.git('add', 'README.md')
        self.git('commit', '-q', '-m', 'empty')
        self.push()

    def git(self, *args):
        git(list(args), cwd=self.repo)

    def write_specs(self, n):
        d = os.path.join(self.repo, 'vms')
        os.makedirs(d, exist_ok=True)
        for i in range(1, n + 1):
            with open(os.path.join(d, spec_name(i) + '.yaml'), 'w') as fh:
                fh.write(spec_text(i))
        self.git('add', '-A')
        self.git('commit', '-q', '-m', '%d specs' % n)

    def retag(self, i, tag):
        with open(os.path.join(self.repo, 'vms', spec_name(i) + '.yaml'), 'w') as fh:
            fh.write(spec_text(i, [tag]))
        self.git('commit', '-q', '-am', 'tag %s %s' % (spec_name(i), tag))

    def push(self):
        self.git('push', '-q', self.bare, 'main')

    def summary_cycle_ms(self):
        try:
            with open(os.path.join(self.status, '_summary.yaml')) as fh:
                m = re.search(r'^cycleMs:\s*(\d+)', fh.read(), re.M)
                return int(m.group(1)) if m else None
        except OSError:
            return None


def git(args, cwd=None):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM='1', GIT_AUTHOR_NAME='bench', GIT_AUTHOR_EMAIL='bench@example',
               GIT_COMMITTER_NAME='bench', GIT_COMMITTER_EMAIL='bench@example', HOME=os.environ.get('HOME', '/'))
    out = subprocess.run(['git', '-c', 'init.defaultBranch=main'] + args, cwd=cwd, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError('git %s: %s' % (' '.join(args), out.stderr))


# ------------------------------------------------------------------ measurements


def wait_all_ready(d, n, after, timeout):
    """Waits for a STATUS= line saying n of n specs Ready (asking for another cycle when one ends
    short of it); returns its time."""
    deadline = time.monotonic() + timeout
    seen = after
    while True:
        t, m = d.wait_status_after(seen, max(1, deadline - time.monotonic()), 'all %d Ready' % n)
        specs, ready = ready_count(m)
        if specs == n and ready == n:
            return t
        log('  cycle ended with: %s; asking for another' % m)
        seen = t
        d.reconcile()


def measure_create(d, fake, ws, n):
    ws.write_specs(n)
    fake.call('clear_requests')
    cpu0, fcpu0 = d.cpu_s(), fake.cpu_s()
    t0 = time.monotonic()
    ws.push()
    t1 = wait_all_ready(d, n, t0, timeout=3 * 3600)
    wall = t1 - t0
    cpu, fcpu = d.cpu_s() - cpu0, fake.cpu_s() - fcpu0
    reqs = count_requests(fake.requests())
    return {
        'wall_s': round(wall, 3), 'per_vm_ms': round(1000 * wall / n, 2),
        'vms_per_s': round(n / wall, 2),
        'requests': reqs['total'], 'requests_per_vm': round(reqs['total'] / n, 2),
        'writes_per_vm': round(sum(v for k, v in reqs['by_method'].items() if k != 'GET') / n, 2),
        'by_path': reqs['by_path'],
        'proxsync_cpu_s': round(cpu, 2), 'fakepve_cpu_s': round(fcpu, 2),
        'latency_s': LATENCY, 'concurrency': 'default',
        'peak_rss_kb': d.hwm_kb(),
    }


def measure_idle(d, fake, ws, reps):
    """`reps` idle cycles, one at a time: requests, CPU, wall, cycleMs."""
    # One cycle first so whatever the previous phase left is settled.
    t = time.monotonic()
    d.reconcile()
    d.wait_status_after(t, 3600)
    runs = []
    cpu_start = d.cpu_s()
    for _ in range(reps):
        fake.call('clear_requests')
        c0 = d.cpu_s()
        t0 = time.monotonic()
        d.reconcile()
        t1, line = d.wait_status_after(t0, 3600)
        c1 = d.cpu_s()
        reqs = count_requests(fake.requests())
        runs.append({'wall_ms': round(1000 * (t1 - t0), 1), 'cycle_ms': ws.summary_cycle_ms(),
                     'cpu_ms': round(1000 * (c1 - c0), 1), 'requests': reqs['total'], 'by_path': reqs['by_path'],
                     'status': line})
    cpu_total = d.cpu_s() - cpu_start
    return {
        'reps': reps,
        'requests': max(r['requests'] for r in runs),
        'by_path': runs[-1]['by_path'],
        'wall_ms_median': statistics.median(r['wall_ms'] for r in runs),
        'cycle_ms_median': statistics.median(r['cycle_ms'] or 0 for r in runs),
        'cpu_ms_mean': round(1000 * cpu_total / reps, 1),
        'cpu_tick_ms': round(1000 / CLK_TCK, 1),
        'runs': runs,
        'rss_kb': d.rss_kb(),
        # The part of the RSS that is file-backed: the binary's and the libraries' touched pages.
        'rss_file_kb': proc_status_kb(d.pid, 'RssFile'),
        'peak_rss_kb': d.hwm_kb(),
    }


def measure_push(d, fake, ws, reps):
    """git push (a tag added to one spec) -> the first non-GET request fakepve logs."""
    runs = []
    for k in range(reps):
        ws.retag(1, 'push%d' % (k + 1))
        fake.call('clear_requests')
        polls = 0
        t0 = time.monotonic()
        ws.push()
        t_pushed = time.monotonic()
        first = None
        while time.monotonic() - t0 < 120:
            polls += 1
            for r in fake.requests():
                if r['method'] != 'GET':
                    first = r
                    break
            if first:
                break
            time.sleep(POLL)
        t1 = time.monotonic()
        if not first:
            raise RuntimeError('no write request within 120 s of the push')
        # Let that cycle end before the next push.
        d.wait_status_after(t1, 600)
        runs.append({'push_to_write_ms': round(1000 * (t1 - t0), 1), 'git_push_ms': round(1000 * (t_pushed - t0), 1),
                     'first_write': first['method'] + ' ' + first['path'],
                     'poll_interval_ms': round(1000 * (t1 - t_pushed) / max(polls, 1), 2)})
    return {'reps': reps, 'median_ms': statistics.median(r['push_to_write_ms'] for r in runs),
            'max_ms': max(r['push_to_write_ms'] for r in runs),
            'poll_interval_ms': round(statistics.mean(r['poll_interval_ms'] for r in runs), 2), 'runs': runs}


def measure_cli(binary, ws, reps):
    """Times `proxsync status` and `proxsync plan` (no daemon running) on the workspace's
    status directory and database; the median of `reps` runs each, with their peak RSS."""
    out = {}
    for cmd in ('status', 'plan'):
        runs = []
        for _ in range(reps):
            t = time.monotonic()
            p = subprocess.run(['/usr/bin/time', '-f', '%M', binary, cmd, '--config', ws.config],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            wall = time.monotonic() - t
            rss = int(p.stderr.strip().splitlines()[-1]) if p.stderr.strip() else 0
            runs.append({'wall_s': round(wall, 3), 'exit': p.returncode, 'peak_rss_kb': rss})
        out[cmd] = runs
        out['%s_s_median' % cmd] = statistics.median(r['wall_s'] for r in runs)
        out['%s_peak_rss_kb' % cmd] = max(r['peak_rss_kb'] for r in runs)
    return out


def start_daemon(binary, ws, tmp, label, n, fake):
    """Starts a daemon and times its READY=1; returns (daemon, figures)."""
    fake.call('clear_requests')
    d = Daemon(binary, ws.config, ws.state, os.path.join(ws.dir, 'daemon-%s.log' % label), tmp)
    t_ready = d.wait_ready(3600)
    figures = {'ready_s': round(t_ready - d.started, 3)}
    # READY=1 and the first STATUS= come from the same cycle.
    _, line = d.wait(lambda t, m: m.startswith('STATUS='), 60, 'first STATUS=')
    line = line[len('STATUS='):]
    reqs = count_requests(fake.requests())
    figures.update({'first_status': line, 'requests': reqs['total'], 'by_path': reqs['by_path'],
                    'cpu_s': round(d.cpu_s(), 2), 'peak_rss_kb': d.hwm_kb()})
    return d, figures


def bench_size(n, args, binary, python, tmp):
    res = {'n': n}
    base = os.path.join(tmp, 'n%d' % n)
    os.makedirs(base)
    create = n <= args.create_max
    log('N=%d: starting fakepve%s' % (n, '' if create else ' with %d owned VMs' % n))
    t = time.monotonic()
    fleet = FLEET['sites'] > 1 or FLEET['nodes'] > 1
    if fleet:
        res['layout'] = dict(FLEET)
        fake = Fleet(python, 0 if create else n, os.path.join(base, 'fakepve.log'))
    else:
        fake = FakePve(python, scenario(0 if create else n), os.path.join(base, 'fakepve.log'))
    res['fakepve_start_s'] = round(time.monotonic() - t, 1)
    daemons = []
    try:
        ws = Workspace(base, fake, n)
        if create:
            log('N=%d: creating %d VMs with proxsync (latency %g s per request)' % (n, n, LATENCY))
            fake.call('slow_network', latency=LATENCY)
            d, _ = start_daemon(binary, ws, tmp, 'create', 0, fake)
            daemons.append(d)
            res['create'] = measure_create(d, fake, ws, n)
            log('N=%d: create %s' % (n, {k: v for k, v in res['create'].items() if k != 'by_path'}))
            d.stop()
            daemons.remove(d)
            fake.call('slow_network', latency=0)
            fake.call('time_scale', value=0)
        else:
            fake.call('time_scale', value=0)
            ws.write_specs(n)
            ws.push()
            log('N=%d: adopting the %d pre-made VMs (empty database)' % (n, n))
            d, fig = start_daemon(binary, ws, tmp, 'adopt', n, fake)
            daemons.append(d)
            res['adopt'] = fig
            log('N=%d: adopted: READY=1 after %ss, %d requests, peak RSS %s kB' % (
                n, fig['ready_s'], fig['requests'], fig['peak_rss_kb']))
            t = time.monotonic()
            d.reconcile()
            wait_all_ready(d, n, t, 3600)
            d.stop()
            daemons.remove(d)
        # Warm start, then idle cycles and pushes on that daemon.
        log('N=%d: warm start' % n)
        d, res['startup_warm'] = start_daemon(binary, ws, tmp, 'warm', n, fake)
        daemons.append(d)
        log('N=%d: startup warm %ss' % (n, res['startup_warm']['ready_s']))
        res['idle'] = measure_idle(d, fake, ws, args.idle_reps)
        log('N=%d: idle cycle: %s requests, cpu %s ms, wall %s ms, cycleMs %s, peak RSS %s kB' % (
            n, res['idle']['requests'], res['idle']['cpu_ms_mean'], res['idle']['wall_ms_median'],
            res['idle']['cycle_ms_median'], res['idle']['peak_rss_kb']))
        res['push'] = measure_push(d, fake, ws, args.push_reps)
        log('N=%d: push to first write: %s' % (n, [r['push_to_write_ms'] for r in res['push']['runs']]))
        res['idle_daemon_peak_rss_kb'] = d.hwm_kb()
        d.stop()
        daemons.remove(d)
        res['cli'] = measure_cli(binary, ws, args.cli_reps)
        log('N=%d: proxsync status %s s, plan %s s' % (
            n, res['cli']['status_s_median'], res['cli']['plan_s_median']))
        if fleet and not create:
            # The first daemon's adoption was already the start with an empty database.
            res['startup_empty'] = res['adopt']
            return res
        # Empty database: the database file removed (the marker key kept), the VMs exist.
        os.remove(os.path.join(ws.state, 'proxsync.redb'))
        log('N=%d: start with an empty database' % n)
        d, res['startup_empty'] = start_daemon(binary, ws, tmp, 'empty', n, fake)
        daemons.append(d)
        log('N=%d: startup empty %ss' % (n, res['startup_empty']['ready_s']))
        d.stop()
        daemons.remove(d)
    finally:
        for d in daemons:
            d.stop()
        fake.stop()
    return res


# ------------------------------------------------------------------ Ansible


PLAYBOOK_HEAD = r"""
- hosts: localhost
  connection: local
  gather_facts: false
  environment:
    REQUESTS_CA_BUNDLE: "{{ ca_file }}"
  tasks:
    - name: %(step)s
      community.proxmox.proxmox_kvm:
        api_host: 127.0.0.1
        api_port: "{{ pve_port }}"
        api_user: "%(user)s"
        api_token_id: "%(token)s"
        api_token_secret: "{{ lookup('file', token_file) }}"
        validate_certs: true
        node: %(node)s
        timeout: 600
"""
# The same N VMs as proxsync's specs, by community.proxmox.proxmox_kvm, in three playbooks run
# one after the other: a full clone of the template (the module waits for the clone task, as
# proxsync does), then the declared settings with an ownership tag and marker description,
# then started (waiting for the start task).
PLAYBOOK_STEPS = {
    'clone': r"""        vmid: %(tpl)d
        clone: %(tpl_name)s
        newid: "{{ 100 + item }}"
        name: "vm-{{ '%%05d' | format(item) }}"
        full: true
        storage: local-lvm
      loop: "{{ range(1, n + 1) | list }}"
""",
    'configure': r"""        vmid: "{{ 100 + item }}"
        update: true
        name: "vm-{{ '%%05d' | format(item) }}"
        cores: 2
        memory: 2048
        tags: ["proxsync.ansible"]
        description: "Managed by Ansible. proxsync-id: install=ansible spec=vm-{{ '%%05d' | format(item) }}"
      loop: "{{ range(1, n + 1) | list }}"
""",
    'start': r"""        vmid: "{{ 100 + item }}"
        state: started
      loop: "{{ range(1, n + 1) | list }}"
""",
}


def bench_ansible(n, args, python, tmp):
    base = os.path.join(tmp, 'ansible-n%d' % n)
    os.makedirs(base)
    fake = FakePve(python, scenario(0), os.path.join(base, 'fakepve.log'))
    try:
        fake.call('slow_network', latency=LATENCY)
        books = {}
        for step, body in PLAYBOOK_STEPS.items():
            books[step] = os.path.join(base, '%s.yml' % step)
            with open(books[step], 'w') as fh:
                fh.write((PLAYBOOK_HEAD + body) % {
                    'step': step, 'user': TOKEN_USER, 'token': TOKEN_NAME, 'node': NODE, 'tpl': TEMPLATE_VMID,
                    'tpl_name': TEMPLATE_NAME})
        token = os.path.join(base, 'token')
        with open(token, 'w') as fh:
            fh.write(TOKEN_SECRET)
        os.chmod(token, 0o600)
        venv = args.ansible_venv
        env = dict(os.environ, ANSIBLE_HOME=os.path.join(base, 'home'), ANSIBLE_LOCAL_TEMP=os.path.join(base, 'tmp'),
                   ANSIBLE_PYTHON_INTERPRETER=os.path.join(venv, 'bin', 'python'), ANSIBLE_PIPELINING='1',
                   ANSIBLE_NOCOLOR='1', ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_FORCE_COLOR='0',
                   REQUESTS_CA_BUNDLE=fake.ca_file, PATH=os.path.join(venv, 'bin') + ':' + os.environ['PATH'])
        steps = {}
        total_wall = 0.0
        total_reqs = []
        for step in ('clone', 'configure', 'start'):
            fake.call('clear_requests')
            t0 = time.monotonic()
            with open(os.path.join(base, 'ansible-%s.log' % step), 'w') as out:
                rc = subprocess.run([os.path.join(venv, 'bin', 'ansible-playbook'), '-i', 'localhost,', books[step],
                                     '-e', json.dumps({'n': n, 'pve_port': fake.port,
                                                       'ca_file': fake.ca_file, 'token_file': token})],
                                    env=env, stdout=out, stderr=subprocess.STDOUT, cwd=base).returncode
            wall = time.monotonic() - t0
            if rc != 0:
                raise RuntimeError('ansible-playbook (%s) failed with %d: see %s' % (
                    step, rc, os.path.join(base, 'ansible-%s.log' % step)))
            reqs = fake.requests()
            total_reqs += reqs
            counted = count_requests(reqs)
            steps[step] = {'wall_s': round(wall, 2), 'requests': counted['total'], 'by_path': counted['by_path']}
            total_wall += wall
            log('ansible N=%d %s: %.1fs, %d requests' % (n, step, wall, counted['total']))
        vms = [v for v in fake.call('vms') if not v['template']]
        running = sum(1 for v in vms if v['status'] == 'running')
        counted = count_requests(total_reqs)
        return {'n': n, 'wall_s': round(total_wall, 2), 'per_vm_ms': round(1000 * total_wall / n, 1),
                'requests': counted['total'], 'requests_per_vm': round(counted['total'] / n, 2),
                'writes_per_vm': round(sum(v for k, v in counted['by_method'].items() if k != 'GET') / n, 2),
                'by_path': counted['by_path'], 'steps': steps, 'vms': len(vms), 'running': running,
                'latency_s': LATENCY}
    finally:
        fake.stop()


# ------------------------------------------------------------------ report


def machine(binary, python, args):
    def run(cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout.strip()
        except OSError as e:
            return str(e)
    cpu = ''
    with open('/proc/cpuinfo') as fh:
        for line in fh:
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    info = {
        'nproc': os.cpu_count(), 'cpu': cpu, 'free': run(['free', '-h']), 'kernel': platform.release(),
        'proxsync': run([binary, '--version']), 'rustc': run(['rustc', '--version']),
        'python': platform.python_version(), 'git': run(['git', '--version']),
        'fakepve': run([python, '-c', 'import fakepve; print(fakepve.__version__)']),
        'commit': run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD']),
    }
    if args.ansible:
        venv = args.ansible_venv
        info['ansible'] = run([os.path.join(venv, 'bin', 'ansible'), '--version']).splitlines()[0]
        info['ansible_collections'] = run([os.path.join(venv, 'bin', 'python'), '-c',
                                           'import json,os,ansible_collections as a;'
                                           'p=os.path.join(os.path.dirname(a.__file__) if a.__file__ else list(a.__path__)[0],'
                                           '"community","proxmox","MANIFEST.json");'
                                           'print("community.proxmox", json.load(open(p))["collection_info"]["version"])'])
        info['proxmoxer'] = run([os.path.join(venv, 'bin', 'python'), '-c',
                                 'import proxmoxer; print(proxmoxer.__version__)'])
    return info


def fmt_kb(kb):
    return '-' if kb is None else '%.1f MiB' % (kb / 1024)


def table(results):
    rows = []
    head = ['measure'] + ['N=%d' % r['n'] for r in results['sizes']]
    rows.append(head)

    def row(label, fn):
        vals = []
        for r in results['sizes']:
            try:
                vals.append(fn(r))
            except (KeyError, TypeError):
                vals.append('-')
        rows.append([label] + vals)
    row('idle: API requests / cycle', lambda r: '%d' % r['idle']['requests'])
    row('idle: CPU ms / cycle (mean)', lambda r: '%.1f' % r['idle']['cpu_ms_mean'])
    row('idle: wall ms (control req -> STATUS)', lambda r: '%.1f' % r['idle']['wall_ms_median'])
    row('idle: cycleMs (_summary.yaml)', lambda r: '%d' % r['idle']['cycle_ms_median'])
    row('idle daemon peak RSS (VmHWM)', lambda r: fmt_kb(r['idle_daemon_peak_rss_kb']))
    row('push -> first write, ms (median)', lambda r: '%.0f' % r['push']['median_ms'])
    row('create: wall to all Ready', lambda r: '%.1f s' % r['create']['wall_s'] if 'create' in r
        else 'extrapolated %.0f s' % r['create_extrapolated']['wall_s'])
    row('create: ms per VM', lambda r: '%.1f' % r['create']['per_vm_ms'] if 'create' in r
        else '(%.1f)' % r['create_extrapolated']['per_vm_ms'])
    row('create: API requests per VM', lambda r: '%.2f' % r['create']['requests_per_vm'] if 'create' in r
        else '(%.2f)' % r['create_extrapolated']['requests_per_vm'])
    row('create: proxsync CPU s / fakepve CPU s', lambda r: '%.1f / %.1f' % (
        r['create']['proxsync_cpu_s'], r['create']['fakepve_cpu_s']))
    row('create: peak RSS', lambda r: fmt_kb(r['create']['peak_rss_kb']))
    row('startup to READY=1, warm db', lambda r: '%.2f s' % r['startup_warm']['ready_s'])
    row('startup to READY=1, empty db', lambda r: '%.2f s' % r['startup_empty']['ready_s'])
    row('  requests of the empty-db start', lambda r: '%d' % r['startup_empty']['requests'])
    row('  requests per adopted VM', lambda r: '%.2f' % (r['startup_empty']['requests'] / r['n']))
    row('  empty-db start peak RSS', lambda r: fmt_kb(r['startup_empty']['peak_rss_kb']))
    row('adopt (first daemon): requests / RSS', lambda r: '%d / %s' % (
        r['adopt']['requests'], fmt_kb(r['adopt']['peak_rss_kb'])))
    row('proxsync status: wall s (median) / RSS', lambda r: '%.3f / %s' % (
        r['cli']['status_s_median'], fmt_kb(r['cli']['status_peak_rss_kb'])))
    row('proxsync plan: wall s (median) / RSS', lambda r: '%.3f / %s' % (
        r['cli']['plan_s_median'], fmt_kb(r['cli']['plan_peak_rss_kb'])))
    for a in results.get('ansible', []):
        rows.append(['Ansible N=%d: wall / ms per VM / req per VM' % a['n'],
                     '%.1f s / %.0f / %.2f' % (a['wall_s'], a['per_vm_ms'], a['requests_per_vm'])])
    width = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(len(head))]
    out = []
    for k, r in enumerate(rows):
        out.append('  '.join(c.ljust(width[i]) for i, c in enumerate(r)).rstrip())
        if k == 0:
            out.append('  '.join('-' * w for w in width))
    return '\n'.join(out)


def main():
    p = argparse.ArgumentParser(description='proxsync benchmarks (issue 6)')
    p.add_argument('--quick', action='store_true', help='100 specs only')
    p.add_argument('--sizes', default=None, help='comma-separated spec counts (default 100,1000,10000)')
    p.add_argument('--create-max', type=int, default=1000,
                   help='largest N whose VMs proxsync creates; larger sizes start from pre-made owned VMs and '
                        'extrapolate the create figures from the largest created size (default 1000)')
    p.add_argument('--ansible', type=int, default=100, help='VMs the Ansible playbook creates (0: skip)')
    p.add_argument('--ansible-venv', default=os.path.join(ROOT, 'bench', '.venv-ansible'))
    p.add_argument('--idle-reps', type=int, default=5)
    p.add_argument('--push-reps', type=int, default=3)
    p.add_argument('--cli-reps', type=int, default=3, help='runs of proxsync status and plan')
    p.add_argument('--sites', type=int, default=1,
                   help='sites, each a fakepve process of its own (default 1); the specs are spread over them')
    p.add_argument('--nodes', type=int, default=1, help='nodes per site (default 1)')
    p.add_argument('--binary', required=True)
    p.add_argument('--python', required=True, help="fakepve's Python")
    p.add_argument('--out', default=os.path.join(ROOT, 'bench', 'results'))
    p.add_argument('--keep', metavar='DIR',
                   help='work in DIR (new or empty) and keep it: workspaces, databases, logs, to re-run a '
                        'daemon by hand (under heaptrack or perf)')
    p.add_argument('--daemon-prefix', default='',
                   help='a command the daemon runs under, e.g. "heaptrack -o /tmp/h-{log}" ({log}: the daemon log\'s '
                        'name, daemon-warm...; figures are then those of the wrapped process)')
    args = p.parse_args()
    DAEMON_PREFIX.extend(shlex.split(args.daemon_prefix))
    FLEET.update(sites=max(args.sites, 1), nodes=max(args.nodes, 1))
    # SIGTERM unwinds like Ctrl-C, so every finally stops what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [100] if args.quick else [int(s) for s in (args.sizes or '100,1000,10000').split(',')]

    results = {'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), 'quick': args.quick, 'sizes': [],
               'machine': machine(args.binary, args.python, args), 'ansible': []}
    t_all = time.monotonic()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        tmp = os.path.abspath(args.keep)
    else:
        tmp = tempfile.mkdtemp(prefix='proxsync-bench-')
    try:
        for n in sizes:
            r = bench_size(n, args, args.binary, args.python, tmp)
            results['sizes'].append(r)
        created = [r for r in results['sizes'] if 'create' in r]
        for r in results['sizes']:
            if 'create' not in r and created:
                ref = created[-1]
                c = ref['create']
                r['create_extrapolated'] = {
                    'from_n': ref['n'], 'per_vm_ms': c['per_vm_ms'], 'requests_per_vm': c['requests_per_vm'],
                    'wall_s': round(c['per_vm_ms'] * r['n'] / 1000, 1),
                    'note': 'linear in N from the N=%d run: not measured' % ref['n']}
        if args.ansible:
            log('Ansible: creating %d VMs' % args.ansible)
            results['ansible'].append(bench_ansible(args.ansible, args, args.python, tmp))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    results['total_s'] = round(time.monotonic() - t_all, 1)
    os.makedirs(args.out, exist_ok=True)
    name = os.path.join(args.out, '%s%s.json' % (time.strftime('%Y%m%d-%H%M%S'), '-quick' if args.quick else ''))
    with open(name, 'w') as fh:
        json.dump(results, fh, indent=1)
    print(table(results))
    print()
    print('raw results: %s (total %.0f s)' % (os.path.relpath(name, os.getcwd()), results['total_s']))


if __name__ == '__main__':
    main()
