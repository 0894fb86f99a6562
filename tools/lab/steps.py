"""The steps tier 3's days are made of, each one check (or a part of one).

A Steps object acts as the operator (cloudapi.Operator: the openstack
client) and reads what each action left: the APIs, and on the compute host
libvirt, QEMU, mdevctl and sysfs (cloudapi.probe). Each step returns the
detail of its PASS line or raises cloudapi.Failed saying what did not hold;
days.py composes them into days. Only the standard library at import time.
"""

import re
import struct
import subprocess
import time
import uuid as uuid_mod

import cloud
from cloudapi import expect, Failed, log_lines, log_path, probe, say

MDEV_TYPE, RC = 'mtty-2', 'CUSTOM_MDEV_MTTY_2'
OTHER_TYPE, OTHER_RC = 'mtty-1', 'CUSTOM_MDEV_MTTY_1'
PROVIDER = 'lab_mdev_mtty_%s'           # Cyborg's provider of a type
TYPES = ((MDEV_TYPE, RC), (OTHER_TYPE, OTHER_RC))
# The servers' images: what each one's boot sector prints on the serial
# console (openstack console log show).
IMAGES = {'tiny': 'lab image tiny', 'tiny2': 'lab image tiny2'}
ARMED = 'power button armed'
# What nova-compute logs when a soft reboot's guest shut down by itself,
# and when it gave up waiting and hard-rebooted it instead.
SOFT_PATH = re.compile(r'\] Instance shutdown successfully\.\s*$')
HARD_FALLBACK = 'Failed to soft reboot instance. Trying hard reboot.'


def boot_sector(banner):
    """A 512-byte boot sector for the servers that answers the ACPI power
    button as an operating system does. It arms the button (PM1_EN), says
    so on COM1, and sleeps (hlt) with every interrupt masked but IRQ 9, the
    ACPI SCI, whose handler it installs: no timer wakes it, so its QEMU
    idles. When libvirt's shutdown presses the button (QEMU's
    system_powerdown), the SCI wakes it; the handler checks PWRBTN_STS,
    says so and powers the machine off (S5). The ACPI registers are at the
    PM base SeaBIOS gives both i440fx and q35, 0x600 (PM1_STS +0, PM1_EN +2,
    PM1_CNT +4), and the SCI is IRQ 9 (int 0x71) on both. A partition
    entry, as Nova's image format inspector wants one."""
    ready = ('%s: ready, %s\r\n' % (banner, ARMED)).encode() + b'\0'
    off = ('%s: power button pressed, powering off\r\n' %
           banner).encode() + b'\0'
    at_ready = 0x7c00 + 0x5d
    at_off = at_ready + len(ready)

    def word(value):
        return struct.pack('<H', value).hex()
    code = bytes.fromhex(
        'fa'              # 00 cli
        'fc'              # 01 cld
        '31c0'            # 02 xor ax, ax
        '8ed8'            # 04 mov ds, ax
        '8ed0'            # 06 mov ss, ax
        'bc007c'          # 08 mov sp, 0x7c00
        'c706c401' + word(0x7c30) +
        #                   0b mov word [0x71*4], sci    int 0x71: IRQ 9
        'c706c6010000'    # 11 mov word [0x71*4+2], 0
        'b0fb'            # 17 mov al, 0xfb              master PIC: IRQ 2
        'e621'            # 19 out 0x21, al              (the slave) only
        'b0fd'            # 1b mov al, 0xfd              slave PIC: IRQ 9
        'e6a1'            # 1d out 0xa1, al              only
        'ba0206'          # 1f mov dx, 0x602             PM1_EN
        'b80001'          # 22 mov ax, 0x0100            PWRBTN_EN
        'ef'              # 25 out dx, ax
        'be' + word(at_ready) +
        #                   26 mov si, ready
        'e82500'          # 29 call print (0x51)
        'fb'              # 2c sti
        'f4'              # 2d idle: hlt
        'ebfd'            # 2e jmp idle
        'ba0006'          # 30 sci: mov dx, 0x600        PM1_STS
        'ed'              # 33 in ax, dx
        'a90001'          # 34 test ax, 0x0100           PWRBTN_STS
        '7411'            # 37 jz spurious (0x4a)
        'be' + word(at_off) +
        #                   39 mov si, off
        'e81200'          # 3c call print (0x51)
        'ba0406'          # 3f mov dx, 0x604             PM1_CNT
        'b80020'          # 42 mov ax, 0x2000            SLP_EN, SLP_TYP 0:
        'ef'              # 45 out dx, ax                soft off
        'fa'              # 46 cli
        'f4'              # 47 halt: hlt
        'ebfd'            # 48 jmp halt
        'b020'            # 4a spurious: mov al, 0x20    end of interrupt
        'e6a0'            # 4c out 0xa0, al
        'e620'            # 4e out 0x20, al
        'cf'              # 50 iret
        'baf803'          # 51 print: mov dx, 0x3f8      COM1
        'ac'              # 54 next: lodsb
        '84c0'            # 55 test al, al
        '7403'            # 57 jz done (0x5c)
        'ee'              # 59 out dx, al
        'ebf8'            # 5a jmp next
        'c3'              # 5c done: ret
    )
    assert len(code) == 0x5d
    body = code + ready + off
    partition = struct.pack('<B3BB3BII', 0x80, 0, 2, 0, 0x83, 0xfe, 0xff,
                            0xff, 1, 32 * 1024 - 1)
    return body + bytes(446 - len(body)) + partition + bytes(48) + \
        b'\x55\xaa'


def make_image(path, banner):
    """A 16 MiB qcow2 image whose disk boots boot_sector(banner)."""
    raw = path.with_suffix('.raw')
    with open(raw, 'wb') as f:
        f.write(boot_sector(banner))
        f.truncate(16 * 1024 * 1024)
    cloud.run(['qemu-img', 'convert', '-q', '-f', 'raw', '-O', 'qcow2',
               raw, path], 'qemu-img convert')
    raw.unlink()


def log_mark(name):
    path = log_path(name)
    return path.stat().st_size if path.exists() else 0


def log_since(name, mark):
    path = log_path(name)
    if not path.exists():
        return []
    with open(path, errors='replace') as f:
        f.seek(mark)
        return f.read().splitlines()


def compute_heartbeat(api):
    """When the service record of nova-compute on lab last changed (the
    API's updated_at, an ISO time string, '' if never): each of its
    heartbeats changes it."""
    svcs = api.get('compute', '/os-services', binary='nova-compute')
    return max([s['updated_at'] or '' for s in svcs['services']
                if s['host'] == 'lab'] or [''])


def boot_mdevs():
    """The mdevs sysfs had at the compute host's last boot, once udev had
    settled (its mdevctl rule starts the persistent ones), before
    nova-compute started: cloud-guest.sh writes them to boot.txt."""
    lines = cloud.tail(cloud.GUEST_OUT / 'boot.txt', 50)
    boots = [i for i, line in enumerate(lines) if '] boot ' in line]
    for line in lines[boots[-1] if boots else 0:]:
        if 'udev settled; mdevs:' in line:
            return line.split('mdevs:', 1)[1].split()
    return []


def boots():
    """How many times the compute host has booted (cloud-guest.sh)."""
    try:
        return int((cloud.GUEST_OUT / 'boots').read_text())
    except (OSError, ValueError):
        return 0


def conductor_errors(mark):
    return [line.strip()[:300] for line in log_since('cyborg-conductor',
                                                     mark)
            if re.search(r' (ERROR|CRITICAL) |Traceback', line)]


def wait_compute(lab):
    """nova-compute on the compute host is up and its node in Placement."""
    api = lab.api

    def compute_up():
        svcs = api.get('compute', '/os-services', binary='nova-compute')
        return [s for s in svcs['services']
                if s['host'] == 'lab' and s['state'] == 'up']
    cloud.wait_for('nova-compute on lab is up', compute_up, 600, step=2,
                   service=lab.guest.service)

    def provider():
        return api.get('placement', '/resource_providers',
                       name='lab')['resource_providers']
    cloud.wait_for('the compute node\'s provider is in Placement', provider,
                   300, step=2, service=lab.guest.service)
    # mapped to its cell, as a deployment does once its computes are up
    # (the scheduler's periodic discovery may not have run yet: a server
    # scheduled there would fail "Host 'lab' is not mapped to any cell")
    nova_manage = [str(cloud.NOVA_VENV / 'bin' / 'nova-manage'),
                   '--config-file', str(cloud.ETC / 'nova' / 'nova.conf'),
                   'cell_v2']
    env = cloud.service_env(cloud.NOVA_VENV)

    def mapped():
        subprocess.run(nova_manage + ['discover_hosts'], env=env,
                       capture_output=True)
        hosts = subprocess.run(nova_manage + ['list_hosts'], env=env,
                               capture_output=True, text=True).stdout
        return re.search(r'\|\s*cell1\s*\|[^|]*\|\s*lab\s*\|', hosts)
    cloud.wait_for('the compute host mapped to cell1', mapped, 120, step=2)


class Steps:
    """The operator's steps on the lab cloud, and what each one checks."""

    def __init__(self, lab):
        self.lab = lab
        self.op = lab.op
        self.api = lab.api
        self.servers = {}           # name -> id
        self.images = {}            # name -> id
        self.handmade = None        # the operator's provider (bind_fails)
        self.operator_mdevs = set()  # made by "the operator", not Cyborg
        # the mtty parent's capacity and Cyborg's providers' inventories
        # at the first discovery, before any server (the delete's baseline)
        self.start_available = None
        self.start_inventory = None
        self.seen = None            # (domain, mdev uuid, Host): verify()

    # -- reading the cloud --
    def server(self, sid):
        return self.api.get('compute', '/servers/%s' % sid)['server']

    def wait_server(self, sid, status, timeout=600):
        def done():
            srv = self.server(sid)
            # (an operation on a server in ERROR, such as a hard reboot,
            # leaves it in ERROR until its task is done)
            if srv['status'] == 'ERROR' and status != 'ERROR' and \
                    not srv.get('OS-EXT-STS:task_state'):
                raise Failed('server %s went to ERROR: %s' % (
                    srv['name'], (srv.get('fault') or {}).get('message')))
            return srv if (srv['status'] == status and
                           not srv.get('OS-EXT-STS:task_state')) else None
        return cloud.wait_for('server %s %s' % (sid, status), done, timeout,
                              step=1, service=self.lab.guest.service)

    def arqs(self, instance=None):
        params = {'instance': instance} if instance else {}
        return self.api.get('accelerator', '/accelerator_requests',
                            **params)['arqs']

    def providers(self):
        """{name: provider} of the lab's tree, with inventories, usages
        and traits."""
        tree = {}
        rps = self.api.get('placement', '/resource_providers')[
            'resource_providers']
        for rp in rps:
            u = rp['uuid']
            rp['inventories'] = self.api.get(
                'placement', '/resource_providers/%s/inventories' % u)[
                    'inventories']
            rp['usages'] = self.api.get(
                'placement', '/resource_providers/%s/usages' % u)['usages']
            rp['traits'] = self.api.get(
                'placement', '/resource_providers/%s/traits' % u)['traits']
            tree[rp['name']] = rp
        return tree

    def cyborg_inventory(self, rps):
        """{provider: {class: (total, reserved)}} of Cyborg's providers."""
        return {PROVIDER % t: {
            c: (inv['total'], inv['reserved']) for c, inv in
            rps[PROVIDER % t]['inventories'].items()}
            for t, _ in TYPES if PROVIDER % t in rps}

    def console(self, name):
        """The server's serial console log (os-getConsoleOutput)."""
        return self.api.post(
            'compute', '/servers/%s/action' % self.servers[name],
            {'os-getConsoleOutput': {'length': 20}})['output']

    def wait_console(self, name, text, timeout=300):
        """Wait for text in the server's console (its guest booted and
        its boot sector ran); returns the console's last line of it."""
        found = cloud.wait_for(
            '"%s" on the console of %s' % (text, name), lambda: [
                line for line in self.console(name).splitlines()
                if text in line], timeout, step=3,
            service=self.lab.guest.service)
        return found[-1].strip()

    def qemu_pid(self, name):
        """The QEMU process of a running server's guest (a check that
        compares it with a later one has nothing to compare without it)."""
        domain = self.server(self.servers[name])[
            'OS-EXT-SRV-ATTR:instance_name']
        pid = probe(self.lab.guest).qemu_pid.get(domain)
        expect(pid is not None, 'no QEMU process runs %s (%s) before the '
               'action' % (name, domain))
        return pid

    # -- what every check of a server with its device looks at --
    def verify(self, name, status='ACTIVE', running=True):
        sid = self.servers[name]
        srv = self.server(sid)
        expect(srv['status'] == status, '%s is %s, not %s' % (
            name, srv['status'], status))
        domain = srv['OS-EXT-SRV-ATTR:instance_name']
        arqs = self.arqs(sid)
        expect(len(arqs) == 1, '%d ARQs for %s: %s' % (len(arqs), name,
                                                       arqs))
        arq = arqs[0]
        expect(arq['state'] == 'Bound' and
               arq['attach_handle_type'] == 'MDEV',
               'ARQ %s is %s with a %s handle' % (
                   arq['uuid'], arq['state'], arq['attach_handle_type']))
        uuid = arq['attach_handle_uuid']
        host = probe(self.lab.guest)
        expect(host.hostdevs.get(domain) == [uuid],
               'domain %s has mdev hostdevs %s, not [%s]' % (
                   domain, host.hostdevs.get(domain), uuid))
        want = {'ACTIVE': 'running', 'PAUSED': 'paused',
                'SHUTOFF': 'shut_off'}[status]
        expect(host.domains.get(domain) == want,
               'domain %s is %s, not %s' % (domain, host.domains.get(domain),
                                            want))
        if running:
            expect(uuid in host.qemu.get(domain, []),
                   'QEMU of %s has no sysfsdev for %s (%s)' % (
                       domain, uuid, host.qemu.get(domain)))
        expect(host.mdevs.get(uuid) == ('mtty', MDEV_TYPE),
               'mdev %s in sysfs: %s' % (uuid, host.mdevs.get(uuid)))
        expect(uuid in host.defined and 'auto' in host.defined[uuid],
               'mdevctl --defined: %s' % host.defined.get(uuid))
        info = host.nodedev(uuid) or {}
        expect(info.get('persistent') == 'yes' and
               info.get('autostart') == 'yes' and
               info.get('active') == 'yes', 'libvirt: %s' % info)
        self.no_leaks(host)
        self.seen = (domain, uuid, host)
        return '%s %s, ARQ Bound to mdev %s (%s on mtty), domain %s %s' % (
            name, status, uuid, MDEV_TYPE, domain, want)

    def note_host(self):
        """What the last verify() saw on the compute host, for the
        transcript (the probe's view: virsh, mdevctl, sysfs, QEMU)."""
        domain, uuid, host = self.seen
        self.op.note(
            'On the compute host (tools/lab/cloud-probe.sh): domain %s %s, '
            'its hostdev type=mdev %s, QEMU (pid %s) started with sysfsdev '
            '/sys/bus/mdev/devices/%s; sysfs: %s on %s; mdevctl --defined: '
            '%s; libvirt node device: %s; mtty available %s' % (
                domain, host.domains.get(domain), host.hostdevs.get(domain),
                host.qemu_pid.get(domain),
                ', '.join(host.qemu.get(domain, [])),
                host.mdevs.get(uuid, ('?', '?'))[1],
                host.mdevs.get(uuid, ('?', '?'))[0],
                ' '.join(host.defined.get(uuid, [])), host.nodedev(uuid),
                host.available))

    def no_leaks(self, host=None):
        """The host's mdevs are the bound ARQs' (and the operator's), and
        Placement's usages on Cyborg's providers, both there, are the
        bound ARQs."""
        host = host or probe(self.lab.guest)
        bound = {a['attach_handle_uuid']: a for a in self.arqs()
                 if a['state'] == 'Bound'}
        ours = set(host.mdevs) - self.operator_mdevs
        expect(ours == set(bound), 'mdevs on the host %s != bound ARQs %s'
               % (sorted(ours), sorted(bound)))
        defined = set(host.defined) - self.operator_mdevs
        expect(defined <= set(bound), 'mdevctl defines mdevs of no bound '
               'ARQ: %s' % sorted(defined - set(bound)))
        rps = self.providers()
        for mdev_type, rc in TYPES:
            rp = rps.get(PROVIDER % mdev_type)
            expect(rp is not None, 'Cyborg\'s provider %s is gone from '
                   'Placement (providers: %s)' % (PROVIDER % mdev_type,
                                                  sorted(rps)))
            n = sum(1 for a in bound.values()
                    if a['device_rp_uuid'] == rp['uuid'])
            used = rp['usages'].get(rc, 0)
            expect(used == n, 'Placement: %s used on %s, %d ARQs bound '
                   'there' % (used, rp['name'], n))
        return host

    # -- the steps --
    def setup(self):
        """The operator's images, device profile and flavors."""
        op = self.op
        op.note('The operator: no networks (servers use --nic none), two '
                'images, a device profile and two flavors')
        # (also Neutron's first query: it configures its DB models, which
        # a first GET /v2.0/ports alone does not, see neutron.conf)
        op('network list')
        for name, banner in IMAGES.items():
            path = cloud.CLOUD / ('%s.qcow2' % name)
            make_image(path, banner)
            image = op('image create --disk-format qcow2 --container-format '
                       'bare --public --file %s %s' % (path, name))
            self.images[name] = image['id']
        op("accelerator device profile create mtty-dp "
           "'[{\"resources:%s\": \"1\"}]'" % RC)
        op('flavor create --ram 64 --disk 1 --vcpus 1 '
           '--property accel:device_profile=mtty-dp mtty.tiny')
        op('flavor create --ram 128 --disk 1 --vcpus 1 '
           '--property accel:device_profile=mtty-dp mtty.small')

    def discovery(self):
        def found():
            rps = self.providers()
            return rps if all(PROVIDER % t in rps for t, _ in TYPES) \
                else None
        rps = cloud.wait_for('Cyborg\'s providers in Placement', found, 300,
                             step=2, service=self.lab.guest.service)
        op = self.op
        op.note('Discovery: what Cyborg reports, what Placement holds')
        op('accelerator device list')
        op('accelerator deployable list')
        op('--os-placement-api-version 1.14 resource provider list')
        compute = rps['lab']
        expect('OWNER_NOVA' in compute['traits'],
               'the compute node lacks OWNER_NOVA: %s' % compute['traits'])
        details = []
        for mdev_type, rc in TYPES:
            rp = rps[PROVIDER % mdev_type]
            op('resource provider inventory list %s' % rp['uuid'])
            op('--os-placement-api-version 1.6 resource provider trait '
               'list %s' % rp['uuid'])
            expect(rp['parent_provider_uuid'] == compute['uuid'],
                   '%s is not under the compute node' % rp['name'])
            expect(list(rp['inventories']) == [rc],
                   '%s inventories %s' % (rp['name'], rp['inventories']))
            expect('OWNER_CYBORG' in rp['traits'],
                   '%s traits %s' % (rp['name'], rp['traits']))
            details.append('%s %s x%d' % (rp['name'], rc,
                                          rp['inventories'][rc]['total']))
        host = probe(self.lab.guest)
        if self.start_available is None:
            self.start_available = host.available
            self.start_inventory = self.cyborg_inventory(rps)
        return 'compute node lab OWNER_NOVA; %s, OWNER_CYBORG; host: %s' % (
            ', '.join(details), host.summary())

    def boot(self, name, *more):
        """Servers created (at once, when more than one), each verified."""
        t = time.monotonic()
        for n in (name,) + more:
            srv = self.op('server create --flavor mtty.tiny --image tiny '
                          '--nic none %s' % n)
            self.servers[n] = srv['id']
        for n in (name,) + more:
            self.wait_server(self.servers[n], 'ACTIVE')
        took = time.monotonic() - t
        verified = []
        for n in (name,) + more:
            verified.append('%s, QEMU pid %s' % (
                self.verify(n), self.seen[2].qemu_pid.get(self.seen[0])))
        self.op('accelerator arq list --long')
        self.note_host()
        return '%s (booted in %ds)' % ('; '.join(verified), took)

    def delete_one(self, name):
        """One server deleted: its ARQ and its mdev gone (libvirt,
        mdevctl, sysfs), the parent's capacity back by one, Placement's
        usages those of the other servers' ARQs and Cyborg's inventories
        in Placement as before the delete."""
        t = time.monotonic()
        sid = self.servers[name]
        uuid = self.arqs(sid)[0]['attach_handle_uuid']
        before = probe(self.lab.guest).available[MDEV_TYPE]
        inventory = self.cyborg_inventory(self.providers())
        self.op('server delete --wait %s' % name, fmt=None)
        del self.servers[name]
        arqs = self.arqs(sid)
        expect(not arqs, 'ARQs of the deleted %s left: %s' % (name, arqs))
        host = self.no_leaks()
        expect(uuid not in host.mdevs and uuid not in host.defined and
               not host.nodedev(uuid), 'the mdev %s of the deleted %s is '
               'left: sysfs %s, mdevctl %s, libvirt %s' % (
                   uuid, name, host.mdevs.get(uuid), host.defined.get(uuid),
                   host.nodedev(uuid)))
        expect(host.available[MDEV_TYPE] == before + 1,
               '%s available: %d, %d before the delete' % (
                   MDEV_TYPE, host.available[MDEV_TYPE], before))
        after = self.cyborg_inventory(self.providers())
        expect(after == inventory, 'Cyborg\'s inventories in Placement '
               '(total, reserved): %s, before the delete: %s' % (
                   after, inventory))
        self.op('accelerator arq list')
        return 'ARQ and mdev %s gone, %s available %d -> %d, Placement ' \
            'inventories %s as before (%ds)' % (
                uuid, MDEV_TYPE, before, host.available[MDEV_TYPE], after,
                time.monotonic() - t)

    def lifecycle(self, name, command, status='ACTIVE', then=None,
                  restarts=True, image=None):
        """An operator's action on a server (and its undoing, `then`), its
        device checked after each. restarts: the guest must run in a new
        QEMU process afterwards (the action stops and starts it), or else
        in the same one. image: the image the server must run afterwards
        (its boot sector's banner on the new console)."""
        sid = self.servers[name]
        t = time.monotonic()
        before = self.qemu_pid(name)
        self.op(command, fmt=None)
        self.wait_server(sid, status)
        details = []
        if then:
            details.append(self.verify(name, status,
                                       running=status != 'SHUTOFF'))
            self.op(then, fmt=None)
            self.wait_server(sid, 'ACTIVE')
        details.append(self.verify(name))
        domain, _, host = self.seen
        after = host.qemu_pid.get(domain)
        if restarts:
            expect(after is not None and after != before, 'QEMU of %s is '
                   '%s, was process %s: the guest was not restarted' % (
                       domain, after, before))
        else:
            expect(after == before, 'QEMU of %s was process %s, is %s: the '
                   'guest was restarted' % (domain, before, after))
        details.append('QEMU pid %s -> %s' % (before, after))
        if image:
            got = self.server(sid)['image']['id']
            expect(got == self.images[image], '%s runs image %s, not %s '
                   '(%s)' % (name, got, image, self.images[image]))
            details.append('console: "%s"' % self.wait_console(
                name, '%s: ready' % IMAGES[image]))
            self.op('console log show --lines 2 %s' % name, fmt=None)
        return '%s (%ds)' % ('; '.join(details), time.monotonic() - t)

    def soft_reboot(self, name):
        """A soft reboot that is one: the guest shuts down when libvirt
        presses its ACPI power button, nova-compute logs its soft path
        (not the hard reboot it falls back to) and starts it again in a
        new QEMU process."""
        t = time.monotonic()
        sid = self.servers[name]
        # (its boot sector listens to the button once it said so)
        armed = self.wait_console(name, ARMED)
        before = self.qemu_pid(name)
        mark = log_mark('nova-compute')
        self.op('server reboot --soft %s' % name, fmt=None)
        self.wait_server(sid, 'ACTIVE')
        verified = self.verify(name)
        domain, _, host = self.seen
        after = host.qemu_pid.get(domain)
        lines = [line for line in log_since('nova-compute', mark)
                 if sid in line]
        soft = [line for line in lines if SOFT_PATH.search(line)]
        hard = [line for line in lines if HARD_FALLBACK in line]
        expect(soft and not hard, 'nova-compute did not take the soft '
               'path: %s' % (' | '.join(hard) or 'no "Instance shutdown '
                             'successfully." for %s' % sid))
        expect(after is not None and after != before, 'QEMU of %s is %s, '
               'was process %s: the guest was not restarted' % (
                   domain, after, before))
        again = self.wait_console(name, ARMED)
        self.op('console log show --lines 2 %s' % name, fmt=None)
        # (nova-compute's line first: it says which path ran)
        return ('nova-compute: "%s"; QEMU pid %s -> %s; console before: '
                '"%s", after: "%s"; %s (%ds)' % (
                    soft[0].split('] ', 1)[-1].strip(), before, after, armed,
                    again, verified, time.monotonic() - t))

    def recover(self, name):
        """After a failed check: bring the server back to ACTIVE for the
        next ones, as an operator would."""
        sid = self.servers.get(name)
        if sid is None:
            return
        undo = {'SHELVED_OFFLOADED': 'server unshelve', 'SHELVED':
                'server unshelve', 'SHUTOFF': 'server start',
                'PAUSED': 'server unpause', 'ERROR': 'server reboot --hard',
                'VERIFY_RESIZE': 'server resize revert'}
        try:
            cloud.wait_for('%s settles' % name, lambda: not self.server(
                sid).get('OS-EXT-STS:task_state'), 300, step=2)
            srv = self.server(sid)
            # (Nova hard-reboots a server in ERROR)
            if srv['status'] in undo:
                self.op('%s %s' % (undo[srv['status']], name), fmt=None,
                        ok=False)
            self.wait_server(sid, 'ACTIVE', timeout=300)
            self.op.note('(recovered %s after a failed check)' % name)
        except (Failed, RuntimeError) as e:
            say('   could not bring %s back to ACTIVE: %s' % (name, e))

    def lock_unlock(self, name):
        sid = self.servers[name]
        before = self.qemu_pid(name)
        self.op('server lock %s' % name, fmt=None)
        expect(self.server(sid)['locked'], '%s is not locked' % name)
        self.op('server unlock %s' % name, fmt=None)
        expect(not self.server(sid)['locked'], '%s is still locked' % name)
        verified = self.verify(name)
        after = self.seen[2].qemu_pid.get(self.seen[0])
        expect(after == before, 'QEMU was process %s, is %s' % (before,
                                                                after))
        return '%s; QEMU pid %s kept' % (verified, after)

    def snapshot(self, name):
        t = time.monotonic()
        image = self.op('server image create --name %s-snapshot %s' % (
            name, name))
        cloud.wait_for('the snapshot is active', lambda: self.api.get(
            'image', '/v2/images/%s' % image['id'])['status'] == 'active',
            300, step=1)
        self.wait_server(self.servers[name], 'ACTIVE')
        return 'image %s-snapshot active; %s (%ds)' % (
            name, self.verify(name), time.monotonic() - t)

    def shelve_unshelve(self, name):
        t = time.monotonic()
        sid = self.servers[name]
        # (shelved_offload_time is 0: nova-compute offloads at once)
        self.op('server shelve %s' % name, fmt=None)
        self.wait_server(sid, 'SHELVED_OFFLOADED')
        arqs = self.arqs(sid)
        expect(not arqs, 'the offloaded server has ARQs: %s' % arqs)
        host = self.no_leaks()
        domain = self.server(sid)['OS-EXT-SRV-ATTR:instance_name']
        expect(domain not in host.domains,
               'the offloaded server\'s domain %s is still on the host'
               % domain)
        self.op('accelerator arq list')
        self.op('server unshelve %s' % name, fmt=None)
        self.wait_server(sid, 'ACTIVE')
        return 'offloaded: no domain, no ARQ, no mdev left; unshelved: ' \
            '%s (%ds)' % (self.verify(name), time.monotonic() - t)

    def refused(self, name, command, words):
        """An operation Nova does not do with accelerators: refused with
        HTTP 400 and its message, the server untouched."""
        sid = self.servers[name]
        before = self.arqs(sid)
        p = self.op(command, fmt=None, ok=False)
        text = (p.stdout + p.stderr).strip().replace('\n', ' ')
        expect(p.returncode != 0, '`openstack %s` was accepted: %s' % (
            command, text[:300]))
        missing = [w for w in words if w.lower() not in text.lower()]
        expect(not missing, 'the refusal does not say %s: %s' % (
            missing, text[:400]))
        # the client shows the code as "(HTTP 400)" (novaclient) or
        # "400: Client Error" (openstacksdk)
        expect(re.search(r'\bHTTP 400\b|\b400: Client Error', text),
               'the refusal is not an HTTP 400: %s' % text[:400])
        srv = self.server(sid)
        expect(not srv.get('OS-EXT-STS:task_state'),
               'task_state %s' % srv.get('OS-EXT-STS:task_state'))
        expect([a['uuid'] for a in self.arqs(sid)] ==
               [a['uuid'] for a in before], 'the ARQs changed')
        return 'refused: "%s"; %s' % (text[:200], self.verify(name))

    def verify_resized(self, name, source):
        """A server in VERIFY_RESIZE on the one compute host: its guest has
        the mdev of the ARQ bound for the resize; the source's ARQ and mdev
        stay until the resize is confirmed (two ARQs Bound, two mdevs, both
        used in Placement). Returns the destination's mdev."""
        sid = self.servers[name]
        srv = self.server(sid)
        expect(srv['status'] == 'VERIFY_RESIZE', '%s is %s' % (
            name, srv['status']))
        domain = srv['OS-EXT-SRV-ATTR:instance_name']
        arqs = self.arqs(sid)
        handles = sorted(a['attach_handle_uuid'] for a in arqs)
        expect(len(arqs) == 2 and all(
            a['state'] == 'Bound' and a['attach_handle_type'] == 'MDEV'
            for a in arqs) and source in handles,
            'ARQs of %s while it waits for confirmation: %s' % (name, [
                (a['uuid'], a['state'], a['attach_handle_uuid'])
                for a in arqs]))
        dest = [h for h in handles if h != source][0]
        host = probe(self.lab.guest)
        expect(host.hostdevs.get(domain) == [dest],
               'domain %s has mdev hostdevs %s, not [%s]' % (
                   domain, host.hostdevs.get(domain), dest))
        expect(host.domains.get(domain) == 'running' and
               dest in host.qemu.get(domain, []),
               'domain %s is %s, QEMU sysfsdevs %s' % (
                   domain, host.domains.get(domain), host.qemu.get(domain)))
        for uuid in (source, dest):
            expect(host.mdevs.get(uuid) == ('mtty', MDEV_TYPE),
                   'mdev %s in sysfs: %s' % (uuid, host.mdevs.get(uuid)))
            expect(uuid in host.defined, 'mdevctl --defined lacks %s: %s'
                   % (uuid, sorted(host.defined)))
        self.no_leaks(host)
        return dest

    def resize_same_host(self, name):
        """A resize to another flavor with the device profile, to the one
        compute host (allow_resize_to_same_host): the destination's ARQ is
        bound and its mdev made while the source's stay; the revert gives
        the guest its own back and removes the destination's; a second
        resize's confirm removes the source's."""
        t = time.monotonic()
        sid = self.servers[name]
        self.verify(name)
        source = self.seen[1]
        details = []
        for then in ('revert', 'confirm'):
            self.op('server resize --flavor mtty.small %s' % name, fmt=None)
            self.wait_server(sid, 'VERIFY_RESIZE')
            dest = self.verify_resized(name, source)
            self.op('accelerator arq list --long')
            self.op('server resize %s %s' % (then, name), fmt=None)
            self.wait_server(sid, 'ACTIVE')
            self.verify(name)
            kept = source if then == 'revert' else dest
            expect(self.seen[1] == kept, 'after the %s %s has mdev %s, not '
                   '%s' % (then, name, self.seen[1], kept))
            gone = dest if then == 'revert' else source
            expect(gone not in self.seen[2].mdevs and
                   gone not in self.seen[2].defined,
                   'mdev %s is left after the %s' % (gone, then))
            details.append('%s: mdev %s kept, %s removed' % (
                then, kept, gone))
        flavor = self.server(sid)['flavor']['original_name']
        expect(flavor == 'mtty.small', '%s has flavor %s' % (name, flavor))
        return '%s; %s (%ds)' % ('; '.join(details), self.verify(name),
                                 time.monotonic() - t)

    def migrate_nowhere(self, name):
        """A cold migration with no other compute host: accepted, the
        scheduler finds no host, the server keeps running with its ARQ and
        mdev, and no ARQ is left behind."""
        sid = self.servers[name]
        before = [a['uuid'] for a in self.arqs(sid)]
        every = sorted(a['uuid'] for a in self.arqs())
        self.op('server migrate %s' % name, fmt=None)

        def failed():
            migrations = self.api.get(
                'compute', '/os-migrations', instance_uuid=sid)['migrations']
            return [m for m in migrations if m['migration_type'] ==
                    'migration' and m['status'] == 'error'] or None
        cloud.wait_for('the migration of %s in error' % name, failed, 300,
                       step=2, service=self.lab.guest.service)
        self.wait_server(sid, 'ACTIVE')
        expect([a['uuid'] for a in self.arqs(sid)] == before,
               'the ARQs of %s changed: %s' % (name, self.arqs(sid)))
        expect(sorted(a['uuid'] for a in self.arqs()) == every,
               'ARQs left by the migration: %s' % [
                   a for a in self.arqs() if a['uuid'] not in every])
        return 'no valid host, migration error; %s' % self.verify(name)

    def host_reboot(self, name, *more):
        """The compute host reboots: its services stop, the kernel goes
        down, it boots again (same disk), udev/mdevctl and libvirtd come
        up, nova-compute starts and resumes its guests (the servers
        named)."""
        t = time.monotonic()
        names = (name,) + more
        sids = [self.servers[n] for n in names]
        arqs = [self.arqs(sid)[0] for sid in sids]
        guest = self.lab.guest
        booted = boots()
        guest.shutdown('reboot', timeout=180)
        down = time.monotonic() - t
        # (read once its nova-compute is gone: no heartbeat comes after)
        rebooted = compute_heartbeat(self.api)
        guest.boot()
        guest.wait_agent()
        expect(boots() == booted + 1, 'the compute host booted %d times, '
               'not once more than %d' % (boots(), booted))
        # (cyborg-agent starts by itself: the compute node's provider
        # exists, cloud-guest.sh gates only the first boot)
        # nova-compute resumes the guests in its init_host(), before its
        # heartbeats start; the API shows the time of the last change of
        # its service record, which its start may change once before
        # init_host() (re-enabling a service it disabled when it lost
        # libvirt): two changes since the reboot mean it has resumed what
        # it resumes and is up again. Waited for through the API only:
        # polling the guest would slow its start. (After the reboot
        # nothing but nova-compute starts the domain: libvirt has no
        # autostart for it.)
        changes = set()

        def resumed():
            for n, sid in zip(names, sids):
                if self.server(sid)['status'] == 'ERROR':
                    # nova-compute gave up on resuming it: say why
                    raise Failed(
                        'nova-compute put %s in ERROR when it resumed it '
                        '(the mdevs at boot, before nova-compute: %s); its '
                        'log: %s' % (n, boot_mdevs(), ' | '.join(log_lines(
                            'nova-compute', r'resume|Cyborg', 4))))
            beat = compute_heartbeat(self.api)
            if beat > rebooted:
                changes.add(beat)
            return len(changes) >= 2
        cloud.wait_for('nova-compute started and reported twice after the '
                       'host reboot', resumed, 600, step=2,
                       service=guest.service)
        mdevs = boot_mdevs()
        for arq in arqs:
            expect(arq['attach_handle_uuid'] in mdevs,
                   'the mdev %s was not back at boot before nova-compute '
                   'started (mdevs then: %s)' % (arq['attach_handle_uuid'],
                                                 mdevs))
        self.op.note('The compute host rebooted (its services stopped, '
                     'the kernel went down, it booted again)')
        verified = [self.verify(n) for n in names]
        for n in names:
            self.op('server show -c status -c OS-EXT-STS:power_state %s' %
                    n)
        self.op('compute service list --service nova-compute')
        self.note_host()
        return ('down in %ds, back in %ds (boot %d); the mdev%s back at '
                'boot (udev, mdevctl) before nova-compute started; %s' % (
                    down, time.monotonic() - t, boots(),
                    's' if more else '', '; '.join(verified)))

    def upgrade(self, name, line):
        """Nova upgraded in place to that line (a project of bases.ini)
        while the server runs, in the order of Nova's upgrade guide: the
        databases synced by the new code, Placement's and Nova's control
        services restarted on it, then nova-compute on the compute host;
        then the online data migrations and nova-status upgrade check. The
        server keeps its QEMU process and its mdev throughout. (No RPC
        reaches nova-compute between the two restarts, so the control
        services need no [upgrade_levels] pin, which would stay in their
        memory until their next restart.)"""
        t = time.monotonic()
        before = self.qemu_pid(name)
        mark = log_mark('nova-compute')
        ran = self.lab.cloud.upgrade_nova(line)
        # nova-compute, once the services it talks to run the new code
        self.lab.guest.upgrade_compute()
        started, base, changes = [], [], set()

        def compute_started():
            # (as after a host reboot: two changes of its service record
            # since the new one said it started mean init_host() is done)
            started[:] = [line for line in log_since('nova-compute', mark)
                          if 'Starting compute node' in line]
            if not started:
                return False
            beat = compute_heartbeat(self.api)
            if not base:
                base.append(beat)
            elif beat > base[0]:
                changes.add(beat)
            return len(changes) >= 2
        cloud.wait_for('nova-compute of %s started and reporting' % line,
                       compute_started, 600, step=2,
                       service=self.lab.guest.service)
        version = re.search(r'\(version ([^)]*)\)', started[-1])
        env = cloud.service_env(cloud.NOVA_VENV)
        nova_manage = [str(cloud.NOVA_VENV / 'bin' / 'nova-manage'),
                       '--config-file', str(cloud.ETC / 'nova' / 'nova.conf')]
        p = subprocess.run(nova_manage + ['db', 'online_data_migrations'],
                           capture_output=True, text=True, env=env)
        expect(p.returncode == 0, 'nova-manage db online_data_migrations '
               'exit %d: %s' % (p.returncode, (p.stdout + p.stderr)[-600:]))
        p = subprocess.run(
            [str(cloud.NOVA_VENV / 'bin' / 'nova-status'), '--config-file',
             str(cloud.ETC / 'nova' / 'nova.conf'), 'upgrade', 'check'],
            capture_output=True, text=True, env=env)
        # (0: every check passed, 1: a warning, 2: a failure)
        expect(p.returncode in (0, 1), 'nova-status upgrade check exit %d: '
               '%s' % (p.returncode, (p.stdout + p.stderr)[-900:]))
        warnings = re.findall(r'\| Result: Warning\s*\|\n\| Details: ([^|]*)',
                              p.stdout)
        self.op.note('Nova upgraded in place to %s: %s; the control '
                     'services and nova-compute restarted on it; nova-manage '
                     'db online_data_migrations; nova-status upgrade check: '
                     'exit %d' % (line, ', '.join(ran), p.returncode))
        self.op('compute service list', fmt=None)
        verified = self.verify(name)
        after = self.seen[2].qemu_pid.get(self.seen[0])
        expect(after == before, 'QEMU of %s was process %s, is %s: the '
               'guest was restarted by the upgrade' % (name, before, after))
        return ('%s; nova-compute %s; %s kept QEMU pid %s; nova-status '
                'upgrade check exit %d%s; %s (%ds)' % (
                    ', '.join(ran), version.group(1) if version else '?',
                    name, after, p.returncode,
                    ' (%s)' % '; '.join(w.strip() for w in warnings)
                    if warnings else '', verified, time.monotonic() - t))

    def after_host_reboot(self, name):
        """After a failed host reboot: the compute service back, the
        server ACTIVE, for the next checks."""
        try:
            wait_compute(self.lab)
        except (Failed, RuntimeError) as e:
            say('   nova-compute is not back: %s' % e)
        self.recover(name)

    def capacity(self, meanwhile=None):
        """Another user of the parent takes most of its capacity, a second
        server takes the rest of its type; Cyborg's periodic report runs
        with both ARQs bound: no error, Placement matches the host."""
        t = time.monotonic()
        host = probe(self.lab.guest)
        # leave the room of one more mtty-2 (2 ports): mtty-1 mdevs made
        # through sysfs, as any other user of the parent would
        take = host.available[OTHER_TYPE] - 2
        made = []
        script = ''
        for _ in range(take):
            u = str(uuid_mod.uuid4())
            made.append(u)
            script += 'echo %s > %s/mdev_supported_types/%s/create\n' % (
                u, '/sys/class/mdev_bus/mtty', OTHER_TYPE)
        rc, out, err = self.lab.guest.sh(script)
        expect(rc == 0, 'making the other user\'s mdevs: %s' % err)
        self.operator_mdevs.update(made)
        self.op.note('Another user of the parent made %d %s mdevs through '
                     'sysfs; the parent can still make one %s' % (
                         take, OTHER_TYPE, MDEV_TYPE))
        srv = self.op('server create --flavor mtty.tiny --image tiny '
                      '--nic none vm2')
        self.servers['vm2'] = srv['id']
        self.wait_server(srv['id'], 'ACTIVE')
        self.verify('vm2')
        host = probe(self.lab.guest)
        expect(host.available[MDEV_TYPE] == 0, 'mtty-2 available: %s' %
               host.available)
        mark = log_mark('cyborg-conductor')
        reports = self.reports()
        if meanwhile:
            meanwhile()     # what needs no compute host, while we wait
        # a periodic report of the agent with both ARQs bound: the first
        # one the conductor handles from now may have read sysfs before
        # (the agent reads, then sends), the second one cannot
        self.wait_reports(reports + 2)
        errors = conductor_errors(mark)
        bound = [a for a in self.arqs() if a['state'] == 'Bound']

        def compare():
            rps = self.providers()
            mismatch, shown = [], []
            for mdev_type, rc in TYPES:
                rp = rps.get(PROVIDER % mdev_type)
                inv = (rp or {}).get('inventories', {}).get(rc)
                total = inv['total'] - inv['reserved'] if inv else 0
                used = (rp or {}).get('usages', {}).get(rc, 0)
                ours = sum(1 for a in bound
                           if rp and a['device_rp_uuid'] == rp['uuid'])
                can = host.available[mdev_type] + ours
                shown.append('%s: Placement total-reserved %d used %d; '
                             'host available %d + bound %d' % (
                                 mdev_type, total, used,
                                 host.available[mdev_type], ours))
                if rp is None or total != can or used != ours:
                    mismatch.append(shown[-1])
            return rps, mismatch, shown

        # (the conductor logs the report's start: give it the few seconds
        # its Placement updates take)
        result = []
        try:
            cloud.wait_for('Placement to match the host', lambda: (
                result.append(compare()) or not result[-1][1]), 20, step=1)
        except RuntimeError:
            pass            # what did not match is said below
        rps, mismatch, shown = result[-1]
        expect(not errors, 'cyborg-conductor logged: %s' % ' | '.join(
            errors[-3:]))
        expect(not mismatch, 'Placement does not match the host: %s' %
               '; '.join(mismatch))
        self.op('resource provider inventory list %s' %
                rps[PROVIDER % OTHER_TYPE]['uuid'])
        self.op('resource provider usage show %s' %
                rps[PROVIDER % MDEV_TYPE]['uuid'])
        return '%s (%ds)' % ('; '.join(shown), time.monotonic() - t)

    def reports(self):
        """How many reports of the agent cyborg-conductor has handled (each
        logs "Start differing devices."; the agent reports every
        cyborg_periodic seconds, see cloud.config_vars())."""
        path = log_path('cyborg-conductor')
        return path.read_text(errors='replace').count(
            'Start differing devices') if path.exists() else 0

    def wait_reports(self, n):
        cloud.wait_for('%d reports of cyborg-agent' % n,
                       lambda: self.reports() >= n, 150, step=2)

    def bad_profile(self):
        """A device profile naming a type the parent lacks: Cyborg accepts
        it (a well-formed resource class), the scheduler finds no host."""
        self.op("accelerator device profile create mtty9-dp "
                "'[{\"resources:CUSTOM_MDEV_MTTY_9\": \"1\"}]'")
        return self.failed_boot(
            'mtty9-dp', 'mtty9.tiny', 'vm-bad-type',
            re.compile(r'No valid host was found\. '))

    def failed_boot(self, profile, flavor, name, fault):
        """A boot that must fail: the server accepted, then ERROR with a
        fault of code 500 whose whole message matches `fault`; no ARQ, no
        mdev; once the server is deleted, Placement's usages are what they
        were."""
        before = probe(self.lab.guest)
        usages = {n: rp['usages'] for n, rp in self.providers().items()}
        self.op('flavor create --ram 64 --disk 1 --vcpus 1 --property '
                'accel:device_profile=%s %s' % (profile, flavor))
        sid = self.op('server create --flavor %s --image tiny --nic none '
                      '%s' % (flavor, name))['id']
        self.wait_server(sid, 'ERROR', timeout=300)
        srv = self.op('server show -c status -c fault %s' % name)
        got = srv.get('fault') or {}
        arqs = self.arqs(sid)
        after = probe(self.lab.guest)
        self.op('server delete %s' % name, fmt=None)
        cloud.wait_for('%s deleted' % name, lambda: not self.api.get(
            'compute', '/servers', name='^%s$' % name)['servers'], 120,
            step=1)
        expect(got.get('code') == 500 and
               fault.fullmatch(got.get('message', '')),
               '%s: the fault is %r, not code 500 with a message matching '
               '%r' % (name, got, fault.pattern))
        expect(not arqs, 'ARQs left for %s: %s' % (name, arqs))
        expect(set(after.mdevs) == set(before.mdevs),
               'the host\'s mdevs changed: %s -> %s' % (
                   sorted(before.mdevs), sorted(after.mdevs)))
        now = {n: rp['usages'] for n, rp in self.providers().items()
               if n in usages}
        expect(now == usages, 'Placement usages after the delete: %s, '
               'before: %s' % (now, usages))
        self.no_leaks()
        return '%s ERROR, fault 500 "%s"; no ARQ, no mdev; deleted, usages ' \
            'as before' % (name, got['message'][:300])

    def bind_fails(self):
        """Cyborg cannot bind: the only provider that fits is one the
        operator made by hand under the compute node (a class and trait a
        device profile asks for), no Cyborg deployable. The operator then
        removes that provider, under nova-compute's cache of its provider
        tree (which made its resource tracker, and instance deletes with
        it, fail until the cache's refresh: fixed in the series by
        "compute: Refresh the provider tree when a provider is gone");
        the next check deletes servers after it."""
        rps = self.providers()
        compute = rps['lab']['uuid']
        self.op('trait create CUSTOM_LAB_HANDMADE', fmt=None)
        rp = self.op('resource provider create --parent-provider %s '
                     'lab_handmade_mtty' % compute)
        self.handmade = rp['uuid']
        self.op('resource provider inventory set --resource %s=1 %s' % (
            RC, rp['uuid']))
        self.op('--os-placement-api-version 1.6 resource provider '
                'trait set --trait CUSTOM_LAB_HANDMADE %s' % rp['uuid'])
        self.op("accelerator device profile create handmade-dp "
                "'[{\"resources:%s\": \"1\", "
                "\"trait:CUSTOM_LAB_HANDMADE\": \"required\"}]'" % RC)
        result = self.failed_boot(
            'handmade-dp', 'handmade.tiny', 'vm-no-bind', re.compile(
                r'Failed to bind accelerator requests: .*Binding failed for '
                r'ARQ UUIDs: [0-9a-f-]{36}'))
        self.op('resource provider delete %s' % self.handmade, fmt=None)
        self.handmade = None
        return result

    def delete(self):
        """Every server deleted; then the other user's mdevs removed: no
        ARQ, no usage, no mdev, and the capacity back as it was at
        discovery, on the host and in Placement (Cyborg's next report)."""
        t = time.monotonic()
        if self.servers:
            self.op('server delete %s' % ' '.join(self.servers), fmt=None)
        cloud.wait_for('the servers are deleted', lambda: not self.api.get(
            'compute', '/servers')['servers'], 300, step=1)
        arqs = self.arqs()
        self.op('accelerator arq list')
        expect(not arqs, 'ARQs left: %s' % arqs)
        host = self.no_leaks()
        expect(not host.domains, 'domains left: %s' % host.domains)
        script = ''.join('echo 1 > /sys/bus/mdev/devices/%s/remove\n' % u
                         for u in sorted(self.operator_mdevs))
        rc, out, err = self.lab.guest.sh(script or 'true')
        expect(rc == 0, 'removing the other user\'s mdevs: %s' % err)
        self.operator_mdevs.clear()
        host = probe(self.lab.guest)
        expect(not host.mdevs and not host.defined,
               'mdevs left: %s, defined %s' % (host.mdevs, host.defined))
        expect(host.available == self.start_available,
               'available %s, at the start %s' % (
                   host.available, self.start_available))
        if self.handmade:       # (bind_fails() failed before removing it)
            self.op('resource provider delete %s' % self.handmade, fmt=None)
        # Cyborg gives the other user's capacity back at its next report
        state = []

        def back():
            rps = self.providers()
            used = {n: {c: u for c, u in rp['usages'].items() if u}
                    for n, rp in rps.items() if any(rp['usages'].values())}
            state.append((self.cyborg_inventory(rps), used))
            return state[-1] == (self.start_inventory, {})
        try:
            cloud.wait_for('Cyborg\'s inventories as at discovery, no '
                           'usage', back, 150, step=2)
        except RuntimeError:
            pass            # what differs is said below
        inventory, used = state[-1]
        expect(not used, 'Placement usages left: %s' % used)
        expect(inventory == self.start_inventory,
               'Cyborg\'s inventories in Placement (total, reserved): %s, '
               'at discovery: %s' % (inventory, self.start_inventory))
        self.op('resource provider inventory list %s' % self.providers()[
            PROVIDER % OTHER_TYPE]['uuid'])
        return 'no ARQ, no usage, no mdev; available %s; Placement ' \
            'inventories %s as at discovery (%ds)' % (
                host.available, inventory, time.monotonic() - t)
