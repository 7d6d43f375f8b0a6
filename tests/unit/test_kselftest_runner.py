"""The kselftest benchmark through the runner: test records, a crash that boots the rig anew, and what follows.

The replay fake answers three programs (tests/helpers.selftests_fake): ping.py passes with its IPv6 subtest
skipped, stats.py skips, queues.py fails.
"""

from __future__ import annotations

import tarfile

import pytest

from niclab.model.bench import kselftest
from niclab.model.selftests import SelftestBundle
from niclab.run import session as session_module
from niclab.run.reader import read_results
from niclab.run.records import MeasurementRecord, RunRecord
from niclab.run.records import TestRecord as KsftRecord
from tests.helpers import SELFTEST_PROGRAM, run_selftests, selftests_fake


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


def test_every_program_and_subtest_is_a_test_record_with_the_card_and_kernel(tmp_path, replay, asked):
    run_path = run_selftests(tmp_path, selftests_fake(replay))
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
    backend = selftests_fake(replay)
    backend.kill("a", on=SELFTEST_PROGRAM + r"queues\.py", why="QEMU exited: the guest panicked")
    run_path = run_selftests(tmp_path, backend)
    assert len(backend.realizations) == 2  # booted anew after the crash
    records = [r for _, r in read_results(run_path / "results.jsonl")]
    tests = {(r.test, r.subtest): r for r in records if isinstance(r, KsftRecord)}
    assert tests[("queues.py", None)].result == "crash"
    assert tests[("queues.py", None)].reason == "a: QEMU exited: the guest panicked"
    assert tests[("stats.py", None)].result == "skip"  # ran on the new boot
    assert not [r for r in records if r.type == "error"]


def test_a_run_that_stops_part_way_keeps_its_tests_and_records_why(tmp_path, replay, asked, monkeypatch):
    monkeypatch.setattr(kselftest, "MAX_RESTARTS", 0)
    backend = selftests_fake(replay)
    backend.kill("a", on=SELFTEST_PROGRAM + r"queues\.py", why="QEMU exited: the guest panicked")
    run_path = run_selftests(tmp_path, backend)
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
