"""One card, two drivers: the kernel's own module against one built out of tree, bound and proven in the guest.

The out-of-tree module is the e1000e driver's own source, taken from Debian's
linux-source of the node's kernel and built under another name
(e1000e_vendor), as a vendor's release would be: the build for the node's
kernel, the binding at boot and the read-back of the module's build id are
the real ones. A second in-tree module that cannot drive the card (8139too on
QEMU's C+ rtl8139) fails its cell naming both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_dirs
from tests.records import read_records

from .processes import niclab, wait_no_qemu

ROOT = Path(__file__).resolve().parents[2]
VENDOR = "drv=kernel-source:e1000e+name:e1000e_vendor"


def run(*args: str, timeout: float = 900) -> tuple[int, str, str]:
    proc = niclab("run", *args)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.measures
def test_the_scenario_runs_one_card_under_two_drivers_and_compare_judges_them(image, tmp_path):
    code, out, err = run(str(ROOT / "scenarios/driver-vs-driver.yaml"), "--out", str(tmp_path / "runs"))
    assert code == 0, err
    (run_dir,) = run_dirs(tmp_path / "runs")
    records = list(read_records(run_dir / "results.jsonl"))
    cells = {r["cell"]: r for r in records if r["type"] == "cell"}
    assert set(cells) == {"drv=in-tree", VENDOR}
    kernel = cells["drv=in-tree"]["rig"]["kernel"]
    for node in ("a", "b"):
        own = cells["drv=in-tree"]["nodes"][node]["interfaces"]["link0"]
        assert own["driver"] == own["module"] == "e1000e" and "O" not in own["taint"], own
        vendor = cells[VENDOR]["nodes"][node]["interfaces"]["link0"]
        # the PCI driver keeps its name; the module that owns it is the one built out of tree
        assert vendor["driver"] == "e1000e" and vendor["module"] == "e1000e_vendor" and "O" in vendor["taint"], vendor
        proof = cells[VENDOR]["network"]["observed"][node]["port link0"]["driver_proof"]
        assert proof["module"] == "e1000e_vendor" and proof["build_id"] == vendor["build_id"] != own["build_id"]
        assert proof["asked"].startswith("kernel-source:drivers/net/ethernet/intel/e1000e")
        assert len(proof["source_hash"]) == 64 and "linux-source" in proof["origin"], proof
        assert "driver_proof" not in cells["drv=in-tree"]["network"]["observed"][node]["port link0"]
    # each run record says which module drove the card, and where its source came from
    runs = [r for r in records if r["type"] == "run" and r["cell"] == VENDOR]
    assert runs and all(r["nics"]["a"]["module"] == "e1000e_vendor" and r["nics"]["a"]["driver_source"] for r in runs)
    assert f"driver e1000e {kernel} (module e1000e_vendor, out of tree)" in out  # the table says what ran
    proc = niclab("compare", str(run_dir), "--cells", "drv=in-tree", VENDOR, "--format", "json")
    text, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1), err  # 1: a difference was found; both are answers
    changes = {c["name"]: c for c in json.loads(text)["changes"]}
    change = changes["netperf.TCP_STREAM.throughput_mbps"]
    assert change["base_n"] == change["new_n"] == 3
    # judged; or, where a busy host starved either cell's guests (two drivers boot apart), no verdict and why
    assert change["verdict"] in ("worse", "better", "no significant change", "host contention, no verdict"), change
    assert change["verdict"] != "host contention, no verdict" or change["contention"], change


def test_a_driver_that_does_not_bind_the_card_fails_its_cell_naming_both(image, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: wrong-driver\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: rtl8139\n"
        "    driver: {a: 8139too, b: in-tree}\nbenchmarks:\n  - netperf: {test: TCP_RR, seconds: 2}\n"
    )
    code, _out, err = run(str(scenario), "--out", str(tmp_path / "runs"))
    assert code != 0
    line = next(line for line in err.splitlines() if "a/link0 (rtl8139 card" in line)
    assert "no driver is bound; 8139too is loaded but did not take it" in line, err
    assert "use 8139cp" in line  # the kernel's own reason, from the driver's log line
    assert wait_no_qemu(tmp_path) == []
