"""`pytest scenarios/`: scenario cells as test items, run for real, in parallel too.

- `pytest -n 2 scenarios/two-node.yaml scenarios/wan.yaml` passes with one
  item per cell, each in its own run directory (xdist workers never collide),
  and the JUnit XML carries each cell's headline figures;
- a scenario whose expectation cannot hold fails exactly its item, with the
  expectation and the value measured, while the others pass;
- a hand-written test's `niclab_session` boots a cell, measures, and leaves no guest
  behind, also when the test fails.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from .processes import qemus_under, wait_no_qemu


def pytest_in(directory: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_shipped_scenarios_pass_in_parallel_with_junit_properties(image, repo, tmp_path):
    out, junit = tmp_path / "runs", tmp_path / "junit.xml"
    result = pytest_in(
        repo,
        "-n",
        "2",
        "scenarios/two-node.yaml",
        "scenarios/wan.yaml",
        "--niclab-out",
        str(out),
        f"--junitxml={junit}",
        "-q",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "5 passed" in result.stdout
    cases = {case.get("name"): case for case in ElementTree.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {
        "nic=e1000",
        "delay=5ms,loss=0%",
        "delay=5ms,loss=1%",
        "delay=25ms,loss=0%",
        "delay=25ms,loss=1%",
    }
    properties = {p.get("name"): p.get("value") for p in cases["nic=e1000"].iter("property")}
    assert properties["netperf.TCP_STREAM.throughput_mbps"].endswith(" Mbit/s")
    assert float(properties["netperf.TCP_STREAM.throughput_mbps"].split()[0]) > 0
    run_dirs = [
        Path(p.get("value"))
        for case in cases.values()
        for p in case.iter("property")
        if p.get("name") == "niclab_run_dir"
    ]
    assert len(set(run_dirs)) == 5 and all((d / "results.jsonl").is_file() for d in run_dirs)
    assert wait_no_qemu(out, seconds=2) == []


BROKEN_EXPECTATION = "  - netperf.TCP_STREAM.throughput_mbps > 1000000\n"


def test_a_missed_expectation_fails_exactly_its_item_and_the_session_cleans_up(image, repo, tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (repo / "scenarios" / "two-node.yaml").read_text().replace("seconds: 5", "seconds: 2")
    (scenarios / "fine.yaml").write_text(text.replace("name: two-node", "name: fine"))
    (scenarios / "broken.yaml").write_text(
        text.replace("name: two-node", "name: broken") + "expect:\n" + BROKEN_EXPECTATION
    )
    (tmp_path / "test_by_hand.py").write_text(
        "def test_session_measures(niclab_session):\n"
        "    with niclab_session('scenarios/fine.yaml', cell={'nic': 'e1000'}) as s:\n"
        "        assert 'driver: e1000' in s.node('a').run('ethtool -i link0').stdout\n"
        "        rate = [m.value for m in s.bench('netperf', test='TCP_RR', seconds=2)\n"
        "                if m.metric == 'transaction_rate']\n"
        "        assert rate[0] > 100\n\n"
        "def test_session_cleans_up_a_failing_test(niclab_session):\n"
        "    with niclab_session('scenarios/fine.yaml') as s:\n"
        "        s.node('b').run('true')\n"
        "        assert False, 'this test fails on purpose'\n"
    )
    result = pytest_in(
        tmp_path,
        "scenarios",
        "test_by_hand.py",
        "--niclab-out",
        str(tmp_path / "runs"),
        "-q",
        "--basetemp",
        str(tmp_path / "base"),
    )
    assert result.returncode == 1
    assert "2 failed, 2 passed" in result.stdout, result.stdout[-3000:]
    assert "FAILED scenarios/broken.yaml::nic=e1000" in result.stdout
    assert "FAILED test_by_hand.py::test_session_cleans_up_a_failing_test" in result.stdout
    assert "1 expectation(s) missed, 0 failure(s) in cell nic=e1000 of broken.yaml:" in result.stdout
    assert "missed: netperf.TCP_STREAM.throughput_mbps > 1000000: measured" in result.stdout
    assert qemus_under(tmp_path) == []  # no guest survived either failure
