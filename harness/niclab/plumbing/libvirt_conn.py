"""Talking to libvirt: the python module, connections, a domain's console, and leftover domains.

libvirt-python is optional (`make lab`): it is imported here, on first use,
with its error handler silenced (its errors reach niclab as exceptions).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from niclab.base.errors import NiclabError
from niclab.base.procs import pid_namespace, process_start_time

METADATA_NS = "urn:niclab:domain:1"  # the namespace of what niclab records in a domain's <metadata>


def libvirt_module() -> Any:
    try:
        import libvirt
    except ImportError:
        raise NiclabError(
            "libvirt-python is not installed: run `make lab` (or .venv/bin/pip install libvirt-python)"
        ) from None
    libvirt.registerErrorHandler(_quiet, None)  # errors reach niclab as exceptions, not lines on stderr
    _event_loop(libvirt)
    return libvirt


_events_started = threading.Lock()
_events: list[threading.Thread] = []


def _event_loop(libvirt: Any) -> None:
    """libvirt's default event loop, run in a daemon thread from the first connection on: keepalives (which
    tell a dead remote host from a slow one) need it."""
    with _events_started:
        if _events:
            return
        try:
            libvirt.virEventRegisterDefaultImpl()
        except Exception:  # libvirtError: registered by someone else already
            return

        def run() -> None:
            while True:
                try:
                    libvirt.virEventRunDefaultImpl()
                except Exception:
                    return

        thread = threading.Thread(target=run, daemon=True, name="libvirt-events")
        thread.start()
        _events.append(thread)


def _quiet(_context: object, _error: object) -> None:
    pass


def local_uri(uri: str) -> bool:
    """Whether a libvirt URI names this machine's libvirtd (qemu:///system): it has no host part."""
    return "://" in uri and uri.split("://", 1)[1].startswith("/")


# libvirtd's own default (libvirtd.conf): a remote host gone quiet fails its calls in ~30 s, not never, and a
# host that is only slow (a lab host busy starting guests) is not taken for gone
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 5


def batch_uri(uri: str) -> str:
    """The URI libvirt opens: a qemu+ssh one with `no_tty=1` (its ssh runs with BatchMode, so a password or
    host-key prompt fails at once, as niclab's own ssh does, instead of waiting on a terminal)."""
    scheme, _, rest = uri.partition("://")
    if scheme != "qemu+ssh":
        return uri
    query = rest.partition("?")[2]
    if any(pair.partition("=")[0].lower() == "no_tty" for pair in re.split(r"[&;]", query) if pair):
        return uri
    return f"{uri}{'&' if query else '?' if not uri.endswith('?') else ''}no_tty=1"


def open_uri(uri: str) -> Any:
    libvirt = libvirt_module()
    try:
        conn = libvirt.open(batch_uri(uri))
    except libvirt.libvirtError as exc:
        raise NiclabError(
            f"cannot reach libvirt at {uri}: {exc.get_error_message()}; start libvirtd "
            "(scripts/setup-host --lab), or give another URI (--libvirt-uri, or the host's libvirt: in the lab)"
        ) from None
    keep_alive(conn)
    return conn


def keep_alive(conn: Any) -> None:
    """Keepalive probes on a connection to a remote libvirtd, so a call on a host that went away fails in
    seconds instead of hanging. Local drivers (and the test driver) have none: nothing to do there."""
    try:
        conn.setKeepAlive(KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT)
    except Exception:  # libvirtError: not supported by this connection's driver
        pass


class Console(threading.Thread):
    """Copies a domain's console (through libvirt) into the node's serial log in the work directory."""

    def __init__(self, uri: str, domain_name: str, log: Path):
        super().__init__(daemon=True, name=f"console-{domain_name}")
        # A connection of its own: a stream blocked in recv must not hold up the run's libvirt calls.
        self.conn = open_uri(uri)
        try:
            self.stream = self.conn.newStream(0)
            self.conn.lookupByName(domain_name).openConsole(None, self.stream, 0)
        except BaseException:
            self.conn.close()
            raise
        self.log = log

    def run(self) -> None:
        libvirt = libvirt_module()
        with open(self.log, "ab") as out:
            while True:
                try:
                    data = self.stream.recv(4096)
                except libvirt.libvirtError:
                    return
                if not isinstance(data, bytes) or not data:
                    return
                out.write(data)
                out.flush()

    def close(self) -> None:
        try:
            self.stream.abort()
        except Exception:  # the domain is gone, and its stream with it
            pass
        try:
            self.conn.close()
        except Exception:
            pass


def active(domain: Any) -> bool:
    try:
        return bool(domain.isActive())
    except Exception:
        return False


def destroy(domain: Any) -> None:
    try:
        domain.destroy()
    except Exception:  # already gone: a transient domain vanishes when it stops
        pass


def version(conn: Any) -> str:
    number = conn.getLibVersion()
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


@dataclass(frozen=True)
class Leftovers:
    destroyed: list[str]
    elsewhere: list[str]  # left alone: their harness's PID belongs to another host or container


def leftover_domains(uri: str, include_running: bool = False) -> Leftovers:
    """Destroy the niclab domains on `uri` whose harness is gone (or all of them).

    A domain's metadata names its harness's PID and start time (a recycled PID has another start time),
    and where that PID means something: a domain whose harness ran in another container or on another
    host is left alone, since its PID cannot be checked here.
    """
    libvirt = libvirt_module()

    ended, elsewhere = [], []
    here = pid_namespace()
    conn = open_uri(uri)
    try:
        for domain in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            if not domain.name().startswith("niclab-"):
                continue
            try:
                meta = ET.fromstring(domain.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS, 0))
                pid, start = int(meta.get("harness-pid", "0")), meta.get("harness-start")
                at = meta.get("harness-at", here)
            except (libvirt.libvirtError, ET.ParseError, ValueError):
                continue  # not one of ours after all
            if not include_running and at != here:
                elsewhere.append(domain.name())
            elif include_running or str(process_start_time(pid)) != start:
                destroy(domain)
                ended.append(domain.name())
    finally:
        conn.close()
    return Leftovers(ended, elsewhere)
