"""The demo's host, shared by its steps (standard library only).

One compute host, ``compute1``, with two mtty-like mdev parents. Every
parent offers the two types of the kernel's mtty sample driver, which draw on
one pool of serial ports (mtty-1 takes one port, mtty-2 two), the model
fakelibvirt's mtty parent follows too. An operator already made one mtty-2
mdev on 0000:41:00.0.

Cyborg is given 0000:41:00.0 (both types, mtty-1 published as VGPU);
Nova keeps 0000:42:00.0 for its own vGPUs (mtty-2).
"""

import json

HOST = 'compute1'
PORTS = 24
MTTY_PORTS_PER_MDEV = {'mtty-1': 1, 'mtty-2': 2}
PARENTS = ['0000:41:00.0', '0000:42:00.0']
# (parent, type) of the mdevs that already exist when the story starts
PRECREATED = [('0000:41:00.0', 'mtty-2')]
# What sysfs says about the PCI device (vendor, device, class): a virtio
# console function stands in for the mtty sample's parent.
PCI_IDS = ('0x1af4', '0x1043', '0x078000')

CYBORG_PARENT = '0000:41:00.0'
NOVA_PARENT = '0000:42:00.0'
DEVICE_SPEC = [
    {'address': CYBORG_PARENT, 'mdev_type': 'mtty-2',
     'traits': ['CUSTOM_MTTY']},
    {'address': CYBORG_PARENT, 'mdev_type': 'mtty-1',
     'resource_class': 'VGPU', 'max_instances': 4},
]
# Nova's own vGPUs: [devices] enabled_mdev_types, [mdev_mtty-2]
NOVA_MDEV_TYPE = 'mtty-2'

DEVICE_PROFILE = 'mtty-dp'
MDEV_RC = 'CUSTOM_MDEV_MTTY_2'


def device_spec_values():
    """[mdev] device_spec as the configuration file holds it."""
    return [json.dumps(spec) for spec in DEVICE_SPEC]


def used_ports(parent):
    return sum(MTTY_PORTS_PER_MDEV[t] for p, t in PRECREATED if p == parent)


def available_instances(parent, mdev_type):
    """What sysfs and libvirt report for a type of a parent right now."""
    return (PORTS - used_ports(parent)) // MTTY_PORTS_PER_MDEV[mdev_type]


def pci_nodedev_name(address):
    """libvirt's node device name of a PCI address."""
    return 'pci_' + address.replace(':', '_').replace('.', '_')
