#!/usr/bin/env bash
# Make the Docker base image (debian:bookworm-slim by default) from Debian packages, with mmdebstrap and
# `docker import`, for a Docker host that reaches no image registry. Where `docker pull debian:bookworm-slim`
# works, this is not needed.
#
#   images/docker/base.sh [TAG]     TAG defaults to debian:bookworm-slim (what the Dockerfile starts from)
#
# The packages come from the mirror the host's apt uses ($NICLAB_DEBIAN_MIRROR wins), so nothing is named
# here. A minimal Debian (variant minbase, no documentation), like the registry's -slim image. Does nothing
# when TAG already exists; `NICLAB_DOCKER_BASE_FORCE=1` makes it anew.
set -euo pipefail

tag=${1:-debian:bookworm-slim}
suite=bookworm
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

for tool in docker mmdebstrap python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "base.sh: $tool is not installed: run \`make docker\` (it installs docker.io, docker-compose and mmdebstrap)" >&2
        exit 1
    fi
done
if ! docker info >/dev/null 2>&1; then
    echo "base.sh: no Docker engine answers (\`docker info\` fails): run \`make docker\`, which starts dockerd" >&2
    exit 1
fi
if [ -z "${NICLAB_DOCKER_BASE_FORCE:-}" ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base.sh: $tag exists already (NICLAB_DOCKER_BASE_FORCE=1 makes it anew)"
    exit 0
fi

mirror=${NICLAB_DEBIAN_MIRROR:-$(PYTHONPATH="$repo/harness" python3 -c \
    "from niclab.plumbing.image.mirror import debian_mirror; print(debian_mirror('$suite'))")}

echo "base.sh: building $tag from Debian $suite packages with mmdebstrap (about a minute)"
started=$SECONDS
# mmdebstrap writes the root as a tar on stdout; docker import makes it a one-layer image.
mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='APT::Install-Recommends "false"' \
    "$suite" - "$mirror" |
    docker import \
        --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --message "niclab images/docker/base.sh: mmdebstrap --variant=minbase $suite" \
        - "$tag" >/dev/null
echo "base.sh: $tag ready in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}'))"
