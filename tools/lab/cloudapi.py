"""What tier 3 uses to act on the cloud and to read it.

Operator: the openstack client as an operator types it (every command and
its output go to build/lab/cloud/transcript.txt). API: the cloud's REST
APIs read directly, as the admin (what the checks poll). Host and probe():
what the compute host has (libvirt, QEMU, sysfs, mdevctl), read there by
tools/lab/cloud-probe.sh. The services' logs. Only the standard library at
import time: tools/lab/run.py imports tier 3's plan with the host's python.
"""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import cloud

HERE = pathlib.Path(__file__).resolve().parent
TRANSCRIPT = cloud.CLOUD / 'transcript.txt'
START = time.monotonic()


def say(msg=''):
    print(msg, flush=True)


def elapsed():
    return '[%3ds]' % (time.monotonic() - START)


class Failed(Exception):
    """A check's expectation did not hold."""


def expect(cond, why):
    if not cond:
        raise Failed(why)


# -- the operator -------------------------------------------------------------

class Operator:
    """The openstack client as an operator types it; every command and its
    output go to the transcript.

    Each command is python-openstackclient's own entry point
    (openstackclient.shell.main) with the typed arguments, run in this
    process: the same code as the `openstack` program without starting a
    Python for every command (2-4 s of CPU each, taken from the TCG guest).
    """

    def __init__(self):
        os.environ.update(OS_CLIENT_CONFIG_FILE=str(
            cloud.ETC / 'clouds.yaml'), OS_CLOUD='lab')
        from openstackclient import shell
        self.shell = shell
        self.out = open(TRANSCRIPT, 'w')

    def run(self, args):
        import contextlib
        import io
        out, err = io.StringIO(), io.StringIO()
        argv0, sys.argv[0] = sys.argv[0], 'openstack'
        try:
            with contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(err):
                try:
                    rc = self.shell.main(args)
                except SystemExit as e:
                    rc = e.code if isinstance(e.code, int) else 1
        finally:
            sys.argv[0] = argv0
        return subprocess.CompletedProcess(args, rc or 0, out.getvalue(),
                                           err.getvalue())

    def __call__(self, command, fmt='json', ok=True):
        """Run `openstack COMMAND` (a string, as typed). Returns the parsed
        JSON (fmt json), the text, or with ok=False the CompletedProcess
        (the command may fail)."""
        args = shlex.split(command)
        if fmt == 'json':
            args += ['-f', 'json']
        t = time.monotonic()
        p = self.run(args)
        shown = '$ openstack %s%s' % (command, ' -f json' if fmt == 'json'
                                      else '')
        self.out.write('%s\n%s%s' % (shown, p.stdout, p.stderr))
        self.out.write('  (exit %d, %.1fs)\n\n' % (
            p.returncode, time.monotonic() - t))
        self.out.flush()
        if not ok:
            return p
        if p.returncode:
            raise Failed('`openstack %s` failed (exit %d): %s' % (
                command, p.returncode, (p.stderr or p.stdout).strip()[-600:]))
        if fmt == 'json':
            return json.loads(p.stdout) if p.stdout.strip() else None
        return p.stdout

    def note(self, text):
        self.out.write('# %s\n\n' % text)
        self.out.flush()


# -- the APIs, read directly (cheap: polls and checks) ------------------------

class API:
    """The cloud's REST APIs as the admin, with one keystoneauth session
    (what the checks read; the operator's actions go through the openstack
    client)."""

    MICROVERSIONS = {'compute': 'latest', 'placement': '1.39',
                     'accelerator': 'latest'}

    def __init__(self):
        import openstack
        os.environ.update(OS_CLIENT_CONFIG_FILE=str(
            cloud.ETC / 'clouds.yaml'))
        self.conn = openstack.connect(cloud='lab')
        self.session = self.conn.session

    def _request(self, method, service_type, path, ok, **kwargs):
        headers = {}
        mv = self.MICROVERSIONS.get(service_type)
        if mv:
            headers['OpenStack-API-Version'] = '%s %s' % (service_type, mv)
            if service_type == 'compute':
                headers['X-OpenStack-Nova-API-Version'] = mv
        r = self.session.request(path, method, endpoint_filter={
            'service_type': service_type, 'interface': 'public'},
            headers=headers, raise_exc=False, **kwargs)
        if r.status_code not in ok:
            raise Failed('%s %s %s: %d %s' % (method, service_type, path,
                                              r.status_code, r.text[:300]))
        return r.json() if r.content else None

    def get(self, service_type, path, ok=(200,), **params):
        return self._request('GET', service_type, path, ok, params=params)

    def post(self, service_type, path, body, ok=(200,)):
        return self._request('POST', service_type, path, ok, json=body)


# -- the compute host ---------------------------------------------------------

class Host:
    """What the compute host has, read from tools/lab/cloud-probe.sh's
    output (run there)."""

    def __init__(self, text):
        self.domains = {}       # name: state (running, paused, shut_off)
        self.hostdevs = {}      # name: [mdev uuids of its XML's hostdevs]
        self.qemu = {}          # name: [mdev uuids QEMU was given]
        self.qemu_pid = {}      # name: the pid of its QEMU
        self.qemu_cpu = {}      # name: CPU seconds of its QEMU
        self.mdevs = {}         # uuid: (parent, type), from sysfs
        self.available = {}     # type: available_instances
        self.defined = {}       # uuid: mdevctl --defined fields
        self.nodedevs = {}      # name: {persistent, autostart, active}
        self.took = None        # the probe's time in the guest (seconds)
        # "== SECTION [NAME] ==" markers; virsh's echo ends no line, so a
        # marker may be followed at once by its body or the next marker
        parts = re.split(r'== (\w+)(?: (\S+))? ==', text)
        for i in range(1, len(parts), 3):
            self._read(parts[i], parts[i + 1], parts[i + 2].splitlines())

    def _read(self, section, name, body):
        lines = [b for b in body if b.strip()]
        if section == 'list':
            state = {'shutoff': 'shut_off'}.get(name, name)
            for b in lines:
                if not b.startswith('error:'):  # (virsh's, shown in full
                    self.domains[b.strip()] = state  # in probe-last.txt)
        elif section == 'domain':
            self.hostdevs[name] = re.findall(
                r"<hostdev [^>]*type='mdev'[^>]*>\s*<source>\s*"
                r"<address uuid='([0-9a-f-]+)'", '\n'.join(lines))
        elif section == 'took':
            self.took = int(lines[0]) / 1000 if lines else None
        elif section == 'nodedev':
            # ("Parent:" is empty while libvirt removes a device)
            info = (b.strip().partition(':') for b in lines)
            self.nodedevs[name] = {k.lower(): v.strip()
                                   for k, sep, v in info if sep}
        elif section == 'qemu':
            for b in lines:
                pid, utime, stime, cmd = b.split(' ', 3)
                guest = re.search(r'guest=([^, ]+)', cmd)
                if guest:
                    self.qemu_pid[guest.group(1)] = int(pid)
                    self.qemu[guest.group(1)] = re.findall(
                        r'/sys/bus/mdev/devices/([0-9a-f-]{36})', cmd)
                    self.qemu_cpu[guest.group(1)] = (
                        int(utime) + int(stime)) / os.sysconf('SC_CLK_TCK')
        elif section == 'sysfs':
            for dev, mdev_type in zip(lines[::2], lines[1::2]):
                parts = dev.rstrip('/').split('/')
                self.mdevs[parts[-1]] = (parts[-2],
                                         mdev_type.rstrip('/').split('/')[-1])
        elif section == 'available':
            for b in lines:
                t, n = b.split()
                self.available[t] = int(n)
        elif section == 'mdevctl':
            for b in lines:
                f = b.split()
                self.defined[f[0]] = f[1:]

    def nodedev(self, uuid):
        for name, info in self.nodedevs.items():
            if uuid.replace('-', '_') in name:
                return {k: info.get(k) for k in
                        ('persistent', 'autostart', 'active')}
        return None

    def summary(self):
        return 'domains %s, mdevs %s, available %s' % (
            self.domains or '{}', {u[:8]: t for u, (p, t) in
                                   self.mdevs.items()} or '{}',
            self.available)


PROBES = [0, 0.0]
LAST_QEMU_CPU = {}


def probe(guest):
    """What the compute host (a cloud.ComputeGuest) has now: a Host."""
    t = time.monotonic()
    rc, out, err = guest.sh('bash %s' % (HERE / 'cloud-probe.sh'),
                            timeout=180)
    PROBES[0] += 1
    PROBES[1] += time.monotonic() - t
    if rc:
        raise Failed('the probe failed on the compute host: %s' % err)
    (cloud.LOG / 'probe-last.txt').write_text(out)
    host = Host(out)
    if host.qemu_cpu:
        LAST_QEMU_CPU.clear()
        LAST_QEMU_CPU.update(host.qemu_cpu)
    return host


# -- the services' logs -------------------------------------------------------

def log_lines(name, pattern, n):
    """The last n warnings and errors of a service's log matching
    pattern, shortened."""
    lines = [line for line in cloud.tail(log_path(name), 400)
             if re.search(r' (ERROR|WARNING|CRITICAL) ', line) and
             re.search(pattern, line)]
    return [re.sub(r'\[(None )?req-[^\]]*\] ', '', line)[:400]
            for line in lines[-n:]]


def log_path(name):
    """A service's log: its log_file, or what it wrote to its stdout and
    stderr (services without log_file; the guest's in its shared folder)."""
    for d in (cloud.LOG, cloud.GUEST_OUT):
        for ext in ('.log', '.out'):
            if (d / (name + ext)).exists():
                return d / (name + ext)
    return cloud.LOG / (name + '.log')
