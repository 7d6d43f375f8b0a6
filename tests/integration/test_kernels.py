"""The kernel under test: a Debian suite's kernel as a matrix axis, and a developer's own build tree.

The build tree is Debian's kernel repacked as one (kernel_tree.py): niclab
reads it where `make modules_install` would, and boots it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_dirs
from tests.records import read_records

from .kernel_tree import repack_debian_kernel
from .processes import niclab, wait_no_qemu

SCENARIO = """\
name: kernel-check
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
    netem: {delay: 1ms}
benchmarks:
  - netperf: {test: TCP_RR, seconds: 3}
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kernel-packages")


def run(*args: str, timeout: float = 600) -> tuple[int, str, str]:
    proc = niclab("run", *args)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_a_kernel_build_tree_boots_and_is_recorded(image, tmp_path, scratch):
    tree = tmp_path / "linux"
    version = repack_debian_kernel(tree, scratch)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    code, out, err = run(str(scenario), "--kernel-build", str(tree), "--out", str(tmp_path / "runs"))
    assert code == 0, err
    assert f"taking the kernel and modules of {tree}" in err
    (run_dir,) = run_dirs(tmp_path / "runs")
    cell = next(r for r in read_records(run_dir / "results.jsonl") if r["type"] == "cell")
    assert cell["rig"]["kernel_origin"] == f"kernel build {tree}"
    assert "+build-" in cell["rig"]["image"]  # micro-<hash>+build-<tree>-<build>: the recipe's userspace, this kernel
    assert {n["kernel"] for n in cell["nodes"].values()} == {version}
    assert cell["network"]["observed"]["a"]["iface link0"]["qdisc"].startswith("qdisc netem")  # sch_netem loaded
    assert f"kernel {version}, driver e1000 {version}" in out  # the table says what ran
    # Built once: a second run finds the tree's image unchanged.
    code, _, err = run(str(scenario), "--kernel-build", str(tree), "--out", str(tmp_path / "runs2"))
    assert code == 0 and "taking the kernel" not in err, err


def test_a_tree_without_netem_is_refused_before_anything_boots(image, tmp_path, scratch):
    tree = tmp_path / "linux"
    repack_debian_kernel(tree, scratch, leave_out={"sch_netem": "NET_SCH_NETEM"})
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("nodes: [a, b]", "nodes: [a, b]\nkernel: {build: linux}"))
    code, _, err = run(str(scenario), "--out", str(tmp_path / "runs"))
    assert code == 1
    assert "CONFIG_NET_SCH_NETEM is not set (netem impairments" in err, err
    assert f"cd {tree} && scripts/config --file .config -m NET_SCH_NETEM && make olddefconfig bzImage modules" in err
    assert not (tmp_path / "runs").exists() and wait_no_qemu(tmp_path) == []  # refused before a run began


@pytest.mark.measures
def test_two_debian_kernels_run_side_by_side_and_compare(image, tmp_path):
    scenario = tmp_path / "k.yaml"
    scenario.write_text(
        "name: kernels\nnodes: [a, b]\nkernel: ${kernel}\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
        "matrix:\n  kernel: [bookworm, trixie]\nrepeat: 2\nbenchmarks:\n  - netperf: {test: TCP_STREAM, seconds: 3}\n"
    )
    code, out, err = run(str(scenario), "--out", str(tmp_path / "runs"), timeout=900)
    assert code == 0, err
    (run_dir,) = run_dirs(tmp_path / "runs")
    cells = {r["cell"]: r for r in read_records(run_dir / "results.jsonl") if r["type"] == "cell"}
    old, new = cells["kernel=bookworm"], cells["kernel=trixie"]
    assert old["rig"]["kernel"].startswith("6.1.") and "Debian bookworm" in old["rig"]["kernel_origin"]
    assert new["rig"]["kernel"] != old["rig"]["kernel"] and new["rig"]["kernel_origin"] == "Debian trixie"
    assert new["nodes"]["a"]["interfaces"]["link0"]["version"] == new["rig"]["kernel"]  # e1000 is in-tree
    assert old["rig"]["image"].split("+")[0] == new["rig"]["image"].split("+")[0]  # one userspace
    # The report says which kernel and driver each cell ran, side by side.
    report = (run_dir / "report.html").read_text()
    assert f"kernel=trixie: kernel {new['rig']['kernel']}, driver e1000 {new['rig']['kernel']}" in report
    proc = niclab("compare", str(run_dir), "--cells", "kernel=bookworm", "kernel=trixie", "--format", "json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1), err  # 1: a difference was found; both are answers
    (change,) = json.loads(out)["changes"]
    assert change["name"] == "netperf.TCP_STREAM.throughput_mbps" and change["base_n"] == change["new_n"] == 2
    # judged, not "untested"; or, where a busy host starved either cell's guests (two kernels boot apart, so
    # Welch's test, which contention voids), no verdict and why: what niclab must say then
    assert change["verdict"] in ("worse", "better", "no significant change", "host contention, no verdict"), change
    assert change["verdict"] != "host contention, no verdict" or change["contention"], change
