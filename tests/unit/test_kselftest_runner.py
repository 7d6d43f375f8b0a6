"""The kselftest benchmark through the runner: test records, a crash that boots the rig anew, and what follows."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from niclab.model.bench import kselftest
from niclab.model.scenario import load_scenario
from niclab.model.selftests import SelftestBundle
from niclab.run import session as session_module
from niclab.run.reader import read_results
from niclab.run.records import MeasurementRecord, RunRecord
from niclab.run.records import TestRecord as KsftRecord
from niclab.run.results import RunDir, new_run_info
from niclab.run.runner import Runner
from tests.fakes import FakeBackend, Replay

SCENARIO = """\
name: selftests-fake
nodes: [a, b]
kernel: trixie
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - kselftest: {targets: [drivers/net]}
"""
PING = "TAP version 13\n1..2\nok 1 ping.test_v4\nok 2 ping.test_v6 # SKIP Test requires IPv6 connectivity\n"
STATS = "TAP version 13\n1..1\nok 1 stats.pkt_byte_sum # SKIP qstats not supported by the device\n"
PROGRAMS = r"timeout -s KILL \d+ \./"


@pytest.fixture(scope="module")
def replay() -> Replay:
    return Replay.load()


@pytest.fixture
def asked(tmp_path, monkeypatch) -> list[str]:
    """Which node's kernel the session asked the selftests of (the bundle given is a fixed one)."""
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    found = SelftestBundle(
        archive,
        "Debian trixie linux-source-6.12 6.12.107-1",
        "6.12.107",
        (("drivers/net", "ping.py"), ("drivers/net", "queues.py"), ("drivers/net", "stats.py")),
    )
    asked: list[str] = []

    def given(scenario, progress, node, spec):
        asked.append(f"{node} {scenario.kernel_of(node)}")
        return found

    monkeypatch.setattr(session_module, "kselftest_bundle", given)
    return asked


def fake(replay: Replay) -> FakeBackend:
    backend = FakeBackend(replay)
    backend.when(r"ssh-keygen|tar -xzf|sshd-up|mkdir -p /root/\.ssh|ssh -q -o ConnectTimeout", result="")
    backend.when(r"\.ssh/id_ed25519\.pub", op="get", result=b"ssh-ed25519 AAAA niclab")
    backend.when(r"^dmesg", result="[ 1.0] niclab: kselftest start\n")
    backend.when(PROGRAMS + r"ping\.py", result={"returncode": 0, "stdout": PING, "seconds": 2.0})
    backend.when(PROGRAMS + r"stats\.py", result={"returncode": 4, "stdout": STATS, "seconds": 1.0})
    backend.when(PROGRAMS + r"queues\.py", result={"returncode": 1, "stdout": "not ok 1 queues.nl_get_queues\n"})
    return backend


def run(tmp_path: Path, backend: FakeBackend) -> Path:
    path = tmp_path / "selftests.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    run_path = tmp_path / "run"
    run_path.mkdir()
    cells = [c.id for c in scenario.cells]
    info = new_run_info(
        scenario=scenario.name,
        scenario_file=str(path),
        scenario_text=SCENARIO,
        cells=cells,
        cell_order=cells,
        backend="fake",
        command=["niclab", "run"],
    )
    Runner(backend, RunDir(run_path), info, lambda line: None).run(scenario.cells)
    return run_path


def kselftest_run(tmp_path: Path, replay: Replay, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run of SCENARIO through the fake, with a fixed bundle (for tests of every record kind)."""
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    found = SelftestBundle(archive, "a test's", "6.12.107", (("drivers/net", "ping.py"),))
    monkeypatch.setattr(session_module, "kselftest_bundle", lambda *args: found)
    return run(tmp_path, fake(replay))


def test_every_program_and_subtest_is_a_test_record_with_the_card_and_kernel(tmp_path, replay, asked):
    run_path = run(tmp_path, fake(replay))
    records = [r for _, r in read_results(run_path / "results.jsonl")]
    tests = {(r.test, r.subtest): r for r in records if isinstance(r, KsftRecord)}
    assert tests[("ping.py", None)].result == "pass"
    assert tests[("ping.py", "ping.test_v6")].result == "skip"
    assert tests[("queues.py", None)].result == "fail"
    assert tests[("queues.py", None)].reason == "queues.nl_get_queues failed"
    assert tests[("stats.py", None)].reason == "stats.pkt_byte_sum: qstats not supported by the device"
    ping = tests[("ping.py", None)]
    assert (ping.node, ping.remote, ping.link, ping.run, ping.target) == ("a", "b", 0, "0.1", "drivers/net")
    assert ping.nic.model == "e1000" and ping.nic.driver == "e1000"
    assert ping.tests_from == "Debian trixie linux-source-6.12 6.12.107-1"
    assert ping.kernel  # the node's kernel as it reported it
    [run_record] = [r for r in records if isinstance(r, RunRecord)]
    assert run_record.tool == "kselftest"
    counts = {r.metric: r.value for r in records if isinstance(r, MeasurementRecord)}
    assert counts == {"passed": 1.0, "failed": 1.0, "skipped": 1.0, "xfailed": 0.0, "crashed": 0.0}
    assert asked == ["a trixie"]  # the client's kernel's tests
    assert (run_path / "cells/default/kselftest.attempted").read_text().count("\n") == 3


def test_a_crash_boots_the_rig_anew_and_the_remaining_programs_run(tmp_path, replay, asked):
    backend = fake(replay)
    backend.kill("a", on=PROGRAMS + r"queues\.py", why="QEMU exited: the guest panicked")
    run_path = run(tmp_path, backend)
    assert len(backend.realizations) == 2  # booted anew after the crash
    records = [r for _, r in read_results(run_path / "results.jsonl")]
    tests = {(r.test, r.subtest): r for r in records if isinstance(r, KsftRecord)}
    assert tests[("queues.py", None)].result == "crash"
    assert tests[("queues.py", None)].reason == "a: QEMU exited: the guest panicked"
    assert tests[("stats.py", None)].result == "skip"  # ran on the new boot
    assert not [r for r in records if r.type == "error"]


def test_a_run_that_stops_part_way_keeps_its_tests_and_records_why(tmp_path, replay, asked, monkeypatch):
    monkeypatch.setattr(kselftest, "MAX_RESTARTS", 0)
    backend = fake(replay)
    backend.kill("a", on=PROGRAMS + r"queues\.py", why="QEMU exited: the guest panicked")
    run_path = run(tmp_path, backend)
    records = [r for _, r in read_results(run_path / "results.jsonl")]
    tests = {(r.test, r.subtest): r for r in records if isinstance(r, KsftRecord)}
    assert tests[("ping.py", None)].result == "pass"
    assert tests[("queues.py", None)].result == "crash"
    assert ("stats.py", None) not in tests
    [error, cell] = [r for r in records if r.type == "error"]
    assert error.stage == "benchmark" and "queues.py: it crashed the guest; 1 test(s) not run" in error.message
    assert (
        cell.stage == "cell" and cell.message == "node a is gone: QEMU exited: the guest panicked"
    )  # and the cell ends
    [run_record] = [r for r in records if isinstance(r, RunRecord)]
    assert run_record.host_load is None  # the guests' PIDs changed: no contention verdict
