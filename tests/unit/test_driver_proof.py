"""The guest's proof of which module drives a card that a scenario's `driver:` gave another driver."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from niclab.model.driver_choice import DriverChoice
from niclab.model.facts import NicFacts
from niclab.model.topology import Port
from niclab.plumbing.drivers.asked import AskedModule
from niclab.plumbing.facts import parse_node_facts
from niclab.plumbing.guestsh import note_build_id
from niclab.plumbing.netconf import modules
from niclab.ui.formats import _driver

MAC = "52:54:00:00:00:01"
BUILD_ID = "5f1c2a9e0b7d44c1a3e2f60718293a4b5c6d7e8f"
NOTE = (4).to_bytes(4, "little") + (20).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"GNU\0"
NOTE_HEX = " ".join(f"{b:02x}" for b in NOTE + bytes.fromhex(BUILD_ID))
CHOICE = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")
PORT = Port("a", 0, 0, "e1000e", "link0", driver=CHOICE)
ASKED = AskedModule(
    module="e1000e_vendor",
    build_id=BUILD_ID,
    choice=str(CHOICE),
    origin="Debian linux-source-6.1 drivers/net/ethernet/intel/e1000e",
    source_hash="ab" * 32,
    replaces="e1000e",
)


def guest(**values: str) -> str:
    return "[port link0]\n" + "".join(f"{k}={v}\n" for k, v in values.items())


def test_a_build_id_note_gives_its_id_and_anything_else_nothing():
    assert note_build_id(NOTE_HEX.replace(" ", "")) == BUILD_ID
    assert note_build_id("") == note_build_id("zz") == note_build_id(NOTE.hex()[:20]) == ""


def test_the_card_on_the_module_built_for_it_is_proven_and_recorded():
    text = guest(
        iface="eth0",
        pci="0000:00:03.0",
        module="e1000e_vendor",
        bound="e1000e",
        module_version="",
        srcversion="",
        taint="OE",
        build_note=NOTE_HEX.replace(" ", ""),
        loaded="1",
    )
    observed, problems = modules.check("a", {PORT: ("52:54:00:00:00:01", ASKED)}, text)
    assert problems == []
    proof = observed["port link0"]
    assert proof["module"] == "e1000e_vendor" and proof["bound"] == "e1000e" and proof["taint"] == "OE"
    assert proof["build_id"] == BUILD_ID and proof["source_hash"] == "ab" * 32 and proof["asked"] == str(CHOICE)


def test_a_card_on_the_default_module_fails_with_both_names():
    text = guest(pci="0000:00:03.0", module="e1000e", bound="e1000e", build_note="")
    observed, (problem,) = modules.check("a", {PORT: ("m", ASKED)}, text)
    assert problem == (
        f"a/link0 (e1000e card 0000:00:03.0): module e1000e drives it, the scenario asks e1000e_vendor ({CHOICE}) "
        "instead of e1000e"
    )
    assert observed["port link0"]["source_hash"] == ""  # not the source that was asked for: none is claimed


def test_a_card_no_driver_took_says_so_with_the_kernels_words():
    asked = AskedModule("8139too", "", "8139too", "Debian linux-image-6.1.0-50-amd64", "", "8139cp")
    port = Port("a", 0, 0, "rtl8139", "link0", driver=DriverChoice("named", "8139too", "8139too"))
    text = guest(
        iface="",
        pci="0000:00:03.0",
        loaded="1",
        log="[    1.2] 8139too 0000:00:03.0: This (id 10ec:8139 rev 20) is an enhanced 8139C+ chip, use 8139cp",
    )
    _, (problem,) = modules.check("a", {port: ("m", asked)}, text)
    assert problem.startswith("a/link0 (rtl8139 card 0000:00:03.0): no driver is bound; 8139too is loaded but did ")
    assert problem.endswith(
        "the kernel said: [    1.2] 8139too 0000:00:03.0: This (id 10ec:8139 rev 20) is an "
        "enhanced 8139C+ chip, use 8139cp"
    )
    _, (problem,) = modules.check("a", {port: ("m", asked)}, guest(iface="", pci="", loaded="0"))
    assert problem == "a/link0 (rtl8139 card): no driver is bound; 8139too is not loaded"


def test_another_build_of_the_module_is_not_the_one_asked_for():
    other = "00" * 20
    note = NOTE.hex() + other
    _, (problem,) = modules.check("a", {PORT: ("m", ASKED)}, guest(module="e1000e_vendor", build_note=note))
    assert f"its build id is {other}, not the one built from {CHOICE} ({BUILD_ID})" in problem


def fake_guest(root: Path, cards: dict[str, tuple[str, str, str | None]], dmesg: str = "") -> dict[str, str]:
    """A guest's sysfs and procfs as far as the proof reads them: PCI address -> (PCI ID, MAC or "", module or None);
    the environment that runs the script against them (dmesg on PATH prints `dmesg`)."""
    sys, proc, bin_ = root / "sys", root / "proc", root / "bin"
    for path in (sys / "class/net", sys / "bus/pci/devices", proc, bin_):
        path.mkdir(parents=True, exist_ok=True)
    loaded = []
    for n, (address, (pci_id, mac, module)) in enumerate(cards.items()):
        device = sys / "devices/pci0000:00" / address
        device.mkdir(parents=True)
        vendor, dev = pci_id.split(":")
        (device / "vendor").write_text(f"0x{vendor}\n")
        (device / "device").write_text(f"0x{dev}\n")
        (sys / "bus/pci/devices" / address).symlink_to(device)
        if module is not None:
            driver = sys / "bus/pci/drivers" / module.replace("_vendor", "")
            driver.mkdir(parents=True, exist_ok=True)
            (driver / "module").unlink(missing_ok=True)
            (driver / "module").symlink_to(sys / "module" / module)
            (device / "driver").symlink_to(driver)
            notes = sys / "module" / module / "notes"
            notes.mkdir(parents=True, exist_ok=True)
            (notes / ".note.gnu.build-id").write_bytes(NOTE + bytes.fromhex(BUILD_ID))
            (sys / "module" / module / "taint").write_text("OE\n")
            loaded.append(f"{module} 61440 0 - Live 0x0000000000000000 (OE)\n")
        if mac:
            net = sys / "class/net" / f"eth{n}"
            net.mkdir()
            (net / "address").write_text(mac + "\n")
            (net / "device").symlink_to(device)
    (proc / "modules").write_text("".join(loaded))
    (bin_ / "dmesg").write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(dmesg)}\n")
    (bin_ / "dmesg").chmod(0o755)
    return {"PATH": f"{bin_}:{os.environ['PATH']}"}


def run_proof(root: Path, ports: dict, env: dict[str, str]) -> str:
    script = modules.proof_script(ports, sys=str(root / "sys"), proc=str(root / "proc"))
    return subprocess.run(["dash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout


def test_the_proof_script_finds_the_card_by_mac_and_reads_its_module_and_build_id(tmp_path):
    env = fake_guest(tmp_path, {"0000:00:03.0": ("8086:10d3", MAC, "e1000e_vendor")})
    observed, problems = modules.check("a", {PORT: (MAC, ASKED)}, run_proof(tmp_path, {PORT: (MAC, ASKED)}, env))
    assert problems == []
    assert observed["port link0"]["module"] == "e1000e_vendor" and observed["port link0"]["build_id"] == BUILD_ID
    assert observed["port link0"]["bound"] == "e1000e" and observed["port link0"]["taint"] == "OE"


def test_two_unbound_cards_of_one_pci_id_are_two_ports_and_the_log_is_only_about_them(tmp_path):
    said = (
        "[    0.9] e1000: Intel(R) PRO/1000 Network Driver\n"
        "[    1.2] 8139too 0000:00:03.0: This (id 10ec:8139 rev 20) is an enhanced 8139C+ chip, use 8139cp\n"
        "[    1.3] 8139too 0000:00:04.0: This (id 10ec:8139 rev 20) is an enhanced 8139C+ chip, use 8139cp\n"
    )
    env = fake_guest(tmp_path, {"0000:00:03.0": ("10ec:8139", "", None), "0000:00:04.0": ("10ec:8139", "", None)}, said)
    asked = AskedModule("8139too", "", "8139too", "Debian linux-image-6.1.0-50-amd64", "", "8139cp")
    choice = DriverChoice("named", "8139too", "8139too")
    ports = {Port("a", i, 0, "rtl8139", f"link{i}", driver=choice): (f"52:54:00:00:00:0{i}", asked) for i in (0, 1)}
    _, problems = modules.check("a", ports, run_proof(tmp_path, ports, env))
    assert problems[0].startswith("a/link0 (rtl8139 card 0000:00:03.0): no driver is bound; ")
    assert problems[1].startswith("a/link1 (rtl8139 card 0000:00:04.0): no driver is bound; ")
    assert all("8139too is not loaded; the kernel said: " in p and "e1000:" not in p for p in problems)
    assert problems[1].endswith("0000:00:04.0: This (id 10ec:8139 rev 20) is an enhanced 8139C+ chip, use 8139cp")
    assert "0000:00:03.0: This" not in problems[1]


def test_the_proof_script_quotes_what_it_is_given():
    odd = AskedModule("e1000e_vendor", "", "x'; reboot; '", "", "", "e1000e")
    script = modules.proof_script({PORT: ("52:54:00:00:00:01'; reboot #", odd)})
    assert "'52:54:00:00:00:01'\"'\"'; reboot #'" in script and "= 0x8086:0x10d3 ]" in script


def test_every_cells_facts_name_the_module_its_taint_and_build_id():
    facts = parse_node_facts(
        "kernel=6.1.0-50-amd64\n[link0]\ndriver=e1000e\nversion=6.1.0-50-amd64\nmodule=e1000e_vendor\n"
        f"module_version=\nsrcversion=\ntaint=OE\nbuild_note={NOTE_HEX.replace(' ', '')}\n"
    )
    nic = facts.interfaces["link0"]
    assert nic.module == "e1000e_vendor" and nic.build_id == BUILD_ID and "build_note" not in (nic.model_extra or {})
    assert _driver(nic) == "e1000e 6.1.0-50-amd64 (module e1000e_vendor, out of tree)"
    assert _driver(NicFacts(driver="e1000e", version="6.1", module="e1000e", taint="")) == "e1000e 6.1"
    assert _driver(NicFacts(driver="r8168", version="8.051.02-NAPI", module="r8168", taint="OE")) == (
        "r8168 8.051.02-NAPI (out of tree)"
    )


def test_a_card_a_built_in_driver_holds_says_to_build_it_as_a_module():
    text = guest(pci="0000:00:03.0", module="", bound="e1000e")
    _, (problem,) = modules.check("a", {PORT: ("m", ASKED)}, text)
    assert problem == (
        f"a/link0 (e1000e card 0000:00:03.0): driver e1000e, built into the kernel, drives it; the scenario asks "
        f"e1000e_vendor ({CHOICE}): build the kernel with e1000e as a module (=m)"
    )
