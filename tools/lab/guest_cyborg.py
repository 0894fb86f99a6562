"""Tier 2, Cyborg: the generic mdev driver on a real kernel mdev bus.

Runs in the lab guest with the cyborg venv's python. The kernel's mtty
sample driver gives /sys/class/mdev_bus/mtty (a virtual parent, not a PCI
device). With [mdev] device_spec naming it and its type mtty-2, the
driver's own discover() must report one deployable whose inventory is the
parent's available plus created mdevs, with one MDEV attach handle each,
and list the created mdev by its UUID (which the conductor compares with
its attach handles' to count mdevs it did not hand out as used).
The attach handles are written to OUT/cyborg-handles.json for the Nova
checks (guest_nova.py).
"""

import json
import os
import sys
import uuid

from labcheck import Checks, expect, read
from plans import TIER2

PARENT = 'mtty'
TYPE = 'mtty-2'
SYSFS = '/sys/class/mdev_bus/%s/mdev_supported_types/%s' % (PARENT, TYPE)
OUT = sys.argv[1] if len(sys.argv) > 1 else '/out'
PCI_FIELDS = ('domain', 'bus', 'device', 'function')
check = Checks('guest_cyborg.py', TIER2['guest_cyborg.py'])


def main():
    from cyborg.accelerator.drivers.mdev import driver as mdev_driver
    from cyborg.conf import CONF

    CONF([], project='cyborg', default_config_files=[])
    CONF.set_override('host', 'lab')
    CONF.set_override('device_spec', [json.dumps(
        {'address': PARENT, 'mdev_type': TYPE})], group='mdev')

    # One mdev made through sysfs before discovery: the inventory must
    # count it ("created") besides what the parent can still make.
    made = str(uuid.uuid4())
    with open(SYSFS + '/create', 'w') as f:
        f.write(made)
    available = int(read(SYSFS + '/available_instances'))
    created = len(os.listdir(SYSFS + '/devices'))
    print('sysfs: %s %s available_instances=%d, created=%d' % (
        PARENT, TYPE, available, created), flush=True)

    devices = check('loads', lambda: mdev_driver.MdevDriver().discover())

    def one_deployable():
        expect(devices, 'discover() found nothing')
        expect(len(devices) == 1, 'expected 1 device, got %d' % len(devices))
        dep = devices[0].deployable_list
        expect(len(dep) == 1, 'expected 1 deployable, got %d' % len(dep))
        return dep[0]
    deployable = check('deployable', one_deployable)

    def inventory():
        expect(deployable, 'no deployable')
        n = deployable.num_accelerators
        expect(n == available + created,
               'num_accelerators %d != available %d + created %d' % (
                   n, available, created))
        rc = [a.value for a in deployable.attribute_list if a.key == 'rc']
        return '%s: %d = %d available + %d created, rc %s' % (
            deployable.name, n, available, created, rc)
    check('inventory', inventory)

    def listed():
        expect(deployable, 'no deployable')
        expect(deployable.mdev_uuids == [made],
               'mdev_uuids %s, not [%s]' % (deployable.mdev_uuids, made))
        return 'mdev_uuids %s' % deployable.mdev_uuids
    check('listed', listed)

    def handles():
        expect(deployable, 'no deployable')
        hs = deployable.attach_handle_list
        expect(len(hs) == deployable.num_accelerators,
               '%d handles for %d accelerators' % (
                   len(hs), deployable.num_accelerators))
        infos = []
        for h in hs:
            expect(h.attach_type == 'MDEV', 'type %s' % h.attach_type)
            info = json.loads(h.attach_info)
            expect(info.get('asked_type') == TYPE, 'asked_type in %s' % info)
            expect(info.get('parent_name') == PARENT,
                   'parent_name in %s' % info)
            pci = [k for k in PCI_FIELDS if k in info]
            expect(not pci, 'PCI fields %s in %s' % (pci, info))
            infos.append(info)
        marks = {i.get('vgpu_mark') for i in infos}
        expect(len(marks) == len(infos), 'handles are not distinct')
        with open(os.path.join(OUT, 'cyborg-handles.json'), 'w') as f:
            json.dump({'deployable': deployable.name, 'handles': infos}, f)
        return '%d MDEV handles, e.g. %s' % (len(infos), infos[0])
    check('handles', handles)

    with open('/sys/bus/mdev/devices/%s/remove' % made, 'w') as f:
        f.write('1')
    return check.finish()


if __name__ == '__main__':
    sys.exit(main())
