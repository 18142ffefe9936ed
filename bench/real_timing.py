#!/usr/bin/env python3
"""Bulk create on a real cluster's clock: N full clones of one template, started, where a clone
task takes --clone-secs and a start --start-secs (fakepve at time_scale 1 with those durations,
every request --latency seconds late), by proxsync in several concurrency settings and by
Ansible with --forks forks (one inventory host per VM), in one run. Prints a table with each
run's wall time to all VMs running (proxsync: its STATUS= line saying N of N Ready), requests
per VM, and the physical limit of each concurrency: ceil(N / c) x (clone + start).

    bench/real_timing.py --binary B --python P [--n 50] [--clone-secs 2] [--start-secs 1]
        [--runs fixed:5,adaptive,fixed:2] [--reps 2] [--forks 5] [--contention K]

--runs: `adaptive` is proxsync's default ([reconcile] concurrency = "adaptive",
max_parallel_per_node = 10); `fixed:C` is concurrency = "fixed" with max_parallel_per_node = C;
`adaptive:C` the adaptive limit with the cap C. --contention K: the harness's clone_contention
(more than K clones at once on the node: each further one fails after PVE's 10 s lock timeout
with the storage-lock message). --forks 0 skips Ansible. Each run has a fresh fakepve, daemon
and repository. Figures are reported, never judged; a run fails only if something does not
work (a VM missing or twice, a spec not Ready within --timeout).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

log = bench.log


def reconcile_config(run):
    """The [reconcile] lines of a --runs entry."""
    kind, _, cap = run.partition(':')
    if kind == 'adaptive':
        return 'concurrency = "adaptive"\n' + ('max_parallel_per_node = %d\n' % int(cap) if cap else '')
    if kind == 'fixed' and cap:
        return 'concurrency = "fixed"\nmax_parallel_per_node = %d\n' % int(cap)
    raise SystemExit('--runs: %r is neither adaptive[:C] nor fixed:C' % run)


def fake_for(args, path):
    fake = bench.FakePve(args.python, bench.scenario(0), path)
    fake.call('create_timing', clone_secs=args.clone_secs)
    fake.call('new_vm_timing', start_secs=args.start_secs)
    if args.contention is not None:
        fake.call('clone_contention', max_clones=args.contention, wait_secs=args.lock_wait)
    return fake


def check_vms(fake, n, names):
    """Every VM once, running: (vms, running); raises on a duplicate or a missing VM."""
    vms = [v for v in fake.call('vms') if not v['template']]
    seen = {}
    for v in vms:
        seen[v['name']] = seen.get(v['name'], 0) + 1
    twice = sorted(k for k, c in seen.items() if c > 1)
    missing = sorted(set(names) - set(seen))
    if twice or missing or len(vms) != n:
        raise RuntimeError('VMs: %d for %d specs; twice: %s; missing: %s' % (len(vms), n, twice, missing))
    return len(vms), sum(1 for v in vms if v['status'] == 'running')


def wait_all_ready(d, n, after, timeout):
    """The first STATUS= line after `after` saying n of n Ready (the daemon's own cycles, its
    backoff deadlines included: never asked for another)."""
    t, _ = d.wait(lambda t, m: t > after and m.startswith('STATUS=') and
                  bench.ready_count(m[len('STATUS='):]) == (n, n), timeout, 'all %d Ready' % n)
    return t


def stalled_specs(ws):
    """Spec status files whose Stalled condition is True."""
    out = []
    for name in sorted(os.listdir(ws.status)):
        if not name.endswith('.yaml') or name.startswith('_'):
            continue
        with open(os.path.join(ws.status, name)) as fh:
            text = fh.read()
        # `- type: Stalled\n  status: 'True'` (the writer's YAML).
        i = text.find('type: Stalled')
        if i >= 0 and "status: 'True'" in text[i:i + 80].replace('"', "'"):
            out.append(name[:-5])
    return out


def parallel_per_node(ws):
    """`parallelPerNode` of each site in _summary.yaml, as text (for the record)."""
    try:
        with open(os.path.join(ws.status, '_summary.yaml')) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    out, on = [], False
    for line in lines:
        if line.strip().startswith('parallelPerNode'):
            on = True
            out.append(line.strip())
            continue
        if on and line.startswith('    '):
            out.append(line.strip())
        else:
            on = False
    return ' '.join(out) or None


def run_proxsync(args, run, rep, tmp):
    base = os.path.join(tmp, 'proxsync-%s-%d' % (run.replace(':', '-'), rep))
    os.makedirs(base)
    fake = fake_for(args, os.path.join(base, 'fakepve.log'))
    d = None
    try:
        ws = bench.Workspace(base, fake, args.n, reconcile=reconcile_config(run))
        fake.call('slow_network', latency=args.latency)
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'create-%s-%d' % (run.replace(':', '-'), rep), 0, fake)
        ws.write_specs(args.n)
        fake.call('clear_requests')
        cpu0 = d.cpu_s()
        t0 = time.monotonic()
        ws.push()
        t1 = wait_all_ready(d, args.n, t0, args.timeout)
        wall = t1 - t0
        cpu = d.cpu_s() - cpu0
        reqs = bench.count_requests(fake.requests())
        vms, running = check_vms(fake, args.n, [bench.spec_name(i) for i in range(1, args.n + 1)])
        stalled = stalled_specs(ws)
        clones = sum(c for k, c in reqs['by_path'].items() if k.startswith('POST ') and k.endswith('/clone'))
        return {
            'tool': 'proxsync', 'run': run, 'rep': rep, 'wall_s': round(wall, 2),
            'requests': reqs['total'], 'requests_per_vm': round(reqs['total'] / args.n, 2),
            'clone_requests': clones, 'failed_clones': clones - args.n,
            'vms': vms, 'running': running, 'stalled': stalled,
            'proxsync_cpu_s': round(cpu, 2), 'parallel_per_node': parallel_per_node(ws),
            'by_path': reqs['by_path'],
        }
    finally:
        if d:
            d.stop()
        fake.stop()


INVENTORY_PLAYBOOK = r"""
- hosts: all
  connection: local
  gather_facts: false
  environment:
    REQUESTS_CA_BUNDLE: "{{ ca_file }}"
  module_defaults:
    community.proxmox.proxmox_kvm:
      api_host: 127.0.0.1
      api_port: "{{ pve_port }}"
      api_user: "%(user)s"
      api_token_id: "%(token)s"
      api_token_secret: "{{ lookup('file', token_file) }}"
      validate_certs: true
      node: %(node)s
      timeout: 600
  tasks:
    - name: clone
      community.proxmox.proxmox_kvm:
        vmid: %(tpl)d
        clone: %(tpl_name)s
        newid: "{{ 100 + idx | int }}"
        name: "{{ inventory_hostname }}"
        full: true
        storage: local-lvm
    - name: configure
      community.proxmox.proxmox_kvm:
        vmid: "{{ 100 + idx | int }}"
        update: true
        name: "{{ inventory_hostname }}"
        cores: 2
        memory: 2048
        tags: ["proxsync.ansible"]
        description: "Managed by Ansible. proxsync-id: install=ansible spec={{ inventory_hostname }}"
    - name: start
      community.proxmox.proxmox_kvm:
        vmid: "{{ 100 + idx | int }}"
        state: started
"""


def run_ansible(args, rep, tmp):
    """One play over N inventory hosts (one per VM, `connection: local`), --forks at once:
    clone, configure and start each, as the three steps of bench.py's playbooks."""
    base = os.path.join(tmp, 'ansible-%d' % rep)
    os.makedirs(base)
    fake = fake_for(args, os.path.join(base, 'fakepve.log'))
    try:
        fake.call('slow_network', latency=args.latency)
        book = os.path.join(base, 'create.yml')
        with open(book, 'w') as fh:
            fh.write(INVENTORY_PLAYBOOK % {'user': bench.TOKEN_USER, 'token': bench.TOKEN_NAME, 'node': bench.NODE,
                                           'tpl': bench.TEMPLATE_VMID, 'tpl_name': bench.TEMPLATE_NAME})
        inventory = os.path.join(base, 'inventory.ini')
        with open(inventory, 'w') as fh:
            fh.write('[vms]\n')
            for i in range(1, args.n + 1):
                fh.write('%s idx=%d\n' % (bench.spec_name(i), i))
        token = os.path.join(base, 'token')
        with open(token, 'w') as fh:
            fh.write(bench.TOKEN_SECRET)
        os.chmod(token, 0o600)
        venv = args.ansible_venv
        env = dict(os.environ, ANSIBLE_HOME=os.path.join(base, 'home'), ANSIBLE_LOCAL_TEMP=os.path.join(base, 'tmp'),
                   ANSIBLE_PYTHON_INTERPRETER=os.path.join(venv, 'bin', 'python'), ANSIBLE_PIPELINING='1',
                   ANSIBLE_NOCOLOR='1', ANSIBLE_RETRY_FILES_ENABLED='0', ANSIBLE_FORCE_COLOR='0',
                   ANSIBLE_HOST_KEY_CHECKING='0', REQUESTS_CA_BUNDLE=fake.ca_file,
                   PATH=os.path.join(venv, 'bin') + ':' + os.environ['PATH'])
        fake.call('clear_requests')
        t0 = time.monotonic()
        out_log = os.path.join(base, 'ansible.log')
        with open(out_log, 'w') as out:
            rc = subprocess.run([os.path.join(venv, 'bin', 'ansible-playbook'), '-i', inventory, '-f', str(args.forks),
                                 book, '-e', json.dumps({'pve_port': fake.port, 'ca_file': fake.ca_file,
                                                         'token_file': token})],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=base).returncode
        wall = time.monotonic() - t0
        if rc != 0:
            raise RuntimeError('ansible-playbook failed with %d: see %s' % (rc, out_log))
        reqs = bench.count_requests(fake.requests())
        vms, running = check_vms(fake, args.n, [bench.spec_name(i) for i in range(1, args.n + 1)])
        return {'tool': 'ansible', 'run': 'forks:%d' % args.forks, 'rep': rep, 'wall_s': round(wall, 2),
                'requests': reqs['total'], 'requests_per_vm': round(reqs['total'] / args.n, 2),
                'vms': vms, 'running': running, 'by_path': reqs['by_path']}
    finally:
        fake.stop()


def limit_s(args, c):
    return math.ceil(args.n / c) * (args.clone_secs + args.start_secs)


def table(args, results):
    by_run = {}
    for r in results:
        by_run.setdefault((r['tool'], r['run']), []).append(r)
    rows = [['', 'wall (each rep)', 'median', 'requests per VM', 'failed clones', 'physical limit', 'x limit']]
    for (tool, run), rs in by_run.items():
        walls = [r['wall_s'] for r in rs]
        med = statistics.median(walls)
        kind, _, c = run.partition(':')
        conc = int(c) if c else (10 if kind == 'adaptive' else None)
        lim = limit_s(args, conc) if conc else None
        rows.append([
            '%s %s' % (tool, run), ' / '.join('%.1f s' % w for w in walls), '%.1f s' % med,
            ' / '.join('%.2f' % r['requests_per_vm'] for r in rs),
            ' / '.join(str(r.get('failed_clones', '-')) for r in rs),
            '%.0f s (%s at once)' % (lim, conc) if lim else '-',
            '%.2f' % (med / lim) if lim else '-',
        ])
    for c in sorted({5} | ({args.contention} if args.contention else set())):
        rows.append(['physical limit at %d at once' % c, '', '%.0f s' % limit_s(args, c), '', '', '', ''])
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append('  '.join(c.ljust(width[i]) for i, c in enumerate(r)).rstrip())
        if k == 0:
            out.append('  '.join('-' * w for w in width))
    return '\n'.join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--binary', required=True)
    p.add_argument('--python', required=True, help="fakepve's Python")
    p.add_argument('--ansible-venv', default=os.path.join(bench.ROOT, 'bench', '.venv-ansible'))
    p.add_argument('--n', type=int, default=50)
    p.add_argument('--clone-secs', type=float, default=2.0)
    p.add_argument('--start-secs', type=float, default=1.0)
    p.add_argument('--latency', type=float, default=0.005, help='seconds added to every request')
    p.add_argument('--runs', default='fixed:5,adaptive,fixed:2')
    p.add_argument('--reps', type=int, default=2)
    p.add_argument('--forks', type=int, default=5, help='Ansible forks (0: no Ansible run)')
    p.add_argument('--contention', type=int, default=None, metavar='K',
                   help='at most K clones at once on the node; more fail on the storage lock')
    p.add_argument('--lock-wait', type=float, default=10.0, help="PVE's lock timeout (seconds)")
    p.add_argument('--timeout', type=float, default=1800)
    p.add_argument('--out', default=os.path.join(bench.ROOT, 'bench', 'results'))
    p.add_argument('--keep', metavar='DIR', help='work in DIR (new or empty) and keep it: daemon logs, databases')
    args = p.parse_args()
    runs = [r for r in args.runs.split(',') if r]
    for r in runs:
        reconcile_config(r)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        tmp = os.path.abspath(args.keep)
    else:
        tmp = tempfile.mkdtemp(prefix='proxsync-realtime-')
    with open('/proc/loadavg') as fh:
        load_before = fh.read().split()[:3]
    results = []
    t_all = time.monotonic()
    try:
        for rep in range(1, args.reps + 1):
            for run in runs:
                r = run_proxsync(args, run, rep, tmp)
                log('proxsync %s rep %d: %.1f s, %.2f requests per VM, %d failed clones, %s' % (
                    run, rep, r['wall_s'], r['requests_per_vm'], r['failed_clones'], r['parallel_per_node']))
                results.append(r)
            if args.forks:
                r = run_ansible(args, rep, tmp)
                log('ansible forks %d rep %d: %.1f s, %.2f requests per VM' % (
                    args.forks, rep, r['wall_s'], r['requests_per_vm']))
                results.append(r)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    with open('/proc/loadavg') as fh:
        load_after = fh.read().split()[:3]
    out = {'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), 'args': vars(args), 'load_before': load_before,
           'load_after': load_after, 'total_s': round(time.monotonic() - t_all, 1), 'results': results,
           'machine': bench.machine(args.binary, args.python, argparse.Namespace(
               ansible=args.forks, ansible_venv=args.ansible_venv))}
    os.makedirs(args.out, exist_ok=True)
    name = os.path.join(args.out, '%s-real-timing.json' % time.strftime('%Y%m%d-%H%M%S'))
    with open(name, 'w') as fh:
        json.dump(out, fh, indent=1)
    print('N=%d, clone %.1f s, start %.1f s, %g s per request%s; load %s before, %s after' % (
        args.n, args.clone_secs, args.start_secs, args.latency,
        ', at most %d clones at once' % args.contention if args.contention is not None else '',
        ' '.join(load_before), ' '.join(load_after)))
    print(table(args, results))
    print()
    print('raw results: %s (total %.0f s)' % (os.path.relpath(name, os.getcwd()), out['total_s']))


if __name__ == '__main__':
    main()
