"""Driver knobs set in real guests: coalescing and rings by ethtool, module parameters at boot, each read back;
and a knob the driver does not take refused before any benchmark, with what the driver supports."""

from __future__ import annotations

import pytest

from tests.helpers import run_dirs
from tests.records import read_records

from .processes import niclab

SCENARIO = """\
name: knobs
nodes: [a, b]
links:
  - between: [a, b]
    nic: ${nic}
    coalesce: {rx-usecs: 125}
    rings: {a: {rx: 512, tx: 1024}, b: {}}
    module_params: {a: {InterruptThrottleRate: 4000, copybreak: 128}}
matrix:
  nic: [e1000-82545em, e1000]
benchmarks:
  - netperf: {test: TCP_RR, seconds: 2}
"""


def test_knobs_are_set_read_back_and_refused_when_the_driver_cannot(image, tmp_path):
    scenario = tmp_path / "knobs.yaml"
    scenario.write_text(SCENARIO)
    proc = niclab("run", str(scenario), "--out", str(tmp_path / "runs"))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err  # the e1000 (82540EM) cell fails, by design
    (run_dir,) = run_dirs(tmp_path / "runs")
    records = read_records(run_dir / "results.jsonl")
    cell = next(r for r in records if r["type"] == "cell" and r["cell"] == "nic=e1000-82545em")
    observed = cell["network"]["observed"]
    assert observed["a"]["port link0"]["coalesce"]["rx-usecs"] == "125"  # what ethtool -c reports back
    assert observed["a"]["port link0"]["rings"]["rx"] == "512" and observed["a"]["port link0"]["rings"]["tx"] == "1024"
    assert "rings" not in observed["b"]["port link0"] and observed["b"]["port link0"]["coalesce"]["rx-usecs"] == "125"
    params = observed["a"]["module_params"]
    assert params["e1000.copybreak"]["sysfs"] == "128"  # e1000 shows this one in /sys/module
    itr = params["e1000.InterruptThrottleRate"]
    assert itr["sysfs"] is None and any(
        "Interrupt Throttling Rate (ints/sec) set to 4000" in line for line in itr["log"]
    )
    assert "module_params" not in observed["b"]  # asked for a only
    assert any(r["type"] == "measurement" and r["cell"] == "nic=e1000-82545em" for r in records)
    # The 82540EM's driver refuses ethtool -C: the cell fails before its benchmark, saying so.
    errors = [r for r in records if r["type"] == "error" and r["cell"] == "nic=e1000"]
    assert errors and "the e1000 driver does not support coalesce rx-usecs" in errors[0]["message"]
    assert (
        "it supports no coalesce setting (ethtool -c: netlink error: Operation not supported)" in errors[0]["message"]
    )
    assert not any(r["type"] == "measurement" and r["cell"] == "nic=e1000" for r in records)


@pytest.mark.measures
def test_the_coalescing_sweep_changes_what_it_should(image, repo, tmp_path):
    """Mininet's lesson: check that a knob acts, not only that it is set. e1000's rx-usecs caps the
    interrupt rate (QEMU emulates the card's ITR), so at 2.5 ms a request/response pair waits for it."""
    proc = niclab(
        "run",
        str(repo / "scenarios" / "coalescing.yaml"),
        "--cell",
        "rx_usecs=0",
        "--cell",
        "rx_usecs=2500",
        "--repeat",
        "1",  # one run per cell shows the knob acting; the scenario's three are for judging a difference
        "--out",
        str(tmp_path),
    )
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    (run_dir,) = run_dirs(tmp_path)
    records = read_records(run_dir / "results.jsonl")
    rate = {
        r["cell"]: r["value"]
        for r in records
        if r["type"] == "measurement" and r["name"] == "netperf.TCP_RR.transaction_rate"
    }
    assert rate["rx_usecs=2500"] < 0.6 * rate["rx_usecs=0"], rate
    for cell in (r for r in records if r["type"] == "cell"):
        asked = cell["params"]["rx_usecs"]
        assert cell["network"]["observed"]["a"]["port link0"]["coalesce"]["rx-usecs"] == str(asked)


QUEUES = """\
name: queues
nodes:
  a: {cpus: 2}
  b: {cpus: 2}
links:
  - between: [a, b]
    nic: ${nic}
    queues: {combined: 2}
matrix:
  nic: [vmxnet3, virtio]
benchmarks:
  - netperf: {test: TCP_RR, seconds: 1}
"""


def test_queues_are_asked_of_the_driver_and_read_back(image, tmp_path):
    """vmxnet3 opens a channel per vCPU (and cannot change them): two asked, two read back. QEMU's virtio
    behind a socket has one queue pair: two are refused before the benchmark, with the driver's maximum."""
    scenario = tmp_path / "queues.yaml"
    scenario.write_text(QUEUES)
    proc = niclab("run", str(scenario), "--out", str(tmp_path / "runs"))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err  # the virtio cell fails, by design
    (run_dir,) = run_dirs(tmp_path / "runs")
    records = read_records(run_dir / "results.jsonl")
    cell = next(r for r in records if r["type"] == "cell" and r["cell"] == "nic=vmxnet3")
    assert cell["network"]["observed"]["b"]["port link0"]["queues"]["combined"] == "2"
    assert any(r["type"] == "measurement" and r["cell"] == "nic=vmxnet3" for r in records)
    (error,) = [r for r in records if r["type"] == "error" and r["cell"] == "nic=virtio"]
    assert "queues combined 2 is above the virtio_net driver's maximum, 1 (ethtool -l)" in error["message"]
