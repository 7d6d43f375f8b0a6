#!/bin/sh
# The lab container's entrypoint: run the command as the user who owns /lab (the checkout mounted from the
# host), so that what it writes there (runs/) belongs to that user and not to root. The user also gets
# the groups of /dev/kvm and of libvirt's socket when they are passed in, and no capabilities.
set -eu

if [ "$(id -u)" != 0 ] || [ ! -d /lab ]; then
    exec "$@"
fi
uid=$(stat -c %u /lab)
gid=$(stat -c %g /lab)
if [ "$uid" = 0 ]; then
    exec "$@"  # the checkout is root's: run as root (still without privileges or added capabilities)
fi
groups=$gid
for shared in /dev/kvm /run/libvirt/libvirt-sock; do
    if [ -e "$shared" ] && [ "$(stat -c %g "$shared")" != 0 ]; then  # never root's group
        groups="$groups,$(stat -c %g "$shared")"
    fi
done
export HOME=/tmp/niclab-home USER="niclab"
mkdir -p "$HOME"
chown "$uid:$gid" "$HOME"
exec setpriv --reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps=-all --bounding-set=-all -- "$@"
