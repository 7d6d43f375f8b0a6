"""The KVM->TCG fallback both backends share (niclab.plumbing.backends.boot), replayed: nothing boots here.

(tests/integration/test_accel_fallback.py boots the real image under TCG and a hung "KVM".)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.plumbing.accel import AccelChoice
from niclab.plumbing.backends import boot, libvirt, qemu
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.backends.boot import BootError, boot_falling_back
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.plumbing.backends.qemu_cmd import port_macs
from niclab.plumbing.backends.restore import RestoreError
from niclab.plumbing.backends.saved_state import RefusedState, SavedGuestDown
from tests.helpers import FakeImage


class Boots:
    """A boot that fails under the accelerators it is told to, and remembers what it was asked and what it undid."""

    def __init__(self, failing: tuple[str, ...]):
        self.failing, self.undone = failing, 0
        self.asked: list[str] = []
        self.marked: list[str] = []
        self.said: list[str] = []

    def __call__(self, accel: str) -> str:
        self.asked.append(accel)
        if accel in self.failing:
            raise BootError(f"guest(s) did not come up under {accel}\nthe serial log", f"a: hung under {accel}")
        return f"rig under {accel}"

    def undo(self) -> None:
        self.undone += 1

    def mark(self, image: object, why: str) -> None:
        self.marked.append(why)


def fall_back(boots: Boots, accel: str, forced: bool = False) -> tuple[str, str | None]:
    undone = "stopped the guests and booted them"
    return boot_falling_back(accel, boots, boots.undo, FakeImage(), boots.said.append, undone, forced, boots.mark)


def test_a_kvm_boot_that_fails_is_undone_marked_and_booted_again_under_tcg():
    boots = Boots(failing=("kvm",))
    booted, warning = fall_back(boots, "kvm")
    assert booted == "rig under tcg" and boots.asked == ["kvm", "tcg"]
    assert boots.undone == 1 and boots.marked == ["a: hung under kvm"]
    assert warning == (
        "KVM did not work here (a: hung under kvm); stopped the guests and booted them under TCG. "
        "KVM is marked unusable for this host and image; `niclab accel --probe` tests it again"
    )
    assert boots.said == [f"warning: {warning}"]


def test_a_boot_that_works_has_no_warning():
    boots = Boots(failing=())
    assert fall_back(boots, "kvm") == ("rig under kvm", None)
    assert (boots.undone, boots.marked, boots.said) == (0, [], [])


@pytest.mark.parametrize(("accel", "forced"), [("tcg", False), ("kvm", True)])
def test_a_tcg_boot_or_a_forced_kvm_one_that_fails_is_the_error(accel, forced):
    boots = Boots(failing=("kvm", "tcg"))
    with pytest.raises(BootError, match=f"under {accel}"):
        fall_back(boots, accel, forced)
    assert (boots.asked, boots.undone, boots.marked) == ([accel], 0, [])


def test_tcg_failing_after_the_fallback_is_the_error_and_kvm_stays_marked():
    boots = Boots(failing=("kvm", "tcg"))
    with pytest.raises(BootError, match="under tcg"):
        fall_back(boots, "kvm")
    assert boots.asked == ["kvm", "tcg"] and boots.marked == ["a: hung under kvm"]


def test_both_backends_fall_back_through_the_one_function():
    assert qemu.boot_falling_back is boot.boot_falling_back
    assert libvirt.boot_falling_back_hosts is boot.boot_falling_back_hosts  # per host: see below
    assert not hasattr(libvirt, "mark_kvm_unusable") and not hasattr(qemu, "mark_kvm_unusable")


def test_the_qemu_backend_boots_hung_kvm_guests_again_under_tcg(monkeypatch, tmp_path: Path, two_node_topology):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))  # nothing reaches the real accelerator cache
    image = FakeImage()
    marked: list[str] = []
    asked: list[str] = []
    monkeypatch.setattr(qemu, "node_images", lambda nodes, image_, progress: {n.name: image for n in nodes})
    monkeypatch.setattr(qemu, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(qemu, "choose_accel", lambda image_, progress: AccelChoice("kvm", "probed", "now"))
    monkeypatch.setattr(boot, "mark_kvm_unusable", lambda image_, why: marked.append(why))

    def fake_boot(self, plan: qemu.BootPlan, stack, progress) -> Rig:
        asked.append(f"{plan.choice.accel}: {plan.choice.reason}")
        if plan.choice.accel == "kvm":
            (plan.workdir / "a.serial.log").write_text("hung")
            raise BootError("guest(s) did not come up", "a: the guest agent did not answer in time")
        return Rig(topology=plan.topology, nodes={}, macs=port_macs(plan.topology))

    monkeypatch.setattr(QemuBackend, "_boot", fake_boot)
    said: list[str] = []
    with QemuBackend(image=image, cold_boot=True).realize(two_node_topology, tmp_path, said.append) as rig:  # type: ignore[arg-type]
        fallback = rig.facts.accel_fallback or ""
    assert asked == ["kvm: probed", "tcg: KVM fell back, see the warning"]
    assert marked == ["a: the guest agent did not answer in time"]
    assert fallback.startswith("KVM did not work here (a: the guest agent did not answer in time); stopped the guests")
    assert said == [f"warning: {fallback}"]
    assert (tmp_path / "a.serial.kvm.log").read_text() == "hung"  # the KVM attempt's log is kept beside


@pytest.fixture
def two_node_topology():
    from niclab.model.scenario import parse

    text = "name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
    return parse(text, "t.yaml").cells[0].topology


def test_a_guest_that_does_not_boot_to_be_saved_fails_the_cell_and_is_not_booted_cold(
    monkeypatch, tmp_path: Path, two_node_topology
):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(qemu, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(qemu, "choose_accel", lambda image_, progress: AccelChoice("tcg", "probed", "now"))
    booted: list[str] = []
    monkeypatch.setattr(QemuBackend, "_boot", lambda self, plan, stack, progress, states=None: booted.append("cold"))

    def keys(self, plan, progress):
        raise SavedGuestDown("guest(s) did not come up: saved: exited", "saved: exited")

    monkeypatch.setattr(QemuBackend, "_keys", keys)
    with pytest.raises(BootError, match="did not come up"):
        with QemuBackend(image=FakeImage()).realize(two_node_topology, tmp_path, print):  # type: ignore[arg-type]
            pass
    assert booted == []


@pytest.mark.parametrize(
    "failure", [RestoreError("a: QEMU's migration failed: load"), RefusedState("saved state X: not loaded: …")]
)
def test_a_restore_that_fails_boots_the_rig_cold_and_says_why(monkeypatch, tmp_path: Path, two_node_topology, failure):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(qemu, "qemu_binary", lambda: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(qemu, "choose_accel", lambda image_, progress: AccelChoice("tcg", "probed", "now"))

    def restore(self, plan, stack, progress):
        raise failure

    def cold(self, plan, stack, progress, states=None):
        assert states is None
        return Rig(topology=plan.topology, nodes={}, macs=port_macs(plan.topology))

    monkeypatch.setattr(QemuBackend, "_restore", restore)
    monkeypatch.setattr(QemuBackend, "_boot", cold)
    said: list[str] = []
    with QemuBackend(image=FakeImage()).realize(two_node_topology, tmp_path, said.append) as rig:  # type: ignore[arg-type]
        assert rig.facts.cold_boot == str(failure)
    assert said == [f"warning: restoring the guests failed ({failure}); booting them cold"]
