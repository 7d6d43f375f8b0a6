"""The KVM probe on a libvirt host (niclab.plumbing.backends.libvirt_accel), with a fake connection: its domain's
XML, its verdicts, the cache per host URI and image, and the backend's per-host fallback and facts."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from niclab.plumbing.accel import PROBE_WORD, AccelChoice, cached_host_choice, host_cache_file
from niclab.plumbing.backends import libvirt as backend
from niclab.plumbing.backends import libvirt_accel
from niclab.plumbing.backends.boot import BootError, boot_falling_back_hosts
from niclab.plumbing.backends.libvirt_accel import host_accel, probe_on, probe_plan
from niclab.plumbing.backends.libvirt_xml import domain_xml
from tests.helpers import FakeImage

REMOTE = "qemu+ssh://root@l1b/system"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))  # nothing reaches the real accelerator cache
    monkeypatch.delenv("NICLAB_ACCEL", raising=False)


class FakeError(Exception):
    def get_error_message(self) -> str:
        return str(self)


class FakeDomain:
    """A probe domain whose console prints `says` (in steps) and which ends when told or when its init exits."""

    def __init__(self, says: list[bytes], ends_after: bool = True):
        self.says, self.ends_after = says, ends_after
        self.running, self.resumed, self.destroyed = True, False, False

    def resume(self) -> None:
        self.resumed = True

    def isActive(self) -> bool:
        return self.running

    def destroy(self) -> None:
        self.destroyed, self.running = True, False


class FakeConsole:
    """Writes the domain's output into the log from a thread, as libvirt_conn.Console does."""

    def __init__(self, domain: FakeDomain, log: Path):
        self.domain, self.log = domain, log
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.closed = False

    def _run(self) -> None:
        for chunk in self.domain.says:
            with open(self.log, "ab") as out:
                out.write(chunk)
        if self.domain.ends_after:
            self.domain.running = False

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def close(self) -> None:
        self.closed = True


class FakeConn:
    def __init__(self, domain: FakeDomain | None, refuse: str = ""):
        self.domain, self.refuse = domain, refuse
        self.xml: list[str] = []

    def createXML(self, xml: str, flags: int) -> FakeDomain:
        self.xml.append(xml)
        if self.refuse:
            raise FakeError(self.refuse)
        assert self.domain is not None
        return self.domain


@pytest.fixture
def fake_libvirt(monkeypatch):
    module = SimpleNamespace(libvirtError=FakeError, VIR_DOMAIN_START_PAUSED=1)
    monkeypatch.setattr(libvirt_accel, "libvirt_module", lambda: module)
    monkeypatch.setattr(
        libvirt_accel, "image_volumes", lambda conn, image, progress: ("/pool/k-vmlinuz", "/pool/k-initrd")
    )
    return module


def run_probe(conn: FakeConn, **kwargs: Any) -> tuple[bool, str]:
    consoles: list[FakeConsole] = []

    def open_console(uri: str, name: str, log: Path) -> FakeConsole:
        assert conn.domain is not None
        consoles.append(FakeConsole(conn.domain, log))
        return consoles[-1]

    result = probe_on(conn, REMOTE, FakeImage(), lambda _: None, open_console=open_console, **kwargs)  # type: ignore[arg-type]
    assert all(console.closed for console in consoles)
    return result


def test_the_probe_domain_is_a_kvm_domain_of_the_image_with_the_probe_command_line_and_no_ports():
    plan = probe_plan(FakeImage(), "/pool/k-vmlinuz", "/pool/k-initrd", "niclab-probe-1234", {"run": "kvm probe"})  # type: ignore[arg-type]
    root = ET.fromstring(domain_xml(plan))
    assert root.get("type") == "kvm" and root.findtext("name") == "niclab-probe-1234"
    assert root.findtext("os/kernel") == "/pool/k-vmlinuz" and root.findtext("os/initrd") == "/pool/k-initrd"
    assert root.findtext("os/cmdline") == (
        f"console=ttyS0 quiet loglevel=6 panic=-1 rdinit=/usr/bin/busybox -- echo {PROBE_WORD}"
    )
    assert root.findall("devices/interface") == [] and root.findall("devices/hostdev") == []
    assert root.find("devices/serial[@type='pty']") is not None  # the console the probe reads
    assert root.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    assert root.findtext("on_reboot") == "destroy"  # its init exits, the kernel reboots: the domain ends


def test_the_host_cache_key_is_a_safe_file_name_per_uri_and_image():
    image, other = FakeImage(), FakeImage(id="micro-fedcba9876543210")  # type: ignore[call-arg]
    path = host_cache_file(REMOTE, image)  # type: ignore[arg-type]
    assert path.parent.name == "accel" and path.name.startswith("host-") and path.suffix == ".json"
    assert "/" not in path.name and ":" not in path.name and "@" not in path.name
    assert host_cache_file(REMOTE, image) == path  # type: ignore[arg-type]
    assert host_cache_file("qemu+ssh://root@l1a/system", image) != path  # type: ignore[arg-type]
    assert host_cache_file(REMOTE, other) != path  # type: ignore[arg-type]


def test_the_probe_word_on_the_console_means_kvm_works(fake_libvirt):
    domain = FakeDomain([b"[    0.1] Linux version\n", f"{PROBE_WORD}\n".encode()])
    worked, what = run_probe(FakeConn(domain))
    assert worked and what.startswith("the image's kernel reached userspace under kvm there in ")
    assert domain.resumed and domain.destroyed


def test_libvirt_refusing_a_kvm_domain_means_tcg_with_its_reason(fake_libvirt):
    conn = FakeConn(None, refuse="unsupported configuration: Domain requires KVM, but it is not available")
    worked, what = run_probe(conn)
    assert not worked
    assert what == (
        "libvirt would not start a kvm domain: unsupported configuration: Domain requires KVM, but it is not available"
    )
    assert ET.fromstring(conn.xml[0]).get("type") == "kvm"


def test_a_domain_that_ends_before_the_word_means_tcg(fake_libvirt):
    domain = FakeDomain([b"KVM: entry failed, hardware error 0x80000021\n"])
    worked, what = run_probe(FakeConn(domain))
    assert not worked
    assert what == (
        "the kvm domain ended before the guest's userspace ran "
        "(its console's last line: KVM: entry failed, hardware error 0x80000021)"
    )


def test_a_silent_console_means_tcg_after_the_timeout(fake_libvirt):
    domain = FakeDomain([], ends_after=False)
    worked, what = run_probe(FakeConn(domain), timeout=0.3)
    assert not worked and "under kvm there: nothing new on its console for 0.3 s" in what
    assert domain.destroyed


def test_a_remote_host_is_probed_there_once_then_its_cached_verdict_is_used(monkeypatch):
    calls: list[str] = []

    def fake_probe(conn, uri, image, progress, open_console=None):
        calls.append(uri)
        return False, "the kvm domain ended"

    monkeypatch.setattr(libvirt_accel, "probe_on", fake_probe)
    monkeypatch.setattr(libvirt_accel, "choose_accel", lambda *a, **k: pytest.fail("the local probe ran"))
    image = FakeImage()
    first = host_accel(object(), REMOTE, image, lambda _: None)  # type: ignore[arg-type]
    second = host_accel(object(), REMOTE, image, lambda _: None)  # type: ignore[arg-type]
    assert (first.accel, first.reason) == ("tcg", "the kvm domain ended") and second == first
    assert calls == [REMOTE]
    assert cached_host_choice(REMOTE, image) == first  # type: ignore[arg-type]
    host_accel(object(), REMOTE, image, lambda _: None, refresh=True)  # type: ignore[arg-type]
    assert calls == [REMOTE, REMOTE]


def test_a_local_uri_keeps_this_machines_probe(monkeypatch):
    local = AccelChoice("kvm", "probed here", "now")
    monkeypatch.setattr(libvirt_accel, "choose_accel", lambda image, refresh, progress: local)
    monkeypatch.setattr(libvirt_accel, "probe_on", lambda *a, **k: pytest.fail("probed through libvirt"))
    assert host_accel(object(), "qemu:///system", FakeImage(), lambda _: None) is local  # type: ignore[arg-type]


def test_niclab_accel_forces_every_host(monkeypatch):
    monkeypatch.setenv("NICLAB_ACCEL", "kvm")
    monkeypatch.setattr(libvirt_accel, "probe_on", lambda *a, **k: pytest.fail("probed"))
    choice = host_accel(object(), REMOTE, FakeImage(), lambda _: None)  # type: ignore[arg-type]
    assert (choice.accel, choice.forced) == ("kvm", True)


# -- the backend: per-host domain types and fallback ----------------------------------------------------------


class HostBoots:
    """A boot whose nodes on some hosts do not come up under KVM."""

    def __init__(self, hosts: dict[str, str], failing: set[str]):
        self.hosts, self.failing = hosts, failing  # node -> host; hosts whose KVM guests hang
        self.asked: list[dict[str, str]] = []
        self.undone = 0

    def __call__(self, accels: dict[str, str]) -> str:
        self.asked.append(dict(accels))
        hung = tuple(n for n, h in self.hosts.items() if h in self.failing and accels[h] == "kvm")
        if hung:
            raise BootError("guest(s) did not come up\nthe serial log", f"{hung[0]}: the agent did not answer", hung)
        return "booted"

    def undo(self) -> None:
        self.undone += 1


def test_only_the_host_whose_kvm_guests_hung_falls_back_to_tcg():
    boots = HostBoots({"a": "qemu+ssh://l1a/system", "b": REMOTE}, failing={REMOTE})
    marked: list[tuple[str, str]] = []
    said: list[str] = []
    booted, accels, warning = boot_falling_back_hosts(
        {"qemu+ssh://l1a/system": "kvm", REMOTE: "kvm"},
        boots,
        boots.undo,
        boots.hosts.__getitem__,
        FakeImage(),  # type: ignore[arg-type]
        said.append,
        "destroyed the domains and started them",
        mark=lambda host, image, why: marked.append((host, why)),
    )
    assert booted == "booted" and boots.undone == 1
    assert accels == {"qemu+ssh://l1a/system": "kvm", REMOTE: "tcg"}
    assert marked == [(REMOTE, "b: the agent did not answer")]
    assert warning is not None and warning.startswith(f"KVM did not work on {REMOTE} (b: the agent did not answer)")


def test_a_failure_on_a_tcg_host_is_the_error_and_kvm_hosts_are_not_marked():
    boots = HostBoots({"a": "qemu+ssh://l1a/system", "b": REMOTE}, failing=set())

    def boot(accels: dict[str, str]) -> str:
        boots.asked.append(accels)
        raise BootError("guest(s) did not come up", "b: the agent did not answer", ("b",))

    with pytest.raises(BootError):
        boot_falling_back_hosts(
            {"qemu+ssh://l1a/system": "kvm", REMOTE: "tcg"},
            boot,
            boots.undo,
            boots.hosts.__getitem__,
            FakeImage(),  # type: ignore[arg-type]
            lambda _: None,
            "undone",
            mark=lambda *a: pytest.fail("marked"),
        )
    assert len(boots.asked) == 1 and boots.undone == 0


def test_a_host_that_went_away_during_the_boot_is_not_marked_and_not_booted_again():
    """Its guests hung because the host is gone (its connection closed), not because its KVM failed."""
    boots = HostBoots({"a": "qemu+ssh://l1a/system", "b": REMOTE}, failing={REMOTE})
    with pytest.raises(BootError):
        boot_falling_back_hosts(
            {"qemu+ssh://l1a/system": "kvm", REMOTE: "kvm"},
            boots,
            boots.undo,
            boots.hosts.__getitem__,
            FakeImage(),  # type: ignore[arg-type]
            lambda _: None,
            "undone",
            mark=lambda *a: pytest.fail("marked"),
            answers=lambda host: host != REMOTE,
        )
    assert len(boots.asked) == 1 and boots.undone == 0


def test_a_cached_kvm_host_marked_by_a_run_is_tcg_for_the_next(monkeypatch):
    from niclab.plumbing.backends.boot import mark_kvm_unusable_host

    image = FakeImage()
    mark_kvm_unusable_host(REMOTE, image, "b: the agent did not answer")  # type: ignore[arg-type]
    choice = cached_host_choice(REMOTE, image)  # type: ignore[arg-type]
    assert choice is not None and choice.accel == "tcg" and "b: the agent did not answer" in choice.reason
    local: list[str] = []
    monkeypatch.setattr("niclab.plumbing.backends.boot.mark_kvm_unusable", lambda image, why: local.append(why))
    mark_kvm_unusable_host("qemu:///system", image, "a: hung")  # type: ignore[arg-type]
    assert local == ["a: hung"]  # a local URI's verdict is this machine's


def test_the_rig_facts_keep_one_accel_when_the_hosts_agree_and_each_nodes_when_they_differ():
    choices = {
        "qemu+ssh://l1a/system": AccelChoice("kvm", "reached userspace in 2.0 s", "now"),
        REMOTE: AccelChoice("tcg", "libvirt would not start a kvm domain", "now"),
    }
    nodes = {"a": "qemu+ssh://l1a/system", "b": REMOTE}
    agree = backend.accel_facts(nodes, {"qemu+ssh://l1a/system": "kvm", REMOTE: "kvm"}, choices)
    assert agree["accel"] == "kvm" and "accel_nodes" not in agree
    differ = backend.accel_facts(nodes, {"qemu+ssh://l1a/system": "kvm", REMOTE: "tcg"}, choices)
    assert differ["accel"] == "mixed" and differ["accel_nodes"] == {"a": "kvm", "b": "tcg"}
    assert differ["accel_reason"] == (
        f"qemu+ssh://l1a/system: reached userspace in 2.0 s; {REMOTE}: libvirt would not start a kvm domain"
    )
    one = backend.accel_facts(
        {"a": "qemu:///system", "b": "qemu:///system"},
        {"qemu:///system": "tcg"},
        {"qemu:///system": AccelChoice("kvm", "probed", "now")},
    )
    assert (one["accel"], one["accel_reason"]) == ("tcg", "KVM fell back, see the warning")


# -- what the doctor and `niclab accel --lab` say ---------------------------------------------------------------


def _report(dev_kvm: bool):
    from niclab.plumbing.lab.doctor import Check, HostReport

    return HostReport([Check("kvm", "ok" if dev_kvm else "warn", "/dev/kvm" if dev_kvm else "no /dev/kvm")], "h")


def test_the_doctors_kvm_line_says_the_probes_verdict():
    from niclab.plumbing.lab.doctor import kvm_verdict

    works = _report(True)
    kvm_verdict(works, "kvm", "reached userspace in 2.0 s", "2026-11-26T01:30:21Z")
    assert (works.checks[0].status, works.checks[0].detail) == (
        "ok",
        "/dev/kvm; the probe boots the image under KVM (probed 2026-11-26T01:30:21Z)",
    )
    hangs = _report(True)
    kvm_verdict(hangs, "tcg", "nothing new on its console for 20 s", "2026-11-26T01:30:21Z")
    assert hangs.checks[0].status == "warn" and hangs.checks[0].detail == (
        "/dev/kvm, but guests there run under TCG, slowly: nothing new on its console for 20 s "
        "(probed 2026-11-26T01:30:21Z)"
    )
    assert "lab doctor --probe" in hangs.checks[0].fix
    missing = _report(False)
    kvm_verdict(missing, "tcg", "whatever", "now")
    assert missing.checks[0].detail == "no /dev/kvm"  # the warning without /dev/kvm stays as it was


def test_a_host_whose_libvirt_does_not_answer_has_no_verdict_and_the_others_are_probed(monkeypatch):
    from niclab.base.errors import NiclabError

    def open_uri(uri: str) -> object:
        if "l1b" in uri:
            raise NiclabError(f"cannot reach libvirt at {uri}: Cannot recv data")
        return SimpleNamespace(close=lambda: None)

    monkeypatch.setattr(libvirt_accel, "open_uri", open_uri)
    monkeypatch.setattr(libvirt_accel, "probe_on", lambda conn, uri, image, progress, open_console: (True, "up"))
    verdicts = libvirt_accel.hosts_accel(
        {"l1a": "qemu+ssh://root@l1a/system", "l1b": REMOTE},
        FakeImage(),  # type: ignore[arg-type]
        lambda _: None,
    )
    assert isinstance(verdicts["l1a"], AccelChoice) and verdicts["l1a"].accel == "kvm"
    assert verdicts["l1b"] == f"cannot reach libvirt at {REMOTE}: Cannot recv data"
