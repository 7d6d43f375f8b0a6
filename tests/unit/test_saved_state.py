"""Saved guest states: what their key holds, which states are loaded and which refused, the restored QEMU's
command line, the cards plugged after a restore, and the QMP client that does it."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from niclab.model.topology import NodeSpec, Port
from niclab.plumbing.backends import saved_state
from niclab.plumbing.backends.qemu_cmd import NicPlan, VmPlan, device_add, qemu_argv
from niclab.plumbing.backends.qemu_nics import emulated_model
from niclab.plumbing.backends.qmp import Qmp, QmpError
from niclab.plumbing.backends.restore import arrival_script
from niclab.plumbing.backends.saved_state import (
    META,
    STATE,
    RefusedState,
    StateKey,
    module_words,
    open_state,
)
from niclab.plumbing.image import Image

QEMU = (("version", "QEMU emulator version 7.2.22"), ("binary", "/usr/bin/qemu 1:2"))


@pytest.fixture
def image(tmp_path: Path) -> Image:
    directory = tmp_path / "micro-0123456789abcdef"
    directory.mkdir()
    (directory / "vmlinuz").write_bytes(b"kernel")
    (directory / "initrd.img").write_bytes(b"initrd")
    return Image("micro", "0123456789abcdef", directory, "console=ttyS0 quiet", {"builtin_modules": ["af_packet"]})


def key_of(image: Image, **changes: object) -> StateKey:
    return replace(StateKey(image, 1, 256, "tcg", QEMU), **changes)  # type: ignore[arg-type]


def saved(key: StateKey, content: bytes = b"QEVM state") -> Path:
    """A state as make_state leaves it: the stream, and its record with its SHA-256 and stat."""
    key.directory.mkdir(parents=True)
    (key.directory / STATE).write_bytes(content)
    st = (key.directory / STATE).stat()
    meta = {
        "fields": key.fields(),
        "append": key.append,
        "sha256": hashlib.sha256(content).hexdigest(),
        "bytes": len(content),
        "stat": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns],
        "made_at": "2026-11-29T00:00:00Z",
    }
    (key.directory / META).write_text(json.dumps(meta))
    return key.directory


def test_the_key_changes_with_everything_that_shapes_the_state(image):
    base = key_of(image)
    assert key_of(image).digest == base.digest
    others = [
        key_of(image, cpus=2),
        key_of(image, memory_mib=512),
        key_of(image, accel="kvm"),
        key_of(image, qemu=(("version", "QEMU emulator version 8.2.0"), QEMU[1])),
        key_of(image, words=("nokaslr",)),
        key_of(replace(image, variant="trixie")),
    ]
    assert len({base.digest, *(k.digest for k in others)}) == len(others) + 1
    before = base.digest
    os.utime(image.initrd, ns=(1, 1))  # the image rebuilt in place
    assert key_of(image).digest != before


def test_a_state_lives_in_its_images_directory_and_boots_with_a_neutral_node_name(image):
    key = key_of(image, words=("nokaslr",))
    assert key.directory == image.directory / "states" / key.digest
    assert key.append == "console=ttyS0 quiet nokaslr niclab.node=saved"


def test_module_parameters_move_to_after_the_restore_other_words_stay_in_the_key(image):
    words = ("e1000.InterruptThrottleRate=8000", "ne2k-pci.debug=1", "af_packet.x=1", "printk.time=1", "nokaslr")
    moved, kept = module_words(words, replace(image, manifest={"modules": ["e1000", "ne2k-pci", "8390"]}))
    assert moved == {"e1000": ["InterruptThrottleRate=8000"], "ne2k_pci": ["debug=1"]}
    # not a module of the image (built in, or the kernel's own words): only the command line sets them
    assert kept == ("af_packet.x=1", "printk.time=1", "nokaslr")


def test_a_state_not_made_yet_is_none_and_a_whole_one_is_opened_for_qemu(image):
    key = key_of(image)
    assert open_state(key) is None
    saved(key)
    state = open_state(key)
    assert state is not None and state.key == key.digest
    try:
        assert os.pread(state.fd, 4, 0) == b"QEVM"
    finally:
        os.close(state.fd)


def test_a_state_copied_or_touched_but_the_same_is_loaded(image):
    key = key_of(image)
    saved(key)
    os.utime(key.directory / STATE, ns=(5, 5))  # its stat no longer the recorded one: read whole, same SHA-256
    state = open_state(key)
    assert state is not None
    os.close(state.fd)


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda d: (d / STATE).write_bytes(b"QEVM other"), "its state is not the one saved"),
        (lambda d: (d / META).write_text("{"), f"{META} is unreadable or incomplete"),
        (lambda d: os.chmod(d / STATE, 0o666), f"{STATE} may be written by others (mode 666)"),
        (lambda d: os.chmod(d, 0o777), "may be written by others (mode 777)"),
        (lambda d: ((d / STATE).unlink(), (d / STATE).symlink_to("/etc/passwd")), "Too many levels of symbolic links"),
    ],
    ids=["damaged", "record broken", "writable by others", "directory writable by others", "planted symlink"],
)
def test_a_damaged_or_planted_state_is_refused_in_one_line_naming_it_and_the_fix(image, damage, why):
    key = key_of(image)
    directory = saved(key)
    damage(directory)
    with pytest.raises(RefusedState) as refused:
        open_state(key)
    message = str(refused.value)
    assert message.startswith(f"saved state {directory}: not loaded: ") and why in message, message
    assert message.endswith(f"remove {directory} (niclab makes it again), or boot cold (--cold-boot)")
    assert "\n" not in message


def test_a_states_folder_others_may_write_is_named_with_its_own_fix(image):
    key = key_of(image)
    saved(key)
    os.chmod(key.directory.parent, 0o775)
    with pytest.raises(RefusedState) as refused:
        open_state(key)
    assert str(refused.value).endswith(
        f"{key.directory.parent} may be written by others (mode 775); chmod go-w {key.directory.parent} if it is "
        "yours, or remove it"
    )


def test_states_go_in_the_users_cache_when_the_image_is_not_theirs(image, tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    assert saved_state.states_root(image) == image.directory / "states"
    monkeypatch.setattr(saved_state.os, "geteuid", lambda: 12345)
    assert saved_state.states_root(image) == tmp_path / "cache" / "states" / image.directory.name


def test_a_guest_that_does_not_boot_to_be_saved_is_a_boot_error_and_the_states_folder_is_kept_private(
    image, tmp_path, monkeypatch
):
    old = os.umask(0o002)  # a umask that makes group-writable folders: open_state would refuse them
    try:
        with pytest.raises(saved_state.SavedGuestDown) as down:
            saved_state.make_state(key_of(image), "/bin/false", lambda m: None, 5, tmp_path / "work")
    finally:
        os.umask(old)
    assert str(down.value).startswith("guest(s) did not come up: saved: process qemu-saved")
    assert f"--- the end of {tmp_path / 'work' / 'saving' / 'saved.serial.log'}" in str(down.value)
    assert stat.S_IMODE((image.directory / "states").stat().st_mode) == 0o755
    assert [p.name for p in (image.directory / "states").iterdir()] == [f".{key_of(image).digest}.lock"]


def test_module_parameters_of_modules_the_saved_guest_loaded_cannot_be_set_after(image):
    state = saved_state.SavedState("k", -1, {"modules": ["virtio_pci", "virtio-console"]})
    assert saved_state.loaded_before(state, {"virtio_console": ["x=1"], "e1000": ["y=2"]}) == ["virtio_console"]


def test_a_state_recorded_for_another_key_is_refused(image):
    key = key_of(image)
    directory = saved(key)
    record = json.loads((directory / META).read_text())
    record["fields"]["cpus"] = 4
    (directory / META).write_text(json.dumps(record))
    with pytest.raises(RefusedState, match="it was made for another key"):
        open_state(key)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_state_of_another_user_is_refused(image):
    key = key_of(image)
    directory = saved(key)
    os.chown(directory / STATE, 65534, 65534)
    with pytest.raises(RefusedState, match=f"{STATE} belongs to uid 65534, not to this user"):
        open_state(key)


def plan(**changes: object) -> VmPlan:
    port = Port("a", 0, 0, "e1000", "link0")
    nic = NicPlan(port, emulated_model("e1000"), "02:4e:4c:00:00:00", "dgram,local.type=fd,local.str=7")
    node = NodeSpec("a", 0, 1, 256, (port,), cmdline=("e1000.debug=1",))
    base = VmPlan(node, "tcg", "/i/vmlinux", "/i/initrd.img", "console=ttyS0", (nic,), "a.log", "a.qmp", "a.qga")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_restored_qemu_reads_the_state_keeps_the_saved_command_line_and_gets_its_cards_later():
    argv = qemu_argv("qemu", plan(incoming_fd=9, append="console=ttyS0 niclab.node=saved", vmgenid=True))
    assert argv[argv.index("-append") + 1] == "console=ttyS0 niclab.node=saved"
    assert argv[-2:] == ["-incoming", "fd:9"]
    assert "vmgenid,guid=auto" in argv and "-bios" not in argv
    assert "dgram,local.type=fd,local.str=7,id=net0l0" in argv  # the cable is there from the start
    assert not any(word.startswith("e1000,") for word in argv)  # the card is plugged in after the restore


def test_a_booted_qemu_has_its_cards_and_its_node_words_as_before():
    argv = qemu_argv("qemu", plan())
    assert argv[argv.index("-append") + 1] == "console=ttyS0 e1000.debug=1 niclab.node=a"
    assert "e1000,netdev=net0l0,mac=02:4e:4c:00:00:00,bus=pci.0,addr=0x3,autonegotiation=off" in argv
    assert "-incoming" not in argv and "vmgenid,guid=auto" not in argv


def test_a_card_is_plugged_with_the_properties_it_boots_with_typed_for_qmp():
    nic = plan().nics[0]
    assert device_add(nic, 3) == {
        "driver": "e1000",
        "netdev": "net0l0",
        "mac": "02:4e:4c:00:00:00",
        "bus": "pci.0",
        "addr": "0x3",
        "autonegotiation": False,
    }


def test_after_the_restore_the_guest_takes_its_name_clock_parameters_then_its_drivers():
    script = arrival_script("a b", plan(), {"e1000": ["debug=1", "copybreak=0"]}, 1764374400, "ab" * 32)
    lines = script.splitlines()
    assert lines[0] == "hostname 'a b'"
    assert "date -s @1764374400 > /dev/null" in lines
    assert "printf %s 'options e1000 debug=1 copybreak=0\n' > /etc/modprobe.d/niclab-params.conf" in script
    # the parameters are in place before a driver loads, and the cards on the bus before the drivers are looked up
    assert script.index("niclab-params.conf") < script.index("0000:00:03.0") < script.index("modprobe -q -a")
    assert "02:4e:4c:00:00:00" in lines[-3] and lines[-2] == 'echo "missing=$missing"'
    assert lines[-1].startswith("""echo "niclab: node "'a b'": drivers loaded: """)
    assert lines[-1].endswith('(after a restore)" > /dev/console')


class FakeQemu:
    """A QMP server on a unix socket that answers each command from `answers` (command -> reply line)."""

    def __init__(self, path: Path, answers: dict[str, bytes]):
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(1)
        self.asked: list[dict] = []
        self.answers = answers
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        conn, _ = self.server.accept()
        with conn, conn.makefile("rwb") as stream:
            stream.write(b'{"QMP": {"version": {}}}\n')
            stream.flush()
            for line in stream:
                asked = json.loads(line)
                self.asked.append(asked)
                reply = self.answers.get(asked["execute"], b'{"return": {}}\n')
                try:  # QEMU answers with the command's id
                    reply = json.dumps({**json.loads(reply), "id": asked.get("id")}).encode() + b"\n"
                except ValueError:
                    pass
                stale = b'{"return": {}, "id": -1}\n'  # a late answer to an earlier command is passed over
                stream.write(b'{"event": "RESUME"}\n' + stale + reply)
                stream.flush()


def test_qmp_commands_get_their_answers_past_events_and_a_refusal_names_node_and_command(tmp_path):
    path = tmp_path / "a.qmp"
    fake = FakeQemu(
        path,
        {
            "query-migrate": b'{"return": {"status": "completed"}}\n',
            "device_add": b'{"error": {"class": "GenericError", "desc": "Duplicate ID"}}\n',
        },
    )
    with Qmp("a", path, deadline=time.monotonic() + 30) as qmp:
        assert qmp.wait_migration(deadline=time.monotonic() + 30) == {"status": "completed"}
        with pytest.raises(QmpError, match=r"^a: QEMU refused device_add: Duplicate ID$"):
            qmp.execute("device_add", {"driver": "e1000"})
    assert [a["execute"] for a in fake.asked] == ["qmp_capabilities", "query-migrate", "device_add"]
    assert fake.asked[-1]["arguments"] == {"driver": "e1000"}


def test_a_failed_migration_is_an_error_with_qemus_reason(tmp_path):
    path = tmp_path / "a.qmp"
    FakeQemu(path, {"query-migrate": b'{"return": {"status": "failed", "error-desc": "load of migration failed"}}\n'})
    with Qmp("a", path, deadline=time.monotonic() + 30) as qmp, pytest.raises(QmpError) as failed:
        qmp.wait_migration(deadline=time.monotonic() + 30)
    assert str(failed.value) == "a: QEMU's migration failed: load of migration failed"


def test_an_endless_line_from_the_monitor_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr("niclab.plumbing.backends.qmp.MAX_LINE", 1000)
    path = tmp_path / "a.qmp"
    FakeQemu(path, {"query-status": b"x" * 5000})
    with Qmp("a", path, deadline=time.monotonic() + 30) as qmp:
        with pytest.raises(QmpError, match="a line of over 1000 bytes"):
            qmp.execute("query-status", timeout=5)


def test_a_monitor_that_never_opens_is_an_error_naming_the_node(tmp_path):
    with pytest.raises(QmpError, match=r"^a: QEMU's monitor did not open"):
        Qmp("a", tmp_path / "none.qmp", deadline=0)


def test_states_of_an_image_are_listed_from_their_records(image):
    key = key_of(image)
    saved(key)
    (image.directory / "states" / "junk").mkdir()
    (info,) = saved_state.states_of(image.directory)
    assert (info.key, info.cpus, info.memory_mib, info.accel) == (key.digest, 1, 256, "tcg")
    assert info.qemu == "QEMU emulator version 7.2.22"


def test_image_ls_lists_each_image_with_its_saved_states(tmp_path, monkeypatch, capsys):
    from niclab.ui.cli.main import main

    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "images" / "micro-0123456789abcdef"
    directory.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img"):
        (directory / name).write_bytes(name.encode())
    manifest = {"recipe": "micro", "input_hash": "0123456789abcdef", "cmdline": "quiet", "built_at": "2026-11-29"}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    image = Image("micro", "0123456789abcdef", directory, "quiet", manifest)
    key = key_of(image)
    saved(key, b"x" * 3 * 2**20)
    assert main(["image", "ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"micro-0123456789abcdef  built 2026-11-29  {directory}"
    assert out[1] == f"  saved state {key.digest}  1 vCPU, 256 MiB, tcg  3 MiB  made 2026-11-29T00:00:00Z"
    assert main(["image", "ls", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["image"] == image.id and [s["key"] for s in listed["states"]] == [key.digest]
