"""What the README test command runs, and how its results are counted.

Nova (nova and nova34): every test module the series adds or changes, the
unit test module of every source module it changes, and the upstream
regression sets below (each must select at least one test).
Cyborg: its whole unit and functional suites. Each suite is listed first
(`stestr list`), then run with stestr (`--load-list`) under the environment
of the base's own tox env, and counted from the run's subunit stream
against that list: a test of the list without a result is a failure, a
class whose setUpClass skipped or failed counts each of its tests.

Every count ends in one closing line,
"N passed, M failed, S skipped, X expected failures".
"""

import ast
import configparser
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import unittest

# Upstream tests that touch what the series changes: they must stay green.
# Besides these, each series selects the unit test module of every source
# module it changes and, of every upstream test module it changes, the
# tests it changes (nova_selection).
NOVA_REGRESSION = {
    'unit': [
        r'^nova\.tests\.unit\.scheduler\.test_request_filter\.',
        r'^nova\.tests\.unit\.objects\.test_service\.',
        r'^nova\.tests\.unit\.compute\.test_resource_tracker\.',
        r'^nova\.tests\.unit\.virt\.libvirt\.test_driver\.',
    ],
    'functional': [
        r'^nova\.tests\.functional\.libvirt\.test_vgpu\.',
        r'^nova\.tests\.functional\.test_servers_provider_tree\.',
        # the accelerator classes of test_servers
        r'^nova\.tests\.functional\.test_servers\.'
        r'(AcceleratorServer\w*|\w*Accelerator\w*)\.',
    ],
}
# nova34, the upstream track: its series changes a few modules of 34.0.0.
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
TOOLS = pathlib.Path(__file__).resolve().parent


class Tally:
    """Counts of one part of the test command, added up into the total."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.xfail = 0
        self.failures = []

    def add(self, other):
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        self.xfail += other.xfail
        self.failures += other.failures

    def fail(self, what):
        """One check that failed (or could not run), and why."""
        self.failed += 1
        self.failures.append(what)

    def line(self):
        return '%d passed, %d failed, %d skipped, %d expected failures' % (
            self.passed, self.failed, self.skipped, self.xfail)


# A class- or module-level fixture's result, as unittest names it.
FIXTURE = re.compile(r'^(setUpClass|setUpModule|tearDownClass|'
                     r'tearDownModule) \((\S+)\)$')


def count_results(listed, statuses, label):
    """Count the results of a run of the tests `listed` (test ids, in
    order); statuses: {test id: subunit status}. Returns a Tally whose
    total is at least len(listed): a test without a result failed ("not
    run"); the tests of a class whose setUpClass skipped or failed count
    as skipped or failed, each."""
    tally = Tally()
    results = dict(statuses)
    for fixture_id, status in statuses.items():
        m = FIXTURE.match(fixture_id)
        if not m:
            continue
        del results[fixture_id]
        scope = m.group(2) + '.'
        covered = [t for t in listed
                   if t.startswith(scope) and t not in statuses]
        for test in covered:
            results[test] = status
        if not covered and status in ('fail', 'uxsuccess'):
            # (e.g. a tearDownClass that failed after its tests ran)
            results[fixture_id] = status
    for test in listed:
        results.setdefault(test, 'not run')
    for test, status in results.items():
        if status == 'success':
            tally.passed += 1
        elif status == 'skip':
            tally.skipped += 1
        elif status == 'xfail':
            tally.xfail += 1
        else:
            tally.fail('%s: %s%s' % (label, test, '' if status == 'fail'
                                     else ' (%s)' % status))
    return tally


def module_regex(module):
    """The stestr filter (a regex) for the tests of one dotted module."""
    return '^' + re.escape(module) + r'\.'


def changed_files(project):
    out = subprocess.run(
        ['git', '-C', str(project.tree), 'diff', '--name-only',
         '--diff-filter=AMR', 'base..HEAD'],
        capture_output=True, text=True, check=True).stdout
    return out.split()


def added_files(project):
    out = subprocess.run(
        ['git', '-C', str(project.tree), 'diff', '--name-only',
         '--diff-filter=A', 'base..HEAD'],
        capture_output=True, text=True, check=True).stdout
    return set(out.split())


def changed_lines(project, path):
    """The lines of `path` (as the series leaves it) the series changed;
    a pure deletion counts as the line after it."""
    out = subprocess.run(
        ['git', '-C', str(project.tree), 'diff', '-U0', 'base..HEAD', '--',
         path], capture_output=True, text=True, check=True).stdout
    lines = set()
    for m in re.finditer(r'^@@ -\S+ \+(\d+)(?:,(\d+))? @@', out, re.M):
        start, count = int(m.group(1)), int(m.group(2) or 1)
        lines.update(range(start, start + max(count, 1)))
    return lines


def touched_tests(source, lines):
    """What to run of an upstream test module whose lines `lines` changed.

    [(class, test method or None for the whole class)]: a test method the
    series changes runs in its class and in the class's subclasses in the
    module (they run it under their own names); a change to a class's
    other code (setUp, helpers, attributes) runs the whole class and its
    subclasses. None when a change lies outside every class and is not an
    import, or when the module does not parse (its suite then fails to
    list, each of its tests counted): the whole module is then selected.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    classes, outside = {}, False
    for node in tree.body:
        span = set(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.ClassDef):
            if node.decorator_list:
                span.update(range(node.decorator_list[0].lineno,
                                  node.lineno))
            tests = {}
            for item in node.body:
                if (isinstance(item, ast.FunctionDef) and
                        item.name.startswith('test')):
                    first = min([item.lineno] + [
                        d.lineno for d in item.decorator_list])
                    tests[item.name] = set(range(first,
                                                 item.end_lineno + 1))
            classes[node.name] = (span, tests, {
                getattr(b, 'id', None) or getattr(b, 'attr', None)
                for b in node.bases})
        elif span & lines and not isinstance(node, (ast.Import,
                                                    ast.ImportFrom)):
            outside = True
    if outside:
        return None
    # {class: set of changed test methods, or None for the whole class}
    touched = {}
    for name, (span, tests, _b) in classes.items():
        changed = span & lines
        if not changed:
            continue
        in_tests = {t for t, t_span in tests.items() if t_span & changed}
        in_tests_lines = set().union(*(tests[t] for t in in_tests))
        touched[name] = in_tests if changed <= in_tests_lines else None
    grew = True
    while grew:
        grew = False
        for name, (_s, _t, bases) in classes.items():
            for base in bases & set(touched):
                want = touched[base]
                have = touched.get(name, set())
                merged = None if want is None or have is None else (
                    have | want)
                if name not in touched or merged != have:
                    touched[name] = merged
                    grew = True
    return sorted((name, test) for name, tests in touched.items()
                  for test in (sorted(tests) if tests is not None
                               else [None]))


def touched_regex(mod, tests):
    """An stestr filter for touched_tests()'s selection of module mod."""
    whole = sorted({c for c, t in tests if t is None})
    parts = []
    if whole:
        parts.append('^%s\\.(%s)\\.' % (re.escape(mod), '|'.join(whole)))
    for cls in sorted({c for c, t in tests if t is not None} - set(whole)):
        names = sorted(t for c, t in tests if c == cls)
        parts.append('^%s\\.%s\\.(%s)(?:$|\\W)' % (
            re.escape(mod), cls, '|'.join(names)))
    return parts


def nova_selection(project):
    """{'unit': [regex], 'functional': [regex]}: stestr filters. A test
    module the series adds, or the unit test module of a source module it
    changes, is selected whole; of an upstream test module it changes,
    the test methods it changes (in their classes and subclasses), or the
    classes whose other code it changes and their subclasses."""
    sel = {kind: list(mods)
           for kind, mods in REGRESSION[project.name].items()}
    added = added_files(project)
    narrowed = {}
    for path in changed_files(project):
        if not path.endswith('.py') or not path.startswith('nova/'):
            continue
        mod = path[:-3].replace('/', '.')
        if path.startswith('nova/tests/'):
            if not pathlib.PurePath(path).name.startswith('test_'):
                continue
            kind = mod.split('.')[2]  # nova.tests.<unit|functional>...
            if path not in added:
                tests = touched_tests(
                    (project.tree / path).read_text(),
                    changed_lines(project, path))
                if tests is not None:
                    if tests:
                        narrowed[mod] = (kind, tests)
                    continue
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
    for mod, (kind, tests) in narrowed.items():
        if kind in sel and module_regex(mod) not in sel[kind]:
            sel[kind].extend(touched_regex(mod, tests))
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


TEST_DEF = re.compile(r'^[ \t]+(?:async[ \t]+)?def (test\w*)', re.M)


def source_tests(tree, test_path, filters):
    """An estimate of how many tests of a selection the test modules'
    source holds: the test methods of each test class (one whose bases
    reach, within its module, a class of another module: a mixin of
    object alone runs nothing), with those it inherits in its module; of
    a module that does not parse, its test methods, if a filter selects
    the module (filters of its classes alone select none of them). What a
    suite that cannot even be listed does not run. (Tests made by
    scenarios, or inherited from other modules, are not seen.)"""
    root = (tree / test_path).resolve()
    count = 0
    for path in sorted(root.rglob('test_*.py')):
        module = '.'.join(path.relative_to(tree.resolve()).with_suffix(
            '').parts)
        text = path.read_text(errors='replace')
        try:
            body = ast.parse(text).body
        except (SyntaxError, ValueError):
            # (a module that does not parse is why the listing failed)
            count += sum(1 for name in TEST_DEF.findall(text)
                         if not filters or any(re.search(f, module + '.')
                                               for f in filters))
            continue
        classes = {c.name: c for c in body if isinstance(c, ast.ClassDef)}

        def runs(cls, seen=()):
            for base in cls.bases:
                # (class TestCase(TestCase): its base is an import)
                if isinstance(base, ast.Name) and base.id in classes and \
                        base.id != cls.name:
                    if base.id not in seen and runs(classes[base.id],
                                                    seen + (cls.name,)):
                        return True
                elif not (isinstance(base, ast.Name) and
                          base.id == 'object'):
                    return True     # a TestCase of another module
            return False

        def methods(cls, seen=()):
            names = {f.name for f in cls.body
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f.name.startswith('test')}
            for base in cls.bases:
                if isinstance(base, ast.Name) and base.id in classes and \
                        base.id not in seen and base.id != cls.name:
                    names |= methods(classes[base.id], seen + (cls.name,))
            return names
        for cls in classes.values():
            if not runs(cls):
                continue
            for name in methods(cls):
                test_id = '%s.%s.%s' % (module, cls.name, name)
                if not filters or any(re.search(f, test_id)
                                      for f in filters):
                    count += 1
    return count


def stestr(project, kind, test_path, filters, env, required=()):
    """List, run and count one stestr suite; stream its progress; return
    its Tally. required: regexes of filters that must each select at
    least one test (the regression sets). One worker per core."""
    env = dict(os.environ, **env)
    env['VIRTUAL_ENV'] = str(project.venv)
    env['PATH'] = '%s:%s' % (project.venv / 'bin', env.get('PATH', ''))
    log_dir = project.tree.parent / 'logs'
    log_dir.mkdir(exist_ok=True)
    log = log_dir / ('%s-%s.log' % (project.name, kind))
    label = '%s %s' % (project.name, kind)
    base = [str(project.venv / 'bin' / 'stestr'), '--test-path', test_path,
            '--top-dir', './']
    concurrency = CONCURRENCY
    print('== %s: stestr run %s (%s worker%s; log: %s)' % (
        label, ' '.join(filters) or '(all)', concurrency,
        '' if concurrency == '1' else 's',
        log.relative_to(project.tree.parent.parent)), flush=True)
    start = time.time()
    tally = Tally()
    repo = project.tree / '.stestr'
    if not repo.exists():
        # (`stestr run` makes its repository; `stestr list` needs one)
        subprocess.run(base + ['init'], cwd=project.tree, env=env,
                       capture_output=True)
    listing = subprocess.run(base + ['list'] + filters, cwd=project.tree,
                             env=env, capture_output=True, text=True)
    listed = [line for line in listing.stdout.splitlines()
              if re.match(r'^[\w.]+$', line)]
    if listing.returncode or not listed:
        log.write_text(listing.stdout + listing.stderr)
        if listing.returncode:
            # (each test of the selection a failure: the total must not
            # shrink because a module of it does not even import)
            unrun = max(1, source_tests(project.tree, test_path, filters))
            tally.fail('%s: the tests could not be listed (stestr list exit '
                       '%d): about %d tests of the selection, counted in '
                       'their source, not run (each a failure); see %s' % (
                           label, listing.returncode, unrun, log))
            tally.failed += unrun - 1     # (one message stands for them)
        else:
            tally.fail('%s: no test selected, see %s' % (label, log))
        print(''.join((listing.stdout + listing.stderr).splitlines(
            True)[-30:]), flush=True)
        return tally
    for regex in required:
        if not any(re.search(regex, t) for t in listed):
            tally.fail('%s: the regression set %s selects no test' % (
                label, regex))
            print('   FAILED the regression set %s selects no test' % regex,
                  flush=True)
    id_file = log_dir / ('%s-%s.list' % (project.name, kind))
    id_file.write_text('\n'.join(listed) + '\n')
    next_stream = repo / 'next-stream'
    run_id = int(next_stream.read_text()) if next_stream.exists() else 0
    cmd = base + ['run', '--concurrency', concurrency, '--load-list',
                  str(id_file)]
    done = 0
    with open(log, 'w') as out:
        proc = subprocess.Popen(cmd, cwd=project.tree, env=env, text=True,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        for line in proc.stdout:
            out.write(line)
            m = re.match(r'^\{\d+\} (.+?)(?: \[[\d.]+s\])? \.\.\. (\w+)',
                         line)
            if m:
                done += 1
                if m.group(2) == 'FAILED':
                    print('   FAILED %s' % m.group(1), flush=True)
                if done % 1000 == 0:
                    print('   ... %d of %d tests (%ds)' % (
                        done, len(listed), time.time() - start), flush=True)
        rc = proc.wait()
    stream = repo / str(run_id)
    statuses = {}
    if stream.exists():
        res = subprocess.run(
            [str(project.python), str(TOOLS / 'subunit_status.py'),
             str(stream)], capture_output=True, text=True)
        if res.returncode == 0:
            statuses = json.loads(res.stdout)
        else:
            tally.fail('%s: its results could not be read: %s' % (
                label, res.stderr.strip()[-300:]))
    counted = count_results(listed, statuses, label)
    tally.add(counted)
    if rc != 0 and counted.failed == 0:
        # stestr failed beyond any test
        tally.fail('%s: stestr exit %d, see %s' % (label, rc, log))
        print(''.join(log.read_text().splitlines(True)[-30:]), flush=True)
    print('   %s: %s (%d listed) in %ds' % (
        label, counted.line(), len(listed), time.time() - start),
        flush=True)
    return tally


def suites(project, selection=None):
    """The project's suites: (kind, test path, filters, tox env, the
    regression sets each must select). selection: a Nova series' filters
    by kind, in place of nova_selection()'s."""
    if project.dist == 'nova':
        sel = nova_selection(project) if selection is None else selection
        regression = REGRESSION[project.name]
        return [(kind, './nova/tests/' + kind, sel[kind], kind,
                 regression[kind]) for kind in ('unit', 'functional')]
    # (Cyborg's functional tests, API samples and the like, are few and
    # fast: all of them)
    return [('unit', './' + project.unit_tests, [], 'py3', ()),
            ('functional', './cyborg/tests/functional', [], 'py3', ())]


def run_tests(project):
    """The project's suites."""
    tally = Tally()
    for kind, path, filters, env, required in suites(project):
        tally.add(stestr(project, kind, path, filters,
                         tox_setenv(project.tree, env), required=required))
    return tally


def unrun_tests(project, why):
    """The suites of a project whose tree or venv could not be made: each
    a failure per test of its selection, as estimated from the source the
    tree holds (source_tests()), or one failure without a tree."""
    tally = Tally()
    try:
        plan = suites(project)
    except (OSError, subprocess.CalledProcessError, RuntimeError):
        # (no tree or no base to diff: the regression sets alone)
        plan = suites(project, selection=REGRESSION[project.name])
    found = [(kind, source_tests(project.tree, path, filters))
             for kind, path, filters, _, _ in plan]
    for kind, n in found:
        tally.fail('%s %s: not run: %s%s' % (
            project.name, kind, why, ' (about %d tests, each a failure)' % n
            if n > 1 else ''))
        tally.failed += max(n, 1) - 1
    return tally


def report_verify(project, results):
    """Count verify's results: one check per patch of the series."""
    tally = Tally()
    print('== %s verify: %d patches' % (project.name, len(results)),
          flush=True)
    for name, problems in results:
        if problems:
            tally.fail('%s verify: %s' % (project.name, name))
            print('   FAILED %s' % name)
            for p in problems:
                print('      ' + p.replace('\n', '\n      '))
        else:
            tally.passed += 1
            print('   ok %s' % name)
    return tally


def verify_results(project, error):
    """project.verify()'s results; when verify cannot run at all, each
    patch of the series is a failure that says why."""
    try:
        return project.verify()
    except error as e:
        try:
            names = [p.name for p in project.series()]
        except error as e2:
            return [('patches/%s/series' % project.name, [str(e2)])]
        return [(n, ['not verified: %s' % e]) for n in names]


def verify_all(projects, error, workers=2):
    """verify_results() of each project, in order: two at a time (the
    machine's 2 cores; verify waits on flake8 and git), the longest
    series first."""
    import concurrent.futures

    def length(project):
        try:
            return len(project.series())
        except error:
            return 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {project.name: pool.submit(verify_results, project, error)
                   for project in sorted(projects, key=length,
                                         reverse=True)}
        return [futures[project.name].result() for project in projects]


class _Recorder(unittest.TextTestResult):
    """A unittest result that keeps each test's status by its id."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.statuses = {}

    def addSuccess(self, test):
        super().addSuccess(test)
        self.statuses[test.id()] = 'success'

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.statuses[test.id()] = 'fail'

    def addError(self, test, err):
        super().addError(test, err)
        self.statuses[test.id()] = 'fail'

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.statuses[test.id()] = 'fail'

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.statuses[test.id()] = 'skip'

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.statuses[test.id()] = 'xfail'

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.statuses[test.id()] = 'uxsuccess'


def test_ids(suite):
    """The ids of the tests of a unittest suite, in order."""
    if isinstance(suite, unittest.TestSuite):
        return [t for s in suite for t in test_ids(s)]
    return [suite.id()]


def run_unittests(start_dir, label, pattern='test_*.py'):
    """Discover and run unittest tests; count them as stestr's are."""
    suite = unittest.TestLoader().discover(str(start_dir), pattern)
    listed = test_ids(suite)
    result = unittest.TextTestRunner(
        stream=sys.stdout, verbosity=1, resultclass=_Recorder).run(suite)
    return count_results(listed, result.statuses, label)


def run_tool_tests():
    """tools/test_*.py: the workspace tooling's own tests."""
    print('== tools: unittest tools/test_*.py', flush=True)
    tally = run_unittests(TOOLS, 'tools')
    print('   tools: %s' % tally.line(), flush=True)
    return tally


def load_lab_run():
    """tools/lab/run.py, as a module."""
    import importlib.util
    path = TOOLS / 'lab' / 'run.py'
    spec = importlib.util.spec_from_file_location('lab_run', path)
    lab_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab_run)
    return lab_run


# The niceness of the lab's processes (its guests, its cloud) in the test
# command (run.py --nice): ahead of verify and the suites, which take what
# it leaves.
LAB_NICE = -10


class Lab:
    """tools/lab's tiers in the test command, in a subprocess beside verify
    and the suites, their output kept in build/logs/lab.log and printed,
    and counted, after the suites. Tier 1 (about a minute of one core:
    Nova's functional tests recording their XML) runs there first, then
    tiers 2 and 3, which wait on TCG guests and leave about 40% of the 2
    cores idle. The guests have one vCPU (with two, beside the suites,
    they took twice their time or more) and the lab runs at a higher
    priority (LAB_NICE), so that the suites, with a worker per core, take
    the time the lab leaves: with one worker while the lab ran, a suite
    that started then kept one core idle once it had ended. Tier 3 (a real
    cloud) runs the operator's day on the primary line, 15 minutes beside
    the suites; its upgrade day (the 33 line upgraded in place, 7 more
    minutes) runs only with LAB_UPGRADE_DAY=1 (the command with it took 48
    minutes on a fresh clone, over the 45 it may take), and LAB_TIER3=0
    leaves tier 3 out. The checks of what is left out count as skipped.
    See doc/lab.md and doc/test-command.md."""

    def __init__(self, logs):
        import preflight
        self.lab_run = load_lab_run()
        self.tier3 = preflight.tier3_on()
        self.tiers = ('tier1', 'tier2') + (('tier3',) if self.tier3 else ())
        self.log = logs / 'lab.log'
        self.counts = logs / 'lab-counts.json'
        self.command = [sys.executable, str(TOOLS / 'lab' / 'run.py')] + \
            list(self.tiers) + ['--counts', str(self.counts),
                                '--nice', str(LAB_NICE)]
        self.proc = None

    def start(self):
        """Start the lab's tiers."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.counts.exists():
            self.counts.unlink()
        print('== lab %s: started, beside verify and the suites; their '
              'checks follow the suites (log: build/logs/lab.log)' %
              ', '.join(self.tiers), flush=True)
        with open(self.log, 'w') as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    def finish(self, timeout=None):
        """Wait for tiers 2 and 3; print their output; their Tally (every
        planned check counted, even when run.py stopped before its
        count)."""
        rc = self.proc.wait(timeout)
        # (each tier says its own time: the wait ends with the suites)
        print('== lab %s (beside the suites): exit %d' % (
            ', '.join(self.tiers), rc), flush=True)
        text = self.log.read_text(errors='replace')
        sys.stdout.write(text)
        sys.stdout.flush()
        try:
            counts = json.loads(self.counts.read_text())
            tally = Tally()
            tally.passed, tally.failed = counts['passed'], counts['failed']
            tally.skipped, tally.xfail = counts['skipped'], counts['xfail']
            tally.failures = list(counts['failures'])
        except (OSError, ValueError, KeyError, TypeError):
            tally = self.uncounted(rc, text)
        if not self.tier3:
            # the same checks in every run's total
            self.lab_run.skip_tier3(tally)
        return tally

    def uncounted(self, rc, text):
        """run.py stopped before its count: each planned check passed if
        its PASS line was printed and no FAIL line, else failed."""
        tally = Tally()
        why = 'tools/lab/run.py stopped before its count (exit %d), see ' \
            'build/logs/lab.log' % rc
        names = self.lab_run.planned(self.tiers)
        left_out = self.lab_run.left_out(self.tiers)
        for name in left_out:
            print('   SKIP %s' % name, flush=True)
        tally.skipped += len(left_out)
        results = [m.groups()[:2] for m in (
            self.lab_run.LINE.match(line.strip())
            for line in text.splitlines()) if m]
        failed = {name for result, name in results if result == 'FAIL'}
        passed = {name for result, name in results
                  if result == 'PASS'} - failed
        for name in names:
            if name in passed:
                tally.passed += 1
            else:
                print('   FAIL %s (0.0s): %s: %s' % (
                    name, 'failed' if name in failed else 'not run', why),
                      flush=True)
                tally.fail('lab: %s: %s' % (name, why))
        return tally

    def stop(self):
        """On Ctrl-C (which run.py gets too): let it stop what it started,
        then show what it said."""
        if self.proc is None:
            return
        try:
            self.proc.wait(180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        print(''.join(self.log.read_text(errors='replace').splitlines(
            True)[-20:]), flush=True)


def prepare(project, error):
    """Materialize and make the venv; False (and one failure, saying what
    to do) when the project's tests cannot run. A series that does not
    apply still gets the venv when its base is there: verify lints the
    patches that do apply with it."""
    tally = Tally()
    try:
        project.materialize()
    except error as e:
        tally.fail('%s: %s' % (project.name, str(e).splitlines()[0]))
        print('series: error: %s' % e, flush=True)
        if project.tree.is_dir():
            try:
                project.make_venv()
            except error as e2:
                print('series: error: %s' % e2, flush=True)
        return False, tally
    try:
        project.make_venv()
    except error as e:
        tally.fail('%s: %s' % (project.name, str(e).splitlines()[0]))
        print('series: error: %s' % e, flush=True)
        return False, tally
    return True, tally


def check(projects, error, lab=True):
    """Everything .ci/run runs: the series materialized, their venvs,
    verify, the lab's tiers (lab=True), the tooling's tests, the suites.
    error: the exception type of an error the user can act on (a failed
    step is counted and the others still run). The last line is the
    total."""
    import preflight
    problems = preflight.problems(lab=lab)
    if problems:
        print(preflight.refusal(problems, lab=lab), flush=True)
        return 2
    print(preflight.summary(lab=lab), flush=True)
    start = time.time()
    tally = Tally()
    ready = {}
    for project in projects:
        ready[project.name], prepared = prepare(project, error)
        tally.add(prepared)
    lab = Lab(TOOLS.parent / 'build' / 'logs') if lab else None
    try:
        if lab:
            lab.start()
        for project, results in zip(projects, verify_all(projects, error)):
            tally.add(report_verify(project, results))
        for project in projects:
            if ready[project.name]:
                tally.add(run_tests(project))
            else:
                tally.add(unrun_tests(project, 'build/%s or its venv could '
                                      'not be made (see above)' %
                                      project.name))
        if lab:
            tally.add(lab.finish())
    except KeyboardInterrupt:
        if lab:
            lab.stop()
        raise
    # (after the lab, which installs QEMU: a test of the lab's guest image
    # runs it)
    tally.add(run_tool_tests())
    if tally.failures:
        print('failures:')
        for f in tally.failures[:60]:
            print('   ' + f)
        if len(tally.failures) > 60:
            print('   ... and %d more' % (len(tally.failures) - 60))
    print('check took %d minutes' % ((time.time() - start) / 60))
    print(tally.line())
    sys.stdout.flush()
    return 1 if tally.failed else 0
