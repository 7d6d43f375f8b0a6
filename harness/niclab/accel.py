"""Pick the QEMU accelerator: KVM if a guest really runs under it here, else TCG.

/dev/kvm existing proves nothing (on some hosts a guest under KVM hangs with
its vCPU spinning in the host kernel), so the probe boots a 512-byte boot
sector that writes a word to the serial port, under a short timeout. The
answer is cached per host, kernel and QEMU binary. $NICLAB_ACCEL=kvm|tcg
overrides the probe.
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
from dataclasses import asdict, dataclass
from pathlib import Path

from niclab.errors import NiclabError, UsageError
from niclab.paths import cache_dir

QEMU = "qemu-system-x86_64"
PROBE_WORD = b"NICLAB-ACCEL-OK"
PROBE_TIMEOUT_S = 5.0


def boot_sector() -> bytes:
    """Real-mode code at 0x7c00: write PROBE_WORD to COM1 (port 0x3f8), then halt."""
    code = bytes([
        0x31, 0xC0,        # xor ax, ax
        0x8E, 0xD8,        # mov ds, ax
        0xFC,              # cld
        0xBA, 0xF8, 0x03,  # mov dx, 0x3f8
        0xBE, 0x17, 0x7C,  # mov si, 0x7c17 (the message, right after this code)
        0xAC,              # next: lodsb
        0x84, 0xC0,        # test al, al
        0x74, 0x03,        # jz done
        0xEE,              # out dx, al
        0xEB, 0xF8,        # jmp next
        0xFA,              # done: cli
        0xF4,              # hlt
        0xEB, 0xFD,        # jmp hlt
    ])
    assert len(code) == 0x17
    body = code + PROBE_WORD + b"\0"
    return body + bytes(510 - len(body)) + b"\x55\xaa"


@dataclass(frozen=True)
class AccelChoice:
    accel: str  # "kvm" or "tcg"
    reason: str
    probed_at: str


def qemu_binary() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise NiclabError(f"{QEMU} is not installed: run `make setup` (or apt-get install qemu-system-x86)")
    return path


def _cache_key(binary: str) -> str:
    stat = os.stat(binary)
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    text = f"{platform.node()}|{platform.release()}|{binary}|{stat.st_size}|{stat.st_mtime_ns}|{kvm}|{os.getuid()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def probe(accel: str, binary: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Boot the probe sector under `accel`; (worked, what happened)."""
    with tempfile.TemporaryDirectory(prefix="niclab-accel-") as scratch:
        disk, serial = Path(scratch) / "probe.img", Path(scratch) / "serial.out"
        disk.write_bytes(boot_sector())
        argv = [binary, "-accel", accel, "-nodefaults", "-no-user-config", "-display", "none",
                "-m", "16", "-serial", f"file:{serial}",
                "-drive", f"file={disk},format=raw,if=ide,snapshot=on"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        started = time.monotonic()
        try:
            while time.monotonic() - started < timeout:
                if serial.exists() and PROBE_WORD in serial.read_bytes():
                    return True, f"a {accel} guest booted in {time.monotonic() - started:.2f} s"
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
                    return False, f"QEMU exited under {accel}: {err[-1] if err else proc.returncode}"
                time.sleep(0.02)
            return False, f"a {accel} guest did not boot in {timeout:.0f} s"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stderr.close()


def choose_accel(refresh: bool = False) -> AccelChoice:
    forced = os.environ.get("NICLAB_ACCEL")
    if forced:
        if forced not in ("kvm", "tcg"):
            raise UsageError(f"NICLAB_ACCEL={forced!r}: use kvm or tcg")
        return AccelChoice(forced, "set by NICLAB_ACCEL", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    binary = qemu_binary()
    cache = cache_dir() / "accel" / f"{_cache_key(binary)}.json"
    if not refresh:
        try:
            return AccelChoice(**json.loads(cache.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not os.path.exists("/dev/kvm"):
        choice = AccelChoice("tcg", "no /dev/kvm", now)
    elif not os.access("/dev/kvm", os.R_OK | os.W_OK):
        choice = AccelChoice("tcg", "/dev/kvm is not accessible to this user", now)
    else:
        worked, what = probe("kvm", binary)
        choice = AccelChoice("kvm" if worked else "tcg", what, now)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(asdict(choice)))
    return choice
