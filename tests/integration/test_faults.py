"""Faults with real guests: a guest killed mid-benchmark, a hung KVM, interrupts at every stage,
two runs at once, private control sockets. Each test states the guarantee it checks
(docs/architecture.md, "Failure handling", lists them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import image_view, run_dirs
from tests.records import read_records

from .processes import default_signals, niclab, qemus_under, wait_for_line, wait_no_qemu

TWO_CELLS = """\
name: faults
description: Two cells; the first one's guest a is killed during its long TCP_STREAM.
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
matrix:
  seconds: [40, 3]
benchmarks:
  - netperf: {test: TCP_RR, seconds: 2}
  - netperf:
      test: TCP_STREAM
      seconds: ${seconds}
"""


def recorded_pid(run: Path, cell: str, name: str) -> int:
    return json.loads((run / "cells" / cell / "pids" / f"{name}.json").read_text())["pid"]


def test_a_guest_killed_mid_benchmark_fails_its_cell_and_the_next_cell_runs(image, tmp_path):
    scenario = tmp_path / "faults.yaml"
    scenario.write_text(TWO_CELLS)
    out = tmp_path / "runs"
    proc = niclab("run", str(scenario), "--out", str(out))
    seen = wait_for_line(proc, "running netperf TCP_STREAM", 300)
    run = Path(next(line for line in seen if "run directory" in line).split("run directory ", 1)[1].strip())
    time.sleep(3)  # in the middle of the 40 s stream
    pid = recorded_pid(run, "seconds=40", "qemu-a")
    os.kill(pid, signal.SIGKILL)
    rest, err = proc.communicate(timeout=300)
    err = "".join(seen) + err
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert re.search(rf"node a is gone: process qemu-a \(pid {pid}\) was killed by signal 9", err), err
    records = read_records(run / "results.jsonl")
    # What was measured before the kill is kept; the second cell ran in full and passed.
    measured = {(r["cell"], r["name"]) for r in records if r["type"] == "measurement"}
    assert ("seconds=40", "netperf.TCP_RR.transaction_rate") in measured
    assert ("seconds=40", "netperf.TCP_STREAM.throughput_mbps") not in measured
    assert {
        ("seconds=3", "netperf.TCP_RR.transaction_rate"),
        ("seconds=3", "netperf.TCP_STREAM.throughput_mbps"),
    } <= measured
    errors = [r for r in records if r["type"] == "error"]
    assert {r["cell"] for r in errors} == {"seconds=40"}
    assert any(r["stage"] == "cell" and "killed by signal 9" in r["message"] for r in errors)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and "node a is gone" in info["message"]
    assert "scenario faults · cell seconds=3" in rest  # its table was printed
    assert wait_no_qemu(tmp_path, seconds=5) == []


HUNG_KVM = """\
#!{python}
# A KVM that hangs: a guest asked for under KVM runs under TCG but stopped (-S),
# so it never answers, as on hosts where KVM spins in the kernel.
import os, sys
args = sys.argv[1:]
if any("accel=kvm" in a for a in args):
    args = [a.replace("accel=kvm", "accel=tcg") for a in args]
    args = ["max" if i > 0 and args[i - 1] == "-cpu" else a for i, a in enumerate(args)]
    args.insert(0, "-S")
os.execvp("qemu-system-x86_64", ["qemu-system-x86_64", *args])
"""


def hung_kvm(tmp_path: Path) -> dict:
    wrapper = tmp_path / "qemu-hung-kvm"
    wrapper.write_text(HUNG_KVM.format(python=sys.executable))
    wrapper.chmod(0o755)
    return {
        "NICLAB_QEMU": str(wrapper),
        "NICLAB_ACCEL": "kvm",
        "NICLAB_KVM_DEADLINE": "6",
        "NICLAB_CACHE": str(tmp_path / "cache"),
    }


def test_guests_hung_under_kvm_fall_back_to_tcg_and_say_so(image, repo, tmp_path):
    env = {**hung_kvm(tmp_path), "NICLAB_IMAGE": str(image.directory)}
    started = time.monotonic()
    proc = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(tmp_path / "runs"), env=env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    warning = re.search(r"warning: KVM did not work here \((.*)\); stopped the guests", err)
    assert warning and "the guest agent did not answer in time" in warning.group(1), err
    assert time.monotonic() - started < 300
    [run] = run_dirs(tmp_path / "runs")
    cell = next(r for r in read_records(run / "results.jsonl") if r["type"] == "cell")
    assert cell["rig"]["accel"] == "tcg" and "KVM did not work here" in cell["rig"]["accel_fallback"]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "ok" and any("KVM did not work here" in w for w in info["warnings"])
    assert "accel=tcg" in out and "warning: KVM did not work here" in out
    cell_dir = run / "cells" / "nic=e1000"
    assert (cell_dir / "a.serial.kvm.log").exists() and (cell_dir / "a.serial.log").exists()
    # The cache now says KVM does not work for this QEMU and image: the next run does not try it.
    env.pop("NICLAB_ACCEL")
    accel = subprocess.run(
        [sys.executable, "-m", "niclab", "accel"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert accel.returncode == 0 and accel.stdout.startswith("tcg (decided"), accel.stdout + accel.stderr
    assert "KVM failed a real run" in accel.stdout
    assert wait_no_qemu(tmp_path, seconds=5) == []


# -- interrupts: everything gone within 5 s, whatever the moment ------------

MOMENTS = {
    "saving": ("booting a guest to save its state", "fresh"),
    "restoring": ("restoring 2 guests", {}),
    "kvm-fallback": ("booting 2 guests (kvm", "hung"),
    "benchmark": ("running netperf TCP_STREAM", {}),
}


@pytest.mark.parametrize(
    "how,moment",
    [
        ("SIGINT", "saving"),
        ("SIGINT", "restoring"),
        ("SIGINT", "kvm-fallback"),
        ("SIGINT", "benchmark"),
        ("SIGTERM", "benchmark"),
    ],
)
def test_an_interrupt_at_any_moment_stops_every_guest_within_5_s(image, repo, tmp_path, how, moment):
    line, extra = MOMENTS[moment]
    env = {"NICLAB_IMAGE": str(image.directory)}
    if extra == "hung":
        env.update(hung_kvm(tmp_path), NICLAB_KVM_DEADLINE="120")
    if extra == "fresh":  # the image seen from a directory of its own: no state saved yet, one is made first
        env["NICLAB_IMAGE"] = str(image_view(image, tmp_path))
    proc = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(tmp_path / "runs"), env=env)
    wait_for_line(proc, line, 300)
    time.sleep(0.5)
    assert qemus_under(tmp_path), "no guest was running at the moment of the signal"
    sent = time.monotonic()
    proc.send_signal(getattr(signal, how))
    _out, err = proc.communicate(timeout=60)
    left = wait_no_qemu(tmp_path, seconds=5)
    assert left == [] and time.monotonic() - sent < 5, f"guests left {time.monotonic() - sent:.1f} s after {how}"
    assert proc.returncode == 1
    assert "interrupted; the guests were stopped" in err and "Traceback" not in err
    [run] = run_dirs(tmp_path / "runs")
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    if extra == "fresh":  # no half-saved state is left to be found
        assert not [d for d in Path(env["NICLAB_IMAGE"], "states").glob("*") if d.is_dir()]


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_pytest_session_stops_its_guests_and_starts_no_other_test(image, repo, tmp_path, how):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (repo / "scenarios" / "two-node.yaml").read_text()
    (scenarios / "first.yaml").write_text(text.replace("name: two-node", "name: first"))
    (scenarios / "second.yaml").write_text(text.replace("name: two-node", "name: second"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-s",
            "scenarios",
            "--niclab-out",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env={**os.environ, "NICLAB_IMAGE": str(image.directory)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_signals,
    )
    wait_for_line(proc, "running netperf TCP_STREAM", 300, stream=proc.stdout)
    sent = time.monotonic()
    proc.send_signal(getattr(signal, how))
    out, _ = proc.communicate(timeout=60)
    assert wait_no_qemu(tmp_path, seconds=5) == [] and time.monotonic() - sent < 5
    assert proc.returncode == 2, out  # pytest's "interrupted"
    assert "KeyboardInterrupt" in out and re.search(r"=+ .*no tests ran|=+ .*interrupted", out), out[-2000:]
    runs = run_dirs(tmp_path / "runs")
    assert len(runs) == 1, "a second scenario started after the interrupt"
    assert json.loads((runs[0] / "run.json").read_text())["status"] == "interrupted"


# -- isolation ----------------------------------------------------------------


def test_two_runs_of_one_scenario_at_once_both_succeed(image, repo, tmp_path):
    out = tmp_path / "runs"
    procs = [niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(out)) for _ in range(2)]
    results = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr
    runs = run_dirs(out)
    assert len(runs) == 2
    for run in runs:
        assert json.loads((run / "run.json").read_text())["status"] == "ok"
        assert any(r["type"] == "measurement" for r in read_records(run / "results.jsonl"))
    assert wait_no_qemu(tmp_path, seconds=5) == []


def listening_sockets(pids: set[int]) -> list[tuple[str, str]]:
    """(protocol, local address) of every inet socket the processes hold, from `ss`."""
    found = []
    text = subprocess.run(["ss", "-H", "-tuanp"], capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            fields = line.split()
            found.append((fields[0], fields[4]))
    return found


def test_control_sockets_are_private_and_nothing_listens_beyond_loopback(image, repo, tmp_path):
    from niclab.model.scenario import load_scenario
    from niclab.plumbing.backends import get_backend
    from niclab.run.session import Session
    from niclab.ui.pytest_plugin import choose_cell

    cell = choose_cell(load_scenario(repo / "scenarios" / "two-node.yaml"), None)
    workdir = tmp_path / "rig"
    with Session(cell, get_backend("qemu", image=image), workdir):
        assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
        for name in ("a.qga", "a.qmp", "b.qga", "b.qmp"):
            mode = (workdir / name).stat()
            assert stat.S_ISSOCK(mode.st_mode) and stat.S_IMODE(mode.st_mode) & 0o077 == 0, (name, oct(mode.st_mode))
        pids = set(qemus_under(tmp_path))
        assert len(pids) == 2
        sockets = listening_sockets(pids)
        assert sockets, "ss shows no socket of the guests' QEMUs (the cables are UDP sockets)"
        assert all(address.startswith("127.0.0.1:") for _, address in sockets), sockets
    assert wait_no_qemu(tmp_path, seconds=5) == []
