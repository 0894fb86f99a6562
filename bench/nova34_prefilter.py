"""Cost of the scheduler's pre-filter chain per scheduling request: nova
34.0.0 with the nova34 series, against pristine 34.0.0 and pristine 33.0.2,
side by side in one run.

Run from the nova34 tree with its venv:

    cd build/nova34 && ../venvs/nova34/bin/python ../../bench/nova34_prefilter.py

"The chain" is what nova-scheduler does to a request before it asks
Placement for allocation candidates (SchedulerManager.select_destinations):
request_filter.process_reqspec() (every request pre-filter),
utils.resources_from_request_spec() (the ResourceRequest built from the
flavor, image, ports, device profiles and PCI aliases) and the query string
of GET /allocation_candidates.

The three chains run in this process, on the same request specs and the same
databases: the series' chain from the tree installed in the venv; the
pristine chains from nova/scheduler/request_filter.py and
nova/scheduler/utils.py of the nova 34.0.0 and 33.0.2 sdists in build/cache/
(what `tools/series materialize` fetched), loaded as separate modules. The
series changes nothing else these call; 33.0.2's two modules run on 34.0.0's
objects, which is all a request spec needs of them here.

Nova's test fixtures give the API database and 4 cell databases (plus
cell0), with one nova-compute service at the current version in each cell,
so the OWNER_NOVA pre-filter of 34.0.0 is active. Logging is at INFO, as in a
scheduler without `[DEFAULT] debug`.

Five kinds of request are measured: a plain flavor, a flavor with
resources:VGPU=1, a flavor with two numbered VGPU groups, a Cyborg device
profile and a PCI alias (PCI in Placement). Rounds of each kind rotate the
order of the three chains; the per-request time of a chain is that of its
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
import sys
import tarfile
import time
import types
import unittest
from urllib import parse

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'False')

import sqlalchemy  # noqa: E402

from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler import request_filter  # noqa: E402
from nova.scheduler import utils as scheduler_utils  # noqa: E402
from nova import test  # noqa: E402

ROUNDS = 41
REQUESTS_PER_ROUND = 40
TARGET_RATIO = 1.10
CACHE = pathlib.Path(__file__).resolve().parent.parent / 'build' / 'cache'
CHAINS = ('series', '34.0.0', '33.0.2')


def _sdist_source(version, path):
    sdist = CACHE / ('nova-%s.tar.gz' % version)
    if not sdist.exists():
        sys.exit('bench: %s is missing; run `python3 tools/series '
                 'materialize nova34` (34.0.0) and `... nova` (33.0.2), '
                 'which fetch the sdists' % sdist)
    with tarfile.open(sdist) as tar:
        member = tar.getmember('nova-%s/%s' % (version, path))
        return tar.extractfile(member).read().decode()


def _load_module(version, name, path, **replace):
    module = types.ModuleType('pristine_%s_%s' % (version, name))
    module.__file__ = 'nova-%s.tar.gz:%s' % (version, path)
    exec(compile(_sdist_source(version, path), module.__file__, 'exec'),
         module.__dict__)
    module.__dict__.update(replace)
    return module


def load_pristine_chain(version):
    """(process_reqspec, resources_from_request_spec) of a nova sdist."""
    utils = _load_module(version, 'scheduler_utils', 'nova/scheduler/utils.py')
    filters = _load_module(version, 'request_filter',
                           'nova/scheduler/request_filter.py', utils=utils)
    return filters.process_reqspec, utils.resources_from_request_spec


class _StatementCounter(object):
    """SQL statements, and how many of them read the compute versions."""

    def __init__(self):
        self.count = 0
        self.version_checks = 0
        self.version_statements = 0
        self._in_check = False
        sqlalchemy.event.listen(
            sqlalchemy.engine.Engine, 'before_cursor_execute', self._count)

    def _count(self, *args, **kwargs):
        self.count += 1
        if self._in_check:
            self.version_statements += 1

    def wrap_version_check(self, func):
        def get_minimum_version_all_cells(*args, **kwargs):
            self.version_checks += 1
            self._in_check = True
            try:
                return func(*args, **kwargs)
            finally:
                self._in_check = False
        return get_minimum_version_all_cells


class PrefilterChainBench(test.TestCase):
    NUMBER_OF_CELLS = 4

    def setUp(self):
        super().setUp()
        self.flags(group='filter_scheduler', pci_in_placement=True)
        self.ctxt = nova_context.get_admin_context()
        self._create_computes()
        self.counter = _StatementCounter()
        self.stub_out(
            'nova.objects.service.get_minimum_version_all_cells',
            self.counter.wrap_version_check(
                objects.service.get_minimum_version_all_cells))

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
        chains = {
            'series': (request_filter.process_reqspec,
                       scheduler_utils.resources_from_request_spec),
            '34.0.0': load_pristine_chain('34.0.0'),
            '33.0.2': load_pristine_chain('33.0.2'),
        }
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
        # [statements, version checks, statements of version checks]
        statements = {name: [0, 0, 0] for name in chains}
        counter = self.counter
        start = time.monotonic()
        for rnd in range(ROUNDS):
            order = CHAINS[rnd % 3:] + CHAINS[:rnd % 3]
            for kind, make_spec in kinds:
                for name in order:
                    specs = [make_spec() for i in range(REQUESTS_PER_ROUND)]
                    before = (counter.count, counter.version_checks,
                              counter.version_statements)
                    times[name, kind].append(self._run(chains[name], specs))
                    after = (counter.count, counter.version_checks,
                             counter.version_statements)
                    statements[name] = [
                        total + a - b for total, a, b in zip(
                            statements[name], after, before)]
        seconds = time.monotonic() - start
        requests = ROUNDS * REQUESTS_PER_ROUND * len(kinds)

        def fastest(name, kind):
            """The whole chain, of its fastest round."""
            return min(sum(r) for r in times[name, kind])

        def paired(name, base):
            return statistics.median(
                sum(s) / sum(p) for kind, _ in kinds
                for s, p in zip(times[name, kind], times[base, kind]))

        cells = len(self.cell_mappings) - 1
        print()
        print('cells: %d (+ cell0), one nova-compute at the current version '
              'in each: the OWNER_NOVA pre-filter of 34.0.0 is active' %
              cells)
        print('us per scheduling request (whole chain), fastest of %d '
              'rounds of %d requests; ratios of the series to each' % (
                  ROUNDS, REQUESTS_PER_ROUND))
        print('%-20s%10s%10s%10s%14s%14s' % (
            'request', 'series', '34.0.0', '33.0.2', 'vs 34.0.0',
            'vs 33.0.2'))
        totals = dict.fromkeys(chains, 0.0)
        for kind, _ in kinds:
            row = {name: fastest(name, kind) for name in chains}
            for name in chains:
                totals[name] += row[name]
            print('%-20s%10.1f%10.1f%10.1f%13.2fx%13.2fx' % (
                kind, row['series'] * 1e6, row['34.0.0'] * 1e6,
                row['33.0.2'] * 1e6, row['series'] / row['34.0.0'],
                row['series'] / row['33.0.2']))
        n = len(kinds)
        print('%-20s%10.1f%10.1f%10.1f%13.2fx%13.2fx' % (
            'mean of the kinds', totals['series'] / n * 1e6,
            totals['34.0.0'] / n * 1e6, totals['33.0.2'] / n * 1e6,
            totals['series'] / totals['34.0.0'],
            totals['series'] / totals['33.0.2']))
        ratio = totals['series'] / totals['33.0.2']
        print('series / 33.0.2: %.3fx (target <= %.2fx: %s); median of the '
              'paired rounds %.3fx' % (
                  ratio, TARGET_RATIO,
                  'met' if ratio <= TARGET_RATIO else 'NOT met',
                  paired('series', '33.0.2')))
        print('34.0.0 / 33.0.2: %.1fx; series / 34.0.0: %.3fx (median of '
              'the paired rounds %.3fx)' % (
                  totals['34.0.0'] / totals['33.0.2'],
                  totals['series'] / totals['34.0.0'],
                  paired('series', '34.0.0')))
        print('SQL statements per request, %d requests a chain in %.0f s: '
              '34.0.0 %.2f, 33.0.2 %.2f, series %.4f' % (
                  requests, seconds, statements['34.0.0'][0] / requests,
                  statements['33.0.2'][0] / requests,
                  statements['series'][0] / requests))
        total, checks, of_checks = statements['series']
        print('  series: %d statements, all %d of them in its %d re-reads of '
              'the compute versions (one a minute); between them 0 (target '
              '0: %s)' % (total, of_checks, checks,
                          'met' if total == of_checks else 'NOT met'))
        print('what the series asks Placement for, beyond 34.0.0:')
        for kind, _ in kinds:
            print('  %-20s %s' % (kind, _query_diff(
                queries['34.0.0', kind], queries['series', kind])))


def _query_diff(pristine, series):
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
    print('bench: the pre-filter chain of nova 34.0.0 + the nova34 series '
          'vs pristine 34.0.0 and 33.0.2 (%d rounds, a few minutes)' % ROUNDS)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(
            PrefilterChainBench))
    sys.exit(0 if result.wasSuccessful() else 1)
