#!/usr/bin/env python3
"""A ProxmoxVMSet of N members on K nodes (issue 30): the create, an idle cycle's requests,
and a template change from the push to its first write (observe + plan of every member).

    bench/sets.py BINARY [--members 200] [--nodes 5] [--idle-reps 5]

Tasks finish at once (time_scale 0): the figures are proxsync's own overhead, not a real
cluster's speed. Uses bench.py's fakepve, workspace and daemon; prints a table and writes
bench/results/<time>-set.json.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

IMAGE = 'local:import/debian-12-genericcloud-amd64.qcow2'


def set_text(members, nodes, memory):
    node_list = ', '.join('pve%d' % (k + 1) for k in range(nodes))
    return ('apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: web\nspec:\n'
            '  replicas: %d\n  namePattern: "web-{index:03}"\n  placement: {nodes: [%s]}\n'
            '  template:\n    forProvider:\n      site: %s\n      image: "%s"\n      cpu: 1\n'
            '      memory: %s\n      disk: 2Gi\n      storage: local-lvm\n      network: vmbr0\n'
            % (members, node_list, bench.SITE, IMAGE, memory))


def commit_set(ws, members, nodes, memory, message):
    d = os.path.join(ws.repo, 'vms')
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'web.yaml'), 'w') as fh:
        fh.write(set_text(members, nodes, memory))
    ws.git('add', '-A')
    ws.git('commit', '-q', '-m', message)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('binary')
    p.add_argument('--members', type=int, default=200)
    p.add_argument('--nodes', type=int, default=5)
    p.add_argument('--idle-reps', type=int, default=5)
    args = p.parse_args()
    python = os.environ.get('PROXSYNC_FAKEPVE_PYTHON', os.path.join(bench.ROOT, '.venv', 'bin', 'python'))
    bench.FLEET['nodes'] = args.nodes
    tmp = tempfile.mkdtemp(prefix='proxsync-set-bench-')
    res = {'members': args.members, 'nodes': args.nodes}
    fake = d = None
    try:
        sc = bench.scenario(0)
        sc['files'] = [{'storage': 'local', 'name': os.path.basename(IMAGE), 'size': 352649216,
                        'content': 'import'}]
        sc['time_scale'] = 0
        fake = bench.FakePve(python, sc, os.path.join(tmp, 'fakepve.log'))
        ws = bench.Workspace(tmp, fake, args.members)
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'set', 0, fake)

        fake.call('clear_requests')
        commit_set(ws, args.members, args.nodes, '1Gi', 'a set of %d' % args.members)
        t0 = time.monotonic()
        ws.push()
        t1 = bench.wait_all_ready(d, args.members, t0, 3600)
        reqs = bench.count_requests(fake.requests())
        res['create'] = {'wall_s': round(t1 - t0, 2), 'requests': reqs['total'],
                         'requests_per_vm': round(reqs['total'] / args.members, 2)}
        bench.log('create: %s' % res['create'])

        res['idle'] = bench.measure_idle(d, fake, ws, args.idle_reps)
        bench.log('idle: %d requests, median cycle %s ms' % (
            res['idle']['requests'], res['idle']['cycle_ms_median']))

        # The template changed: every member is an update. From the push to its first write.
        commit_set(ws, args.members, args.nodes, '2Gi', 'template memory 2Gi')
        fake.call('clear_requests')
        t0 = time.monotonic()
        ws.push()
        first = None
        while time.monotonic() - t0 < 600 and first is None:
            first = next((r for r in fake.requests() if r['method'] != 'GET'), None)
            time.sleep(bench.POLL)
        t_first = time.monotonic()
        t_done = bench.wait_all_ready(d, args.members, t_first, 3600)
        reqs = bench.count_requests(fake.requests())
        res['template_change'] = {'push_to_first_write_ms': round(1000 * (t_first - t0), 1),
                                  'all_ready_s': round(t_done - t0, 2), 'requests': reqs['total']}
        bench.log('template change: %s' % res['template_change'])
    finally:
        if d:
            d.stop()
        if fake:
            fake.stop()
    out = os.path.join(bench.ROOT, 'bench', 'results', time.strftime('%Y%m%d-%H%M%S') + '-set.json')
    with open(out, 'w') as fh:
        json.dump(res, fh, indent=1)
    print('| set | create (wall, requests/VM) | idle cycle (requests, median cycleMs) | template change: push -> first write, all Ready |')
    print('| --- | --- | --- | --- |')
    print('| %d members on %d nodes | %.2f s, %.2f | %d, %s ms | %.0f ms, %.2f s |' % (
        args.members, args.nodes, res['create']['wall_s'], res['create']['requests_per_vm'],
        res['idle']['requests'], res['idle']['cycle_ms_median'],
        res['template_change']['push_to_first_write_ms'], res['template_change']['all_ready_s']))
    print('raw figures: %s' % os.path.relpath(out, bench.ROOT))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
