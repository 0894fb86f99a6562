#!/usr/bin/env python3
"""Can this machine run the test command? Asked before anything is installed.

    python3 tools/preflight.py            what `make check` needs
    python3 tools/preflight.py --suites   what `make check-suites` needs

`make check` runs the lab: it installs Debian 12's packages (MariaDB,
RabbitMQ, libvirt, QEMU, the kernel's headers and source), boots Debian's
kernel under QEMU and starts a cloud on 127.0.0.1, so it needs Debian 12
on amd64, root, its loopback ports free and memory for a 3 GiB guest.
`make check-suites` (verify, the Nova and Cyborg suites, the tooling's
tests) needs none of that. Both need git, a python3 3.11 (Debian 12's) with
venv and pip, disk space, and network access to PyPI (and, for the lab,
to the distribution's archive) while something is still to be fetched.

Prints one line: "preflight: ok: ..." (exit 0), or what is missing and
what to do (exit 2). Standard library only: tools/testsel.py runs it first.
"""

import configparser
import importlib.util
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

TOOLS = pathlib.Path(__file__).resolve().parent
TOP = TOOLS.parent
BUILD = TOP / 'build'
GIB = 1 << 30
# Free space that a first run needs on the filesystem of build/, and what
# a run needs once everything is there. A first run took about 5 GiB: the
# trees and venvs 0.8, uv's cache 0.6, the lab 1.1 (build/lab), the
# packages 2.5 (apt's cache of them included), on one filesystem.
DISK_COLD = {'lab': 8 * GIB, 'suites': 4 * GIB}
DISK_WARM = 2 * GIB
# The lab's compute guest has 3 GiB; the cloud's services beside it.
MEMORY = 5 * GIB
PYPI = os.environ.get('UV_INDEX_URL') or os.environ.get(
    'PIP_INDEX_URL') or 'https://pypi.org/simple/'
SCHEMAS = pathlib.Path('/usr/share/libvirt/schemas/domain.rng')


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lab_modules():
    """tools/lab/cloud.py (its ports) and run.py (its packages)."""
    sys.path.insert(0, str(TOOLS / 'lab'))
    return (_load('preflight_cloud', TOOLS / 'lab' / 'cloud.py'),
            _load('preflight_lab_run', TOOLS / 'lab' / 'run.py'))


# -- facts about the machine (each one small, replaceable in tests) --------

def os_release(path='/etc/os-release'):
    info = {}
    try:
        for line in pathlib.Path(path).read_text().splitlines():
            if '=' in line:
                key, value = line.split('=', 1)
                info[key] = value.strip().strip('"')
    except OSError:
        pass
    return info


def machine():
    return platform.machine()


def euid():
    return os.geteuid()


def have_module(name):
    return importlib.util.find_spec(name) is not None


def have_command(name):
    return shutil.which(name) is not None


def python_problem():
    if sys.version_info < (3, 11):
        return ('python3 %s is too old: the tooling and its venvs need '
                'Python 3.11 (Debian 12\'s python3)' %
                platform.python_version())
    missing = [m for m in ('venv', 'ensurepip', 'pip')
               if not have_module(m)]
    if missing:
        return ('python3 has no %s (it makes build/venvs/tools for uv and '
                'fetches the sdists with pip): install them, e.g. apt-get '
                'install python3-venv python3-pip' % ' or '.join(missing))
    return None


def free_bytes(path):
    while not path.exists():
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def mem_available(path='/proc/meminfo'):
    try:
        text = pathlib.Path(path).read_text()
    except OSError:
        return None
    m = re.search(r'^MemAvailable:\s+(\d+) kB', text, re.M)
    return int(m.group(1)) * 1024 if m else None


def listeners(port):
    """{pid: command line} of the processes listening on TCP port."""
    inodes = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            rows = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == '0A' and \
                    int(f[1].rsplit(':', 1)[1], 16) == port:
                inodes.add('socket:[%s]' % f[9])
    found = {}
    if not inodes:
        return found
    for proc in pathlib.Path('/proc').iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / 'fd').iterdir():
                if os.readlink(fd) in inodes:
                    cmd = (proc / 'cmdline').read_bytes().replace(
                        b'\0', b' ').decode(errors='replace').strip()
                    found[int(proc.name)] = cmd[:80]
                    break
        except OSError:
            continue
    return found


def reachable(url, proxy=None, timeout=15):
    """None if url answers (any HTTP status below 500), else why not."""
    handlers = [urllib.request.ProxyHandler(
        {'http': proxy, 'https': proxy})] if proxy else []
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(urllib.request.Request(url, method='HEAD'),
                         timeout=timeout):
            return None
    except urllib.error.HTTPError as e:
        return None if e.code < 500 else 'HTTP %d' % e.code
    except (OSError, ValueError) as e:
        return str(getattr(e, 'reason', e))


def apt_archives():
    """The http(s) URIs of apt's sources, and apt's http proxy if set."""
    uris = []
    files = [pathlib.Path('/etc/apt/sources.list')] + sorted(
        pathlib.Path('/etc/apt/sources.list.d').glob('*'))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        if f.suffix == '.list' or f.name == 'sources.list':
            found = re.findall(r'^deb\s+(?:\[[^]]*\]\s+)?(\S+)', text, re.M)
        elif f.suffix == '.sources':
            found = sum((line.split()[1:] for line in text.splitlines()
                         if line.startswith('URIs:')), [])
        else:
            continue
        uris += [u for u in found if u.startswith(('http:', 'https:'))
                 and u not in uris]
    proxy = None
    if shutil.which('apt-config'):
        out = subprocess.run(['apt-config', 'shell', 'P',
                              'Acquire::http::Proxy'],
                             capture_output=True, text=True).stdout
        m = re.search(r"P='([^']+)'", out)
        proxy = m.group(1) if m else None
    return uris, proxy


def missing_packages(packages):
    if not shutil.which('dpkg-query'):
        return list(packages)
    out = subprocess.run(
        ['dpkg-query', '-W', '-f=${Package} ${db:Status-Abbrev}\n'] +
        list(packages), capture_output=True, text=True).stdout
    installed = {line.split()[0] for line in out.splitlines()
                 if line.split()[1:2] == ['ii']}
    return [p for p in packages if p not in installed]


def tier3_on():
    """Whether the lab runs its tier 3, a real cloud (unless LAB_TIER3=0),
    which alone needs the cloud's packages and build/venvs/lab-cloud. It
    runs the operator's day on the primary line (15 minutes beside the
    suites); LAB_UPGRADE_DAY=1 adds the upgrade day (7 more), which the
    test command cannot hold within its time: see doc/test-command.md."""
    return os.environ.get('LAB_TIER3') != '0'


# The lab's knobs: each value it takes, and what it does (unset or empty:
# the default).
KNOBS = {
    'LAB_TIER3': {'0': 'leave tier 3 out', '1': 'run it (the default)'},
    'LAB_UPGRADE_DAY': {'0': 'leave it out (the default)',
                        '1': 'run the upgrade day first'},
    'LAB_NOVA': {'nova34': 'the operator\'s day on the primary line (the '
                           'default)',
                 'nova': 'on the 33 line'},
}


def knob_problems():
    """A lab knob set to a value it does not take would silently mean its
    default (LAB_TIER3=no would run tier 3): name it instead."""
    found = []
    for knob, meanings in KNOBS.items():
        value = os.environ.get(knob, '')
        if value and value not in meanings:
            found.append('%s=%r is not one of %s (%s): set it to one of them '
                         'or unset it' % (
                             knob, value, ', '.join(meanings), '; '.join(
                                 '%s: %s' % kv for kv in meanings.items())))
    if os.environ.get('LAB_UPGRADE_DAY') == '1' and \
            os.environ.get('LAB_NOVA') == 'nova':
        found.append('LAB_UPGRADE_DAY=1 with LAB_NOVA=nova: the upgrade day '
                     'takes the 33 line to the primary line, and runs only '
                     'when the operator\'s day is on it: unset one of them')
    return found


def to_fetch(lab):
    """What the next run fetches from PyPI (sdists, venvs) that build/
    does not hold yet."""
    bases = configparser.ConfigParser()
    bases.read(TOP / 'bases.ini')
    venvs = list(bases.sections()) + ['tools'] + (
        ['lab-cloud'] if lab and tier3_on() else [])
    missing = ['build/venvs/%s' % name for name in venvs
               if not (BUILD / 'venvs' / name / 'bin' / 'python').exists()]
    cached = {p.name.lower() for p in (BUILD / 'cache').glob('*.tar.gz')}
    for name in bases.sections():
        sec = bases[name]
        stems = {'%s-%s.tar.gz' % (d, sec['version']) for d in (
            sec['dist'].lower(), sec['dist'].replace('-', '_').lower())}
        if not stems & cached:
            missing.append('the %s sdist' % sec['dist'])
    return missing


def pending(lab):
    """(what is still to fetch from PyPI, the packages still to install).
    The kernel's source and headers are known once linux-headers-amd64 is
    installed (before, they are installed after it, from the same
    archive)."""
    fetch = to_fetch(lab)
    packages = []
    if lab:
        _, lab_run = lab_modules()
        names = lab_run.TIER2_PACKAGES + (
            lab_run.TIER3_PACKAGES if tier3_on() else [])
        try:
            names = names + lab_run.kernel_packages()
        except RuntimeError:
            pass            # linux-headers-amd64 is not installed yet
        packages = missing_packages(names)
    return fetch, packages


# -- the questions ---------------------------------------------------------

def problems(lab=True):
    """What this machine lacks for `make check` (lab) or `make
    check-suites`: a list of "what is missing: what to do" strings."""
    found = []
    alternative = ', or run `make check-suites` (no lab) here'
    if lab:
        rel = os_release()
        if rel.get('ID') != 'debian' or rel.get('VERSION_ID') != '12' or \
                machine() not in ('x86_64', 'amd64') or \
                not have_command('apt-get'):
            found.append(
                'this is %s on %s, the lab needs Debian 12 on amd64 with '
                'apt-get (it installs Debian 12\'s packages and boots its '
                'kernel): use such a machine%s' % (
                    rel.get('PRETTY_NAME', 'an unknown system'), machine(),
                    alternative))
        if euid() != 0:
            found.append('not root (uid %d): the lab installs packages and '
                         'runs libvirt, QEMU, MariaDB as root: run it as root '
                         '(sudo make check)%s' % (euid(), alternative))
    if not have_command('git'):
        found.append('no git: install it (apt-get install git)')
    bad_python = python_problem()
    if bad_python:
        found.append(bad_python)
    if lab:
        found.extend(knob_problems())
        cloud, lab_run = lab_modules()
        ours = cloud.cloud_processes()
        for port in cloud.all_ports():
            if cloud.port_free(port):
                continue
            holders = listeners(port)
            if holders and set(holders) <= set(ours):
                continue        # an earlier lab run's: tier 3 stops them
            found.append(
                'port %d on 127.0.0.1 is taken%s: the lab\'s cloud listens '
                'there; stop what holds it' % (port, ' (%s)' % ', '.join(
                    'pid %d: %s' % kv for kv in sorted(holders.items()))
                    if holders else ''))
        avail = mem_available()
        if avail is not None and avail < MEMORY:
            found.append('only %.1f GiB of memory available: the lab needs '
                         '%d GiB (a 3 GiB compute guest and the cloud\'s '
                         'services); free some%s' % (
                             avail / GIB, MEMORY // GIB, alternative))
    fetch, packages = pending(lab)
    installable = euid() == 0 and have_command('apt-get')
    if not lab and not SCHEMAS.exists() and not installable:
        found.append('libvirt\'s RelaxNG schemas are missing (%s; the '
                     'demo\'s test validates Nova\'s XML with them): install '
                     'your distribution\'s libvirt daemon package (Debian: '
                     'libvirt-daemon), or run this as root on Debian' %
                     SCHEMAS)
    need = (DISK_COLD['lab' if lab else 'suites'] if fetch or packages
            else DISK_WARM)
    free = free_bytes(BUILD)
    if free < need:
        found.append('only %.1f GiB free for build/ (on %s): %s needs about '
                     '%d GiB; free some space' % (
                         free / GIB, BUILD.parent, 'a first run'
                         if need > DISK_WARM else 'a run', need // GIB))
    if fetch:
        why = reachable(PYPI)
        if why:
            found.append('no network to PyPI (%s: %s), and %s must still be '
                         'fetched: check the network or the proxy '
                         '(https_proxy)' % (PYPI, why, ', '.join(fetch[:3])))
    if packages:
        uris, proxy = apt_archives()
        for uri in uris[:1]:
            why = reachable(uri, proxy=proxy)
            if why:
                found.append('no network to the package archive (%s: %s), '
                             'and %d packages must still be installed (%s): '
                             'check the network or apt\'s proxy' % (
                                 uri, why, len(packages),
                                 ' '.join(packages[:4])))
    return found


def refusal(found, lab=True):
    return ('preflight: `make %s` cannot run on this machine, nothing was '
            'installed: %s.' % ('check' if lab else 'check-suites',
                                '; '.join(found)))


def summary(lab=True):
    rel = os_release()
    parts = ['%s on %s' % (rel.get('PRETTY_NAME', platform.system()),
                           machine()),
             'python3 %s with venv and pip' % platform.python_version(),
             '%.0f GiB free for build/' % (free_bytes(BUILD) / GIB)]
    if lab:
        cloud, _ = lab_modules()
        parts[1:1] = ['root', 'ports %s free' % ' '.join(
            str(p) for p in cloud.all_ports())]
    fetch, packages = pending(lab)
    if fetch:
        parts.append('to fetch: %s' % ', '.join(fetch))
    if packages:
        parts.append('%d packages to install (%s, ...)' % (
            len(packages), ', '.join(packages[:3])))
    return 'preflight: ok: %s' % '; '.join(parts)


def main(argv):
    lab = '--suites' not in argv[1:]
    found = problems(lab=lab)
    if found:
        print(refusal(found, lab=lab))
        return 2
    print(summary(lab=lab))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
