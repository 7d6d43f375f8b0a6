"""The libvirt backend on emulated NICs: scenarios/two-node.yaml through a libvirtd the test starts.

libvirtd and virtlogd run in a network namespace the test makes (nothing is
added to the host's own network), with /dev/kvm hidden where KVM does not
run guests here. The run goes through `niclab run --backend libvirt` as a
user would type it; its results must look like the QEMU backend's (the same
metrics, a positive throughput), its domain XML must pass libvirt's schema,
and no domain may outlive the run, nor a killed run after `niclab down`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from niclab.plumbing.accel import choose_accel
from tests.helpers import run_dirs
from tests.integration.libvirt_netns import isolated_libvirt, names, virsh, why_not
from tests.integration.processes import niclab, wait_for_line

pytestmark = pytest.mark.integration

if (reason := why_not(("libvirtd", "virtlogd", "virsh", "ip"))) is not None:
    pytest.skip(f"the libvirt backend test cannot run here: {reason}", allow_module_level=True)


@pytest.fixture(scope="module")
def libvirtd(tmp_path_factory, image):
    try:
        import libvirt  # noqa: F401
    except ImportError:
        pytest.fail("libvirt-python is not installed: make test installs it (make lab-python)")
    hide_kvm = choose_accel(image).accel != "kvm"
    with isolated_libvirt(tmp_path_factory.mktemp("libvirtd"), hide_kvm=hide_kvm) as isolated:
        yield isolated


def domains() -> set[str]:
    return {name for name in names(virsh("list", "--name")) if name.startswith("niclab-")}


def run(repo: Path, out: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "niclab", "run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = run_dirs(out)
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return {"dir": run_dir, "records": records, "stdout": proc.stdout}


def metrics(result: dict) -> dict[str, float]:
    return {r["name"]: r["value"] for r in result["records"] if r["type"] == "measurement"}


def test_two_node_runs_through_libvirt_and_looks_like_the_qemu_backends_run(libvirtd, repo, tmp_path):
    through_libvirt = run(repo, tmp_path / "libvirt", "--backend", "libvirt")
    through_qemu = run(repo, tmp_path / "qemu")
    assert set(metrics(through_libvirt)) == set(metrics(through_qemu))
    throughput = metrics(through_libvirt)["netperf.TCP_STREAM.throughput_mbps"]
    assert throughput > 10, throughput
    print(
        "\n"
        + "\n".join(
            f"{name}: libvirt {metrics(through_libvirt)[name]}, qemu {metrics(through_qemu)[name]}"
            for name in sorted(metrics(through_qemu))
        ),
        file=sys.stderr,
    )
    (cell,) = [r for r in through_libvirt["records"] if r["type"] == "cell"]
    rig = cell["rig"]
    assert rig["backend"] == "libvirt" and rig["accel"] in ("kvm", "tcg")
    assert set(rig["libvirt"]) == {"a", "b"} and rig["libvirt_version"].count(".") == 2
    assert cell["network"]["interfaces"]["a/link0"]["model"] == "e1000"
    assert json.loads((through_libvirt["dir"] / "run.json").read_text())["backend"] == "libvirt"
    for xml in sorted((through_libvirt["dir"] / "cells").glob("*/*.xml")):
        checked = subprocess.run(["virt-xml-validate", str(xml), "domain"], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr + checked.stdout
    assert (through_libvirt["dir"] / "cells" / "nic=e1000" / "a.serial.log").read_text().strip()
    assert domains() == set(), "the run left domains behind"


def test_niclab_down_destroys_the_domains_of_a_killed_run(libvirtd, repo, tmp_path):
    proc = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--backend", "libvirt", "--out", str(tmp_path))
    try:
        wait_for_line(proc, "guests answering", 600)
        left = domains()
        assert len(left) == 2
    finally:
        proc.kill()
        proc.wait()
    assert domains() == left, "a killed harness's domains keep running: that is what niclab down is for"
    (tmp_path / "rt").mkdir(mode=0o700)  # no rig a developer holds is stopped
    down = subprocess.run(
        [sys.executable, "-m", "niclab", "down"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "rt")},
    )
    assert down.returncode == 0, down.stderr
    assert sorted(down.stdout.splitlines()) == sorted(
        f"destroyed libvirt domain {name} on qemu:///system" for name in left
    )
    assert domains() == set()
