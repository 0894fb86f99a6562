"""How the test command counts: every test listed is counted once.

Run by `make check` and `make check-suites`, or alone:
    python3 -m unittest discover -s tools -p 'test_testsel.py'
"""

import pathlib
import shutil
import sys
import tempfile
import textwrap
import threading
import types
import unittest
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
TOP = HERE.parent
sys.path.insert(0, str(HERE))
import testsel  # noqa: E402

# A test module with every kind of outcome: 9 tests.
OUTCOMES = textwrap.dedent('''
    import unittest


    class Skipped(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            raise unittest.SkipTest('no backend')

        def test_one(self):
            pass

        def test_two(self):
            pass

        def test_three(self):
            pass


    class Broken(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            raise RuntimeError('boom')

        def test_x(self):
            pass

        def test_y(self):
            pass


    class Fine(unittest.TestCase):
        def test_ok(self):
            pass

        @unittest.skip('because')
        def test_skip(self):
            pass

        @unittest.expectedFailure
        def test_xfail(self):
            self.fail('expected')

        @unittest.expectedFailure
        def test_uxsuccess(self):
            pass
''')


def counts(tally):
    return (tally.passed, tally.failed, tally.skipped, tally.xfail)


class CountResultsTest(unittest.TestCase):

    def test_a_skipped_setupclass_counts_each_test_of_its_class(self):
        listed = ['m.A.test_1', 'm.A.test_2', 'm.A.test_3', 'm.B.test_1']
        tally = testsel.count_results(listed, {
            'setUpClass (m.A)': 'skip', 'm.B.test_1': 'success'}, 'x')
        self.assertEqual((1, 0, 3, 0), counts(tally))

    def test_a_failed_setupclass_fails_each_test_of_its_class(self):
        listed = ['m.A.test_1', 'm.A.test_2']
        tally = testsel.count_results(
            listed, {'setUpClass (m.A)': 'fail'}, 'x')
        self.assertEqual((0, 2, 0, 0), counts(tally))
        self.assertEqual(['x: m.A.test_1', 'x: m.A.test_2'], tally.failures)

    def test_a_listed_test_without_a_result_fails(self):
        tally = testsel.count_results(
            ['m.A.test_1', 'm.A.test_2'], {'m.A.test_1': 'success'}, 'x')
        self.assertEqual((1, 1, 0, 0), counts(tally))
        self.assertEqual(['x: m.A.test_2 (not run)'], tally.failures)

    def test_expected_failures_apart_unexpected_successes_fail(self):
        tally = testsel.count_results(
            ['m.A.test_1', 'm.A.test_2'],
            {'m.A.test_1': 'xfail', 'm.A.test_2': 'uxsuccess'}, 'x')
        self.assertEqual((0, 1, 0, 1), counts(tally))

    def test_a_failed_teardownclass_after_its_tests_is_a_failure(self):
        tally = testsel.count_results(
            ['m.A.test_1'], {'m.A.test_1': 'success',
                             'tearDownClass (m.A)': 'fail'}, 'x')
        self.assertEqual((1, 1, 0, 0), counts(tally))

    def test_the_closing_line_starts_with_passed_and_failed(self):
        tally = testsel.Tally()
        tally.passed, tally.failed, tally.skipped, tally.xfail = 5, 1, 2, 3
        self.assertEqual('5 passed, 1 failed, 2 skipped, 3 expected '
                         'failures', tally.line())


MODULE = textwrap.dedent('''
    import os


    def helper():
        return 1


    class Base(object):
        def test_a(self):
            pass


    class Child(Base):
        pass


    class Other(object):
        def test_b(self):
            pass

        def setUp(self):
            pass

        @staticmethod
        def test_c():
            pass
    ''').lstrip()


class TouchedTestsTest(unittest.TestCase):
    """Of an upstream test module the series changes, the changed test
    methods (in their classes and subclasses), the classes whose other code
    changed (and their subclasses), or the whole module."""

    def test_a_changed_test_runs_in_its_class_and_subclasses(self):
        self.assertEqual([('Base', 'test_a'), ('Child', 'test_a')],
                         testsel.touched_tests(MODULE, {10}))

    def test_an_import_alone_selects_no_test(self):
        self.assertEqual([], testsel.touched_tests(MODULE, {1}))

    def test_a_module_that_does_not_parse_selects_the_module(self):
        # (before: a SyntaxError that ended the test command, no total)
        self.assertIsNone(testsel.touched_tests('class T(:\n', {1}))

    def test_a_changed_module_level_function_selects_the_module(self):
        self.assertIsNone(testsel.touched_tests(MODULE, {5}))

    def test_an_unrelated_class_stays_out(self):
        self.assertEqual([('Other', 'test_b')],
                         testsel.touched_tests(MODULE, {19}))

    def test_a_changed_setup_selects_the_whole_class(self):
        self.assertEqual([('Other', None)],
                         testsel.touched_tests(MODULE, {19, 22}))

    def test_a_changed_decorator_belongs_to_its_test(self):
        self.assertEqual([('Other', 'test_c')],
                         testsel.touched_tests(MODULE, {24}))

    def test_the_filters_match_the_selected_tests_only(self):
        mod = 'nova.tests.functional.test_x'
        filters = testsel.touched_regex(
            mod, [('Base', 'test_a'), ('Child', 'test_a'), ('Other', None)])
        import re

        def picked(test_id):
            return any(re.search(f, test_id) for f in filters)
        self.assertTrue(picked(mod + '.Base.test_a'))
        self.assertTrue(picked(mod + '.Child.test_a'))
        self.assertTrue(picked(mod + '.Other.test_anything'))
        self.assertFalse(picked(mod + '.Base.test_a_longer'))
        self.assertFalse(picked(mod + '.Base.test_b'))
        self.assertFalse(picked(mod + '.BaseMore.test_a'))


class Scratch:
    """A scratch project of OUTCOMES tests run like Nova's and Cyborg's."""

    def __init__(self, test_case):
        top = pathlib.Path(tempfile.mkdtemp(prefix='testsel-test-'))
        test_case.addCleanup(shutil.rmtree, top, ignore_errors=True)
        self.name = 'scratch'
        self.tree = top / 'scratch'
        (self.tree / 'pkg').mkdir(parents=True)
        (self.tree / 'pkg' / '__init__.py').write_text('')
        (self.tree / 'pkg' / 'test_outcomes.py').write_text(OUTCOMES)
        (self.tree / '.stestr.conf').write_text(
            '[DEFAULT]\ntest_path=./pkg\ntop_dir=./\n')
        # any of the project venvs: they all have stestr
        self.venv = TOP / 'build' / 'venvs' / 'cyborg'
        self.python = self.venv / 'bin' / 'python'


@unittest.skipUnless((TOP / 'build/venvs/cyborg/bin/stestr').exists(),
                     'no cyborg venv (tools/series venv cyborg)')
class StestrTest(unittest.TestCase):

    def setUp(self):
        self.project = Scratch(self)

    def run_suite(self, filters=(), required=()):
        out = self.project.tree.parent / 'out.txt'
        with open(out, 'w') as f:
            stdout, sys.stdout = sys.stdout, f
            try:
                tally = testsel.stestr(self.project, 'unit', './pkg',
                                       list(filters), {}, required=required)
            finally:
                sys.stdout = stdout
        return tally, out.read_text()

    def test_every_listed_test_is_counted_once_by_its_outcome(self):
        tally, out = self.run_suite()
        # Fine: 1 ok, 1 skipped, 1 expected failure, 1 unexpected success;
        # Skipped: 3 skipped; Broken: 2 failed (its setUpClass)
        self.assertEqual((1, 3, 4, 1), counts(tally), out)
        self.assertIn('pkg.test_outcomes.Broken.test_x', '\n'.join(
            tally.failures))
        self.assertIn('1 passed, 3 failed, 4 skipped, 1 expected failures '
                      '(9 listed)', out)

    def test_a_regression_set_that_selects_no_test_fails(self):
        tally, out = self.run_suite(
            filters=[r'^pkg\.test_outcomes\.Fine\.', r'^pkg\.nothing\.'],
            required=[r'^pkg\.test_outcomes\.Fine\.', r'^pkg\.nothing\.'])
        self.assertEqual((1, 2, 1, 1), counts(tally), out)
        self.assertIn(r'scratch unit: the regression set ^pkg\.nothing\. '
                      'selects no test', tally.failures)

    def test_a_suite_that_cannot_be_listed_fails_each_of_its_tests(self):
        # before: one failure stood for the whole selection
        (self.project.tree / 'pkg' / 'test_broken.py').write_text(
            textwrap.dedent('''
                import unittest
                import no_such_module


                class _Mixin(object):
                    def test_m(self):
                        pass


                class Base(unittest.TestCase):
                    def test_a(self):
                        pass


                class Child(_Mixin, Base):
                    def test_b(self):
                        pass
            '''))
        tally, out = self.run_suite()
        # OUTCOMES' 9 tests and test_broken's 4 (Base.test_a; Child's
        # test_a, test_b and test_m), not the mixin's own test_m
        self.assertEqual((0, 13, 0, 0), counts(tally), out)
        self.assertIn('could not be listed (stestr list exit',
                      tally.failures[0])
        self.assertIn('about 13 tests of the selection, counted in their '
                      'source, not run', tally.failures[0])
        tally, out = self.run_suite(filters=[r'^pkg\.test_broken\.Child\.'])
        self.assertEqual((0, 3, 0, 0), counts(tally), out)

    def test_a_module_that_does_not_parse_counts_its_tests(self):
        (self.project.tree / 'pkg' / 'test_syntax.py').write_text(
            'import unittest\n\n\nclass T(unittest.TestCase):\n'
            '    def test_a(self):\n        pass\n\n'
            '    def test_b(self) -> :\n        pass\n')
        tally, out = self.run_suite(filters=[r'^pkg\.test_syntax\.'])
        self.assertEqual((0, 2, 0, 0), counts(tally), out)

    def test_a_selection_of_no_test_fails(self):
        tally, out = self.run_suite(filters=[r'^pkg\.nothing\.'])
        self.assertEqual((0, 1, 0, 0), counts(tally), out)
        self.assertIn('no test selected', tally.failures[0])


class SourceTestsTest(unittest.TestCase):

    def count(self, text, filters=()):
        tree = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        (tree / 'pkg').mkdir()
        (tree / 'pkg' / 'test_m.py').write_text(textwrap.dedent(text))
        return testsel.source_tests(tree, './pkg', list(filters))

    def test_a_class_named_as_the_test_case_it_extends_counts(self):
        self.assertEqual(1, self.count('''
            from unittest import TestCase


            class TestCase(TestCase):
                def test_a(self):
                    pass
        '''))

    def test_a_module_that_does_not_parse_counts_its_methods_only(self):
        # (not its module-level functions, nor through the blank line
        # before one)
        self.assertEqual(1, self.count('''
            class T(unittest.TestCase):
                def test_a(self):
                    pass

            def test_helper():
                pass
            x = (
        '''))


class UnrunSuitesTest(unittest.TestCase):

    def test_a_series_that_could_not_be_made_fails_each_of_its_tests(self):
        # before: two failures stood for its suites, whatever their size
        project = Scratch(self)
        project.dist, project.unit_tests = 'openstack-cyborg', 'pkg'
        tally = testsel.unrun_tests(project, 'no venv')
        # OUTCOMES' 9 unit tests; no functional tests in the tree: one
        self.assertEqual((0, 10, 0, 0), counts(tally))
        self.assertEqual(['scratch unit: not run: no venv (about 9 tests, '
                          'each a failure)',
                          'scratch functional: not run: no venv'],
                         tally.failures)

    def test_a_tree_git_cannot_diff_counts_its_regression_sets(self):
        # (no base to diff: the tests of the regression sets it holds)
        tree = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        objects = tree / 'nova' / 'tests' / 'unit' / 'objects'
        objects.mkdir(parents=True)
        (objects / 'test_service.py').write_text(textwrap.dedent('''
            from nova import test


            class TestService(test.TestCase):
                def test_a(self):
                    pass

                def test_b(self):
                    pass
        '''))
        project = types.SimpleNamespace(name='nova', dist='nova', tree=tree)
        tally = testsel.unrun_tests(project, 'no base')
        # test_service's 2 unit tests (a regression set); no functional one
        self.assertEqual((0, 3, 0, 0), counts(tally))
        self.assertIn('nova unit: not run: no base (about 2 tests, each a '
                      'failure)', tally.failures)

    def test_without_a_tree_each_suite_is_one_failure(self):
        project = types.SimpleNamespace(
            name='nova34', dist='nova', tree=pathlib.Path('/nonexistent'))
        tally = testsel.unrun_tests(project, 'no sdist')
        self.assertEqual((0, 2, 0, 0), counts(tally))


class UnittestCountTest(unittest.TestCase):
    """The tooling's own tests are counted the same way."""

    def test_unittest_outcomes_are_counted_like_stestr_ones(self):
        tmp = pathlib.Path(tempfile.mkdtemp(prefix='testsel-test-'))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        (tmp / 'check_outcomes.py').write_text(OUTCOMES)
        path = list(sys.path)
        with open(tmp / 'out.txt', 'w') as f:
            stdout, sys.stdout = sys.stdout, f
            stderr, sys.stderr = sys.stderr, f
            try:
                tally = testsel.run_unittests(tmp, 'tools',
                                              pattern='check_*.py')
            finally:
                sys.stdout, sys.stderr = stdout, stderr
                sys.modules.pop('check_outcomes', None)
                sys.path[:] = path
        self.assertEqual((1, 3, 4, 1), counts(tally))


class VerifyResultsTest(unittest.TestCase):

    def test_verify_that_cannot_run_fails_each_patch(self):
        class Error(Exception):
            pass

        def verify():
            raise Error('no build/nova: tools/series materialize nova')
        project = types.SimpleNamespace(
            name='nova', verify=verify, series=lambda: [
                pathlib.Path('0001-a.patch'), pathlib.Path('0002-b.patch')])
        results = testsel.verify_results(project, Error)
        self.assertEqual(
            [('0001-a.patch', ['not verified: no build/nova: tools/series '
                               'materialize nova']),
             ('0002-b.patch', ['not verified: no build/nova: tools/series '
                               'materialize nova'])], results)


class VerifyAllTest(unittest.TestCase):

    def test_two_at_a_time_the_longest_first_results_in_order(self):
        class Error(Exception):
            pass
        started = []
        # (the first two wait for each other: they run at once)
        both = threading.Barrier(2, timeout=10)

        def project(name, patches):
            def verify():
                started.append(name)
                if len(started) <= 2:
                    both.wait()
                return [(name, [])]

            def series():
                if patches is None:
                    raise Error('no patches/%s/series' % name)
                return ['%04d.patch' % i for i in range(patches)]
            return types.SimpleNamespace(name=name, verify=verify,
                                         series=series)
        projects = [project('nova', 35), project('cyborg', 33),
                    project('nova34', 46), project('broken', None)]
        results = testsel.verify_all(projects, Error)
        self.assertEqual([[('nova', [])], [('cyborg', [])],
                          [('nova34', [])], [('broken', [])]], results)
        self.assertEqual(['nova34', 'nova'], sorted(started[:2],
                                                    reverse=True))
        self.assertEqual(['cyborg', 'broken'], started[2:])


class CheckTest(unittest.TestCase):
    """The test command goes on past a series it cannot make."""

    def test_a_series_that_cannot_be_materialized_fails_what_it_holds(self):
        class Error(Exception):
            pass

        class Broken:
            name, dist = 'nova', 'nova'
            # (the sdist could not be fetched: no tree)
            tree = pathlib.Path('/nonexistent/build/nova')

            def materialize(self):
                raise Error('patch 0002-b.patch does not apply to '
                            'build/nova')

            def make_venv(self):
                raise AssertionError('no venv for a tree that failed')

            def verify(self):
                raise Error('no build/nova: tools/series materialize nova')

            def series(self):
                return [pathlib.Path('0001-a.patch'),
                        pathlib.Path('0002-b.patch')]

        import preflight
        out = []
        with mock.patch.object(preflight, 'problems', lambda lab: []), \
                mock.patch.object(preflight, 'summary', lambda lab: ''), \
                mock.patch.object(testsel, 'run_tool_tests',
                                  testsel.Tally), \
                mock.patch('builtins.print',
                           lambda *a, **k: out.append(' '.join(
                               str(x) for x in a))):
            rc = testsel.check([Broken()], Error, lab=False)
        self.assertEqual(1, rc)
        self.assertEqual('0 passed, 5 failed, 0 skipped, 0 expected '
                         'failures', out[-1])
        self.assertIn('   nova: patch 0002-b.patch does not apply to '
                      'build/nova', out)
        self.assertIn('   nova unit: not run: build/nova or its venv could '
                      'not be made (see above)', out)

    def test_a_series_that_does_not_apply_still_gets_its_venv(self):
        # verify lints, with the venv, the patches that apply
        class Error(Exception):
            pass

        made = []

        class Broken:
            name = 'nova'
            tree = pathlib.Path(__file__).parent

            def materialize(self):
                raise Error('patch 0002-b.patch does not apply to '
                            'build/nova')

            def make_venv(self):
                made.append(self.name)

        ready, tally = testsel.prepare(Broken(), Error)

        self.assertFalse(ready)
        self.assertEqual(['nova'], made)
        self.assertEqual(['nova: patch 0002-b.patch does not apply to '
                          'build/nova'], tally.failures)


if __name__ == '__main__':
    unittest.main()
