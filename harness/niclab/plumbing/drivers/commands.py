"""The mmdebstrap run that builds a driver for a Debian suite's kernel, one per kind of choice.

One root of the kernel's suite with its headers (and so its compiler) and make, target /dev/null: hooks copy
the source in, build it in the chroot and copy /build/out back, with the build's status and log whether it
failed or not. A hook that cannot go on says why on a line of its own starting with MARK.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from niclab.model.driver_choice import DriverChoice

MARK = "niclab-driver:"
COMPONENTS = "main contrib non-free"  # DKMS packages of vendor drivers are in contrib and non-free
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")


def source_package(kernel_version: str) -> str:
    """Debian's source tarball package of a kernel release: linux-source-6.1 for 6.1.0-50-amd64."""
    major, minor = kernel_version.split(".")[:2]
    return f"linux-source-{major}.{minor}"


NOBODY = "65534:65534"  # who runs a source's Makefile: it comes from a scenario file, and may be anyone's
MAKE_TIMEOUT = 1800  # seconds a driver's build may take (a vendor driver: minutes at most)
TIMED_OUT = ("124", "137")  # the status of `timeout -k` when it stopped the build (TERM, then KILL)
LIMIT = f"timeout -k 10 {MAKE_TIMEOUT}"
# In a PID namespace of its own, whose first process is the build: when it ends, however it ends, the kernel
# ends everything it started (a `setsid sleep &` too) before root copies out what it built.
ALONE = "unshare --pid --fork --kill-child"


def copy_modules(where: str, pattern: str = "*.ko", path: str = "") -> str:
    """Copy the modules under `where` (a shell word) to /build/out/ko: root copies only regular files, as they
    are (cp -P), whatever the build left there (a link, a FIFO)."""
    only = f" -path {shlex.quote(path)}" if path else ""
    return f"find {where}{only} -type f -name {shlex.quote(pattern)} -exec cp -P {{}} /build/out/ko/ \\;"


def make_script(kernel_version: str) -> str:
    """Build /build/src as an out-of-tree module of the installed headers, as nobody (the Makefile is the
    scenario's, and a root that runs it could leave the chroot) and within MAKE_TIMEOUT; status and log to
    /build/out."""
    build = shlex.quote(f"/lib/modules/{kernel_version}/build")
    return (
        f"cp -a /build/src /build/out/src; chown -R {NOBODY} /build/src; "
        f"rc=0; {LIMIT} {ALONE} chroot --userspec={NOBODY} / make -C {build} M=/build/src modules "
        "> /build/out/build.log 2>&1 || rc=$?; "
        "echo $rc > /build/out/status; "
        # without their debug information, as Debian installs its modules (INSTALL_MOD_STRIP) and DKMS strips its
        # own: a tenth of the size in the guest's initramfs; the build id stays (one strip cannot take is kept whole)
        f"[ $rc != 0 ] || {LIMIT} {ALONE} chroot --userspec={NOBODY} / find /build/src -type f -name '*.ko' "
        "-exec strip --strip-debug {} + >> /build/out/build.log 2>&1 || true; " + copy_modules("/build/src")
    )


def kernel_source_script(choice: DriverChoice, kernel_version: str, suite: str) -> str:
    """Fetch the linux-source package of the very version of the headers, and take one directory of it."""
    package = source_package(kernel_version)
    headers = f"linux-headers-{kernel_version}"
    path = shlex.quote(f"{package}/{choice.source}")
    missing = shlex.quote(f"{MARK} Debian {suite} has no {package} ")
    mismatch = shlex.quote(f" (the version of its kernel headers {headers}); it has: ")
    no_dir = shlex.quote(f"{MARK} {package} has no directory {choice.source}")
    return (
        "set -e; cd /build; "
        f"want=$(dpkg-query -W -f='${{source:Version}}' {headers}); echo \"$want\" > /build/out/source-version; "
        f'if ! apt-get download -q {package}="$want" > /build/out/fetch.log 2>&1; then '
        f'echo {missing}"$want"{mismatch}"$(apt-cache policy {package} | grep Candidate)"; exit 1; fi; '
        f"dpkg-deb --fsys-tarfile {package}_*.deb | tar -xO ./usr/src/{package}.tar.xz "
        f"| tar -xJ -C /build {path} || {{ echo {no_dir}; exit 1; }}; "
        f"rm -f {package}_*.deb; mv /build/{path} /build/src"
    )


def dkms_script(choice: DriverChoice, kernel_version: str, suite: str) -> str:
    """Unpack a DKMS package (no maintainer scripts), then `dkms add` and `dkms build` it for the kernel."""
    package = shlex.quote(choice.source)
    kver = shlex.quote(kernel_version)
    missing = shlex.quote(f"{MARK} Debian {suite} has no package {choice.source}")
    not_dkms = shlex.quote(f"{MARK} {choice.source} holds no dkms.conf: not a DKMS package")
    return (
        "set -e; cd /build; "
        f"apt-get download -q {package} > /build/out/fetch.log 2>&1 || {{ echo {missing}; exit 1; }}; "
        f"dpkg-deb -f {package}_*.deb Version > /build/out/source-version; "
        f"dpkg-deb -x {package}_*.deb /; rm -f {package}_*.deb; "
        "conf=$(ls /usr/src/*/dkms.conf 2>/dev/null | head -n 1); "
        f'[ -n "$conf" ] || {{ echo {not_dkms}; exit 1; }}; '
        f'M=$(set +e; kernelver={kver}; . "$conf" > /dev/null 2>&1; echo "$PACKAGE_NAME"); '
        f'V=$(set +e; kernelver={kver}; . "$conf" > /dev/null 2>&1; echo "$PACKAGE_VERSION"); '
        'echo "$M $V" > /build/out/dkms-module; cp -a "$(dirname "$conf")" /build/out/src; '
        'rc=0; { dkms add -m "$M" -v "$V" && '
        f'{LIMIT} {ALONE} dkms build -m "$M" -v "$V" -k {kver}; }} > /build/out/dkms.log 2>&1 || rc=$?; '
        "echo $rc > /build/out/status; "
        'cat "/var/lib/dkms/$M/$V/build/make.log" > /build/out/build.log 2>/dev/null '
        "|| cp /build/out/dkms.log /build/out/build.log; "
        + copy_modules(f'"/var/lib/dkms/$M/$V/"{kver}', "*.ko*", "*/module/*")
        + " 2>/dev/null || true"
    )


def sources(suite: str, mirror: str) -> list[str]:
    """The suite's apt lines: a backports pocket comes with its base suite, as image.rootfs.kernel_command does."""
    base, _, pocket = suite.partition("-")
    return [f"deb {mirror} {base} {COMPONENTS}"] + ([f"deb {mirror} {suite} {COMPONENTS}"] if pocket else [])


def build_command(choice: DriverChoice, kernel_version: str, suite: str, mirror: str, work: Path) -> list[str]:
    """The mmdebstrap command line that builds `choice` for `kernel_version` of `suite`; work/src is the copy of a
    module's source (kind module), work/out what comes back."""
    base, _, pocket = suite.partition("-")
    headers = f"linux-headers-{kernel_version}" + (f"/{suite}" if pocket else "")
    packages = [headers, "make", "kmod"]
    hooks = ['--customize-hook=mkdir -p "$1/build/out/ko"']
    if choice.kind == "module":
        hooks.append(f"--customize-hook=copy-in {shlex.quote(str(work / 'src'))} /build")
    elif choice.kind == "kernel-source":
        packages.append("xz-utils")
        hooks.append(_chroot(kernel_source_script(choice, kernel_version, suite)))
        if choice.name:
            rename = [sys.executable, "-m", "niclab.plumbing.drivers.makefile"]
            folder = shlex.quote(choice.source.rstrip("/").rsplit("/", 1)[-1])
            hooks.append(f'--customize-hook={shlex.join(rename)} "$1/build/src" {shlex.quote(choice.name)} {folder}')
    elif choice.kind == "dkms":
        packages.append("dkms")
    else:
        raise ValueError(f"no build for a driver of kind {choice.kind!r}")
    hooks.append(
        _chroot(dkms_script(choice, kernel_version, suite) if choice.kind == "dkms" else make_script(kernel_version))
    )
    hooks.append(f"--customize-hook=copy-out /build/out {shlex.quote(str(work))}")
    return [
        "mmdebstrap",
        "--variant=apt",
        f"--include={','.join(packages)}",
        *(f"--dpkgopt=path-exclude={path}" for path in DPKG_EXCLUDES),
        # sid's Release files expire within days; a mirror that lags a little still has the headers asked for
        *(['--aptopt=Acquire::Check-Valid-Until "false"'] if suite in ("sid", "unstable") else []),
        *hooks,
        base,
        "/dev/null",
        *sources(suite, mirror),
    ]


def named_command(kernel_version: str, suite: str, mirror: str, out: Path) -> list[str]:
    """Fetch the kernel package of that very release, unpacked, never installed (its modules are the source)."""
    base, _, _ = suite.partition("-")
    return [
        "mmdebstrap",
        "--variant=extract",
        f"--include=linux-image-{kernel_version}",
        *(['--aptopt=Acquire::Check-Valid-Until "false"'] if suite in ("sid", "unstable") else []),
        "--dpkgopt=path-exclude=/usr/share/*",
        base,
        str(out),
        *sources(suite, mirror),
    ]


def _chroot(script: str) -> str:
    return f'--customize-hook=chroot "$1" sh -c {shlex.quote(script)}'
