"""`niclab run` end to end on two emulated e1000 nodes, and its cleanup when things go wrong."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from niclab.plumbing.accel import choose_accel
from tests.helpers import run_dirs
from tests.records import read_records

from .processes import niclab, wait_for_line, wait_no_qemu


def only_run_dir(out: Path) -> Path:
    runs = run_dirs(out)
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.measures
def test_two_node_scenario_measures_and_cleans_up(image, repo, tmp_path):
    proc = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(tmp_path))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    run = only_run_dir(tmp_path)
    records = read_records(run / "results.jsonl")
    by_name = {r["name"]: r for r in records if r["type"] == "measurement"}
    stream = by_name["netperf.TCP_STREAM.throughput_mbps"]
    rr = by_name["netperf.TCP_RR.transaction_rate"]
    # Plausible under TCG here: hundreds of Mbit/s and thousands of transactions/s.
    assert 50 < stream["value"] < 20000 and stream["unit"] == "Mbit/s"
    assert 200 < rr["value"] < 200000 and rr["unit"] == "/s"
    run_record = next(r for r in records if r["type"] == "run" and r["run"] == stream["run"])
    assert run_record["nics"]["a"]["driver"] == "e1000" and run_record["nics"]["b"]["pci_id"] == "8086:100e"
    assert run_record["counters"]["a"]["link0"]["tx_packets"] > 1000  # what the NIC counted during the run
    assert run_record["counters"]["b"]["link0"]["interrupts"] > 0
    # The host meanwhile (niclab.plumbing.contention): each guest's vCPU thread found by name and measured.
    load = run_record["host_load"]
    assert set(load["vcpu_run_pct"]) == {"a", "b"} and all(pct > 1 for pct in load["vcpu_run_pct"].values())
    assert load["qemu_cpu_pct"] > 10 and load["seconds"] > 1 and isinstance(load["contended"], bool)
    summaries = {r["name"]: r for r in records if r["type"] == "summary"}
    assert summaries["netperf.TCP_STREAM.throughput_mbps"]["samples"] == [stream["value"]]
    cell = next(r for r in records if r["type"] == "cell")
    assert cell["rig"]["accel"] in ("kvm", "tcg") and cell["rig"]["image"] == image.id
    assert cell["nodes"]["a"]["kernel"] == image.manifest["kernel_version"]
    # Debian's kernel has a PVH entry: the guests boot it unpacked (image.pvh), with no decompressor to run
    assert image.manifest["pvh_kernel"] and cell["rig"]["kernel_boot"] == "pvh"
    # The table and the path a user sees.
    assert "scenario two-node · cell nic=e1000 · accel=" in out
    assert "netperf TCP_STREAM" in out and "throughput_mbps" in out and "transaction_rate" in out
    assert f"results: {run / 'results.jsonl'}" in out
    assert f"report:  {run / 'report.html'}" in out
    assert "netperf TCP_STREAM" in (run / "report.html").read_text()
    # Provenance beside the numbers: run.json, raw tool output, serial logs.
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "ok" and info["cells"] == ["nic=e1000"]
    assert "THROUGHPUT=" in next((run / "raw" / "nic=e1000").glob("netperf-TCP_STREAM-*.txt")).read_text()
    assert "niclab: node a: drivers loaded" in (run / "cells" / "nic=e1000" / "a.serial.log").read_text()
    assert wait_no_qemu(tmp_path, seconds=2) == []


def broken_image(image, tmp_path: Path, cmdline: str) -> Path:
    """The real kernel and initramfs with a kernel command line that never starts the agent."""
    directory = tmp_path / "image"
    directory.mkdir()
    for name in ("vmlinuz", "initrd.img"):
        (directory / name).symlink_to(getattr(image, "kernel" if name == "vmlinuz" else "initrd"))
    (directory / "manifest.json").write_text(json.dumps({**image.manifest, "cmdline": cmdline}))
    return directory


def test_guest_that_panics_is_reported_with_its_serial_log(image, repo, tmp_path):
    bad = broken_image(image, tmp_path, "console=ttyS0 panic=-1 rdinit=/no/such/init")
    proc = niclab(
        "run",
        str(repo / "scenarios" / "two-node.yaml"),
        "--out",
        str(tmp_path / "runs"),
        env={"NICLAB_IMAGE": str(bad)},
    )
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "did not come up" in err and "exited" in err
    assert "Kernel panic" in err or "No working init" in err or "rdinit" in err  # the serial tail
    assert "Traceback" not in err
    run = only_run_dir(tmp_path / "runs")
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    errors = [r for r in read_records(run / "results.jsonl") if r["type"] == "error"]
    assert errors and errors[0]["stage"] == "cell"
    assert wait_no_qemu(tmp_path, seconds=2) == []


def test_guest_that_never_answers_times_out_and_is_stopped(image, repo, tmp_path):
    # `cat` as init waits on the console forever: the kernel runs, the agent never starts.
    bad = broken_image(image, tmp_path, "console=ttyS0 panic=-1 rdinit=/usr/bin/cat")
    started = time.monotonic()
    proc = niclab(
        "run",
        str(repo / "scenarios" / "two-node.yaml"),
        "--out",
        str(tmp_path / "runs"),
        env={"NICLAB_IMAGE": str(bad), "NICLAB_BOOT_TIMEOUT": "15"},
    )
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "the guest agent did not answer in time" in err and "waited 15 s of 15" in err
    assert time.monotonic() - started < 120
    assert wait_no_qemu(tmp_path, seconds=2) == []


def test_killed_harness_leaves_no_guest(image, repo, tmp_path):
    # A cache and a runtime directory of its own, so `niclab down` below sees only this harness's records
    # (and stops no rig a developer holds).
    cache = tmp_path / "cache"
    (tmp_path / "rt").mkdir(mode=0o700)
    env = {
        "NICLAB_IMAGE": str(image.directory),
        "NICLAB_CACHE": str(cache),
        "NICLAB_ACCEL": choose_accel(image).accel,
        "XDG_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    proc = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(tmp_path / "runs"), env=env)
    wait_for_line(proc, "guests answering", 180)
    proc.kill()  # SIGKILL: no cleanup code runs in the harness
    proc.communicate(timeout=30)
    assert wait_no_qemu(tmp_path, seconds=10) == [], "QEMU outlived the killed harness"
    # `niclab down` clears the dead harness's records and finds nothing left to stop.
    down = niclab("down", env=env)
    out, err = down.communicate(timeout=60)
    assert down.returncode == 0, err
    assert "nothing to stop" in out or "stopped" in out
    assert not list((cache / "live").glob("*.json"))
    # and a new run of the same scenario, with the same cache, succeeds
    again = niclab("run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(tmp_path / "runs"), env=env)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert wait_no_qemu(tmp_path, seconds=5) == []
