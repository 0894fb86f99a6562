"""Tier 3's days: a header line, then checks planned before anything runs.

A Day is a list of Checks, each a step of steps.py (or a few) with the
name of its PASS/FAIL line and the checks it needs. Every planned check
prints PASS or FAIL, always: one whose needs failed, or that the day never
reached, is a FAIL that says why it did not run. tools/lab/run.py counts a
day's plan (Day.plan()) even when tier 3 never started. Only the standard
library at import time.
"""

import configparser
import os
import re
import time
import traceback

import cloud
from cloudapi import elapsed, Failed, log_path, say

REFUSED = ['Feature not supported with instances that have accelerators.']


class Check:
    """One planned check: key (what other checks name in `needs`), name
    (its PASS/FAIL line), run(steps, day) -> the detail of its PASS line,
    needs (keys of checks that must have passed first), recover(steps)
    (run after it failed, to leave the cloud fit for the next checks),
    logs (the services whose warnings a failure shows)."""

    def __init__(self, key, name, run, needs=(), recover=None, logs=()):
        self.key = key
        self.name = name
        self.run = run
        self.needs = needs
        self.recover = recover
        self.logs = logs


def show_logs(logs, n=12):
    for log in logs or ('nova-compute', 'nova-conductor',
                        'cyborg-conductor'):
        path = log_path(log)
        lines = [line for line in cloud.tail(path, 400)
                 if re.search(r' (ERROR|WARNING|CRITICAL) |Traceback', line)]
        if lines:
            say('   %s (%s), its last warnings and errors:' % (
                log, path.relative_to(cloud.ROOT)))
            for line in lines[-n:]:
                say('      ' + line[:400])


def report(name, fn, logs=()):
    """Run fn(); print PASS with its return value as the detail, or FAIL
    with why (and the relevant lines of the named logs). Returns ok."""
    start = time.perf_counter()
    ok, detail = False, ''
    try:
        value = fn()
        ok, detail = True, '' if value is None else str(value)
    except Failed as e:
        detail = str(e)
    except Exception as e:      # a check that broke is a FAIL that says how
        where = traceback.format_exc().strip().splitlines()[-3:-1]
        detail = '%s: %s | %s' % (type(e).__name__,
                                  str(e).replace('\n', ' '),
                                  ' <- '.join(w.strip() for w in where))
    say('%s %s (%.1fs): %s' % ('PASS' if ok else 'FAIL', name,
                               time.perf_counter() - start,
                               detail.replace('\n', ' ')[:900]))
    if not ok:
        show_logs(logs)
    return ok


def not_run(name, why):
    say('FAIL %s (0.0s): not run: %s' % (name, why))


def version(project):
    bases = configparser.ConfigParser()
    bases.read(cloud.ROOT / 'bases.ini')
    return bases[project]['version']


class Day:
    """A day on the lab cloud: its checks, in order (CHECKS)."""

    CHECKS = ()
    # the bases.ini projects whose trees (and patches/) the cloud runs
    NOVA, CYBORG = cloud.DAY_LINE, 'cyborg'

    @classmethod
    def plan(cls):
        return [c.name for c in cls.CHECKS]

    @classmethod
    def header(cls):
        return 'day: %s, nova %s + patches/%s, cyborg %s + patches/%s' % (
            cls.TITLE, version(cls.NOVA), cls.NOVA, version(cls.CYBORG),
            cls.CYBORG)

    def __init__(self, steps):
        self.steps = steps
        self.passed = {}            # key: ok, of the checks that ran
        self.by_key = {c.key: c for c in self.CHECKS}

    def run(self):
        """Every check, in order; returns whether all passed."""
        say(self.header())
        try:
            for c in self.CHECKS:
                if c.key not in self.passed:
                    self.run_check(c.key)
                    say('   %s' % elapsed())
        except KeyboardInterrupt:
            self.stop('interrupted')
            raise
        return all(self.passed.values())

    def run_check(self, key):
        """Run one planned check (also from within another's step)."""
        c = self.by_key[key]
        failed = [self.by_key[k].name for k in c.needs
                  if not self.passed.get(k)]
        if failed:
            not_run(c.name, 'it needs "%s", which failed' % failed[0])
            self.passed[key] = False
            return False
        self.passed[key] = report(c.name, lambda: c.run(self.steps, self),
                                  c.logs)
        if not self.passed[key] and c.recover:
            c.recover(self.steps)
        return self.passed[key]

    def stop(self, why):
        """Each check that has not run fails: not run, why."""
        for c in self.CHECKS:
            if c.key not in self.passed:
                not_run(c.name, why)
                self.passed[c.key] = False


def lifecycle(key, what, run):
    """A lifecycle check of vm1, which must have booted; after a failure
    vm1 is brought back to ACTIVE."""
    return Check(key, '3 lifecycle: %s; one mdev hostdev, nothing leaked' %
                 what, run, needs=('boot',),
                 recover=lambda s: s.recover('vm1'))


def refused(key, what, command):
    return Check(key, '4 refused: %s, HTTP 400 with Nova\'s message, the '
                 'server kept' % what,
                 lambda s, d: s.refused('vm1', command, REFUSED),
                 needs=('boot',))


# The upgrade day runs first when LAB_UPGRADE_DAY=1 (on the primary line):
# the operator's day then runs on the cloud it upgraded (see DAYS).
UPGRADED = (cloud.DAY_LINE == 'nova34' and
            os.environ.get('LAB_UPGRADE_DAY') == '1')


def carried(steps):
    """The servers of earlier days the operator's day keeps (the upgrade
    day's u1) that are ACTIVE: a failure of theirs is their day's."""
    return [n for n, sid in steps.servers.items()
            if n.startswith('u') and
            steps.server(sid)['status'] == 'ACTIVE']


class OperatorsDay(Day):
    """The operator's day: discovery, a server's whole lifecycle, refused
    operations, a real host reboot, capacity moves, bad input, delete."""

    TITLE = 'the operator\'s day'
    CHECKS = [
        Check('discovery', '1 discovery: Cyborg reports the mtty types '
              'under the compute node (OWNER_CYBORG), the compute node is '
              'OWNER_NOVA', lambda s, d: s.discovery()),
        Check('boot', '2 boot: server create with the device profile '
              'flavor, ARQ Bound, QEMU runs the domain with the persistent '
              'mdev', lambda s, d: s.boot('vm1')),
        lifecycle('soft_reboot', 'soft reboot: the guest shuts down on the '
                  'ACPI power button, nova-compute logs the soft path, a '
                  'new QEMU process', lambda s, d: s.soft_reboot('vm1')),
        lifecycle('hard_reboot', 'hard reboot: a new QEMU process',
                  lambda s, d: s.lifecycle('vm1', 'server reboot --hard '
                                           'vm1')),
        lifecycle('pause', 'pause, unpause: the same QEMU process',
                  lambda s, d: s.lifecycle('vm1', 'server pause vm1',
                                           'PAUSED', 'server unpause vm1',
                                           restarts=False)),
        lifecycle('stop_start', 'stop, start: a new QEMU process',
                  lambda s, d: s.lifecycle('vm1', 'server stop vm1',
                                           'SHUTOFF', 'server start vm1')),
        lifecycle('lock', 'lock, unlock: the same QEMU process',
                  lambda s, d: s.lock_unlock('vm1')),
        lifecycle('rebuild', 'rebuild with another image: a new QEMU '
                  'process, the new image on its console',
                  lambda s, d: s.lifecycle('vm1', 'server rebuild --image '
                                           'tiny2 vm1', image='tiny2')),
        lifecycle('snapshot', 'snapshot: the image active',
                  lambda s, d: s.snapshot('vm1')),
        lifecycle('shelve', 'shelve (offloaded: no domain, no ARQ, no '
                  'mdev), unshelve', lambda s, d: s.shelve_unshelve('vm1')),
    ] + ([
        refused('resize', 'resize', 'server resize --flavor mtty.small vm1'),
        refused('migrate', 'migrate', 'server migrate vm1'),
    ] if cloud.DAY_LINE == 'nova' else [
        lifecycle('resize', 'resize to the same host, revert, resize, '
                  'confirm: both ARQs and mdevs while it waits, the kept '
                  'one after', lambda s, d: s.resize_same_host('vm1')),
        lifecycle('migrate', 'cold migrate with no other host: no valid '
                  'host, the server and its ARQ kept',
                  lambda s, d: s.migrate_nowhere('vm1')),
    ]) + [
        refused('live_migrate', 'live-migrate',
                'server migrate --live-migration vm1'),
        refused('suspend', 'suspend', 'server suspend vm1'),
        Check('host_reboot', '5 host reboot: the compute host reboots, the '
              'mdevs come back, nova-compute resumes vm1%s with them' % (
                  ' and u1 (booted on 33 before the upgrade)'
                  if UPGRADED else ''),
              lambda s, d: s.host_reboot('vm1', *carried(s)),
              needs=('boot',),
              recover=lambda s: s.after_host_reboot('vm1'),
              logs=('nova-compute', 'libvirtd')),
        # (the bad device profile needs no compute host: it runs while the
        # capacity check waits for Cyborg's reports)
        Check('capacity', '6 capacity: two mtty types on one parent, one '
              'consumed, Cyborg\'s report with ARQs bound matches the host',
              lambda s, d: s.capacity(
                  meanwhile=lambda: d.run_check('bad_profile')),
              needs=('boot',), logs=('cyborg-conductor', 'cyborg-agent')),
        Check('bad_profile', '7 bad input: a device profile naming a type '
              'the parent lacks: Cyborg takes it, the boot ends in ERROR '
              '"No valid host was found.", nothing left',
              lambda s, d: s.bad_profile()),
        Check('bind_fails', '7 bad input: an instance whose ARQ binding '
              'fails: ERROR "Failed to bind accelerator requests", nothing '
              'left', lambda s, d: s.bind_fails()),
        Check('delete', '8 delete: %s: ARQs gone, Placement usages 0, '
              'mdevs gone, capacity back on the host and in Placement\'s '
              'inventories' % ('every server, u1 too' if UPGRADED else
                               'every server'), lambda s, d: s.delete()),
    ]


class UpgradeDay(Day):
    """A short day on the 33 line, then Nova upgraded in place to the
    primary line under a server booted on 33, u1, which then reboots. The
    cloud starts on the 33 line for it (tier3.start()); the operator's day
    follows on the upgraded cloud, and its host reboot resumes u1 too and
    its delete deletes it, with nothing left."""

    TITLE = 'the 33 line, upgraded in place'
    NOVA, UPGRADE = 'nova', 'nova34'

    @classmethod
    def header(cls):
        return ('day: %s, nova %s + patches/%s, then %s + patches/%s, '
                'cyborg %s + patches/%s' % (
                    cls.TITLE, version(cls.NOVA), cls.NOVA,
                    version(cls.UPGRADE), cls.UPGRADE, version(cls.CYBORG),
                    cls.CYBORG))

    CHECKS = [
        Check('discovery', 'u1 33 line: discovery: Cyborg\'s mtty providers '
              'under the compute node (OWNER_CYBORG), the compute node '
              'OWNER_NOVA', lambda s, d: s.discovery()),
        Check('boot', 'u2 33 line: boot u1 and u2: ARQs Bound, QEMU runs '
              'each domain with its persistent mdev',
              lambda s, d: s.boot('u1', 'u2')),
        Check('hard_reboot', 'u3 33 line: hard reboot: a new QEMU process '
              'with the ARQ\'s mdev', lambda s, d: s.lifecycle(
                  'u1', 'server reboot --hard u1'), needs=('boot',),
              recover=lambda s: s.recover('u1')),
        Check('shelve', 'u4 33 line: shelve (offloaded: no domain, no ARQ, '
              'no mdev), unshelve', lambda s, d: s.shelve_unshelve('u1'),
              needs=('boot',), recover=lambda s: s.recover('u1')),
        # (u2 deleted first: each guest nova-compute resumes after a host
        # reboot takes it about 40 s under TCG)
        Check('delete33', 'u5 33 line: delete u2: its ARQ and mdev gone, '
              'the capacity back on the host and in Placement (usages, '
              'inventories)', lambda s, d: s.delete_one('u2'),
              needs=('boot',)),
        Check('host_reboot', 'u6 33 line: host reboot: the mdev comes back, '
              'nova-compute resumes u1 with it',
              lambda s, d: s.host_reboot('u1'), needs=('boot',),
              recover=lambda s: s.after_host_reboot('u1'),
              logs=('nova-compute', 'libvirtd')),
        Check('upgrade', 'u7 upgrade in place to nova 34.0.0 + '
              'patches/nova34 (databases, control services, nova-compute): '
              'u1 keeps its QEMU process and mdev',
              lambda s, d: s.upgrade('u1', d.UPGRADE), needs=('boot',),
              logs=('nova-compute', 'nova-conductor')),
        Check('hard_reboot34', 'u8 upgraded: hard reboot of u1 (booted on '
              '33): a new QEMU process with the ARQ\'s mdev',
              lambda s, d: s.lifecycle('u1', 'server reboot --hard u1'),
              needs=('upgrade',), recover=lambda s: s.recover('u1')),
    ]


# The days tier 3 runs, in order, on one cloud: the operator's day, on a
# cloud started on the primary line (on the 33 line with LAB_NOVA=nova);
# with LAB_UPGRADE_DAY=1, the upgrade day first, which starts the cloud on
# the 33 line and leaves it on the primary line. LEFT_OUT: the days not
# run, whose checks are counted as skipped (every run's total holds the
# same checks).
DAYS = [UpgradeDay, OperatorsDay] if UPGRADED else [OperatorsDay]
LEFT_OUT = [] if UPGRADED else [UpgradeDay]
