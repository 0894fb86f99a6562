"""The demo: both series at work end to end, in an embedded test cloud.

    python3 tools/demo/run.py [--verbose] [--json FILE] [--no-materialize]
                              [--nova nova34|nova]

Materializes a Nova series (the primary line, nova 34.0.0 +
patches/nova34; --nova nova or DEMO_NOVA=nova for the 33 line, nova 33.0.2
+ patches/nova) and Cyborg's, makes their venvs (reused when they are
already there), then runs the story with the real patched code:

  1. Cyborg: the generic mdev driver, loaded through its entry point,
     discovers a fake sysfs mdev tree; Cyborg's conductor reports it to the
     real Placement, in-process (cyborg venv, tools/demo/cyborg_step.py).
  2-5. Nova: the conductor's Placement requests are sent to the real
     Placement; servers boot through the API onto a libvirt driver on
     fakelibvirt (nova venv, tools/demo/nova_step.py, Nova's functional
     test harness).
  6. Every domain and node-device XML Nova sent to libvirt is validated
     against libvirt's own RelaxNG schemas (tools/libvirt_schemas.py).

On a machine shared with other Nova test runs, DEMO_NOVA_LOCK=FILE runs the
Nova step under `flock FILE`. Standard library only. The last line is
"demo: all N checks passed" (exit 0) or names the checks that failed
(exit 1).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = pathlib.Path(__file__).resolve().parent
TOOLS = HERE.parent
TOP = TOOLS.parent
BUILD = TOP / 'build'
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(TOOLS))
import story  # noqa: E402

TITLES = {
    1: 'Cyborg: the generic mdev driver discovers a (fake) sysfs mdev tree',
    2: 'Placement: Cyborg\'s providers beside Nova\'s, in the real Placement',
    3: 'Nova: boot a server with a Cyborg MDEV device profile',
    4: 'Ownership: a Nova vGPU flavor on the same host',
    5: 'Lifecycle: hard reboot, then delete',
    6: 'Validation: the XML Nova gave libvirt, against libvirt\'s schemas',
}


class Failure(Exception):
    """The demo could not run a part: said plainly, exit 2."""


START = time.time()
# The Nova lines the demo runs: the project in build/ and what it is.
NOVA_LINES = {
    'nova34': 'nova 34.0.0 + patches/nova34',
    'nova': 'nova 33.0.2 + patches/nova',
}


def progress(msg):
    print('demo: [%3ds] %s' % (time.time() - START, msg), flush=True)


def stream(cmd, prefix):
    """Run a command, showing its output as it comes."""
    proc = subprocess.Popen(cmd, cwd=TOP, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        print('  %s| %s' % (prefix, line.rstrip()), flush=True)
    return proc.wait(), ''.join(out)


def prepare(project, materialize):
    tree = BUILD / project
    series = [sys.executable, str(TOOLS / 'series')]
    if materialize:
        progress('materializing build/%s (reused when it is already base + '
                 'series)' % project)
        rc, out = stream(series + ['materialize', project], project)
        if rc:
            if 'holds work that patches' in out:
                progress('build/%s holds unexported work: the demo runs it '
                         'as it is' % project)
            else:
                raise Failure('materializing build/%s failed (see above)'
                              % project)
    elif not (tree / '.git').exists():
        raise Failure('build/%s does not exist: run `make demo` (or '
                      '`python3 tools/series materialize %s`)' % (
                          project, project))
    python = BUILD / 'venvs' / project / 'bin' / 'python'
    if materialize or not python.exists():
        progress('making build/venvs/%s (minutes the first time, seconds '
                 'after)' % project)
        rc, _ = stream(series + ['venv', project], project)
        if rc:
            raise Failure('making build/venvs/%s failed (see above)'
                          % project)
    return tree, python


def run_step(python, tree, script, args, env, log, lock=None):
    cmd = [str(python), str(HERE / script)] + [str(a) for a in args]
    if lock:
        cmd = ['flock', lock] + cmd
    with open(log, 'w') as out:
        rc = subprocess.run(cmd, cwd=tree, env=dict(os.environ, **env),
                            stdout=out, stderr=subprocess.STDOUT).returncode
    if rc:
        tail = ''.join(open(log).readlines()[-15:])
        raise Failure('%s exited %d; the end of its output (all of it is in '
                      '%s):\n%s' % (script, rc, log.relative_to(TOP), tail))


# -- rendering ----------------------------------------------------------------

def inv_text(inventories):
    return ', '.join('%s %s/%s' % (rc, v.get('used', 0), v['total'])
                     for rc, v in sorted(inventories.items()))


def draw_tree(providers, indent='  '):
    """The provider tree, root first, children sorted by name."""
    lines = []
    roots = [p for p in providers if not p['parent_uuid']]
    width = max(len(p['name']) for p in providers) + 4

    def traits_text(p):
        shown = [t for t in p['traits']
                 if t.startswith(('OWNER_', 'CUSTOM_'))]
        more = len(p['traits']) - len(shown)
        return '[%s%s]' % (', '.join(shown),
                           ' +%d more' % more if more else '')

    def walk(p, prefix, last, top):
        branch = '' if top else ('└─ ' if last else '├─ ')
        name = prefix + branch + p['name']
        lines.append('%s%s %s  %s' % (indent, name.ljust(width),
                                      inv_text(p['inventories']),
                                      traits_text(p)))
        kids = sorted((c for c in providers
                       if c['parent_uuid'] == p['uuid']),
                      key=lambda c: c['name'])
        for i, kid in enumerate(kids):
            walk(kid, prefix + ('' if top else ('   ' if last else '│  ')),
                 i == len(kids) - 1, False)
    for root in roots:
        walk(root, '', True, True)
    return lines


def alloc_text(alloc):
    return '; '.join('%s: %s' % (rp, ', '.join(
        '%s %s' % kv for kv in sorted(res.items())))
        for rp, res in sorted(alloc.items()))


def query_text(query):
    q = urllib.parse.parse_qs(query)
    return '&'.join('%s=%s' % (k, ','.join(v)) for k, v in sorted(q.items())
                    if k != 'limit')


def node_dev_text(d, cy, arq_uuid):
    flags = [f for f in ('active', 'persistent', 'autostart') if d[f]]
    operator = {u for types in cy['sysfs'].values() for i in types.values()
                for u in i['devices']}
    if d['uuid'] in operator:
        who = 'the operator\'s, made before'
    elif d['uuid'] == arq_uuid:
        who = 'made by Nova for the ARQ'
    else:
        who = 'Nova\'s own vGPU mdev'
    return 'parent %s  type %s  uuid %s  %s  (%s)' % (
        d['parent'], d['type'], d['uuid'], ', '.join(flags) or 'inactive',
        who)


def avail_text(types):
    return ', '.join('%s %d' % kv for kv in sorted(types.items()))


def render(cy, nova, checks, verbose):
    out = []
    say = out.append
    steps = nova.get('steps', {})
    arq_uuid = steps.get('3', {}).get('arq', {}).get('attach_handle_uuid')
    by_step = {}
    for c in checks:
        by_step.setdefault(c['step'], []).append(c)

    def header(n):
        say('')
        say('== %d. %s' % (n, TITLES[n]))

    def results(n):
        for c in by_step.get(n, []):
            if c['ok']:
                say('   ok    %s' % c['name'])
            else:
                say('   FAIL  %s' % c['name'])
                say('         got: %s' % c['detail'][:1500])

    header(1)
    if 'sysfs' in cy:
        say('fake /sys/class/mdev_bus:')
        for parent, types in cy['sysfs'].items():
            say('  %s  %s' % (parent, '   '.join(
                '%s: %d available%s' % (
                    t, i['available_instances'],
                    ', %d created (%s)' % (len(i['devices']),
                                           ', '.join(i['devices']))
                    if i['devices'] else '')
                for t, i in types.items())))
        if 'device_spec' in cy:
            say('[mdev] device_spec =')
            for value in cy['device_spec']:
                say('  ' + value)
        if 'driver' in cy:
            say('driver (entry point cyborg.accelerator.driver): '
                + cy['driver'])
        for dev in cy.get('discovered', []):
            say('discover(): device %s:%s, controlpath %s' % (
                dev['vendor'], dev['model'],
                dev['controlpath_id']['cpid_info']))
            for dep in dev['deployable_list']:
                attrs = {a['key']: a['value'] for a in dep['attribute_list']}
                traits = [v for k, v in sorted(attrs.items())
                          if k.startswith('trait')]
                say('  deployable %s: %s x%d, traits %s, %d attach handles'
                    % (dep['name'], attrs['rc'], dep['num_accelerators'],
                       ', '.join(traits), len(dep['attach_handle_list'])))
        for warning in cy.get('warnings', []):
            say('WARNING %s' % warning)
        reqs = cy.get('placement_requests', [])
        writes = [r for r in reqs if r['method'] != 'GET']
        say('conductor report_data(): %d Placement requests, %d writes:'
            % (len(reqs), len(writes)))
        for r in writes:
            say('  %s %s' % (r['method'], r['url']))
        say('what Cyborg reported for the two types of %s, in Placement:'
            % story.CYBORG_PARENT)
        for p in sorted(cy.get('providers', []), key=lambda p: p['name']):
            for rc, inv in sorted(p['inventories'].items()):
                say('  %s: %s total %d, reserved %d; %d attach handles' % (
                    p['name'], rc, inv['total'], inv['reserved'],
                    len([h for h in cy.get('attach_handles', [])
                         if h['rp_uuid'] == p['uuid']])))
    results(1)

    if 2 in steps or 2 in by_step or '2' in steps:
        s = steps.get('2', {})
        header(2)
        if 'libvirt_parents' in s:
            say('nova-compute %s on fakelibvirt, mtty parents (libvirt '
                'availableInstances): %s' % (story.HOST, '; '.join(
                    '%s %s' % (p, avail_text(t))
                    for p, t in s['libvirt_parents'].items())))
        if 'replayed' in s:
            say('sent the %d requests of Cyborg\'s conductor to the real '
                'Placement (compute node uuid for the fixture\'s)'
                % len(s['replayed']))
        if 'tree' in s:
            say('provider tree (used/total, traits):')
            out.extend(draw_tree(s['tree']))
    results(2)

    if '3' in steps:
        s = steps['3']
        header(3)
        dp = s['device_profile']
        say('device profile %s: groups %s (%d attach handles from the '
            'Cyborg step)' % (dp['name'], json.dumps(dp['groups']),
                              dp['attach_handles']))
        say('flavor %s: %s' % (s['flavor']['name'], ', '.join(
            '%s=%s' % kv for kv in s['flavor']['extra_specs'].items())))
        if 'server' in s:
            say('server cyborg-server: %s' % s['server']['status'])
        if 'query' in s:
            say('scheduler asked Placement: ' + query_text(
                s['query']['query']))
        if 'allocation' in s:
            say('allocation: ' + alloc_text(s['allocation']))
        if 'arq' in s:
            a = s['arq']
            info = a['attach_handle_info']
            say('ARQ %s %s: attach handle %s (%s, %s:%s:%s.%s %s, %s)' % (
                a['uuid'], a['state'], a['attach_handle_uuid'],
                a['attach_handle_type'], info['domain'], info['bus'],
                info['device'], info['function'], info['asked_type'],
                info['vgpu_mark']))
        if 'hostdevs' in s:
            say('guest domain XML, hostdevs:')
            for h in s['hostdevs']:
                out.extend('  ' + line for line in h.splitlines())
        if 'node_devices' in s:
            say('libvirt node devices (mdevs):')
            for d in s['node_devices']:
                say('  ' + node_dev_text(d, cy, arq_uuid))
    results(3)

    if '4' in steps:
        s = steps['4']
        header(4)
        say('flavor vgpu: resources:VGPU=1')
        say('GET /allocation_candidates?resources=VGPU:1 (no owner '
            'traits) offers: ' + ', '.join(s['raw_vgpu_candidates']))
        if 'query' in s:
            say('scheduler asked Placement: ' + query_text(
                s['query']['query']))
            for cand in s['query']['candidates']:
                say('  candidate: ' + '; '.join(
                    '%s: %s' % (rp, ', '.join('%s %s' % tuple(r)
                                              for r in res))
                    for rp, res in cand))
        if 'allocation' in s:
            say('allocation: ' + alloc_text(s['allocation']))
        if s.get('mdev'):
            say('guest mdev %s on %s, type %s' % (
                s['mdev']['uuid'], s['mdev']['parent'], s['mdev']['type']))
        if 'tree' in s:
            say('provider tree (used/total, traits):')
            out.extend(draw_tree(s['tree']))
    results(4)

    if '5' in steps:
        s = steps['5']
        header(5)
        if 'reboot' in s:
            say('hard reboot cyborg-server: %s; guest hostdev uuid %s' % (
                'its mdev kept, not re-made' if s['reboot']['same_mdev']
                else 'its mdev was RE-MADE',
                ', '.join(s['reboot']['hostdev_uuids'])))
        if 'delete' in s:
            d = s['delete']
            say('delete both servers:')
            say('  Placement %s used on Cyborg\'s provider: %d -> %d' % (
                story.MDEV_RC, d['before']['placement'],
                d['after']['placement']))
            for parent in story.PARENTS:
                say('  parent %s available: %s -> %s' % (
                    parent, avail_text(d['before']['parent'][parent]),
                    avail_text(d['after']['parent'][parent])))
            say('  node devices left:')
            for dev in d['node_devices']:
                say('    ' + node_dev_text(dev, cy, arq_uuid))
        if 'tree' in s:
            say('provider tree (used/total, traits):')
            out.extend(draw_tree(s['tree']))
    results(5)

    if '6' in steps or 6 in by_step:
        s = steps.get('6', {})
        header(6)
        say('(Nova writes node-device XML without <name>, libvirt names the '
            'device; it is checked with a placeholder name)')
        for r in s.get('results', []):
            say('  %-8s %-20s %-28s %s' % (
                r['kind'], r['call'], r['when'],
                'valid' if not r['errors'] else '; '.join(r['errors'])))
    results(6)

    if verbose:
        say('')
        say('== full XML')
        for doc in nova.get('xml', []):
            say('-- %s %s (%s)' % (doc['call'], doc['kind'], doc['when']))
            out.extend(doc['xml'].rstrip().splitlines())
        say('')
        say('== Cyborg step log')
        out.extend(cy.get('log', '').rstrip().splitlines())
        say('')
        say('== Nova step log (INFO and above)')
        out.extend(steps.get('5', {}).get('log', []))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='tools/demo/run.py', description=__doc__.split('\n')[0])
    parser.add_argument('--verbose', action='store_true',
                        help='also print every XML document in full and '
                        'the logs of both steps')
    parser.add_argument('--json', metavar='FILE',
                        help='write a machine-readable record of every '
                        'step and check to FILE')
    parser.add_argument('--no-materialize', action='store_true',
                        help='use the Nova tree, build/cyborg and their '
                        'venvs as they are (what the tests do)')
    parser.add_argument('--nova', choices=sorted(NOVA_LINES),
                        default=os.environ.get('DEMO_NOVA', 'nova34'),
                        help='the Nova line: nova34 (the primary line, nova '
                        '34.0.0 + patches/nova34; the default) or nova (the '
                        '33 line, nova 33.0.2 + patches/nova); DEMO_NOVA '
                        'sets the default')
    args = parser.parse_args(argv)
    start = time.time()
    try:
        cy_tree, cy_python = prepare('cyborg', not args.no_materialize)
        nova_tree, nova_python = prepare(args.nova, not args.no_materialize)
        progress('running %s with cyborg 17.0.0 + patches/cyborg'
                 % NOVA_LINES[args.nova])
        schemas_error = None
        try:
            import libvirt_schemas
            if not os.path.exists(os.path.join(libvirt_schemas.SCHEMA_DIR,
                                               'domain.rng')):
                progress('installing libvirt\'s RelaxNG schemas with apt-get '
                         '(%s)' % ', '.join(libvirt_schemas.PACKAGES))
            libvirt_schemas.ensure_installed()
        except Exception as e:  # step 6 says so
            schemas_error = str(e)
        logs = BUILD / 'logs'
        logs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix='demo-') as tmp:
            tmp = pathlib.Path(tmp)
            progress('step 1: Cyborg (cyborg venv)')
            run_step(cy_python, cy_tree, 'cyborg_step.py', [tmp / 'cy.json'],
                     {}, logs / 'demo-cyborg.log')
            cy = json.loads((tmp / 'cy.json').read_text())
            if cy.get('missing') or cy.get('error'):
                nova = {}
            else:
                progress('steps 2-6: Nova functional environment (%s '
                         'venv)' % args.nova)
                import testsel
                env = testsel.tox_setenv(nova_tree, 'functional')
                env.pop('VIRTUAL_ENV', None)
                run_step(nova_python, nova_tree, 'nova_step.py',
                         [tmp / 'cy.json', tmp / 'nova.json'], env,
                         logs / 'demo-nova.log',
                         lock=os.environ.get('DEMO_NOVA_LOCK'))
                nova = json.loads((tmp / 'nova.json').read_text())
    except Failure as e:
        print('demo: cannot run: %s' % e, flush=True)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump({'passed': False, 'error': str(e)}, f, indent=1)
        return 2

    checks = list(cy.get('checks', [])) + list(nova.get('checks', []))
    if schemas_error:
        checks.append({'step': 6, 'name': 'libvirt RelaxNG schemas '
                       'installed', 'ok': False, 'detail': schemas_error})
    for rec, who in ((cy, 'Cyborg'), (nova, 'Nova')):
        if rec.get('missing'):
            checks.append({'step': 1 if who == 'Cyborg' else 2,
                           'name': 'feature present in build/%s' % (
                               'cyborg' if who == 'Cyborg' else args.nova),
                           'ok': False,
                           'detail': 'MISSING: ' + rec['missing']})
        if rec.get('error'):
            checks.append({'step': 1 if who == 'Cyborg' else 2,
                           'name': '%s step ran to its end' % who,
                           'ok': False,
                           'detail': rec['error'][-1500:]})
    lines = render(cy, nova, checks, args.verbose)
    print('\n'.join(lines))
    if not nova:
        checks.append({'step': 2, 'name': 'steps 2-6 ran', 'ok': False,
                       'detail': 'not run: they need what the Cyborg step '
                       'reports, and it did not finish'})
    if not checks:
        checks.append({'step': 1, 'name': 'the steps reported checks',
                       'ok': False, 'detail': 'no check ran'})
    failed = [c for c in checks if not c['ok']]
    took = time.time() - start
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'checks': checks, 'cyborg': cy, 'nova': nova,
                       'seconds': round(took, 1),
                       'passed': not failed}, f, indent=1, sort_keys=True)
    print('')
    print('demo took %ds (the Cyborg step %ss, the Nova step %ss, not '
          'counting imports); logs: build/logs/demo-cyborg.log, '
          'build/logs/demo-nova.log' % (took, cy.get('seconds', '-'),
                                        nova.get('seconds', '-')))
    if failed:
        print('demo: %d of %d checks failed: %s' % (
            len(failed), len(checks),
            '; '.join('step %d: %s' % (c['step'], c['name'])
                      for c in failed)))
        return 1
    print('demo: all %d checks passed' % len(checks))
    return 0


if __name__ == '__main__':
    sys.exit(main())
