#!/usr/bin/env python3
"""The daemon's memory at N specs (issue 47), with bench.py's fleet, workspace and daemon.

    bench/memory.py --binary B --python P --n 50000 --dir DIR [--sites 10 --nodes 5]
                    [--phases adopt,cold,warm,warmheap,plan,perfplan,emptyheap]
                    [--state-root DIR2] [--cold-runs 5]

Phases, in this order:
- adopt: an empty-database start until every spec is Ready (VmRSS and VmHWM at READY);
- cold: --cold-runs more empty-database starts, each after the state database and the status
  directory were removed (the marker key kept): time to READY, the daemon's and fakepve's CPU;
- warmheap: a warm start under heaptrack, 3 idle cycles, then SIGKILL at the idle point (what
  heaptrack reports as leaked is what the daemon holds between cycles);
- warm: a warm start, 3 idle cycles (VmRSS, VmHWM), then 2 more for the idle CPU;
- plan: `proxsync plan` and `proxsync status` under /usr/bin/time, then `plan` under heaptrack;
- perfplan: `proxsync plan` and `proxsync status` under `perf record -g` (read with perf report);
- emptyheap: an empty-database start under heaptrack.
Writes DIR/result-N.json; heaptrack files go to DIR (read them with heaptrack_print).
Tasks end at once on fakepve: the times measure overhead, not speed.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

BIN = None
PY = None


def log(*a):
    print('[memory %s]' % time.strftime('%H:%M:%S', time.gmtime()), *a, file=sys.stderr, flush=True)


def smaps(pid):
    out = {}
    try:
        with open('/proc/%d/smaps_rollup' % pid) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] == 'kB':
                    out[parts[0].rstrip(':')] = int(parts[1])
    except OSError:
        pass
    st = {}
    for k in ('VmHWM', 'VmRSS', 'RssAnon', 'RssFile'):
        st[k] = bench.proc_status_kb(pid, k)
    return {'status': st, 'rollup': {k: out.get(k) for k in ('Rss', 'Anonymous', 'Private_Dirty')}}


def idle_cycles(d, k):
    for _ in range(k):
        t = time.monotonic()
        d.reconcile()
        d.wait_status_after(t, 3600)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--n', type=int, required=True)
    p.add_argument('--dir', required=True)
    p.add_argument('--sites', type=int, default=10)
    p.add_argument('--nodes', type=int, default=5)
    p.add_argument('--phases', default='adopt,warm')
    p.add_argument('--binary', required=True, help='the proxsync binary (a release build)')
    p.add_argument('--python', required=True, help="fakepve's Python")
    p.add_argument('--state-root', default=None,
                   help='where the state and status directories go (default: under --dir), e.g. a '
                        'journalled ext4 of its own: see BENCHMARKS.md on file systems without a journal')
    p.add_argument('--cold-runs', type=int, default=5)
    p.add_argument('--adopt-prefix', default='',
                   help='a command the adopt phase\'s daemon runs under, e.g. "perf record -g -o F"')
    args = p.parse_args()
    global BIN, PY
    BIN, PY = os.path.abspath(args.binary), args.python
    phases = args.phases.split(',')
    bench.FLEET.update(sites=args.sites, nodes=args.nodes)
    os.makedirs(args.dir, exist_ok=True)
    tmp = os.path.abspath(args.dir)
    n = args.n
    res = {'n': n, 'sites': args.sites, 'nodes': args.nodes}
    base = os.path.join(tmp, 'n%d' % n)
    os.makedirs(base)
    t = time.monotonic()
    fake = bench.Fleet(PY, n, os.path.join(base, 'fakepve.log'))
    log('fleet up in %.1f s' % (time.monotonic() - t))
    daemons = []
    try:
        fake.call('time_scale', value=0)
        state_root = os.path.join(os.path.abspath(args.state_root), 'n%d' % n) if args.state_root else None
        ws = bench.Workspace(base, fake, n, state_root=state_root)
        ws.write_specs(n)
        ws.push()
        log('specs pushed')
        if 'adopt' in phases:
            bench.DAEMON_PREFIX[:] = args.adopt_prefix.split()
            d, fig = bench.start_daemon(BIN, ws, tmp, 'adopt', n, fake)
            bench.DAEMON_PREFIX[:] = []
            daemons.append(d)
            fig['mem_at_ready'] = smaps(d.pid)
            res['adopt'] = fig
            log('adopt: ready %ss, %s' % (fig['ready_s'], fig['mem_at_ready']))
            t = time.monotonic()
            d.reconcile()
            bench.wait_all_ready(d, n, t, 3600)
            res['adopt_after_all_ready'] = smaps(d.pid)
            d.stop()
            daemons.remove(d)
            shutil.copy(os.path.join(ws.state, 'proxsync.redb'), os.path.join(base, 'proxsync.redb.warm'))
        if 'cold' in phases:
            res['cold'] = []
            for i in range(args.cold_runs):
                os.remove(os.path.join(ws.state, 'proxsync.redb'))
                # Renamed aside, not removed: ext4 does not reuse an inode freed in the last
                # 60-300 s and scans for another at each create, which made a start right after
                # removing 50,000 status files take 36 s instead of 14 (BENCHMARKS.md, stop 68).
                if os.path.exists(ws.status):
                    os.rename(ws.status, '%s.before-cold-%d' % (ws.status, i))
                cpu0 = fake.cpu_s()
                d, fig = bench.start_daemon(BIN, ws, tmp, 'cold', n, fake)
                daemons.append(d)
                fig['fake_cpu_s'] = round(fake.cpu_s() - cpu0, 2)
                res['cold'].append({k: fig[k] for k in ('ready_s', 'requests', 'cpu_s', 'fake_cpu_s',
                                                        'peak_rss_kb')})
                log('cold: %s' % res['cold'][-1])
                d.stop()
                daemons.remove(d)
            shutil.copy(os.path.join(base, 'proxsync.redb.warm'), os.path.join(ws.state, 'proxsync.redb'))
        if 'warmheap' in phases:
            bench.DAEMON_PREFIX[:] = ['heaptrack', '-o', os.path.join(tmp, 'h-warm-%d' % n)]
            d, fig = bench.start_daemon(BIN, ws, tmp, 'warmheap', n, fake)
            daemons.append(d)
            fig['mem_at_ready'] = smaps(d.pid)
            idle_cycles(d, 3)
            fig['mem_idle'] = smaps(d.pid)
            res['warmheap'] = fig
            log('warm (heaptrack): ready %ss, %s' % (fig['ready_s'], fig['mem_idle']))
            # SIGKILL at the idle point: what it holds between cycles is heaptrack's "leaked".
            os.kill(d.pid, signal.SIGKILL)
            d.proc.wait(1800)
            d.stop()
            daemons.remove(d)
            bench.DAEMON_PREFIX[:] = []
            log('heaptrack warm written')
        if 'warm' in phases:
            d, fig = bench.start_daemon(BIN, ws, tmp, 'warm', n, fake)
            daemons.append(d)
            fig['mem_at_ready'] = smaps(d.pid)
            idle_cycles(d, 3)
            fig['mem_idle'] = smaps(d.pid)
            # Idle 10 s on: the sites' kept-alive connections let go (4 s; pveproxy closes at 5).
            time.sleep(10)
            fig['mem_idle_10s'] = smaps(d.pid)
            log('warm: idle 10 s on: %s' % fig['mem_idle_10s'])
            cpu0 = d.cpu_s()
            idle_cycles(d, 2)
            fig['idle_cpu_ms'] = round(1000 * (d.cpu_s() - cpu0) / 2, 1)
            # `plan` beside the running daemon, which makes it (its own config file).
            fig['plan_beside_daemon'] = []
            for _ in range(3):
                r = subprocess.run(['/usr/bin/time', '-f', '%M %e %U %S', BIN, 'plan', '--config', ws.config],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                fig['plan_beside_daemon'].append(r.stderr.strip().splitlines()[-1])
            log('plan beside the daemon: %s (maxrss kB, wall, user, sys)' % fig['plan_beside_daemon'])
            res['warm'] = fig
            log('warm: ready %ss, %s' % (fig['ready_s'], fig['mem_idle']))
            d.stop()
            daemons.remove(d)
        if 'plan' in phases:
            for cmd in ('plan', 'status'):
                t = time.monotonic()
                r = subprocess.run(['/usr/bin/time', '-f', '%M %e %U %S', BIN, cmd, '--config', ws.config],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                res['%s_time' % cmd] = r.stderr.strip().splitlines()[-1]
                log('%s: %s (maxrss kB, wall, user, sys), exit %d' % (cmd, res['%s_time' % cmd], r.returncode))
            r = subprocess.run(['heaptrack', '-o', os.path.join(tmp, 'h-plan-%d' % n), BIN, 'plan', '--config',
                                ws.config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            log('heaptrack plan exit %d' % r.returncode)
            with open(os.path.join(tmp, 'h-plan-%d.err' % n), 'w') as fh:
                fh.write(r.stderr)
        if 'perfplan' in phases:
            data = os.path.join(tmp, 'perf-plan-%d.data' % n)
            r = subprocess.run(['perf', 'record', '-F', '999', '-g', '-o', data, BIN, 'plan', '--config',
                                ws.config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            log('perf plan exit %d: %s' % (r.returncode, data))
            data = os.path.join(tmp, 'perf-status-%d.data' % n)
            r = subprocess.run(['perf', 'record', '-F', '999', '-g', '-o', data, BIN, 'status', '--config',
                                ws.config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            log('perf status exit %d: %s' % (r.returncode, data))
        if 'emptyheap' in phases:
            if os.path.exists(os.path.join(ws.state, 'proxsync.redb')):
                os.remove(os.path.join(ws.state, 'proxsync.redb'))
            bench.DAEMON_PREFIX[:] = ['heaptrack', '-o', os.path.join(tmp, 'h-empty-%d' % n)]
            d, fig = bench.start_daemon(BIN, ws, tmp, 'emptyheap', n, fake)
            daemons.append(d)
            fig['mem_at_ready'] = smaps(d.pid)
            res['emptyheap'] = fig
            log('empty (heaptrack): ready %ss, %s' % (fig['ready_s'], fig['mem_at_ready']))
            d.stop()
            daemons.remove(d)
            bench.DAEMON_PREFIX[:] = []
    finally:
        for d in daemons:
            try:
                d.stop()
            except Exception as e:
                log('stop: %s' % e)
        fake.stop()
        with open(os.path.join(tmp, 'result-%d.json' % n), 'w') as fh:
            json.dump(res, fh, indent=1)
        log('done')


if __name__ == '__main__':
    main()
