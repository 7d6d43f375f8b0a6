#!/usr/bin/env bash
# Build the lab image (docker-compose.yml's `lab` service, images/docker/Dockerfile) the way `make docker`
# does: the host's extra certificate authorities go into the build, the base image is pulled, or made
# from Debian packages by base.sh where no registry answers, then compose builds. A second run reuses
# Docker's build cache: only what changed is built again.
#   images/docker/build.sh      NICLAB_DOCKER_BASE picks another base (default debian:bookworm-slim)
set -euo pipefail
cd "$(dirname "$0")/../.."

base=${NICLAB_DOCKER_BASE:-debian:bookworm-slim}
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null; then
    compose=(docker-compose)
else
    echo "build.sh: neither \`docker compose\` nor docker-compose is installed: run \`make docker\`" >&2
    exit 1
fi

# A network that inspects TLS has its own authority; pip in the build must trust it as the host does.
find images/docker/ca-certificates -name '*.crt' -delete
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt images/docker/ca-certificates/
fi

if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "build.sh: pulling $base"
    if ! docker pull -q "$base"; then
        echo "build.sh: no registry gives $base: making it from Debian packages (images/docker/base.sh)"
        images/docker/base.sh "$base"
    fi
fi
started=$SECONDS
echo "build.sh: building the lab image (${compose[*]} build lab; the first build takes minutes)"
NICLAB_DOCKER_BASE=$base "${compose[@]}" build lab
echo "build.sh: lab image ready in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' niclab/lab |
    awk '{printf "%.2f GB", $1 / 1e9}'))"
