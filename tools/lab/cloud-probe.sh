#!/bin/bash
# What the compute host "lab" has, for tier 3's checks (run in the guest
# through its agent). A handful of processes, each one a TCG guest pays
# for: the raw outputs go to the host under "== SECTION" markers and
# tier3.py (Host) reads them there.
#   virsh       one virsh: the domains (state, XML) and the mdev node
#               devices (nodedev-info), sections "== domain NAME ==" and
#               "== nodedev NAME ==" from its own echo (which ends no line:
#               the section's first line follows the closing ==)
#   qemu        PID, CPU seconds and command line of each running QEMU
#   sysfs       readlink -f of each mdev and of its mdev_type
#   available   TYPE N of the mtty parent
#   mdevctl     mdevctl list --defined
export LIBVIRT_DEFAULT_URI=qemu:///system
PARENT=/sys/class/mdev_bus/mtty

doms=$(virsh -q list --all --name 2>/dev/null)
nodes=$(virsh -q nodedev-list --cap mdev --all 2>/dev/null)
cmds=''
for d in $doms; do
    cmds+="echo == domain $d ==; domstate $d; dumpxml $d; "
done
for n in $nodes; do
    cmds+="echo == nodedev $n ==; nodedev-info $n; "
done
[ -n "$cmds" ] && virsh -q "$cmds" 2>&1

echo "== qemu"
for pid in $(pgrep qemu-system); do
    echo "$pid $(cut -d' ' -f14,15 "/proc/$pid/stat") $(tr '\0' ' ' \
        < "/proc/$pid/cmdline")"
done

echo "== sysfs"
set -- /sys/bus/mdev/devices/*
[ -e "$1" ] && for m in "$@"; do echo "$m/ $m/mdev_type"; done |
    xargs readlink -f

echo "== available"
for t in "$PARENT"/mdev_supported_types/*; do
    read -r n < "$t/available_instances"
    echo "${t##*/} $n"
done

echo "== mdevctl"
mdevctl list --defined 2>/dev/null
