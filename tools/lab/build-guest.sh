#!/bin/bash
# Build the tier-2 lab guest into DIR: the distribution's own kernel, the
# kernel's mtty sample driver built out of tree against the matching
# headers (Debian's kernel ships no samples), and a busybox initramfs whose
# /init (tools/lab/guest-init) loads the modules, mounts the host root
# read-only over 9p under a tmpfs overlay and runs the stage-2 script.
# The packages must be installed (tools/lab/run.py does it). Reuses DIR
# when it was built from the same kernel and the same scripts.
set -euo pipefail
DIR=${1:?usage: build-guest.sh DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"; cd "$DIR"

# The kernel linux-headers-amd64 points at, e.g. 6.1.0-56-amd64
KVER=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 |
       sed -n 's/.*linux-headers-\([0-9][^ ,]*-amd64\).*/\1/p')
[ -n "$KVER" ] || { echo "build-guest: cannot tell the kernel version" \
    "from linux-headers-amd64; install it (apt-get install" \
    "linux-headers-amd64)" >&2; exit 1; }
KSRC=linux-source-${KVER%%.0-*}
STAMP="$KVER $(cat "$HERE/build-guest.sh" "$HERE/guest-init" | sha1sum)"
if [ -f stamp ] && [ "$(cat stamp)" = "$STAMP" ] && [ -f vmlinuz ] &&
   [ -f initrd.gz ]; then
    echo "   guest: reusing $DIR (kernel $KVER)"
    exit 0
fi
rm -f stamp

# 1. the kernel image and its modules (the package is unpacked, not
#    installed: this machine keeps its own kernel)
if ! ls linux-image-"$KVER"_*.deb >/dev/null 2>&1; then
    apt-get download -q -o APT::Sandbox::User=root linux-image-"$KVER" >/dev/null
fi
rm -rf k && mkdir k && dpkg-deb -x linux-image-"$KVER"_*.deb k

# 2. mtty.ko out of tree, from the distribution's kernel source
rm -rf src && mkdir src
tar -xJf /usr/src/"$KSRC".tar.xz -C src --strip-components=3 \
    "$KSRC/samples/vfio-mdev/mtty.c"
echo 'obj-m := mtty.o' > src/Kbuild
make -s -C /usr/src/linux-headers-"$KVER" M="$PWD/src" modules 2>&1 |
    grep -v 'Skipping BTF' || true
[ -f src/mtty.ko ] || { echo "build-guest: mtty.ko did not build" >&2; exit 1; }
mkdir -p k/lib/modules/"$KVER"/extra
cp src/mtty.ko k/lib/modules/"$KVER"/extra/
depmod -b k "$KVER"

# 3. the initramfs: busybox, the modules in dependency order, /init
rm -rf ir && mkdir -p ir/bin ir/proc ir/sys ir/dev ir/lib/modules \
    ir/hostro ir/ovl ir/newroot
cp /bin/busybox ir/bin/
cp "$HERE/guest-init" ir/init && chmod +x ir/init
# (virtio_blk, ext4, virtio_net and virtio_console: tier 3's state disk,
# network and guest agent)
modprobe -d k -S "$KVER" --show-depends -a virtio_pci 9pnet_virtio 9p \
    overlay vfio_iommu_type1 mtty virtio_blk ext4 virtio_net virtio_console |
    awk '$1 == "insmod" {print $2}' |
    awk '!seen[$0]++' | while read -r m; do
    case $m in
        *.xz) xz -dc "$m" > ir/lib/modules/"$(basename "${m%.xz}")" ;;
        *) cp "$m" ir/lib/modules/ ;;
    esac
    basename "${m%.xz}" >> ir/lib/modules/order
done
(cd ir && find . | cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz)
cp k/boot/vmlinuz-"$KVER" vmlinuz
echo "$STAMP" > stamp
echo "   guest: built $DIR (kernel $KVER, modules:" \
    "$(tr '\n' ' ' < ir/lib/modules/order))"
