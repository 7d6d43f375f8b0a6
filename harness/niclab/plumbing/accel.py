"""Pick the QEMU accelerator: KVM only where the guest image really runs under it here, else TCG.

The probe boots the image's own kernel until a word printed from userspace shows, its deadline following the
serial console; the verdict is cached per host, host kernel, QEMU, /dev/kvm access and image (a lab host's per
URI: `choose_host_accel`), and a run that finds it wrong marks KVM unusable (`mark_kvm_unusable`).
$NICLAB_ACCEL skips the probe. docs/architecture.md, "KVM is probed with the real kernel".
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from niclab.base.errors import NiclabError, UsageError
from niclab.base.paths import cache_dir
from niclab.base.procs import die_with_parent
from niclab.plumbing.image import Image

QEMU = "qemu-system-x86_64"
PROBE_WORD = "NICLAB-ACCEL-OK"
PROBE_TIMEOUT_S = 20.0  # silence this long fails the probe; a KVM guest prints the word in about 1 s, TCG in 2-3 s
PROBE_LIMIT_S = 120.0  # the longest a probe runs, however much the kernel prints
PROBE_EXIT_S = 10.0  # how long a guest that printed the word gets to end itself


@dataclass(frozen=True)
class AccelChoice:
    accel: str  # "kvm" or "tcg"
    reason: str
    probed_at: str
    forced: bool = False  # chosen by $NICLAB_ACCEL, not by the probe


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def qemu_binary() -> str:
    """The QEMU to run: $NICLAB_QEMU if set (a wrapper, another build), else qemu-system-x86_64 on PATH."""
    wanted = os.environ.get("NICLAB_QEMU") or QEMU
    path = shutil.which(wanted)
    if path is None:
        if os.environ.get("NICLAB_QEMU"):
            raise UsageError(f"NICLAB_QEMU={wanted}: no such program")
        raise NiclabError(f"{QEMU} is not installed: run `make setup` (or apt-get install qemu-system-x86)")
    return path


def probe_argv(binary: str, accel: str, image: Image, serial: Path) -> list[str]:
    """Boot the image's kernel with busybox `echo PROBE_WORD` as init; its exit panics the kernel, QEMU quits.

    The kernel's messages go to the serial port too (`loglevel=6`, after the image's `quiet`): they are the
    progress that keeps a slow boot from being taken for a hung one.
    """
    return [
        binary,
        "-machine",
        f"pc,accel={accel}",
        "-cpu",
        "host" if accel == "kvm" else "max",
        "-m",
        "256M",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        f"file:{serial}",
        "-kernel",
        str(image.boot_kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        probe_cmdline(image),
    ]


def probe_cmdline(image: Image) -> str:
    """The probe's kernel command line: the image's own, then busybox `echo PROBE_WORD` as init."""
    return f"{image.cmdline} loglevel=6 panic=-1 rdinit=/usr/bin/busybox -- echo {PROBE_WORD}"


def probe(
    accel: str, binary: str, image: Image, timeout: float = PROBE_TIMEOUT_S, limit: float = PROBE_LIMIT_S
) -> tuple[bool, str]:
    """Boot the image under `accel` until userspace prints the probe word; (worked, what happened).

    Fails after `timeout` s in which the serial port got nothing new, or `limit` s in all.
    """
    with tempfile.TemporaryDirectory(prefix="niclab-accel-") as scratch:
        serial = Path(scratch) / "serial.out"
        proc = subprocess.Popen(
            probe_argv(binary, accel, image, serial),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        started = last_output = time.monotonic()
        printed = 0
        try:
            while (now_s := time.monotonic()) - last_output < timeout and now_s - started < limit:
                text = serial.read_bytes() if serial.exists() else b""
                if PROBE_WORD.encode() in text:
                    took = now_s - started
                    try:  # its init has exited: the kernel reboots, and -no-reboot ends QEMU
                        proc.wait(PROBE_EXIT_S)
                    except subprocess.TimeoutExpired:
                        pass
                    return True, f"the image's kernel reached userspace under {accel} in {took:.1f} s"
                if len(text) > printed:
                    printed, last_output = len(text), now_s
                if proc.poll() is not None:
                    assert proc.stderr is not None
                    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
                    return (
                        False,
                        f"QEMU exited under {accel} before the guest's userspace ran: "
                        f"{err[-1] if err else f'status {proc.returncode}'}",
                    )
                time.sleep(0.05)
            if now_s - started >= limit:
                return False, f"the image's kernel did not reach userspace under {accel} in {limit:g} s"
            return False, (
                f"the image's kernel did not reach userspace under {accel}: nothing new on its console "
                f"for {timeout:g} s (after {now_s - started:.0f} s)"
            )
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


def kvm_access() -> str | None:
    """None if this user can open /dev/kvm, else why not."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "/dev/kvm is not accessible to this user"
    return None


def decide(
    forced: str | None, cached: AccelChoice | None, access: str | None, run_probe: Callable[[], tuple[bool, str]]
) -> tuple[AccelChoice, bool]:
    """The accelerator to use, and whether the verdict is new (to be cached). Boots nothing itself."""
    if forced:
        if forced not in ("kvm", "tcg"):
            raise UsageError(f"NICLAB_ACCEL={forced!r}: use kvm or tcg")
        return AccelChoice(forced, "set by NICLAB_ACCEL", now(), forced=True), False
    if cached is not None:
        return cached, False
    if access is not None:
        return AccelChoice("tcg", access, now()), True
    worked, what = run_probe()
    return AccelChoice("kvm" if worked else "tcg", what, now()), True


def _cache_file(binary: str, image: Image) -> Path:
    stat = os.stat(binary)
    text = (
        f"{platform.node()}|{platform.release()}|{binary}|{stat.st_size}|{stat.st_mtime_ns}|"
        f"{kvm_access()}|{os.getuid()}|{image.id}"
    )
    return cache_dir() / "accel" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


def _read(path: Path) -> AccelChoice | None:
    try:
        return AccelChoice(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write(path: Path, choice: AccelChoice) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(choice)))
    tmp.replace(path)


def forced_choice() -> AccelChoice | None:
    """The accelerator $NICLAB_ACCEL forces, if it is set (no image or probe needed)."""
    forced = os.environ.get("NICLAB_ACCEL")
    return decide(forced, None, None, lambda: (False, ""))[0] if forced else None


def choose_accel(image: Image, refresh: bool = False, progress: Callable[[str], None] | None = None) -> AccelChoice:
    """KVM or TCG for booting `image` here (cached; `refresh` probes again)."""
    if (choice := forced_choice()) is not None:
        return choice
    binary = qemu_binary()
    cache = _cache_file(binary, image)

    def run_probe() -> tuple[bool, str]:
        if progress:
            progress("probing KVM: booting the image's kernel under it (once per host and image)")
        return probe("kvm", binary, image)

    choice, new = decide(None, None if refresh else _read(cache), kvm_access(), run_probe)
    if new:
        _write(cache, choice)
    return choice


def mark_kvm_unusable(image: Image, why: str) -> AccelChoice:
    """Record that KVM does not run the image's guests here: later runs use TCG without trying."""
    choice = AccelChoice("tcg", f"KVM failed a real run at {now()}: {why}", now())
    _write(_cache_file(qemu_binary(), image), choice)
    return choice


def host_cache_file(uri: str, image: Image) -> Path:
    """Where the verdict for `image` on the libvirt host at `uri` is cached (the URI hashed: a safe file name)."""
    key = hashlib.sha256(f"{uri}|{image.id}".encode()).hexdigest()[:16]
    return cache_dir() / "accel" / f"host-{key}.json"


def cached_host_choice(uri: str, image: Image) -> AccelChoice | None:
    """The cached verdict for `image` on the libvirt host at `uri`, if it was ever probed."""
    return _read(host_cache_file(uri, image))


def choose_host_accel(
    uri: str,
    image: Image,
    run_probe: Callable[[], tuple[bool, str]],
    refresh: bool = False,
    progress: Callable[[str], None] | None = None,
) -> AccelChoice:
    """KVM or TCG for booting `image` on the libvirt host at `uri`: $NICLAB_ACCEL, else the cached verdict, else
    `run_probe` (which boots the probe there) and its verdict cached (`refresh` probes again)."""
    if (choice := forced_choice()) is not None:
        return choice
    cache = host_cache_file(uri, image)

    def probe_there() -> tuple[bool, str]:
        if progress:
            progress(f"probing KVM on {uri}: booting the image's kernel there (once per host and image)")
        return run_probe()

    choice, new = decide(None, None if refresh else _read(cache), None, probe_there)
    if new:
        _write(cache, choice)
    return choice


def mark_kvm_unusable_on(uri: str, image: Image, why: str) -> AccelChoice:
    """Record that KVM does not run the image's guests on the libvirt host at `uri`."""
    choice = AccelChoice("tcg", f"KVM failed a real run at {now()}: {why}", now())
    _write(host_cache_file(uri, image), choice)
    return choice
