"""Benchmark: the generic mdev driver's discover() against a bare sysfs loop.

Run from build/cyborg with its venv:

    cd build/cyborg && ../venvs/cyborg/bin/python ../../bench/cyborg_mdev_discover.py

It builds a fake /sys/class/mdev_bus tree of 64 parents x 32 mdev types
(2048 configured pairs, every 8th with created mdevs) in a temporary
directory, then times, over many rounds:

* discover(): MdevDriver with all 2048 pairs in [mdev] device_spec, its
  MdevBusManager pointed at the fake tree, building every DriverDevice,
  DriverDeployable, attribute and attach handle;
* a bare loop that lists the same directories and reads the same files
  once each with plain os.listdir() and open(), and builds nothing.

Times are CPU time of this process (time.process_time(), user + system,
so the kernel's side of every read counts), which another job on a shared
machine does not inflate the way it does wall-clock time. The tree is put
on /dev/shm when there is one: in memory, like sysfs.

The two are timed in turn, ROUNDS times, each round in the other order
than the one before (so that neither always runs first, after the other
has warmed or cluttered the caches and the heap), after one untimed warm-up
round. It prints the minimum and the median of both and the ratio of each;
the target is both ratios <= 2. The minimum is what each costs undisturbed;
the median says whether that holds up on a busy machine.
"""

import json
import logging
import os
import pathlib
import statistics
import tempfile
import time

from oslo_config import cfg

import cyborg.conf  # noqa: F401  (registers [mdev])

from cyborg.accelerator.bus_managers import mdev as mdev_bus
from cyborg.accelerator.drivers.mdev import driver as mdev_driver


PARENTS = 64
TYPES = 32
ROUNDS = 30
TYPE_FILES = ('available_instances', 'device_api', 'name', 'description')


def build_tree(root):
    addresses = []
    for p in range(PARENTS):
        address = '0000:%02x:00.0' % (p + 0x10)
        addresses.append(address)
        parent = root / address
        (parent / 'mdev_supported_types').mkdir(parents=True)
        (parent / 'vendor').write_text('0x10de\n')
        (parent / 'device').write_text('0x1eb8\n')
        (parent / 'class').write_text('0x030200\n')
        for t in range(TYPES):
            type_dir = parent / 'mdev_supported_types' / ('nvidia-%d' % t)
            (type_dir / 'devices').mkdir(parents=True)
            (type_dir / 'available_instances').write_text('%d\n' % (t % 4 + 1))
            (type_dir / 'device_api').write_text('vfio-pci\n')
            (type_dir / 'name').write_text('GRID T4-%dQ\n' % t)
            (type_dir / 'description').write_text('num_heads=4\n')
            if t % 8 == 0:
                for i in range(2):
                    (type_dir / 'devices' /
                     ('00000000-0000-0000-%04d-%012d' % (t, i))).mkdir()
    return addresses


def bare_loop(root, addresses):
    """Read what discover() reads, once, and build nothing."""
    root = str(root)
    total = 0
    present = set(os.listdir(root))
    for address in addresses:
        if address not in present:
            continue
        parent = os.path.join(root, address)
        for name in ('vendor', 'device', 'class'):
            with open(os.path.join(parent, name)) as f:
                f.read()
        types_dir = os.path.join(parent, 'mdev_supported_types')
        for type_name in os.listdir(types_dir):
            type_dir = os.path.join(types_dir, type_name)
            values = []
            for name in TYPE_FILES:
                with open(os.path.join(type_dir, name)) as f:
                    values.append(f.read())
            total += int(values[0]) + len(
                os.listdir(os.path.join(type_dir, 'devices')))
    return total


def time_interleaved(funcs):
    """The times of each function over ROUNDS rounds, and its result.

    Interleaving keeps the load of a shared machine from favouring either;
    the order alternates from one round to the next.
    """
    times = [[] for _ in funcs]
    results = [func() for func in funcs]  # warm-up, untimed
    order = list(range(len(funcs)))
    for _ in range(ROUNDS):
        for i in order:
            start = time.process_time()
            results[i] = funcs[i]()
            times[i].append(time.process_time() - start)
        order.reverse()
    return times, results


def main():
    conf = cfg.CONF
    conf([], project='cyborg', default_config_files=[])
    # Each of the 64 parents has 32 types configured without max_instances:
    # the driver warns about each parent when it is loaded, which is not
    # what is measured here.
    logging.getLogger('cyborg.accelerator.drivers.mdev.driver').setLevel(
        logging.ERROR)
    # An in-memory filesystem, like sysfs, when there is one.
    shm = '/dev/shm' if os.path.isdir('/dev/shm') else None
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        root = pathlib.Path(tmp)
        addresses = build_tree(root)
        specs = [
            json.dumps({'address': a, 'mdev_type': 'nvidia-%d' % t})
            for a in addresses for t in range(TYPES)
        ]
        conf.set_override('device_spec', specs, group='mdev')
        mdev_bus.MDEV_BUS_SYSFS_PATH = str(root)
        driver = mdev_driver.MdevDriver()

        def discover():
            devices = driver.discover()
            return sum(dep.num_accelerators
                       for dev in devices for dep in dev.deployable_list)

        (t_bare, t_disc), (n_bare, n_disc) = time_interleaved(
            [lambda: bare_loop(root, addresses), discover])
    assert n_bare == n_disc, (n_bare, n_disc)
    print('pairs: %d (%d parents x %d types), accelerators: %d, '
          'rounds: %d' % (len(specs), PARENTS, TYPES, n_disc, ROUNDS))
    print('                 min       median')
    for label, times in (('bare sysfs loop', t_bare), ('discover()', t_disc)):
        print('%-15s %6.1f ms %6.1f ms'
              % (label, min(times) * 1000, statistics.median(times) * 1000))
    print('ratio           %6.2fx   %6.2fx   (target <= 2x)'
          % (min(t_disc) / min(t_bare),
             statistics.median(t_disc) / statistics.median(t_bare)))


if __name__ == '__main__':
    main()
