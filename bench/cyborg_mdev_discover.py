"""Benchmark: the generic mdev driver's discover() against a bare sysfs loop.

Run from build/cyborg with its venv:

    cd build/cyborg && ../venvs/cyborg/bin/python ../../bench/cyborg_mdev_discover.py

It builds a fake /sys/class/mdev_bus tree of 64 parents x 32 mdev types
(2048 configured pairs, every 8th with created mdevs) in a temporary
directory, then times, best of several rounds:

* discover(): MdevDriver with all 2048 pairs in [mdev] device_spec, its
  MdevBusManager pointed at the fake tree, building every DriverDevice,
  DriverDeployable, attribute and attach handle;
* a bare loop that lists the same directories and reads the same files
  once each with plain os.listdir() and open(), and builds nothing.

Times are CPU time of this process (time.process_time(), user + system,
so the kernel's side of every read counts), which another job on a shared
machine does not inflate the way it does wall-clock time. The tree is put
on /dev/shm when there is one: in memory, like sysfs.

It prints both times and their ratio; the target is a ratio <= 2.
"""

import json
import os
import pathlib
import tempfile
import time

from oslo_config import cfg

import cyborg.conf  # noqa: F401  (registers [mdev])

from cyborg.accelerator.bus_managers import mdev as mdev_bus
from cyborg.accelerator.drivers.mdev import driver as mdev_driver


PARENTS = 64
TYPES = 32
ROUNDS = 7
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


def best_of_interleaved(funcs):
    """Best time of each function over ROUNDS rounds, run in turn.

    Interleaving keeps the load of a shared machine from favouring either.
    """
    best = [None] * len(funcs)
    results = [None] * len(funcs)
    for _ in range(ROUNDS):
        for i, func in enumerate(funcs):
            start = time.process_time()
            results[i] = func()
            elapsed = time.process_time() - start
            best[i] = elapsed if best[i] is None else min(best[i], elapsed)
    return best, results


def main():
    conf = cfg.CONF
    conf([], project='cyborg', default_config_files=[])
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

        (t_bare, t_disc), (n_bare, n_disc) = best_of_interleaved(
            [lambda: bare_loop(root, addresses), discover])
    assert n_bare == n_disc, (n_bare, n_disc)
    print('pairs: %d (%d parents x %d types), accelerators: %d'
          % (len(specs), PARENTS, TYPES, n_disc))
    print('bare sysfs loop: %.1f ms' % (t_bare * 1000))
    print('discover():      %.1f ms' % (t_disc * 1000))
    print('ratio: %.2fx (target <= 2x)' % (t_disc / t_bare))


if __name__ == '__main__':
    main()
