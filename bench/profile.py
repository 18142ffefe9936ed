#!/usr/bin/env python3
"""Profiles the daemon's idle cycles at N specs with `perf record` (for finding hot spots).

    bench/profile.py --binary B --python P [--n 10000] [--cycles 20] [--out DIR]

Starts fakepve with N VMs owned by proxsync (tag and marker), lets a daemon adopt them, restarts
it on the warm database, then records `perf record -g` on the daemon while it runs `--cycles`
idle cycles (asked for on the control socket, one after the other), and prints
`perf report --no-children` (top symbols) to stdout. A binary with line tables gives better
stacks: CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--binary', required=True)
    p.add_argument('--python', required=True)
    p.add_argument('--n', type=int, default=10000)
    p.add_argument('--cycles', type=int, default=20)
    p.add_argument('--out', default=None, help='keep perf.data and the report here')
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix='proxsync-profile-')
    out = args.out or tmp
    os.makedirs(out, exist_ok=True)
    fake = bench.FakePve(args.python, bench.scenario(args.n), os.path.join(tmp, 'fakepve.log'))
    daemons = []
    try:
        fake.call('time_scale', value=0)
        ws = bench.Workspace(os.path.join(tmp, 'ws'), fake, args.n)
        ws.write_specs(args.n)
        ws.push()
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'adopt', args.n, fake)
        daemons.append(d)
        t = time.monotonic()
        d.reconcile()
        bench.wait_all_ready(d, args.n, t, 3600)
        d.stop()
        daemons.remove(d)
        d, fig = bench.start_daemon(args.binary, ws, tmp, 'warm', args.n, fake)
        daemons.append(d)
        # Settle, then record.
        t = time.monotonic()
        d.reconcile()
        d.wait_status_after(t, 600)
        data = os.path.join(out, 'perf.data')
        perf = subprocess.Popen(['perf', 'record', '-F', '1999', '-g', '--call-graph', 'dwarf,16384', '-o', data,
                                 '-p', str(d.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        cpu0 = d.cpu_s()
        for _ in range(args.cycles):
            t = time.monotonic()
            d.reconcile()
            d.wait_status_after(t, 600)
        cpu = d.cpu_s() - cpu0
        perf.send_signal(2)
        perf.wait(60)
        print('%d idle cycles at N=%d: %.1f ms CPU per cycle' % (args.cycles, args.n, 1000 * cpu / args.cycles))
        report = subprocess.run(['perf', 'report', '-i', data, '--no-children', '--stdio', '-g', 'none',
                                 '--percent-limit', '0.7', '--sort', 'symbol'],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        with open(os.path.join(out, 'report-self.txt'), 'w') as fh:
            fh.write(report)
        children = subprocess.run(['perf', 'report', '-i', data, '--children', '--stdio', '-g', 'none',
                                   '--percent-limit', '3', '--sort', 'symbol'],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        with open(os.path.join(out, 'report-children.txt'), 'w') as fh:
            fh.write(children)
        print(report)
        print(children)
    finally:
        for d in daemons:
            d.stop()
        fake.stop()
        if args.out is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
