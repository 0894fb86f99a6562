#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A compute upgraded from the 2026.1 backport of Cyborg-managed mdevs.

The backport (nova 33.0.2 with the Cyborg mdev series) leaves on a compute:
persistent, autostarted mdevs of the instances' MDEV ARQs, of PCI parents and
of parents given by parent_name (mtty); guests whose domain XML names them by
uuid (<hostdev type='mdev'><source><address uuid=.../></source></hostdev>);
and its record of them, <state_path>/cyborg_mdevs/<host>.json, in which an
mdev may be one Nova only found (made by Cyborg) or one whose removal failed
for an instance that is gone. Its mdevs and domains are made by the same
libvirt calls as here, so the tests boot the instances here, then put the
record back as the backport writes it, with what it leaves of a deleted
instance, and restart the compute: the upgrade.
"""

import os

from oslo_config import cfg
from oslo_serialization import jsonutils
from oslo_utils.fixture import uuidsentinel as uuids

from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import test_cyborg_mdev

CONF = cfg.CONF


def write_backport_record(state_path, host, entries):
    """Write the record of Cyborg mdevs as the 2026.1 backport writes it.

    Byte for byte what its MdevLedger._write() makes: version 1, the host,
    every entry with all its six fields, indented by 2, keys sorted, no
    newline at the end.

    :param entries: {mdev uuid: (instance, parent, type, owned,
        pending_removal, last_error)}
    """
    fields = ('instance', 'parent', 'type', 'owned', 'pending_removal',
              'last_error')
    data = {'version': 1, 'host': host,
            'mdevs': {mdev: dict(zip(fields, entry))
                      for mdev, entry in entries.items()}}
    path = os.path.join(state_path, 'cyborg_mdevs', '%s.json' % host)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        jsonutils.dump(data, f, indent=2, sort_keys=True)


class UpgradeFromBackportTests(test_cyborg_mdev.CyborgMdevTestBase):
    """Instances booted on the backport keep working after the upgrade."""

    MTTY_CLASS = 'CUSTOM_MDEV_MTTY_2'

    def setUp(self):
        super().setUp()
        self.flags(shelved_offload_time=0)
        self.start_mdev_compute('compute1', mtty=True)
        self.gpu_rp = self.add_cyborg_mdev_provider('compute1', self.PARENT1)
        self.add_cyborg_mdev_provider(
            'compute1', fakelibvirt.MTTY_PARENT_NAME,
            resource_class=self.MTTY_CLASS, mdev_type=fakelibvirt.MTTY_TYPE,
            handle_info={'parent_name': 'mtty',
                         'asked_type': fakelibvirt.MTTY_TYPE})
        gpu_flavor = self.create_cyborg_flavor('gpu')
        mtty_flavor = self.create_cyborg_flavor(
            'mtty', resource_class=self.MTTY_CLASS)

        self.gpu_server = self._create_server(
            flavor_id=gpu_flavor, networks='none')
        self.mtty_server = self._create_server(
            flavor_id=mtty_flavor, networks='none')
        # an instance whose mdev Cyborg made (transient, at bind time)
        handle = self.cyborg.attach_handles[self.gpu_rp][1]
        self.connection('compute1').nodeDeviceCreateXML(
            self.mdev_xml(self.PARENT1, self.MDEV_TYPE, handle['uuid']), 0)
        self.found_server = self._create_server(
            flavor_id=gpu_flavor, networks='none')
        self.assertEqual([handle['uuid']], self.arq_mdevs(self.found_server))

        # what the backport leaves on the host
        self.gpu_mdev, = self.arq_mdevs(self.gpu_server)
        self.mtty_mdev, = self.arq_mdevs(self.mtty_server)
        self.found_mdev = handle['uuid']
        self.computes['compute1'].stop()
        # the mdev of an instance deleted on the backport, whose removal
        # failed: persistent and autostarted, as it made it
        conn = self.connection('compute1')
        xml = self.mdev_xml(self.PARENT1, self.MDEV_TYPE, uuids.gone_mdev)
        conn.nodeDeviceCreateXML(xml, 0)
        conn.nodeDeviceDefineXML(xml, 0).setAutostart(True)
        self.entries = {
            self.gpu_mdev: (self.gpu_server['id'], self.PARENT1,
                            self.MDEV_TYPE, True, False, None),
            self.mtty_mdev: (self.mtty_server['id'],
                             fakelibvirt.MTTY_PARENT_NAME,
                             fakelibvirt.MTTY_TYPE, True, False, None),
            self.found_mdev: (self.found_server['id'], self.PARENT1,
                              self.MDEV_TYPE, False, False, None),
            uuids.gone_mdev: (uuids.gone, self.PARENT1, self.MDEV_TYPE,
                              True, True, 'mdevctl stop: device busy'),
        }
        write_backport_record(CONF.state_path, 'compute1', self.entries)

        # the upgrade
        self.restart_compute_service('compute1')

    @staticmethod
    def mdev_xml(parent, mdev_type, mdev_uuid):
        return ("<device><parent>%s</parent><capability type='mdev'>"
                "<type id='%s'/><uuid>%s</uuid></capability></device>" % (
                    parent, mdev_type, mdev_uuid))

    def recorded(self, mdev):
        """An entry of the host's record as the backport's tuple."""
        entry = self.record()[mdev]
        return (entry['instance'], entry['parent'], entry['type'],
                entry['owned'], entry['pending_removal'], entry['last_error'])

    def available(self, parent, mdev_type):
        """How many more mdevs of that type the parent can make."""
        dev = self.connection('compute1').pci_info.get_device_by_name(parent)
        return dev.mdev_types()[mdev_type] - dev.active_mdevs[mdev_type]

    def test_upgrade_removes_what_the_backport_failed_to_remove(self):
        self.assertNotIn(uuids.gone_mdev, self.host_mdevs('compute1'))
        self.assertEqual({self.gpu_mdev, self.mtty_mdev, self.found_mdev},
                         set(self.record()))
        for mdev in (self.gpu_mdev, self.mtty_mdev, self.found_mdev):
            self.assertEqual(self.entries[mdev], self.recorded(mdev))

    def test_hard_reboot_keeps_the_mdevs(self):
        for server in (self.gpu_server, self.mtty_server, self.found_server):
            mdevs = self.arq_mdevs(server)
            self._reboot_server(server, hard=True)
            self.assertEqual(mdevs, self.guest_mdevs('compute1', server))
            self.assertEqual(self.entries[mdevs[0]],
                             self.recorded(mdevs[0]))
        self.assertEqual(
            {self.gpu_mdev: (self.PARENT1, self.MDEV_TYPE, True, True, True),
             self.mtty_mdev: (fakelibvirt.MTTY_PARENT_NAME,
                              fakelibvirt.MTTY_TYPE, True, True, True),
             self.found_mdev: (self.PARENT1, self.MDEV_TYPE, True, False,
                               False)},
            self.host_mdevs('compute1'))

    def test_shelve_and_unshelve(self):
        for server in (self.gpu_server, self.mtty_server):
            self._shelve_server(server)
        self.assertEqual({self.found_mdev}, set(self.host_mdevs('compute1')))
        self.assertEqual({self.found_mdev}, set(self.record()))

        for server in (self.gpu_server, self.mtty_server):
            server = self._unshelve_server(server)
            mdevs = self.arq_mdevs(server)
            self.assertEqual(mdevs, self.guest_mdevs('compute1', server))
            self.assertEqual(server['id'], self.record()[mdevs[0]]['instance'])
            self.assertTrue(self.record()[mdevs[0]]['owned'])

    def test_delete_leaks_nothing(self):
        for server in (self.gpu_server, self.mtty_server, self.found_server):
            self._delete_server(server)

        # only the mdev Cyborg made is left, as it was: Nova did not make it
        self.assertEqual(
            {self.found_mdev: (self.PARENT1, self.MDEV_TYPE, True, False,
                               False)},
            self.host_mdevs('compute1'))
        self.assertEqual({}, self.record())
        self.assertEqual(16 - 1, self.available(self.PARENT1, self.MDEV_TYPE))
        self.assertEqual(8, self.available(fakelibvirt.MTTY_PARENT_NAME,
                                           fakelibvirt.MTTY_TYPE))
