"""Benchmark: what one report_data() of the conductor costs.

Run from the top of the workspace, with the Cyborg tree materialized and
its venv made (python3 tools/series materialize cyborg; ... venv cyborg):

    git -C build/cyborg worktree add /tmp/cyborg-base base
    flock /tmp/heavy.lock build/venvs/cyborg/bin/python \
        bench/cyborg_conductor_report.py --base-tree /tmp/cyborg-base

It reports a host of PARENTS mdev parents x TYPES mdev types x HANDLES
attach handles (2048 deployables, 8192 MDEV attach handles by default) to
cyborg-conductor's ConductorManager.report_data(), on a SQLite database
and the real Placement service (openstack-placement's own fixture, reached
through Cyborg's PlacementClient as in production), and counts, for each
report:

* the SQL statements Cyborg's database gets (reads: SELECT; writes:
  INSERT, UPDATE, DELETE; transaction control such as BEGIN is not
  counted), with an SQLAlchemy cursor event on its engine;
* the HTTP requests Cyborg sends to Placement (all, and those that write),
  with a wrapper around keystoneauth's Session.request.

The reports are: the first (the host's devices are new), the same report
again (steady state: nothing changed), and one where one pair changed (its
capacity drops from HANDLES to HANDLES - 1 and it gains a trait). The
steady state is reported twice, the figures of the second one are shown.

Both trees run it, each in a subprocess of its own (Cyborg's modules and
oslo.config options are global to a process): the series (build/cyborg)
and, with --base-tree, a pristine openstack-cyborg 17.0.0 checkout (the
`base` tag of build/cyborg). It prints both side by side and each figure
of the series as a ratio to 17.0.0's. Nothing is timed: the counts are
the same on any machine.

The goal for the series: in steady state no write, a number of queries
that does not grow with the host's devices, deployables or attach
handles, and at most one Placement request; with one pair changed, work
for that pair only.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

TOP = pathlib.Path(__file__).resolve().parent.parent
HOST = 'compute-1'


def measure(parents, types, handles):
    """Run in the tree under test: the reports, and what each costs."""
    import uuid as uuid_lib

    # First: selects oslo.service's threading backend, as the tests do.
    import cyborg.tests  # noqa: F401

    import fixtures
    from keystoneauth1 import adapter as ks_adapter
    from keystoneauth1 import loading as ks_loading
    from keystoneauth1 import session as ks_session
    from keystoneauth1 import token_endpoint
    from oslo_config import cfg
    from oslo_log import log as logging
    from placement.tests.functional.fixtures import placement as pl_fixtures
    from sqlalchemy import event

    from cyborg.accelerator.common import utils
    from cyborg.common import config as cyborg_config
    from cyborg.conductor import manager
    from cyborg import context as cyborg_context
    from cyborg.objects.driver_objects import driver_attach_handle
    from cyborg.objects.driver_objects import driver_attribute
    from cyborg.objects.driver_objects import driver_controlpath_id
    from cyborg.objects.driver_objects import driver_deployable
    from cyborg.objects.driver_objects import driver_device
    from cyborg.tests.local_fixtures import db_fixture

    conf = cfg.CONF
    logging.register_options(conf)
    cyborg_config.parse_args([], default_config_files=[])
    logging.setup(conf, 'cyborg')
    # The conductor logs its diffs at INFO: keep the output to the figures.
    conf.set_override('default_log_levels', ['cyborg=WARNING',
                                             'placement=WARNING'])
    logging.setup(conf, 'cyborg')

    setup = fixtures.Fixture()
    setup.setUp()
    db = setup.useFixture(db_fixture.DatabaseFixture())
    service = setup.useFixture(pl_fixtures.PlacementFixture())
    loader = ks_loading.get_plugin_loader('admin_token')
    conf.register_opts(
        [opt._to_oslo_opt() for opt in loader.get_options()],
        group='placement')
    conf.set_override('auth_type', 'admin_token', group='placement')
    conf.set_override('endpoint', service.endpoint, group='placement')
    conf.set_override('token', 'admin', group='placement')
    api = ks_adapter.Adapter(
        ks_session.Session(auth=token_endpoint.Token(service.endpoint,
                                                     'admin')),
        service_type='placement', raise_exc=False,
        default_microversion='1.39')
    api.post('/resource_providers',
             json={'name': HOST, 'uuid': str(uuid_lib.uuid4())})

    sql = {'reads': 0, 'writes': 0}

    def count_sql(conn, cursor, statement, *args):
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ('INSERT', 'UPDATE', 'DELETE', 'REPLACE'):
            sql['writes'] += 1
        elif verb == 'SELECT':
            sql['reads'] += 1
        # BEGIN, SAVEPOINT, PRAGMA...: transaction control, not counted.
    event.listen(db.engine, 'before_cursor_execute', count_sql)

    http = {'requests': 0, 'writes': 0}
    real_request = ks_session.Session.request

    def count_request(self, url, method, *args, **kwargs):
        # While a report runs, only Cyborg's PlacementClient sends any.
        http['requests'] += 1
        if method.upper() != 'GET':
            http['writes'] += 1
        return real_request(self, url, method, *args, **kwargs)
    ks_session.Session.request = count_request

    def deployable(p, t, count, traits):
        address = '0000:%02x:00.0' % (p + 0x10)
        mdev_type = 'nvidia-%d' % (t + 200)
        attributes = [driver_attribute.DriverAttribute(
            key='rc', value='CUSTOM_T%d' % t)]
        attributes += [
            driver_attribute.DriverAttribute(key='trait%d' % i, value=trait)
            for i, trait in enumerate(traits)]
        return driver_deployable.DriverDeployable(
            name='%s_mdev_%s_%s' % (HOST, address, mdev_type),
            num_accelerators=count,
            driver_name='MDEV',
            attribute_list=attributes,
            attach_handle_list=[
                driver_attach_handle.DriverAttachHandle(
                    attach_type='MDEV',
                    attach_info=utils.mdev_str_to_json(
                        address, mdev_type, '%s_%d' % (mdev_type, i)),
                    in_use=False)
                for i in range(count)])

    def host_report(changed=False):
        devices = []
        for p in range(parents):
            address = '0000:%02x:00.0' % (p + 0x10)
            deps = []
            for t in range(types):
                if changed and (p, t) == (0, 0):
                    deps.append(deployable(p, t, handles - 1,
                                           ['OWNER_CYBORG', 'CUSTOM_NEW']))
                else:
                    deps.append(deployable(p, t, handles, ['OWNER_CYBORG']))
            devices.append(driver_device.DriverDevice(
                vendor='10de', model='1eb8', type='GPU',
                std_board_info='{}', vendor_board_info='{}', stub=False,
                controlpath_id=driver_controlpath_id.DriverControlPathID(
                    cpid_type='PCI', cpid_info=utils.pci_str_to_json(address)),
                deployable_list=deps))
        return devices

    context = cyborg_context.get_admin_context()
    conductor = manager.ConductorManager('conductor', HOST)
    results = {}
    for name, changed in (('first', False), ('steady', False),
                          ('steady', False), ('one pair changed', True)):
        report = host_report(changed)
        for counter in (sql, http):
            for key in counter:
                counter[key] = 0
        conductor.report_data(context, HOST, report)
        results[name] = {'sql_reads': sql['reads'],
                         'sql_writes': sql['writes'],
                         'placement_requests': http['requests'],
                         'placement_writes': http['writes']}
    print(json.dumps(results))


def run(tree, args):
    """Measure in a subprocess importing Cyborg from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, __file__, '--measure', '--parents',
         str(args.parents), '--types', str(args.types), '--handles',
         str(args.handles)],
        cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit('measuring %s failed:\n%s' % (tree, out.stderr[-3000:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tree', default=str(TOP / 'build' / 'cyborg'),
                        help='the tree with the series (build/cyborg)')
    parser.add_argument('--base-tree',
                        help='a pristine 17.0.0 tree, e.g. made with: git -C '
                        'build/cyborg worktree add /tmp/cyborg-base base')
    parser.add_argument('--parents', type=int, default=64)
    parser.add_argument('--types', type=int, default=32)
    parser.add_argument('--handles', type=int, default=4)
    parser.add_argument('--measure', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.parents, args.types, args.handles)
        return
    print('conductor report_data(): %d parents x %d types x %d handles '
          '(%d deployables, %d attach handles)' % (
              args.parents, args.types, args.handles,
              args.parents * args.types,
              args.parents * args.types * args.handles), flush=True)
    trees = []
    if args.base_tree:
        trees.append(('17.0.0', args.base_tree))
    trees.append(('series', args.tree))
    figures = {}
    for label, tree in trees:
        print('measuring %s (%s) ...' % (label, tree), flush=True)
        figures[label] = run(tree, args)
    columns = ('sql_reads', 'sql_writes', 'placement_requests',
               'placement_writes')
    print('\n%-18s %-8s %12s %12s %12s %12s' % (
        ('report', 'tree') + columns))
    for report in ('first', 'steady', 'one pair changed'):
        for label, _ in trees:
            row = figures[label][report]
            print('%-18s %-8s %12d %12d %12d %12d' % (
                (report, label) + tuple(row[c] for c in columns)))
        if '17.0.0' in figures:
            base = figures['17.0.0'][report]
            ours = figures['series'][report]
            print('%-18s %-8s %12s %12s %12s %12s' % ((report, 'ratio') + tuple(
                ('%.3f' % (ours[c] / base[c])) if base[c] else
                ('-' if not ours[c] else 'inf') for c in columns)))


if __name__ == '__main__':
    main()
