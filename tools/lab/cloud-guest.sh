#!/bin/bash
# Stage 2 of the tier-3 compute host "lab", PID 1 after switch_root (see
# guest-init; its root's writes go to the state disk, so they survive a
# reboot): the network to the controller, udev (whose mdevctl rule starts
# the persistent mdevs), libvirtd, the QEMU guest agent (the host's hands in
# here), nova-compute and cyborg-agent. Logs go to the shared folder (9p tag
# "out", build/lab/cloud/guest on the host).
#
#   cloud-guest.sh            boot (PID 1)
#   cloud-guest.sh down MODE  what a host's shutdown does: stop the services
#                             (SIGTERM), sync, then MODE: reboot | poweroff
#   cloud-guest.sh upgrade-compute VENV
#                             nova-compute upgraded in place: the running one
#                             stopped (SIGTERM), VENV's started; the guests
#                             keep running
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
LAB=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$LAB/../.." && pwd)
VENVS=$ROOT/build/venvs
ETC=$ROOT/build/lab/cloud/etc
arg() { sed -n "s/.*lab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
COMPUTE_VENV=$(arg compute_venv)   # build/venvs/lab: nova + libvirt-python
CYBORG_VENV=$(arg cyborg_venv)     # build/venvs/cyborg
T() { echo "[$(cut -d' ' -f1 /proc/uptime)s] $*" >> /out/boot.txt; }

stop_pidfiles() {  # SIGTERM to each, then SIGKILL what runs after $1 s
    local limit=$1 pids='' pid alive
    shift
    for f in "$@"; do
        pid=$(cat "$f" 2>/dev/null) && kill "$pid" 2>/dev/null &&
            pids+=" $pid"
    done
    local end=$(( SECONDS + limit ))
    while [ "$SECONDS" -lt "$end" ]; do
        alive=''
        for pid in $pids; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ -z "$alive" ] && return 0
        sleep 0.2
    done
    for pid in $pids; do
        kill -9 "$pid" 2>/dev/null && T "killed $pid after ${limit}s"
    done
    return 0
}

start_service() {  # name python module fifo config
    local name=$1 python=$2 module=$3 fifo=$4 conf=$5
    "$python" -c "import sys, time; from $module import main; \
print('[%.2fs] $name: imported' % time.clock_gettime(time.CLOCK_BOOTTIME), \
file=open('/out/boot.txt', 'a')); open('$fifo').read(); sys.exit(main())" \
        --config-file "$conf" < /dev/null >> "/out/$name.out" 2>&1 &
    echo $! > "/run/lab/$name.pid"
}

if [ "$1" = upgrade-compute ]; then
    # as a package upgrade restarts the service: SIGTERM (at most 10 s, as
    # at a reboot: a TCG guest's nova-compute takes minutes to shut down
    # gracefully, and its guests keep running either way)
    T "upgrading nova-compute in place: $2"
    stop_pidfiles 10 /run/lab/nova-compute.pid
    export PYTHONPYCACHEPREFIX=$ROOT/build/lab/pycache
    start_service nova-compute "$2/bin/python" nova.cmd.compute /dev/null \
        "$ETC/nova-compute/nova-compute.conf"
    exit 0
fi

if [ "$1" = down ]; then
    # reboot: as a host's shutdown stops its services; poweroff (the end
    # of the lab): at once
    if [ "$2" = reboot ]; then
        # (in systemd's order: nova-compute, which runs after libvirtd,
        # stops before it; each for at most 10 s, as a TCG guest's
        # services take minutes to shut down gracefully and what matters
        # after the reboot is what a host's reboot leaves)
        T "going down for a reboot: stopping nova-compute, cyborg-agent," \
            "then libvirtd"
        stop_pidfiles 10 /run/lab/nova-compute.pid /run/lab/cyborg-agent.pid
        stop_pidfiles 10 /run/libvirtd.pid
    fi
    sync
    T "down ($2)"
    sync
    case $2 in
        reboot) echo b > /proc/sysrq-trigger ;;
        *) echo o > /proc/sysrq-trigger ;;
    esac
    exit 0
fi

mkdir -p /out /run
mount -t 9p -o trans=virtio,version=9p2000.L out /out
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm /run/lab && mount -t devpts devpts /dev/pts
# libvirt hands JSON to mdevctl through /dev/stdin
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
exec >> /out/stage2.log 2>&1
BOOT=$(( $(cat /out/boots 2>/dev/null || echo 0) + 1 )); echo $BOOT > /out/boots
T "boot $BOOT: kernel $(uname -r)"
hostname lab

# The bytecode cache is the host's (shared read-write): what the guest
# compiles is kept for the next run, never written into the venvs.
PYCACHE=$ROOT/build/lab/pycache
mount -t 9p -o trans=virtio,version=9p2000.L pycache "$PYCACHE" ||
    T "no shared bytecode cache"
export PYTHONPYCACHEPREFIX=$PYCACHE

# (the gates the services wait on, before anything the host can reach)
mkdir -p /run/lab
rm -f /run/lab/libvirtd-ready /run/lab/cyborg-agent-go
mkfifo /run/lab/libvirtd-ready /run/lab/cyborg-agent-go

# The guest agent first: the host checks and drives the guest through it.
for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] &&
        QGA=/dev/$(basename "$p")
done
qemu-ga --method=virtio-serial --path="$QGA" --daemonize \
    --pidfile=/run/lab/qemu-ga.pid --logfile=/out/qemu-ga.log

# The controller: QEMU's user networking (restrict=on) forwards the
# service ports of 10.0.2.100 to the host's loopback, and nothing else.
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
printf '127.0.0.1 localhost\n10.0.2.15 lab\n10.0.2.100 controller\n' \
    > /etc/hosts
: > /etc/resolv.conf

# nova-compute and cyborg-agent import (a minute under TCG) while udev and
# libvirtd start; nova-compute then waits for libvirtd, cyborg-agent (on
# the first boot only) for the host to say that nova-compute's provider is
# in Placement (as a deployment orders them); on the next boots it starts
# at once, as a host's services do.
mkdir -p /var/lib/nova/instances /var/lib/cyborg
start_service nova-compute "${COMPUTE_VENV:-$VENVS/lab}/bin/python" nova.cmd.compute \
    /run/lab/libvirtd-ready "$ETC/nova-compute/nova-compute.conf"
start_service cyborg-agent "${CYBORG_VENV:-$VENVS/cyborg}/bin/python" cyborg.cmd.agent \
    /run/lab/cyborg-agent-go "$ETC/cyborg-agent/cyborg-agent.conf"
[ "$BOOT" -gt 1 ] && { echo go > /run/lab/cyborg-agent-go & }

# Debian 12's mdevctl 1.2.0-3 installs /usr/bin/mdevctl but its udev rule
# runs /usr/sbin/mdevctl, so persistent mdevs would never start at boot:
# the operator's fix, a local rule with the right path.
if [ ! -e /usr/sbin/mdevctl ] &&
   grep -q /usr/sbin/mdevctl /lib/udev/rules.d/60-mdevctl.rules; then
    mkdir -p /etc/udev/rules.d
    sed 's#/usr/sbin/mdevctl#/usr/bin/mdevctl#g' \
        /lib/udev/rules.d/60-mdevctl.rules > /etc/udev/rules.d/60-mdevctl.rules
fi
/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add; udevadm settle -t 60
T "udev settled; mdevs: $(ls /sys/bus/mdev/devices | tr '\n' ' ')"
getent group kvm >/dev/null || groupadd -r kvm
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -U -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
mkdir -p /etc/libvirt /run/lab/drivers
cat > /etc/libvirt/qemu.conf <<EOC
security_driver = "none"
stdio_handler = "file"
namespaces = [ ]
cgroup_controllers = [ ]
user = "root"
group = "root"
EOC
ln -sf /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_{qemu,nodedev}.so \
    /run/lab/drivers/
LIBVIRT_DRIVER_DIR=/run/lab/drivers \
    LIBVIRT_LOG_OUTPUTS="3:file:/out/libvirtd.log" \
    /usr/sbin/libvirtd --daemon --pid-file /run/libvirtd.pid
for _ in $(seq 240); do
    timeout 30 virsh -c qemu:///system version >/dev/null 2>&1 && break
    sleep 0.5
done
T "libvirtd ready; mdevs: $(ls /sys/bus/mdev/devices | tr '\n' ' ')"
echo go > /run/lab/libvirtd-ready &

# PID 1 reaps what is orphaned until the host powers the guest off.
while :; do wait; sleep 60; done
