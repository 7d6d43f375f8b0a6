"""Property test of lab mode as root over hostile state directories (Hypothesis, on fake sysfs trees).

Each example builds a host (tests/unit/fakesysfs.py) with PCI devices of various classes (network, mass
storage, display, bridge, accelerator), an inventory listing some of them as cards (some models with an
allow_class), and a state directory with planted contents: journal entries (valid ones, entries for the
wrong class, traversal PCI addresses, bad driver names, garbage), symbolic links to a watched tree outside
(entries, the temp names niclab once used, lease lock and holder files, the vfio/ and leases/ directories),
files of another user, and a random owner and mode of the state directory itself. Then, as root, it runs
hold_cards (an empty block) and restore_all, as a run and `niclab lab restore` would, catching the
NiclabErrors they may raise.

The property: every sysfs write (KernelSim records each) lands under the fake root's sys/ and is to a
network controller, or to a device of the class its inventory model allows; nothing outside the state
directory and sys/ changes (content, mode and mtime of everything else under the example's directory); and
no exception but NiclabError escapes. Derandomized, so CI sees the same examples every time.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from niclab.base.errors import NiclabError
from niclab.model.lab.inventory import Inventory, InventoryError, parse_inventory
from niclab.model.lab.match import Placement
from niclab.model.lab.pciclass import is_network, never_passed
from niclab.plumbing.lab import passthrough
from niclab.plumbing.lab.passthrough import hold_cards
from niclab.plumbing.lab.statedir import StateDir
from niclab.plumbing.lab.vfio import Journal, restore_all
from tests.helpers import quiet_net
from tests.timebox import timebox
from tests.unit.fakesysfs import FakeSysfs, KernelSim

EXAMPLES = 500  # about 30 ms each here
NOBODY = 65534
KINDS = {  # class, native driver
    "ethernet": (0x020000, "e1000"),
    "infiniband": (0x020700, "mlx4_core"),
    "sata": (0x010601, "ahci"),
    "nvme": (0x010802, "nvme"),
    "display": (0x030000, "i915"),
    "bridge": (0x060400, "pcieport"),
    "accelerator": (0x120000, "qat"),
}
ALLOWS = [None, None, "0x12", "0x1200", "0x01", "0x0108", "0x03"]  # the last three: what the host runs on
TRAVERSAL = "../../../../outside"  # from sys/bus/pci/devices: the fake root's outside/
MISSING = "0000:7f:00.0"
PID = os.getpid()  # the temp names niclab once used had it: planted as symlinks

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="binding and chown to another user need root")


@st.composite
def hosts(draw) -> dict[str, Any]:
    count = draw(st.integers(1, 4))
    buses = draw(st.lists(st.integers(1, 0x40), min_size=count, max_size=count, unique=True))
    devices = {}
    for bus in buses:
        kind = draw(st.sampled_from(sorted(KINDS)))
        cls, native = KINDS[kind]
        starts = [native, None, "vfio-pci"] if is_network(cls) else [native, None]  # never on vfio-pci unasked
        devices[f"0000:{bus:02x}:00.0"] = {"cls": cls, "native": native, "driver": draw(st.sampled_from(starts))}
    cards = {
        pci: draw(st.sampled_from(ALLOWS))
        for pci in draw(st.lists(st.sampled_from(sorted(devices)), min_size=1, max_size=3))
    }
    if draw(st.booleans()) and draw(st.booleans()):
        cards[MISSING] = None
    return {"devices": devices, "cards": cards, "force": draw(st.booleans())}


@st.composite
def entries(draw, devices: dict[str, dict[str, Any]]) -> tuple[str, bytes, bool]:
    """A journal file: its name, its content and whether another user owns it. Most are well formed and
    claim what would make root act: the device's own class as allow_class, no driver, vfio-pci."""
    pcis = sorted(devices)
    target = draw(st.sampled_from([*pcis, *pcis, *pcis, MISSING, TRAVERSAL]))
    name = draw(
        st.sampled_from([f"{target}.json"] * 5 + [f"{draw(st.sampled_from(pcis))}.json", "0000:3:00.0.json", "x.json"])
    )
    own_class = (
        [f"0x{devices[target]['cls']:06x}", f"0x{devices[target]['cls'] >> 16:02x}"] if target in devices else []
    )
    fields: dict[str, Any] = {
        "pci": target,
        "driver": draw(st.sampled_from([None, None, "e1000", "ahci", "nvme", "vfio-pci", "qat", "pcieport"])),
        "driver_override": draw(st.sampled_from([None, None, "vfio-pci", "ahci"])),
        "run": "planted",
        "time": 1.0,
        "allow_class": draw(st.sampled_from([*ALLOWS, *own_class, *own_class])),
    }
    damage = draw(st.sampled_from(["none"] * 6 + ["driver", "type", "garbage", "huge", "extra"]))
    if damage == "driver":
        fields[draw(st.sampled_from(["driver", "driver_override"]))] = draw(
            st.sampled_from(["../../../../outside", "e1000\n", "", "a b", "x" * 65])
        )
    elif damage == "type":
        fields[draw(st.sampled_from(sorted(fields)))] = draw(st.sampled_from([1, [], {}, True, "1", None]))
    elif damage == "extra":
        fields["path"] = "/etc/passwd"
    content = json.dumps(fields).encode()
    if damage == "garbage":
        content = draw(st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b"NaN", b'{"pci": 1}']))
    elif damage == "huge":
        content = b" " * (70 * 1024) + content
    return name, content, draw(st.integers(0, 7)) == 0


def _symlink_names(pcis: list[str]) -> list[str]:
    names = ["vfio", "leases"]
    for pci in [*pcis, MISSING]:
        names += [f"vfio/{pci}.json", f"vfio/.{pci}.{PID}.tmp", f"vfio/.{pci}.json.{PID}.tmp"]
        names += [f"leases/rig1.{pci}.lock", f"leases/rig1.{pci}.json", f"leases/.rig1.{pci}.json.{PID}.tmp"]
    return names


@st.composite
def examples(draw) -> dict[str, Any]:
    host = draw(hosts())
    pcis = sorted(host["devices"])
    return {
        **host,
        "entries": draw(st.lists(entries(host["devices"]), max_size=4)),
        "symlinks": draw(
            st.lists(
                st.tuples(st.sampled_from(_symlink_names(pcis)), st.sampled_from(["victim", "dir", "missing"])),
                max_size=3,
            )
        ),
        "state": draw(st.sampled_from(["ok"] * 6 + ["nobody's", "0755", "0770", "0777", "1777", "symlink"])),
        "subdirs": draw(st.sampled_from(["ok"] * 6 + ["nobody's", "0777"])),
    }


# -- one example -----------------------------------------------------------------------------------------------


def build(base: Path, example: dict[str, Any]) -> tuple[FakeSysfs, Path]:
    fake = FakeSysfs(base / "root")
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    for group, (pci, device) in enumerate(sorted(example["devices"].items()), start=10):
        fake.add_driver(device["native"])
        fake.add_device(pci, cls=device["cls"], driver=device["driver"], native=device["native"], group=group)
    (fake.root / "outside").mkdir()
    (fake.root / "outside" / "driver_override").write_text("(null)\n")
    outside = base / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "victim").write_text("a file of the host's\n")
    (outside / "entry.json").write_text(json.dumps({"pci": TRAVERSAL, "driver": None, "driver_override": "x",
                                                    "run": "x", "time": 0.0}))  # fmt: skip
    state = base / "state"
    if example["state"] == "symlink":
        state.symlink_to(outside / "dir")
        return fake, state
    state.mkdir(mode=0o700)
    linked = {name for name, _ in example["symlinks"]}
    for sub in ("vfio", "leases"):
        if sub not in linked:
            (state / sub).mkdir(mode=0o700)
            if example["subdirs"] == "nobody's":
                os.chown(state / sub, NOBODY, NOBODY)
            elif example["subdirs"] == "0777":
                (state / sub).chmod(0o777)
    for name, content, nobodys in example["entries"]:
        if "vfio" not in linked:
            path = state / "vfio" / name
            path.unlink(missing_ok=True)
            path.write_bytes(content)
            if nobodys:
                os.chown(path, NOBODY, NOBODY)
    for name, target in example["symlinks"]:
        path = state / name
        if (name.startswith("vfio/") and "vfio" in linked) or (name.startswith("leases/") and "leases" in linked):
            continue
        if not path.is_symlink():
            path.unlink(missing_ok=True)
            path.symlink_to(outside / target)
    if example["state"] == "nobody's":
        os.chown(state, NOBODY, NOBODY)
    elif example["state"] != "ok":
        state.chmod(int(example["state"], 8))
    return fake, state


def snapshot(base: Path, skip: list[Path]) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for path in [base, *base.rglob("*")]:
        if any(path == s or s in path.parents for s in skip):
            continue
        info = path.lstat()
        content: object = None
        if stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        found[str(path.relative_to(base))] = (info.st_mode, info.st_uid, info.st_mtime_ns, content)
    return found


def lab_yaml(cards: dict[str, str | None]) -> str:
    """The inventory: each card on this host, of model e1000, or of a model whose allow_class is its allow."""
    models = {f"allow{allow}": {"driver": "qat", "pci_id": "8086:100e", "allow_class": allow}
               for allow in cards.values() if allow is not None}  # fmt: skip
    listed = [{"id": f"card{i}", "host": "rig1", "pci": pci, "model": f"allow{allow}" if allow else "e1000"}
              for i, (pci, allow) in enumerate(sorted(cards.items()))]  # fmt: skip
    lab = {"name": "fuzz", "hosts": {"rig1": {"libvirt": "qemu:///system"}}, "models": models, "cards": listed}
    return yaml.safe_dump(lab)


def run_example(base: Path, example: dict[str, Any]) -> tuple[int, int]:
    """Build, run hold_cards and restore_all, check the property; (sysfs writes, NiclabErrors caught)."""
    fake, state = build(base, example)
    sysfs_root = os.path.realpath(fake.root / "sys")
    real_state = [state] if not state.is_symlink() else []
    before = snapshot(base, [*real_state, fake.root / "sys"])
    sim = KernelSim(fake.root, release=fake.release)
    landed: list[str] = []
    sim.before_write = lambda path, text: landed.append(os.path.realpath(path))
    no_sleep = lambda seconds: None  # noqa: E731
    refused = 0

    try:
        lab = parse_inventory(lab_yaml(example["cards"]), "lab.yaml")
    except InventoryError:  # an allow_class of what the host runs on (pciclass.NEVER) is refused here
        lab, refused = Inventory(), refused + 1
    if lab.cards:
        placement = Placement(
            cards={(f"n{i}", 0, 0): card for i, card in enumerate(lab.cards)}, cables={}, hosts={"n0": "rig1"}
        )
        try:
            with hold_cards(
                lab, placement, "run-1", lambda line: None, force=example["force"], sysfs=sim, state=state,
                sleep=no_sleep,
            ):  # fmt: skip
                pass
        except NiclabError:
            refused += 1
    try:
        with StateDir(state) as checked:
            restore_all(sim, Journal(checked), sleep=no_sleep)
    except NiclabError:
        refused += 1

    allowed = {card.pci: lab.allowed_class(card.id) for card in lab.cards}
    for (path, text), real in zip(sim.writes, landed, strict=True):
        assert real.startswith(sysfs_root + os.sep), f"a write landed outside sys/: {path} -> {real}"
        name = Path(path).name
        pci = Path(path).parent.name if name == "driver_override" else text.strip()
        if name == "driver_override":
            assert Path(path).parts[:4] == ("sys", "bus", "pci", "devices"), path
        device = example["devices"].get(pci)
        assert device is not None, f"a write for {pci!r}, no device of the host: {path}"
        allow = allowed.get(pci)
        cls = device["cls"]
        assert is_network(cls) or (allow is not None and allow.matches(cls) and not never_passed(cls)), (
            f"wrote {text.strip()!r} to {path}: device {pci} is of class 0x{cls:06x}, its inventory allows {allow}"
        )
    assert snapshot(base, [*real_state, fake.root / "sys"]) == before
    return len(sim.writes), refused


def test_no_state_directory_contents_make_root_touch_anything_but_network_cards(monkeypatch):
    monkeypatch.setattr(passthrough, "HostNet", quiet_net)
    counts = {"examples": 0, "writes": 0, "refused": 0, "clean": 0}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(examples())
    def fuzz(example: dict[str, Any]) -> None:
        base = Path(tempfile.mkdtemp(prefix="niclab-fuzz-state-"))
        try:
            with timebox(30, "one example"):  # about 50 ms each here
                writes, refused = run_example(base, example)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        counts["examples"] += 1
        counts["writes"] += writes
        counts["refused"] += refused
        counts["clean"] += refused == 0

    started = time.monotonic()
    fuzz()
    print(
        f"\n{counts['examples']} examples in {time.monotonic() - started:.1f} s: {counts['writes']} sysfs writes, "
        f"{counts['refused']} refusals, {counts['clean']} examples without one"
    )
    assert counts["examples"] >= EXAMPLES
    assert counts["writes"] and counts["clean"], "the examples should bind some cards and refuse others"
