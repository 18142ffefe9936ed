#!/usr/bin/env python3
"""What health checks cost (issue 46): N pre-made running VMs adopted by N specs, measured
without `health`, with `tcp` checks (a listener on 127.0.0.1 that every spec names as its
`address`), and with `agent: true` (each VM's agent answers fakepve's ping). For each: the first
cycle of a daemon restarted on a settled state database, which checks every guest (the round's
wall time is in its cycleMs), and idle cycles after it (`proxsync reconcile`), which check none
(a healthy guest is due every 4 minutes at most): cycleMs, CPU and requests per cycle.

    bench/health.py --binary B --python P [--n 1000] [--reps 3] [--modes none,tcp,agent]

Figures are reported, never judged; a run fails only if something does not work (a spec not
Ready, not Healthy). fakepve answers at once: these figures are proxsync's overhead.
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

log = bench.log


def spec_with(i, mode, port):
    text = bench.spec_text(i)
    if mode == 'tcp':
        return text + '    health: {tcp: {port: %d}, address: 127.0.0.1}\n' % port
    if mode == 'agent':
        return text + '    health: {agent: true}\n'
    return text


def healthy_count(ws):
    """Specs whose status file says Healthy True (Passing)."""
    n = 0
    for name in os.listdir(ws.status):
        if name.startswith('_') or not name.endswith('.yaml'):
            continue
        with open(os.path.join(ws.status, name)) as fh:
            if 'reason: Passing' in fh.read():
                n += 1
    return n


def run(mode, args, tmp, port):
    base = tempfile.mkdtemp(dir=tmp, prefix=mode + '-')
    fake = bench.FakePve(args.python, bench.scenario(args.n), os.path.join(base, 'fakepve.log'))
    d = None
    try:
        if mode == 'agent':
            for i in range(1, args.n + 1):
                fake.call('set_vm', vmid=20000 + i, agent={})
        ws = bench.Workspace(base, fake, args.n)
        specs = os.path.join(ws.repo, 'vms')
        os.makedirs(specs)
        for i in range(1, args.n + 1):
            with open(os.path.join(specs, bench.spec_name(i) + '.yaml'), 'w') as fh:
                fh.write(spec_with(i, mode, port))
        ws.git('add', '-A')
        ws.git('commit', '-q', '-m', '%d specs, health %s' % (args.n, mode))
        ws.push()
        # The first daemon adopts the VMs; its second cycle checks the guests it adopted.
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'health-%s-settle' % mode, args.n, fake)
        bench.wait_all_ready(d, args.n, d.started, 3600)
        d.stop()
        # A restart on the settled database: its first cycle checks every guest.
        fake.call('clear_requests')
        d, first = bench.start_daemon(args.binary, ws, tmp, 'health-%s' % mode, args.n, fake)
        first_cycle_ms = ws.summary_cycle_ms()
        healthy = healthy_count(ws)
        if mode != 'none' and healthy != args.n:
            raise RuntimeError('%d of %d specs Healthy after the first cycle; see %s' % (
                healthy, args.n, base))
        idle = bench.measure_idle(d, fake, ws, args.reps)
        return {
            'mode': mode, 'n': args.n,
            'first_cycle_ms': first_cycle_ms, 'first_requests': first['requests'],
            'first_by_path': first['by_path'], 'healthy': healthy,
            'idle_cycle_ms': idle['cycle_ms_median'], 'idle_cpu_ms': idle['cpu_ms_mean'],
            'idle_requests': idle['requests'], 'idle_by_path': idle['by_path'],
            'rss_kb': idle['rss_kb'],
        }
    finally:
        if d is not None:
            d.stop()
        fake.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--binary', required=True)
    p.add_argument('--python', required=True, help="fakepve's Python")
    p.add_argument('--n', type=int, default=1000)
    p.add_argument('--reps', type=int, default=3, help='idle cycles measured per mode')
    p.add_argument('--modes', default='none,tcp,agent')
    p.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results'))
    args = p.parse_args()
    # A service for every guest's tcp check: the kernel completes each connection (backlog).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(('127.0.0.1', 0))
    listener.listen(4096)
    port = listener.getsockname()[1]

    def accept():
        while True:
            conn, _ = listener.accept()
            conn.close()
    threading.Thread(target=accept, daemon=True).start()
    results = []
    with tempfile.TemporaryDirectory(prefix='proxsync-health-bench-') as tmp:
        for mode in args.modes.split(','):
            log('health %s, %d specs' % (mode, args.n))
            results.append(run(mode, args, tmp, port))
    print('| health | specs | first cycle (checks all) | its requests | idle cycle | idle CPU | idle requests |')
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for r in results:
        print('| %s | %d | %s ms | %d | %s ms | %s ms | %d |' % (
            r['mode'], r['n'], r['first_cycle_ms'], r['first_requests'], r['idle_cycle_ms'],
            r['idle_cpu_ms'], r['idle_requests']))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, 'health-%d.json' % int(time.time()))
    with open(path, 'w') as fh:
        json.dump(results, fh, indent=1)
    log('raw results: %s' % path)


if __name__ == '__main__':
    main()
