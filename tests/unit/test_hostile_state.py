"""Hostile contents of the state directory, and hostile devices, as root: each is refused in one line, left
alone, and never followed; nothing is written outside the state directory and sysfs.

Every case runs on a fake sysfs tree (tests/unit/fakesysfs.py) whose KernelSim records each sysfs write.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from niclab.base.errors import NiclabError
from niclab.base.filelock import locked as file_locked
from niclab.model.lab.inventory import InventoryError, parse_inventory
from niclab.model.lab.match import Placement
from niclab.model.lab.pciclass import AllowedClass
from niclab.plumbing.lab import passthrough, statedir
from niclab.plumbing.lab.lease import holder, lease
from niclab.plumbing.lab.passthrough import hold_cards
from niclab.plumbing.lab.statedir import StateDir
from niclab.plumbing.lab.vfio import Journal, bind_to_vfio, passed_through, restore_all
from niclab.ui.cli.main import main
from tests.helpers import quiet_net
from tests.unit.fakesysfs import FakeSysfs, KernelSim

CARD = "0000:03:00.0"
SATA = "0000:00:17.0"
NVME = "0000:01:00.0"
ACCEL = "0000:05:00.0"
DISPLAY = "0000:00:02.0"
NOBODY = 65534
NO_SLEEP: dict[str, Any] = {"sleep": lambda seconds: None}
LEFT_ALONE = "left alone: check the card and delete the entry by hand"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the state directory's checks are root's (chown, uid 65534)")


@pytest.fixture
def fake(tmp_path):
    """A host with an e1000 card, a SATA controller (ahci) and an NVMe disk (nvme), each alone in its group."""
    fake = FakeSysfs(tmp_path / "root")
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    fake.add_device(CARD, group=7, netdevs=["enp3s0"])
    fake.add_device(SATA, vendor=0x8086, device=0x7AE2, cls=0x010601, driver="ahci", group=3)
    fake.add_device(NVME, cls=0x010802, driver="nvme", group=9)  # the e1000's IDs: only its class tells
    return fake


@pytest.fixture
def state_path(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def state(state_path):
    with StateDir(state_path) as state:
        yield state


def entry(pci: str, driver: str | None = "e1000", **fields: Any) -> dict[str, Any]:
    return {"pci": pci, "driver": driver, "driver_override": None, "run": "planted", "time": 0.0, **fields}


def plant(state_path: Path, name: str, content: dict | str | bytes) -> Path:
    """A file in the journal (vfio/) as another process would leave it."""
    (state_path / "vfio").mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_path / "vfio" / name
    data = json.dumps(content) if isinstance(content, dict) else content
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)  # type: ignore[operator]
    return path


def touches(writes: list[tuple[str, str]], pci: str) -> list[tuple[str, str]]:
    return [(path, text) for path, text in writes if pci in path or text.strip() == pci]


def snapshot(root: Path) -> dict[str, tuple]:
    """Each path under root: its mode, mtime and content (a link's target), to compare before and after."""
    found: dict[str, tuple] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            content: object = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        else:
            content = None
        found[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, content)
    return found


@pytest.fixture
def outside(tmp_path):
    """A watched tree outside the state directory: a victim file and a directory."""
    root = tmp_path / "outside"
    root.mkdir()
    (root / "victim").write_text("the host's file\n")
    (root / "dir").mkdir()
    return root


# -- journal entries root must not act on ------------------------------------------------------------------------


@pytest.mark.parametrize("allow_class", [None, "0x01", "0x010601"])  # an entry may claim what it likes
def test_a_planted_entry_naming_a_sata_controller_is_left_alone(fake, state, state_path, allow_class):
    plant(state_path, f"{SATA}.json", entry(SATA, driver=None, allow_class=allow_class))  # "unbind the host's disk"
    sim = fake.sim()
    bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)  # a real run's card, left by a crash
    results = {r.pci: r for r in restore_all(sim, Journal(state), **NO_SLEEP)}
    assert results[CARD].ok and sim.driver(CARD) == "e1000"  # the other entries are still restored
    sata = results[SATA]
    assert not sata.ok and sata.error == (  # no allow_class makes a disk's controller passable (pciclass.NEVER)
        f"journal entry {state_path}/vfio/{SATA}.json: device {SATA} is a mass storage controller: SATA (AHCI) "
        f"(class 0x010601), not a network controller; {LEFT_ALONE}"
    )
    assert touches(sim.writes, SATA) == [] and sim.driver(SATA) == "ahci"
    assert (state_path / "vfio" / f"{SATA}.json").exists()  # the entry stays, for a person to look at


def test_an_entry_without_allow_class_for_a_non_network_device_is_refused_even_on_vfio(fake, state, state_path):
    fake.add_device(ACCEL, cls=0x120000, driver="vfio-pci", native="qat", group=11)
    plant(state_path, f"{ACCEL}.json", entry(ACCEL, driver="qat"))
    sim = fake.sim()
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert not result.ok and f"device {ACCEL} is a processing accelerator (class 0x120000)" in (result.error or "")
    assert result.error.endswith(LEFT_ALONE) and sim.writes == []


def test_an_entry_for_the_hosts_own_nic_on_its_driver_is_left_alone(fake, state, state_path):
    """A network card on its driver (not where niclab's binding leaves one): no entry makes root unbind it."""
    plant(state_path, f"{CARD}.json", entry(CARD, driver=None))
    sim = fake.sim()
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert not result.ok and "is on e1000 with driver_override (null), not on vfio-pci" in (result.error or "")
    assert sim.writes == [] and sim.netdevs(CARD) == ["enp3s0"]


def test_a_traversal_pci_is_left_alone_and_nothing_outside_is_written(tmp_path, fake):
    """The pci of an entry once became both a journal path and a sysfs path: ../ reached out of both."""
    state_path = tmp_path / "a" / "b" / "state"
    pci = "../../../../outside"  # from sys/bus/pci/devices: the fake root's outside/; from vfio/: tmp_path
    (fake.root / "outside").mkdir()
    (fake.root / "outside" / "driver_override").write_text("(null)\n")
    plant(state_path, f"{CARD}.json", entry(pci, driver=None, driver_override="x"))
    (tmp_path / "outside.json").write_text(json.dumps(entry(pci, driver=None, driver_override="x")))
    before = snapshot(fake.root / "outside"), (tmp_path / "outside.json").read_text()
    sim = fake.sim()
    with StateDir(state_path) as state:
        [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert result.pci == CARD and not result.ok
    assert result.error == (
        f"journal entry {state_path}/vfio/{CARD}.json: pci: ../../../../outside is not a PCI address "
        f"as sysfs names it (0000:03:00.0); {LEFT_ALONE}"
    )
    assert sim.writes == [] and (snapshot(fake.root / "outside"), (tmp_path / "outside.json").read_text()) == before


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("0000:3:00.0.json", entry("0000:3:00.0")),  # not canonical
        ("0000:03:00.0.JSON.json", entry(CARD)),
        ("0000:03:00.0\n.json", entry(CARD)),  # a newline in a file name
        ("0000:04:00.0.json", entry(CARD)),  # another card's entry under this name
        ("0000:03:00.0 .json", entry(CARD)),
    ],
)
def test_an_entry_whose_file_name_is_not_its_canonical_pci_is_left_alone(fake, state, state_path, name, content):
    fake.add_device("0000:04:00.0", driver="vfio-pci", native="e1000", group=8)
    sim = fake.sim()
    bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    Journal(state).drop(CARD)  # the card stays on vfio-pci: a planted entry must not be what moves it
    plant(state_path, name, content)
    sim.writes.clear()
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert not result.ok and result.error.endswith(LEFT_ALONE) and "\n" not in result.error + result.pci
    assert sim.writes == [] and sim.driver(CARD) == "vfio-pci"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "Invalid JSON"),
        (b"[]", "Input should be an object"),
        (json.dumps(entry(CARD, driver="e1000\n")).encode(), "driver: 'e1000\\n' is not a driver's name"),
        (json.dumps(entry(CARD, driver="../../../x")).encode(), "is not a driver's name"),
        (json.dumps(entry(CARD, time=float("inf"))).encode(), "time: Input should be a finite number"),
        (json.dumps(entry(CARD, run="x\x1b[2J")).encode(), "unprintable"),
        (json.dumps({**entry(CARD), "extra": 1}).encode(), "extra: Extra inputs are not permitted"),
        (json.dumps(entry(CARD, allow_class="0x1")).encode(), "is not a PCI class"),
        (b"[" * 100_000, "larger than 64 KiB"),
    ],
)
def test_a_damaged_entry_is_reported_and_never_acted_on(fake, state, state_path, content, why):
    sim = fake.sim()
    bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    plant(state_path, f"{CARD}.json", content)
    sim.writes.clear()
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert not result.ok and why in (result.error or "") and result.error.endswith(LEFT_ALONE)
    assert sim.writes == [] and sim.driver(CARD) == "vfio-pci"
    with pytest.raises(NiclabError, match=LEFT_ALONE):  # nor does a new run bind the card over it
        bind_to_vfio(sim, Journal(state), CARD, "run-2", **NO_SLEEP)
    assert sim.writes == []


@pytest.mark.parametrize("kind", ["fifo", "nobody's", "hard link"])
def test_an_entry_that_is_no_regular_file_of_roots_is_left_alone(fake, state, state_path, outside, kind):
    sim = fake.sim()
    bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    path = state_path / "vfio" / f"{CARD}.json"
    if kind == "fifo":
        path.unlink()
        os.mkfifo(path)
        why = "is a FIFO, not a regular file"
    elif kind == "nobody's":
        os.chown(path, NOBODY, NOBODY)
        why = f"is owned by uid {NOBODY}"
    else:
        path.unlink()
        (outside / "entry").write_text(json.dumps(entry(CARD)))
        os.link(outside / "entry", path)
        why = "has 2 hard links"
    sim.writes.clear()
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)  # a FIFO would hang an open without O_NONBLOCK
    assert not result.ok and why in (result.error or "") and sim.writes == []


def test_lab_restore_prints_one_line_per_problem_and_exits_1(fake, state_path, capsys):
    plant(state_path, f"{SATA}.json", entry(SATA, driver=None))
    plant(state_path, f"{CARD}.json", b"\x00garbage{")
    plant(state_path, "0000:04:00.0\n.json", entry(CARD))
    code = main(["lab", "restore", "--state", str(state_path), "--sysfs-root", str(fake.root)])
    out, err = capsys.readouterr()
    assert code == 1 and err == "", err
    lines = out.splitlines()
    assert len(lines) == 3 and all(line.endswith(LEFT_ALONE) and "NOT restored" in line for line in lines), out
    assert lines[2].startswith("'0000:04:00.0\\n.json': NOT restored: journal entry ")  # quoted, one line
    assert fake.sysfs().driver(SATA) == "ahci"


# -- symbolic links in the state directory ---------------------------------------------------------------------


def test_a_temp_name_planted_as_a_symlink_is_not_followed(fake, state, state_path, outside, monkeypatch):
    """The names once used (the pid), and the very name the next write takes (its random part made known):
    O_CREAT|O_EXCL|O_NOFOLLOW refuses to open either, and nothing outside changes."""
    monkeypatch.setattr(statedir.secrets, "token_hex", lambda n: "0" * (2 * n))
    before = snapshot(outside)
    planted = (f".{CARD}.{os.getpid()}.tmp", f".{CARD}.json.{os.getpid()}.tmp", f".{CARD}.json.{'0' * 16}.tmp")
    (state_path / "vfio").mkdir(mode=0o700, exist_ok=True)
    for name in planted:
        (state_path / "vfio" / name).symlink_to(outside / "victim")
    sim = fake.sim()
    with pytest.raises(FileExistsError):
        bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    assert sim.writes == [] and snapshot(outside) == before  # not journaled: nothing moved, nothing written
    (state_path / "vfio" / planted[-1]).unlink()
    bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    assert sim.driver(CARD) == "vfio-pci" and Journal(state).get(CARD) is not None
    assert snapshot(outside) == before


def test_a_journal_entry_that_is_a_symlink_is_neither_followed_nor_bound_over(fake, state, state_path, outside):
    (outside / "victim").write_text(json.dumps(entry(CARD)))
    before = snapshot(outside)
    (state_path / "vfio").mkdir(mode=0o700)
    (state_path / "vfio" / f"{CARD}.json").symlink_to(outside / "victim")
    sim = fake.sim()
    with pytest.raises(NiclabError) as caught:
        bind_to_vfio(sim, Journal(state), CARD, "run-1", **NO_SLEEP)
    assert str(caught.value) == (
        f"journal entry {state_path}/vfio/{CARD}.json: is a symbolic link to {outside}/victim: niclab follows none "
        f"in its state directory; {LEFT_ALONE}"
    )
    [result] = restore_all(sim, Journal(state), **NO_SLEEP)
    assert result.error == str(caught.value)
    assert sim.writes == [] and snapshot(outside) == before


@pytest.mark.parametrize("sub", ["vfio", "leases"])
def test_a_subdirectory_that_is_a_symlink_is_refused(fake, state, state_path, outside, sub):
    (state_path / sub).symlink_to(outside / "dir")
    before = snapshot(outside)
    with pytest.raises(NiclabError) as caught:
        if sub == "vfio":
            bind_to_vfio(fake.sim(), Journal(state), CARD, "run-1", **NO_SLEEP)
        else:
            with lease(state, CARD, "run-1"):
                pass
    assert str(caught.value) == (
        f"directory {state_path}/{sub} is a symbolic link to {outside}/dir: niclab follows none in its state "
        f"directory; fix: remove it (rm {state_path}/{sub})"
    )
    assert snapshot(outside) == before and fake.sim().driver(CARD) == "e1000"


def test_a_lock_file_that_is_a_symlink_is_refused_and_not_created(state, state_path, outside):
    (state_path / "leases").mkdir(mode=0o700)
    (state_path / "leases" / f"{CARD}.lock").symlink_to(outside / "created-by-root")
    before = snapshot(outside)
    with pytest.raises(NiclabError) as caught, lease(state, CARD, "run-1"):
        pass
    assert str(caught.value) == (
        f"{state_path}/leases/{CARD}.lock is a symbolic link to {outside}/created-by-root: niclab follows none in "
        f"its state directory; fix: remove it (rm {state_path}/leases/{CARD}.lock)"
    )
    assert snapshot(outside) == before


def test_a_holder_record_that_is_a_symlink_is_replaced_not_followed(state, state_path, outside):
    (state_path / "leases").mkdir(mode=0o700)
    (state_path / "leases" / f"{CARD}.json").symlink_to(outside / "victim")
    (state_path / "leases" / f".{CARD}.json.{os.getpid()}.tmp").symlink_to(outside / "victim")  # the old temp name
    before = snapshot(outside)
    assert holder(state, CARD) is None  # not a record niclab wrote
    with lease(state, CARD, "run-1") as mine:
        assert holder(state, CARD) == mine and not (state_path / "leases" / f"{CARD}.json").is_symlink()
    assert snapshot(outside) == before


@pytest.mark.parametrize("garbage", [b"garbage", b"[]", b'{"pid": "1"}', b"\xff\xfe", b"{" * 70_000])
def test_a_garbage_holder_record_is_no_holder(state, state_path, garbage):
    (state_path / "leases").mkdir(mode=0o700)
    (state_path / "leases" / f"{CARD}.json").write_bytes(garbage)
    assert holder(state, CARD) is None
    with lease(state, CARD, "run-1") as mine:
        assert holder(state, CARD) == mine


@pytest.mark.parametrize("key", ["../../../tmp/x", f"rig1/{CARD}", f"rig1.{CARD}\n", "RIG1.0000:03:00.0", ""])
def test_a_lease_key_that_is_not_host_dot_pci_is_refused(state, state_path, key):
    with pytest.raises(NiclabError, match=r"is not HOST\.PCI"), lease(state, key, "run-1"):
        pass
    assert not (state_path / "leases").exists() or list((state_path / "leases").iterdir()) == []


# -- the state directory itself -------------------------------------------------------------------------------


def test_a_state_directory_of_another_user_is_refused(state_path):
    state_path.mkdir(mode=0o700)
    os.chown(state_path, NOBODY, NOBODY)
    with pytest.raises(NiclabError) as caught, StateDir(state_path):
        pass
    assert str(caught.value) == (
        f"state directory {state_path} is owned by uid {NOBODY} (nobody), not root: root acts on the card journals "
        f"kept there; fix: chown root: {state_path} && chmod 0700 {state_path}"
    )


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_state_directory_others_may_write_is_refused(state_path, mode):
    state_path.mkdir()
    state_path.chmod(mode)
    with pytest.raises(NiclabError) as caught, StateDir(state_path):
        pass
    assert str(caught.value) == (
        f"state directory {state_path} is writable by others than root (mode {mode:04o}): root acts on the card "
        f"journals kept there; fix: chmod 0700 {state_path}"
    )


def test_a_state_directory_that_is_a_symlink_is_refused(tmp_path, state_path):
    (tmp_path / "real").mkdir(mode=0o700)
    state_path.symlink_to(tmp_path / "real")
    with pytest.raises(NiclabError) as caught, StateDir(state_path):
        pass
    assert str(caught.value) == (
        f"state directory {state_path} is a symbolic link to {tmp_path}/real: point NICLAB_STATE at a real directory"
    )


def test_a_state_directory_under_another_users_directory_is_refused(tmp_path):
    (tmp_path / "alice").mkdir(mode=0o755)
    os.chown(tmp_path / "alice", NOBODY, NOBODY)
    with pytest.raises(NiclabError) as caught, StateDir(tmp_path / "alice" / "state"):
        pass
    assert str(caught.value).startswith(
        f"state directory {tmp_path}/alice/state: its parent {tmp_path}/alice is owned by uid {NOBODY} (nobody), "
        "who could swap the directory under root; fix: "
    )
    assert not (tmp_path / "alice" / "state").exists()  # refused before anything is made there


def test_ancestors_writable_by_others_only_if_sticky(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o777)
    with pytest.raises(NiclabError, match=r"its parent .*/shared is writable by others \(mode 0777, not sticky\)"):
        with StateDir(tmp_path / "shared" / "state"):
            pass
    (tmp_path / "shared").chmod(0o1777)  # like /tmp
    with StateDir(tmp_path / "shared" / "state") as state:
        assert state.path == tmp_path / "shared" / "state"


def test_a_missing_state_directory_is_made_0700_and_its_subdirectories_too(tmp_path):
    with StateDir(tmp_path / "cache" / "niclab" / "state") as state:
        Journal(state).dir.names()
        with lease(state, CARD, "run-1"):
            pass
    for path in ("cache/niclab/state", "cache/niclab/state/vfio", "cache/niclab/state/leases"):
        assert stat.S_IMODE((tmp_path / path).stat().st_mode) == 0o700, path
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) & 0o022 == 0


def test_lab_restore_and_leases_refuse_a_bad_state_directory_in_one_line(tmp_path, fake, capsys):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for verb in (["restore", "--sysfs-root", str(fake.root)], ["leases"]):
        assert main(["lab", verb[0], "--state", str(tmp_path / "link"), *verb[1:]]) == 1
        out, err = capsys.readouterr()
        assert out == "" and err == (
            f"niclab: state directory {tmp_path}/link is a symbolic link to {tmp_path}/real: "
            "point --state at a real directory\n"
        )


def test_lab_leases_names_a_bad_lock_file_and_lists_the_rest(state, state_path, outside, capsys):
    with lease(state, f"rig1.{CARD}", "run-1"):
        (state_path / "leases" / "rig1.0000:04:00.0.json").write_text("garbage")
        (state_path / "leases" / "rig2.0000:04:00.0.json").write_text("{}")
        code = main(["lab", "leases", "--state", str(state_path)])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines() == [f"rig1.{CARD}: run run-1 (user root, pid {os.getpid()})"], out


# -- lock files -------------------------------------------------------------------------------------------------


def _as_nobody(action) -> str:
    """Run action() in a child process as uid 65534; what it returned, or the error it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                said = str(action())
            except OSError as exc:
                said = f"{type(exc).__name__}: {exc.strerror}"
            os.write(write, said.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    return said


def test_a_lease_lock_file_is_0600_and_another_user_cannot_lock_it(state, state_path):
    with lease(state, CARD, "run-1"):
        lock = state_path / "leases" / f"{CARD}.lock"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600 and lock.stat().st_uid == 0
    for path in (state_path, state_path / "leases"):
        path.chmod(0o711)  # others may pass through: only the lock file's own mode stops them
    leases_fd = state.sub("leases").fd

    def block_every_run() -> str:
        fd = os.open(f"{CARD}.lock", os.O_RDONLY, dir_fd=leases_fd)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return "locked it"

    assert _as_nobody(block_every_run) == "PermissionError: Permission denied"


def test_an_old_0644_lock_file_of_roots_is_made_0600(state, state_path):
    (state_path / "leases").mkdir(mode=0o700)
    lock = state_path / "leases" / f"{CARD}.lock"
    lock.touch(mode=0o644)
    lock.chmod(0o644)
    with lease(state, CARD, "run-1"):
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_a_lock_file_of_another_user_is_refused(state, state_path):
    (state_path / "leases").mkdir(mode=0o700)
    lock = state_path / "leases" / f"{CARD}.lock"
    lock.touch(mode=0o600)
    os.chown(lock, NOBODY, NOBODY)
    with pytest.raises(NiclabError, match=rf"leases/{CARD}\.lock is owned by uid {NOBODY} \(nobody\), not root"):
        with lease(state, CARD, "run-1"):
            pass


def test_cache_lock_files_are_0600_and_never_follow_a_symlink(tmp_path, outside):
    with file_locked(tmp_path / "store" / ".lock"):
        assert stat.S_IMODE((tmp_path / "store" / ".lock").stat().st_mode) == 0o600
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".lock").symlink_to(outside / "created-by-root")
    before = snapshot(outside)
    with pytest.raises(NiclabError, match=r"\.lock is a symbolic link, never followed; fix: remove it"):
        with file_locked(tmp_path / "other" / ".lock"):
            pass
    assert snapshot(outside) == before


# -- what root binds --------------------------------------------------------------------------------------------


LAB = """\
name: hostile
hosts: {{rig1: {{libvirt: "qemu:///system"}}}}
models:
  accel: {{driver: qat, pci_id: "8086:100e"{allow}}}
cards:
  - {{id: card0, host: rig1, pci: "{pci}", model: {cls}}}
"""


def _hold(fake, tmp_path, monkeypatch, pci: str, cls: str = "e1000", allow: str = "", force: bool = False):
    lab = parse_inventory(LAB.format(pci=pci, cls=cls, allow=allow), "lab.yaml")
    placement = Placement(cards={("a", 0, 0): lab.card("card0")}, cables={}, hosts={"a": "rig1"})
    monkeypatch.setattr(passthrough, "HostNet", quiet_net)
    sim = fake.sim()
    return sim, hold_cards(lab, placement, "run-1", lambda line: None, force=force, sysfs=sim, state=tmp_path / "st")


@pytest.mark.parametrize("force", [False, True])
def test_an_nvme_disk_given_as_a_card_is_refused_before_any_sysfs_write(fake, tmp_path, monkeypatch, force):
    sim, holding = _hold(fake, tmp_path, monkeypatch, NVME, force=force)
    with pytest.raises(NiclabError, match=r"mass storage controller: NVMe \(class 0x010802\)"), holding:
        pytest.fail("the block must not run")
    assert sim.writes == [] and sim.driver(NVME) == "nvme"
    vfio = tmp_path / "st" / "vfio"
    assert not vfio.exists() or list(vfio.iterdir()) == []  # nor journaled (the doctor's check refuses first)


def test_an_accelerator_its_class_allows_binds_and_restores(fake, tmp_path, monkeypatch):
    fake.add_device(ACCEL, cls=0x120000, driver="qat", group=11)
    sim, holding = _hold(fake, tmp_path, monkeypatch, ACCEL, cls="accel", allow=', allow_class: "0x12"')
    with holding:
        assert sim.driver(ACCEL) == "vfio-pci"
        recorded = json.loads((tmp_path / "st" / "vfio" / f"{ACCEL}.json").read_text())
        assert recorded["allow_class"] == "0x12" and recorded["driver"] == "qat"
    assert sim.driver(ACCEL) == "qat" and sim.driver_override(ACCEL) is None
    sim, holding = _hold(fake, tmp_path, monkeypatch, ACCEL)  # without allow_class: refused
    with pytest.raises(NiclabError, match=r"processing accelerator \(class 0x120000\), not a network controller"):
        with holding:
            pass
    assert sim.writes == []


def test_a_crashed_runs_allowed_accelerator_is_restored(fake, state):
    fake.add_device(ACCEL, cls=0x120000, driver="qat", group=11)
    sim = fake.sim()
    bind_to_vfio(sim, Journal(state), ACCEL, "crashed", allowed=AllowedClass.parse("0x1200"), **NO_SLEEP)
    assert [(r.pci, r.driver, r.ok) for r in restore_all(KernelSim(fake.root), Journal(state), **NO_SLEEP)] == [
        (ACCEL, "qat", True)
    ]


def test_passed_through_refuses_the_sata_controller_before_journaling(fake, state, state_path):
    sim = fake.sim()
    with pytest.raises(NiclabError) as caught, passed_through(sim, Journal(state), {SATA: None}, "run-1"):
        pytest.fail("the block must not run")
    assert str(caught.value) == (
        f"card {SATA} is a mass storage controller: SATA (AHCI) (class 0x010601), not a network controller: only "
        "network cards are passed through (a network card that reports another class, such as a SmartNIC "
        "function, needs allow_class: on its inventory model)"
    )
    assert sim.writes == [] and list((state_path / "vfio").iterdir()) == []


@pytest.mark.parametrize("allow", ["0x03", "0x030000"])
def test_no_allowance_binds_the_hosts_display(fake, state, allow):
    """An inventory may not allow what the host runs on (it refuses allow_class 0x03), nor may the binding."""
    fake.add_device(DISPLAY, cls=0x030000, driver="i915", group=12)
    sim = fake.sim()
    with pytest.raises(NiclabError, match=r"is a display controller: VGA \(class 0x030000\), not a network controller"):
        bind_to_vfio(sim, Journal(state), DISPLAY, "run-1", allowed=AllowedClass.parse(allow), **NO_SLEEP)
    assert sim.writes == [] and sim.driver(DISPLAY) == "i915"
    with pytest.raises(InventoryError, match=r"allow_class 0x03\S* would let niclab pass a display controller through"):
        parse_inventory(LAB.format(pci=DISPLAY, cls="accel", allow=f', allow_class: "{allow}"'), "lab.yaml")


def test_an_upgraded_0755_state_directory_is_closed_to_others_before_a_lock_is_taken(tmp_path):
    """niclab once made /var/lib/niclab and leases/ 0755 and lock files 0644: anyone could open one and flock it.
    Opening the state directory now makes it and its subdirectories 0700 (a user's fd opened before that is
    the one thing left: `niclab lab leases` names such a holder)."""
    root = tmp_path / "state"
    (root / "leases").mkdir(parents=True)
    root.chmod(0o755)
    (root / "leases").chmod(0o755)
    (root / "leases" / f"rig1.{CARD}.lock").write_text("")
    (root / "leases" / f"rig1.{CARD}.lock").chmod(0o644)
    with StateDir(root) as state:
        with lease(state, f"rig1.{CARD}", "run-1"):
            modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (root, root / "leases")}
            lock = stat.S_IMODE((root / "leases" / f"rig1.{CARD}.lock").stat().st_mode)
    assert set(modes.values()) == {0o700} and lock == 0o600


def test_a_record_others_may_write_is_refused(state, state_path):
    plant(state_path, f"{CARD}.json", entry(CARD, driver="e1000"))
    (state_path / "vfio" / f"{CARD}.json").chmod(0o666)
    with pytest.raises(NiclabError, match=r"is writable by others than root \(mode 0666\)"):
        Journal(state).get(CARD)
