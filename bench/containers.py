#!/usr/bin/env python3
"""Containers on a real cluster's clock (issue 29): N containers (`kind: ProxmoxLXC`) created
from an OS template (a vztmpl on storage `local`) and started, where a container create task
takes --create-secs and a start --start-secs (fakepve at time_scale 1 with those durations,
every request --latency seconds late), by proxsync in one or more concurrency settings and by
Ansible's community.proxmox.proxmox (the LXC module) with --forks forks, one inventory host per
container, in one run. Prints a table with each run's wall time to all containers running
(proxsync: its STATUS= line saying N of N Ready; Ansible: the playbook's end), requests per
container, and the physical limit of each concurrency: ceil(N / c) x (create + start).

    bench/containers.py --binary B --python P [--n 50] [--create-secs 2] [--start-secs 1]
        [--latency 0.005] [--runs adaptive,fixed:5] [--reps 2] [--forks 5]

Through bench/run: `bench/run --containers [options]`. --runs as bench/real_timing.py's
(`adaptive` is proxsync's default, `fixed:C` a fixed per-node limit C, `adaptive:C` the adaptive
limit with the cap C; `--runs=` none); --forks 0 skips Ansible. Each run has a fresh fakepve,
daemon and repository. Figures are reported, never judged; a run fails only if something does
not work (a container missing or twice, not running, a spec not Ready within --timeout).
"""

import argparse
import json
import math
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import real_timing  # noqa: E402

log = bench.log

TEMPLATE = 'local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst'
TEMPLATE_SIZE = 125_874_483     # bytes, about what the real file weighs
FIRST_VMID = 100                # Ansible's containers: 101..100+N (proxsync picks its own)


def ct_name(i):
    return 'ct-%03d' % i


def ct_spec(i):
    return ('apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n'
            '    site: {site}\n    node: {node}\n    template: {tpl}\n    cores: 1\n    memory: 512Mi\n'
            '    swap: 512Mi\n    rootfs: {{storage: local-lvm, size: 8Gi}}\n    networks:\n'
            '      - {{name: eth0, bridge: vmbr0, ip: dhcp}}\n').format(
                name=ct_name(i), site=bench.SITE, node=bench.NODE, tpl=TEMPLATE)


def fake_for(args, path):
    """bench's scenario (one node, local and local-lvm, our token) with the OS template on
    `local`; container creates take --create-secs, their starts --start-secs."""
    sc = bench.scenario(0)
    sc['files'] = [{'storage': 'local', 'name': TEMPLATE.split('/', 1)[1], 'size': TEMPLATE_SIZE,
                    'content': 'vztmpl'}]
    fake = bench.FakePve(args.python, sc, path)
    fake.call('ct_timing', create_secs=args.create_secs, start_secs=args.start_secs)
    return fake


def guests(fake):
    """GET /cluster/resources?type=vm as a client sees it (token auth, fakepve's CA)."""
    ctx = ssl.create_default_context(cafile=fake.ca_file)
    req = urllib.request.Request(fake.url + '/api2/json/cluster/resources?type=vm', headers={
        'Authorization': 'PVEAPIToken=%s=%s' % (bench.TOKEN_ID, bench.TOKEN_SECRET)})
    with urllib.request.urlopen(req, context=ctx, timeout=60) as r:
        return json.load(r)['data']


def check_cts(fake, n):
    """Every container once, running, named as its spec: (containers, running); raises on a
    duplicate, a missing one or a VM."""
    listed = guests(fake)
    cts = [g for g in listed if g.get('type') == 'lxc' and not g.get('template')]
    others = [g for g in listed if g.get('type') != 'lxc' and not g.get('template')]
    seen = {}
    for g in cts:
        seen[g.get('name')] = seen.get(g.get('name'), 0) + 1
    names = [ct_name(i) for i in range(1, n + 1)]
    twice = sorted(k for k, c in seen.items() if c > 1)
    missing = sorted(set(names) - set(seen))
    if twice or missing or len(cts) != n or others:
        raise RuntimeError('containers: %d for %d specs; twice: %s; missing: %s; VMs: %d' % (
            len(cts), n, twice, missing, len(others)))
    return len(cts), sum(1 for g in cts if g.get('status') == 'running')


def creates_of(by_path):
    return sum(c for k, c in by_path.items() if k.startswith('POST ') and k.endswith('/lxc'))


def run_proxsync(args, run, rep, tmp):
    label = '%s-%d' % (run.replace(':', '-'), rep)
    base = os.path.join(tmp, 'proxsync-' + label)
    os.makedirs(base)
    fake = fake_for(args, os.path.join(base, 'fakepve.log'))
    d = None
    try:
        ws = bench.Workspace(base, fake, args.n, reconcile=real_timing.reconcile_config(run))
        fake.call('slow_network', latency=args.latency)
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'containers-' + label, 0, fake)
        specs = os.path.join(ws.repo, 'cts')
        os.makedirs(specs)
        for i in range(1, args.n + 1):
            with open(os.path.join(specs, ct_name(i) + '.yaml'), 'w') as fh:
                fh.write(ct_spec(i))
        ws.git('add', '-A')
        ws.git('commit', '-q', '-m', '%d containers' % args.n)
        fake.call('clear_requests')
        cpu0 = d.cpu_s()
        t0 = time.monotonic()
        ws.push()
        try:
            t1 = real_timing.wait_all_ready(d, args.n, t0, args.timeout)
        except RuntimeError as e:
            statuses = d.statuses()
            raise RuntimeError('%s; last STATUS=: %s; daemon log and status files under %s' % (
                e, statuses[-1][1] if statuses else None, base)) from e
        wall = t1 - t0
        cpu = d.cpu_s() - cpu0
        reqs = bench.count_requests(fake.requests())
        cts, running = check_cts(fake, args.n)
        creates = creates_of(reqs['by_path'])
        return {
            'tool': 'proxsync', 'run': run, 'rep': rep, 'wall_s': round(wall, 2),
            'requests': reqs['total'], 'requests_per_ct': round(reqs['total'] / args.n, 2),
            'create_requests': creates, 'failed_creates': creates - args.n,
            'containers': cts, 'running': running, 'stalled': real_timing.stalled_specs(ws),
            'proxsync_cpu_s': round(cpu, 2), 'parallel_per_node': real_timing.parallel_per_node(ws),
            'by_path': reqs['by_path'],
        }
    finally:
        if d:
            d.stop()
        fake.stop()


# One play over N inventory hosts (one per container, `connection: local`), --forks at once:
# the create (state present: the module checks the template is on its storage, looks for the
# container, creates it and waits for the vzcreate task), then the start (state started: it
# reads the container's status, starts it and waits for the vzstart task). The module's
# `state: started` does not create a container that does not exist, hence two tasks. Cores,
# memory, swap, root disk and NIC as the proxsync specs; a tag and a description as the
# ownership marks proxsync writes (sent with the create: no request of their own).
PLAYBOOK = r"""
- hosts: all
  connection: local
  gather_facts: false
  environment:
    REQUESTS_CA_BUNDLE: "{{ ca_file }}"
  module_defaults:
    community.proxmox.proxmox:
      api_host: 127.0.0.1
      api_port: "{{ pve_port }}"
      api_user: "%(user)s"
      api_token_id: "%(token)s"
      api_token_secret: "{{ lookup('file', token_file) }}"
      validate_certs: true
      node: %(node)s
      timeout: 600
  tasks:
    - name: create
      community.proxmox.proxmox:
        vmid: "{{ %(first)d + idx | int }}"
        hostname: "{{ inventory_hostname }}"
        ostemplate: "%(tpl)s"
        cores: 1
        memory: 512
        swap: 512
        disk_volume:
          storage: local-lvm
          size: 8
        netif:
          net0: "name=eth0,bridge=vmbr0,ip=dhcp"
        tags: ["proxsync.ansible"]
        description: "Managed by Ansible. proxsync-id: install=ansible spec={{ inventory_hostname }}"
        state: present
    - name: start
      community.proxmox.proxmox:
        vmid: "{{ %(first)d + idx | int }}"
        state: started
"""


def run_ansible(args, rep, tmp):
    base = os.path.join(tmp, 'ansible-%d' % rep)
    os.makedirs(base)
    fake = fake_for(args, os.path.join(base, 'fakepve.log'))
    try:
        fake.call('slow_network', latency=args.latency)
        book = os.path.join(base, 'containers.yml')
        with open(book, 'w') as fh:
            fh.write(PLAYBOOK % {'user': bench.TOKEN_USER, 'token': bench.TOKEN_NAME, 'node': bench.NODE,
                                 'first': FIRST_VMID, 'tpl': TEMPLATE})
        inventory = os.path.join(base, 'inventory.ini')
        with open(inventory, 'w') as fh:
            fh.write('[cts]\n')
            for i in range(1, args.n + 1):
                fh.write('%s idx=%d\n' % (ct_name(i), i))
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
        cts, running = check_cts(fake, args.n)
        creates = creates_of(reqs['by_path'])
        return {'tool': 'ansible', 'run': 'forks:%d' % args.forks, 'rep': rep, 'wall_s': round(wall, 2),
                'requests': reqs['total'], 'requests_per_ct': round(reqs['total'] / args.n, 2),
                'create_requests': creates, 'failed_creates': creates - args.n,
                'containers': cts, 'running': running, 'by_path': reqs['by_path']}
    finally:
        fake.stop()


def limit_s(args, c):
    return math.ceil(args.n / c) * (args.create_secs + args.start_secs)


def concurrency(run):
    """The containers a run has in flight at most on the node (adaptive: its cap, 10 by default)."""
    kind, _, c = run.partition(':')
    return int(c) if c else (10 if kind == 'adaptive' else None)


def table(args, results):
    by_run = {}
    for r in results:
        by_run.setdefault((r['tool'], r['run']), []).append(r)
    rows = [['', 'wall (each rep)', 'median', 'requests per container', 'physical limit', 'x limit']]
    for (tool, run), rs in by_run.items():
        walls = [r['wall_s'] for r in rs]
        med = statistics.median(walls)
        conc = concurrency(run)
        lim = limit_s(args, conc) if conc else None
        rows.append([
            '%s %s' % (tool, run), ' / '.join('%.1f s' % w for w in walls), '%.1f s' % med,
            ' / '.join('%.2f' % r['requests_per_ct'] for r in rs),
            '%.0f s (%d at once)' % (lim, conc) if lim else '-',
            '%.2f' % (med / lim) if lim else '-',
        ])
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
    p.add_argument('--create-secs', type=float, default=2.0, help="a container create task's seconds")
    p.add_argument('--start-secs', type=float, default=1.0, help="a container start task's seconds")
    p.add_argument('--latency', type=float, default=0.005, help='seconds added to every request')
    p.add_argument('--runs', default='adaptive', help='proxsync runs: adaptive[:C], fixed:C, comma-separated')
    p.add_argument('--reps', type=int, default=2)
    p.add_argument('--forks', type=int, default=5, help='Ansible forks (0: no Ansible run)')
    p.add_argument('--timeout', type=float, default=1800)
    p.add_argument('--out', default=os.path.join(bench.ROOT, 'bench', 'results'))
    p.add_argument('--keep', metavar='DIR', help='work in DIR (new or empty) and keep it: daemon logs, status files')
    args = p.parse_args()
    runs = [r for r in args.runs.split(',') if r]
    for r in runs:
        real_timing.reconcile_config(r)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        tmp = os.path.abspath(args.keep)
    else:
        tmp = tempfile.mkdtemp(prefix='proxsync-containers-')
    with open('/proc/loadavg') as fh:
        load_before = fh.read().split()[:3]
    results = []
    t_all = time.monotonic()
    try:
        for rep in range(1, args.reps + 1):
            for run in runs:
                r = run_proxsync(args, run, rep, tmp)
                log('proxsync %s rep %d: %.1f s, %.2f requests per container, %d failed creates, %s' % (
                    run, rep, r['wall_s'], r['requests_per_ct'], r['failed_creates'], r['parallel_per_node']))
                results.append(r)
            if args.forks:
                r = run_ansible(args, rep, tmp)
                log('ansible forks %d rep %d: %.1f s, %.2f requests per container' % (
                    args.forks, rep, r['wall_s'], r['requests_per_ct']))
                results.append(r)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    with open('/proc/loadavg') as fh:
        load_after = fh.read().split()[:3]
    out = {'started': time.strftime('%Y-%m-%dT%H:%M:%S%z'), 'args': vars(args), 'template': TEMPLATE,
           'load_before': load_before, 'load_after': load_after, 'total_s': round(time.monotonic() - t_all, 1),
           'results': results, 'machine': bench.machine(args.binary, args.python, argparse.Namespace(
               ansible=args.forks, ansible_venv=args.ansible_venv))}
    os.makedirs(args.out, exist_ok=True)
    name = os.path.join(args.out, '%s-containers.json' % time.strftime('%Y%m%d-%H%M%S'))
    with open(name, 'w') as fh:
        json.dump(out, fh, indent=1)
    print('N=%d containers, create %.1f s, start %.1f s, %g s per request; load %s before, %s after' % (
        args.n, args.create_secs, args.start_secs, args.latency, ' '.join(load_before), ' '.join(load_after)))
    print(table(args, results))
    for c in sorted({5, 10}):
        print('physical limit at %d at once: %.0f s' % (c, limit_s(args, c)))
    print()
    print('raw results: %s (total %.0f s)' % (os.path.relpath(name, os.getcwd()), out['total_s']))


if __name__ == '__main__':
    main()
