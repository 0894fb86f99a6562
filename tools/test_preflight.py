"""The preflight: one line that says what the machine lacks, before any
install.

Run by `make check` and `make check-suites`, or alone:
    python3 -m unittest discover -s tools -p 'test_preflight.py'
"""

import contextlib
import io
import os
import pathlib
import socket
import sys
import tarfile
import tempfile
import types
import unittest
from unittest import mock

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import preflight  # noqa: E402
import testsel  # noqa: E402

GIB = 1 << 30
TO_FETCH = preflight.to_fetch
DEBIAN = {'ID': 'debian', 'VERSION_ID': '12',
          'PRETTY_NAME': 'Debian GNU/Linux 12 (bookworm)'}


class PreflightTest(unittest.TestCase):
    """Each fact replaced, one at a time, on a machine that has the rest."""

    def setUp(self):
        self.ports = []
        real_cloud, _ = preflight.lab_modules()
        cloud = types.SimpleNamespace(
            all_ports=lambda: self.ports, port_free=real_cloud.port_free,
            cloud_processes=dict)

        def no_headers():
            raise RuntimeError('linux-headers-amd64 is not installed')
        lab_run = types.SimpleNamespace(TIER2_PACKAGES=[], TIER3_PACKAGES=[],
                                        kernel_packages=no_headers)
        for name, value in (
                ('os_release', lambda: dict(DEBIAN)),
                ('machine', lambda: 'x86_64'),
                ('euid', lambda: 0),
                ('have_module', lambda name: True),
                ('have_command', lambda name: True),
                ('SCHEMAS', HERE / 'preflight.py'),     # (a file there)
                ('free_bytes', lambda path: 100 * GIB),
                ('mem_available', lambda: 16 * GIB),
                ('to_fetch', lambda lab: []),
                ('missing_packages', lambda packages: []),
                ('reachable', lambda url, proxy=None: None),
                ('lab_modules', lambda: (cloud, lab_run))):
            patcher = mock.patch.object(preflight, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        # (the lab's knobs of whoever runs the tests are not the machine's)
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        for knob in preflight.KNOBS:
            os.environ.pop(knob, None)

    def replace(self, name, value):
        patcher = mock.patch.object(preflight, name, value)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_a_machine_that_has_everything_passes(self):
        self.assertEqual([], preflight.problems(lab=True))
        self.assertEqual([], preflight.problems(lab=False))

    def test_the_cloud_s_packages_and_venv_only_for_tier3(self):
        # tier 3 runs unless LAB_TIER3=0: a run without it installs
        # neither, and the preflight does not announce them
        _, lab_run = preflight.lab_modules()
        lab_run.TIER2_PACKAGES = ['qemu-system-x86']
        lab_run.TIER3_PACKAGES = ['mariadb-server']
        self.replace('missing_packages', lambda packages: list(packages))
        build = pathlib.Path(self.enterContext(
            tempfile.TemporaryDirectory()))
        self.replace('BUILD', build)
        both = ['qemu-system-x86', 'mariadb-server']
        for tier3, packages in (('0', ['qemu-system-x86']), ('1', both),
                                (None, both)):
            env = {} if tier3 is None else {'LAB_TIER3': tier3}
            with mock.patch.dict(os.environ, env):
                if tier3 is None:
                    os.environ.pop('LAB_TIER3', None)
                self.assertEqual(packages, preflight.pending(lab=True)[1])
                self.assertEqual(tier3 != '0', 'build/venvs/lab-cloud' in
                                 TO_FETCH(lab=True))
                self.assertNotIn('build/venvs/lab-cloud',
                                 TO_FETCH(lab=False))

    def test_the_kernel_s_source_and_headers_are_announced(self):
        # (before, a machine that had linux-headers-amd64 but not the
        # kernel's source passed, and the lab then could not be set up)
        _, lab_run = preflight.lab_modules()
        lab_run.TIER2_PACKAGES = ['linux-headers-amd64', 'mdevctl']
        self.replace('missing_packages', lambda packages: [
            p for p in packages if p.startswith('linux-source')])
        self.assertEqual([], preflight.pending(lab=True)[1])
        lab_run.kernel_packages = lambda: ['linux-source-6.1',
                                           'linux-headers-6.1.0-56-amd64']
        self.assertEqual(['linux-source-6.1'],
                         preflight.pending(lab=True)[1])
        self.replace('reachable', lambda url, proxy=None: 'no route to host')
        self.assertIn('linux-source-6.1', ' '.join(preflight.problems()))

    def test_debian_12_s_python3_will_do(self):
        # its 3.11.2 has no tarfile extraction filters: the series checks
        # an sdist's members itself (tools/series extract())
        saved = getattr(tarfile, 'data_filter', None)
        if saved is not None:
            del tarfile.data_filter
            self.addCleanup(setattr, tarfile, 'data_filter', saved)
        with mock.patch.object(sys, 'version_info', (3, 11, 2, 'final', 0)):
            self.assertIsNone(preflight.python_problem())
        with mock.patch.object(sys, 'version_info', (3, 10, 12, 'final', 0)):
            self.assertIn('python3 %s is too old' % (
                preflight.platform.python_version()),
                preflight.python_problem())

    def test_not_debian_12_on_amd64(self):
        self.replace('os_release', lambda: {
            'ID': 'ubuntu', 'VERSION_ID': '24.04',
            'PRETTY_NAME': 'Ubuntu 24.04 LTS'})
        self.replace('machine', lambda: 'aarch64')
        (problem,) = preflight.problems(lab=True)
        self.assertIn('this is Ubuntu 24.04 LTS on aarch64, the lab needs '
                      'Debian 12 on amd64', problem)
        self.assertIn('make check-suites', problem)
        self.assertEqual([], preflight.problems(lab=False))

    def test_no_apt_get_or_no_git(self):
        # (a machine without apt-get: before, the other tests of this
        # class failed there, as they read the machine's own)
        self.replace('have_command', lambda name: name != 'apt-get')
        (problem,) = preflight.problems(lab=True)
        self.assertIn('the lab needs Debian 12 on amd64 with apt-get',
                      problem)
        self.assertEqual([], preflight.problems(lab=False))
        self.replace('have_command', lambda name: name != 'git')
        (problem,) = preflight.problems(lab=False)
        self.assertIn('no git: install it', problem)

    def test_not_root(self):
        self.replace('euid', lambda: 1000)
        (problem,) = preflight.problems(lab=True)
        self.assertIn('not root (uid 1000)', problem)
        self.assertIn('sudo make check', problem)

    def test_a_port_of_the_cloud_taken(self):
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            s.listen()
            port = s.getsockname()[1]
            self.ports.append(port)
            (problem,) = preflight.problems(lab=True)
        self.assertIn('port %d on 127.0.0.1 is taken' % port, problem)
        if os.path.exists('/proc/net/tcp'):
            # (who holds it, where /proc says: Linux)
            self.assertIn('port %d on 127.0.0.1 is taken (pid %d: ' % (
                port, os.getpid()), problem)
        self.assertIn('stop what holds it', problem)

    def test_a_python_without_venv_or_pip(self):
        self.replace('have_module', lambda name: name not in ('ensurepip',
                                                              'pip'))
        (problem,) = preflight.problems(lab=False)
        self.assertIn('python3 has no ensurepip or pip', problem)
        self.assertIn('apt-get install python3-venv python3-pip', problem)

    def test_no_network_while_something_is_to_be_fetched(self):
        self.replace('reachable', lambda url, proxy=None: 'timed out')
        self.assertEqual([], preflight.problems(lab=False))
        self.replace('to_fetch', lambda lab: ['build/venvs/nova'])
        (problem,) = preflight.problems(lab=False)
        self.assertIn('no network to PyPI', problem)
        self.assertIn('build/venvs/nova must still be fetched', problem)

    def test_no_network_to_the_archive_while_packages_are_missing(self):
        self.replace('reachable', lambda url, proxy=None: 'timed out')
        self.replace('apt_archives',
                     lambda: (['http://deb.debian.org/debian'], None))
        self.replace('missing_packages', lambda packages: ['mdevctl'])
        (problem,) = preflight.problems(lab=True)
        self.assertIn('no network to the package archive '
                      '(http://deb.debian.org/debian: timed out)', problem)

    def test_too_little_disk(self):
        self.replace('free_bytes', lambda path: 1 * GIB)
        (problem,) = preflight.problems(lab=True)
        self.assertIn('only 1.0 GiB free for build/', problem)
        self.replace('to_fetch', lambda lab: ['build/venvs/nova'])
        (problem,) = preflight.problems(lab=True)
        self.assertIn('a first run needs about %d GiB' % (
            preflight.DISK_COLD['lab'] // GIB), problem)

    def test_too_little_memory_for_the_lab(self):
        self.replace('mem_available', lambda: 2 * GIB)
        (problem,) = preflight.problems(lab=True)
        self.assertIn('only 2.0 GiB of memory available', problem)
        self.assertEqual([], preflight.problems(lab=False))

    def test_a_lab_knob_set_to_a_value_it_does_not_take(self):
        # before, LAB_TIER3=no ran tier 3, LAB_UPGRADE_DAY=yes left the
        # upgrade day out, both without a word; LAB_NOVA=33 failed every
        # check of tier 3 "no 33 venv"
        for knob, value, takes in (
                ('LAB_TIER3', 'no', '0, 1'),
                ('LAB_UPGRADE_DAY', 'yes', '0, 1'),
                ('LAB_UPGRADE_DAY', ' 1', '0, 1'),
                ('LAB_NOVA', '33', 'nova34, nova')):
            with mock.patch.dict(os.environ, {knob: value}):
                found = preflight.problems(lab=True)
                self.assertEqual(1, len(found), found)
                self.assertIn('%s=%r is not one of %s (' % (
                    knob, value, takes), found[0])
                # make check-suites runs no lab: the knobs are not its own
                self.assertEqual([], preflight.problems(lab=False))
        with mock.patch.dict(os.environ, {'LAB_UPGRADE_DAY': '1',
                                          'LAB_NOVA': 'nova'}):
            (problem,) = preflight.problems(lab=True)
            self.assertIn('LAB_UPGRADE_DAY=1 with LAB_NOVA=nova', problem)
        for env in ({'LAB_TIER3': '', 'LAB_UPGRADE_DAY': '', 'LAB_NOVA': ''},
                    {'LAB_TIER3': '0', 'LAB_UPGRADE_DAY': '0',
                     'LAB_NOVA': 'nova'},
                    {'LAB_TIER3': '1', 'LAB_UPGRADE_DAY': '1',
                     'LAB_NOVA': 'nova34'}):
            with mock.patch.dict(os.environ, env):
                self.assertEqual([], preflight.problems(lab=True))

    def test_every_problem_on_one_line(self):
        self.replace('euid', lambda: 1000)
        self.replace('free_bytes', lambda path: 1 * GIB)
        line = preflight.refusal(preflight.problems(lab=True))
        self.assertNotIn('\n', line)
        self.assertTrue(line.startswith('preflight: `make check` cannot run '
                                        'on this machine, nothing was '
                                        'installed: not root'), line)
        self.assertIn('; only 1.0 GiB free', line)


class CheckStartsWithThePreflightTest(unittest.TestCase):

    def test_nothing_is_materialized_or_installed_when_it_fails(self):
        class Untouchable:
            name = 'nova'

            def __getattr__(self, name):
                raise AssertionError('the check touched the project: %s' %
                                     name)
        out = io.StringIO()
        with mock.patch.object(preflight, 'problems',
                               lambda lab: ['not root (uid 1000): ...']), \
                contextlib.redirect_stdout(out):
            rc = testsel.check([Untouchable()], Exception, lab=True)
        self.assertEqual(2, rc)
        self.assertEqual(['preflight: `make check` cannot run on this '
                          'machine, nothing was installed: not root (uid '
                          '1000): ....'], out.getvalue().splitlines())


if __name__ == '__main__':
    unittest.main()
