"""Demo step 1: Cyborg's generic mdev driver and conductor on a fake sysfs.

Run with the Cyborg venv's python from build/cyborg; writes one JSON record
to the path given as its argument. Everything here is Cyborg's own code:
the sysfs tree is made by Cyborg's MdevSysfsFixture, the driver is loaded
through its ``cyborg.accelerator.driver`` entry point, and the conductor's
report_data() writes the SQLite DB (foreign keys enforced) of Cyborg's
DbTestCase and the real Placement that Cyborg's PlacementFixture runs
in-process. The requests the conductor sends to that Placement are recorded
so that the Nova step can send the very same ones to Nova's Placement.
"""

import json
import logging
import os
import pathlib
import sys
import time
import unittest

import fixtures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import story  # noqa: E402

RECORD = {'checks': []}


def check(name, ok, detail=''):
    RECORD['checks'].append(
        {'step': 1, 'name': name, 'ok': bool(ok), 'detail': str(detail)})


def missing(what):
    RECORD['missing'] = what
    return None


try:
    from cyborg.accelerator.bus_managers.mdev import MdevParentDevice
    from cyborg.accelerator.bus_managers.mdev import MdevType
    from cyborg.tests.local_fixtures.mdev_sysfs import MdevSysfsFixture
    from cyborg.tests.local_fixtures.placement import PlacementFixture
except ImportError as e:  # the Cyborg series is not (fully) there
    RECORD['missing'] = (
        'Cyborg has no MdevBusManager sysfs fixture or Placement fixture '
        '(%s): the generic mdev driver series is not applied' % e)

# what Cyborg's test runs register when their modules are imported
from keystonemiddleware import auth_token  # noqa: E402,F401

from cyborg.common import utils  # noqa: E402
from cyborg.conductor import manager  # noqa: E402
from cyborg.objects.attach_handle import AttachHandle  # noqa: E402
from cyborg.objects.deployable import Deployable  # noqa: E402
from cyborg.objects.device import Device  # noqa: E402
from cyborg.tests.unit.db import base  # noqa: E402
from stevedore import driver as stevedore_driver  # noqa: E402
from stevedore import exception as stevedore_exception  # noqa: E402


def mtty_types(parent):
    types = []
    for mdev_type in sorted(story.MTTY_PORTS_PER_MDEV):
        created = sum(1 for p, t in story.PRECREATED
                      if (p, t) == (parent, mdev_type))
        types.append(MdevType(
            type_name=mdev_type, name=mdev_type,
            available_instances=story.available_instances(parent, mdev_type),
            created_instances=created, device_api='vfio-pci',
            description=''))
    return types


def as_data(obj):
    """A driver object and its nested objects as plain dicts and lists."""
    data = obj.as_dict()
    for key, value in data.items():
        if isinstance(value, list):
            data[key] = [item if isinstance(item, str) else as_data(item)
                         for item in value]
    return data


def sysfs_listing(root):
    """{parent: {type: {available_instances, devices}}} as sysfs has it."""
    tree = {}
    for parent in sorted(os.listdir(root)):
        types = {}
        tdir = root / parent / 'mdev_supported_types'
        for mdev_type in sorted(os.listdir(tdir)):
            devices = tdir / mdev_type / 'devices'
            types[mdev_type] = {
                'available_instances': int(
                    (tdir / mdev_type / 'available_instances').read_text()),
                'devices': sorted(os.listdir(devices))
                if devices.is_dir() else [],
            }
        tree[parent] = types
    return tree


class Recorder:
    """Wraps the SDK adapter PlacementClient sends its requests through:
    every request and the real Placement's status."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.requests = []

    def _call(self, method, url, json=None, microversion=None, **kw):
        if method in ('post', 'put') and json is not None:
            kw['json'] = json
        resp = getattr(self.adapter, method)(
            url, microversion=microversion, **kw)
        self.requests.append({
            'method': method.upper(), 'url': url, 'body': json,
            'version': microversion, 'status': resp.status_code})
        return resp

    def get(self, url, **kw):
        return self._call('get', url, **kw)

    def post(self, url, **kw):
        return self._call('post', url, **kw)

    def put(self, url, **kw):
        return self._call('put', url, **kw)

    def delete(self, url, **kw):
        return self._call('delete', url, **kw)


class CyborgStory(base.DbTestCase):

    def test_story(self):
        log = self.useFixture(fixtures.FakeLogger(
            level=logging.DEBUG, format='%(levelname)s %(name)s %(message)s'))
        self.flags(host=story.HOST)
        sysfs = self.useFixture(MdevSysfsFixture(devices=[
            MdevParentDevice(address=p, mdev_types=mtty_types(p))
            for p in story.PARENTS]))
        root = pathlib.Path(sysfs.path)
        for parent in story.PARENTS:
            for name, value in zip(('vendor', 'device', 'class'),
                                   story.PCI_IDS):
                (root / parent / name).write_text(value + '\n')
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg.accelerator.bus_managers.mdev.MDEV_BUS_SYSFS_PATH',
            str(root)))
        RECORD['sysfs'] = sysfs_listing(root)

        self.flags(device_spec=story.device_spec_values(), group='mdev')
        RECORD['device_spec'] = story.device_spec_values()
        # Nova's compute node provider, as nova-compute made it
        placement = self.useFixture(PlacementFixture(
            compute_nodes=[story.HOST]))
        try:
            manager_ = stevedore_driver.DriverManager(
                namespace='cyborg.accelerator.driver', name='mdev_driver',
                invoke_on_load=True)
        except stevedore_exception.NoMatches:
            RECORD['missing'] = (
                'no mdev_driver in the cyborg.accelerator.driver entry '
                'points of build/venvs/cyborg: the generic mdev driver is '
                'not in build/cyborg')
            return
        driver = manager_.driver
        RECORD['driver'] = '%s = %s:%s' % (
            manager_.extensions[0].entry_point.name,
            type(driver).__module__, type(driver).__name__)
        devices = driver.discover()
        RECORD['discovered'] = [as_data(d) for d in devices]

        RECORD['root_uuid'] = placement.provider_by_name(story.HOST)['uuid']
        real_adapter = utils.get_sdk_adapter
        recorders = []

        def recording_adapter(*args, **kw):
            recorders.append(Recorder(real_adapter(*args, **kw)))
            return recorders[-1]
        self.useFixture(fixtures.MonkeyPatch(
            'cyborg.common.utils.get_sdk_adapter', recording_adapter))
        conductor = manager.ConductorManager('conductor', story.HOST)
        conductor.report_data(self.context, story.HOST, devices)
        RECORD['placement_requests'] = recorders[0].requests
        rps = placement.api.get('/resource_providers').json()[
            'resource_providers']
        RECORD['providers'] = [{
            'name': rp['name'], 'uuid': rp['uuid'],
            'parent_uuid': rp['parent_provider_uuid'],
            'inventories': placement.inventories(rp['uuid']),
            'traits': sorted(placement.traits(rp['uuid'])),
        } for rp in rps]

        handles = []
        for device in Device.get_list_by_hostname(self.context, story.HOST):
            for dep in Deployable.get_list_by_device_id(
                    self.context, device.id):
                for ah in AttachHandle.get_ah_list_by_deployable_id(
                        self.context, dep.id):
                    handles.append({
                        'uuid': ah.uuid, 'deployable': dep.name,
                        'rp_uuid': dep.rp_uuid,
                        'type': ah.attach_type,
                        'info': json.loads(ah.attach_info),
                        'in_use': ah.in_use})
        RECORD['attach_handles'] = handles
        RECORD['log'] = log.output
        RECORD['warnings'] = [
            line[len('WARNING '):] for line in log.output.splitlines()
            if line.startswith('WARNING cyborg.')]
        self.check_story(driver)

    def check_story(self, driver):
        from cyborg.accelerator.drivers.mdev.driver import MdevDriver
        check('mdev_driver entry point loads MdevDriver',
              type(driver) is MdevDriver, RECORD['driver'])
        names = {'%s_mdev_%s_%s' % (story.HOST, s['address'], s['mdev_type'])
                 for s in story.DEVICE_SPEC}
        reported = {dep['name'] for dev in RECORD['discovered']
                    for dep in dev['deployable_list']}
        check('discover() reports exactly the configured (parent, type) '
              'pairs, one device per parent',
              reported == names and len(RECORD['discovered']) == 1, reported)
        sysfs = RECORD['sysfs'][story.CYBORG_PARENT]
        want = {}
        for spec in story.DEVICE_SPEC:
            info = sysfs[spec['mdev_type']]
            total = info['available_instances'] + len(info['devices'])
            total = min(total, spec.get('max_instances', total))
            # the mdevs there (the operator's) are not Cyborg's to hand out
            total -= len(info['devices'])
            rc = spec.get('resource_class',
                          'CUSTOM_MDEV_' + spec['mdev_type'].upper().replace(
                              '-', '_'))
            want['%s_mdev_%s_%s' % (story.HOST, spec['address'],
                                    spec['mdev_type'])] = (
                {rc: {'total': total, 'reserved': 0, 'max_unit': total}},
                sorted(['OWNER_CYBORG'] + spec.get('traits', [])))
        got = {p['name']: (p['inventories'], p['traits'])
               for p in RECORD['providers'] if p['parent_uuid']}
        check('conductor: one child provider of %s per pair, total = '
              'available + created (capped by max_instances) - the mdevs '
              'Cyborg did not hand out, OWNER_CYBORG + configured traits'
              % story.HOST,
              got == want and all(
                  p['parent_uuid'] == RECORD['root_uuid']
                  for p in RECORD['providers'] if p['parent_uuid']), got)
        operators = {u for i in sysfs.values() for u in i['devices']}
        check('the operator\'s mdev is no attach handle',
              operators and not operators & {
                  h['uuid'] for h in RECORD['attach_handles']},
              operators)
        shared = [w for w in RECORD['warnings'] if 'share its capacity' in w]
        check('the driver warns that mtty-1 and mtty-2 share the capacity '
              'of %s' % story.CYBORG_PARENT,
              len(shared) == 1 and 'mtty-2' in shared[0] and
              story.CYBORG_PARENT in shared[0], RECORD['warnings'])
        per_rp = {}
        for h in RECORD['attach_handles']:
            per_rp.setdefault(h['deployable'], []).append(h)
        check('one MDEV attach handle per mdev a pair can hold',
              {n: len(hs) for n, hs in per_rp.items()} == {
                  n: list(inv.values())[0]['total']
                  for n, (inv, _) in want.items()} and all(
                  h['type'] == 'MDEV' for h in RECORD['attach_handles']),
              {n: len(hs) for n, hs in per_rp.items()})


def main(out):
    start = time.time()
    if 'missing' not in RECORD:
        result = unittest.TestResult()
        CyborgStory('test_story').run(result)
        problems = result.errors + result.failures
        if problems:
            RECORD['error'] = problems[0][1]
    RECORD['seconds'] = round(time.time() - start, 1)
    with open(out, 'w') as f:
        json.dump(RECORD, f, indent=1, sort_keys=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
