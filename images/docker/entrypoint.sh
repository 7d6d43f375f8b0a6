#!/bin/sh
# The lab container's entrypoint: run the command as the user who owns /lab (the checkout mounted from the
# host), so that what it writes there (runs/) belongs to that user and not to root. The user also gets
# the groups of /dev/kvm and of libvirt's socket when they are passed in.
#
# The command never keeps a capability, in any branch: it goes through setpriv with no inheritable and no
# bounding set (so not even root regains one at exec), and a last check refuses to run it if it still has
# one. docker-compose.yml drops every capability but the four used here (CHOWN, SETUID, SETGID, SETPCAP);
# setpriv empties the bounding set only with SETPCAP, and silently does nothing without it.
set -eu

# Run as the last step of setpriv: refuse if the command would start with a capability, else exec it.
uncapped='
if ! grep -Eq "^CapEff:[[:space:]]+0+$" /proc/self/status || ! grep -Eq "^CapPrm:[[:space:]]+0+$" /proc/self/status
then
    echo "niclab-entrypoint: the command would run with capabilities ($(grep ^CapEff /proc/self/status)):" \
        "give the container CAP_SETPCAP (docker-compose.yml adds it) or start it as a user" >&2
    exit 126
fi
exec "$@"'

if [ "$(id -u)" != 0 ]; then  # started as a user (docker run --user): nothing to switch
    exec setpriv --inh-caps=-all --bounding-set=-all -- sh -c "$uncapped" niclab-entrypoint "$@"
fi
if [ -d /lab ]; then
    uid=$(stat -c %u /lab)
    gid=$(stat -c %g /lab)
else
    uid=0 gid=0
fi

# docker-compose.lab.yml mounts a volume of the containers' own at /var/lib/niclab (never the host's state
# directory): each user gets a state directory of their own in it, 0700, made here while root may chown.
if [ -d /var/lib/niclab ] && [ -z "${NICLAB_STATE:-}" ]; then
    NICLAB_STATE=/var/lib/niclab/uid-$uid
    if [ ! -d "$NICLAB_STATE" ]; then
        mkdir -p -m 0700 "$NICLAB_STATE"  # -p: two containers starting at once may both get here
        chown "$uid:$gid" "$NICLAB_STATE"
    fi
    export NICLAB_STATE
fi

if [ "$uid" = 0 ]; then  # the checkout is root's (or there is none): run as root, without capabilities
    exec setpriv --inh-caps=-all --bounding-set=-all -- sh -c "$uncapped" niclab-entrypoint "$@"
fi
groups=$gid
for shared in /dev/kvm /run/libvirt/libvirt-sock; do
    if [ -e "$shared" ] && [ "$(stat -c %g "$shared")" != 0 ]; then  # never root's group
        groups="$groups,$(stat -c %g "$shared")"
    fi
done
export HOME=/tmp/niclab-home USER="niclab"
mkdir -p -m 0700 "$HOME"
chown "$uid:$gid" "$HOME"
exec setpriv --reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps=-all --bounding-set=-all -- \
    sh -c "$uncapped" niclab-entrypoint "$@"
