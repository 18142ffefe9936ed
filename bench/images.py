#!/usr/bin/env python3
"""A ProxmoxImage by URL and a set of N VMs made from it (issue 45): from the push of one commit
to every member Ready (PVE downloads the image to each node, then the members are created from
it), a second commit with a new image version (downloaded; the members are left alone), and a
third that says `imagePolicy: Recreate` (the members rebuilt from the new version,
`--max-unavailable` at a time).

    bench/images.py BINARY [--members 20] [--nodes 2] [--download-secs 30] [--create-secs 4]
                           [--max-unavailable 2] [--time-scale 1] [--template]

With --template the commits hold a ProxmoxTemplate built from the image (on pve1, the set's
only node: its storage is local) and the set is cloned from it (`image: {template: noble}`);
the second commit's image version builds a new template, and the roll clones from it.

With --time-scale 1 the tasks take a real cluster's seconds (a download of --download-secs, a
create that imports the disk of --create-secs); with 0 they end at once and the figures are
proxsync's own overhead, not speed. Uses bench.py's fakepve, workspace and daemon; prints a table
and writes bench/results/<time>-images.json.
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

URL = 'https://cloud-images.example/noble/%s/noble-server-cloudimg-amd64.img'
SIZE = 16 * 1024 * 1024


def image_text(url, sha256):
    return ('apiVersion: proxsync.io/v1\nkind: ProxmoxImage\nmetadata: {name: noble-cloud}\nspec:\n'
            '  forProvider:\n    site: %s\n    url: %s\n    checksum: sha256:%s\n    format: qcow2\n'
            '    storage: local\n' % (bench.SITE, url, sha256))


TEMPLATE = ('apiVersion: proxsync.io/v1\nkind: ProxmoxTemplate\nmetadata: {name: noble}\nspec:\n'
            '  forProvider:\n    site: %s\n    node: pve1\n    image: {image: noble-cloud}\n'
            '    cpu: 1\n    memory: 1Gi\n    disk: 8Gi\n    storage: local-lvm\n    network: vmbr0\n')


def set_text(members, nodes, recreate=None, template=False):
    """The set; with `recreate` (its maxUnavailable) under imagePolicy: Recreate; with
    `template`, cloned from the ProxmoxTemplate rather than made from the image."""
    node_list = ', '.join('pve%d' % (k + 1) for k in range(nodes))
    roll = '' if recreate is None else '  maxUnavailable: %d\n' % recreate
    policy = '' if recreate is None else '    imagePolicy: Recreate\n'
    image = '{template: noble}' if template else '{image: noble-cloud}'
    return ('apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: web\nspec:\n'
            '  replicas: %d\n  namePattern: "web-{index:03}"\n  placement: {nodes: [%s]}\n%s'
            '  template:\n%s    forProvider:\n      site: %s\n      image: %s\n'
            '      cpu: 1\n      memory: 1Gi\n      disk: 8Gi\n      storage: local-lvm\n'
            '      network: vmbr0\n' % (members, node_list, roll, policy, bench.SITE, image))


def template_built(ws, old=None):
    """The name of a template version other than `old` whose status says it is Ready."""
    for f in sorted(os.listdir(ws.status)):
        if not (f.startswith('noble-') and f.endswith('.yaml')) or f == '%s.yaml' % old:
            continue
        with open(os.path.join(ws.status, f)) as fh:
            if 'reason: Available' in fh.read():
                return f[:-len('.yaml')]
    return None


def rebuilt(ws, members, version):
    """How many members' Ready says they run `version` (their status files)."""
    n = 0
    for i in range(1, members + 1):
        path = os.path.join(ws.status, 'web-%03d.yaml' % i)
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        if 'version %s' % version in text and 'older version' not in text:
            n += 1
    return n


def commit(ws, files, message):
    d = os.path.join(ws.repo, 'vms')
    os.makedirs(d, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(d, name), 'w') as fh:
            fh.write(text)
    ws.git('add', '-A')
    ws.git('commit', '-q', '-m', message)


def by_kind(reqs):
    """Requests by what they are: downloads, creates, storage listings, everything else."""
    out = {'download-url': 0, 'create': 0, 'storage content': 0, 'other': 0, 'total': len(reqs)}
    for r in reqs:
        path = r['path']
        if path.endswith('/download-url'):
            out['download-url'] += 1
        elif r['method'] == 'POST' and (path.endswith('/qemu') or path.endswith('/clone')):
            out['create'] += 1
        elif path.endswith('/content'):
            out['storage content'] += 1
        else:
            out['other'] += 1
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('binary')
    p.add_argument('--members', type=int, default=20)
    p.add_argument('--nodes', type=int, default=2)
    p.add_argument('--download-secs', type=float, default=30)
    p.add_argument('--create-secs', type=float, default=4)
    p.add_argument('--max-unavailable', type=int, default=2)
    p.add_argument('--time-scale', type=float, default=1)
    p.add_argument('--template', action='store_true')
    args = p.parse_args()
    if args.template:
        args.nodes = 1
    python = os.environ.get('PROXSYNC_FAKEPVE_PYTHON', os.path.join(bench.ROOT, '.venv', 'bin', 'python'))
    bench.FLEET['nodes'] = args.nodes
    tmp = tempfile.mkdtemp(prefix='proxsync-images-bench-')
    res = {'members': args.members, 'nodes': args.nodes, 'download_secs': args.download_secs,
           'create_secs': args.create_secs, 'time_scale': args.time_scale}
    fake = d = None
    try:
        sc = bench.scenario(0)
        sc['time_scale'] = args.time_scale
        v1, v2 = URL % '20261101', URL % '20261115'
        sc['remote_files'] = [{'url': v1, 'size': SIZE}, {'url': v2, 'size': SIZE}]
        fake = bench.FakePve(python, sc, os.path.join(tmp, 'fakepve.log'))
        sums = {u: fake.call('remote_file', url=u, size=SIZE)['sha256'] for u in (v1, v2)}
        if args.time_scale > 0:
            fake.call('download_timing', secs=args.download_secs)
            fake.call('create_timing', create_secs=args.create_secs, clone_secs=args.create_secs)
        ws = bench.Workspace(tmp, fake, args.members)
        d, _ = bench.start_daemon(args.binary, ws, tmp, 'images', 0, fake)

        fake.call('clear_requests')
        first = {'image.yaml': image_text(v1, sums[v1]),
                 'web.yaml': set_text(args.members, args.nodes, template=args.template)}
        if args.template:
            first['template.yaml'] = TEMPLATE % bench.SITE
        commit(ws, first, 'an image%s and a set of %d made from it'
               % (' and a template' if args.template else '', args.members))
        t0 = time.monotonic()
        ws.push()
        t1 = bench.wait_all_ready(d, args.members + int(args.template), t0, 3600)
        reqs = by_kind(fake.requests())
        res['first_commit'] = {'wall_s': round(t1 - t0, 2), 'requests': reqs}
        bench.log('first commit: %s' % res['first_commit'])

        fake.call('clear_requests')
        commit(ws, {'image.yaml': image_text(v2, sums[v2])}, 'a new image version')
        t0 = time.monotonic()
        ws.push()
        deadline = t0 + 3600
        old = template_built(ws) if args.template else None
        while args.template and time.monotonic() < deadline:
            if template_built(ws, old):
                break
            time.sleep(0.2)
        while not args.template and time.monotonic() < deadline:
            downloads = fake.call('downloads')
            done = [x for x in downloads if x['url'] == v2]
            tasks = [t for t in fake.call('tasks') if t.get('type') == 'download'
                     and 'noble-cloud-' + sums[v2][:12] in (t.get('id') or '')]
            if len(done) >= args.nodes and tasks and all(t.get('status') == 'stopped' for t in tasks):
                break
            time.sleep(0.2)
        t1 = time.monotonic()
        reqs = by_kind(fake.requests())
        res['new_version'] = {'wall_s': round(t1 - t0, 2), 'requests': reqs}
        bench.log('new version: %s' % res['new_version'])

        fake.call('clear_requests')
        commit(ws, {'web.yaml': set_text(args.members, args.nodes, args.max_unavailable, args.template)},
               'imagePolicy: Recreate, maxUnavailable %d' % args.max_unavailable)
        t0 = time.monotonic()
        ws.push()
        deadline = t0 + 3600
        version = template_built(ws, old).rsplit('-', 1)[1] if args.template else sums[v2][:12]
        while rebuilt(ws, args.members, version) < args.members:
            if time.monotonic() > deadline:
                raise RuntimeError('the roll did not end within an hour')
            time.sleep(0.2)
        t1 = time.monotonic()
        reqs = by_kind(fake.requests())
        res['roll'] = {'wall_s': round(t1 - t0, 2), 'requests': reqs}
        bench.log('roll: %s' % res['roll'])
    finally:
        if d:
            d.stop()
        if fake:
            fake.stop()
    out = os.path.join(bench.ROOT, 'bench', 'results', time.strftime('%Y%m%d-%H%M%S') + '-images%s.json' % ('-template' if args.template else ''))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, 'w') as fh:
        json.dump(res, fh, indent=1)
    f, n, r = res['first_commit'], res['new_version'], res['roll']
    print('| commit | wall | requests (download-url, create or clone, storage listings, other) |')
    print('| --- | --- | --- |')
    what = 'image + template + set of %d cloned from it' % args.members if args.template else \
        'image + set of %d on %d nodes' % (args.members, args.nodes)
    for label, x in ((what, f),
                     ('new image version' + (' (a new template built)' if args.template else ''), n),
                     ('imagePolicy: Recreate, %d at a time' % args.max_unavailable, r)):
        q = x['requests']
        print('| %s | %.2f s | %d (%d, %d, %d, %d) |' % (label, x['wall_s'], q['total'], q['download-url'],
                                                        q['create'], q['storage content'], q['other']))
    print('raw figures: %s' % os.path.relpath(out, bench.ROOT))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
