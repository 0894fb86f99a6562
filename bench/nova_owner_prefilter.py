"""Cost of nova's OWNER_NOVA scheduler pre-filter per scheduling request.

Run from build/nova with the nova venv:

    cd build/nova && ../venvs/nova/bin/python ../../bench/nova_owner_prefilter.py

Sets up the API database and 4 cell databases (plus cell0) with nova's test
fixtures, one nova-compute service at the current version in each cell, and
compares, per scheduling request:

* owner_nova_filter, which caches the minimum nova-compute version across all
  cells process-wide (objects.service.is_minimum_version_all_cells), with
* a naive filter asking every cell for the minimum version on each request
  (objects.service.get_minimum_version_all_cells).

It also counts the SQL statements each issues per request once warm (steady
state). Prints numbers and ratios; asserts nothing about timings.
"""

import os
import sys
import time
import unittest
from unittest import mock

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'False')

import os_traits  # noqa: E402
import sqlalchemy  # noqa: E402

from nova import context as nova_context  # noqa: E402
from nova import objects  # noqa: E402
from nova.objects import service as service_obj  # noqa: E402
from nova.scheduler import request_filter  # noqa: E402
from nova import test  # noqa: E402

NAIVE_REQUESTS = 200
FILTER_REQUESTS = 20000
TARGET_RATIO = 1 / 20


class _StatementCounter(object):
    def __init__(self):
        self.count = 0
        sqlalchemy.event.listen(
            sqlalchemy.engine.Engine, 'before_cursor_execute', self._count)

    def _count(self, *args, **kwargs):
        self.count += 1


def naive_owner_nova_filter(ctxt, request_spec):
    """The pre-filter without a cache: every cell, every request."""
    minimum = service_obj.get_minimum_version_all_cells(
        ctxt, ['nova-compute'])
    if minimum < request_filter.MIN_COMPUTE_OWNER_NOVA:
        return False
    request_spec.root_required.add(os_traits.OWNER_NOVA)
    return True


class OwnerNovaPrefilterBench(test.TestCase):
    NUMBER_OF_CELLS = 4

    def setUp(self):
        super().setUp()
        self.ctxt = nova_context.get_admin_context()
        self._create_computes()
        self.counter = _StatementCounter()

    @mock.patch('nova.objects.Service._send_notification', new=mock.Mock())
    @mock.patch('nova.objects.Service._check_minimum_version',
                new=mock.Mock())
    def _create_computes(self):
        for i, cell in enumerate(self.cell_mappings.values()):
            if cell.uuid == objects.CellMapping.CELL0_UUID:
                continue
            with nova_context.target_cell(self.ctxt, cell) as cctxt:
                objects.Service(cctxt, host='compute%d' % i,
                                binary='nova-compute',
                                topic='compute').create()

    def _reqspec(self):
        return objects.RequestSpec(flavor=objects.Flavor(extra_specs={}))

    def _measure(self, fn, requests):
        # Warm up: the first call of the cached filter asks the cells.
        fn(self.ctxt, self._reqspec())
        specs = [self._reqspec() for i in range(requests)]
        statements = self.counter.count
        start = time.perf_counter()
        for spec in specs:
            self.assertTrue(fn(self.ctxt, spec))
        elapsed = time.perf_counter() - start
        return (elapsed / requests,
                (self.counter.count - statements) / requests)

    def test_bench(self):
        cells = len(self.cell_mappings) - 1
        naive_s, naive_q = self._measure(
            naive_owner_nova_filter, NAIVE_REQUESTS)
        cached_s, cached_q = self._measure(
            request_filter.owner_nova_filter, FILTER_REQUESTS)
        ratio = cached_s / naive_s
        print()
        print('cells: %d (+ cell0), nova-compute services: %d'
              % (cells, cells))
        print('naive filter  (%6d requests): %9.1f us/request, '
              '%.1f SQL statements/request'
              % (NAIVE_REQUESTS, naive_s * 1e6, naive_q))
        print('owner filter  (%6d requests): %9.2f us/request, '
              '%.1f SQL statements/request (steady state)'
              % (FILTER_REQUESTS, cached_s * 1e6, cached_q))
        print('cost ratio owner/naive: 1/%.0f (%.5f, target <= %.3f: %s)'
              % (1 / ratio, ratio, TARGET_RATIO,
                 'met' if ratio <= TARGET_RATIO else 'NOT met'))
        print('steady state DB queries per request: %d (target 0: %s)'
              % (cached_q, 'met' if cached_q == 0 else 'NOT met'))


if __name__ == '__main__':
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(
            OwnerNovaPrefilterBench))
    sys.exit(0 if result.wasSuccessful() else 1)
