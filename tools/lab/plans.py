"""The checks of tier 2's guest scripts, named before anything runs.

tools/lab/run.py counts every one of them: a check that the guest never
reported (the lab could not be set up, the guest did not boot, a script
stopped early) is a FAIL that says why it did not run. The scripts
(guest_cyborg.py, guest_nova.py) report them by key, through
labcheck.Checks. Standard library only: run.py imports it on the host.
"""

TIER2 = {
    'guest_cyborg.py': {
        'loads': 'cyborg: MdevDriver loads with [mdev] device_spec address '
                 '"mtty" (the mdev_bus name)',
        'deployable': 'cyborg: discover() reports the mtty parent with one '
                      'deployable for mtty-2',
        'inventory': 'cyborg: inventory is available + created mdevs',
        'listed': 'cyborg: the mdev made before is listed by its UUID (the '
                  'conductor counts it as used: it is no attach handle\'s)',
        'handles': 'cyborg: one MDEV attach handle per mdev, naming parent '
                   '"mtty" and type mtty-2, no PCI fields',
    },
    'guest_nova.py': {
        'handles': 'nova: Cyborg attach handles to build ARQs from',
        'driver': 'nova: LibvirtDriver with a real Host on qemu:///system',
        'partition': 'nova: accelerators.partition() accepts the MDEV ARQ '
                     'of the virtual parent',
        'ensure': 'nova: _ensure_cyborg_mdevs() makes the persistent mdev '
                  '(libvirt, mdevctl --defined, sysfs), claimed by the '
                  'instance',
        'compose': 'nova: _get_guest_xml() composes the mdev hostdev '
                   '(_get_guest_config -> _guest_add_accelerators)',
        'start': "nova: _create_guest() defines and starts the type='qemu' "
                 "guest with the mdev (paused)",
        'second': 'nova: a second guest on the same mdev is refused (and '
                  "its cleanup keeps the first guest's mdev)",
        'destroy': 'nova: destroy() (the delete path) removes the guest and '
                   'the mdev, available_instances is back',
        'reused': 'nova: an attach handle freed by one instance and bound to '
                  "the next: the first one's cleanup keeps the second one's "
                  'mdev',
        'resumed': 'nova: the resume path after a libvirtd restart, with the '
                   'mdev and its definition gone, brings the guest back with '
                   'it',
        'bad_uuid': 'nova: bad input, an attach_handle_uuid that is no uuid: '
                    'a clear error, nothing left behind',
        'bad_type': 'nova: bad input, a type the parent lacks (mtty-9): a '
                    'clear error, nothing left behind',
        'bad_parent': 'nova: bad input, a parent that does not exist '
                      '(nosuch): a clear error, nothing left behind',
        'unknown': 'nova: bad input, an mdev uuid libvirt does not know: the '
                   'guest is refused, nothing left behind',
        'taken': 'nova: bad input, the uuid of an existing mdev of another '
                 'type: a clear error, that mdev kept',
        'unlisted': 'nova: bad input, the uuid of an mdev libvirt lists only '
                    "after Nova's listing: a clear error, that mdev kept",
    },
}
