"""Cost of the scheduler's pre-filter chain per scheduling request, with the
series' OWNER_NOVA pre-filter, against the same chain of pristine nova 33.0.2.

Run from the nova tree with its venv:

    cd build/nova && ../venvs/nova/bin/python ../../bench/nova_owner_prefilter.py

"The chain" is what nova-scheduler does to a request before it asks
Placement for allocation candidates (SchedulerManager.select_destinations):
request_filter.process_reqspec() (every request pre-filter),
utils.resources_from_request_spec() (the ResourceRequest built from the
flavor, image, ports, device profiles and PCI aliases) and the query string
of GET /allocation_candidates.

Both chains run in this process, on the same request specs and the same
databases: the series' chain from the tree installed in the venv, the
pristine chain from nova/scheduler/request_filter.py and
nova/scheduler/utils.py of the tree's `base` commit (the 33.0.2 sdist),
loaded as separate modules (the series changes nothing else these call).

Nova's test fixtures give the API database and 4 cell databases (plus
cell0), with one nova-compute service at the current version in each cell,
so the OWNER_NOVA pre-filter is active. Logging is at INFO, as in a
scheduler without `[DEFAULT] debug` (nova's test fixtures otherwise format
every debug message of the chain, which a production scheduler does not).

Five kinds of request are measured: a plain flavor, a flavor with
resources:VGPU=1, a flavor with two numbered VGPU groups, a Cyborg device
profile and a PCI alias (PCI in Placement). Rounds of each kind alternate
between the two chains; the per-request time of a chain is that of its
fastest round (the least disturbed by the other processes of the machine),
and the median ratio of the paired rounds is printed next to it. The SQL
statements each chain issues are counted once warm (steady state). Prints
numbers and ratios; asserts nothing about timings.
"""

import gc
import logging
import os
import pathlib
import statistics
import subprocess
import sys
import time
import types
import unittest

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'False')

import sqlalchemy  # noqa: E402

import nova  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler import request_filter  # noqa: E402
from nova.scheduler import utils as scheduler_utils  # noqa: E402
from nova import test  # noqa: E402

ROUNDS = 41
REQUESTS_PER_ROUND = 40
TARGET_RATIO = 1.10
TREE = pathlib.Path(nova.__file__).resolve().parent.parent


def _base_source(path):
    res = subprocess.run(
        ['git', '-C', str(TREE), 'show', 'base:%s' % path],
        capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit('bench: cannot read %s of the `base` commit of %s (%s); run '
                 'it from a tree made by `tools/series materialize nova`'
                 % (path, TREE, res.stderr.strip()))
    return res.stdout


def _load_module(name, path, **replace):
    module = types.ModuleType(name)
    module.__file__ = 'base:' + path
    exec(compile(_base_source(path), module.__file__, 'exec'),
         module.__dict__)
    module.__dict__.update(replace)
    return module


def load_pristine_chain():
    """pristine 33.0.2's (process_reqspec, resources_from_request_spec)."""
    utils = _load_module('pristine_scheduler_utils', 'nova/scheduler/utils.py')
    filters = _load_module('pristine_request_filter',
                           'nova/scheduler/request_filter.py', utils=utils)
    return filters.process_reqspec, utils.resources_from_request_spec


SERIES_CHAIN = (request_filter.process_reqspec,
                scheduler_utils.resources_from_request_spec)


class _StatementCounter(object):
    def __init__(self):
        self.count = 0
        sqlalchemy.event.listen(
            sqlalchemy.engine.Engine, 'before_cursor_execute', self._count)

    def _count(self, *args, **kwargs):
        self.count += 1


class OwnerNovaPrefilterBench(test.TestCase):
    NUMBER_OF_CELLS = 4

    def setUp(self):
        super().setUp()
        self.flags(group='filter_scheduler', pci_in_placement=True)
        self.ctxt = nova_context.get_admin_context()
        self._create_computes()
        self.counter = _StatementCounter()

    def _create_computes(self):
        self.stub_out('nova.objects.Service._send_notification',
                      lambda *a, **kw: None)
        for i, cell in enumerate(self.cell_mappings.values()):
            if cell.uuid == objects.CellMapping.CELL0_UUID:
                continue
            with nova_context.target_cell(self.ctxt, cell) as cctxt:
                objects.Service(cctxt, host='compute%d' % i,
                                binary='nova-compute',
                                topic='compute').create()

    def _reqspec(self, extra_specs, groups=(), pci_requests=()):
        """A RequestSpec built the way the conductor builds it."""
        flavor = objects.Flavor(
            id=1, flavorid='1', name='bench', vcpus=2, memory_mb=2048,
            root_gb=20, ephemeral_gb=0, swap=0, extra_specs=extra_specs)
        image = objects.ImageMeta.from_dict(
            {'disk_format': 'qcow2', 'properties': {}})
        return objects.RequestSpec.from_components(
            self.ctxt, '00000000-0000-0000-0000-000000000001', image,
            flavor, None,
            objects.InstancePCIRequests(requests=list(pci_requests)),
            {}, None, None, project_id='p', user_id='u',
            port_resource_requests=list(groups))

    def _kinds(self):
        device_profile = objects.RequestGroup(
            requester_id='device_profile_0', use_same_provider=True,
            resources={'CUSTOM_FPGA': 1},
            required_traits={'CUSTOM_FPGA_INTEL', 'OWNER_CYBORG'})
        pci_alias = objects.InstancePCIRequest(
            count=1, request_id='7a2ed0ad-5c3e-4e4f-9c8f-c1b1c3e7c5a1',
            alias_name='a-gpu', spec=[{'resource_class': 'CUSTOM_GPU'}])
        return [
            ('plain flavor', lambda: self._reqspec({})),
            ('resources:VGPU=1',
             lambda: self._reqspec({'resources:VGPU': '1'})),
            ('resources1/2:VGPU=1',
             lambda: self._reqspec({'resources1:VGPU': '1',
                                    'resources2:VGPU': '1',
                                    'group_policy': 'isolate'})),
            ('device profile',
             lambda: self._reqspec({'accel:device_profile': 'dp'},
                                   groups=[device_profile.obj_clone()])),
            ('PCI alias',
             lambda: self._reqspec({'pci_passthrough:alias': 'a-gpu:1'},
                                   pci_requests=[pci_alias.obj_clone()])),
        ]

    def _run(self, chain, specs):
        """Seconds per request of each part of the chain, for these specs."""
        process_reqspec, resources_from_request_spec = chain
        gc.collect()
        t0 = time.perf_counter()
        for spec in specs:
            process_reqspec(self.ctxt, spec)
        t1 = time.perf_counter()
        requests = [resources_from_request_spec(self.ctxt, spec, None)
                    for spec in specs]
        t2 = time.perf_counter()
        for request in requests:
            request.to_querystring()
        t3 = time.perf_counter()
        return [(t1 - t0) / len(specs), (t2 - t1) / len(specs),
                (t3 - t2) / len(specs)]

    def test_bench(self):
        logging.getLogger().setLevel(logging.INFO)
        chains = {'series': SERIES_CHAIN, 'pristine': load_pristine_chain()}
        kinds = self._kinds()
        # What each chain asks Placement for, and a warm up: the first
        # request of the series' chain checks the compute service versions.
        queries = {}
        for name, chain in chains.items():
            for kind, make_spec in kinds:
                process_reqspec, resources_from_request_spec = chain
                spec = make_spec()
                process_reqspec(self.ctxt, spec)
                queries[name, kind] = resources_from_request_spec(
                    self.ctxt, spec, None).to_querystring()

        # times[chain, kind]: one [pre-filters, ResourceRequest, query]
        # list per round.
        times = {(name, kind): [] for name in chains for kind, _ in kinds}
        statements = dict.fromkeys(chains, 0)
        for rnd in range(ROUNDS):
            order = list(chains) if rnd % 2 == 0 else list(chains)[::-1]
            for kind, make_spec in kinds:
                for name in order:
                    specs = [make_spec() for i in range(REQUESTS_PER_ROUND)]
                    before = self.counter.count
                    times[name, kind].append(self._run(chains[name], specs))
                    statements[name] += self.counter.count - before
        requests = ROUNDS * REQUESTS_PER_ROUND * len(kinds)

        def fastest(name, kind):
            """The parts and the whole chain, each of its fastest round."""
            rounds = times[name, kind]
            parts = [min(r[i] for r in rounds) for i in range(3)]
            return parts + [min(sum(r) for r in rounds)]

        cells = len(self.cell_mappings) - 1
        print()
        print('cells: %d (+ cell0), one nova-compute at the current version '
              'in each: the OWNER_NOVA pre-filter is active' % cells)
        print('us per scheduling request, series / pristine 33.0.2 and '
              'ratio, fastest of %d rounds of %d requests' % (
                  ROUNDS, REQUESTS_PER_ROUND))
        columns = ('pre-filters', 'ResourceRequest', 'query string',
                   'whole chain')
        print('%-20s' % 'request' + ''.join('%23s' % c for c in columns))
        totals = {name: [0.0] * 4 for name in chains}
        for kind, _ in kinds:
            row = {name: fastest(name, kind) for name in chains}
            for name in chains:
                totals[name] = [a + b for a, b in zip(totals[name], row[name])]
            print('%-20s' % kind + ''.join(
                '%8.1f /%6.1f %5.2fx' % (
                    row['series'][i] * 1e6, row['pristine'][i] * 1e6,
                    row['series'][i] / row['pristine'][i])
                for i in range(4)))
        n = len(kinds)
        print('%-20s' % 'mean of the kinds' + ''.join(
            '%8.1f /%6.1f %5.2fx' % (
                totals['series'][i] / n * 1e6,
                totals['pristine'][i] / n * 1e6,
                totals['series'][i] / totals['pristine'][i])
            for i in range(4)))
        ratio = totals['series'][3] / totals['pristine'][3]
        paired = statistics.median(
            sum(s) / sum(p)
            for kind, _ in kinds
            for s, p in zip(times['series', kind], times['pristine', kind]))
        print('whole chain: %.3fx (target <= %.2fx: %s); median of the '
              'paired rounds %.3fx' % (
                  ratio, TARGET_RATIO,
                  'met' if ratio <= TARGET_RATIO else 'NOT met', paired))
        print('SQL statements per request, steady state: series %.2f '
              '(target 0: %s), pristine %.2f' % (
                  statements['series'] / requests,
                  'met' if statements['series'] == 0 else 'NOT met',
                  statements['pristine'] / requests))
        print('(pristine\'s pre-filters do not touch request_spec.'
              'root_required for these requests; its default is made on '
              'first use, by ResourceRequest in pristine, by the OWNER_NOVA '
              'pre-filter in the series: that cost moves between the first '
              'two columns)')
        print('what the series asks Placement for, beyond pristine:')
        for kind, _ in kinds:
            print('  %-20s %s' % (kind, _query_diff(
                queries['pristine', kind], queries['series', kind])))


def _query_diff(pristine, series):
    from urllib import parse
    before = dict(parse.parse_qsl(pristine))
    after = dict(parse.parse_qsl(series))
    changed = []
    for key, value in sorted(after.items()):
        old = set(before.get(key, '').split(',')) - {''}
        added = [v for v in value.split(',') if v not in old]
        if added:
            changed.append('%s+=%s' % (key, ','.join(added)))
    return '; '.join(changed) or '(nothing)'


if __name__ == '__main__':
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(
            OwnerNovaPrefilterBench))
    sys.exit(0 if result.wasSuccessful() else 1)
