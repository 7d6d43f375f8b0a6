#!/bin/sh
# Finish the Debian guest's root ("$1"): the vagrant user, services, boot tuning.
# Runs as an mmdebstrap customize hook, as root of the build's user namespace, after
# rootfs/ was copied in; what it writes is owned as it says (chown works here).
set -eu
root="$1"
recipe=$(dirname "$0")

# The vagrant user: Vagrant's well-known insecure key (vagrant up replaces it), password-less sudo.
chroot "$root" useradd --create-home --uid 1000 --user-group --shell /bin/bash vagrant
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 0600 -o 1000 -g 1000 "$recipe/vagrant.pub" "$root/home/vagrant/.ssh/authorized_keys"
printf 'vagrant ALL=(ALL) NOPASSWD: ALL\nDefaults:vagrant !requiretty\n' > "$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"

# The disk keeps no extended attributes (genext2fs), so ping loses its cap_net_raw: let every
# user open ICMP echo sockets instead, and keep ping setuid for the raw-socket options.
printf 'net.ipv4.ping_group_range = 0 2147483647\n' > "$root/etc/sysctl.d/60-niclab-ping.conf"
chmod u+s "$root/usr/bin/ping"

# No host keys in the image: each guest makes its own ed25519 key at first boot (ssh.service.d).
rm -f "$root"/etc/ssh/ssh_host_*

systemctl --root="$root" enable systemd-networkd.service netserver.service iperf3.service serial-getty@ttyS0.service
# netperf's SysV script would start a second netserver beside netserver.service.
systemctl --root="$root" mask netperf.service
# Boot tuning under TCG: nothing waits for the network, no periodic jobs.
systemctl --root="$root" mask systemd-networkd-wait-online.service e2scrub_reap.service e2scrub_all.timer \
    fstrim.timer man-db.timer apt-daily.timer apt-daily-upgrade.timer systemd-timesyncd.service
# The NFS server is there for benchmarks that start it; it does not start at boot.
systemctl --root="$root" disable nfs-server.service rpcbind.service rpcbind.socket nfs-client.target
# libvirt is there for the nested lab test, which starts it: no default NAT network at its start,
# no guest suspending at shutdown.
rm -f "$root/etc/libvirt/qemu/networks/autostart/default.xml"
systemctl --root="$root" disable libvirt-guests.service
# A static resolver file (no systemd-resolved): the guests resolve the nodes from /etc/hosts.
printf 'nameserver 127.0.0.1\n' > "$root/etc/resolv.conf"
printf '127.0.1.1\tniclab\n' >> "$root/etc/hosts"  # the host name resolves (sudo asks)
# Reproducible: no machine id until first boot.
: > "$root/etc/machine-id"
