"""Tier 2, Nova: the patched libvirt driver on real libvirt and a real mdev.

Runs in the lab guest with the lab venv's python (the nova venv plus real
libvirt-python) against libvirtd on qemu:///system, whose nodedev driver
sees the kernel's mtty sample parent (libvirt name mtty_mtty). A bound MDEV
ARQ is built from one of the attach handles that Cyborg's generic mdev
driver reported (OUT/cyborg-handles.json, see guest_cyborg.py), the way
Cyborg's API returns it, and handed to the driver's own methods:
_ensure_cyborg_mdevs() (persistent mdev, claimed in the instance's system
metadata), _get_guest_xml() -> _get_guest_config() ->
_guest_add_accelerators() (the hostdev), the driver's _create_guest() (a
type='qemu' domain, started paused), destroy() (the delete path,
_release_cyborg_mdevs()). The lab has no database: what the driver reads
and writes of the instances (Instance.save(), Instance.get_by_uuid(),
InstanceList.get_by_host()) is kept in memory (LabDB). Then the two
ownership paths
the fakes can only imitate: an attach handle freed by one instance and
bound to the next (the first one's cleanup must keep the second one's
mdev), and the resume path after a libvirtd restart with the mdev and its
mdevctl definition gone. Then bad input: each must be a clear Nova error
and leave nothing behind.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid

START = time.monotonic()
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', 'true')

from labcheck import Checks, expect, read, sh, wait  # noqa: E402
from plans import TIER2  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import libvirt_schemas  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else '/out'
URI = os.environ.get('LAB_LIBVIRT_URI', 'qemu:///system')
PARENT_SYSFS = '/sys/class/mdev_bus/mtty'
LIBVIRT_PARENT = 'mtty_mtty'
TYPE = 'mtty-2'
INSTANCES = '/run/lab-instances'
# nova-compute's state_path: the compute node's identity (compute_id), the
# node of the instances' claims on mdevs
STATE = '/run/lab-state'

from nova import monkey_patch  # noqa: E402
monkey_patch.patch()

import libvirt  # noqa: E402
from lxml import etree  # noqa: E402

import nova.conf  # noqa: E402
from nova import context as nova_context  # noqa: E402
from nova import exception  # noqa: E402
from nova import objects  # noqa: E402
from nova.virt import fake as fake_virt  # noqa: E402
from nova.virt.libvirt import accelerators  # noqa: E402
from nova.virt.libvirt import blockinfo  # noqa: E402
from nova.virt.libvirt import cyborg_mdev  # noqa: E402
from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

CONF = nova.conf.CONF
IMPORTED = time.monotonic()
check = Checks('guest_nova.py', TIER2['guest_nova.py'])


def setup():
    CONF([], project='nova', default_config_files=[])
    # as nova-compute does when it starts (the compute manager)
    nova.conf.neutron.register_dynamic_opts(CONF)
    nova.conf.devices.register_dynamic_opts(CONF)
    CONF.set_override('virt_type', 'qemu', 'libvirt')
    CONF.set_override('connection_uri', URI, 'libvirt')
    CONF.set_override('images_type', 'raw', 'libvirt')
    CONF.set_override('instances_path', INSTANCES)
    CONF.set_override('state_path', STATE)
    CONF.set_override('host', 'lab')
    objects.register_all()
    os.makedirs(INSTANCES, exist_ok=True)
    os.makedirs(STATE, exist_ok=True)
    DB.install()
    drv = libvirt_driver.LibvirtDriver(fake_virt.FakeVirtAPI(), False)
    # as init_host does when nova-compute starts: libvirt's event loop (it
    # tells Host at once when libvirtd goes away)
    drv._host.initialize()
    libvirt.registerErrorHandler(lambda *a: None, None)
    # (the compute node's identity, which every claim names)
    drv._host.get_node_uuid()
    return drv


class LabDB(object):
    """The instances of the lab's host, as the database would have them.

    The driver saves an instance's claims on mdevs (its system metadata)
    with Instance.save(), checks that an instance was not deleted with
    Instance.get_by_uuid(), and reads the claims of the other instances of
    the host with InstanceList.get_by_host(): the lab keeps its instances
    (objects, system metadata included) here instead.
    """

    def __init__(self):
        self.instances = {}
        self.deleted = set()

    def add(self, inst):
        self.instances[inst.uuid] = inst

    def delete(self, inst):
        """The API deleted the instance (a local delete: the compute is
        down, its guest is left to the compute's clean-up)."""
        self.deleted.add(inst.uuid)

    def install(self):
        db = self

        def save(inst, *args, **kwargs):
            if inst.uuid not in db.instances:
                raise exception.InstanceNotFound(instance_id=inst.uuid)
            inst.obj_reset_changes(recursive=True)

        def get_by_uuid(context, uuid_, expected_attrs=None,
                        use_slave=False):
            inst = db.instances.get(uuid_)
            if inst is None or (uuid_ in db.deleted and
                                context.read_deleted == 'no'):
                raise exception.InstanceNotFound(instance_id=uuid_)
            return inst

        def get_by_host(context, host, expected_attrs=None,
                        use_slave=False):
            return objects.InstanceList(objects=[
                inst for uuid_, inst in db.instances.items()
                if inst.host == host and uuid_ not in db.deleted])
        objects.Instance.save = save
        objects.Instance.get_by_uuid = staticmethod(get_by_uuid)
        objects.InstanceList.get_by_host = staticmethod(get_by_host)

    def claims(self, inst=None):
        """{mdev uuid: Claim} of an instance, or of every instance."""
        out = {}
        for one in [inst] if inst else self.instances.values():
            out.update(cyborg_mdev.get_claims(one))
        return out


DB = LabDB()


def make_instance(n):
    flavor = objects.Flavor(
        id=1, flavorid='lab', name='lab', memory_mb=128, vcpus=1,
        root_gb=1, ephemeral_gb=0, swap=0, vcpu_weight=None,
        rxtx_factor=1.0, extra_specs={}, is_public=True)
    inst = objects.Instance(
        id=n, uuid=str(uuid.uuid4()), display_name='lab-%d' % n,
        project_id='lab', user_id='lab', host='lab', node='lab',
        image_ref='', flavor=flavor, old_flavor=None, new_flavor=None,
        root_gb=1, ephemeral_gb=0, memory_mb=128, vcpus=1,
        system_metadata={}, numa_topology=None,
        pci_devices=objects.PciDeviceList(), config_drive=None,
        os_type='linux', vm_mode=None, kernel_id=None, ramdisk_id=None,
        vcpu_model=None, ephemeral_key_uuid=None, trusted_certs=None,
        resources=None, migration_context=None, info_cache=None,
        task_state=None, vm_state=None, cleaned=False, pci_requests=None,
        device_metadata=None, keypairs=objects.KeyPairList(objects=[]),
        tags=objects.TagList(), services=objects.ServiceList(),
        metadata={})
    DB.add(inst)
    # The root disk Nova would have made: a tiny raw file.
    path = os.path.join(INSTANCES, inst.uuid)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, 'disk'), 'wb') as f:
        f.truncate(1 << 20)
    return inst


def make_arq(handle_info, instance, **changes):
    """A bound MDEV ARQ as Cyborg's API returns it for one attach handle
    (attach_handle_uuid: the handle's uuid, made by Cyborg's DB)."""
    info = {k: str(v) for k, v in handle_info.items()}
    info.update(changes)
    return {'uuid': str(uuid.uuid4()), 'state': 'Bound',
            'device_profile_name': 'lab-mtty', 'device_profile_group_id': 0,
            'hostname': 'lab', 'device_rp_uuid': str(uuid.uuid4()),
            'instance_uuid': instance.uuid,
            'attach_handle_type': 'MDEV',
            'attach_handle_uuid': str(uuid.uuid4()),
            'attach_handle_info': info}


class Lab:
    def __init__(self, drv):
        self.drv = drv
        self.conn = drv._host.get_connection()
        self.ctxt = nova_context.get_admin_context()
        self.validator = libvirt_schemas.Validator()

    # What the host has, seen three ways: libvirt, mdevctl, the kernel.
    def mdev_names(self):
        return sorted(d.name() for d in self.conn.listAllDevices(
            libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV))

    def defined(self):
        return sorted(line.split()[0] for line in sh(
            'mdevctl', 'list', '--defined').splitlines() if line.strip())

    def kernel_mdevs(self):
        return sorted(os.listdir('/sys/bus/mdev/devices'))

    def available(self, mdev_type=TYPE):
        return int(read('%s/mdev_supported_types/%s/available_instances' % (
            PARENT_SYSFS, mdev_type)))

    def libvirt_available(self, mdev_type=TYPE):
        xml = etree.fromstring(
            self.conn.nodeDeviceLookupByName(LIBVIRT_PARENT).XMLDesc(0))
        return int(xml.find(".//type[@id='%s']/availableInstances"
                            % mdev_type).text)

    def domains(self):
        return sorted(d.name() for d in self.conn.listAllDomains(0))

    def claims(self, inst=None):
        """{mdev uuid: Claim} of one instance, or of every instance."""
        return DB.claims(inst)

    def state(self):
        return {'libvirt mdevs': self.mdev_names(),
                'mdevctl --defined': self.defined(),
                'kernel mdevs': self.kernel_mdevs(),
                'available': self.available(), 'domains': self.domains()}

    def mdev(self, uuid_):
        for dev in self.conn.listAllDevices(
                libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV):
            if uuid_.replace('-', '_') in dev.name():
                return dev
        return None

    def guest_xml(self, inst, accel_info):
        image_meta = objects.ImageMeta.from_dict(
            {'disk_format': 'raw', 'properties': {}})
        disk_info = blockinfo.get_disk_info(
            CONF.libvirt.virt_type, inst, image_meta)
        return self.drv._get_guest_xml(
            self.ctxt, inst, [], disk_info, image_meta,
            accel_info=accel_info)


def main():
    # stage 2 starts this while libvirtd starts and Cyborg's checks run
    ready = os.environ.get('LAB_READY')
    if ready:
        wait(lambda: all(os.path.exists(os.path.join(ready, f))
                         for f in ('cyborg', 'libvirtd')), timeout=600,
             step=0.5)
    handles_file = os.path.join(OUT, 'cyborg-handles.json')
    print('nova: imported in %.0fs, ready after %.0fs' % (
        IMPORTED - START, time.monotonic() - START), flush=True)
    handles = check('handles',
                    lambda: json.load(open(handles_file))['handles'])
    if not handles:
        return check.finish('no attach handles from Cyborg '
                            '(guest_cyborg.py)')
    drv = check('driver', setup)
    if not drv:
        return check.finish('no LibvirtDriver')
    lab = Lab(drv)
    before = lab.state()
    print('before: %s' % before, flush=True)
    inst = make_instance(1)
    arq = make_arq(handles[0], inst)
    mdev_uuid = arq['attach_handle_uuid']
    print('ARQ: %s' % json.dumps(arq), flush=True)

    def partition():
        reqs = accelerators.partition([arq])
        expect(len(reqs.mdevs) == 1, 'mdev requests: %s' % (reqs,))
        m = reqs.mdevs[0]
        expect((m.uuid, m.mdev_type) == (mdev_uuid, TYPE), repr(m))
        return repr(m)
    check('partition', partition)

    def ensure():
        drv._ensure_cyborg_mdevs(lab.ctxt, inst, [arq])
        dev = wait(lambda: lab.mdev(mdev_uuid))
        expect(dev, 'libvirt has no mdev %s: %s' % (
            mdev_uuid, lab.mdev_names()))
        expect(wait(lambda: dev.isActive()), 'mdev not active')
        xml = etree.fromstring(dev.XMLDesc(0))
        got = (xml.findtext('parent'),
               xml.find('capability/type').get('id'),
               bool(dev.isPersistent()))
        expect(got == (LIBVIRT_PARENT, TYPE, True), 'mdev is %s' % (got,))
        expect(mdev_uuid in lab.defined(),
               'mdevctl list --defined: %s' % lab.defined())
        expect(mdev_uuid in lab.kernel_mdevs(), 'not in the kernel')
        claim = lab.claims(inst).get(mdev_uuid)
        expect(claim and claim.owned_by_nova and
               claim.parent == LIBVIRT_PARENT and claim.type == TYPE and
               claim.node == drv._host.get_node_uuid(),
               'claimed as %s' % (claim,))
        avail = lab.available()
        expect(avail == before['available'] - 1,
               'available_instances %d, was %d' % (
                   avail, before['available']))
        expect(wait(lambda: lab.libvirt_available() == avail),
               'libvirt says %d available' % lab.libvirt_available())
        return '%s: parent %s, type %s, persistent; mdevctl --defined ' \
               'has it; available %d -> %d' % (
                   dev.name(), got[0], got[1], before['available'], avail)
    check('ensure', ensure)

    def compose():
        xml = lab.guest_xml(inst, [arq])
        with open(os.path.join(OUT, 'guest-1.xml'), 'w') as f:
            f.write(xml)
        doc = etree.fromstring(xml)
        hostdevs = doc.findall("./devices/hostdev[@type='mdev']")
        expect(len(hostdevs) == 1, '%d mdev hostdevs' % len(hostdevs))
        got = (hostdevs[0].get('model'),
               hostdevs[0].find('source/address').get('uuid'))
        expect(got == ('vfio-pci', mdev_uuid), 'hostdev %s' % (got,))
        expect(doc.get('type') == 'qemu', 'domain type %s' % doc.get('type'))
        errors = lab.validator.domain(xml)
        expect(not errors, 'domain.rng: %s' % errors)
        return 'hostdev model=%s uuid=%s; valid against domain.rng' % got
    xml1 = check('compose', compose)

    def start():
        expect(xml1 is not None, 'no guest XML')
        guest = drv._create_guest(lab.ctxt, lab.guest_xml(inst, [arq]),
                                  inst, power_on=False, pause=True)
        state = guest._domain.state()[0]
        expect(state == libvirt.VIR_DOMAIN_PAUSED, 'state %s' % state)
        live = etree.fromstring(guest._domain.XMLDesc(0))
        uuids = [a.get('uuid') for a in live.findall(
            "./devices/hostdev[@type='mdev']/source/address")]
        expect(uuids == [mdev_uuid], 'live hostdevs %s' % uuids)
        return '%s paused with mdev %s' % (guest._domain.name(), mdev_uuid)
    started = check('start', start)

    def second():
        inst2 = make_instance(2)
        arq2 = dict(arq, uuid=str(uuid.uuid4()), instance_uuid=inst2.uuid)
        try:
            drv._ensure_cyborg_mdevs(lab.ctxt, inst2, [arq2])
        finally:
            # what Nova does when a spawn fails: clean the guest up
            drv.cleanup(lab.ctxt, inst2, [], destroy_disks=False)
            expect(lab.mdev(mdev_uuid), 'cleanup removed the first '
                   "guest's mdev")
            expect(inst.name in lab.domains() and
                   inst2.name not in lab.domains(),
                   'domains after cleanup: %s' % lab.domains())
    check('second', second,
          raises=(exception.ComputeResourcesUnavailable,
                  ['in use by the running guest']))

    def delete():
        expect(started, 'the guest did not start')
        drv.destroy(lab.ctxt, inst, [], destroy_disks=False)
        expect(wait(lambda: lab.mdev(mdev_uuid) is None),
               'libvirt still has the mdev')
        expect(mdev_uuid not in lab.defined(), 'mdevctl still defines it')
        expect(wait(lambda: mdev_uuid not in lab.kernel_mdevs()),
               'still in the kernel')
        expect(not lab.claims(), 'still claimed: %s' % lab.claims())
        wait(lambda: lab.state() == before, timeout=5)
        after = lab.state()
        expect(after == before, 'before %s, after %s' % (before, after))
        return 'domain gone, mdev gone; available_instances back to %d' % (
            after['available'])
    check('destroy', delete)

    handle_reused(lab, handles[0])
    resumed(lab, handles[0])
    bad_input(lab, handles[0])
    return check.finish()


def handle_reused(lab, handle):
    """An attach handle freed by one instance goes to the next: the first
    instance's cleanup, when it comes late (the reaper of an instance
    deleted while its compute was down), keeps the second one's mdev."""
    drv = lab.drv
    first, second = make_instance(30), make_instance(31)
    arq1 = make_arq(handle, first)
    mdev_uuid = arq1['attach_handle_uuid']
    # the same handle, bound to the second instance once Cyborg freed it
    arq2 = dict(arq1, uuid=str(uuid.uuid4()), instance_uuid=second.uuid)

    def run():
        before = lab.state()
        drv._ensure_cyborg_mdevs(lab.ctxt, first, [arq1])
        guest = drv._create_guest(lab.ctxt, lab.guest_xml(first, [arq1]),
                                  first, power_on=False, pause=True)
        guest._domain.destroy()  # the first guest stops; still defined
        # the first instance is deleted while its compute is down; Cyborg
        # binds the freed handle to the second one
        DB.delete(first)
        drv._ensure_cyborg_mdevs(lab.ctxt, second, [arq2])
        claim = lab.claims(second).get(mdev_uuid)
        expect(claim and claim.owned_by_nova,
               'not taken over: %s' % (claim,))
        guest2 = drv._create_guest(lab.ctxt, lab.guest_xml(second, [arq2]),
                                   second, power_on=False, pause=True)
        # the first instance's cleanup
        drv.destroy(lab.ctxt, first, [], destroy_disks=False)
        expect(first.name not in lab.domains(), 'first guest still there')
        expect(lab.mdev(mdev_uuid), 'libvirt lost the mdev')
        expect(mdev_uuid in lab.defined(), 'mdevctl lost the mdev')
        expect(mdev_uuid in lab.kernel_mdevs(), 'the kernel lost the mdev')
        expect(guest2._domain.isActive(), 'the second guest stopped')
        # and the second instance's own delete removes it
        drv.destroy(lab.ctxt, second, [], destroy_disks=False)
        expect(wait(lambda: lab.state() == before, timeout=5),
               'before %s, after %s' % (before, lab.state()))
        expect(not lab.claims(), 'still claimed: %s' % lab.claims())
        return ("mdev %s kept for the second guest through the first "
                "one's cleanup, removed with the second" % mdev_uuid)
    check('reused', run)


def say(msg):
    print('  [%.0fs] %s' % (time.monotonic() - START, msg), flush=True)


class deadline(object):
    """Raise TimeoutError in the block after `seconds` (SIGALRM)."""

    def __init__(self, seconds, what):
        self.seconds, self.what = seconds, what

    def _expired(self, *args):
        raise TimeoutError('%s took more than %ds' % (self.what,
                                                      self.seconds))

    def __enter__(self):
        signal.signal(signal.SIGALRM, self._expired)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)


def restart_libvirtd():
    """Stop libvirtd and start it again, as guest-stage2.sh starts it."""
    with open('/run/libvirtd.pid') as f:
        pid = int(f.read().strip())
    os.kill(pid, 15)
    expect(wait(lambda: not os.path.exists('/proc/%d' % pid), timeout=30),
           'libvirtd did not stop')
    say('libvirtd %d stopped' % pid)
    env = dict(os.environ, LIBVIRT_DRIVER_DIR='/run/lab-drivers',
               LIBVIRT_LOG_OUTPUTS='3:file:/out/libvirtd.log')
    subprocess.run(['/usr/sbin/libvirtd', '--daemon', '--pid-file',
                    '/run/libvirtd.pid'], env=env, check=True, timeout=60)
    say('libvirtd started again')
    expect(wait(lambda: subprocess.run(
        ['virsh', '-c', URI, 'version'], capture_output=True,
        timeout=20).returncode == 0, timeout=60, step=1),
        'libvirtd did not come back')
    say('libvirtd answers')


def resumed(lab, handle):
    """The resume path (resume_guests_state_on_host_boot): after the host
    lost the mdev and its mdevctl definition and libvirtd restarted, the
    driver brings the guest back with its mdev."""
    drv = lab.drv
    inst = make_instance(40)
    arq = make_arq(handle, inst)
    mdev_uuid = arq['attach_handle_uuid']
    # (the instance's block devices are in the database, which the lab
    # does not have: the guest gets none)
    drv._build_device_metadata = lambda *args: None

    def run():
        with deadline(100, 'the resume check'):
            return steps()

    def steps():
        before = lab.state()
        drv._ensure_cyborg_mdevs(lab.ctxt, inst, [arq])
        guest = drv._create_guest(lab.ctxt, lab.guest_xml(inst, [arq]),
                                  inst, power_on=False, pause=True)
        guest._domain.destroy()
        dev = lab.mdev(mdev_uuid)
        dev.destroy()
        dev.undefine(0)
        expect(wait(lambda: lab.mdev(mdev_uuid) is None and
                    mdev_uuid not in lab.kernel_mdevs()), 'mdev not gone')
        expect(mdev_uuid not in lab.defined(), 'definition not gone')
        start = time.monotonic()
        restart_libvirtd()
        lab.conn = drv._host.get_connection()  # (a new connection)
        restarted = time.monotonic() - start
        say('nova reconnected to libvirtd')

        drv.resume_state_on_host_boot(lab.ctxt, inst, [],
                                      objects.ShareMappingList(),
                                      block_device_info=None,
                                      accel_info=[arq])
        say('resume_state_on_host_boot() returned')

        dev = wait(lambda: lab.mdev(mdev_uuid))
        expect(dev and dev.isActive() and dev.isPersistent(),
               'mdev not back: %s' % lab.mdev_names())
        expect(mdev_uuid in lab.defined(), 'mdevctl --defined: %s' % (
            lab.defined(),))
        expect(mdev_uuid in lab.kernel_mdevs(), 'not in the kernel')
        dom = lab.conn.lookupByUUIDString(inst.uuid)
        live = etree.fromstring(dom.XMLDesc(0))
        uuids = [a.get('uuid') for a in live.findall(
            "./devices/hostdev[@type='mdev']/source/address")]
        expect(dom.isActive() and uuids == [mdev_uuid],
               'domain active %s, hostdevs %s' % (dom.isActive(), uuids))
        drv.destroy(lab.ctxt, inst, [], destroy_disks=False)
        expect(wait(lambda: lab.state() == before, timeout=5),
               'before %s, after %s' % (before, lab.state()))
        return ('libvirtd restarted in %.0fs; the guest runs again with '
                'mdev %s, persistent again' % (restarted, mdev_uuid))
    check('resumed', run)


def bad_input(lab, handle):
    drv = lab.drv

    def leaves_nothing(key, n, changes, raises, arq_changes=None):
        inst = make_instance(n)
        arq = make_arq(handle, inst, **changes)
        arq.update(arq_changes or {})

        def run():
            before = lab.state()
            try:
                drv._ensure_cyborg_mdevs(lab.ctxt, inst, [arq])
            finally:
                # (libvirt's device list follows the kernel's with a lag)
                wait(lambda: lab.state() == before, timeout=5)
                after = lab.state()
                expect(after == before, 'left behind: before %s, after %s'
                       % (before, after))
                expect(not lab.claims(inst), 'claimed: %s' % lab.claims())
        check(key, run, raises=raises)

    leaves_nothing('bad_uuid', 10, {},
                   (exception.InvalidAcceleratorRequest,
                    ['attach_handle_uuid', 'not-a-uuid']),
                   {'attach_handle_uuid': 'not-a-uuid'})
    leaves_nothing('bad_type', 11, {'asked_type': 'mtty-9'},
                   (exception.NovaException, ['mtty-9']))
    leaves_nothing('bad_parent', 12, {'parent_name': 'nosuch'},
                   (exception.NovaException, ['nosuch']))

    # An mdev uuid that real libvirt does not know: a guest composed with
    # it (no _ensure_cyborg_mdevs) is refused when it starts.
    def unknown():
        inst = make_instance(20)
        arq = make_arq(handle, inst)
        before = lab.state()
        try:
            drv._create_guest(lab.ctxt, lab.guest_xml(inst, [arq]), inst,
                              power_on=False, pause=True)
        finally:
            drv.cleanup(lab.ctxt, inst, [], destroy_disks=False)
            wait(lambda: lab.state() == before, timeout=5)
            after = lab.state()
            expect(after == before, 'left behind: before %s, after %s' % (
                before, after))
    check('unknown', unknown,
          raises=(libvirt.libvirtError, ['not found']))

    # The uuid of an existing mdev of another type: refused, and that mdev
    # (not Nova's) is kept.
    def taken():
        inst = make_instance(21)
        arq = make_arq(handle, inst)
        other = arq['attach_handle_uuid']
        with open(PARENT_SYSFS + '/mdev_supported_types/mtty-1/create',
                  'w') as f:
            f.write(other)
        expect(wait(lambda: lab.mdev(other)), 'libvirt does not list the '
               'mtty-1 mdev')
        try:
            drv._ensure_cyborg_mdevs(lab.ctxt, inst, [arq])
        finally:
            kept = other in lab.kernel_mdevs()
            with open('/sys/bus/mdev/devices/%s/remove' % other, 'w') as f:
                f.write('1')
            expect(kept, 'the mtty-1 mdev was removed')
            expect(not lab.claims(inst), 'claimed: %s' % lab.claims())
    check('taken', taken,
          raises=(exception.InvalidAcceleratorRequest,
                  ['attach_handle_uuid', 'another parent or type']))

    # The same, when libvirt lists that mdev only after Nova listed the
    # host's mdevs (libvirt's list follows udev's events: they are held back
    # until Nova calls Host.device_create, as when the mdev is made at that
    # moment): Nova's create fails, and its rollback must not remove an mdev
    # it did not make.
    inst22 = make_instance(22)
    arq22 = make_arq(handle, inst22)

    def unlisted():
        inst, arq = inst22, arq22
        other = arq['attach_handle_uuid']
        real_create = drv._host.device_create

        def udev_catches_up(conf):
            sh('udevadm', 'control', '--start-exec-queue')
            wait(lambda: lab.mdev(other))
            return real_create(conf)
        sh('udevadm', 'control', '--stop-exec-queue')
        drv._host.device_create = udev_catches_up
        try:
            with open(PARENT_SYSFS + '/mdev_supported_types/mtty-1/create',
                      'w') as f:
                f.write(other)
            drv._ensure_cyborg_mdevs(lab.ctxt, inst, [arq])
        finally:
            del drv._host.device_create
            kept = other in lab.kernel_mdevs()
            sh('udevadm', 'control', '--start-exec-queue')
            if kept:
                with open('/sys/bus/mdev/devices/%s/remove' % other,
                          'w') as f:
                    f.write('1')
            expect(kept, 'Nova removed the mtty-1 mdev it did not make')
            expect(not lab.claims(inst), 'claimed: %s' % lab.claims())
    check('unlisted', unlisted,
          raises=(exception.NovaException, [arq22['attach_handle_uuid']]))
    print('after: %s' % lab.state(), flush=True)


if __name__ == '__main__':
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # (libvirt's event loop thread, started by Host.initialize(), never
    # ends: do not wait for it)
    os._exit(code)
