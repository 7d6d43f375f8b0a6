"""The guest's boot script loads the drivers of a bus with one modprobe (each run costs ~30 ms under TCG)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

BOOT = Path(__file__).resolve().parents[2] / "images" / "micro" / "rootfs" / "etc" / "niclab" / "boot"


def load_drivers_function() -> str:
    """The script's `load_drivers` function, as it is written there."""
    found = re.search(r"^load_drivers\(\) \{\n.*?^\}\n", BOOT.read_text(), re.MULTILINE | re.DOTALL)
    assert found, f"{BOOT} defines no load_drivers function"
    return found.group(0)


def run_load_drivers(tmp_path: Path, devices: dict[str, str]) -> list[list[str]]:
    """Run load_drivers on a fake bus with these devices (name -> modalias); each modprobe call's arguments."""
    bus = tmp_path / "bus"
    bus.mkdir(parents=True)
    for name, alias in devices.items():
        (bus / name).mkdir()
        (bus / name / "modalias").write_text(alias + "\n")
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "modprobe"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    script = f"PATH={fake.parent}:$PATH\n{load_drivers_function()}load_drivers {bus}\n"
    subprocess.run(["sh", "-c", script], timeout=10)  # its status is not asked: init goes on
    return [line.split() for line in calls.read_text().splitlines()] if calls.exists() else []


def test_every_device_of_a_bus_is_asked_for_in_one_modprobe_and_an_empty_bus_runs_none(tmp_path: Path) -> None:
    assert run_load_drivers(tmp_path / "empty", {}) == []
    calls = run_load_drivers(
        tmp_path / "three",
        {
            "0000:00:00.0": "pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00",
            "0000:00:02.0": "pci:v00001AF4d00001003sv00001AF4sd00000003bc07sc80i00",
            "0000:00:03.0": "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00",
        },
    )
    assert calls == [
        [
            "-q",
            "-a",
            "pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00",
            "pci:v00001AF4d00001003sv00001AF4sd00000003bc07sc80i00",
            "pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00",
        ]
    ]
