"""Demo steps 2 to 6: Nova's functional environment, end to end.

Run with the Nova venv's python from build/nova, with the environment of
Nova's functional tox env:

    nova_step.py CYBORG_JSON OUT_JSON

Everything runs in one test of Nova's own functional harness (ServersTestBase):
the real Placement fixture, the API, conductor and scheduler services, and a
nova-compute with the libvirt driver on fakelibvirt, whose host has the mtty
parents of the Cyborg step's sysfs tree. Cyborg's providers are made by
sending Placement the very requests Cyborg's conductor sent in the Cyborg
step; the fake Cyborg binds ARQs to the attach handles Cyborg's driver made.
Every domain and node-device XML Nova sends to libvirt is recorded and, at
the end, validated against libvirt's RelaxNG schemas.
"""

import json
import logging
import os
import re
import sys
import time
import traceback
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tools/: libvirt_schemas
import story  # noqa: E402

import fixtures  # noqa: E402
from lxml import etree  # noqa: E402
import os_traits  # noqa: E402

import nova.conf  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler.client import report  # noqa: E402
from nova.tests import fixtures as nova_fixtures  # noqa: E402
from nova.tests.fixtures import libvirt as fakelibvirt  # noqa: E402
from nova.tests.functional.libvirt import base  # noqa: E402
from nova.virt.libvirt import config as vconfig  # noqa: E402

RECORD = {'checks': [], 'steps': {}, 'xml': []}
CYBORG = {}


def check(step, name, ok, detail=''):
    RECORD['checks'].append(
        {'step': step, 'name': name, 'ok': bool(ok), 'detail': str(detail)})
    return ok


class Missing(Exception):
    """A feature the story needs is not in the tree."""


class Stop(Exception):
    """The story cannot go on; a failed check says why."""


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []
        self.setFormatter(logging.Formatter(
            '%(levelname)s %(name)s %(message)s'))

    def emit(self, record):
        self.lines.append(self.format(record))


class FakeCyborg(object):
    """The Nova series' fake Cyborg, as the line being run spells it.

    Nova 34 + patches/nova34 has CyborgMdevFixture(release), a Cyborg of
    device profiles and per-provider attach handles; nova 33 + patches/nova
    has CyborgFixture(mdev_release), whose profiles carry their handles.
    The story needs the same four things of either.
    """

    @staticmethod
    def of_this_nova():
        fixture = getattr(nova_fixtures, 'CyborgMdevFixture', None)
        if fixture is not None:
            return Cyborg34(fixture(fixture.RELEASE_SERIES))
        release = getattr(nova_fixtures.CyborgFixture, 'RELEASE_SERIES',
                          None)
        if release is None:
            raise Missing('the fake Cyborg models no Cyborg release with the '
                          'generic mdev driver: the Nova series\' fixture '
                          'patch is not applied')
        return Cyborg33(nova_fixtures.CyborgFixture(release))


class Cyborg33(fixtures.Fixture):
    def __init__(self, fixture):
        super().__init__()
        self.fixture = fixture

    def _setUp(self):
        self.useFixture(self.fixture)

    @property
    def sysfs_of_host(self):
        return self.fixture.sysfs_of_host

    @sysfs_of_host.setter
    def sysfs_of_host(self, value):
        self.fixture.sysfs_of_host = value

    def add_device_profile(self, name, groups, handles):
        self.fixture.add_device_profile(name, groups, handles)

    def arqs_of(self, instance_uuid):
        return self.fixture._get_arqs_shown_for_instance(instance_uuid)

    def handles_in_use(self, dp_name):
        return sorted(self.fixture.handles_in_use(dp_name))


class Cyborg34(Cyborg33):
    def add_device_profile(self, name, groups, handles):
        self.fixture.add_device_profile(name, groups)
        for handle in handles:
            self.fixture.add_attach_handles(
                handle['rp_uuid'], handle['type'], [handle['info']],
                uuids=[handle['uuid']])

    def arqs_of(self, instance_uuid):
        return self.fixture.fake_get_arqs_shown_for_instance(instance_uuid)

    def handles_in_use(self, dp_name):
        return sorted(self.fixture.handles_in_use())


class HostMdevs(object):
    """fakelibvirt's mdevs of a host, as the line being run spells them.

    Nova 33 + patches/nova keeps FakeMdev in Connection._mdevs (``type``,
    ``autostart_flag``, found by Connection.mdev_by_uuid()); nova 34 +
    patches/nova34 keeps FakeMdevDevice in Connection.mdev_info
    (``type_id``, ``autostart``, found by mdev_info.find_by_uuid()). Both
    have the mdevs that are active or only defined.
    """

    def __init__(self, conn):
        self.conn = conn
        self.line33 = hasattr(conn, 'mdev_by_uuid')

    def by_name(self):
        return (self.conn._mdevs if self.line33
                else self.conn.mdev_info.devices)

    def find(self, uuid):
        """The mdev of that uuid (the fixture's own object), or None."""
        if self.line33:
            return self.conn.mdev_by_uuid(uuid)
        return self.conn.mdev_info.find_by_uuid(uuid)

    def type_of(self, mdev):
        return mdev.type if self.line33 else mdev.type_id

    def autostarts(self, mdev):
        return mdev.autostart_flag if self.line33 else mdev.autostart


class NovaStory(base.ServersTestBase):

    microversion = 'latest'
    ADMIN_API = True

    def setUp(self):
        super().setUp()
        self.log = ListHandler()
        logging.getLogger().addHandler(self.log)
        self.addCleanup(logging.getLogger().removeHandler, self.log)
        # the Cyborg step's Cyborg: its MDEV attach handles say that Nova
        # owns their mdevs ("mdev_owner": "nova"), it makes none
        self.cyborg = self.useFixture(FakeCyborg.of_this_nova())
        # (what writes the host's sysfs, should Cyborg remove an mdev: the
        # demo's one host)
        self.cyborg.sysfs_of_host = lambda hostname: self.conn
        self.ctxt = nova_context.get_admin_context()
        self._record_libvirt_xml()
        self._record_candidate_queries()

    # -- recording ----------------------------------------------------------

    def _record_libvirt_xml(self):
        def wrap(method, kind):
            real = getattr(fakelibvirt.Connection, method)

            def call(conn, xml, *args, **kwargs):
                RECORD['xml'].append({
                    'kind': kind, 'call': method, 'xml': xml,
                    'when': self.now})
                return real(conn, xml, *args, **kwargs)
            self.stub_out('nova.tests.fixtures.libvirt.Connection.' + method,
                          call)
        self.now = 'start'
        wrap('defineXML', 'domain')
        wrap('createXML', 'domain')
        wrap('nodeDeviceCreateXML', 'nodedev')
        wrap('nodeDeviceDefineXML', 'nodedev')

    def _record_candidate_queries(self):
        real = report.SchedulerReportClient.get_allocation_candidates
        self.queries = []

        def call(client, context, resources):
            res = real(client, context, resources)
            self.queries.append({
                'query': resources.to_querystring(),
                'candidates': [sorted(
                    (rp, sorted(a['resources'].items()))
                    for rp, a in req['allocations'].items())
                    for req in (res[0] or [])]})
            return res
        self.stub_out('nova.scheduler.client.report.SchedulerReportClient.'
                      'get_allocation_candidates', call)

    # -- helpers ------------------------------------------------------------

    @property
    def conn(self):
        return self.compute.driver._host.get_connection()

    def provider_tree(self):
        """Every provider of the compute node's tree, as Placement has it."""
        root = self.compute_rp_uuids[story.HOST]
        rps = self.placement.get(
            '/resource_providers?in_tree=%s' % root,
            version='1.14').body['resource_providers']
        tree = []
        for rp in rps:
            inv = self.placement.get(
                '/resource_providers/%s/inventories' % rp['uuid'],
                version='1.14').body['inventories']
            usages = self.placement.get(
                '/resource_providers/%s/usages' % rp['uuid'],
                version='1.14').body['usages']
            traits = self.placement.get(
                '/resource_providers/%s/traits' % rp['uuid'],
                version='1.14').body['traits']
            tree.append({
                'uuid': rp['uuid'], 'name': rp['name'],
                'parent_uuid': rp['parent_provider_uuid'],
                'inventories': {rc: {'total': v['total'],
                                     'used': usages.get(rc, 0)}
                                for rc, v in inv.items()},
                'traits': sorted(traits)})
        return tree

    def rp_name(self, uuid):
        return self.placement.get(
            '/resource_providers/%s' % uuid, version='1.14').body['name']

    def allocation(self, server):
        alloc = self._get_allocations_by_server_uuid(server['id'])
        return {self.rp_name(rp): a['resources'] for rp, a in alloc.items()}

    def domain_xml(self, server):
        return self.compute.driver._host.get_guest(
            objects.Instance.get_by_uuid(self.ctxt, server['id'])
        ).get_xml_desc()

    def claims(self, server):
        """{mdev uuid: Claim} a server, deleted or not, holds."""
        try:
            from nova.virt.libvirt import cyborg_mdev
        except ImportError:
            raise Missing('the libvirt driver keeps no claims on Cyborg '
                          'mdevs: the Nova series is not applied')
        ctxt = nova_context.get_admin_context(read_deleted='yes')
        instance = objects.Instance.get_by_uuid(
            ctxt, server['id'], expected_attrs=['system_metadata'])
        return cyborg_mdev.get_claims(instance)

    @staticmethod
    def hostdevs(xml):
        out = []
        for hostdev in etree.fromstring(xml).findall('./devices/hostdev'):
            hostdev.tail = None
            etree.indent(hostdev)
            out.append(etree.tostring(hostdev, encoding='unicode'))
        return out

    @staticmethod
    def hostdev_types(xml):
        return [h.get('type') for h in etree.fromstring(xml).findall(
            './devices/hostdev')]

    @staticmethod
    def hostdev_uuids(xml):
        return [a.get('uuid') for a in etree.fromstring(xml).findall(
            "./devices/hostdev[@type='mdev']/source/address")]

    def node_devices(self):
        """Every mdev libvirt knows, active or only defined."""
        devs = []
        mdevs = HostMdevs(self.conn)
        for name, mdev in sorted(mdevs.by_name().items()):
            devs.append({
                'name': name, 'parent': mdev.parent(),
                'type': mdevs.type_of(mdev), 'uuid': mdev.uuid,
                'active': bool(mdev.active),
                'persistent': bool(mdev.persistent),
                'autostart': bool(mdevs.autostarts(mdev))})
        return devs

    def parent_available(self):
        """{parent address: {type: availableInstances}} as libvirt says."""
        out = {}
        for address in story.PARENTS:
            dev = self.conn.nodeDeviceLookupByName(
                story.pci_nodedev_name(address))
            doc = etree.fromstring(dev.XMLDesc(0))
            out[address] = {
                t.get('id'): int(t.findtext('availableInstances'))
                for t in doc.findall(
                    "./capability/capability[@type='mdev_types']/type")}
        return out

    def boot(self, step, name, flavor):
        """A server booted through the API; a failed check if not ACTIVE."""
        try:
            server = self._create_server(
                name=name, flavor_id=flavor, networks='none')
        except AssertionError:
            (server,) = [s for s in self.api.get_servers()
                         if s['name'] == name]
            server = self.api.get_server(server['id'])
            check(step, 'server %s ACTIVE' % name, False, '%s: %s' % (
                server['status'], server.get('fault', {}).get('message')))
            raise Stop(name)
        check(step, 'server %s ACTIVE' % name, True)
        return server

    # -- the story ----------------------------------------------------------

    def test_story(self):
        self.step2_host_and_placement()
        self.step3_cyborg_server()
        self.step4_nova_vgpu()
        self.step5_lifecycle()

    def step2_host_and_placement(self):
        step = RECORD['steps']['2'] = {}
        # Nova's own vGPUs: one mdev type on one parent only
        self.flags(enabled_mdev_types=[story.NOVA_MDEV_TYPE],
                   group='devices')
        nova.conf.devices.register_dynamic_opts(nova.conf.CONF)
        self.flags(device_addresses=[story.NOVA_PARENT],
                   group='mdev_%s' % story.NOVA_MDEV_TYPE)
        # nova-compute's own calls to Cyborg (host boot, the periodic
        # clean-up of deleted instances) use the [cyborg] credentials
        self.flags(auth_type='none', group='cyborg')
        pci_info = fakelibvirt.HostPCIDevicesInfo(
            num_pci=0, num_pfs=0, num_vfs=0)
        if not hasattr(pci_info, 'add_mtty_parent'):
            raise Missing('fakelibvirt has no mtty parent: the Nova series\' '
                          'fixture patch is not applied')
        for address in story.PARENTS:
            pci_info.add_mtty_parent(bus=int(address.split(':')[1], 16))
        self.start_compute(hostname=story.HOST, pci_info=pci_info)
        self.compute = self.computes[story.HOST]

        # the mdev an operator made before (the Cyborg step's sysfs has it)
        for parent, types in CYBORG['sysfs'].items():
            for mdev_type, info in types.items():
                for uuid in info['devices']:
                    dev = vconfig.LibvirtConfigNodeDevice()
                    dev.parent = story.pci_nodedev_name(parent)
                    dev.mdev_information = (
                        vconfig.LibvirtConfigNodeDeviceMdevInformation())
                    dev.mdev_information.type = mdev_type
                    dev.mdev_information.uuid = uuid
                    self.now = 'operator (the demo)'
                    self.conn.nodeDeviceCreateXML(dev.to_xml(), 0)
        libvirt_view = self.parent_available()
        sysfs_view = {p: {t: i['available_instances']
                          for t, i in types.items()}
                      for p, types in CYBORG['sysfs'].items()}
        step['libvirt_parents'] = libvirt_view
        check(2, 'fakelibvirt\'s mtty parents match the sysfs tree '
              '(types, available instances)', libvirt_view == sysfs_view,
              'libvirt %s, sysfs %s' % (libvirt_view, sysfs_view))

        # Cyborg's providers: replay its conductor's requests
        root = self.compute_rp_uuids[story.HOST]
        fake_root = CYBORG['root_uuid']
        replayed = []
        for req in CYBORG['placement_requests']:
            url = '/' + req['url'].lstrip('/').replace(fake_root, root)
            body = req['body']
            if body is not None:
                body = json.loads(json.dumps(body).replace(fake_root, root))
            kw = {'version': req['version']} if req['version'] else {}
            method = getattr(self.placement, req['method'].lower())
            if req['method'] in ('PUT', 'POST'):
                resp = method(url, body, **kw)
            else:
                resp = method(url, **kw)
            replayed.append({'method': req['method'], 'url': url,
                             'cyborg_fixture': req['status'],
                             'placement': resp.status})
        step['replayed'] = replayed
        differ = [r for r in replayed
                  if (r['cyborg_fixture'] < 400) != (r['placement'] < 400)]
        check(2, 'real Placement accepts every request Cyborg\'s conductor '
              'sent (%d requests)' % len(replayed), not differ, differ)
        tree = self.provider_tree()
        step['tree'] = tree
        by_name = {rp['name']: rp for rp in tree}
        for want in CYBORG['providers']:
            if want['parent_uuid'] is None:
                continue
            got = by_name.get(want['name'])
            ok = got is not None and (
                got['uuid'], got['parent_uuid'], got['traits'],
                {rc: v['total'] for rc, v in got['inventories'].items()}
            ) == (want['uuid'], root, want['traits'],
                  {rc: v['total'] for rc, v in want['inventories'].items()})
            check(2, 'Cyborg provider %s under %s in Placement' % (
                want['name'], story.HOST), ok, got)
        owners = {rp['name']: [t for t in rp['traits']
                               if t.startswith('OWNER_')] for rp in tree}
        nova_rps = [rp['name'] for rp in tree
                    if rp['name'] not in {p['name']
                                          for p in CYBORG['providers']
                                          if p['parent_uuid']}]
        check(2, 'every provider nova-compute made carries OWNER_NOVA',
              all(owners[n] == [os_traits.OWNER_NOVA] for n in nova_rps),
              owners)

    def step3_cyborg_server(self):
        step = RECORD['steps']['3'] = {}
        self.now = 'boot cyborg-server'
        mtty_rp = [p for p in CYBORG['providers']
                   if story.MDEV_RC in p['inventories']][0]
        handles = [{'type': h['type'], 'info': h['info'], 'uuid': h['uuid'],
                    'rp_uuid': h['rp_uuid']}
                   for h in CYBORG['attach_handles']
                   if h['rp_uuid'] == mtty_rp['uuid']]
        groups = [{'resources:' + story.MDEV_RC: 1,
                   'trait:CUSTOM_MTTY': 'required',
                   'trait:' + os_traits.OWNER_CYBORG: 'required'}]
        self.cyborg.add_device_profile(story.DEVICE_PROFILE, groups, handles)
        flavor = self._create_flavor(
            name='accel.mtty',
            extra_spec={'accel:device_profile': story.DEVICE_PROFILE})
        step['device_profile'] = {'name': story.DEVICE_PROFILE,
                                  'groups': groups,
                                  'attach_handles': len(handles)}
        step['flavor'] = {'name': 'accel.mtty', 'extra_specs': {
            'accel:device_profile': story.DEVICE_PROFILE}}
        server = self.boot(3, 'cyborg-server', flavor)
        self.cyborg_server = server
        step['server'] = {'id': server['id'], 'status': server['status']}
        step['query'] = self.queries[-1]
        alloc = self.allocation(server)
        step['allocation'] = alloc
        check(3, 'allocation takes 1 %s from Cyborg\'s provider %s' % (
            story.MDEV_RC, mtty_rp['name']),
            alloc.get(mtty_rp['name']) == {story.MDEV_RC: 1}, alloc)
        (arq,) = self.cyborg.arqs_of(server['id'])
        self.arq = arq
        step['arq'] = {k: arq[k] for k in (
            'uuid', 'state', 'device_rp_uuid', 'attach_handle_type',
            'attach_handle_uuid', 'attach_handle_info')}
        check(3, 'ARQ bound to an attach handle Cyborg\'s driver made',
              arq['state'] == 'Bound' and arq['attach_handle_uuid'] in {
                  h['uuid'] for h in handles}, arq['attach_handle_uuid'])
        xml = self.domain_xml(server)
        step['hostdevs'] = self.hostdevs(xml)
        check(3, 'guest has one hostdev, type mdev, uuid = the ARQ\'s '
              'attach handle', self.hostdev_types(xml) == ['mdev'] and
              self.hostdev_uuids(xml) == [arq['attach_handle_uuid']],
              step['hostdevs'])
        devs = self.node_devices()
        step['node_devices'] = devs
        mine = [d for d in devs if d['uuid'] == arq['attach_handle_uuid']]
        check(3, 'node device for it: parent %s, type mtty-2, persistent, '
              'autostart' % story.pci_nodedev_name(story.CYBORG_PARENT),
              len(mine) == 1 and (
                  mine[0]['parent'], mine[0]['type'], mine[0]['active'],
                  mine[0]['persistent'], mine[0]['autostart']) == (
                  story.pci_nodedev_name(story.CYBORG_PARENT), 'mtty-2',
                  True, True, True), mine)
        claim = self.claims(server).get(arq['attach_handle_uuid'])
        step['claim'] = claim and {
            'instance': server['id'], 'node': claim.node,
            'parent': claim.parent, 'type': claim.type,
            'owned': claim.owned_by_nova}
        check(3, 'nova-compute recorded the mdev as its own, for this '
              'server, in the server\'s claims', claim is not None and (
                  claim.node, claim.owned_by_nova) == (
                  self.compute_rp_uuids[story.HOST], True), step['claim'])
        avail = self.parent_available()
        step['libvirt_parents'] = avail
        before = story.available_instances(story.CYBORG_PARENT, 'mtty-2')
        check(3, 'parent %s has one mtty-2 fewer (%d -> %d)' % (
            story.CYBORG_PARENT, before, before - 1),
            avail[story.CYBORG_PARENT]['mtty-2'] == before - 1, avail)

    def step4_nova_vgpu(self):
        step = RECORD['steps']['4'] = {}
        self.now = 'boot nova-vgpu-server'
        flavor = self._create_flavor(
            name='vgpu', extra_spec={'resources:VGPU': '1'})
        step['flavor'] = {'name': 'vgpu',
                          'extra_specs': {'resources:VGPU': '1'}}
        raw = self.placement.get(
            '/allocation_candidates?resources=VGPU:1',
            version='1.36').body['allocation_requests']
        step['raw_vgpu_candidates'] = sorted(
            self.rp_name(rp) for req in raw for rp in req['allocations'])
        server = self.boot(4, 'nova-vgpu-server', flavor)
        self.nova_server = server
        step['query'] = self.queries[-1]
        step['query']['candidates'] = [
            [(self.rp_name(rp), res) for rp, res in cand]
            for cand in step['query']['candidates']]
        alloc = self.allocation(server)
        step['allocation'] = alloc
        nova_pgpu = '%s_%s' % (story.HOST,
                               story.pci_nodedev_name(story.NOVA_PARENT))
        cyborg_rps = {p['name'] for p in CYBORG['providers']
                      if p['parent_uuid']}
        check(4, 'VGPU allocated on Nova\'s pGPU provider %s' % nova_pgpu,
              alloc.get(nova_pgpu) == {'VGPU': 1}, alloc)
        check(4, 'nothing allocated on Cyborg\'s providers, though one '
              'offers VGPU', not (set(alloc) & cyborg_rps) and any(
                  n in cyborg_rps for n in step['raw_vgpu_candidates']),
              alloc)
        query = urllib.parse.parse_qs(step['query']['query'])
        check(4, 'Nova\'s request forbids OWNER_CYBORG, its compute node '
              'requires OWNER_NOVA', query.get('required') == [
                  '!OWNER_CYBORG'] and 'OWNER_NOVA' in
              query.get('root_required', [''])[0].split(','), query)
        xml = self.domain_xml(server)
        step['hostdevs'] = self.hostdevs(xml)
        (uuid,) = self.hostdev_uuids(xml) or [None]
        mdevs = HostMdevs(self.conn)
        mdev = mdevs.find(uuid) if uuid else None
        step['mdev'] = mdev and {'uuid': uuid, 'parent': mdev.parent(),
                                 'type': mdevs.type_of(mdev)}
        check(4, 'its mdev is on Nova\'s parent %s' % story.NOVA_PARENT,
              mdev is not None and (mdev.parent(),
                                    mdevs.type_of(mdev)) == (
                  story.pci_nodedev_name(story.NOVA_PARENT),
                  story.NOVA_MDEV_TYPE), step['mdev'])
        check(4, 'the Cyborg server still has exactly its own mdev',
              self.hostdev_uuids(self.domain_xml(self.cyborg_server)) ==
              [self.arq['attach_handle_uuid']])
        step['tree'] = self.provider_tree()

    def step5_lifecycle(self):
        step = RECORD['steps']['5'] = {}
        uuid = self.arq['attach_handle_uuid']
        mdevs = HostMdevs(self.conn)
        mdev = mdevs.find(uuid)
        self.now = 'hard reboot cyborg-server'
        self._reboot_server(self.cyborg_server, hard=True)
        after = mdevs.find(uuid)
        step['reboot'] = {
            'hostdev_uuids': self.hostdev_uuids(
                self.domain_xml(self.cyborg_server)),
            'same_mdev': after is mdev}
        check(5, 'hard reboot: same persistent mdev, same hostdev',
              after is mdev and after.persistent and after.active and
              step['reboot']['hostdev_uuids'] == [uuid], step['reboot'])

        self.now = 'delete'
        rp = [p['uuid'] for p in CYBORG['providers']
              if story.MDEV_RC in p['inventories']][0]
        pgpu = [p['uuid'] for p in self.provider_tree()
                if p['name'].endswith(
                    story.pci_nodedev_name(story.NOVA_PARENT))][0]
        before = {'placement': self._get_provider_usages(rp)[story.MDEV_RC],
                  'parent': self.parent_available()}
        self._delete_server(self.cyborg_server)
        self._delete_server(self.nova_server)
        after = {'placement': self._get_provider_usages(rp)[story.MDEV_RC],
                 'parent': self.parent_available()}
        step['delete'] = {'before': before, 'after': after,
                          'node_devices': self.node_devices(),
                          'handles_in_use': self.cyborg.handles_in_use(
                              story.DEVICE_PROFILE)}
        check(5, 'delete: %s usage back to 0 in Placement' % story.MDEV_RC,
              before['placement'] == 1 and after['placement'] == 0,
              (before['placement'], after['placement']))
        check(5, 'delete: VGPU usage of Nova\'s pGPU back to 0',
              self._get_provider_usages(pgpu)['VGPU'] == 0)
        start = {t: story.available_instances(story.CYBORG_PARENT, t)
                 for t in story.MTTY_PORTS_PER_MDEV}
        check(5, 'delete: Cyborg\'s parent %s back to its starting '
              'capacity %s' % (story.CYBORG_PARENT, start),
              after['parent'][story.CYBORG_PARENT] == start, after['parent'])
        left = {d['uuid']: d['parent'] for d in step['delete']['node_devices']}
        pre = {u for t in CYBORG['sysfs'].values() for i in t.values()
               for u in i['devices']}
        nova_parent = story.pci_nodedev_name(story.NOVA_PARENT)
        check(5, 'delete: the mdev made for the ARQ is gone, the '
              'operator\'s stays; Nova keeps its own vGPU mdev for reuse',
              uuid not in left and pre <= set(left) and all(
                  p == nova_parent for u, p in left.items()
                  if u not in pre), left)
        check(5, 'delete: attach handle released',
              step['delete']['handles_in_use'] == [])
        # A deleted instance keeps its claims until nova-compute's periodic
        # clean-up of deleted instances finds Cyborg binds none of its ARQs
        # on the host any more (so that a failed unbind is retried).
        self.compute.manager._run_pending_deletes(
            nova_context.get_admin_context())
        left = self.claims(self.cyborg_server)
        check(5, 'delete: once the periodic clean-up of deleted instances '
              'ran, the deleted server claims no mdev any more',
              left == {}, left)
        step['tree'] = self.provider_tree()
        step['log'] = self.log.lines


def validate():
    """Step 6: every XML Nova sent to libvirt, against libvirt's schemas."""
    step = RECORD['steps']['6'] = {}
    try:
        import libvirt_schemas
        validator = libvirt_schemas.Validator()
    except Exception as e:
        check(6, 'libvirt RelaxNG schemas available', False, e)
        return
    step['results'] = []
    for doc in RECORD['xml']:
        errors = (validator.domain(doc['xml']) if doc['kind'] == 'domain'
                  else validator.nodedev(doc['xml']))
        step['results'].append({'kind': doc['kind'], 'call': doc['call'],
                                'when': doc['when'], 'errors': errors})
    for kind, schema in (('domain', 'domain.rng'),
                         ('nodedev', 'nodedev.rng')):
        docs = [r for r in step['results'] if r['kind'] == kind]
        bad = [r for r in docs if r['errors']]
        check(6, '%d %s XML documents valid against %s' % (
            len(docs), kind, schema), docs and not bad, bad)


def main(cyborg_json, out):
    start = time.time()
    with open(cyborg_json) as f:
        CYBORG.update(json.load(f))
    result = unittest.TestResult()
    NovaStory('test_story').run(result)
    problems = result.errors + result.failures
    if problems:
        text = problems[0][1]
        if re.search(r'^(__main__\.)?Stop: ', text, re.M):
            pass  # a failed check says why
        elif 'Missing: ' in text:
            RECORD['missing'] = text.rsplit('Missing: ', 1)[1].strip()
        else:
            RECORD['error'] = text
    validate()
    RECORD['seconds'] = round(time.time() - start, 1)
    with open(out, 'w') as f:
        json.dump(RECORD, f, indent=1, sort_keys=True)
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main(*sys.argv[1:]))
    except Exception:
        traceback.print_exc()
        sys.exit(2)
