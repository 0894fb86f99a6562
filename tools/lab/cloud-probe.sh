#!/bin/bash
# What the compute host "lab" has, for tier 3's checks (run in the guest
# through its agent). Every process started here costs a TCG guest about
# a second (virsh most), so it starts three: one virsh for the mdev node
# devices' names, one virsh for everything libvirt is asked, one readlink;
# the rest is bash reading files. The raw outputs go to the host under
# "== SECTION" markers and tier3.py (Host) reads them there.
#   list STATE  the domains libvirt has in that state (running, paused,
#               shutoff), from its own lists
#   domain NAME its XML (dumpxml) for each domain libvirt has a
#               configuration or status file of
#   nodedev N   nodedev-info of each mdev node device libvirt lists
#               (virsh's echo ends no line: a section's first line follows
#               its closing ==)
#   qemu        PID, CPU seconds and command line of each running QEMU
#   sysfs       readlink -f of each mdev and of its mdev_type
#   available   TYPE N of the mtty parent
#   mdevctl     mdevctl list --defined
#   took        the probe's own time in ms, for the log
export LIBVIRT_DEFAULT_URI=qemu:///system
PARENT=/sys/class/mdev_bus/mtty
start=${EPOCHREALTIME/./}

doms=''
for f in /etc/libvirt/qemu/*.xml /run/libvirt/qemu/*.xml; do
    [ -e "$f" ] || continue
    d=${f##*/}; d=${d%.xml}
    [[ " $doms " == *" $d "* ]] || doms+=" $d"
done
nodes=$(virsh -q nodedev-list --cap mdev --all 2>/dev/null)
cmds=''
for s in running paused shutoff other; do
    cmds+="echo == list $s ==; list --state-$s --name; "
done
for d in $doms; do
    cmds+="echo == domain $d ==; dumpxml $d; "
done
for n in $nodes; do
    cmds+="echo == nodedev $n ==; nodedev-info $n; "
done
virsh -q "$cmds" 2>&1

echo "== qemu =="
for p in /proc/[0-9]*; do
    read -r comm < "$p/comm" 2>/dev/null || continue
    [[ $comm == qemu-system-* ]] || continue
    read -ra stat < "$p/stat"
    mapfile -d '' argv < "$p/cmdline"
    echo "${p#/proc/} ${stat[13]} ${stat[14]} ${argv[*]}"
done

echo "== sysfs =="
set -- /sys/bus/mdev/devices/*
[ -e "$1" ] && for m in "$@"; do echo "$m/ $m/mdev_type"; done |
    xargs readlink -f

echo "== available =="
for t in "$PARENT"/mdev_supported_types/*; do
    read -r n < "$t/available_instances" 2>/dev/null || continue
    echo "${t##*/} $n"
done

echo "== mdevctl =="
mdevctl list --defined 2>/dev/null

echo "== took =="
echo $(( (${EPOCHREALTIME/./} - start) / 1000 ))
