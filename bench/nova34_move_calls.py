"""How many Cyborg and Placement calls a resize or a cold migration of a
server with Cyborg MDEV ARQs makes, against a spawn plus a delete with the
same ARQs, and an evacuation as today's reference.

Run from the nova34 tree with its venv:

    cd build/nova34 && ../venvs/nova34/bin/python ../../bench/nova34_move_calls.py

Each scenario runs in the functional tests' world (two libvirt computes on
fakelibvirt, the real Placement fixture, the fake Cyborg with the generic
mdev driver), with a flavor whose device profile asks for 2 mdevs, and
counts only the calls of the operation itself (the boot of the server a
move starts from is not counted):

* spawn + delete: the boot of the server and its delete;
* resize to no profile + confirm (the source's ARQs deleted), resize to a
  profile + confirm (the destination's bound), and resize to a profile +
  revert: across hosts;
* resize to the same profile + confirm, reverted, and a cold migration +
  confirm: the moves that hold two sets (Cyborg's API 2.4);
* resize + confirm without ARQs: what any resize costs Placement;
* evacuate: the evacuation of the server from a compute that is down.

Cyborg calls are counted at the calls Nova's client makes to Cyborg's API
(a device profile read, an ARQ create, a bind, an ARQ list, an ARQ read, a
delete, and the API's read of Cyborg's versions, in steady state: an API
process reads them at most once a minute, so each scenario starts with the
answer kept, and the first move of a minute makes one call more);
Placement calls at the report client's HTTP methods (GET, POST, PUT,
DELETE), which the scheduler, the conductor and the computes share. No
assertion: the numbers are printed for a person to read, with the ratios
of each move to a spawn plus a delete and to an evacuation (Cyborg calls,
then Placement calls).
"""

import collections
import inspect
import os
import sys
import unittest

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'False')

import fixtures  # noqa: E402

from nova.accelerator import cyborg  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova.scheduler.client import report  # noqa: E402
from nova.tests.fixtures import cyborg as cyborg_fixture  # noqa: E402
from nova.tests.functional.libvirt import (  # noqa: E402
    test_cyborg_mdev_move as move)

# what Nova's client asks Cyborg's API, by the client method that asks it
CYBORG_CALLS = ('_get_device_profile_list',
                'create_arqs_and_match_resource_providers', 'bind_arqs',
                '_get_arqs_shown_for_instance', 'get_arq_by_uuid',
                'delete_arqs_by_uuid', 'delete_arqs_for_instance')
PLACEMENT_CALLS = ('get', 'post', 'put', 'delete')
COUNTS = {}
# what each scenario asked Cyborg, by client method
CYBORG_DETAIL = {}


class Counting(move.MdevMoveTestBase):

    CYBORG_RELEASE = cyborg_fixture.CyborgMdevFixture.RELEASE_SERIES

    def setUp(self):
        super().setUp()
        self.flavor = self.create_cyborg_flavor(name='mdev-dp-2', groups=2)
        self.bigger_flavor = self._create_flavor(
            memory_mb=4096, extra_spec={'accel:device_profile': 'mdev-dp-2'})
        # steady state: an API process asks Cyborg for its versions at most
        # once a minute (the first move of a minute makes one call more)
        self.assertTrue(cyborg.get_client(
            nova_context.get_admin_context()).binds_move_arqs())

    def count(self, name, operation):
        """Run operation, counting its calls to Cyborg and Placement."""
        calls = collections.Counter()

        detail = collections.Counter()

        def counted(kind, real, method=None):
            def call(*args, **kwargs):
                calls[kind] += 1
                if kind == 'cyborg':
                    detail[method] += 1
                return real(*args, **kwargs)
            # (a method the fixture replaced with a mock takes no self)
            return call if inspect.isfunction(real) else staticmethod(call)
        patches = []
        for method in CYBORG_CALLS:
            patches.append(fixtures.MonkeyPatch(
                'nova.accelerator.cyborg._CyborgClient.' + method,
                counted('cyborg',
                        getattr(cyborg._CyborgClient, method), method)))
        # (the read of Cyborg's versions, which binds_move_arqs() makes
        # only when it has no answer kept)
        patches.append(fixtures.MonkeyPatch(
            'nova.accelerator.cyborg.sdk_utils.supports_microversion',
            counted('cyborg', cyborg.sdk_utils.supports_microversion,
                    'versions')))
        for method in PLACEMENT_CALLS:
            patches.append(fixtures.MonkeyPatch(
                'nova.scheduler.client.report.SchedulerReportClient.' +
                method,
                counted('placement',
                        getattr(report.SchedulerReportClient, method))))
        for patch in patches:
            patch.setUp()
        try:
            result = operation()
        finally:
            for patch in reversed(patches):
                patch.cleanUp()
        COUNTS[name] = (calls['cyborg'], calls['placement'])
        CYBORG_DETAIL[name] = detail
        return result

    def test_spawn_and_delete(self):
        def spawn_and_delete():
            server, mdevs = self.boot(host='compute1')
            self.assertEqual(2, len(mdevs))
            self._delete_server(server)
        self.count('spawn + delete', spawn_and_delete)
        self.assert_nothing_left_anywhere()

    def test_resize_to_no_profile_and_confirm(self):
        server, _ = self.boot(host='compute1')

        def resize_and_confirm():
            moved = self._resize_server(server, self.plain_flavor)
            return self.confirm(moved)
        self.count('to no profile + confirm', resize_and_confirm)
        self.assertEqual({}, self.cyborg.arqs)

    def test_resize_to_a_profile_and_confirm(self):
        server = self._create_server(
            flavor_id=self.plain_flavor, networks='none', host='compute1')

        def resize_and_confirm():
            moved = self._resize_server(server, self.flavor)
            return self.confirm(moved)
        server = self.count('to a profile + confirm', resize_and_confirm)
        self.assertEqual(2, len(self.arq_mdevs_on(server, 'compute2')))

    def test_resize_to_a_profile_and_revert(self):
        server = self._create_server(
            flavor_id=self.plain_flavor, networks='none', host='compute1')

        def resize_and_revert():
            return self._revert_resize(
                self._resize_server(server, self.flavor))
        self.count('to a profile + revert', resize_and_revert)
        self.assertEqual({}, self.cyborg.arqs)

    def test_resize_to_the_same_profile_and_confirm(self):
        server, _ = self.boot(host='compute1')

        def resize_and_confirm():
            moved = self._resize_server(server, self.bigger_flavor)
            return self.confirm(moved)
        server = self.count('same profile + confirm', resize_and_confirm)
        self.assertEqual(2, len(self.arq_mdevs(server)))

    def test_resize_to_the_same_profile_and_revert(self):
        server, mdevs = self.boot(host='compute1')

        def resize_and_revert():
            return self._revert_resize(
                self._resize_server(server, self.bigger_flavor))
        server = self.count('same profile + revert', resize_and_revert)
        self.assertEqual(mdevs, self.arq_mdevs(server))

    def test_cold_migrate_and_confirm(self):
        server, _ = self.boot(host='compute1')

        def migrate_and_confirm():
            return self.confirm(self._migrate_server(server))
        server = self.count('cold migrate + confirm', migrate_and_confirm)
        self.assertEqual(2, len(self.arq_mdevs_on(server, 'compute2')))

    def test_resize_without_arqs(self):
        server = self._create_server(
            flavor_id=self._create_flavor(), networks='none',
            host='compute1')

        def resize_and_confirm():
            moved = self._resize_server(server, self.plain_flavor)
            return self.confirm(moved)
        self.count('no ARQ + confirm', resize_and_confirm)

    def test_evacuate(self):
        server, _ = self.boot(host='compute1')
        self.stop_nova_compute('compute1')

        def evacuate():
            return self._evacuate_server(
                server, expected_host='compute2', expected_state='SHUTOFF')
        self.count('evacuate', evacuate)


def main():
    suite = unittest.TestLoader().loadTestsFromTestCase(Counting)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        suite)
    if not result.wasSuccessful():
        sys.exit('bench: a scenario failed; no figures')
    base_cyborg, base_placement = COUNTS['spawn + delete']
    evac_cyborg, evac_placement = COUNTS['evacuate']
    print('%-28s %8s %10s   %21s   %21s' % (
        '', '', '', 'x spawn + delete', 'x evacuate (reference)'))
    print('%-28s %8s %10s   %9s %11s   %9s %11s' % (
        'resize (2 MDEV ARQs)', 'Cyborg', 'Placement', 'Cyborg',
        'Placement', 'Cyborg', 'Placement'))
    for name in ('spawn + delete', 'to no profile + confirm',
                 'to a profile + confirm', 'to a profile + revert',
                 'same profile + confirm', 'same profile + revert',
                 'cold migrate + confirm', 'no ARQ + confirm', 'evacuate'):
        cyborg_calls, placement_calls = COUNTS[name]
        print('%-28s %8d %10d   %9.2f %11.2f   %9.2f %11.2f' % (
            name, cyborg_calls, placement_calls,
            cyborg_calls / base_cyborg, placement_calls / base_placement,
            cyborg_calls / evac_cyborg, placement_calls / evac_placement))
    print()
    print('Cyborg calls by client method:')
    for name, detail in CYBORG_DETAIL.items():
        print('  %-26s %s' % (name, ', '.join(
            '%s %d' % (method, n) for method, n in sorted(detail.items()))))
    plain = COUNTS['no ARQ + confirm'][1]
    for name in ('to no profile + confirm', 'to a profile + confirm',
                 'same profile + confirm', 'cold migrate + confirm'):
        print('Placement calls the ARQs add to a resize %s: %d (a spawn '
              'plus a delete with them: %d)' % (
                  name, COUNTS[name][1] - plain, base_placement))


if __name__ == '__main__':
    main()
