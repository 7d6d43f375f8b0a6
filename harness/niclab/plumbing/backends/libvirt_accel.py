"""The KVM probe on a libvirt host: does the image's kernel run under KVM there?

A transient kvm domain with no ports boots the image from the host's `niclab` pool with the probe's command
line, its console read through libvirt; it carries the harness's PID as a run's domains do, so `niclab down`
ends one a killed probe left. A local URI keeps this machine's probe (docs/lab.md, "Remote hosts").
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.base.procs import pid_namespace, process_start_time
from niclab.base.text import said
from niclab.plumbing.accel import (
    PROBE_EXIT_S,
    PROBE_LIMIT_S,
    PROBE_TIMEOUT_S,
    PROBE_WORD,
    AccelChoice,
    choose_accel,
    choose_host_accel,
    probe_cmdline,
)
from niclab.plumbing.backends.libvirt_volumes import image_volumes
from niclab.plumbing.backends.libvirt_xml import DomainPlan, domain_xml
from niclab.plumbing.image import Image
from niclab.plumbing.libvirt_conn import Console, active, destroy, libvirt_module, local_uri, open_uri

PROBE_MEMORY_MIB = 256
CONSOLE_DRAIN_S = 2.0  # how long the console gets to hand over what a domain printed as it ended


class ConsoleLike(Protocol):
    def start(self) -> None: ...
    def join(self, timeout: float | None = None) -> None: ...
    def close(self) -> None: ...


OpenConsole = Callable[[str, str, Path], ConsoleLike]  # (uri, domain name, log file)


def probe_plan(image: Image, kernel: str, initrd: str, name: str, metadata: dict[str, str]) -> DomainPlan:
    """The probe's domain: type kvm, the image's kernel and initramfs (paths on the host), no ports."""
    return DomainPlan(
        name=name,
        domain_type="kvm",
        memory_mib=PROBE_MEMORY_MIB,
        vcpus=1,
        kernel=kernel,
        initrd=initrd,
        cmdline=probe_cmdline(image),
        ports=(),
        metadata=metadata,
    )


def _metadata() -> dict[str, str]:
    return {
        "harness-pid": str(os.getpid()),
        "harness-start": str(process_start_time(os.getpid())),
        "harness-at": pid_namespace(),
        "run": "kvm probe",
    }


def _last_line(text: bytes) -> str:
    lines = [line.strip() for line in text.decode(errors="replace").splitlines() if line.strip()]
    return said(lines[-1], 200, last=False) if lines else ""


def probe_on(
    conn: Any,
    uri: str,
    image: Image,
    progress: Progress,
    timeout: float = PROBE_TIMEOUT_S,
    limit: float = PROBE_LIMIT_S,
    open_console: OpenConsole = Console,
) -> tuple[bool, str]:
    """Boot the probe as a kvm domain on the host `conn` reaches until its console shows the probe word;
    (worked, what happened there: the caller names the host). Fails after `timeout` s of console silence, or
    `limit` s in all."""
    libvirt = libvirt_module()
    kernel, initrd = image_volumes(conn, image, progress)
    token = hashlib.sha256(f"{uri}:{os.getpid()}:{time.time()}".encode()).hexdigest()[:8]
    plan = probe_plan(image, kernel, initrd, f"niclab-probe-{token}", _metadata())
    try:
        domain = conn.createXML(domain_xml(plan), libvirt.VIR_DOMAIN_START_PAUSED)
    except libvirt.libvirtError as exc:
        return False, f"libvirt would not start a kvm domain: {exc.get_error_message()}"
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="niclab-accel-") as scratch:
        stack.callback(destroy, domain)
        log = Path(scratch) / "console.log"
        log.touch()
        try:
            console = open_console(uri, plan.name, log)
        except (NiclabError, libvirt.libvirtError) as exc:
            return False, f"cannot read the probe's console: {exc}"
        console.start()
        stack.callback(console.close)
        try:
            domain.resume()
        except libvirt.libvirtError as exc:
            return False, f"libvirt would not run the probe's domain: {exc.get_error_message()}"
        started = last_output = time.monotonic()
        printed = 0
        while (now_s := time.monotonic()) - last_output < timeout and now_s - started < limit:
            text = log.read_bytes()
            if PROBE_WORD.encode() in text:
                took = now_s - started
                ends = now_s + PROBE_EXIT_S
                while active(domain) and time.monotonic() < ends:  # its init has exited: the domain ends itself
                    time.sleep(0.1)
                return True, f"the image's kernel reached userspace under kvm there in {took:.1f} s"
            if len(text) > printed:
                printed, last_output = len(text), now_s
            if not active(domain):
                console.join(CONSOLE_DRAIN_S)
                text = log.read_bytes()
                if PROBE_WORD.encode() in text:
                    continue  # the word came with the console's last bytes
                said = _last_line(text)
                return False, (
                    "the kvm domain ended before the guest's userspace ran"
                    + (f" (its console's last line: {said})" if said else " (its console printed nothing)")
                )
            time.sleep(0.05)
        if now_s - started >= limit:
            return False, f"the image's kernel did not reach userspace under kvm there in {limit:g} s"
        return False, (
            f"the image's kernel did not reach userspace under kvm there: nothing new on its console "
            f"for {timeout:g} s (after {now_s - started:.0f} s)"
        )


def host_accel(
    conn: Any, uri: str, image: Image, progress: Progress, refresh: bool = False, open_console: OpenConsole = Console
) -> AccelChoice:
    """KVM or TCG for `image` on the libvirt host at `uri`: $NICLAB_ACCEL, else this machine's probe for a local
    URI, else the host's cached verdict, else the probe booted there (and cached)."""
    if local_uri(uri):
        return choose_accel(image, refresh=refresh, progress=progress)
    return choose_host_accel(
        uri, image, lambda: probe_on(conn, uri, image, progress, open_console=open_console), refresh, progress
    )


def hosts_accel(
    hosts: dict[str, str], image: Image, progress: Progress, refresh: bool = False
) -> dict[str, AccelChoice | str]:
    """Per lab host (name -> libvirt URI): its verdict for `image` (cached, else probed there; `refresh` probes
    again), or why it could not be had (its libvirt did not answer)."""
    verdicts: dict[str, AccelChoice | str] = {}
    for name, uri in hosts.items():
        try:
            if local_uri(uri):
                verdicts[name] = host_accel(None, uri, image, progress, refresh)
                continue
            conn = open_uri(uri)
            try:
                verdicts[name] = host_accel(conn, uri, image, progress, refresh)
            finally:
                conn.close()
        except NiclabError as exc:
            verdicts[name] = str(exc)
    return verdicts
