"""The lab's counting: every planned check prints PASS or FAIL, always.

Run by `make check` and `make check-suites`, or alone:
    python3 -m unittest discover -s tools -p 'test_lab.py'
"""

import contextlib
import importlib
import importlib.util
import io
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
LAB = HERE / 'lab'
sys.path.insert(0, str(LAB))
# (the lab's knobs of whoever runs these tests are not theirs: out before
# cloud.py and days.py read them, at their import)
_CALLERS_KNOBS = {k: os.environ.pop(k) for k in
                  ('LAB_TIER3', 'LAB_UPGRADE_DAY', 'LAB_NOVA')
                  if k in os.environ}
import cloud  # noqa: E402
import cloudapi  # noqa: E402
import days  # noqa: E402
import plans  # noqa: E402
import steps  # noqa: E402
import tier1  # noqa: E402
import tier3  # noqa: E402

sys.path.insert(0, str(HERE))
import testsel  # noqa: E402


def load_run():
    spec = importlib.util.spec_from_file_location('lab_run_test',
                                                  LAB / 'run.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = load_run()


def quietly(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn(*args)
    return value, out.getvalue()


def counts(tally):
    return (tally.passed, tally.failed, tally.skipped, tally.xfail)


DAY_KNOBS = ('LAB_UPGRADE_DAY', 'LAB_NOVA')


def tearDownModule():
    os.environ.update(_CALLERS_KNOBS)


def reload_days(env):
    """days.py as imported with env (it picks its days at import, and
    cloud.py its line)."""
    with mock.patch.dict(os.environ, env), \
            mock.patch.object(cloud, 'DAY_LINE',
                              env.get('LAB_NOVA') or 'nova34'):
        for knob in DAY_KNOBS:
            if knob not in env:
                os.environ.pop(knob, None)
        importlib.reload(days)


class PlannedTest(unittest.TestCase):

    def test_a_planned_check_that_printed_nothing_fails(self):
        plan = run.Planned('lab tierX', ['a', 'b', 'c'])
        tally = testsel.Tally()
        _, out = quietly(lambda: [
            plan.line('PASS a (1.0s): fine'),
            plan.line('some log line'),
            plan.line('FAIL b (0.2s): broken'),
            plan.count(tally, 'the guest did not boot')])
        self.assertEqual((1, 2, 0, 0), counts(tally))
        self.assertIn('FAIL c (0.0s): not run: the guest did not boot', out)
        self.assertEqual(['lab tierX: b', 'lab tierX: c'], tally.failures)

    def test_a_check_that_printed_a_fail_and_a_pass_fails(self):
        plan = run.Planned('lab tierX', ['a', 'b'])
        tally = testsel.Tally()
        quietly(lambda: [plan.line('PASS a (1.0s)'),
                         plan.line('FAIL a (1.0s): broken after all'),
                         plan.line('FAIL b (1.0s): broken'),
                         plan.line('PASS b (1.0s)'),
                         plan.count(tally, '')])
        self.assertEqual((0, 2, 0, 0), counts(tally))

    def test_a_check_outside_the_plan_fails(self):
        plan = run.Planned('lab tierX', ['a'])
        tally = testsel.Tally()
        quietly(lambda: [plan.line('PASS a (1.0s)'),
                         plan.line('PASS z (1.0s)'),
                         plan.count(tally, '')])
        self.assertEqual((1, 1, 0, 0), counts(tally))
        self.assertEqual(['lab tierX: z (not in its plan)'], tally.failures)

    def test_every_tier_has_a_plan_of_named_checks(self):
        for script in ('tier1.py', 'tier3.py'):
            names, _ = quietly(run.read_plan, LAB / script)
            self.assertTrue(names, script)
            self.assertEqual(len(names), len(set(names)), script)


class LabInTheTestCommandTest(unittest.TestCase):
    """Tiers 1, 2 and 3 in a subprocess beside verify and the suites,
    printed and counted after them."""

    def lab(self, env, script):
        logs = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        with mock.patch.object(testsel, 'load_lab_run', lambda: run), \
                mock.patch.dict(os.environ, env):
            if 'LAB_TIER3' not in env:
                os.environ.pop('LAB_TIER3', None)
            lab = testsel.Lab(logs)
        # (in place of run.py: what it prints, what it writes)
        lab.command = [sys.executable, '-c', script, str(lab.counts)]
        ran = []
        with mock.patch.object(run, 'run', lambda tiers: (
                ran.append(tiers), testsel.Tally())[1]):
            _, out = quietly(lab.start)
        self.assertEqual([], ran)       # (nothing of the lab in-process)
        self.assertIn('== lab %s: started, beside verify and the suites' %
                      ', '.join(lab.tiers), out)
        return lab

    def test_tier3_runs_unless_left_out(self):
        for env, tiers in (({}, ('tier1', 'tier2', 'tier3')),
                           ({'LAB_TIER3': '1'},
                            ('tier1', 'tier2', 'tier3')),
                           ({'LAB_TIER3': '0'}, ('tier1', 'tier2'))):
            lab = self.lab(env, 'pass')
            self.assertEqual(tiers, lab.tiers, env)
            quietly(lab.finish)

    def test_it_runs_ahead_of_verify_and_the_suites(self):
        # (its processes at a higher priority; the suites, with a worker
        # per core, take the time it leaves)
        with mock.patch.object(testsel, 'load_lab_run', lambda: run):
            command = testsel.Lab(pathlib.Path('logs')).command
        self.assertEqual(['--nice', '-10'], command[-2:])
        # run.py takes it before anything starts: its children inherit it
        probe = ('import os, sys; sys.path.insert(0, %r); import run; '
                 'run.set_niceness(-10); '
                 'print(os.getpriority(os.PRIO_PROCESS, 0))' % str(LAB))
        got = subprocess.run([sys.executable, '-c', probe],
                             capture_output=True, text=True).stdout
        # (where a process may raise its priority: root with CAP_SYS_NICE)
        may = subprocess.run([sys.executable, '-c', 'import os; '
                              'os.setpriority(os.PRIO_PROCESS, 0, -10)'],
                             capture_output=True).returncode == 0
        expected = -10 if may else os.getpriority(os.PRIO_PROCESS, 0)
        self.assertEqual('%d\n' % expected, got)

    def test_a_niceness_that_is_no_integer_is_refused(self):
        for bad in ('high', '--5', '1.5', '1_0', ' 5', '99999999999', '20'):
            with mock.patch.object(run, 'run') as tiers:
                rc, out = quietly(run.main, ['run.py', 'tier2', '--nice', bad])
            self.assertEqual(2, rc)
            self.assertIn('--nice takes a niceness, an integer from -20 to '
                          '19, not %r' % bad, out)
            tiers.assert_not_called()

    def test_a_knob_it_does_not_take_stops_run_py_too(self):
        # (tier 3 run alone, without the preflight of make check)
        for env in ({'LAB_NOVA': '33'},
                    {'LAB_NOVA': 'nova', 'LAB_UPGRADE_DAY': '1'}):
            with mock.patch.dict(os.environ, env), \
                    mock.patch.object(run, 'run') as tiers:
                # (tier 3 named, or all tiers)
                for argv in (['run.py', 'tier3'], ['run.py'],
                             ['run.py', 'tier1', 'tier3']):
                    rc, out = quietly(run.main, argv)
                    self.assertEqual(2, rc, (env, argv))
                    self.assertIn('run.py: LAB_', out)
                tiers.assert_not_called()
                # (tier 2 has no knob of its own)
                tiers.return_value = testsel.Tally()
                rc, _ = quietly(run.main, ['run.py', 'tier2'])
                self.assertEqual(0, rc, env)

    def test_the_niceness_is_taken_before_the_tiers_run(self):
        order = []
        with mock.patch.object(run, 'set_niceness', order.append), \
                mock.patch.object(run, 'run', lambda tiers: (
                    order.append(tiers), testsel.Tally())[1]):
            rc, _ = quietly(run.main, ['run.py', 'tier2', '--nice', '-10'])
        self.assertEqual(0, rc)
        self.assertEqual([-10, ('tier2',)], order)

    def test_its_checks_are_printed_and_counted_after_the_suites(self):
        lab = self.lab({'LAB_TIER3': '1'}, (
            'import json, sys\n'
            'print("   PASS a check (1.0s)")\n'
            'json.dump({"passed": 3, "failed": 1, "skipped": 0, "xfail": 0,'
            ' "failures": ["lab tier3: b"]}, open(sys.argv[1], "w"))\n'
            'sys.exit(1)'))
        tally, out = quietly(lab.finish)
        self.assertEqual((3, 1, 0, 0), counts(tally))
        self.assertEqual(['lab tier3: b'], tally.failures)
        self.assertIn('== lab tier1, tier2, tier3 (beside the suites): '
                      'exit 1\n   PASS a check', out)

    def test_a_lab_that_stopped_before_its_count_fails_the_rest(self):
        names = run.planned(('tier1', 'tier2', 'tier3'))
        # (and the checks of the days it leaves out are skipped)
        left_out = run.left_out(('tier1', 'tier2', 'tier3'))
        lab = self.lab({}, 'print("   PASS %s (1.0s)"); raise SystemExit(3)'
                       % names[-1])
        tally, out = quietly(lab.finish)
        self.assertEqual((1, len(names) - 1, len(left_out), 0),
                         counts(tally))
        self.assertIn('   FAIL %s (0.0s): not run: tools/lab/run.py stopped '
                      'before its count (exit 3), see build/logs/lab.log' %
                      names[0], out)

    def test_a_lab_that_stopped_counts_a_check_with_a_fail_line_failed(self):
        names = run.planned(('tier1', 'tier2', 'tier3'))
        left_out = run.left_out(('tier1', 'tier2', 'tier3'))
        lab = self.lab({}, 'print("   PASS %s (1.0s)\\n   FAIL %s (1.0s): x\\n'
                       '   PASS %s (1.0s)"); raise SystemExit(3)'
                       % (names[0], names[0], names[1]))
        tally, out = quietly(lab.finish)
        self.assertEqual((1, len(names) - 1, len(left_out), 0),
                         counts(tally))
        self.assertIn('lab: %s: tools/lab/run.py stopped before its count'
                      % names[0], ' '.join(tally.failures))
        self.assertIn('   FAIL %s (0.0s): failed: tools/lab/run.py stopped'
                      % names[0], out)

    def test_tier3_left_out_counts_its_checks_as_skipped(self):
        # the same checks in every run's total, with or without tier 3
        names, _ = quietly(run.read_plan, LAB / 'tier3.py')
        names += run.left_out(('tier3',))
        lab = self.lab({'LAB_TIER3': '0'}, (
            'import json, sys\n'
            'json.dump({"passed": 2, "failed": 0, "skipped": 0, "xfail": 0,'
            ' "failures": []}, open(sys.argv[1], "w"))'))
        tally, out = quietly(lab.finish)
        self.assertEqual((2, 0, len(names), 0), counts(tally))
        self.assertIn('   SKIP %s\n' % names[0], out)

    def test_run_py_writes_its_count_for_the_test_command(self):
        path = pathlib.Path(self.enterContext(
            tempfile.TemporaryDirectory())) / 'counts.json'

        def fake_run(tiers):
            tally = testsel.Tally()
            tally.passed = len(tiers)
            tally.fail('lab tier3: x')
            return tally
        with mock.patch.object(run, 'run', fake_run):
            rc, _ = quietly(run.main, ['run.py', 'tier2', 'tier3',
                                       '--counts', str(path)])
        self.assertEqual(1, rc)
        self.assertEqual({'passed': 2, 'failed': 1, 'skipped': 0,
                          'xfail': 0, 'failures': ['lab tier3: x']},
                         json.loads(path.read_text()))

    def test_a_day_left_out_counts_its_checks_as_skipped(self):
        # (before anything is set up: here there is no venv at all)
        tally = testsel.Tally()
        empty = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        with mock.patch.object(run, 'VENVS', empty):
            _, out = quietly(run.tier3, tally)
        names, _ = quietly(run.read_plan, LAB / 'tier3.py')
        left_out = run.left_out(('tier3',))
        self.assertEqual((0, len(names), len(left_out), 0), counts(tally))
        for name in left_out:
            self.assertIn('   SKIP %s\n' % name, out)

    def test_every_way_of_running_tier3_counts_the_same_checks(self):
        totals = {}
        for env in ({}, {'LAB_UPGRADE_DAY': '1'}, {'LAB_NOVA': 'nova'}):
            with mock.patch.dict(os.environ, env):
                for knob in DAY_KNOBS:
                    if knob not in env:
                        os.environ.pop(knob, None)
                names, _ = quietly(run.read_plan, LAB / 'tier3.py')
                left_out = run.left_out(('tier3',))
            self.assertEqual(len(set(names + left_out)),
                             len(names + left_out), env)
            totals[tuple(env.items())] = (len(names), len(left_out))
        self.assertEqual({((), (20, 8)),
                          ((('LAB_UPGRADE_DAY', '1'),), (28, 0)),
                          ((('LAB_NOVA', 'nova'),), (20, 8))},
                         set(totals.items()))

    def test_plan_sizes_are_the_scripts_plans(self):
        # what a run counts for a script that cannot say its plan
        for env in ({}, {'LAB_UPGRADE_DAY': '1'}):
            with mock.patch.dict(os.environ, env):
                for knob in DAY_KNOBS:
                    if knob not in env:
                        os.environ.pop(knob, None)
                for tier in ('tier1', 'tier3'):
                    names, left_out, unread = run.plans_of(tier)
                    self.assertIsNone(unread)
                    self.assertEqual(run.PLAN_SIZES[tier],
                                     len(names + left_out), (tier, env))

    def test_a_plan_that_cannot_be_read_keeps_its_checks(self):
        # before: one failure stood for tier 3's 28 checks (tier 1's 9),
        # and the total shrank by the rest
        broken = pathlib.Path(self.enterContext(
            tempfile.TemporaryDirectory()))
        for script in ('tier1.py', 'tier3.py'):
            (broken / script).write_text('raise SyntaxError("broken")\n')
        with mock.patch.object(run, 'HERE', broken):
            for tier, run_it in (('tier1', run.tier1), ('tier3', run.tier3),
                                 ('tier3', run.skip_tier3)):
                tally = testsel.Tally()
                _, out = quietly(run_it, tally)
                self.assertEqual((0, run.PLAN_SIZES[tier], 0, 0),
                                 counts(tally), tier)
                self.assertIn('   FAIL %s: planned check 1 of %d (0.0s): not '
                              'run: its plan could not be read (%s.py --plan'
                              % (tier, run.PLAN_SIZES[tier], tier), out)
            names, _ = quietly(run.planned, ('tier2', 'tier3'))
            left_out, _ = quietly(run.left_out, ('tier2', 'tier3'))
            self.assertEqual([], left_out)
        self.assertEqual(run.PLAN_SIZES['tier3'] + len(
            run.planned(('tier2',))), len(names))

    def test_the_planned_checks_of_tiers_2_and_3(self):
        names = run.planned(('tier2', 'tier3'))
        tier3_names, _ = quietly(run.read_plan, LAB / 'tier3.py')
        self.assertEqual(tier3_names, names[-len(tier3_names):])
        self.assertIn(run.FINISHED, names)
        self.assertEqual(len(names), len(set(names)))


class Tier1Test(unittest.TestCase):

    def test_documents_apart_only_by_nova_creation_time_are_one(self):
        doc = ('<domain type="kvm"><metadata><nova:instance><nova:'
               'creationTime>2026-11-25 22:00:%02d</nova:creationTime>'
               '</nova:instance></metadata></domain>')
        recorded = [('test_a', 'domain', doc % 1),
                    ('test_a', 'domain', doc % 2),     # a second later
                    ('test_a', 'nodedev', '<device/>'),
                    ('test_b', 'domain', doc.replace('kvm', 'qemu') % 3)]
        self.assertEqual([recorded[0], recorded[2], recorded[3]],
                         tier1.distinct(recorded))

    def test_one_check_per_kind_of_document(self):
        self.assertEqual(9, len(tier1.PLAN))
        self.assertEqual(1, len([n for n in tier1.PLAN
                                 if 'every domain XML' in n]))


class Tier2Test(unittest.TestCase):
    """tools/lab/run.py's tier 2, with the guest's output made up."""

    def setUp(self):
        self.out = pathlib.Path(tempfile.mkdtemp(prefix='lab-test-')) / 'out'
        self.out.mkdir()
        self.addCleanup(shutil.rmtree, self.out.parent, ignore_errors=True)
        self.tally = testsel.Tally()
        self.scripts = {s: run.Planned('lab tier2', names.values())
                        for s, names in plans.TIER2.items()}
        self.host = run.Planned(
            'lab tier2', [run.RAN % s for s in plans.TIER2] + [run.FINISHED])
        self.planned = sum(len(n) for n in plans.TIER2.values()) + 3

    def write(self, name, lines):
        (self.out / name).write_text('\n'.join(lines) + '\n')

    def count(self):
        _, out = quietly(run.count_guest, self.out, 10, self.scripts,
                         self.host, self.tally)
        return out

    def test_a_script_that_crashed_after_one_fail_did_not_run_to_its_end(
            self):
        cyborg = plans.TIER2['guest_cyborg.py']
        self.write('cyborg.txt', ['PASS %s (0.1s): ok' % n
                                  for n in cyborg.values()] +
                   ['END guest_cyborg.py', 'EXIT guest_cyborg.py 0'])
        first = plans.TIER2['guest_nova.py']['handles']
        # a traceback after one FAIL: python exits 1, no END line
        self.write('nova.txt', ['FAIL %s (0.1s): no file' % first,
                                'EXIT guest_nova.py 1'])
        self.write('nova.log', ['Traceback (most recent call last):',
                                'KeyError: boom'])
        (self.out / 'finished').write_text('ok\n')
        out = self.count()
        self.assertIn('FAIL tier2: guest_nova.py ran to its end (0.0s): '
                      'exit 1, no END line; nova.log: KeyError: boom', out)
        self.assertIn('PASS tier2: guest_cyborg.py ran to its end', out)
        nova = len(plans.TIER2['guest_nova.py'])
        self.assertEqual((len(cyborg) + 1 + 1, nova + 1, 0, 0),
                         counts(self.tally))
        self.assertIn('not run: guest_nova.py stopped before it (exit 1); '
                      'nova.log: KeyError: boom', out)

    def test_a_guest_that_never_ran_fails_every_planned_check(self):
        self.count()
        self.assertEqual((0, self.planned, 0, 0), counts(self.tally))

    def test_a_lab_that_cannot_be_set_up_fails_every_planned_check(self):
        def apt_fails(packages):
            raise RuntimeError('apt-get install failed: no network')
        with mock.patch.object(run, 'apt_install', apt_fails):
            _, out = quietly(run.tier2, self.tally)
        self.assertEqual((0, self.planned, 0, 0), counts(self.tally))
        self.assertIn('not run: the lab could not be set up: apt-get '
                      'install failed: no network', out)


class FakeSteps:
    """Steps whose server never boots; every other step passes."""

    def __getattr__(self, name):
        def step(*args, **kwargs):
            if name == 'boot':
                raise steps.Failed('vm1 went to ERROR')
            return name
        return step


class Tier3Test(unittest.TestCase):

    def setUp(self):
        # (the upgrade day's, unless a test says otherwise)
        reload_days({'LAB_UPGRADE_DAY': '1'})
        self.addCleanup(reload_days, {k: os.environ[k] for k in DAY_KNOBS
                                      if k in os.environ})
        patcher = mock.patch.object(days, 'show_logs', lambda logs: None)
        patcher.start()
        self.addCleanup(patcher.stop)

    def count_day(self, fn):
        plan = run.Planned('lab tier3', tier3.plan())
        tally = testsel.Tally()
        _, out = quietly(fn)
        for line in out.splitlines():
            quietly(plan.line, line)
        quietly(plan.count, tally, 'tier3.py stopped before it')
        return tally, out

    def test_checks_that_need_a_server_that_did_not_boot_fail_not_run(self):
        tally, out = self.count_day(
            lambda: days.OperatorsDay(FakeSteps()).run())
        needs_boot = [c for c in days.OperatorsDay.CHECKS
                      if 'boot' in c.needs]
        self.assertGreater(len(needs_boot), 10)
        for c in needs_boot:
            self.assertIn('FAIL %s (0.0s): not run: it needs "%s", which '
                          'failed' % (c.name, days.OperatorsDay.CHECKS[1]
                                      .name), out)
        # the day's checks that need no server ran; teardown and the other
        # days' checks not printed
        others = len(tier3.plan()) - len(days.OperatorsDay.CHECKS) - 1
        self.assertEqual(len(tier3.plan()), tally.passed + tally.failed)
        self.assertEqual(1 + len(needs_boot) + 1 + others, tally.failed)

    def test_an_upgrade_without_its_server_fails_what_follows_not_run(self):
        tally, out = self.count_day(
            lambda: days.UpgradeDay(FakeSteps()).run())
        checks = {c.key: c for c in days.UpgradeDay.CHECKS}
        self.assertIn('PASS %s' % checks['discovery'].name, out)
        self.assertIn('FAIL %s' % checks['boot'].name, out)
        for key in ('hard_reboot', 'shelve', 'host_reboot', 'delete33',
                    'upgrade'):
            self.assertIn('FAIL %s (0.0s): not run: it needs "%s", which '
                          'failed' % (checks[key].name,
                                      checks['boot'].name), out)
        for key in ('hard_reboot34',):
            self.assertIn('FAIL %s (0.0s): not run: it needs "%s", which '
                          'failed' % (checks[key].name,
                                      checks['upgrade'].name), out)
        self.assertEqual(len(tier3.plan()), tally.passed + tally.failed)
        self.assertEqual(1, tally.passed)

    def test_the_cloud_starts_on_the_33_line_and_days_upgrade_it(self):
        self.assertEqual(['nova', 'nova34'], tier3.lines())
        self.assertEqual([days.UpgradeDay, days.OperatorsDay], days.DAYS)
        self.assertEqual('nova34', days.OperatorsDay.NOVA)
        self.assertEqual([], tier3.left_out())

    def test_by_default_the_operator_s_day_alone_on_the_primary_line(self):
        reload_days({})
        self.assertEqual(['nova34'], tier3.lines())
        self.assertEqual([days.OperatorsDay], days.DAYS)
        self.assertEqual(days.UpgradeDay.plan(), tier3.left_out())
        self.assertEqual(days.OperatorsDay.plan() + [tier3.TEARDOWN],
                         tier3.plan())
        # (no server of another day to resume or delete)
        names = ' | '.join(days.OperatorsDay.plan())
        self.assertIn('nova-compute resumes vm1 with them', names)
        self.assertIn('8 delete: every server:', names)
        self.assertRegex(days.OperatorsDay.header(), r'^day: the operator\'s '
                         r'day, nova 34\.0\.0 \+ patches/nova34, cyborg ')

    def test_the_operator_s_host_reboot_resumes_the_upgraded_server(self):
        # (the upgrade day's u1, if it is ACTIVE; not one in ERROR, whose
        # failure its own day reported)
        rebooted = []

        class Steps(FakeSteps):
            servers = {'u1': 'a', 'u2': 'b', 'vm1': 'c'}

            def server(self, sid):
                return {'status': 'ERROR' if sid == 'b' else 'ACTIVE'}

            def host_reboot(self, *names):
                rebooted.append(names)
        check = {c.key: c for c in days.OperatorsDay.CHECKS}['host_reboot']

        check.run(Steps(), None)

        self.assertEqual([('vm1', 'u1')], rebooted)
        self.assertIn('resumes vm1 and u1', check.name)

    def test_a_cloud_that_did_not_start_fails_every_planned_check(self):
        def start_fails(lab):
            raise RuntimeError('port 5000 on 127.0.0.1 is taken')
        with mock.patch.object(tier3, 'start', start_fails):
            tally, out = self.count_day(lambda: tier3.run_days(None))
        self.assertEqual((0, len(tier3.plan()), 0, 0), counts(tally))
        self.assertIn('not run: the cloud did not start: RuntimeError: port '
                      '5000 on 127.0.0.1 is taken', out)

    def test_the_cpu_report_never_fails_the_tier(self):
        # (a measure only: printed after the days, whose checks all ran)
        def broken(lab):
            raise OSError('no /proc')
        with mock.patch.object(tier3, 'start', lambda lab: FakeSteps()), \
                mock.patch.object(tier3, 'cpu_seconds', broken):
            ok, out = quietly(tier3.run_days, None)
        self.assertFalse(ok)        # (vm1 never booted)
        self.assertIn('CPU seconds not read: no /proc', out)

    def test_every_day_starts_with_a_header_naming_its_versions(self):
        for day in days.DAYS:
            self.assertRegex(day.header(), r'^day: .*, nova \d+\.\d+\.\d+ '
                             r'\+ patches/\w+(, then \d+\.\d+\.\d+ \+ '
                             r'patches/\w+)?, cyborg \d+\.\d+\.\d+ \+ '
                             r'patches/cyborg$')


class CloudProcessesTest(unittest.TestCase):
    """What the teardown counts as left of the cloud, and what the next
    run stops."""

    def setUp(self):
        self.tmp = pathlib.Path(self.enterContext(
            tempfile.TemporaryDirectory()))
        for name, value in (('CLOUD', self.tmp), ('RUN', self.tmp / 'run'),
                            ('LOG', self.tmp / 'log'),
                            ('SESSIONS', self.tmp / 'run' / 'sessions')):
            patcher = mock.patch.object(cloud, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_a_service_whose_environment_lost_the_mark_is_seen(self):
        # (as a uwsgi or oslo.service worker that sets its title, which
        # writes over the environment /proc shows)
        s = cloud.Service('titled', ['sleep', '60'],
                          env={'PATH': os.environ['PATH']}).start()
        self.addCleanup(s.stop, 1)
        self.assertIn(s.proc.pid, cloud.cloud_processes())
        s.stop(1)
        self.assertNotIn(s.proc.pid, cloud.cloud_processes())

    def test_a_process_of_its_session_elsewhere_is_not(self):
        # (a session id of an earlier run given to another process: only
        # one that runs in the cloud's directory is taken for the cloud's)
        elsewhere = self.enterContext(tempfile.TemporaryDirectory())
        s = cloud.Service('other', ['sleep', '60'], cwd=elsewhere,
                          env={'PATH': os.environ['PATH']}).start()
        self.addCleanup(s.stop, 1)
        self.assertNotIn(s.proc.pid, cloud.cloud_processes())

    def test_another_process_in_the_cloud_s_directory_is_not(self):
        p = subprocess.Popen(['sleep', '60'], cwd=self.tmp,
                             start_new_session=True)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        self.assertNotIn(p.pid, cloud.cloud_processes())

    def test_a_session_recorded_before_the_host_s_last_boot_is_not(self):
        # (its id may have been given to another session since: only the
        # environment's mark would make its processes the cloud's)
        s = cloud.Service('rebooted', ['sleep', '60'],
                          env={'PATH': os.environ['PATH']}).start()
        self.addCleanup(s.stop, 1)
        self.assertIn(s.proc.pid, cloud.cloud_processes())
        boot = self.tmp / 'boot_id'
        boot.write_text('another-boot\n')
        with mock.patch.object(cloud, 'BOOT_ID', boot):
            self.assertNotIn(s.proc.pid, cloud.cloud_processes())

    def test_the_next_run_stops_what_a_killed_one_left(self):
        s = cloud.Service('orphan', ['sleep', '60'],
                          env={'PATH': os.environ['PATH']}).start()
        self.addCleanup(s.stop, 1)
        self.assertEqual(['sleep'], cloud.kill_leftovers())
        s.proc.wait(10)
        self.assertEqual({}, cloud.cloud_processes())
        self.assertFalse(cloud.SESSIONS.exists())


class ProbeTest(unittest.TestCase):

    def test_node_devices_being_removed_are_read(self):
        # virsh lists a device, then it is gone or has no parent any more
        host = cloudapi.Host(
            '== nodedev mdev_a ==error: Could not find matching device '
            "'mdev_a'\n"
            '== nodedev mdev_b ==Name:           mdev_b\n'
            'Parent:         \nActive:         yes\n'
            'Persistent:     yes\nAutostart:      no autostart\n')

        self.assertEqual({'name': 'mdev_b', 'parent': '', 'active': 'yes',
                          'persistent': 'yes', 'autostart': 'no autostart'},
                         host.nodedevs['mdev_b'])
        self.assertNotIn('active', host.nodedevs['mdev_a'])


class GuestKernelTest(unittest.TestCase):
    """Both guests' kernels skip the IO-APIC timer check: under TCG on a
    busy host it panicked the compute guest before the cloud's first check
    (CI, 2026-11-28: 19 tier-3 checks not run)."""

    def append(self, cmd):
        return str(cmd[cmd.index('-append') + 1]).split()

    def test_the_compute_guest_boots_without_the_timer_check(self):
        args = self.append(cloud.ComputeGuest(print).command())
        self.assertIn('no_timer_check', args)
        self.assertIn('panic=-1', args)
        self.assertIn('lab.compute_venv=%s' % cloud.COMPUTE_VENV, args)

    def test_tier2_s_guest_boots_without_the_timer_check(self):
        args = self.append(run.guest_command(pathlib.Path('/g'),
                                             pathlib.Path('/o')))
        self.assertIn('no_timer_check', args)
        self.assertIn('lab.watchdog=%d' % run.WATCHDOG, args)


class WarmBytecodeTest(unittest.TestCase):

    def test_a_package_the_venv_lacks_does_not_stop_the_others(self):
        # before: nova 34.0.0's venv has no pyroute2, the first package
        # named, and none of the others was compiled for the guest
        tmp = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        (tmp / 'lab_pkg').mkdir()
        (tmp / 'lab_pkg' / '__init__.py').write_text('')
        (tmp / 'lab_pkg' / 'mod.py').write_text('X = 1\n')
        code = 'import os' + tier3.COMPILE % (['no_such_package',
                                               'no_such_parent.child',
                                               'lab_pkg'],)
        p = subprocess.run([sys.executable, '-c', code], cwd=tmp,
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(tmp),
                                    PYTHONDONTWRITEBYTECODE='',
                                    PYTHONPYCACHEPREFIX=''))
        self.assertEqual(0, p.returncode, p.stderr)
        self.assertTrue(list((tmp / 'lab_pkg' / '__pycache__').glob(
            'mod.*.pyc')))


class StepsAssertTest(unittest.TestCase):
    """Tier 3's checks fail on what their names deny: each fed, offline,
    what the cloud showed when an older check passed anyway."""

    def steps(self):
        s = object.__new__(steps.Steps)
        s.lab = types.SimpleNamespace(guest=None)
        s.servers, s.images, s.operator_mdevs = {'vm1': 'sid1'}, {}, set()
        s.op = mock.Mock(return_value={})
        s.op.note = lambda text: None
        s.api = mock.Mock()
        s.api.get.return_value = {
            'servers': [],
            'server': {'OS-EXT-SRV-ATTR:instance_name': 'instance-1'}}
        host = types.SimpleNamespace(mdevs=[], defined=[],
                                     qemu_pid={'instance-1': 200})
        for name, value in (('probe', lambda guest: host),
                            ('log_mark', lambda name: 0)):
            patcher = mock.patch.object(steps, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        s.arqs = lambda sid=None: []
        s.wait_server = lambda sid, status, timeout=600: None
        s.seen = ('instance-1', None, host)
        return s

    def test_a_provider_gone_from_placement_fails(self):
        # (before, no_leaks() skipped a provider that disappeared)
        s = self.steps()
        s.providers = lambda: {}
        with self.assertRaisesRegex(steps.Failed, 'lab_mdev_mtty_mtty-2 is '
                                    'gone from Placement'):
            s.no_leaks()

    def test_a_500_with_another_message_is_no_refusal(self):
        # (before, any failed boot passed, a 500 of any kind included)
        s = self.steps()
        s.providers = lambda: {}
        s.no_leaks = lambda: None
        s.op = mock.Mock(side_effect=lambda cmd, **kw: {
            'id': 'sid2', 'fault': {'code': 500, 'message': 'Unexpected '
                                    'API Error.'}})
        s.op.note = lambda text: None
        with mock.patch.object(steps.cloud, 'wait_for', lambda *a, **k: None):
            with self.assertRaisesRegex(steps.Failed, "not code 500 with a "
                                        "message matching 'No valid host"):
                s.failed_boot('dp', 'flavor', 'vm-bad', re.compile(
                    r'No valid host was found\. .*'))
            s.op = mock.Mock(side_effect=lambda cmd, **kw: {
                'id': 'sid2', 'fault': {'code': 500, 'message': 'No valid '
                                        'host was found. There are not '
                                        'enough hosts available.'}})
            s.op.note = lambda text: None
            got = s.failed_boot('dp', 'flavor', 'vm-bad', re.compile(
                r'No valid host was found\. .*'))
            self.assertIn('vm-bad ERROR, fault 500 "No valid host', got)

    def test_a_reboot_needs_a_qemu_process_before_and_after(self):
        # (a server without one could pass "a new QEMU process")
        s = self.steps()
        host = s.seen[2]
        host.qemu_pid.clear()
        with self.assertRaisesRegex(steps.Failed, 'no QEMU process runs vm1 '
                                    r'\(instance-1\) before the action'):
            s.qemu_pid('vm1')
        host.qemu_pid['instance-1'] = 100
        self.assertEqual(100, s.qemu_pid('vm1'))
        s.verify = lambda name, *a, **k: host.qemu_pid.clear() or 'verified'
        with self.assertRaisesRegex(steps.Failed, 'QEMU of instance-1 is '
                                    'None, was process 100'):
            s.lifecycle('vm1', 'server reboot --hard vm1')

    def test_a_soft_reboot_that_fell_back_to_a_hard_one_fails(self):
        # (before, wait_soft_reboot_seconds = 1 made every soft reboot a
        # hard one, and the check passed)
        s = self.steps()
        s.wait_console = lambda name, text: text
        s.qemu_pid = lambda name: 100
        s.verify = lambda name: 'verified'
        logs = {'fallback': ['... %s' % steps.HARD_FALLBACK + ' sid1'],
                'soft': ['[instance: sid1] Instance shutdown successfully.']}
        with mock.patch.object(steps, 'log_since',
                               lambda name, mark: logs['fallback']):
            with self.assertRaisesRegex(steps.Failed, 'did not take the '
                                        'soft path'):
                s.soft_reboot('vm1')
        with mock.patch.object(steps, 'log_since',
                               lambda name, mark: logs['soft']):
            got = s.soft_reboot('vm1')
            self.assertIn('QEMU pid 100 -> 200', got)
            # (the path Nova's log shows first, in a log cut at 200)
            self.assertTrue(got.startswith(
                'nova-compute: "Instance shutdown successfully."'), got)
            # the same QEMU process after it: no reboot happened
            s.seen[2].qemu_pid['instance-1'] = 100
            with self.assertRaisesRegex(steps.Failed, 'was not restarted'):
                s.soft_reboot('vm1')

    def test_a_bad_profile_needs_the_scheduler_s_own_refusal(self):
        # (the pattern bad_profile() gives failed_boot(), not a test's own)
        s = self.steps()
        s.failed_boot = mock.Mock(return_value='refused')
        s.bad_profile()
        fault = s.failed_boot.call_args.args[3]
        self.assertTrue(fault.fullmatch('No valid host was found. '))
        for message in ('Unexpected API Error.', 'No valid host was found. '
                        'Exceeded max scheduling attempts 3 for instance x',
                        'Build of instance x aborted'):
            self.assertIsNone(fault.fullmatch(message), message)

    def test_an_offloaded_server_with_an_arq_fails(self):
        # (before, shelve's "no ARQ" was printed, not asserted)
        s = self.steps()
        s.arqs = lambda sid=None: [{'uuid': 'arq1', 'state': 'Bound'}]
        with self.assertRaisesRegex(steps.Failed, 'the offloaded server has '
                                    'ARQs'):
            s.shelve_unshelve('vm1')

    def test_a_rebuild_that_kept_the_old_image_fails(self):
        s = self.steps()
        s.images = {'tiny': 'img-old', 'tiny2': 'img-new'}
        s.server = lambda sid: {'image': {'id': 'img-old'}}
        s.qemu_pid = lambda name: 100
        s.verify = lambda name, *a, **k: 'verified'
        with self.assertRaisesRegex(steps.Failed, 'vm1 runs image img-old, '
                                    'not tiny2'):
            s.lifecycle('vm1', 'server rebuild --image tiny2 vm1',
                        image='tiny2')

    def test_one_delete_needs_placement_s_inventories_as_before(self):
        # (before, the upgrade day's delete compared sysfs and usages only)
        s = self.steps()
        s.servers['u2'] = 'sid2'
        s.arqs = lambda sid=None: [{'attach_handle_uuid': 'm2'}] if (
            sid == 'sid2' and 'u2' in s.servers) else []
        # (10 available before the delete, 11 after it)
        host = types.SimpleNamespace(mdevs={}, defined={},
                                     available={'mtty-2': 11}, nodedev=lambda
                                     uuid: None)
        s.no_leaks = lambda: host
        totals = iter([11, 11, 11, 10])
        s.providers = lambda: {'lab_mdev_mtty_mtty-2': {'inventories': {
            'CUSTOM_MDEV_MTTY_2': {'total': next(totals), 'reserved': 0}}}}
        before = types.SimpleNamespace(available={'mtty-2': 10})
        with mock.patch.object(steps, 'probe', lambda guest: before):
            self.assertIn('Placement inventories', s.delete_one('u2'))
            s.servers['u2'] = 'sid2'
            with self.assertRaisesRegex(steps.Failed, "Cyborg's inventories "
                                        r'in Placement \(total, reserved\): '
                                        ".*10, 0.*, before the delete"):
                s.delete_one('u2')

    def delete_all(self, usages, inventory):
        s = self.steps()
        host = types.SimpleNamespace(mdevs={}, defined={}, domains=[],
                                     available={'mtty-2': 11})
        s.no_leaks = lambda: host
        s.lab.guest = mock.Mock(**{'sh.return_value': (0, '', '')})
        s.handmade = None
        s.start_available = {'mtty-2': 11}
        start = {'total': 11, 'reserved': 0}
        s.start_inventory = {'lab_mdev_mtty_mtty-2': {
            'CUSTOM_MDEV_MTTY_2': (11, 0)}}
        s.providers = lambda: {'lab_mdev_mtty_mtty-2': {
            'uuid': 'rp2', 'usages': usages,
            'inventories': {'CUSTOM_MDEV_MTTY_2': dict(start, **inventory)}}}
        wait = mock.patch.object(steps.cloud, 'wait_for', lambda *a, **k: (
            a[1]() or None))
        with wait, mock.patch.object(steps, 'probe', lambda guest: host), \
                mock.patch.object(steps, 'OTHER_TYPE', 'mtty-2'):
            return s.delete()

    def test_capacity_is_back_in_placement_only_with_no_usage_left(self):
        # (before, delete's "capacity back" compared sysfs only)
        self.assertIn('Placement inventories', self.delete_all(
            {'CUSTOM_MDEV_MTTY_2': 0}, {}))
        with self.assertRaisesRegex(steps.Failed, 'Placement usages left: '
                                    "{'lab_mdev_mtty_mtty-2': "
                                    "{'CUSTOM_MDEV_MTTY_2': 1}}"):
            self.delete_all({'CUSTOM_MDEV_MTTY_2': 1}, {})
        with self.assertRaisesRegex(steps.Failed, "Cyborg's inventories in "
                                    r'Placement \(total, reserved\)'):
            self.delete_all({'CUSTOM_MDEV_MTTY_2': 0}, {'reserved': 1})


@unittest.skipUnless(shutil.which('qemu-system-x86_64'),
                     'no qemu-system-x86_64 (the lab installs it)')
class BootSectorTest(unittest.TestCase):
    """The servers' boot sector answers the ACPI power button, as the
    soft reboot check needs: shown here with QEMU alone (TCG)."""

    def test_it_powers_off_when_the_power_button_is_pressed(self):
        tmp = pathlib.Path(tempfile.mkdtemp(prefix='lab-test-'))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        disk, serial, qmp = tmp / 'disk', tmp / 'serial', tmp / 'qmp'
        disk.write_bytes(steps.boot_sector('lab image test'))
        os.truncate(disk, 1 << 20)
        qemu = subprocess.Popen([
            'qemu-system-x86_64', '-machine', 'pc', '-accel', 'tcg', '-m',
            '32', '-display', 'none', '-no-user-config', '-drive',
            'file=%s,format=raw,if=virtio' % disk, '-serial',
            'file:%s' % serial, '-qmp', 'unix:%s,server=on,wait=off' % qmp])
        self.addCleanup(qemu.kill)

        def console():
            return serial.read_text() if serial.exists() else ''
        for _ in range(600):
            if steps.ARMED in console() or qemu.poll() is not None:
                break
            time.sleep(0.1)
        self.assertIn('lab image test: ready, power button armed',
                      console())
        time.sleep(1)
        self.assertIsNone(qemu.poll(), 'it powered off by itself')
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(qmp))
            f = s.makefile('rw')
            f.readline()
            for command in ('qmp_capabilities', 'system_powerdown'):
                f.write(json.dumps({'execute': command}) + '\n')
                f.flush()
                f.readline()
        self.assertEqual(0, qemu.wait(60))
        self.assertIn('lab image test: power button pressed, powering off',
                      console())


if __name__ == '__main__':
    unittest.main()
