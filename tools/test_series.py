"""Tests of tools/series on a scratch workspace (cyborg's base: small, cached).

Run by `make check` (counted in its closing line), or alone:
    python3 -m unittest discover -s tools -p 'test_*.py'
"""

import configparser
import io
import importlib.machinery
import importlib.util
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
_loader = importlib.machinery.SourceFileLoader('series', str(HERE / 'series'))
_spec = importlib.util.spec_from_loader('series', _loader)
series = importlib.util.module_from_spec(_spec)
_loader.exec_module(series)


def commit(tree, message, path='README.rst', text='# one more line\n'):
    with open(tree / path, 'a') as f:
        f.write(text)
    subprocess.run(['git', '-C', str(tree), 'commit', '-q', '-a', '-m',
                    message], check=True, env=dict(os.environ,
                                                   **series.GIT_IDENTITY))


def good_message(summary='Add a line to the README'):
    return ('%s\n\nThe README lacked a line; this adds it.\n\n'
            'Change-Id: I%s\n' % (summary, secrets.token_hex(20)))


class ExtractTest(unittest.TestCase):
    """An sdist is extracted with tarfile's 'data' filter, or, on a
    python3 without it (Debian 12's 3.11.2), checked member by member."""

    def sdist(self, *members, uid=0, modes={}):
        """A gzipped tar of (name, text, or None for a directory, or
        ('link', target)) members, of that uid (modes: {name: mode})."""
        path = self.dest.parent / 'x-1.tar.gz'
        with tarfile.open(path, 'w:gz') as tar:
            for name, what in members:
                info = tarfile.TarInfo(name)
                info.uid = info.gid = uid
                info.uname = info.gname = 'zuul' if uid else 'root'
                info.mode = modes.get(name, 0o755 if what is None else 0o644)
                data = None
                if what is None:
                    info.type = tarfile.DIRTYPE
                elif isinstance(what, tuple):
                    info.type, info.linkname = tarfile.SYMTYPE, what[1]
                else:
                    data = what.encode()
                    info.size = len(data)
                tar.addfile(info, data and io.BytesIO(data))
        return tarfile.open(path)

    def setUp(self):
        top = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        self.dest = top / 'out'
        self.dest.mkdir()

    def both_ways(self):
        """With the filter, then as if python3 had none."""
        yield 'filter'
        if hasattr(tarfile, 'data_filter'):
            saved = tarfile.data_filter
            del tarfile.data_filter
            try:
                yield 'checked'
            finally:
                tarfile.data_filter = saved

    def test_files_and_directories_are_extracted(self):
        for way in self.both_ways():
            shutil.rmtree(self.dest)
            self.dest.mkdir()
            with self.sdist(('x-1', None), ('x-1/setup.cfg', '[metadata]\n'),
                            ('x-1/nova', None),
                            ('x-1/nova/a.py', 'A = 1\n')) as tar:
                series.extract(tar, self.dest)
            self.assertEqual('A = 1\n', (self.dest / 'x-1' / 'nova' / 'a.py')
                             .read_text(), way)

    def test_extracted_as_its_own_without_setuid_or_group_write(self):
        # (sdists on PyPI are made by uid 1000, mode 664: extracted so by
        # root, git refuses the tree as of "dubious ownership")
        for way in self.both_ways():
            shutil.rmtree(self.dest)
            self.dest.mkdir()
            with self.sdist(('x-1', None), ('x-1/run.sh', '#!/bin/sh\n'),
                            ('x-1/a.py', 'A = 1\n'), uid=1000,
                            modes={'x-1/run.sh': 0o4775, 'x-1': 0o777,
                                   'x-1/a.py': 0o664}) as tar:
                series.extract(tar, self.dest)
            for name, mode in (('x-1', 0o755), ('x-1/run.sh', 0o755),
                               ('x-1/a.py', 0o644)):
                st = (self.dest / name).stat()
                self.assertEqual((os.getuid(), os.getgid(), mode),
                                 (st.st_uid, st.st_gid, st.st_mode & 0o7777),
                                 (way, name))

    def test_a_member_outside_or_a_link_out_is_refused(self):
        for member in (('../evil.py', 'x\n'), ('/tmp/evil.py', 'x\n'),
                       ('x-1/passwd', ('link', '/etc/passwd')),
                       ('x-1/up', ('link', '../../../etc')),
                       ('x-1/in', ('link', 'setup.cfg'))):
            for way in self.both_ways():
                with self.sdist(('x-1/setup.cfg', '[metadata]\n'),
                                member) as tar, \
                        self.assertRaises(series.SeriesError) as raised:
                    series.extract(tar, self.dest)
                self.assertIn('x-1.tar.gz: refusing to extract',
                              str(raised.exception), way)
                self.assertEqual([], list(self.dest.rglob('*')), way)
        self.assertFalse((self.dest.parent / 'evil.py').exists())


class FindUvTest(unittest.TestCase):

    def test_uv_trusts_the_system_s_certificates(self):
        for before, after in (({}, '1'), ({'UV_SYSTEM_CERTS': '0'}, '0'),
                              ({'UV_NATIVE_TLS': '0'}, None)):
            with mock.patch.dict(os.environ):
                os.environ.pop('UV_NATIVE_TLS', None)
                os.environ.pop('UV_SYSTEM_CERTS', None)
                os.environ.update(before)
                with mock.patch.object(series, 'VENVS', pathlib.Path(
                        self.enterContext(tempfile.TemporaryDirectory()))):
                    (series.VENVS / 'tools' / 'bin').mkdir(parents=True)
                    (series.VENVS / 'tools' / 'bin' / 'uv').touch()
                    series.find_uv()
                self.assertEqual(after, os.environ.get('UV_SYSTEM_CERTS'))


class SeriesWorkspaceTest(unittest.TestCase):
    """materialize / export / verify on a copy of this workspace."""

    def setUp(self):
        self.top = pathlib.Path(tempfile.mkdtemp(prefix='series-test-'))
        self.addCleanup(shutil.rmtree, self.top, ignore_errors=True)
        shutil.copy(series.TOP / 'bases.ini', self.top)
        (self.top / 'patches' / 'cyborg').mkdir(parents=True)
        (self.top / 'build').mkdir()
        # share the sdist cache and venvs (flake8) of the real workspace
        for sub in ('cache', 'venvs'):
            real = series.TOP / 'build' / sub
            real.mkdir(parents=True, exist_ok=True)
            (self.top / 'build' / sub).symlink_to(real)
        self.project = series.Project('cyborg', top=self.top)
        self.project.materialize()
        self.tree = self.project.tree

    def files(self):
        return {p.name: p.read_bytes()
                for p in self.project.patches.iterdir()}

    def test_export_of_unchanged_tree_changes_no_file(self):
        commit(self.tree, good_message())
        self.project.export()
        before = self.files()
        mtimes = {p.name: p.stat().st_mtime_ns
                  for p in self.project.patches.iterdir()}
        self.project.materialize()  # reused: it is base + series
        self.project.export()
        self.assertEqual(before, self.files())
        self.assertEqual(mtimes, {p.name: p.stat().st_mtime_ns
                                  for p in self.project.patches.iterdir()})
        text = before['0001-Add-a-line-to-the-README.patch'].decode()
        self.assertTrue(text.startswith('From 0000000000000000000000000000'))
        self.assertNotIn('\n-- \n', text)  # no git version signature
        self.assertEqual(['0001-Add-a-line-to-the-README.patch'],
                         [p.name for p in self.project.series()])

    def test_materialize_applies_the_series_in_order(self):
        commit(self.tree, good_message('First'), text='first\n')
        commit(self.tree, good_message('Second'), text='second\n')
        self.project.export()
        self.project.materialize(force=True)
        log = subprocess.run(['git', '-C', str(self.tree), 'log',
                              '--format=%s', 'base..HEAD'], check=True,
                             capture_output=True, text=True).stdout
        self.assertEqual(['Second', 'First'], log.split())
        self.assertFalse(list(self.tree.glob('*.egg-info')),
                         'the sdist egg-info must not be part of the tree')

    def test_broken_patch_stops_materialize_with_its_name(self):
        commit(self.tree, good_message())
        self.project.export()
        (patch,) = self.project.series()
        # a context line the base does not have: the patch no longer fits
        lines = patch.read_text().split('\n')
        at = next(i for i, ln in enumerate(lines) if ln.startswith('@@'))
        lines[at + 1] = ' this line is not in the base'
        patch.write_text('\n'.join(lines))
        with self.assertRaises(series.SeriesError) as ctx:
            self.project.materialize(force=True)
        msg = str(ctx.exception)
        self.assertIn('patch %s does not apply' % patch.name, msg)
        self.assertIn('patch does not apply', msg)  # git's reason
        self.assertNotIn('git am --continue', msg)

    def test_refuses_to_overwrite_unexported_work(self):
        commit(self.tree, good_message())
        with self.assertRaises(series.SeriesError) as ctx:
            self.project.materialize()
        self.assertIn('Add a line to the README', str(ctx.exception))
        self.assertIn('tools/series export cyborg', str(ctx.exception))
        self.assertIn('--force', str(ctx.exception))
        self.project.export()
        (self.tree / 'README.rst').write_text('changed\n')
        with self.assertRaises(series.SeriesError) as ctx:
            self.project.materialize()
        self.assertIn('uncommitted changes', str(ctx.exception))
        self.project.materialize(force=True)
        self.assertEqual('', subprocess.run(
            ['git', '-C', str(self.tree), 'status', '--porcelain'],
            capture_output=True, text=True).stdout)

    @unittest.skipUnless((series.TOP / 'build/venvs/cyborg/bin/flake8')
                         .exists(), 'no cyborg venv (tools/series venv)')
    def test_verify_flags_message_and_lint_problems_per_patch(self):
        commit(self.tree, good_message('Fine'))
        commit(self.tree, 'A summary line that is much too long to be read '
               'in one glance', path='cyborg/common/utils.py',
               text='try:\n    pass\nexcept:\n    pass\n')
        self.project.export()
        results = dict(self.project.verify())
        self.assertEqual([], results['0001-Fine.patch'])
        problems = '\n'.join(results[
            '0002-A-summary-line-that-is-much-too-long-to-be-read-in-o.patch'])
        self.assertIn('summary line has 61 characters', problems)
        self.assertIn('no body', problems)
        self.assertIn('Change-Id', problems)
        self.assertIn("H201: no 'except:'", problems)

    @unittest.skipUnless((series.TOP / 'build/venvs/cyborg/bin/flake8')
                         .exists(), 'no cyborg venv (tools/series venv)')
    def test_verify_goes_on_past_a_patch_that_does_not_apply(self):
        commit(self.tree, good_message('First'), text='first\n')
        commit(self.tree, good_message('Second'), path='setup.cfg',
               text='# second\n')
        commit(self.tree, good_message('Third'), text='third\n')
        self.project.export()
        second = self.project.series()[1]
        lines = second.read_text().split('\n')
        at = next(i for i, ln in enumerate(lines) if ln.startswith('@@'))
        lines[at + 1] = ' this line is not in the base'
        second.write_text('\n'.join(lines))

        results = self.project.verify()

        self.assertEqual(['0001-First.patch', '0002-Second.patch',
                          '0003-Third.patch'], [n for n, _ in results])
        problems = dict(results)
        self.assertEqual([], problems['0001-First.patch'])
        self.assertIn('does not apply', problems['0002-Second.patch'][0])
        self.assertEqual(['its prefix does not apply: 0002-Second.patch '
                          'before it does not'],
                         problems['0003-Third.patch'])


class ProjectsTest(unittest.TestCase):
    """check covers every base; nova34 gets its own, narrow regression sets."""

    def test_check_covers_every_project_of_bases_ini(self):
        cfg = configparser.ConfigParser()
        cfg.read(series.TOP / 'bases.ini')
        self.assertEqual(sorted(cfg.sections()), sorted(series.PROJECTS))

    def test_the_makefile_targets_cover_every_project(self):
        makefile = (series.TOP / 'Makefile').read_text()
        (line,) = [ln for ln in makefile.splitlines()
                   if ln.startswith('PROJECTS :=')]
        self.assertEqual(list(series.PROJECTS), line.split()[2:])
        for target in ('materialize', 'export', 'venv', 'verify'):
            recipe = makefile.split('\n%s:' % target, 1)[1].split('\n\n')[0]
            self.assertIn('for p in $(PROJECTS)', recipe, target)

    def test_make_verify_verifies_every_series_after_one_that_fails(self):
        # before: `make verify` materialized all three first, and a series
        # that did not apply stopped it before any was verified
        if not shutil.which('make'):
            self.skipTest('no make')
        tmp = pathlib.Path(self.enterContext(tempfile.TemporaryDirectory()))
        calls = tmp / 'calls'
        fake = tmp / 'series.py'
        fake.write_text(
            'import sys\n'
            'open(%r, "a").write(" ".join(sys.argv[1:]) + "\\n")\n'
            'sys.exit(1 if sys.argv[1:] == ["materialize", "nova"] else 0)\n'
            % str(calls))
        # (not the flags of a make this test may run under: -i, -k)
        env = {k: v for k, v in os.environ.items()
               if k not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL')}
        res = subprocess.run(
            ['make', '-s', '-f', str(series.TOP / 'Makefile'), 'verify',
             'SERIES=%s %s' % (sys.executable, fake)],
            cwd=tmp, capture_output=True, text=True, env=env)
        # (make's own exit status for a recipe that failed: the recipe's
        # `exit 1`, not a make that could not run it)
        self.assertEqual(2, res.returncode, res.stderr)
        self.assertRegex(res.stderr, r'\[.*Makefile:\d+: verify\] Error 1')
        self.assertEqual(['%s %s' % (step, p) for p in series.PROJECTS
                          for step in ('materialize', 'venv', 'verify')],
                         calls.read_text().splitlines())

    def test_nova34_selection_is_its_regression_sets_and_changed_modules(self):
        sys.path.insert(0, str(HERE))
        self.addCleanup(sys.path.remove, str(HERE))
        import testsel
        top = pathlib.Path(tempfile.mkdtemp(prefix='series-test-'))
        self.addCleanup(shutil.rmtree, top, ignore_errors=True)
        shutil.copy(series.TOP / 'bases.ini', top)
        project = series.Project('nova34', top=top)
        tree = project.tree
        files = ['nova/virt/libvirt/driver.py', 'nova/scheduler/utils.py',
                 'nova/tests/unit/virt/libvirt/test_driver.py']
        for f in files:
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            (tree / f).write_text('')
        git = ['git', '-C', str(tree)]
        env = dict(os.environ, **series.GIT_IDENTITY)
        subprocess.run(git + ['init', '-q'], check=True)
        subprocess.run(git + ['add', '-A'], check=True)
        subprocess.run(git + ['commit', '-q', '-m', 'base'], check=True,
                       env=env)
        subprocess.run(git + ['tag', 'base'], check=True)
        new_test = tree / 'nova/tests/functional/libvirt/test_cyborg_mdev.py'
        new_test.parent.mkdir(parents=True)
        new_test.write_text('')
        (tree / 'nova/scheduler/utils.py').write_text('# no unit module\n')
        subprocess.run(git + ['add', '-A'], check=True)
        commit(tree, good_message(), path='nova/virt/libvirt/driver.py')

        sel = testsel.nova_selection(project)

        self.assertEqual(
            testsel.NOVA34_REGRESSION['unit'] +
            [r'^nova\.tests\.unit\.virt\.libvirt\.test_driver\.'],
            sel['unit'])
        self.assertEqual(
            testsel.NOVA34_REGRESSION['functional'] +
            [r'^nova\.tests\.functional\.libvirt\.test_cyborg_mdev\.'],
            sel['functional'])
        # nova's (the 33 series') broad sets are not nova34's
        self.assertNotIn(r'^nova\.tests\.unit\.virt\.libvirt\.',
                         sel['unit'])


if __name__ == '__main__':
    unittest.main()
