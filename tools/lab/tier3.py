"""Tier 3: both series deployed as a cloud, an operator's day on a real mdev.

Run by tools/lab/run.py (tier3) with build/venvs/lab-cloud's python, after
it installed the packages and built the venvs and the guest. It starts the
cloud (cloud.py: MariaDB, RabbitMQ, Keystone, Glance, Placement, Neutron's
API, Nova and Cyborg on this host; nova-compute and cyborg-agent in the
lab's TCG guest), runs the days (days.py, made of steps.py's steps: what
an operator does with the openstack client, and what each step left in the
APIs, in libvirt, QEMU, mdevctl and sysfs on the compute host), then stops
everything, on failure and on interrupt too. One line per planned check
(plan()), "PASS name (seconds): detail" or "FAIL name (seconds): why",
then the relevant log lines of a failure. The operator's commands and
their output go to build/lab/cloud/transcript.txt.

    tier3.py          the cloud and its days
    tier3.py --plan   the names of the planned checks, one a line
    tier3.py --left-out   those of the days left out (LAB_UPGRADE_DAY)
"""

import collections
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cloud  # noqa: E402
import cloudapi  # noqa: E402
from cloudapi import API, elapsed, Operator, say  # noqa: E402
import days  # noqa: E402
import steps  # noqa: E402

TEARDOWN = 'teardown: no process of the cloud left, no port held'
# the guest's cyborg-agent waits on this fifo (see cloud-guest.sh)
START_CYBORG_AGENT = '(echo go > /run/lab/cyborg-agent-go) >/dev/null 2>&1 &'


def plan():
    """Every check tier 3 reports, in order (tools/lab/run.py counts them
    even if this script never runs)."""
    return [name for day in days.DAYS for name in day.plan()] + [TEARDOWN]


def left_out():
    """The checks of the days this run leaves out (days.LEFT_OUT), which
    tools/lab/run.py counts as skipped."""
    return [name for day in days.LEFT_OUT for name in day.plan()]


class Lab:
    """The cloud, its compute host, and the operator's ways in."""

    def __init__(self):
        self.cloud = cloud.Cloud(say)
        self.guest = cloud.ComputeGuest(say)
        self.op = None
        self.api = None


# -- set-up ------------------------------------------------------------------

GUEST_IMPORTS = {
    # what the guest's services import, compiled here first (see
    # cloud-guest.sh: the guest shares build/lab/pycache)
    'lab': 'import libvirt, nova.cmd.compute, nova.compute.manager, '
           'nova.virt.libvirt.driver, nova.virt.libvirt.imagebackend, '
           'nova.image.glance, nova.network.neutron, '
           'nova.accelerator.cyborg, nova.scheduler.client.report, '
           'oslo_messaging._drivers.impl_rabbit, kombu.transport.pyamqp',
    'nova': 'import oslo_privsep.daemon, nova.privsep.libvirt, '
            'nova.privsep.path, nova.privsep.fs, nova.privsep.qemu',
    'cyborg': 'import cyborg.cmd.agent, cyborg.agent.manager, '
              'cyborg.agent.resource_tracker, '
              'cyborg.accelerator.drivers.mdev.driver, '
              'oslo_messaging._drivers.impl_rabbit, kombu.transport.pyamqp',
}
# ... and the packages they load at run time (os-vif's plugins, which
# import pyroute2 whole; oslo.cache's backends; every Cyborg driver, which
# cyborg-agent loads to find the enabled ones): compiled whole (about 35 s
# of compiling in the guest otherwise), those a line's venv has (nova
# 34.0.0's has no pyroute2 and no vif_plug_linux_bridge)
GUEST_PACKAGES = {
    'lab': ['pyroute2', 'os_vif', 'vif_plug_noop', 'vif_plug_ovs',
            'vif_plug_linux_bridge', 'oslo_cache', 'nova.compute.monitors'],
    'nova': [],
    'cyborg': ['cyborg.accelerator'],
}
COMPILE = ('; import compileall, importlib, importlib.util, os\n'
           'for name in %r:\n'
           '    try:\n'
           '        if importlib.util.find_spec(name) is None:\n'
           '            continue\n'
           '    except ImportError:     # (its parent package is missing)\n'
           '        continue\n'
           '    compileall.compile_dir(os.path.dirname(\n'
           '        importlib.import_module(name).__file__), quiet=1)\n')


def lines():
    """The Nova lines the days run, in order (an upgrade day's two)."""
    found = []
    for day in days.DAYS:
        for line in (day.NOVA, getattr(day, 'UPGRADE', None)):
            if line and line not in found:
                found.append(line)
    return found


def warm_bytecode():
    todo = []
    for line in lines():
        nova_venv, compute_venv = cloud.line_venvs(line)
        todo += [('lab', compute_venv), ('nova', nova_venv)]
    for name, venv in todo + [('cyborg', cloud.CYBORG_VENV)]:
        code = GUEST_IMPORTS[name]
        env = cloud.service_env(venv)
        env['OS_NOVA_DISABLE_EVENTLET_PATCHING'] = 'true'
        packages = GUEST_PACKAGES[name]
        if packages:
            code += COMPILE % (packages,)
        p = subprocess.run([str(venv / 'bin' / 'python'), '-c',
                            code], cwd='/', env=env, capture_output=True,
                           text=True)
        if p.returncode:
            say('   bytecode for the guest (%s venv): %s' % (
                venv, p.stderr.strip().splitlines()[-1:]))


def start(lab):
    """The cloud up, its compute host up, the operator's things made."""
    import shutil
    shutil.rmtree(cloud.GUEST_OUT, ignore_errors=True)
    shutil.rmtree(cloud.LOG, ignore_errors=True)
    shutil.rmtree(cloud.CLOUD / 'glance', ignore_errors=True)
    # (on the first day's line: an upgrade day moves it on)
    cloud.use_line(days.DAYS[0].NOVA)
    cloud.write_configs()
    t = time.monotonic()
    warm_bytecode()
    say('   %s bytecode for the guest: %.0fs' % (elapsed(),
                                                 time.monotonic() - t))
    lab.guest.new_disk()
    lab.guest.boot()
    say('   %s compute guest booting (TCG)' % elapsed())
    done = cloud.restore_db(say)
    say('   %s %s' % (elapsed(), done))
    lab.cloud.start_host()
    say('   %s host services up: %s' % (elapsed(), ', '.join(
        lab.cloud.services)))
    lab.op = Operator()
    lab.api = API()
    s = steps.Steps(lab)
    s.setup()
    say('   %s images, device profile and flavors made' % elapsed())
    lab.guest.wait_agent()
    say('   %s compute guest agent answers' % elapsed())
    steps.wait_compute(lab)
    say('   %s nova-compute up, its node in Placement' % elapsed())
    lab.guest.sh(START_CYBORG_AGENT)
    say('   %s cyborg-agent started' % elapsed())
    return s


def run_days(lab):
    """Start the cloud, run every day; a day that cannot run fails each of
    its checks, saying why."""
    try:
        s = start(lab)
    except Exception as e:      # every planned check says why it did not run
        why = 'the cloud did not start: %s: %s' % (
            type(e).__name__, str(e).replace('\n', ' | ')[:600])
        traceback.print_exc(file=sys.stdout)
        days.show_logs(None)
        for day in days.DAYS:
            say(day.header())
            day(None).stop(why)
        return False
    ok = True
    for day in days.DAYS:
        d = day(s)
        try:
            ok = d.run() and ok
        except KeyboardInterrupt:
            raise
        except Exception as e:  # the day stopped: its other checks fail
            traceback.print_exc(file=sys.stdout)
            d.stop('the day stopped: %s: %s' % (
                type(e).__name__, str(e).replace('\n', ' | ')[:600]))
            ok = False
    say('   %s the days are over (%d probes of the compute host took %ds; '
        'CPU seconds of the guests\' QEMU at the last probe: %s)' % (
            elapsed(), cloudapi.PROBES[0], cloudapi.PROBES[1],
            cloudapi.LAST_QEMU_CPU))
    try:        # only a measure: never a failure
        say('   CPU seconds, the compute host\'s busiest processes since '
            'its last boot: %s; the cloud\'s services on this host, those '
            'running now: %s' % cpu_seconds(lab))
    except Exception as e:
        say('   CPU seconds not read: %s' % e)
    return ok


def _short(cmd):
    """A process's name: its configuration file's, or the module it runs,
    or its program's (a kernel thread's, as ps shows it)."""
    if cmd.startswith('['):
        return cmd
    for pattern in (r'--config-file \S*?([\w-]+)\.conf',
                    r'from ([\w.]+) import main'):
        m = re.search(pattern, cmd)
        if m:
            return m.group(1)
    return cmd.split(' ')[0].rsplit('/', 1)[-1]


def cpu_seconds(lab, n=8):
    """Where the tier's time goes: (the compute host's busiest processes
    since its last boot, the cloud's services here), each 'name seconds,
    ...' (a service's seconds are those of its session's processes).
    Only a measure: it never fails."""
    try:
        rc, out, err = lab.guest.sh(
            'ps -eo cputimes=,args= --sort=-cputimes | head -%d' % n,
            timeout=60)
        guest = ', '.join('%s %s' % (_short(cmd), secs) for secs, cmd in (
            line.split(None, 1) for line in out.splitlines()
            if len(line.split(None, 1)) == 2))
    except Exception as e:
        guest = 'not read (%s)' % e
    names = {s.proc.pid: name for name, s in lab.cloud.services.items()
             if s.proc is not None}
    tick = os.sysconf('SC_CLK_TCK')
    host = collections.Counter()
    for pid, cmd in cloud.cloud_processes().items():
        try:
            stat = pathlib.Path('/proc/%d/stat' % pid).read_text()
            fields = stat.rsplit(')', 1)[1].split()
            name = names.get(os.getsid(pid)) or \
                cmd.split(' ')[0].rsplit('/', 1)[-1]
            host[name] += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return guest, ', '.join('%s %d' % (name, secs)
                            for name, secs in host.most_common(n))


def main():
    if sys.argv[1:] == ['--plan']:
        print('\n'.join(plan()))
        return 0
    if sys.argv[1:] == ['--left-out']:
        for name in left_out():
            print(name)
        return 0
    lab = Lab()

    def interrupted(signum, frame):
        raise KeyboardInterrupt('signal %d' % signum)
    signal.signal(signal.SIGTERM, interrupted)
    stopped = cloud.kill_leftovers()
    if stopped:
        say('   stopped what a previous run left running: %s' % stopped)
    ok = False
    try:
        ok = run_days(lab)
    except KeyboardInterrupt:
        # (Day.run() has failed the checks it did not get to)
        say('   interrupted: stopping the cloud')
    finally:
        # the teardown is not interrupted (a second Ctrl-C, run.py's
        # SIGTERM): it ends every process the cloud started
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t = time.monotonic()
        lab.guest.shutdown('poweroff', timeout=30)
        lab.cloud.stop()
        procs, ports = cloud.leftovers()
        if not procs:
            # (nothing of this run's sessions left: none to stop next time)
            cloud.SESSIONS.unlink(missing_ok=True)
        ok = ok and not procs and not ports
        say('%s %s (%.1fs): %s' % (
            'FAIL' if procs or ports else 'PASS', TEARDOWN,
            time.monotonic() - t, 'left: processes %s, ports %s' % (
                procs, ports) if procs or ports else 'stopped, logs in %s' %
            cloud.LOG.relative_to(cloud.ROOT)))
        if procs:
            cloud.kill_leftovers()
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
