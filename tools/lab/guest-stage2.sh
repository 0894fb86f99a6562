#!/bin/bash
# Stage 2 of the lab guest, PID 1 after switch_root (see guest-init): udev,
# mdevctl and libvirtd with only its qemu and nodedev drivers on the real
# kernel mdev bus, then the Cyborg and Nova checks. Everything goes to the
# shared folder (9p tag "out"): report.txt (the checks), *.log, and
# "finished" as the very last thing. A watchdog powers the guest off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
LAB=$(cd "$(dirname "$0")" && pwd)
VENVS=$(cd "$LAB/../../build/venvs" && pwd)
WATCHDOG=$(sed -n 's/.*lab\.watchdog=\([0-9]*\).*/\1/p' /proc/cmdline)
mkdir -p /out /run
mount -t 9p -o trans=virtio,version=9p2000.L out /out
mount -t tmpfs tmpfs /run
# (no tmpfs over /tmp: the workspace may live there, as a CI clone does;
# the root is an overlay whose writes go to memory anyway)
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts
# libvirt hands JSON to mdevctl through /dev/stdin
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
( sleep "${WATCHDOG:-240}"; echo "lab: watchdog after ${WATCHDOG:-240}s" \
    >> /out/report.txt; sync; echo o > /proc/sysrq-trigger ) &
exec >> /out/stage2.log 2>&1
T() { echo "[$(cut -d' ' -f1 /proc/uptime)s] $*" | tee -a /out/report.txt; }
hostname lab
T "guest up, kernel $(uname -r), mdev parents: $(ls /sys/class/mdev_bus)"

# The checks overlap libvirtd's start (its qemu probe is slow under TCG):
# Cyborg needs only sysfs; Nova imports meanwhile, then waits for both.
mkdir -p /var/tmp/lab && cd /var/tmp/lab
# the bytecode that run.py compiled on the host (the venvs hold none)
export PYTHONPYCACHEPREFIX=$(cd "$LAB/../../build/lab/pycache" && pwd)
export LAB_READY=/run/lab-ready
mkdir -p $LAB_READY
(
    "$VENVS/cyborg/bin/python" "$LAB/guest_cyborg.py" /out \
        > /out/cyborg.txt 2> /out/cyborg.log
    echo "EXIT guest_cyborg.py $?" >> /out/cyborg.txt
    T "Cyborg checks done"
    touch $LAB_READY/cyborg
) &
CYBORG=$!
(
    "$VENVS/lab/bin/python" "$LAB/guest_nova.py" /out \
        > /out/nova.txt 2> /out/nova.log
    echo "EXIT guest_nova.py $?" >> /out/nova.txt
    T "Nova checks done"
) &
NOVA=$!

/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add; udevadm settle -t 30
# the qemu driver resolves its built-in user and group before qemu.conf
getent group kvm >/dev/null || groupadd -r kvm
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -U -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
mkdir -p /etc/libvirt /run/lab-drivers
cat > /etc/libvirt/qemu.conf <<EOC
security_driver = "none"
stdio_handler = "file"
namespaces = [ ]
cgroup_controllers = [ ]
user = "root"
group = "root"
EOC
ln -s /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_{qemu,nodedev}.so \
    /run/lab-drivers/
LIBVIRT_DRIVER_DIR=/run/lab-drivers \
    LIBVIRT_LOG_OUTPUTS="3:file:/out/libvirtd.log" \
    /usr/sbin/libvirtd --daemon --pid-file /run/libvirtd.pid
for i in $(seq 120); do
    timeout 30 virsh -c qemu:///system version >/dev/null 2>&1 && break
    sleep 1
done
T "udev, $(mdevctl --version 2>/dev/null), libvirtd ready"
touch $LAB_READY/libvirtd
wait $CYBORG $NOVA
kill "$(cat /run/libvirtd.pid)" 2>/dev/null; sleep 1
echo ok > /out/finished
sync; echo o > /proc/sysrq-trigger; sleep 10
