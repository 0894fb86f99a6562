"""What the lab's two guests share: tier 2's guest (run.py) and tier 3's
compute host (cloud.py). Both boot the kernel and initramfs that
build-guest.sh makes, under TCG, and mount the host's root read-only;
each adds its stage-2 script, its parameters and its own devices.
Standard library only: run.py imports it on the host.
"""

# The kernel command line of both. no_timer_check: under TCG, on a host
# busy with the test suites, the kernel's check that the IO-APIC delivers
# the timer interrupt can run out of time and panic ("IO-APIC + timer
# doesn't work!") before anything of the lab runs; the emulated timer
# works, only slowly.
KERNEL_ARGS = 'console=ttyS0 panic=-1 quiet loglevel=3 no_timer_check'


def qemu_command(build, memory, stage2, **params):
    """The QEMU command line both guests start with.

    One vCPU: the test command runs the suites beside the lab, and a guest
    of two vCPUs sharing a core with them runs at half speed or less, its
    vCPUs waiting on each other while one is not scheduled.

    :param build: the directory of the guest's vmlinuz and initrd.gz
    :param memory: the guest's memory, in MiB
    :param stage2: the script the guest's init runs from the host's root
    :param params: lab.<name>=<value> kernel parameters for that script
    """
    append = ' '.join([KERNEL_ARGS, 'lab.stage2=%s' % stage2] + [
        'lab.%s=%s' % (name, value) for name, value in params.items()])
    return ['qemu-system-x86_64', '-accel', 'tcg', '-m', str(memory),
            '-smp', '1', '-nographic', '-no-reboot',
            '-kernel', str(build / 'vmlinuz'),
            '-initrd', str(build / 'initrd.gz'),
            '-append', append,
            '-virtfs', 'local,path=/,mount_tag=hostroot,security_model=none,'
            'readonly=on,multidevs=remap']
