#!/usr/bin/env python3
"""Real libvirt and a real kernel mdev: the lab tiers of the test command.

    python3 tools/lab/run.py [tier1|tier2|tier3|all ...] [--counts FILE]
                             [--nice N]
    python3 tools/lab/run.py constraints   (re-make constraints/lab-cloud.txt)

tier1  the domain and node-device XML that Nova's Cyborg mdev functional
       tests give (fake) libvirt, validated against libvirt's own RelaxNG
       schemas (tools/lab/tier1.py, tools/libvirt_schemas.py).
tier2  the patched Cyborg and Nova code on a real kernel mdev (the mtty
       sample driver) with real udev, mdevctl and libvirtd, in the
       distribution's kernel booted under qemu-system-x86_64 -accel tcg
       (build-guest.sh, guest-init, guest-stage2.sh, guest_*.py,
       guests.py).
tier3  both series deployed as a cloud (MariaDB, RabbitMQ, Keystone,
       Glance, Placement, Neutron's API, Nova, Cyborg) whose compute host is
       that guest (nova-compute, cyborg-agent), and an operator's day with
       the openstack client (tier3.py, days.py, steps.py, cloudapi.py,
       cloud.py, cloud-guest.sh, cloud-probe.sh, qga.py, cloud/*.conf;
       build/venvs/lab-cloud from constraints/lab-cloud.txt).

Needs root and apt-get (Debian 12): it installs the distribution packages
it lacks, makes build/venvs/lab (the nova venv + real libvirt-python) and
builds the guest under build/lab/, reusing all of it when present. Needs
the trees and venvs of `python3 tools/series materialize/venv`.
Each tier's checks are planned before it runs (tier1.py --plan, plans.py,
tier3.py --plan): one line per planned check, "PASS name (seconds)..." or
"FAIL name (seconds): why", always; a check that could not run is a FAIL
that says why ("not run: the lab could not be set up: ..."). The last line
is the count (also written to FILE as JSON, with --counts); exits 1 on a
failure. --nice N: the lab's niceness (the test command's: -10, ahead of
verify and the suites). Tier 3's knobs (LAB_TIER3, LAB_UPGRADE_DAY,
LAB_NOVA: doc/lab.md) set to a value they do not take, or LAB_UPGRADE_DAY=1
with LAB_NOVA=nova, stop it (exit 2), as they stop the preflight.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import guests  # noqa: E402
import plans  # noqa: E402

ROOT = HERE.parent.parent
BUILD = ROOT / 'build'
LAB = BUILD / 'lab'
VENVS = BUILD / 'venvs'
NOVA_TREE = BUILD / 'nova'

TIER2_PACKAGES = [
    'qemu-system-x86', 'busybox-static', 'cpio', 'kmod', 'xz-utils', 'udev',
    'mdevctl', 'libvirt-daemon', 'libvirt-daemon-driver-qemu',
    'libvirt-clients', 'libvirt-dev', 'libxml2-utils', 'pkg-config', 'gcc',
    'make', 'linux-headers-amd64',
]
# The guest must finish within this (seconds); the host gives up a minute
# later: a guard against a hang. (About 60 s at a load of 1, 150 s at 4,
# 372 s once with other test suites running beside it, when Nova's
# imports alone took 215 s in the guest.)
WATCHDOG = 600
# tier 3: the cloud's services and the client (Nova and Cyborg run from
# their own venvs)
TIER3_PACKAGES = ['mariadb-server', 'rabbitmq-server', 'socat',
                  'qemu-guest-agent', 'qemu-utils', 'e2fsprogs']
LAB_CLOUD_REQUIREMENTS = [
    'keystone', 'glance', 'neutron', 'python-openstackclient',
    'python-cyborgclient', 'osc-placement', 'uwsgi', 'PyMySQL']
LAB_CLOUD_CONSTRAINTS = ROOT / 'constraints' / 'lab-cloud.txt'
# tier3.py (the cloud's start, the days, the teardown; not the packages,
# venvs and guest before it) is stopped after this (seconds): a guard
# against a hang, above a run on a busy machine (2400 s were not enough
# once, with two other test suites running beside it)
TIER3_TIMEOUT = 3600


# A check's line: "PASS name (1.2s): detail" or "FAIL name (0.0s): why".
LINE = re.compile(r'^(PASS|FAIL) (.*?) \([0-9.]+s\)(:.*)?$')


class Planned:
    """The planned checks of a tier (or of one script of it), each counted
    once from the PASS/FAIL lines that name it: a planned check that
    printed none is a FAIL "not run: why", one that printed a FAIL is a
    FAIL even if it also printed a PASS, and a line naming a check outside
    the plan is a FAIL too (the plan is out of date)."""

    def __init__(self, label, names):
        self.label = label
        self.names = list(names)
        self.seen = {}

    def line(self, line):
        """Print a line of the tier's output, noting a check's result."""
        line = line.rstrip()
        print('   ' + line, flush=True)
        m = LINE.match(line)
        if m:
            name = m.group(2)
            self.seen[name] = self.seen.get(name, True) and \
                m.group(1) == 'PASS'

    def count(self, tally, why):
        """Add every planned check to tally; why: why a check did not run
        (said for each check that printed no line)."""
        for name in self.names:
            ok = self.seen.get(name)
            if ok is None:
                print('   FAIL %s (0.0s): not run: %s' % (name, why),
                      flush=True)
            if ok:
                tally.passed += 1
            else:
                tally.fail('%s: %s' % (self.label, name))
        for name in self.seen:
            if name not in self.names:
                print('   FAIL %s: not in the plan of %s' % (
                    name, self.label), flush=True)
                tally.fail('%s: %s (not in its plan)' % (self.label, name))


def read_plan(script, option='--plan'):
    """The planned checks of a lab script (`script --plan`, run with this
    python: its module level is standard library only), or None. (Tier 3's
    `--left-out`: the checks of the days this run leaves out.)"""
    p = subprocess.run([sys.executable, str(script), option],
                       capture_output=True, text=True)
    if p.returncode:
        print('   %s %s failed: %s' % (script.name, option, p.stderr.strip()[
            -600:]), flush=True)
        return None
    return p.stdout.splitlines()


# How many checks tier 1's and tier 3's scripts plan (tier 3: all of its
# days, those left out too, and its teardown). A script that cannot say
# their names (it does not even load) still has that many checks in the
# total, each a FAIL: a broken script must not shrink the total.
# test_lab holds these to the scripts' plans.
PLAN_SIZES = {'tier1': 9, 'tier3': 28}


def plans_of(tier):
    """(the planned checks of tier1 or tier3, those of the days left out,
    why they cannot be read or None). A plan that cannot be read gives
    PLAN_SIZES[tier] checks standing for the real ones, none left out."""
    names = read_plan(HERE / ('%s.py' % tier))
    left_out = (read_plan(HERE / 'tier3.py', '--left-out')
                if tier == 'tier3' else [])
    if names is not None and left_out is not None:
        return names, left_out, None
    size = PLAN_SIZES[tier]
    return (['%s: planned check %d of %d' % (tier, i, size)
             for i in range(1, size + 1)], [],
            'its plan could not be read (%s.py --plan%s)' % (
                tier, ', --left-out' if tier == 'tier3' else ''))


def skip(tally, names):
    """Count checks as skipped, one SKIP line each."""
    for name in names:
        print('   SKIP %s' % name, flush=True)
    tally.skipped += len(names)


def last_line(path):
    lines = [ln for ln in tail(path) if ln.strip()]
    return lines[-1].strip()[:300] if lines else '(empty)'


def tail(path, n=20):
    try:
        return pathlib.Path(path).read_text(
            errors='replace').splitlines()[-n:]
    except OSError:
        return []


def say(msg):
    print(msg, flush=True)


def testsel():
    sys.path.insert(0, str(HERE.parent))
    import testsel
    return testsel


def knob_problems():
    """The lab's knobs set to values they do not take (preflight.KNOBS)."""
    sys.path.insert(0, str(HERE.parent))
    import preflight
    return preflight.knob_problems()


def tier1(tally):
    say('== lab tier1: Nova\'s Cyborg mdev XML against libvirt\'s schemas')
    names, _, unread = plans_of('tier1')
    plan = Planned('lab tier1', names)
    if unread:
        plan.count(tally, unread)
        return
    python = VENVS / 'nova' / 'bin' / 'python'
    if not python.exists():
        plan.count(tally, 'no nova venv (python3 tools/series materialize '
                   'nova && python3 tools/series venv nova)')
        return
    start = time.time()
    env = dict(os.environ, **testsel().tox_setenv(NOVA_TREE, 'functional'))
    env.update(VIRTUAL_ENV=str(VENVS / 'nova'), OS_STDOUT_CAPTURE='1',
               OS_STDERR_CAPTURE='1', NOVA_RAISE_ON_GREENLET_LEAK='True',
               OS_NOVA_DISABLE_EVENTLET_PATCHING='False')
    LAB.mkdir(parents=True, exist_ok=True)
    log = LAB / 'tier1.log'
    with open(log, 'w') as err:
        proc = subprocess.Popen(
            [str(python), str(HERE / 'tier1.py')], cwd=NOVA_TREE, env=env,
            stdout=subprocess.PIPE, stderr=err, text=True)
        for line in proc.stdout:
            plan.line(line)
        rc = proc.wait()
    plan.count(tally, 'tier1.py stopped before it (exit %d); %s: %s' % (
        rc, log.relative_to(ROOT), last_line(log)))
    say('   tier1 took %ds (log: %s)' % (time.time() - start,
                                         log.relative_to(ROOT)))


def missing_packages(packages):
    out = subprocess.run(
        ['dpkg-query', '-W', '-f=${Package} ${db:Status-Abbrev}\n'] +
        packages, capture_output=True, text=True).stdout
    installed = {line.split()[0] for line in out.splitlines()
                 if line.split()[1:2] == ['ii']}
    return [p for p in packages if p not in installed]


POLICY_RC_D = pathlib.Path('/usr/sbin/policy-rc.d')


def apt_install(packages):
    """Install what is missing; returns the seconds it took. The packages'
    services are not started (policy-rc.d, while apt-get runs, unless the
    host has its own): the lab runs its own MariaDB and RabbitMQ, and a
    system RabbitMQ would hold the port the lab's needs."""
    start = time.time()
    missing = missing_packages(packages)
    if missing:
        say('   apt-get install %s' % ' '.join(missing))
        env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
        ours = not POLICY_RC_D.exists()
        if ours:
            POLICY_RC_D.write_text('#!/bin/sh\n# tools/lab/run.py: no '
                                   'service starts while it installs\n'
                                   'exit 101\n')
            POLICY_RC_D.chmod(0o755)
        try:
            for cmd in (['apt-get', 'update', '-q'],
                        ['apt-get', 'install', '-y', '-q',
                         '--no-install-recommends'] + missing):
                p = subprocess.run(cmd, env=env, capture_output=True,
                                   text=True)
                if p.returncode:
                    raise RuntimeError('%s failed:\n%s' % (
                        ' '.join(cmd[:3]), (p.stdout + p.stderr)[-1500:]))
        finally:
            if ours:
                POLICY_RC_D.unlink()
    return time.time() - start


def kernel_version():
    deps = subprocess.run(
        ['dpkg-query', '-W', '-f=${Depends}', 'linux-headers-amd64'],
        capture_output=True, text=True).stdout
    m = re.search(r'linux-headers-([0-9][^ ,]*-amd64)', deps)
    if not m:
        raise RuntimeError('cannot tell the kernel version from '
                           'linux-headers-amd64 (%r)' % deps)
    return m.group(1)


def kernel_packages():
    """The source and headers of the kernel linux-headers-amd64 names (the
    guest's kernel, and its modules' build)."""
    kver = kernel_version()
    return ['linux-source-' + kver.split('.0-')[0], 'linux-headers-' + kver]


def lab_venv(line='nova'):
    """build/venvs/lab (lab-nova34 for line nova34): the Nova venv's
    packages + real libvirt-python.

    Real libvirt-python must not go into the Nova venv (its unit tests use
    fakelibvirt), so it gets a venv of its own whose .pth adds the Nova
    venv's site-packages after its own.
    """
    venv = VENVS / ('lab' if line == 'nova' else 'lab-' + line)
    python = venv / 'bin' / 'python'
    ok = subprocess.run([str(python), '-c', 'import libvirt, nova'],
                        cwd='/', capture_output=True) if python.exists() \
        else None
    if ok is not None and ok.returncode == 0:
        return 0.0
    start = time.time()
    nova_python = VENVS / line / 'bin' / 'python'
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(nova_python), '-m', 'venv', str(venv)], check=True)
    site = subprocess.run(
        [str(python), '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["purelib"])'],
        capture_output=True, text=True, check=True).stdout.strip()
    nova_site = subprocess.run(
        [str(nova_python), '-c', 'import sysconfig; '
         'print(sysconfig.get_paths()["purelib"])'],
        capture_output=True, text=True, check=True).stdout.strip()
    pathlib.Path(site, 'zz_lab_nova_venv.pth').write_text(
        'import site; site.addsitedir(%r)\n' % nova_site)
    version = subprocess.run(['pkg-config', '--modversion', 'libvirt'],
                             capture_output=True, text=True,
                             check=True).stdout.strip()
    # an sdist: built against the distribution's libvirt (libvirt-dev)
    subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q',
                    'libvirt-python==%s' % version], check=True)
    return time.time() - start


# What the guest scripts import, compiled here once: the venvs hold no
# bytecode, and compiling Nova's imports in the TCG guest takes minutes.
# The bytecode goes to build/lab/pycache (PYTHONPYCACHEPREFIX), never into
# the trees or venvs, and the guest reads it from there.
WARM = {
    'lab': 'import libvirt, lxml.etree, nova.monkey_patch, nova.conf, '
           'nova.objects, nova.virt.fake, nova.virt.libvirt.driver',
    'cyborg': 'import cyborg.conf, cyborg.accelerator.drivers.mdev.driver',
}


def warm_bytecode():
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(LAB / 'pycache'),
               OS_NOVA_DISABLE_EVENTLET_PATCHING='true')
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    for venv, code in WARM.items():
        subprocess.run([str(VENVS / venv / 'bin' / 'python'), '-c', code],
                       cwd='/', env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# tier 2's checks made on the host, besides the guest scripts' own
RAN = 'tier2: %s ran to its end'
FINISHED = 'tier2: the guest finished before its watchdog'


def guest_command(guest, out):
    """QEMU running tier 2's guest, which writes its results to `out`."""
    return guests.qemu_command(
        guest, 3072, HERE / 'guest-stage2.sh', watchdog=WATCHDOG) + [
            '-virtfs', 'local,path=%s,mount_tag=out,security_model=none' %
            out]


def tier2(tally):
    say('== lab tier2: Cyborg and Nova on a real kernel mdev (mtty) with '
        'real libvirt, in a TCG guest')
    start = time.time()
    scripts = {script: Planned('lab tier2', names.values())
               for script, names in plans.TIER2.items()}
    host = Planned('lab tier2', [RAN % s for s in plans.TIER2] + [FINISHED])

    def not_run(why):
        for plan in list(scripts.values()) + [host]:
            plan.count(tally, why)
    for venv in ('nova', 'cyborg'):
        if not (VENVS / venv / 'bin' / 'python').exists():
            not_run('no %s venv (python3 tools/series materialize %s && '
                    'python3 tools/series venv %s)' % (venv, venv, venv))
            return
    try:
        t_apt = apt_install(TIER2_PACKAGES)
        t_apt += apt_install(kernel_packages())
        t_venv = lab_venv()
        t = time.time()
        subprocess.run(['bash', str(HERE / 'build-guest.sh'),
                        str(LAB / 'guest')], check=True)
        t_build = time.time() - t
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        say('   the lab could not be set up: %s' % e)
        not_run('the lab could not be set up: %s' % str(e).splitlines()[0])
        return
    say('   set up: apt %.0fs, lab venv %.0fs, guest build %.0fs' % (
        t_apt, t_venv, t_build))

    t = time.time()
    warm_bytecode()
    t_warm = time.time() - t

    out = LAB / 'out'
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = guest_command(LAB / 'guest', out)
    t = time.time()
    with open(LAB / 'console.log', 'w') as console:
        try:
            subprocess.run(cmd, stdout=console, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=WATCHDOG + 60)
        except subprocess.TimeoutExpired:
            say('   the guest was killed after %ds' % (WATCHDOG + 60))
    t_guest = time.time() - t

    count_guest(out, t_guest, scripts, host, tally)
    say('   tier2 took %ds: apt %.0fs, lab venv %.0fs, guest build %.0fs, '
        'bytecode %.0fs, guest run %.0fs (logs: %s)' % (
            time.time() - start, t_apt, t_venv, t_build, t_warm, t_guest,
            out.relative_to(ROOT)))


def count_guest(out, t_guest, scripts, host, tally):
    """Count what the tier-2 guest wrote to `out`: each script's planned
    checks, whether it ran to its end, whether the guest finished."""
    for line in tail(out / 'report.txt', 200):
        say('   ' + line)
    for script, plan in scripts.items():
        name = script.split('_')[1][:-3]        # cyborg, nova
        exit_code, ended = None, False
        for line in tail(out / ('%s.txt' % name), 10000):
            m = re.match(r'^EXIT (\S+) (\d+)$', line)
            if m:
                exit_code = int(m.group(2))
            elif line == 'END %s' % script:
                ended = True
            else:
                plan.line(line)
        log = out / ('%s.log' % name)
        # (exit 1: a check failed; anything else, or no END line: it
        # stopped before its end)
        ran = ended and exit_code in (0, 1)
        host.line('%s %s (0.0s): exit %s%s' % (
            'PASS' if ran else 'FAIL', RAN % script, exit_code,
            '' if ran else ', %s; %s: %s' % (
                'no END line' if not ended else 'an error',
                log.name, last_line(log))))
        if not ran:
            say('   its log (%s):' % log)
            say(''.join('      ' + x + '\n' for x in tail(log, 15)))
        plan.count(tally, 'the guest did not run %s' % script
                   if exit_code is None else
                   '%s stopped before it (exit %s); %s: %s' % (
                       script, exit_code, log.name, last_line(log)))
    finished = (out / 'finished').exists()
    console = out.parent / 'console.log'
    host.line('%s %s (%ds)%s' % (
        'PASS' if finished else 'FAIL', FINISHED, t_guest,
        '' if finished else ': console.log: %s' % last_line(console)))
    host.count(tally, 'the guest did not run')


def series_tool():
    """tools/series as a module (its uv)."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader(
        'lab_series', str(ROOT / 'tools' / 'series'))
    spec = importlib.util.spec_from_loader('lab_series', loader)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / 'tools'))
    loader.exec_module(module)
    return module


def nova_released():
    import configparser
    bases = configparser.ConfigParser()
    bases.read(ROOT / 'bases.ini')
    return bases['nova']['released']


def make_lab_cloud_constraints():
    """constraints/lab-cloud.txt: the cloud's services and client resolved
    with uv at the date Nova's base was released (bases.ini), as tools/series
    resolves the bases' own constraints."""
    uv = series_tool().find_uv()
    released = nova_released()
    res = subprocess.run(
        [str(uv), 'pip', 'compile', '--quiet', '--no-header',
         '--no-annotate', '--python-version', '3.11', '--exclude-newer',
         '%sT00:00:00Z' % released, '-'],
        input='\n'.join(LAB_CLOUD_REQUIREMENTS) + '\n', text=True,
        capture_output=True, check=True)
    LAB_CLOUD_CONSTRAINTS.write_text(
        '# Constraints for build/venvs/lab-cloud (the lab\'s tier 3), made '
        'by\n# `python3 tools/lab/run.py constraints`: uv pip compile '
        '--exclude-newer %s\n# (bases.ini\'s [nova] released, the 2026.1 '
        'release Nova 33 belongs to;\n# Python 3.11) of: %s\n' % (
            released, ' '.join(LAB_CLOUD_REQUIREMENTS)) + res.stdout)
    say('wrote %s' % LAB_CLOUD_CONSTRAINTS.relative_to(ROOT))


def lab_cloud_venv():
    """build/venvs/lab-cloud: Keystone, Glance, Neutron, uWSGI and the
    openstack client with its Cyborg and Placement plugins, from
    constraints/lab-cloud.txt; reused while that file is unchanged."""
    import hashlib
    venv = VENVS / 'lab-cloud'
    python = venv / 'bin' / 'python'
    stamp = hashlib.sha256(LAB_CLOUD_CONSTRAINTS.read_bytes() + ' '.join(
        LAB_CLOUD_REQUIREMENTS).encode()).hexdigest()
    stamp_file = venv / '.lab-stamp'
    if python.exists() and stamp_file.exists() and \
            stamp_file.read_text() == stamp:
        return 0.0
    start = time.time()
    uv = str(series_tool().find_uv())
    say('   making build/venvs/lab-cloud (%s)' %
        LAB_CLOUD_CONSTRAINTS.relative_to(ROOT))
    subprocess.run([uv, 'venv', '--quiet', '--clear', '--python', '3.11',
                    str(venv)], check=True)
    subprocess.run([uv, 'pip', 'install', '--quiet', '--python', str(python),
                    '-c', str(LAB_CLOUD_CONSTRAINTS)] +
                   LAB_CLOUD_REQUIREMENTS, check=True)
    stamp_file.write_text(stamp)
    return time.time() - start


def tier3(tally):
    names, left_out, unread = plans_of('tier3')
    plan = Planned('lab tier3', names)
    if unread:                  # (its scripts would not even load)
        say('== lab tier3: a cloud on a real mdev: %s' % unread)
        plan.count(tally, unread)
        return
    import days
    import tier3 as tier3_script
    say('== lab tier3: both series as a cloud on a real mdev in a TCG guest: '
        '%s, with the openstack client' % ', '.join(
            day.TITLE for day in days.DAYS))
    if left_out:
        say('   left out (LAB_UPGRADE_DAY=1 runs it on the primary line): '
            '%s, its %d checks skipped' % (
                ', '.join(day.TITLE for day in days.LEFT_OUT),
                len(left_out)))
        skip(tally, left_out)
    start = time.time()
    lines = tier3_script.lines()
    for venv in lines + ['cyborg']:
        if not (VENVS / venv / 'bin' / 'python').exists():
            plan.count(tally, 'no %s venv (python3 tools/series materialize '
                       '%s && python3 tools/series venv %s)' % (
                           venv, venv, venv))
            return
    try:
        t_apt = apt_install(TIER2_PACKAGES + TIER3_PACKAGES)
        t_apt += apt_install(kernel_packages())
        t_venv = sum(lab_venv(line) for line in lines) + lab_cloud_venv()
        t = time.time()
        subprocess.run(['bash', str(HERE / 'build-guest.sh'),
                        str(LAB / 'guest')], check=True)
        t_build = time.time() - t
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        say('   the lab could not be set up: %s' % e)
        plan.count(tally, 'the lab could not be set up: %s' %
                   str(e).splitlines()[0])
        return
    say('   set up: apt %.0fs, venvs %.0fs, guest build %.0fs' % (
        t_apt, t_venv, t_build))
    t = time.time()
    proc = subprocess.Popen(
        [str(VENVS / 'lab-cloud' / 'bin' / 'python'),
         str(HERE / 'tier3.py')], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    # tier3.py stops the cloud on SIGTERM (its checks fail "interrupted"):
    # sent when the days take too long, or on Ctrl-C (which it gets too)
    watchdog = threading.Timer(TIER3_TIMEOUT, proc.terminate)
    watchdog.start()
    try:
        for line in proc.stdout:
            plan.line(line)
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        killer = threading.Timer(120, proc.kill)
        killer.start()
        for line in proc.stdout:        # what its teardown says
            plan.line(line)
        proc.wait()
        killer.cancel()
        plan.count(tally, 'interrupted')
        raise
    finally:
        watchdog.cancel()
    plan.count(tally, 'tier3.py stopped before it (exit %d)' % rc)
    say('   tier3 took %ds: apt %.0fs, venvs %.0fs, guest build %.0fs, the '
        'cloud and the days %.0fs (logs: build/lab/cloud/log, '
        'build/lab/cloud/guest; transcript: build/lab/cloud/transcript.txt)'
        % (time.time() - start, t_apt, t_venv, t_build, time.time() - t))


TIERS = {'tier1': tier1, 'tier2': tier2, 'tier3': tier3}


def skip_tier3(tally):
    """Tier 3 left out (LAB_TIER3=0): each of its checks is counted as
    skipped, so that every run's total holds the same checks."""
    names, left_out, unread = plans_of('tier3')
    if unread:
        say('== lab tier3: left out (LAB_TIER3=0), but %s' % unread)
        Planned('lab tier3', names).count(tally, unread)
        return
    say('== lab tier3: left out (LAB_TIER3=0): its %d checks are skipped' %
        len(names + left_out))
    skip(tally, names + left_out)


def run(tiers=('tier1', 'tier2', 'tier3')):
    """Run the tiers; return their tools/testsel.py Tally."""
    tally = testsel().Tally()
    for tier in tiers:
        TIERS[tier](tally)
    return tally


def planned(tiers):
    """The planned checks of the tiers, without running them: the names
    their PASS and FAIL lines give (for a plan that cannot be read, as
    many standing for them: plans_of())."""
    names = []
    for tier in tiers:
        if tier == 'tier2':
            names += [n for script in plans.TIER2.values()
                      for n in script.values()]
            names += [RAN % s for s in plans.TIER2] + [FINISHED]
        else:
            names += plans_of(tier)[0]
    return names


def left_out(tiers):
    """The checks of the tiers this run leaves out (tier 3's days not
    asked for), counted as skipped (none when they cannot be read: then
    planned() has them all)."""
    return plans_of('tier3')[1] if 'tier3' in tiers else []


def write_counts(tally, path):
    """The tally as JSON, for the test command (tools/testsel.py Lab)."""
    pathlib.Path(path).write_text(json.dumps({
        'passed': tally.passed, 'failed': tally.failed,
        'skipped': tally.skipped, 'xfail': tally.xfail,
        'failures': tally.failures}))


def option(args, name):
    """The value of `name VALUE` in args (taken out of them), or None."""
    if name not in args[:-1]:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i:i + 2]
    return value


def set_niceness(nice):
    """The lab's niceness, before it starts anything (its guests and its
    cloud inherit it): a higher priority needs root, as the lab does; a
    process that may not raise it keeps its own."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass


def main(argv):
    args = list(argv[1:])
    counts = option(args, '--counts')
    nice = option(args, '--nice')
    if nice is not None:
        if not re.fullmatch(r'-?[0-9]+', nice) or \
                not -20 <= int(nice) <= 19:
            say('--nice takes a niceness, an integer from -20 to 19, not %r'
                % nice)
            return 2
        set_niceness(int(nice))
    if args == ['constraints']:
        make_lab_cloud_constraints()
        return 0
    which = args or ['all']
    if which == ['all']:
        which = list(TIERS)
    if not all(tier in TIERS for tier in which):
        say(__doc__)
        return 2
    found = knob_problems() if 'tier3' in which else []
    if found:       # (the knobs are tier 3's)
        say('run.py: %s' % '; '.join(found))
        return 2
    try:
        tally = run(tuple(which))
    except KeyboardInterrupt:
        say('interrupted (what the tier started is stopped)')
        return 130
    if counts:
        write_counts(tally, counts)
    if tally.failures:
        say('failures:')
        for f in tally.failures:
            say('   ' + f)
    say(tally.line())
    return 1 if tally.failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
