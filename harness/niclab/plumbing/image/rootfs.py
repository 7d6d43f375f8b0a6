"""Fetch the guest's Debian packages into a root tarball with mmdebstrap.

Nothing is installed on the host: mmdebstrap uses its own apt configuration
with the recipe's suite and components, pointed at the host's Debian mirror.
As root it builds in a directory; as a user it uses a user namespace.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.plumbing.image.mirror import debian_mirror
from niclab.plumbing.image.recipe import Recipe, SourceBuild


def build_hook(build: SourceBuild) -> str:
    """An mmdebstrap hook that fetches, unpacks and builds one source package inside the root."""
    source = shlex.quote(build.source)
    script = f"cd /usr/src && apt-get source -q {source} && cd {source}-*/ && {build.script}"
    return f'--customize-hook=chroot "$1" sh -ec {shlex.quote(script)}'


def disk_hooks(recipe: Recipe) -> list[str]:
    """For a disk recipe: copy rootfs/ over the root (owned by root), then run its customize script."""
    if recipe.disk is None:
        return []
    overlay = shlex.quote(str(recipe.rootfs_overlay))
    hooks = [f'--customize-hook=tar -C {overlay} -c . | tar -C "$1" -x --no-same-owner']
    if recipe.disk.customize:
        hooks.append(f'--customize-hook=sh {shlex.quote(str(recipe.directory / recipe.disk.customize))} "$1"')
    return hooks


def mmdebstrap_command(recipe: Recipe, mirror: str, out: Path) -> list[str]:
    packages = list(recipe.packages)
    if recipe.builds:  # apt-get source needs apt and dpkg-source in the root, and deb-src lines
        packages += ["apt", "dpkg-dev", *(p for b in recipe.builds for p in b.needs)]
    command = [
        "mmdebstrap",
        "--variant=essential",
        f"--components={','.join(recipe.components)}",
        f"--include={','.join(packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        *(build_hook(b) for b in recipe.builds),
        *disk_hooks(recipe),
        recipe.suite,
        str(out),
        mirror,
    ]
    if recipe.builds:
        command.append(f"deb-src {mirror} {recipe.suite} {' '.join(recipe.components)}")
    return command


def kernel_command(suite: str, mirror: str, out: Path) -> list[str]:
    """Fetch only Debian's kernel package for `suite` (and what it depends on), unpacked, never installed."""
    base, _, pocket = suite.partition("-")  # bookworm-backports: its kernel, with bookworm beside it
    sources = [f"deb {mirror} {base} main"] + ([f"deb {mirror} {suite} main"] if pocket else [])
    return [
        "mmdebstrap",
        "--variant=extract",
        f"--include=linux-image-amd64{'/' + suite if pocket else ''}",
        # sid's Release files expire within days; a mirror that lags a little is still the kernel asked for
        *(['--aptopt=Acquire::Check-Valid-Until "false"'] if suite in ("sid", "unstable") else []),
        "--dpkgopt=path-exclude=/usr/share/*",
        base,
        str(out),
        *sources,
    ]


def fetch_root(recipe: Recipe, out: Path, log: Path, progress: Callable[[str], None]) -> None:
    """Write the guest root as a tar at `out`; mmdebstrap's output goes to `log`."""
    mirror = debian_mirror(recipe.suite)
    progress(
        f"fetching {len(recipe.packages)} Debian packages and their dependencies ({recipe.suite}) "
        f"with mmdebstrap; log: {log}"
    )
    run_mmdebstrap(mmdebstrap_command(recipe, mirror, out), log, progress)


def run_mmdebstrap(command: list[str], log: Path, progress: Callable[[str], None]) -> None:
    """Run mmdebstrap with its output in `log`, saying every 15 s that it still runs."""
    if shutil.which("mmdebstrap") is None:
        raise NiclabError("mmdebstrap is not installed: run `make setup` (or apt-get install mmdebstrap)")
    started = time.monotonic()
    with log.open("w") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        sink.flush()
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                time.sleep(1)
                elapsed = time.monotonic() - started
                if int(elapsed) % 15 == 0:
                    progress(f"  still fetching ({elapsed:.0f} s)")
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise NiclabError(f"mmdebstrap failed (exit {proc.returncode}); the end of {log}:\n{tail}")
    progress(f"  fetched in {time.monotonic() - started:.0f} s")
