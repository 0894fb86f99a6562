"""What the README test command runs, and how its results are counted.

Nova (nova and nova34): every test module the series adds or changes, the
unit test module of every source module it changes, and the upstream
regression sets below.
Cyborg: its whole unit suite. Each runs with stestr and the environment of
the base's own tox env; the totals are summed into one closing line.
"""

import configparser
import os
import pathlib
import re
import subprocess
import sys
import time

# Upstream tests that touch what the series changes: they must stay green.
NOVA_REGRESSION = {
    'unit': [
        r'^nova\.tests\.unit\.virt\.libvirt\.',
        r'^nova\.tests\.unit\.scheduler\.',
        r'^nova\.tests\.unit\.compute\.test_resource_tracker\.',
        r'^nova\.tests\.unit\.objects\.',
    ],
    'functional': [
        r'^nova\.tests\.functional\.libvirt\.test_vgpu\.',
        r'^nova\.tests\.functional\.test_servers_provider_tree\.',
        # the accelerator classes of test_servers
        r'^nova\.tests\.functional\.test_servers\.'
        r'(AcceleratorServer\w*|\w*Accelerator\w*)\.',
    ],
}
# nova34, the upstream track: its series changes a few modules of 34.0.0, so
# its regression sets are those modules' own (kept narrow: make check's time).
NOVA34_REGRESSION = {
    'unit': [
        r'^nova\.tests\.unit\.scheduler\.test_request_filter\.',
        r'^nova\.tests\.unit\.objects\.test_service\.',
    ],
    'functional': [
        r'^nova\.tests\.functional\.libvirt\.test_vgpu\.',
        r'^nova\.tests\.functional\.test_servers\.'
        r'(AcceleratorServer\w*|\w*Accelerator\w*)\.',
    ],
}
REGRESSION = {'nova': NOVA_REGRESSION, 'nova34': NOVA34_REGRESSION}
CONCURRENCY = str(os.cpu_count() or 2)


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures = []

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.failures += other.failures


def module_regex(module):
    """The stestr filter (a regex) for the tests of one dotted module."""
    return '^' + re.escape(module) + r'\.'


def changed_files(project):
    out = subprocess.run(
        ['git', '-C', str(project.tree), 'diff', '--name-only',
         '--diff-filter=AMR', 'base..HEAD'],
        capture_output=True, text=True, check=True).stdout
    return out.split()


def nova_selection(project):
    """{'unit': [regex], 'functional': [regex]}: stestr filters."""
    sel = {kind: list(mods)
           for kind, mods in REGRESSION[project.name].items()}
    for path in changed_files(project):
        if not path.endswith('.py') or not path.startswith('nova/'):
            continue
        mod = path[:-3].replace('/', '.')
        if path.startswith('nova/tests/'):
            if not pathlib.PurePath(path).name.startswith('test_'):
                continue
            kind = mod.split('.')[2]  # nova.tests.<unit|functional>...
        else:
            # nova/x/y.py -> nova/tests/unit/x/test_y.py, when it exists
            parts = path.split('/')
            cand = '/'.join(['nova', 'tests', 'unit'] + parts[1:-1] +
                            ['test_' + parts[-1]])
            if not (project.tree / cand).exists():
                continue
            mod, kind = cand[:-3].replace('/', '.'), 'unit'
        if kind in sel and module_regex(mod) not in sel[kind]:
            sel[kind].append(module_regex(mod))
    return sel


def tox_setenv(tree, env):
    """The environment tox would set for `env`, from the tree's tox.ini."""
    cfg = configparser.ConfigParser(interpolation=None, strict=False)
    cfg.read(tree / 'tox.ini')

    def names(section):
        m = re.match(r'testenv:(.*)$', section)
        if not m:
            return []
        spec = m.group(1)
        b = re.match(r'^(.*?)\{([^}]*)\}(.*)$', spec)
        if b:
            return [b.group(1) + alt + b.group(3)
                    for alt in b.group(2).split(',')]
        return [x.strip() for x in re.split(r'[{},]', spec) if x.strip()]

    def lines(section):
        out = {}
        for line in cfg.get(section, 'setenv', fallback='').splitlines():
            line = line.strip()
            if line == '{[testenv]setenv}':
                out.update(lines('testenv'))
            elif '=' in line and not line.startswith('#'):
                key, val = line.split('=', 1)
                out[key.strip()] = val.strip()
        return out

    for section in cfg.sections():
        if env in names(section):
            return lines(section)
    return lines('testenv')


def stestr(project, kind, test_path, filters, env):
    """Run one stestr suite; stream progress; return its Tally."""
    env = dict(os.environ, **env)
    env['VIRTUAL_ENV'] = str(project.venv)
    env['PATH'] = '%s:%s' % (project.venv / 'bin', env.get('PATH', ''))
    log_dir = project.tree.parent / 'logs'
    log_dir.mkdir(exist_ok=True)
    log = log_dir / ('%s-%s.log' % (project.name, kind))
    cmd = [str(project.venv / 'bin' / 'stestr'), '--test-path', test_path,
           '--top-dir', './', 'run', '--concurrency', CONCURRENCY] + filters
    print('== %s %s: stestr run %s (log: %s)' % (
        project.name, kind, ' '.join(filters) or '(all)',
        log.relative_to(project.tree.parent.parent)), flush=True)
    start = time.time()
    done = 0
    tally = Tally()
    totals = {}
    with open(log, 'w') as out:
        proc = subprocess.Popen(cmd, cwd=project.tree, env=env, text=True,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        for line in proc.stdout:
            out.write(line)
            m = re.match(r'^\{\d+\} (\S+) .*\.\.\. (\w+)', line)
            if m:
                done += 1
                if m.group(2) == 'FAILED':
                    print('   FAILED %s' % m.group(1), flush=True)
                    tally.failures.append(m.group(1))
                if done % 1000 == 0:
                    print('   ... %d tests (%ds)' % (
                        done, time.time() - start), flush=True)
            t = re.match(r'^ - (Passed|Failed|Skipped|Expected Fail|'
                         r'Unexpected Success): (\d+)', line)
            if t:
                totals[t.group(1)] = int(t.group(2))
        rc = proc.wait()
    tally.passed = totals.get('Passed', 0) + totals.get('Expected Fail', 0)
    tally.failed = totals.get('Failed', 0) + totals.get(
        'Unexpected Success', 0)
    if rc != 0 and tally.failed == 0:
        # stestr failed before or beyond any test (import error, listing)
        tally.failed = 1
        tally.failures.append('%s %s: stestr exit %d, see %s' % (
            project.name, kind, rc, log))
        print(''.join(open(log).readlines()[-30:]), flush=True)
    if tally.passed == 0 and tally.failed == 0:
        tally.failed = 1
        tally.failures.append('%s %s: no test ran' % (project.name, kind))
    print('   %s %s: %d passed, %d failed, %d skipped in %ds' % (
        project.name, kind, tally.passed, tally.failed,
        totals.get('Skipped', 0), time.time() - start), flush=True)
    return tally


def run_tests(project):
    tally = Tally()
    if project.dist == 'nova':
        sel = nova_selection(project)
        tally.add(stestr(project, 'unit', './nova/tests/unit',
                         sel['unit'],
                         tox_setenv(project.tree, 'unit')))
        tally.add(stestr(project, 'functional', './nova/tests/functional',
                         sel['functional'],
                         tox_setenv(project.tree, 'functional')))
    else:
        env = tox_setenv(project.tree, 'py3')
        tally.add(stestr(project, 'unit', './' + project.unit_tests, [],
                         env))
        # Cyborg's functional tests (API samples, ...) are few and fast.
        tally.add(stestr(project, 'functional', './cyborg/tests/functional',
                         [], env))
    return tally


def report_verify(project, results):
    tally = Tally()
    print('== %s verify: %d patches' % (project.name, len(results)),
          flush=True)
    for name, problems in results:
        if problems:
            tally.failed += 1
            tally.failures.append('%s: %s' % (project.name, name))
            print('   FAILED %s' % name)
            for p in problems:
                print('      ' + p.replace('\n', '\n      '))
        else:
            tally.passed += 1
            print('   ok %s' % name)
    return tally


def run_tool_tests():
    """tools/test_series.py: the workspace tool's own tests."""
    import unittest
    print('== tools: unittest tools/test_series.py', flush=True)
    here = pathlib.Path(__file__).resolve().parent
    suite = unittest.defaultTestLoader.discover(str(here), 'test_*.py')
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(
        suite)
    tally = Tally()
    bad = result.failures + result.errors + list(
        (t, '') for t in result.unexpectedSuccesses)
    tally.failed = len(bad)
    tally.passed = result.testsRun - tally.failed - len(result.skipped)
    tally.failures += ['tools: %s' % t.id() for t, _ in bad]
    return tally


def run_lab():
    """tools/lab: libvirt's schemas (tier 1), a real kernel mdev (tier 2),
    both series as a cloud on that mdev (tier 3)."""
    import importlib.util
    path = pathlib.Path(__file__).resolve().parent / 'lab' / 'run.py'
    spec = importlib.util.spec_from_file_location('lab_run', path)
    lab_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab_run)
    lab = lab_run.run(('tier1', 'tier2', 'tier3'))
    tally = Tally()
    tally.passed, tally.failed = lab.passed, lab.failed
    tally.failures += ['lab: %s' % f for f in lab.failures]
    return tally


def check(projects):
    """Everything .ci/run runs; the last line is 'N passed, M failed'."""
    start = time.time()
    tally = Tally()
    for project in projects:
        project.materialize()
        project.make_venv()
    for project in projects:
        tally.add(report_verify(project, project.verify()))
    tally.add(run_tool_tests())
    tally.add(run_lab())
    for project in projects:
        tally.add(run_tests(project))
    if tally.failures:
        print('failures:')
        for f in tally.failures:
            print('   ' + f)
    print('check took %d minutes' % ((time.time() - start) / 60))
    print('%d passed, %d failed' % (tally.passed, tally.failed))
    sys.stdout.flush()
    return 1 if tally.failed else 0
