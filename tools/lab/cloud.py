"""The lab cloud of tier 3: real services on this host, started and stopped.

MariaDB (unix socket only) and RabbitMQ from Debian's packages; Keystone,
Glance, Placement, Neutron's API, nova-api and cyborg-api as WSGI apps under
uWSGI; nova-conductor, nova-scheduler and cyborg-conductor as their own
console programs. Everything listens on 127.0.0.1 only. Nova and Cyborg run
from the patched trees' venvs (build/venvs/nova34, or build/venvs/nova for
the 33 line, which the cloud starts on when a day upgrades it in place, see
use_line() and Cloud.upgrade_nova(); build/venvs/cyborg), the others from
build/venvs/lab-cloud. Configuration files are the templates in
tools/lab/cloud/, rendered into build/lab/cloud/etc/; logs go to
build/lab/cloud/log/.

The databases are made once (db syncs, Keystone's users and catalog, Nova's
cells) and kept as a copy of MariaDB's data directory,
build/lab/cloud/db-template, which the next run starts from while nothing
it depends on changed (see db_stamp()).

This module holds orchestration and configuration only: what runs is the
services' own code.
"""

import hashlib
import inspect
import json
import os
import pathlib
import shutil
import signal
import socket
import string
import subprocess
import threading
import time
import urllib.error
import urllib.request

import guests

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = ROOT / 'build'
VENVS = BUILD / 'venvs'
CLOUD = BUILD / 'lab' / 'cloud'
TEMPLATES = HERE / 'cloud'
ETC = CLOUD / 'etc'
LOG = CLOUD / 'log'
RUN = CLOUD / 'run'
SESSIONS = RUN / 'sessions'     # the session of each Service started
BOOT_ID = '/proc/sys/kernel/random/boot_id'
STATE = CLOUD / 'state'          # what the DB template goes with
MYSQL = CLOUD / 'mysql'
DB_TEMPLATE = CLOUD / 'db-template'
PYCACHE = BUILD / 'lab' / 'pycache'
LABCLOUD = VENVS / 'lab-cloud'
# (a development knob: other venvs, e.g. of another state of the series,
# for the host's and the guest's Nova and Cyborg services; a Nova venv
# given so must hold libvirt-python, as build/venvs/lab does)
# The Nova line the operator's day runs, a project of bases.ini: nova34
# (34.0.0 + patches/nova34, the primary line) unless LAB_NOVA=nova (the 33
# line). The line the cloud runs now is NOVA_LINE (see use_line()).
DAY_LINE = os.environ.get('LAB_NOVA') or 'nova34'


def line_venvs(line):
    """(the Nova venv of the host's services, nova-compute's: the same
    with libvirt-python) of a Nova line."""
    given = os.environ.get('LAB_NOVA_VENV')
    if given:
        return pathlib.Path(given), pathlib.Path(given)
    return VENVS / line, VENVS / ('lab' if line == 'nova' else 'lab-' + line)


def use_line(line):
    """Run the Nova of that line from now on: the host's services started
    next, the compute host's next nova-compute, the configurations
    written next (see Cloud.upgrade_nova())."""
    global NOVA_LINE, NOVA_TREE, NOVA_VENV, COMPUTE_VENV
    NOVA_LINE, NOVA_TREE = line, BUILD / line
    NOVA_VENV, COMPUTE_VENV = line_venvs(line)


use_line(DAY_LINE)
CYBORG_VENV = pathlib.Path(os.environ.get('LAB_CYBORG_VENV',
                                          VENVS / 'cyborg'))
UWSGI = LABCLOUD / 'bin' / 'uwsgi'

# the environment variable that marks the cloud's processes
MARK = 'LAB_CLOUD'
PASSWORD = 'lab'
REGION = 'RegionOne'
# What the compute guest calls the controller (QEMU's user networking
# forwards each service port of this address to 127.0.0.1 here).
CONTROLLER_IN_GUEST = '10.0.2.100'
PORTS = {
    'keystone': 5000, 'glance': 9292, 'placement': 8778, 'nova': 8774,
    'neutron': 9696, 'cyborg': 6666, 'rabbit': 5672,
}
EPMD_PORT = 4370        # Erlang's port mapper, not the default 4369
RABBIT_DIST_PORT = 25673


def all_ports():
    """Every TCP port the cloud listens on, on 127.0.0.1."""
    return sorted(PORTS.values()) + [EPMD_PORT, RABBIT_DIST_PORT]


SERVICE_USERS = ('nova', 'placement', 'glance', 'neutron', 'cyborg')
# database: its user (one user per service)
DATABASES = {'keystone': 'keystone', 'glance': 'glance',
             'neutron': 'neutron', 'placement': 'placement',
             'nova_api': 'nova', 'nova_cell0': 'nova', 'nova': 'nova',
             'cyborg': 'cyborg'}
# service type, name, URL path of the catalog's endpoints
CATALOG = (
    ('image', 'glance', 'glance', ''),
    ('placement', 'placement', 'placement', ''),
    ('network', 'neutron', 'neutron', ''),
    ('compute', 'nova', 'nova', '/v2.1'),
    # (under /accelerator, as DevStack serves it: Cyborg's version
    # document links there, and openstacksdk, which Nova 34 calls Cyborg
    # with, follows that link)
    ('accelerator', 'cyborg', 'cyborg', '/accelerator/v2'),
)


def db_url(name):
    return ('mysql+pymysql://%s:%s@localhost/%s?unix_socket=%s'
            '&charset=utf8mb4' % (DATABASES[name], PASSWORD, name,
                                  RUN / 'mysqld.sock'))


def service_env(venv=None):
    """The environment of every Python process of the cloud: bytecode in
    build/lab/pycache (shared with the guest, never in the venvs)."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(PYCACHE), LANG='C.UTF-8')
    # every process of the cloud carries this (see cloud_processes())
    env[MARK] = str(CLOUD)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    env.pop('OS_CLOUD', None)
    if venv:
        env['PATH'] = '%s:%s' % (venv / 'bin', env.get('PATH', ''))
        env['VIRTUAL_ENV'] = str(venv)
    return env


# -- configuration ---------------------------------------------------------

def _auth(user_line, url):
    return '\n'.join([
        'auth_type = password',
        'auth_url = %s/v3' % url,
        'project_domain_name = Default',
        'user_domain_name = Default',
        'project_name = service',
        'password = %s' % PASSWORD,
        'region_name = %s' % REGION,
    ] + ([user_line] if user_line else []))


def config_vars(in_guest=False):
    host = CONTROLLER_IN_GUEST if in_guest else '127.0.0.1'
    keystone = 'http://%s:%d' % (host, PORTS['keystone'])
    authtoken = '\n'.join([
        'www_authenticate_uri = %s' % keystone,
        'service_token_roles_required = true',
        _auth(None, keystone)])
    return {
        'cloud': str(CLOUD), 'etc': str(ETC), 'log': str(LOG),
        'run': str(RUN), 'state': str(STATE), 'venvs': str(VENVS),
        'nova_venv': str(NOVA_VENV),
        'controller': host,
        'transport_url': 'rabbit://guest:guest@%s:%d/' % (
            host, PORTS['rabbit']),
        'authtoken': authtoken,
        'service_auth': _auth(None, keystone),
        'rabbit_port': PORTS['rabbit'],
        'placement_port': PORTS['placement'],
        'glance_port': PORTS['glance'],
        'neutron_port': PORTS['neutron'],
        'cyborg_port': PORTS['cyborg'],
        'cyborg_periodic': 20,
    }


def render(template, dest, in_guest=False, **extra):
    values = config_vars(in_guest)
    values.update(('db_' + name, db_url(name)) for name in DATABASES)
    values.update(extra)
    text = string.Template(
        (TEMPLATES / template).read_text()).substitute(values)
    dest = pathlib.Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def write_configs():
    """Render every configuration file under build/lab/cloud/etc."""
    render('my.cnf', ETC / 'my.cnf')
    render('rabbitmq.conf', ETC / 'rabbitmq' / 'rabbitmq.conf')
    (ETC / 'rabbitmq' / 'enabled_plugins').write_text('[].\n')
    render('keystone.conf', ETC / 'keystone' / 'keystone.conf')
    render('glance-api.conf', ETC / 'glance' / 'glance-api.conf')
    shutil.copy(LABCLOUD / 'etc' / 'glance' / 'glance-api-paste.ini',
                ETC / 'glance' / 'glance-api-paste.ini')
    render('placement.conf', ETC / 'placement' / 'placement.conf')
    render('neutron.conf', ETC / 'neutron' / 'neutron.conf')
    shutil.copy(LABCLOUD / 'etc' / 'neutron' / 'api-paste.ini',
                ETC / 'neutron' / 'api-paste.ini')
    render('nova.conf', ETC / 'nova' / 'nova.conf')
    shutil.copy(NOVA_TREE / 'etc' / 'nova' / 'api-paste.ini',
                ETC / 'nova' / 'api-paste.ini')
    render('cyborg.conf', ETC / 'cyborg' / 'cyborg.conf')
    shutil.copy(BUILD / 'cyborg' / 'etc' / 'cyborg' / 'api-paste.ini',
                ETC / 'cyborg' / 'api-paste.ini')
    # the compute guest's: read there over 9p
    render('nova-compute.conf', ETC / 'nova-compute' / 'nova-compute.conf',
           in_guest=True)
    render('cyborg-agent.conf', ETC / 'cyborg-agent' / 'cyborg-agent.conf',
           in_guest=True)
    clouds = {'clouds': {'lab': {
        'auth': {'auth_url': 'http://127.0.0.1:%d/v3' % PORTS['keystone'],
                 'username': 'admin', 'password': PASSWORD,
                 'project_name': 'admin', 'user_domain_name': 'Default',
                 'project_domain_name': 'Default'},
        'region_name': REGION, 'identity_api_version': 3}}}
    (ETC / 'clouds.yaml').write_text(json.dumps(clouds, indent=2) + '\n')


# -- processes -------------------------------------------------------------

class Service:
    """One process (and its process group) of the cloud, with its log."""

    def __init__(self, name, cmd, env=None, cwd=None):
        self.name = name
        self.cmd = [str(c) for c in cmd]
        self.env = env or service_env()
        self.cwd = cwd or CLOUD
        self.log = LOG / ('%s.out' % name)
        self.proc = None

    def start(self):
        LOG.mkdir(parents=True, exist_ok=True)
        RUN.mkdir(parents=True, exist_ok=True)
        with open(self.log, 'ab') as out:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                start_new_session=True)
        (RUN / ('%s.pid' % self.name)).write_text(str(self.proc.pid))
        # (its session, for cloud_processes(): kept after its stop)
        with open(SESSIONS, 'a') as f:
            f.write('%s %d\n' % (boot_id(), self.proc.pid))
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self):
        if self.proc is not None and self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout=20):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # children left in the group (uwsgi workers, rabbit's helpers)
        _signal_group(self.proc.pid, signal.SIGKILL)
        (RUN / ('%s.pid' % self.name)).unlink(missing_ok=True)

    def tail(self, n=15):
        return tail(self.log, n)


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path, n=15):
    try:
        lines = pathlib.Path(path).read_text(errors='replace').splitlines()
    except OSError:
        return []
    return lines[-n:]


def cloud_processes():
    """The processes the cloud started that still run, whoever their parent
    is now (a run killed with SIGKILL leaves orphans; QEMU's guestfwd
    helpers are started in sessions of their own): those whose environment
    has MARK=build/lab/cloud, and those of a session a Service started
    (SESSIONS) that run in build/lab/cloud. (A process that sets its title,
    as uwsgi and oslo.service's workers do, writes over the environment
    /proc shows.) Returns {pid: command line}."""
    mark = ('%s=%s' % (MARK, CLOUD)).encode()
    sessions = recorded_sessions()
    found = {}
    for proc in pathlib.Path('/proc').iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            marked = mark in (proc / 'environ').read_bytes().split(b'\0')
            if not marked and not (os.getsid(int(proc.name)) in sessions
                                   and _runs_in_cloud(proc)):
                continue
            cmd = (proc / 'cmdline').read_bytes().replace(b'\0', b' ')
        except OSError:
            continue
        found[int(proc.name)] = cmd.decode(errors='replace').strip()
    return found


def boot_id():
    """This boot's id: a session id recorded before the host's last boot
    says nothing of the processes running now."""
    try:
        return pathlib.Path(BOOT_ID).read_text().strip()
    except OSError:
        return 'unknown'


def recorded_sessions():
    """The sessions Services started since the host's last boot (SESSIONS:
    a line "<boot id> <session id>" each)."""
    try:
        lines = SESSIONS.read_text().splitlines()
    except OSError:
        return set()
    this_boot = boot_id()
    return {int(words[1]) for words in map(str.split, lines)
            if len(words) == 2 and words[0] == this_boot and
            words[1].isdigit()}


def _runs_in_cloud(proc):
    cloud = pathlib.Path(os.path.realpath(CLOUD))
    cwd = pathlib.Path(os.readlink(proc / 'cwd'))
    return cwd == cloud or cloud in cwd.parents


def kill_leftovers():
    """Stop what a previous run that died (SIGKILL, power loss) left
    running (cloud_processes()). Returns their command names."""
    stopped = []
    for pid, cmd in sorted(cloud_processes().items()):
        try:
            os.kill(pid, signal.SIGKILL)
            stopped.append(cmd.split(' ')[0].rsplit('/', 1)[-1] or str(pid))
        except ProcessLookupError:
            pass
    for pidfile in sorted(RUN.glob('*.pid')) if RUN.exists() else []:
        pidfile.unlink(missing_ok=True)
    SESSIONS.unlink(missing_ok=True)
    return stopped


def leftovers(timeout=10):
    """What is left of the cloud after its stop: processes (as
    cloud_processes()) and taken ports, waited for at most timeout
    seconds (a killed process may take a moment to go)."""
    ports = all_ports()
    end = time.monotonic() + timeout
    while True:
        procs = cloud_processes()
        taken = [p for p in ports if not port_free(p)]
        if (not procs and not taken) or time.monotonic() > end:
            return procs, taken
        time.sleep(0.5)


def port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(('127.0.0.1', port))
        except OSError:
            return False
    return True


def wait_for(what, pred, timeout, step=0.25, service=None):
    """Poll pred() until it returns something true, at most timeout
    seconds; fail early if service (a Service, or a list of them) exits."""
    end = time.monotonic() + timeout
    services = service if isinstance(service, list) else \
        [service] if service else []
    while True:
        value = pred()
        if value:
            return value
        for s in services:
            if not s.running():
                raise RuntimeError('%s: %s exited (rc %s); its log:\n%s' % (
                    what, s.name, s.proc.returncode, '\n'.join(s.tail())))
        if time.monotonic() > end:
            raise RuntimeError('%s: not within %ds' % (what, timeout))
        time.sleep(step)


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


def run(cmd, what, env=None, timeout=600, log=None):
    """Run a set-up command; its output goes to log (or build/lab/cloud/log/
    setup.log); raise with its last lines when it fails."""
    log = log or LOG / 'setup.log'
    LOG.mkdir(parents=True, exist_ok=True)
    with open(log, 'a') as out:
        out.write('\n$ %s\n' % ' '.join(str(c) for c in cmd))
        out.flush()
        p = subprocess.run([str(c) for c in cmd], stdout=out,
                           stderr=subprocess.STDOUT, env=env or service_env(),
                           cwd=CLOUD, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    if p.returncode:
        raise RuntimeError('%s failed (exit %d); %s says:\n%s' % (
            what, p.returncode, log, '\n'.join(tail(log, 20))))


# -- the services ----------------------------------------------------------

def mariadb():
    return Service('mariadb', ['/usr/sbin/mariadbd',
                               '--defaults-file=%s' % (ETC / 'my.cnf')])


def mysql_ping():
    return subprocess.run(
        ['mariadb-admin', '--socket=%s' % (RUN / 'mysqld.sock'), 'ping'],
        capture_output=True).returncode == 0


def mysql(sql):
    subprocess.run(['mariadb', '--socket=%s' % (RUN / 'mysqld.sock')],
                   input=sql, text=True, check=True, capture_output=True)


def rabbit_env():
    env = service_env()
    env.update(
        HOME=str(CLOUD / 'rabbitmq'),
        RABBITMQ_NODENAME='labcloud@localhost',
        RABBITMQ_CONFIG_FILE=str(ETC / 'rabbitmq' / 'rabbitmq'),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(
            ETC / 'rabbitmq' / 'enabled_plugins'),
        RABBITMQ_MNESIA_BASE=str(CLOUD / 'rabbitmq' / 'mnesia'),
        RABBITMQ_LOG_BASE=str(LOG),
        RABBITMQ_PID_FILE=str(RUN / 'rabbitmq-server.pid'),
        RABBITMQ_DIST_PORT=str(RABBIT_DIST_PORT),
        # Erlang distribution (rabbitmqctl's way in) on loopback too
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface '
        '{127,0,0,1}',
        ERL_EPMD_ADDRESS='127.0.0.1', ERL_EPMD_PORT=str(EPMD_PORT))
    return env


def epmd():
    # Started here, in our process group, so that nothing outlives the
    # cloud (rabbitmq-server would start a daemonized one otherwise).
    return Service('epmd', ['epmd', '-port', EPMD_PORT, '-address',
                            '127.0.0.1'], env=rabbit_env())


def rabbitmq():
    (CLOUD / 'rabbitmq').mkdir(parents=True, exist_ok=True)
    return Service('rabbitmq', ['/usr/lib/rabbitmq/bin/rabbitmq-server'],
                   env=rabbit_env())


def rabbitmqctl(*args, timeout=60):
    return subprocess.run(['/usr/lib/rabbitmq/bin/rabbitmqctl'] +
                          [str(a) for a in args], env=rabbit_env(),
                          capture_output=True, text=True, timeout=timeout)


def queue_consumers():
    """{queue name: consumers} of the broker, from rabbitmqctl."""
    p = rabbitmqctl('list_queues', '-q', '--no-table-headers', 'name',
                    'consumers')
    queues = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            queues[parts[0]] = int(parts[1])
    return queues


def uwsgi(name, module, venv, port, env=(), pyargv='', mount=None):
    """A WSGI app under uWSGI, HTTP on 127.0.0.1:port (under the URL path
    mount, as DevStack serves it, if given)."""
    ini = ETC / 'uwsgi' / ('%s.ini' % name)
    ini.parent.mkdir(parents=True, exist_ok=True)
    app = (['mount = %s=%s' % (mount, module), 'manage-script-name = true']
           if mount else ['module = %s' % module])
    lines = ['[uwsgi]',
             'http-socket = 127.0.0.1:%d' % port] + app + [
             'home = %s' % venv,
             'master = true',
             'processes = 1',
             'threads = 4',
             'enable-threads = true',
             'need-app = true',
             'lazy-apps = true',
             'die-on-term = true',
             'buffer-size = 65535',
             # no keep-alive on uWSGI's plain http-socket: tell clients
             'add-header = Connection: close',
             'procname-prefix-spaced = %s' % name]
    lines += ['env = %s=%s' % kv for kv in env]
    if pyargv:
        lines.append('pyargv = %s' % pyargv)
    ini.write_text('\n'.join(lines) + '\n')
    return Service(name, [UWSGI, '--ini', ini], env=service_env(venv))


def host_services():
    """The cloud's API and control services, in start order groups."""
    nova_venv, cyborg_venv = NOVA_VENV, CYBORG_VENV
    nova_conf = ETC / 'nova' / 'nova.conf'
    cyborg_conf = ETC / 'cyborg' / 'cyborg.conf'

    def console(name, venv, module, conf):
        code = 'import sys; from %s import main; sys.exit(main())' % module
        return Service(name, [venv / 'bin' / 'python', '-c', code,
                              '--config-file', conf],
                       env=service_env(venv))
    return [
        uwsgi('glance-api', 'glance.wsgi.api:application', LABCLOUD,
              PORTS['glance'],
              env=[('OS_GLANCE_CONFIG_DIR', ETC / 'glance')]),
        uwsgi('placement-api', 'placement.wsgi.api:application', nova_venv,
              PORTS['placement'],
              env=[('OS_PLACEMENT_CONFIG_DIR', ETC / 'placement')]),
        uwsgi('neutron-api', 'neutron.wsgi.api:application', LABCLOUD,
              PORTS['neutron'],
              env=[('OS_NEUTRON_CONFIG_FILES',
                    ETC / 'neutron' / 'neutron.conf')]),
        uwsgi('nova-api', 'nova.wsgi.osapi_compute:application', nova_venv,
              PORTS['nova'], env=[('OS_NOVA_CONFIG_DIR', ETC / 'nova')]),
        console('nova-conductor', nova_venv, 'nova.cmd.conductor',
                nova_conf),
        console('nova-scheduler', nova_venv, 'nova.cmd.scheduler',
                nova_conf),
        uwsgi('cyborg-api', 'cyborg.wsgi.api:application', cyborg_venv,
              PORTS['cyborg'], pyargv='--config-file %s' % cyborg_conf,
              mount='/accelerator'),
        console('cyborg-conductor', cyborg_venv, 'cyborg.cmd.conductor',
                cyborg_conf),
    ]


def keystone():
    return uwsgi('keystone', 'keystone.wsgi.api:application', LABCLOUD,
                 PORTS['keystone'],
                 env=[('OS_KEYSTONE_CONFIG_FILES',
                       ETC / 'keystone' / 'keystone.conf')])


HEALTH = {
    'keystone': 'http://127.0.0.1:%d/v3' % PORTS['keystone'],
    'glance-api': 'http://127.0.0.1:%d/versions' % PORTS['glance'],
    'placement-api': 'http://127.0.0.1:%d/' % PORTS['placement'],
    'neutron-api': 'http://127.0.0.1:%d/' % PORTS['neutron'],
    'nova-api': 'http://127.0.0.1:%d/' % PORTS['nova'],
    'cyborg-api': 'http://127.0.0.1:%d/accelerator/' % PORTS['cyborg'],
}
# the RPC queues whose consumers say a service listens
QUEUES = {
    'nova-conductor': 'conductor',
    'nova-scheduler': 'scheduler',
    'cyborg-conductor': 'cyborg-conductor',
}


# -- the databases ---------------------------------------------------------

def db_stamp():
    """What the DB template depends on: the schema migrations of the
    patched trees and the services' versions (constraints), the templates
    and this module. Another value makes a new template."""
    h = hashlib.sha256()
    for fn in (make_db_template, keystone_catalog, config_vars):
        h.update(inspect.getsource(fn).encode())
    h.update(repr((DATABASES, SERVICE_USERS, CATALOG, PORTS)).encode())
    files = [ROOT / 'constraints' / 'lab-cloud.txt']
    files += sorted(TEMPLATES.iterdir())
    files += sorted((ROOT / 'constraints').glob('nova-*.txt'))
    for tree, pattern in (
            (NOVA_TREE, 'nova/db/*/migrations/versions/*.py'),
            (BUILD / 'cyborg', 'cyborg/db/sqlalchemy/alembic/versions/*.py'),
            (BUILD / 'cyborg', 'cyborg/db/sqlalchemy/migration.py')):
        files += sorted(tree.glob(pattern))
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def make_db_template(say):
    """Fresh databases: schemas, Keystone's admin, service users and
    catalog, Nova's cells; then kept in build/lab/cloud/db-template."""
    env_lab = service_env(LABCLOUD)
    env_nova = service_env(NOVA_VENV)
    env_cyborg = service_env(CYBORG_VENV)
    shutil.rmtree(MYSQL, ignore_errors=True)
    shutil.rmtree(STATE, ignore_errors=True)
    STATE.mkdir(parents=True)
    run(['mariadb-install-db', '--no-defaults', '--datadir=%s' % MYSQL,
         '--user=root', '--auth-root-authentication-method=socket',
         '--skip-test-db'], 'mariadb-install-db')
    db = mariadb().start()
    try:
        wait_for('MariaDB answers', mysql_ping, 60, service=db)
        mysql(''.join(
            "CREATE USER IF NOT EXISTS '%s'@'localhost' IDENTIFIED BY '%s';"
            "\n" % (user, PASSWORD) for user in set(DATABASES.values())) +
            ''.join("CREATE DATABASE %s CHARACTER SET utf8mb4; "
                    "GRANT ALL ON %s.* TO '%s'@'localhost';\n" % (
                        d, d, user) for d, user in DATABASES.items()))
        keystone_conf = ETC / 'keystone' / 'keystone.conf'
        nova_conf = ETC / 'nova' / 'nova.conf'
        lab = LABCLOUD / 'bin'
        nova = NOVA_VENV / 'bin'
        transport = config_vars()['transport_url']
        cell0_conf = ETC / 'nova' / 'nova-cell0-db.conf'
        cell0_conf.write_text('[database]\nconnection = %s\n' %
                              db_url('nova_cell0'))
        chains = {
            'keystone': [
                ([lab / 'keystone-manage', '--config-file', keystone_conf,
                  'db_sync'], env_lab),
                ([lab / 'keystone-manage', '--config-file', keystone_conf,
                  'fernet_setup', '--keystone-user', 'root',
                  '--keystone-group', 'root'], env_lab),
                ([lab / 'keystone-manage', '--config-file', keystone_conf,
                  'credential_setup', '--keystone-user', 'root',
                  '--keystone-group', 'root'], env_lab),
                ([lab / 'keystone-manage', '--config-file', keystone_conf,
                  'bootstrap', '--bootstrap-password', PASSWORD,
                  '--bootstrap-region-id', REGION] + sum(
                     (['--bootstrap-%s-url' % i,
                       HEALTH['keystone']] for i in
                      ('admin', 'internal', 'public')), []), env_lab)],
            'glance': [
                ([lab / 'glance-manage', '--config-dir', ETC / 'glance',
                  'db_sync'], env_lab)],
            'neutron': [
                ([lab / 'neutron-db-manage', '--config-file',
                  ETC / 'neutron' / 'neutron.conf', 'upgrade', 'heads'],
                 env_lab)],
            'placement': [
                ([nova / 'placement-manage', '--config-dir',
                  ETC / 'placement', 'db', 'sync'], env_nova)],
            # (Nova's three databases at once: the API database and its
            # cell mappings, cell0's and cell1's schemas, each synced
            # alone with --local_cell, cell0's through a second
            # configuration file naming its database)
            'nova_api': [
                ([nova / 'nova-manage', '--config-file', nova_conf,
                  'api_db', 'sync'], env_nova),
                ([nova / 'nova-manage', '--config-file', nova_conf,
                  'cell_v2', 'map_cell0', '--database_connection',
                  db_url('nova_cell0')],
                 env_nova),
                ([nova / 'nova-manage', '--config-file', nova_conf,
                  'cell_v2', 'create_cell', '--name', 'cell1',
                  '--database_connection', db_url('nova'),
                  '--transport-url', transport], env_nova)],
            'nova_cell0': [
                ([nova / 'nova-manage', '--config-file', nova_conf,
                  '--config-file', cell0_conf, 'db', 'sync', '--local_cell'],
                 env_nova)],
            'nova_cell1': [
                ([nova / 'nova-manage', '--config-file', nova_conf,
                  'db', 'sync', '--local_cell'], env_nova)],
            'cyborg': [
                ([CYBORG_VENV / 'bin' / 'cyborg-dbsync',
                  '--config-file', ETC / 'cyborg' / 'cyborg.conf',
                  'upgrade'], env_cyborg)],
        }
        errors = []

        def chain(name, steps):
            try:
                for cmd, env in steps:
                    run(cmd, '%s database set-up' % name, env=env,
                        log=LOG / ('db-%s.log' % name))
                if name == 'keystone':
                    # its users and catalog while the others sync
                    ks = keystone().start()
                    try:
                        wait_for('Keystone answers',
                                 lambda: http_ok(HEALTH['keystone']), 120,
                                 service=ks)
                        keystone_catalog()
                    finally:
                        ks.stop()
            except Exception as e:          # reported below, all at once
                errors.append(str(e))
        threads = [threading.Thread(target=chain, args=item)
                   for item in chains.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError('\n'.join(errors))
    finally:
        db.stop()
    shutil.rmtree(DB_TEMPLATE, ignore_errors=True)
    shutil.copytree(MYSQL, DB_TEMPLATE, symlinks=True)
    (STATE / 'stamp').write_text(db_stamp())


def keystone_catalog():
    """The service project, users and catalog, as an operator makes them
    with the openstack client (one client process reads the commands)."""
    # (keystone-manage bootstrap makes the admin, member, reader and
    # service roles)
    cmds = ['project create --domain default service']
    for user in SERVICE_USERS:
        cmds += ['user create --domain default --password %s %s' % (
                     PASSWORD, user),
                 'role add --project service --user %s admin' % user,
                 'role add --project service --user %s service' % user]
    for stype, name, key, path in CATALOG:
        cmds.append('service create --name %s %s' % (name, stype))
        for iface in ('public', 'internal', 'admin'):
            cmds.append('endpoint create --region %s %s %s '
                        'http://127.0.0.1:%d%s' % (
                            REGION, stype, iface, PORTS[key], path))
    env = client_env()
    log = LOG / 'keystone-setup.log'
    with open(log, 'w') as out:
        p = subprocess.run([LABCLOUD / 'bin' / 'openstack'],
                           input='\n'.join(cmds) + '\n', text=True,
                           stdout=out, stderr=subprocess.STDOUT, env=env,
                           cwd=CLOUD, timeout=300)
    # the interactive client keeps going after a failed command: check
    want = {s for s in SERVICE_USERS}
    p = subprocess.run([LABCLOUD / 'bin' / 'openstack', 'user', 'list',
                        '-f', 'value', '-c', 'Name'], capture_output=True,
                       text=True, env=env)
    missing = want - set(p.stdout.split())
    if p.returncode or missing:
        raise RuntimeError('Keystone set-up: users %s missing; %s:\n%s' % (
            sorted(missing), log, '\n'.join(tail(log, 20))))


def client_env():
    env = service_env(LABCLOUD)
    env.update(OS_CLIENT_CONFIG_FILE=str(ETC / 'clouds.yaml'), OS_CLOUD='lab')
    return env


def restore_db(say):
    """MariaDB's data directory from the template (made when missing or
    stale). Returns what it did, for the log."""
    stamp = STATE / 'stamp'
    if DB_TEMPLATE.is_dir() and stamp.exists() and \
            stamp.read_text() == db_stamp():
        shutil.rmtree(MYSQL, ignore_errors=True)
        shutil.copytree(DB_TEMPLATE, MYSQL, symlinks=True)
        return 'reused the DB template'
    say('   making the databases (schemas, Keystone, cells): '
        'once, then kept in %s' % DB_TEMPLATE.relative_to(ROOT))
    start = time.time()
    make_db_template(say)
    shutil.rmtree(MYSQL, ignore_errors=True)
    shutil.copytree(DB_TEMPLATE, MYSQL, symlinks=True)
    return 'made the DB template in %ds' % (time.time() - start)


class Cloud:
    """The host's services, started in dependency order (each group in
    parallel) and stopped in reverse, whatever happens."""

    def __init__(self, say):
        self.say = say
        self.services = {}

    def start(self, service):
        self.services[service.name] = service
        return service.start()

    def start_host(self):
        """MariaDB and RabbitMQ, Keystone, then every API and conductor at
        once; returns when each answers (HTTP) or consumes its RPC queue."""
        for port in all_ports():
            if not port_free(port):
                raise RuntimeError('port %d on 127.0.0.1 is taken: another '
                                   'cloud or service runs here' % port)
        db = self.start(mariadb())
        self.start(epmd())
        rabbit = self.start(rabbitmq())
        ks = self.start(keystone())
        wait_for('MariaDB answers', mysql_ping, 60, service=db)
        wait_for('Keystone answers', lambda: http_ok(HEALTH['keystone']),
                 120, service=ks)
        p = rabbitmqctl('wait', '--timeout', 120, RUN / 'rabbitmq-server.pid',
                        timeout=150)
        if p.returncode or not rabbit.running():
            raise RuntimeError('RabbitMQ did not start: %s\n%s' % (
                p.stdout + p.stderr, '\n'.join(rabbit.tail())))
        self.wait_answers([self.start(s) for s in host_services()])

    def wait_answers(self, services):
        """Each of the services answers (HTTP) or consumes its RPC
        queue."""
        for s in services:
            if s.name in HEALTH:
                wait_for('%s answers' % s.name,
                         lambda s=s: http_ok(HEALTH[s.name]), 180, service=s)
        queues = {n: q for n, q in QUEUES.items()
                  if n in [s.name for s in services]}
        wait_for('%s consume their RPC queues' % ', '.join(queues),
                 lambda: all(queue_consumers().get(q)
                             for q in queues.values()), 180, step=2,
                 service=[self.services[n] for n in queues])

    def upgrade_nova(self, line):
        """The host's part of Nova's upgrade in place to that line, in the
        order of Nova's upgrade guide: the databases synced by the new
        code while the old services run, then Placement and Nova's
        services restarted on it. Returns what it ran, for the log."""
        use_line(line)
        write_configs()
        nova = NOVA_VENV / 'bin'
        conf = ['--config-file', ETC / 'nova' / 'nova.conf']
        syncs = [
            ('placement-manage db sync', [
                nova / 'placement-manage', '--config-dir', ETC / 'placement',
                'db', 'sync']),
            ('nova-manage api_db sync', [nova / 'nova-manage'] + conf + [
                'api_db', 'sync']),
            # (cell1's database and cell0's)
            ('nova-manage db sync', [nova / 'nova-manage'] + conf + [
                'db', 'sync'])]
        for what, cmd in syncs:
            run(cmd, 'the upgrade\'s %s' % what, env=service_env(NOVA_VENV),
                log=LOG / 'upgrade.log')
        names = ('placement-api', 'nova-api', 'nova-conductor',
                 'nova-scheduler')
        old = [self.services.pop(name) for name in names]
        for s in old:
            s.terminate()
        for s in old:
            s.stop(timeout=10)
        new = [self.start(s) for s in host_services() if s.name in names]
        self.wait_answers(new)
        return [what for what, _ in syncs]

    def stop(self):
        """SIGTERM to every service at once, then (after 10 s) SIGKILL; the
        database, broker and Keystone last."""
        last = ('keystone', 'rabbitmq', 'epmd', 'mariadb')
        first = [s for n, s in self.services.items() if n not in last]
        for group in (first, [self.services[n] for n in last
                              if n in self.services]):
            for s in group:
                s.terminate()
            for s in group:
                try:
                    s.stop(timeout=10)
                except Exception as e:          # keep stopping the others
                    self.say('   stopping %s: %s' % (s.name, e))
        self.services.clear()

    def failed(self):
        """Services that exited while they should run."""
        return [s for s in self.services.values() if not s.running()]


# -- the compute host: the lab's TCG guest ---------------------------------

GUEST_BUILD = BUILD / 'lab' / 'guest'
GUEST_OUT = CLOUD / 'guest'
STATE_DISK = CLOUD / 'compute-disk.img'


class ComputeGuest:
    """The compute host "lab": Debian's kernel under qemu-system-x86_64
    -accel tcg, the host's root read-only over 9p under an overlay whose
    writes go to its own disk (build/lab/cloud/compute-disk.img: they
    survive a reboot), QEMU user networking with restrict=on whose only
    way out is the controller's service ports, and a guest agent."""

    def __init__(self, say, memory=3072):
        self.say = say
        self.memory = memory
        self.service = None
        self.qga_path = RUN / 'qga.sock'
        from qga import GuestAgent
        self.agent = GuestAgent(self.qga_path)

    def new_disk(self, size='8G'):
        # (a sparse file; it is the compute node's DISK_GB: the operator's
        # day's four servers of 1 GB at once, with the upgrade day's u1)
        STATE_DISK.unlink(missing_ok=True)
        run(['truncate', '-s', size, STATE_DISK], 'the compute disk')
        run(['mkfs.ext4', '-q', '-F', '-L', 'lab-state', STATE_DISK],
            'the compute disk')

    def command(self):
        fwd = ','.join(
            'guestfwd=tcp:%s:%d-cmd:socat - TCP:127.0.0.1:%d' % (
                CONTROLLER_IN_GUEST, port, port)
            for port in sorted(PORTS.values()))
        return guests.qemu_command(
            GUEST_BUILD, self.memory, HERE / 'cloud-guest.sh',
            state='/dev/vda', compute_venv=COMPUTE_VENV,
            cyborg_venv=CYBORG_VENV) + [
            '-virtfs', 'local,path=%s,mount_tag=out,security_model=none' %
            GUEST_OUT,
            '-virtfs', 'local,path=%s,mount_tag=pycache,security_model=none'
            % PYCACHE,
            '-drive', 'file=%s,if=virtio,format=raw,cache=unsafe' %
            STATE_DISK,
            '-netdev', 'user,id=n0,restrict=on,net=10.0.2.0/24,' + fwd,
            '-device', 'virtio-net-pci,netdev=n0',
            '-device', 'virtio-serial-pci',
            '-chardev', 'socket,id=qga0,path=%s,server=on,wait=off' %
            self.qga_path,
            '-device', 'virtserialport,chardev=qga0,'
            'name=org.qemu.guest_agent.0',
        ]

    def boot(self):
        GUEST_OUT.mkdir(parents=True, exist_ok=True)
        PYCACHE.mkdir(parents=True, exist_ok=True)
        self.qga_path.unlink(missing_ok=True)
        self.agent.close()
        self.service = Service('compute-guest', self.command())
        self.service.log = LOG / 'compute-console.log'
        return self.service.start()

    def wait_agent(self, timeout=180):
        wait_for('the compute guest\'s agent answers',
                 lambda: self.qga_path.exists() and self.agent.ping(), timeout,
                 step=0.5, service=self.service)

    def sh(self, script, timeout=120):
        return self.agent.sh(script, timeout=timeout)

    def upgrade_compute(self):
        """nova-compute restarted on COMPUTE_VENV, as a package upgrade
        restarts it (cloud-guest.sh upgrade-compute); its next boots start
        that one too (command())."""
        self.agent.call('guest-exec', path='/bin/bash', arg=[
            str(HERE / 'cloud-guest.sh'), 'upgrade-compute',
            str(COMPUTE_VENV)])

    def shutdown(self, mode='poweroff', timeout=120):
        """What a host's shutdown does (cloud-guest.sh down MODE); returns
        when QEMU has exited (with -no-reboot, a reboot ends QEMU too)."""
        if self.service is None or not self.service.running():
            return
        try:
            self.agent.call('guest-exec', path='/bin/bash', arg=[
                str(HERE / 'cloud-guest.sh'), 'down', mode])
        except Exception as e:
            self.say('   guest shutdown through its agent: %s' % e)
        try:
            self.service.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.say('   the compute guest did not go down within %ds: '
                     'killed' % timeout)
        self.agent.close()
        self.service.stop(timeout=5)

    def running(self):
        return self.service is not None and self.service.running()
