"""niclab's plumbing layer: everything that touches a host, a guest or a card.

image (guest images), accel (KVM or TCG), guest and ssh (command channels), guestsh, backends (QEMU,
libvirt), lab (a lab host: sysfs, vfio binding, leases, the doctor), netconf (the guests' network),
contention (the host while a benchmark runs), facts (provenance), kernel_check, drivers (modules built for a node's
kernel, behind its image's initramfs). It imports niclab.model
and niclab.base.
"""
