"""What the nova34 series costs a spawn with Cyborg MDEV ARQs, against
pristine nova 34.0.0, in one run.

Run from the nova34 tree with its venv:

    cd build/nova34 && ../venvs/nova34/bin/python ../../bench/nova34_cyborg_mdev.py

What a spawn (and a hard reboot, a power on) does for the guest's devices
with N MDEV ARQs: _allocate_cyborg_mdevs() (the mdev of each ARQ, made if it
does not exist; with the series also the instance's claims on them, saved
in its system metadata: the save is a database write, counted here as one
instance.save() call but not timed, since this host has no database) and
_get_guest_config() with those mdevs. Three cases, 8 MDEV ARQs each:

* _get_guest_config() alone, the mdevs made beforehand;
* both, new mdevs (a first spawn): all 8 are made. Between calls, and
  outside the timing, the mdevs are removed from the fake host (and, for
  the series, the instance's claims dropped);
* both, existing mdevs (a hard reboot, a power on): all 8 exist.

The series' driver is the tree's; the pristine one is
nova/virt/libvirt/driver.py of the nova 34.0.0 sdist in build/cache/, loaded
as a separate module on the same fakelibvirt host (the series' other
changes, config.py and host.py, only add to what it calls). Each round times
both (wall time; alternating order, garbage
collection off) and gives one ratio; the median of the rounds' ratios is the
result (target: at most 1.05), the ratio of the best times is printed
beside it. The series' removal of the 8 mdevs when the instance leaves,
which 34.0.0 never does, is timed on its own. The libvirt calls of each are
counted. No assertion: numbers are printed for a person to read.
"""

import collections
import gc
import os
import pathlib
import statistics
import sys
import tarfile
import time
import types
import unittest

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'False')

import fixtures  # noqa: E402
from oslo_utils.fixture import uuidsentinel as uuids  # noqa: E402
from oslo_utils import uuidutils  # noqa: E402

from nova import objects  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.unit.virt.libvirt import test_driver  # noqa: E402
from nova.virt import fake  # noqa: E402
from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

ROUNDS = 41
N_ARQS = 8
TARGET_RATIO = 1.05
CACHE = pathlib.Path(__file__).resolve().parent.parent / 'build' / 'cache'
PARENT = fakelibvirt.MDEVCAP_DEV1_PCI_ADDR


def pristine_driver_module():
    """nova/virt/libvirt/driver.py of the nova 34.0.0 sdist, as a module."""
    sdist = CACHE / 'nova-34.0.0.tar.gz'
    if not sdist.exists():
        sys.exit('bench: %s is missing; `python3 tools/series materialize '
                 'nova34` fetches it' % sdist)
    with tarfile.open(sdist) as tar:
        source = tar.extractfile(
            'nova-34.0.0/nova/virt/libvirt/driver.py').read().decode()
    module = types.ModuleType('pristine_libvirt_driver')
    module.__file__ = 'nova-34.0.0.tar.gz:nova/virt/libvirt/driver.py'
    # (its relative imports are package-relative)
    module.__package__ = 'nova.virt.libvirt'
    exec(compile(source, module.__file__, 'exec'), module.__dict__)
    return module


# Loaded before the tests' fixtures forbid importing libvirt, as the tree's
# driver module is: both try to at import time.
PRISTINE_DRIVER = pristine_driver_module()


def mdev_arqs(count):
    """MDEV ARQs of the fake host's first mdev-capable PCI parent."""
    domain, bus, device, function = PARENT[len('pci_'):].split('_')
    return [{'uuid': uuidutils.generate_uuid(),
             'attach_handle_type': 'MDEV',
             'attach_handle_uuid': uuidutils.generate_uuid(),
             'attach_handle_info': {
                 'domain': domain, 'bus': bus, 'device': device,
                 'function': function,
                 'asked_type': fakelibvirt.NVIDIA_11_VGPU_TYPE,
                 'mdev_owner': 'nova'}}
            for _ in range(count)]


class Bench(test_driver.LibvirtConnTestCase):

    def setUp(self):
        super().setUp()
        self.conn = fakelibvirt.Connection(
            'qemu:///system', pci_info=fakelibvirt.HostPCIDevicesInfo(
                num_pci=0, num_pfs=0, num_vfs=0, num_mdevcap=1))
        self.calls = collections.Counter()
        conn, calls = self.conn, self.calls

        class Counting:
            def __getattr__(self, name):
                calls[name] += 1
                return getattr(conn, name)

        self.drivers = {}
        # what the test fixtures give the tree's driver module instead of
        # the libvirt bindings
        PRISTINE_DRIVER.libvirt = fakelibvirt
        for name, module in (('series', libvirt_driver),
                             ('34.0.0', PRISTINE_DRIVER)):
            drvr = module.LibvirtDriver(fake.FakeVirtAPI(), False)
            drvr._host.get_connection = lambda: Counting()
            self.drivers[name] = drvr
        self.instance = objects.Instance(**self.test_instance)
        self.instance.deleted = False
        # the database write of the claims: counted, not timed
        self.saves = 0

        def save():
            self.saves += 1
        self.instance.save = save
        for drvr in self.drivers.values():
            drvr._host.get_node_uuid = lambda: uuids.node
        self.drivers['series']._get_mdevs_held_by_others = (
            lambda context, instance: {})
        self.instance.image_ref = uuids.image_ref
        self.instance.config_drive = ''
        self.image_meta = objects.ImageMeta.from_dict(self.test_image_meta)

    def allocate(self, name, arqs):
        drvr = self.drivers[name]
        if name == 'series':
            return drvr._allocate_cyborg_mdevs(
                self.context, self.instance, arqs)
        return drvr._allocate_cyborg_mdevs(arqs)

    def guest_config(self, name, arqs, mdevs):
        return self.drivers[name]._get_guest_config(
            self.instance, network_info=[], image_meta=self.image_meta,
            disk_info={'mapping': {}}, mdevs=mdevs, accel_info=arqs)

    def spawn_devices(self, name, arqs):
        """What spawn does for the guest's devices with these ARQs."""
        return self.guest_config(name, arqs, self.allocate(name, arqs))

    def remove_mdevs(self, name):
        """Untimed: the fake host (and the series' claims) without mdevs."""
        for dev in list(self.conn.mdev_info.devices.values()):
            if dev.active:
                dev.destroy()
            if dev.persistent:
                dev.undefine()
        if name == 'series':
            for key in list(self.instance.system_metadata):
                if key.startswith('cyborg_mdev_'):
                    del self.instance.system_metadata[key]

    def timed(self, func, *args):
        start = time.perf_counter()
        func(*args)
        return time.perf_counter() - start

    def measure(self, case):
        """{driver: [seconds per round]} of one case.

        'config': _get_guest_config() alone; 'new': spawn_devices(), the
        mdevs made; 'existing': spawn_devices(), the mdevs existing.
        """
        arqs = mdev_arqs(N_ARQS)
        times = {name: [] for name in self.drivers}
        order = list(self.drivers)
        for rnd in range(ROUNDS + 3):
            for name in order:
                if case == 'new':
                    func, args = self.spawn_devices, (name, arqs)
                else:
                    mdevs = self.allocate(name, arqs)  # untimed
                    if case == 'config':
                        func, args = self.guest_config, (name, arqs, mdevs)
                    else:
                        func, args = self.spawn_devices, (name, arqs)
                gc.collect()
                gc.disable()
                try:
                    seconds = self.timed(func, *args)
                finally:
                    gc.enable()
                self.remove_mdevs(name)
                if rnd >= 3:  # the first 3 rounds warm up
                    times[name].append(seconds)
            order.reverse()
        return times

    def removal(self):
        """The series' removal of N_ARQS mdevs (seconds, fastest round)."""
        drvr = self.drivers['series']
        arqs = mdev_arqs(N_ARQS)
        best = None
        for _ in range(ROUNDS):
            drvr._allocate_cyborg_mdevs(self.context, self.instance, arqs)
            gc.collect()
            seconds = self.timed(drvr._release_cyborg_mdevs,
                                 self.context, self.instance)
            best = seconds if best is None else min(best, seconds)
        return best

    def libvirt_calls(self, name, existing, release=False):
        arqs = mdev_arqs(N_ARQS)
        if existing:
            self.spawn_devices(name, arqs)
        self.calls.clear()
        saves = self.saves
        if release:
            self.drivers[name]._release_cyborg_mdevs(
                self.context, self.instance)
        else:
            self.spawn_devices(name, arqs)
        counted = dict(self.calls)
        if name == 'series' and not release:
            counted['instance.save'] = self.saves - saves
        self.remove_mdevs(name)
        return ', '.join('%s=%d' % kv for kv in sorted(counted.items()))

    def test_bench(self):
        print('\nthe guest\'s devices with %d MDEV ARQs, %d interleaved '
              'rounds (wall time):' % (N_ARQS, ROUNDS))
        print('  %-40s%12s%12s%12s%14s' % (
            'case', 'series', '34.0.0', 'ratio', 'best/best'))
        for case, label in (
                ('config', '_get_guest_config'),
                ('new', '+ _allocate_cyborg_mdevs, new mdevs'),
                ('existing', '+ _allocate_cyborg_mdevs, existing')):
            times = self.measure(case)
            ratio = statistics.median(
                s / p for s, p in zip(times['series'], times['34.0.0']))
            best = min(times['series']) / min(times['34.0.0'])
            print('  %-40s%9.2f ms%9.2f ms%11.3fx%13.3fx  (target <= %.2fx: '
                  '%s)' % (
                      label, statistics.median(times['series']) * 1e3,
                      statistics.median(times['34.0.0']) * 1e3, ratio, best,
                      TARGET_RATIO,
                      'met' if ratio <= TARGET_RATIO else 'NOT met'))
        print('  (medians per call; ratio = median of the rounds\' ratios)')
        print('\nthe series removes the %d mdevs when the instance leaves '
              '(34.0.0 never does): %.2f ms, fastest of %d' % (
                  N_ARQS, self.removal() * 1e3, ROUNDS))
        print('\nlibvirt calls for %d MDEV ARQs:' % N_ARQS)
        for existing, label in ((False, 'new mdevs'),
                                (True, 'existing mdevs')):
            for name in self.drivers:
                print('  %-16s %-7s %s' % (
                    label, name, self.libvirt_calls(name, existing)))
        print('  %-16s %-7s %s' % (
            'removal', 'series',
            self.libvirt_calls('series', True, release=True)))


if __name__ == '__main__':
    print('bench: a spawn with %d Cyborg MDEV ARQs, nova 34.0.0 + the '
          'nova34 series vs pristine 34.0.0' % N_ARQS)
    suite = unittest.defaultTestLoader.loadTestsFromName('test_bench', Bench)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(
        suite)
    sys.exit(0 if result.wasSuccessful() else 1)
