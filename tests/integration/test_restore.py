"""Guests restored from a saved state against guests booted cold: the same drivers, probed live, the same facts.

One pair of guests carries three cables: e1000 with a module parameter on one end, virtio, and e1000e bound to
the same driver's source built out of tree (e1000e_vendor, a driver layer). The scenario runs booted cold
(--cold-boot), then restored (its saved state made first, in a view of the image of this test's own), and the
drivers, versions, modules, MTUs, offloads and module parameters each guest reports must be the same; the network
check passes traffic over every cable. Then the saved state is damaged: the next run refuses it in one line and
boots cold.
"""

from __future__ import annotations

import os
from pathlib import Path

from niclab.plumbing.backends.saved_state import META, STATE
from tests.helpers import image_view, run_dirs
from tests.records import read_records

from .processes import niclab, wait_no_qemu

SCENARIO = """\
name: restored
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
    module_params: {a: {copybreak: 128}}
  - between: [a, b]
    nic: virtio
  - between: [a, b]
    nic: e1000e
    driver: {kernel-source: drivers/net/ethernet/intel/e1000e, name: e1000e_vendor}
repeat: 1  # one run shows traffic; the facts are what is compared
benchmarks:
  - netperf: {test: TCP_RR, seconds: 1}
"""


def run(scenario: Path, out: Path, view: Path, *args: str) -> tuple[dict, str]:
    """One run of the scenario with the image view; its cell record and what it printed on stderr."""
    proc = niclab("run", str(scenario), "--out", str(out), *args, env={"NICLAB_IMAGE": str(view)})
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    (run_dir,) = run_dirs(out)
    assert wait_no_qemu(out) == []
    cell = next(r for r in read_records(run_dir / "results.jsonl") if r["type"] == "cell")
    return cell, err


def facts(cell: dict) -> dict:
    """What a guest reports of its cards and drivers (not when or how fast)."""
    return {
        node: {
            "interfaces": cell["nodes"][node]["interfaces"],
            "observed": {
                key: value
                for key, value in cell["network"]["observed"][node].items()
                if key.startswith("port ") or key == "module_params"
            },
        }
        for node in ("a", "b")
    }


def test_restored_guests_probe_the_same_drivers_and_report_the_same_facts_as_booted_ones(image, tmp_path):
    scenario = tmp_path / "restored.yaml"
    scenario.write_text(SCENARIO)
    view = image_view(image, tmp_path)

    cold, _ = run(scenario, tmp_path / "cold", view, "--cold-boot")
    assert cold["rig"]["cold_boot"] == "asked (--cold-boot)" and not cold["rig"].get("restored")

    restored, err = run(scenario, tmp_path / "restored", view)
    # the nodes boot the image with the driver layer, beside the view: the state is that image's
    (state,) = [d for d in tmp_path.glob(f"{view.name}+drv-*/states/*") if d.is_dir()]
    assert "cold_boot" not in restored["rig"], err
    assert restored["rig"]["restored"] == {"a": state.name, "b": state.name}
    assert set(restored["rig"]["cards_plugged_s"]) == {"a", "b"}
    assert f"key {state.name}" in err  # the state was made first, and said so

    assert facts(restored) == facts(cold)
    a = restored["nodes"]["a"]["interfaces"]
    drivers = (a["link0"]["driver"], a["link1"]["driver"], a["link2"]["module"])
    assert drivers == ("e1000", "virtio_net", "e1000e_vendor")
    assert restored["network"]["observed"]["a"]["module_params"]["e1000.copybreak"]["sysfs"] == "128"
    assert len(restored["network"]["idle_rtt_ms"]) == 3  # every cable passed traffic
    assert restored["nodes"]["a"]["interfaces"] != restored["nodes"]["b"]["interfaces"]  # each node its own MACs

    # a state that is not the one saved is refused in one line, never loaded: the run boots cold and says why
    with open(state / STATE, "r+b") as stream:
        stream.seek(-64, os.SEEK_END)
        stream.write(bytes(64))
    again, err = run(scenario, tmp_path / "damaged", view)
    refusals = [line for line in err.splitlines() if f"saved state {state}: not loaded:" in line]
    assert len(refusals) == 1 and "is not the one saved" in refusals[0], err
    assert not again["rig"].get("restored") and "is not the one saved" in again["rig"]["cold_boot"]
    assert facts(again) == facts(cold)
    assert (state / META).is_file()  # the user's file: niclab refuses it, it does not delete it
