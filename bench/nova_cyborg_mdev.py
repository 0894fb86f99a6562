"""Benchmark: what Cyborg MDEV ARQs cost the libvirt driver.

Run from a materialized nova tree with its venv:

    cd build/nova && ../venvs/nova/bin/python ../../bench/nova_cyborg_mdev.py

It prints, in one run:

* the cost of _get_guest_config() for a guest with 8 MDEV ARQs against the
  same guest without ARQs, as a ratio; the target is at most 1.05. Each
  round times both (CPU time, in alternating order, garbage collection off)
  and gives one ratio; the median of the rounds' ratios is the result, the
  ratio of the two best times is printed beside it. Other processes on the
  machine slow single rounds, not the median;
* the libvirt calls _ensure_cyborg_mdevs() makes for N MDEV ARQs on a fake
  host (fakelibvirt's mtty-like parent): the target is one listing plus one
  create, define and autostart per created mdev, and nothing else (the first
  spawn on a parent also reads it once, to check it is not Nova's too, and
  the first spawn of the process reads the host name that names the
  host's record of Cyborg mdevs, written under a temporary state_path).

No assertion: numbers are printed for a person (and the README) to read.
"""

import collections
import gc
import os
import statistics
import sys
import time
import unittest
from unittest import mock

# the nova tree in the current directory, whatever the venv points at
sys.path.insert(0, os.getcwd())

import fixtures
from oslo_utils.fixture import uuidsentinel as uuids
from oslo_utils import uuidutils

from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.unit.virt.libvirt import test_driver
from nova.virt import fake
from nova.virt.libvirt import driver as libvirt_driver

ROUNDS = 41
CALLS = 10
N_ARQS = 8


def mdev_arqs(count, named=False):
    """MDEV ARQs of the PCI parent 0000:41:00.0, or if `named` of the
    kernel's mtty sample device (parent_name, not a PCI device)."""
    if named:
        parent = {'parent_name': 'mtty'}
    else:
        parent = {'domain': '0000', 'bus': '41', 'device': '00',
                  'function': '0'}
    return [{'uuid': uuidutils.generate_uuid(),
             'attach_handle_type': 'MDEV',
             'attach_handle_uuid': uuidutils.generate_uuid(),
             'attach_handle_info': dict(parent, asked_type='mtty-1')}
            for _ in range(count)]


class Bench(test_driver.LibvirtConnTestCase):

    def setUp(self):
        super().setUp()
        # the driver keeps the record of the Cyborg mdevs it made under
        # [DEFAULT] state_path: a directory of this run's, never the tree
        self.flags(state_path=self.useFixture(fixtures.TempDir()).path)

    def _guest_config_cost(self):
        drvr = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        instance = objects.Instance(**self.test_instance)
        instance.image_ref = uuids.image_ref
        instance.config_drive = ''
        image_meta = objects.ImageMeta.from_dict(self.test_image_meta)
        arqs = mdev_arqs(N_ARQS)

        def run(accel_info):
            start = time.process_time()
            for _ in range(CALLS):
                drvr._get_guest_config(
                    instance, network_info=[], image_meta=image_meta,
                    disk_info={'mapping': {}}, accel_info=accel_info)
            return time.process_time() - start

        for _ in range(3):  # warm up
            run(None), run(arqs)
        times = {'none': [], 'mdev': []}
        order = [('none', None), ('mdev', arqs)]
        gc.collect()
        gc.disable()
        try:
            for _ in range(ROUNDS):
                for name, accel_info in order:
                    times[name].append(run(accel_info))
                order.reverse()
        finally:
            gc.enable()
        return times

    def _libvirt_calls(self, count, named=False):
        pci_info = fakelibvirt.HostPCIDevicesInfo(
            num_pci=0, num_pfs=0, num_vfs=0)
        pci_info.add_mtty_parent(bus=0x41)
        if hasattr(pci_info, 'add_virtual_mtty_parent'):
            pci_info.add_virtual_mtty_parent()
        conn = fakelibvirt.Connection('qemu:///system', pci_info=pci_info)
        calls = collections.Counter()

        class Counting:
            def __getattr__(self, name):
                calls[name] += 1
                return getattr(conn, name)

        drvr = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), False)
        drvr._host.get_connection = lambda: Counting()
        first = objects.Instance(uuid=uuids.first, system_metadata={})
        instance = objects.Instance(uuid=uuids.instance, system_metadata={})
        # a first spawn on the parent: its ownership is checked once per
        # process (one node device lookup), the host name read once per
        # process (and the mdev-capable devices, for a parent_name)
        drvr._ensure_cyborg_mdevs(first, mdev_arqs(1, named))
        calls.clear()
        with mock.patch.object(fakelibvirt.FakeMdev, 'setAutostart',
                               autospec=True,
                               side_effect=fakelibvirt.FakeMdev.setAutostart
                               ) as autostart:
            drvr._ensure_cyborg_mdevs(instance, mdev_arqs(count, named))
        calls['setAutostart'] = autostart.call_count
        return dict(calls)

    def test_bench(self):
        times = self._guest_config_cost()
        ratios = sorted(m / n for n, m in zip(times['none'], times['mdev']))
        print('\n_get_guest_config x%d per round, %d interleaved rounds '
              '(CPU time):' % (CALLS, ROUNDS))
        for name, label in (('none', 'no ARQs'),
                            ('mdev', '%d MDEV ARQs' % N_ARQS)):
            print('  %-12s best %6.1f ms, median %6.1f ms' % (
                label, min(times[name]) * 1000,
                statistics.median(times[name]) * 1000))
        print('  ratio        median %.3f (target <= 1.05); of the best '
              'times %.3f; rounds %.3f-%.3f' % (
                  statistics.median(ratios),
                  min(times['mdev']) / min(times['none']),
                  ratios[0], ratios[-1]))
        print('\nlibvirt calls of _ensure_cyborg_mdevs for a spawn (all '
              'mdevs new, not the first spawn on the parent):')
        for count in (1, 2, 8):
            print('  %d MDEV ARQs: %s' % (count, ', '.join(
                '%s=%d' % kv for kv in sorted(
                    self._libvirt_calls(count).items()))))
        if hasattr(fakelibvirt, 'FakeMttyVirtualParent'):
            print('  8 MDEV ARQs of a non-PCI parent (parent_name): %s' % (
                ', '.join('%s=%d' % kv for kv in sorted(
                    self._libvirt_calls(8, named=True).items()))))


if __name__ == '__main__':
    suite = unittest.defaultTestLoader.loadTestsFromName('test_bench', Bench)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        suite)
    sys.exit(0 if result.wasSuccessful() else 1)
