"""The runner and the session without VMs: a FakeBackend replays what two real e1000 guests printed.

The replay (tests/data/replay/two-node-e1000.json, see tests/fakes.py) holds
every guest command a real Session ran on scenarios/two-node.yaml with the
answer the guest gave; each test adds its faults on top and checks what the
runner wrote: results.jsonl, run.json, the cell's log.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model.scenario import load_scenario
from niclab.plumbing.backends.qemu import BootError
from niclab.plumbing.netconf import clock, pairs
from niclab.run.plan import estimates
from niclab.run.progress import RunProgress
from niclab.run.runner import RunAborted
from niclab.run.session import Session
from tests.fakes import GUEST_CLOCK, FakeBackend, ReplayMiss
from tests.helpers import NETPERF_RR, NETPERF_STREAM, TWO_CELLS, TWO_NODE, Harness, harness

SCENARIO = TWO_NODE


# -- helpers ------------------------------------------------------------------


@pytest.fixture
def backend(replay):
    fake = FakeBackend(replay)
    yield fake
    assert fake.misses == [], "the replay did not answer every command the test meant to be answered"
    assert all(r.closed for r in fake.realizations), "a realization was not closed: a guest would be left running"


def keyvals(stdout: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"^([A-Z0-9_]+)=(-?[\d.]+)$", stdout, re.MULTILINE)}


def counters(stdout: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^([a-z_]+)=(\d+)$", stdout, re.MULTILINE)}


def with_throughput(result, value: float):
    """The replayed netperf result with another THROUGHPUT."""
    return replace(result, stdout=re.sub(r"^THROUGHPUT=.*$", f"THROUGHPUT={value}", result.stdout, flags=re.MULTILINE))


def final(info: dict) -> None:
    assert info["status"] in ("ok", "failed", "interrupted")
    assert info["finished_at"] is not None


# -- the fake itself ----------------------------------------------------------


def test_the_replay_was_captured_from_a_real_two_node_e1000_session(replay):
    assert replay.captured["scenario"] == "scenarios/two-node.yaml"
    assert replay.rig["facts"]["backend"] == "qemu"
    assert {c["node"] for c in replay.calls} == {"a", "b"}
    ops = {c["op"] for c in replay.calls}
    assert {"run", "spawn"} <= ops
    stream = replay.result(NETPERF_STREAM, node="a")
    assert stream.ok and keyvals(stream.stdout)["THROUGHPUT"] > 0
    assert not replay.result(r"-p 12866 ", node="a", note="probe").ok


def test_the_fake_rig_looks_like_the_qemu_backends(tmp_path, backend, replay):
    cell = load_scenario(Path(__file__).parents[2] / "scenarios" / "two-node.yaml").cells[0]
    with backend.realize(cell.scenario.topology(), tmp_path / "cell", lambda m: None) as rig:
        assert set(replay.rig["facts"]) <= rig.facts.model_fields_set
        assert rig.facts.backend == "fake" and rig.facts.accel == "tcg"
        assert rig.facts.qemu == replay.rig["facts"]["qemu"]
        assert {"/".join(map(str, k)): v for k, v in rig.macs.items()} == replay.rig["macs"]
        assert rig.gone() == {}
        assert rig.node("a").run("ping -n -q -c 10 -i 0.2 -s 56 -W 2 -I 198.18.0.1 198.18.0.2").ok
        # run-specific values are normalized: another count and interval get the same answer
        assert (
            "packets transmitted"
            in rig.node("a").run("ping -n -q -c 3 -i 0.5 -s 56 -W 2 -I 198.18.0.1 198.18.0.2").stdout
        )
        with pytest.raises(ReplayMiss, match="no recorded run answers 'uname -a'"):
            rig.node("a").run("uname -a")
    assert backend.realizations[0].closed
    backend.misses.clear()


def test_a_declared_death_makes_commands_fail_and_gone_say_why(tmp_path, backend):
    from niclab.plumbing.guest import AgentError

    cell = load_scenario(Path(__file__).parents[2] / "scenarios" / "two-node.yaml").cells[0]
    backend.kill("b", after=1)
    with backend.realize(cell.scenario.topology(), tmp_path / "cell", lambda m: None) as rig:
        ping = "ping -n -q -c 10 -i 0.2 -s 56 -W 2 -I 198.18.0.1 198.18.0.2"
        backend.when("^ping", node="b", result="pong")
        assert rig.node("b").run(ping).stdout == "pong"
        with pytest.raises(AgentError, match="Connection reset"):
            rig.node("b").run(ping)
        with pytest.raises(AgentError):
            rig.node("b").spawn("netserver")
        assert rig.gone() == {"b": "process qemu-b (pid 1) was killed by signal 9"}
        assert rig.node("a").run(ping).ok


# -- the session ----------------------------------------------------------------


def test_session_configures_checks_and_measures_through_the_replay(tmp_path, backend, replay):
    cell = load_scenario(Path(__file__).parents[2] / "scenarios" / "two-node.yaml").cells[0]
    with Session(cell, backend, tmp_path / "cell") as session:
        assert session.facts is not None and session.facts.rig.backend == "fake"
        assert session.facts.nodes["a"].interfaces["link0"].driver == "e1000"
        assert session.facts.network.interfaces["b/link0"].address == "198.18.0.2/24"
        assert session.facts.network.ping_seed == pairs.plan_seed(session.net)  # the record names the seed
        found = {m.metric: m.value for m in session.bench("netperf", test="TCP_RR", seconds=5)}
        iperf = {m.metric: m.value for m in session.bench("iperf3", seconds=3)}
        ping = {m.metric: m.value for m in session.bench("ping", count=10, interval=0.2)}
    expected = keyvals(replay.result(NETPERF_RR, node="a").stdout)
    assert found["transaction_rate"] == expected["THROUGHPUT"]
    assert found["latency_p99_us"] == expected["P99_LATENCY"]
    iperf3_json = json.loads(replay.result(r"^iperf3 -c ", node="a").stdout)
    assert iperf["throughput_mbps"] == iperf3_json["end"]["sum_received"]["bits_per_second"] / 1e6
    rtt = re.search(r"= [\d.]+/([\d.]+)/", replay.result(r"^ping -n -q -c 10 ", node="a").stdout)
    assert ping["rtt_avg_ms"] == float(rtt[1])
    assert (tmp_path / "cell" / "raw" / "netperf-TCP_RR-1.txt").exists()


# -- the runner: a good run -------------------------------------------------------


def test_a_good_run_records_provenance_runs_measurements_summaries_and_ends_ok(tmp_path, backend, replay):
    h = harness(tmp_path, backend)
    outcome = h.run()
    assert outcome.ok and outcome.status == "ok"

    records = h.records
    kinds = [r["type"] for r in records]
    condensed = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert condensed == ["cell", "run", "measurement", "summary", "run", "measurement", "summary", "cell_end"]
    assert all(r["cell"] == "default" and r["scenario"] == "fake-two-node" for r in records)

    cell = records[0]
    assert cell["rig"]["backend"] == "fake" and cell["rig"]["accel"] == "tcg"
    assert cell["host"]["python"]
    assert cell["network"]["interfaces"]["a/link0"]["address"] == "198.18.0.1/24"
    assert cell["network"]["observed"]["b"]["port link0"]["driver"] == "e1000"
    assert cell["nodes"]["b"]["interfaces"]["link0"]["pci_id"] == "8086:100e"
    assert "boot_s" in cell["timings"] and "agents_ready_since_start_s" in cell["timings"]

    stream = keyvals(replay.result(NETPERF_STREAM, node="a").stdout)
    rr = keyvals(replay.result(NETPERF_RR, node="a").stdout)
    measured = {r["name"]: r["value"] for r in h.of("measurement")}
    assert measured["netperf.TCP_STREAM.throughput_mbps"] == stream["THROUGHPUT"]
    assert measured["netperf.TCP_STREAM.retransmits"] == stream["LOCAL_TRANSPORT_RETRANS"]
    assert measured["netperf.TCP_RR.transaction_rate"] == rr["THROUGHPUT"]
    assert measured["netperf.TCP_RR.latency_mean_us"] == rr["MEAN_LATENCY"]

    run = h.of("run", label="netperf TCP_STREAM")[0]
    assert (run["run"], run["client"], run["server"], run["link"], run["repeat"], run["repeats"]) == (
        "0.1",
        "a",
        "b",
        0,
        1,
        1,
    )
    assert run["accel"] == "tcg" and run["nics"]["a"]["driver"] == "e1000"
    # the NIC counters read before and after the stream, as replayed in that order
    reads = [
        c["result"]["stdout"]
        for c in replay.calls
        if c["node"] == "a" and c["op"] == "run" and "statistics/$c" in c["command"]
    ]
    assert (
        run["counters"]["a"]["link0"]["tx_packets"]
        == (counters(reads[1])["tx_packets"] - counters(reads[0])["tx_packets"])
        > 0
    )
    assert all(m["run"] == "0.1" for m in h.of("measurement", tool="netperf", test="TCP_STREAM"))

    summary = h.of("summary", name="netperf.TCP_STREAM.throughput_mbps")[0]
    assert summary["n"] == 1 and summary["samples"] == [stream["THROUGHPUT"]] and summary["runs"] == ["0.1"]
    assert set(h.records[-1]["nodes"]) == {"a", "b"}

    info = h.info()
    assert info["status"] == "ok" and info["message"] == "" and info["error"] is None
    assert info["finished_at"] is not None and info["cells"] == ["default"]
    assert "THROUGHPUT=" in (h.run_dir.raw_dir("default") / "netperf-TCP_STREAM-1.txt").read_text()
    assert "network up and checked" in (h.run_dir.cell_dir("default") / "cell.log").read_text()


def test_run_json_is_running_while_a_cell_runs_and_ends_ok(tmp_path, backend):
    h = harness(tmp_path, backend)
    seen = []
    backend.when(NETPERF_STREAM, node="a", call=lambda node, command: seen.append(h.info()))
    h.run()
    assert [(s["status"], s["finished_at"]) for s in seen] == [("running", None)]
    final(h.info())
    assert h.info()["status"] == "ok"


@pytest.mark.parametrize("scenario_repeat, runner_repeat", [(None, 3), (3, None), (2, 3)])
def test_repeats_give_a_run_record_each_and_one_summary_of_every_sample(
    tmp_path, backend, replay, scenario_repeat, runner_repeat
):
    text = SCENARIO + (f"repeat: {scenario_repeat}\n" if scenario_repeat else "")
    h = harness(tmp_path, backend, text, repeat=runner_repeat)
    recorded = replay.result(NETPERF_STREAM, node="a")
    backend.when(NETPERF_STREAM, node="a", results=[with_throughput(recorded, v) for v in (400.0, 410.0, 420.0)])
    assert h.run().ok

    for index, label in enumerate(("netperf TCP_STREAM", "netperf TCP_RR")):
        runs = h.of("run", label=label)
        assert [(r["run"], r["repeat"], r["repeats"]) for r in runs] == [(f"{index}.{n}", n, 3) for n in (1, 2, 3)]
    throughput = h.of("measurement", name="netperf.TCP_STREAM.throughput_mbps")
    assert [(m["run"], m["value"]) for m in throughput] == [("0.1", 400.0), ("0.2", 410.0), ("0.3", 420.0)]
    summaries = h.of("summary", name="netperf.TCP_STREAM.throughput_mbps")
    assert len(summaries) == 1
    summary = summaries[0]
    assert summary["n"] == 3 and summary["samples"] == [400.0, 410.0, 420.0]
    assert summary["runs"] == ["0.1", "0.2", "0.3"]
    assert summary["mean"] == pytest.approx(410.0) and summary["stdev"] == pytest.approx(10.0)
    assert summary["ci_low"] < 410.0 < summary["ci_high"]
    rr = h.of("summary", name="netperf.TCP_RR.transaction_rate")[0]
    assert rr["n"] == 3 and len(set(rr["samples"])) == 1  # the replay repeats its one answer


# -- expectations ----------------------------------------------------------------


def test_expectations_that_hold_are_recorded_as_passed(tmp_path, backend, replay):
    rate = keyvals(replay.result(NETPERF_RR, node="a").stdout)["THROUGHPUT"]
    gbits = keyvals(replay.result(NETPERF_STREAM, node="a").stdout)["THROUGHPUT"] * 0.9 / 1000
    text = SCENARIO + (
        f"expect:\n  - netperf.TCP_STREAM.throughput_mbps > {gbits:.4f} Gbit/s\n"
        f"  - netperf.TCP_RR.transaction_rate >= {rate}\n"
    )
    h = harness(tmp_path, backend, text)
    outcome = h.run()
    assert outcome.ok and h.info()["status"] == "ok"
    found = h.of("expectation")
    assert [(e["expectation"], e["passed"]) for e in found] == [
        (f"netperf.TCP_STREAM.throughput_mbps > {gbits:.4f} Gbit/s", True),
        (f"netperf.TCP_RR.transaction_rate >= {rate}", True),
    ]
    assert found[1]["measured"] == rate and found[1]["unit"] == "/s" and found[1]["samples"] == 1


def test_a_missed_expectation_fails_the_run_and_says_which(tmp_path, backend, replay):
    rate = keyvals(replay.result(NETPERF_RR, node="a").stdout)["THROUGHPUT"]
    text = SCENARIO + (
        f"expect:\n  - netperf.TCP_STREAM.throughput_mbps > 1\n  - netperf.TCP_RR.transaction_rate > {rate * 2:.0f}\n"
    )
    h = harness(tmp_path, backend, text)
    outcome = h.run()
    assert not outcome.ok and outcome.status == "failed"
    assert [e["passed"] for e in h.of("expectation")] == [True, False]
    missed = h.of("expectation", passed=False)[0]
    assert missed["measured"] == rate
    assert [v.expectation.text for v in outcome.cells[0].missed] == [
        f"netperf.TCP_RR.transaction_rate > {rate * 2:.0f}"
    ]
    assert outcome.cells[0].errors == []
    info = h.info()
    assert info["status"] == "failed" and "expectation missed" in info["message"]
    assert "netperf.TCP_RR.transaction_rate" in info["message"] and info["error"] is None


# -- failures ----------------------------------------------------------------------


def test_a_failed_benchmark_is_recorded_and_the_next_benchmark_runs(tmp_path, backend, replay):
    refused = replay.result(r"-p 12866 ", node="a", note="probe")  # what netperf said with no server there
    backend.when(NETPERF_STREAM, node="a", result=refused)
    h = harness(tmp_path, backend)
    outcome = h.run()

    errors = h.of("error")
    assert len(errors) == 1
    error = errors[0]
    assert (error["stage"], error["label"], error["run"]) == ("benchmark", "netperf TCP_STREAM", "0.1")
    assert f"exited {refused.returncode}" in error["message"] and "establish control" in error["message"]
    assert "traceback" not in error
    raw = re.search(r"raw output: (\S+)\)", error["message"])[1]
    assert "establish control" in Path(raw).read_text()
    assert h.of("measurement", test="TCP_STREAM") == [] and h.of("run", label="netperf TCP_STREAM") == []
    assert h.of("summary", name="netperf.TCP_RR.transaction_rate")  # the next benchmark ran
    assert h.of("cell_end")
    assert outcome.status == "failed" and len(outcome.cells[0].errors) == 1
    assert outcome.cells[0].errors[0].startswith("netperf TCP_STREAM: netperf TCP_STREAM exited")
    info = h.info()
    assert info["status"] == "failed" and "netperf TCP_STREAM" in info["message"]


def test_a_cell_that_cannot_boot_is_recorded_and_the_next_cell_runs(tmp_path, backend):
    backend.fail_realize(
        BootError(
            "guest(s) did not come up: a: the guest agent did not answer in time\n--- the end of a.serial.log:\n(empty)"
        ),
        at=1,
    )
    h = harness(tmp_path, backend, TWO_CELLS)
    outcome = h.run()

    first, second = (c.id for c in h.cells)
    assert (first, second) == ("secs=5", "secs=4")
    errors = h.of("error")
    assert [(e["cell"], e["stage"]) for e in errors] == [(first, "cell")]
    assert errors[0]["message"].startswith("guest(s) did not come up: a: the guest agent did not answer in time")
    assert "traceback" not in errors[0]
    assert h.of("cell", cell=first) == [] and h.of("run", cell=first) == []

    assert h.of("cell", cell=second) and h.of("cell_end", cell=second)
    assert h.of("measurement", cell=second, name="netperf.TCP_STREAM.throughput_mbps")
    assert not h.of("error", cell=second)
    assert backend.realizations[1].ran("a", r"-t TCP_STREAM -l 4 ")  # the second cell's own stream
    assert [c.ok for c in outcome.cells] == [False, True]
    info = h.info()
    assert info["status"] == "failed" and "did not come up" in info["message"]


@pytest.mark.parametrize("how", [{"on": NETPERF_STREAM}, {"after": 7}], ids=["at-the-stream", "after-7-commands"])
def test_a_node_that_dies_mid_benchmark_ends_its_cell_saying_which_and_why(tmp_path, backend, how):
    backend.kill("a", **how)
    h = harness(tmp_path, backend, TWO_CELLS)
    outcome = h.run()

    first, second = (c.id for c in h.cells)
    errors = h.of("error", cell=first)
    assert [(e["stage"], e.get("label")) for e in errors] == [("benchmark", "netperf TCP_STREAM"), ("cell", None)]
    assert "a: lost the guest agent connection" in errors[0]["message"]
    assert errors[1]["message"] == "node a is gone: process qemu-a (pid 1) was killed by signal 9"
    assert h.of("run", cell=first) == [] and h.of("cell_end", cell=first) == []
    assert not backend.realizations[0].ran("a", NETPERF_RR)  # nothing more ran in that cell
    assert any("killed by signal 9" in e for e in outcome.cells[0].errors)

    assert not h.of("error", cell=second) and h.of("cell_end", cell=second)
    assert outcome.cells[1].ok and h.info()["status"] == "failed"


def test_a_guest_whose_clock_runs_fast_fails_its_cell_naming_it_and_its_rate(tmp_path, backend, monkeypatch):
    # a guest whose TSC calibrated three times too low, and stays on it: its uptime runs three times the host's
    monkeypatch.setattr(clock, "SETTLE_WINDOW_S", 0.3)
    backend.when(GUEST_CLOCK, node="b", call=lambda node, command: f"uptime={3 * time.monotonic():.3f}\n")
    backend.when(r"^set -e\nby_mac", node="b", call=lambda node, command: time.sleep(0.5))  # then the replay's
    h = harness(tmp_path, backend)
    outcome = h.run()
    [error] = h.of("error")
    assert error["stage"] == "cell"
    assert re.match(r"b: the guest's clock ran [23]\.\d\dx the host's", error["message"]), error["message"]
    assert "a:" not in error["message"]  # a's clock kept time
    assert h.of("run") == [] and not outcome.cells[0].ok  # nothing measured with it


def test_a_clock_that_ran_fast_during_the_set_up_and_keeps_time_since_is_recorded_and_the_cell_runs(
    tmp_path, backend, monkeypatch
):
    # the kernel's watchdog moved the guest to the HPET just after the set-up: the later readings keep time
    monkeypatch.setattr(clock, "SETTLE_WINDOW_S", 0.3)
    readings = iter(range(10**6))

    def uptime(node, command):
        fast = next(readings) < 2  # before and after the set-up
        return f"uptime={(3 if fast else 1) * time.monotonic() + (0 if fast else 1000):.3f}\n"

    backend.when(GUEST_CLOCK, node="b", call=uptime)
    backend.when(r"^set -e\nby_mac", node="b", call=lambda node, command: time.sleep(0.5))
    h = harness(tmp_path, backend)
    outcome = h.run()
    assert outcome.cells[0].ok and not h.of("error")
    [cell] = h.of("cell")
    assert list(cell["network"]["clock_settled"]) == ["b"]
    assert cell["network"]["clock_settled"]["b"].startswith("b: the guest's clock ran ")
    assert h.of("run")  # measured, with a clock that keeps time


def test_a_set_up_that_fails_under_a_fast_clock_says_the_clock_is_why(tmp_path, backend):
    # the guest's 20 s wait for carrier ends after a few seconds of the host's when its clock runs fast
    backend.when(GUEST_CLOCK, node="a", call=lambda node, command: f"uptime={6 * time.monotonic():.3f}\n")
    backend.when(
        r"^set -e\nby_mac",
        node="a",
        call=lambda node, command: time.sleep(0.5),  # 3 s of the guest's clock
        result={"returncode": 4, "stderr": "no carrier on: link0\n"},
    )
    h = harness(tmp_path, backend)
    h.run()
    [error] = h.of("error")
    assert error["message"].startswith("a: the guest's clock ran "), error["message"]
    assert error["message"].endswith("(and so: a: configuring link0 failed: no carrier on: link0)")


def test_a_node_that_dies_while_the_cell_is_set_up_is_named_with_why(tmp_path, backend):
    backend.kill("a", after=3)  # dies at its 4th command: the facts read after netconf
    h = harness(tmp_path, backend)
    h.run()
    errors = h.of("error")
    assert [e["stage"] for e in errors] == ["cell"]
    assert "killed by signal 9" in errors[0]["message"]


def test_an_unexpected_exception_is_kept_with_its_traceback_and_the_run_goes_on(tmp_path, backend):
    backend.when(NETPERF_STREAM, node="a", raises=RuntimeError("replayed bug"), realization=1)
    h = harness(tmp_path, backend, TWO_CELLS)
    outcome = h.run()

    first, second = (c.id for c in h.cells)
    errors = h.of("error")
    assert len(errors) == 1 and errors[0]["cell"] == first
    error = errors[0]
    assert error["stage"] == "cell"  # a bug ends its cell (runner docstring)
    assert error["message"].startswith("internal error: RuntimeError: replayed bug (traceback in ")
    assert "Traceback (most recent call last)" in error["traceback"]
    assert "RuntimeError: replayed bug" in error["traceback"]
    log = (h.run_dir.cell_dir(first) / "cell.log").read_text()
    assert "Traceback (most recent call last)" in log and "RuntimeError: replayed bug" in log
    assert str(h.run_dir.cell_dir(first) / "cell.log") in error["message"]

    [shown] = outcome.cells[0].errors  # named by the benchmark run under way, though it ended the cell
    assert shown.startswith("netperf TCP_STREAM: internal error: RuntimeError: replayed bug (traceback in ")
    assert "\n" not in shown and "Traceback" not in shown
    assert outcome.cells[1].ok and h.of("cell_end", cell=second)
    info = h.info()
    assert info["status"] == "failed" and info["error"] is None and "Traceback" not in info["message"]


def test_an_unexpected_exception_in_a_parallel_node_job_keeps_its_traceback(tmp_path, backend):
    backend.when(r"statistics/\$c", node="b", raises=RuntimeError("replayed bug"), times=1)  # the first counters read
    h = harness(tmp_path, backend)
    h.run()
    [error] = h.of("error")
    assert "RuntimeError: replayed bug" in error.get("traceback", "")
    assert error["message"].startswith("internal error: RuntimeError")


def test_keyboard_interrupt_marks_the_run_interrupted_and_propagates(tmp_path, backend):
    backend.when(NETPERF_RR, node="a", raises=KeyboardInterrupt)
    h = harness(tmp_path, backend, TWO_CELLS)
    with pytest.raises(KeyboardInterrupt):
        h.run()
    info = h.info()
    assert info["status"] == "interrupted" and info["finished_at"] is not None
    assert "interrupted" in info["message"]
    assert len(backend.realizations) == 1 and backend.realizations[0].closed  # the guests were stopped
    assert h.of("summary", name="netperf.TCP_STREAM.throughput_mbps")  # what was measured is kept
    assert h.of("run", label="netperf TCP_RR") == []


def test_a_run_directory_that_cannot_be_written_aborts_the_run_with_one_line(tmp_path, backend):
    h = harness(tmp_path, backend, TWO_CELLS)

    backend.when(NETPERF_RR, node="a", call=lambda node, command: break_results(h))
    with pytest.raises(RunAborted) as caught:
        h.run()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the run stopped early: ")
    assert str(h.run_dir.results) in message and "Is a directory" in message
    assert str(h.run_dir.path / "run.json") in message
    info = h.info()
    assert info["status"] == "failed" and info["finished_at"] is not None
    assert "Is a directory" in info["error"]["message"]
    assert "IsADirectoryError" in info["error"]["traceback"]
    assert len(backend.realizations) == 1 and backend.realizations[0].closed  # no second cell, guests stopped


def test_a_kvm_fallback_is_a_warning_of_the_run(tmp_path, replay):
    fallback = "KVM did not work here (a: hung); stopped the guests and booted them under TCG"
    backend = FakeBackend(replay, facts={"accel_fallback": fallback})
    h = harness(tmp_path, backend, TWO_CELLS)
    assert h.run().ok
    assert h.info()["warnings"] == [fallback]  # once, though both cells fell back
    assert sum(f"warning: {fallback}" in line for line in h.lines) == 2
    assert all(c["rig"]["accel_fallback"] == fallback for c in h.of("cell"))


def break_results(h: Harness) -> None:
    """Make results.jsonl unwritable: a directory in its place (chmod does not stop root)."""
    h.run_dir.results.unlink()
    h.run_dir.results.mkdir()


@pytest.mark.parametrize(
    "fault, status",
    [
        ("none", "ok"),
        ("boot", "failed"),
        ("benchmark", "failed"),
        ("death", "failed"),
        ("bug", "failed"),
        ("interrupt", "interrupted"),
        ("unwritable", "failed"),
    ],
)
def test_run_json_always_ends_in_a_final_status(tmp_path, backend, replay, fault, status):
    h = harness(tmp_path, backend)
    if fault == "boot":
        backend.fail_realize(NiclabError("no image"))
    elif fault == "benchmark":
        backend.when(NETPERF_RR, node="a", result=replay.result(r"-p 12866 ", node="a", note="probe"))
    elif fault == "death":
        backend.kill("b", on=r"^netserver")
    elif fault == "bug":
        backend.when(NETPERF_RR, node="a", raises=ValueError("bug"))
    elif fault == "interrupt":
        backend.when(NETPERF_STREAM, node="a", raises=KeyboardInterrupt)
    elif fault == "unwritable":
        backend.when(NETPERF_STREAM, node="a", call=lambda node, command: break_results(h))
    try:
        h.run()
    except (KeyboardInterrupt, RunAborted):
        pass
    info = h.info()
    final(info)
    assert info["status"] == status


# -- shared boots and interleaved repeats ------------------------------------------


def test_cells_that_differ_only_in_what_netconf_sets_share_one_boot(tmp_path, backend):
    h = harness(tmp_path, backend, TWO_CELLS)
    assert h.run().ok

    assert len(backend.realizations) == 1  # one boot for both cells
    first, second = h.of("cell")
    assert first["boot"] == {"number": 1, "reused": False, "first_cell": "secs=5"}
    assert second["boot"] == {"number": 1, "reused": True, "first_cell": "secs=5"}
    assert first["timings"]["boot_s"] >= 0 and second["timings"]["boot_s"] == 0.0
    # the second cell undid the first one's network before configuring its own, and checked it again
    calls = [text for node, op, text in backend.realizations[0].calls if node == "a"]
    reset = next(i for i, text in enumerate(calls) if text.startswith("set -e\ntc qdisc del dev link0 root"))
    assert "ip addr flush dev link0" in calls[reset]
    assert any("by_mac" in text for text in calls[reset + 1 :])  # configured again after the reset
    assert backend.realizations[0].ran("a", r"-t TCP_STREAM -l 4 ")


def test_repeats_of_cells_on_one_boot_go_round_robin(tmp_path, backend):
    h = harness(tmp_path, backend, TWO_CELLS, repeat=2)
    assert h.run().ok

    order = [(r["cell"], r["label"], r["repeat"]) for r in h.of("run")]
    assert order == [  # each round starts one cell later: no cell is always first
        ("secs=5", "netperf TCP_STREAM", 1),
        ("secs=5", "netperf TCP_RR", 1),
        ("secs=4", "netperf TCP_STREAM", 1),
        ("secs=4", "netperf TCP_RR", 1),
        ("secs=4", "netperf TCP_STREAM", 2),
        ("secs=4", "netperf TCP_RR", 2),
        ("secs=5", "netperf TCP_STREAM", 2),
        ("secs=5", "netperf TCP_RR", 2),
    ]
    for cell in ("secs=5", "secs=4"):
        summary = h.of("summary", cell=cell, name="netperf.TCP_STREAM.throughput_mbps")
        assert [s["runs"] for s in summary] == [["0.1", "0.2"]]
        assert len(h.of("cell", cell=cell)) == 1 and len(h.of("cell_end", cell=cell)) == 1
    assert "cell 1/2: secs=5 (round 2/2)" in h.lines
    assert {r["boot"] for r in h.of("run")} == {1}  # each run says which boot it ran on


def test_the_runner_tells_the_whole_runs_progress_as_runs_and_cells_end(tmp_path, backend):
    h = harness(tmp_path, backend, TWO_CELLS, repeat=2)
    told: list[RunProgress] = []
    h.runner.watch = told.append
    assert h.run().ok

    # round 1: secs=5's two benchmarks, then secs=4's; round 2 starts one cell later, so secs=4 ends first
    assert [(p.event, p.cell) for p in told] == [("start", None)] + [("run", None)] * 6 + [("cell", "secs=4")] + [
        ("run", None)
    ] * 2 + [("cell", "secs=5")]
    assert [p.runs_done for p in told] == [0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 8]
    assert {(p.cells, p.runs) for p in told} == {(2, 8)}
    assert [p.cells_done for p in told if p.event == "cell"] == [1, 2]
    assert all(p.left_s is not None for p in told[:-1]) and told[-1].finished and told[-1].left_s is None
    assert told[0].left_s == pytest.approx(sum(e.total_s for e in estimates(h.cells, 2)))


def test_a_cell_that_cannot_boot_counts_as_done_in_the_runs_progress(tmp_path, backend):
    backend.fail_realize(BootError("guest(s) did not come up: a: the guest agent did not answer in time"), at=1)
    h = harness(tmp_path, backend, TWO_CELLS)
    told: list[RunProgress] = []
    h.runner.watch = told.append
    assert not h.run().ok

    assert [(p.event, p.cell, p.cells_done, p.cells_failed, p.runs_done) for p in told] == [
        ("start", None, 0, 0, 0),
        ("cell", "secs=5", 1, 1, 2),  # its two runs will not run: done, and the cell counted as failed
        ("run", None, 1, 1, 3),
        ("run", None, 1, 1, 4),
        ("cell", "secs=4", 2, 1, 4),
    ]


def test_a_run_without_a_watcher_keeps_no_tally(tmp_path, backend):
    h = harness(tmp_path, backend)
    assert h.run().ok and h.runner.tally is None


def test_the_turns_of_cells_on_one_boot_and_how_often_each_sets_its_network_up():
    from niclab.run.rigs import network_setups, turns

    assert turns([2, 2]) == [(0, range(1, 2)), (1, range(1, 2)), (1, range(2, 3)), (0, range(2, 3))]
    assert turns([3, 1]) == [(0, range(1, 2)), (1, range(1, 2)), (0, range(2, 3)), (0, range(3, 4))]
    assert turns([3]) == [(0, range(1, 4))] and turns([1, 1]) == [(0, range(1, 2)), (1, range(1, 2))]
    assert network_setups([2, 2]) == [2, 1]  # A1 B1 B2 A2
    assert network_setups([3, 3, 3]) == [3, 3, 3]  # A1 B1 C1 B2 C2 A2 C3 A3 B3: every turn a new network
    assert network_setups([1, 1]) == [1, 1] and network_setups([4]) == [1]


def test_plan_counts_one_boot_per_group_and_a_network_set_up_per_turn(tmp_path):
    from niclab.run import plan

    path = tmp_path / "scenario.yaml"
    path.write_text(TWO_CELLS + "repeat: 2\n")
    first, second = plan.estimates(load_scenario(path).cells)
    assert (first.boot_s, second.boot_s) == (plan.BOOT_S, 0.0)
    one_setup = plan.NETWORK_S + plan.PER_SEGMENT_PING_S
    assert (first.network_s, second.network_s) == (2 * one_setup, one_setup)  # A1 B1 B2 A2
    assert "1 boot and network set-ups included" in plan.plan_table("fake-two-cells", load_scenario(path).cells)
    once = tmp_path / "once.yaml"
    once.write_text(TWO_CELLS)
    overridden, own = estimates(load_scenario(once).cells, repeat=2), estimates(load_scenario(path).cells)
    assert [e.total_s for e in overridden] == [e.total_s for e in own] == [first.total_s, second.total_s]  # --repeat 2


def test_cells_on_other_topologies_boot_their_own_rigs_grouped_by_topology(tmp_path, backend):
    text = TWO_CELLS.replace("matrix:\n  secs: [5, 4]\n", "matrix:\n  secs: [5, 4]\n  cpus: [1, 2]\n")
    text = text.replace("nodes: [a, b]\n", "nodes:\n  a: {cpus: '${cpus}'}\n  b: {cpus: '${cpus}'}\n")
    h = harness(tmp_path, backend, text)
    outcome = h.run()
    assert outcome.ok
    assert [c.cell.id for c in outcome.cells] == ["secs=5,cpus=1", "secs=5,cpus=2", "secs=4,cpus=1", "secs=4,cpus=2"]
    ran = [(c["cell"], c["boot"]["number"], c["boot"]["reused"]) for c in h.of("cell")]
    assert ran == [
        ("secs=5,cpus=1", 1, False),
        ("secs=4,cpus=1", 1, True),
        ("secs=5,cpus=2", 2, False),
        ("secs=4,cpus=2", 2, True),
    ]
    assert [[n.cpus for n in r.topology.nodes] for r in backend.realizations] == [[1, 1], [2, 2]]


def test_a_cell_that_fails_on_a_shared_boot_leaves_the_next_cell_a_fresh_one(tmp_path, backend):
    backend.when(NETPERF_STREAM, node="a", raises=RuntimeError("replayed bug"), realization=1)
    h = harness(tmp_path, backend, TWO_CELLS)
    outcome = h.run()
    assert [c.ok for c in outcome.cells] == [False, True]
    assert len(backend.realizations) == 2 and all(r.closed for r in backend.realizations)
    assert h.of("cell", cell="secs=4")[0]["boot"] == {"number": 2, "reused": False, "first_cell": "secs=4"}
    assert {r["boot"] for r in h.of("run", cell="secs=4")} == {2}


def test_a_keeper_the_caller_holds_lends_its_rig_to_the_next_run_and_a_failure_stops_it(tmp_path, backend):
    """The pytest plugin's session keeper: two runs (two items), one boot; the rig outlives the first run."""
    from niclab.run.rigs import BootKeeper

    def made(path: Path) -> Path:
        path.mkdir()
        return path

    with BootKeeper(backend, lambda m: None) as rigs:
        first = harness(made(tmp_path / "one"), backend)
        assert first.runner.run(first.cells, rigs).ok
        assert len(backend.realizations) == 1 and not backend.realizations[0].closed  # still up
        second = harness(made(tmp_path / "two"), backend)
        assert second.runner.run(second.cells, rigs).ok
        assert len(backend.realizations) == 1  # the second run booted nothing
        assert second.of("cell")[0]["boot"] == {"number": 1, "reused": True, "first_cell": "default"}
        assert second.of("cell")[0]["timings"]["boot_s"] == 0.0

        backend.when(NETPERF_STREAM, node="a", raises=KeyboardInterrupt(), realization=1)
        third = harness(made(tmp_path / "three"), backend)
        with pytest.raises(KeyboardInterrupt):
            third.runner.run(third.cells, rigs)
        assert backend.realizations[0].closed and rigs.current is None  # Ctrl-C stopped the caller's rig too
        assert third.info()["status"] == "interrupted"


def test_compare_pairs_the_alternated_repeats_of_two_cells_of_one_run(tmp_path, backend, replay, capsys):
    from niclab.ui.cli.main import main

    recorded = replay.result(NETPERF_STREAM, node="a")
    # A B B A A B: the host slowed down through the run, the second cell was 10 % below the first each round
    values = [500.0, 450.0, 360.0, 400.0, 300.0, 270.0]
    backend.when(NETPERF_STREAM, node="a", results=[with_throughput(recorded, v) for v in values])
    h = harness(tmp_path, backend, TWO_CELLS, repeat=3)
    assert h.run().ok
    assert [c["interleaved_with"] for c in h.of("cell")] == [["secs=4"], ["secs=5"]]

    assert main(["compare", str(h.run_dir.path), "--cells", "secs=5", "secs=4"]) == 1  # worse: exit 1
    out = capsys.readouterr().out
    assert "verdicts: paired t-test on the differences of alternating repeats" in out
    line = next(x for x in out.splitlines() if "TCP_STREAM.throughput_mbps" in x)
    assert line.startswith("secs=5 → secs=4") and "-10.0 %" in line and line.endswith("worse")
    assert main(["compare", str(h.run_dir.path)]) == 2
    assert "compare needs two runs, or one run and --cells BASE_CELL NEW_CELL" in capsys.readouterr().err


def test_an_interleaved_cell_that_fails_keeps_the_summaries_of_its_finished_runs(tmp_path, backend):
    streams: list[str] = []

    def second_stream_breaks(node: str, command: str) -> None:
        streams.append(command)
        if len(streams) == 2:
            raise RuntimeError("replayed bug")

    backend.when(r"-t TCP_STREAM -l 5 ", node="a", call=second_stream_breaks)
    h = harness(tmp_path, backend, TWO_CELLS, repeat=2)
    outcome = h.run()
    assert [c.ok for c in outcome.cells] == [False, True]
    assert [e["stage"] for e in h.of("error", cell="secs=5")] == ["cell"]
    for name in ("netperf.TCP_STREAM.throughput_mbps", "netperf.TCP_RR.transaction_rate"):
        [summary] = h.of("summary", cell="secs=5", name=name)
        assert summary["n"] == 1 and summary["partial"] is True  # round 1 ran, round 2 did not
        [whole] = h.of("summary", cell="secs=4", name=name)
        assert whole["n"] == 2 and "partial" not in whole
    assert h.of("cell_end", cell="secs=5") == [] and len(h.of("cell_end", cell="secs=4")) == 1


def test_a_boot_that_fails_after_another_cell_stopped_the_rig_is_not_blamed_on_the_old_guests(tmp_path, backend):
    backend.when(r"-t TCP_STREAM -l 4 ", node="a", raises=RuntimeError("replayed bug"))  # secs=4 fails in round 1
    backend.fail_realize(BootError("guest(s) did not come up: b: the guest agent did not answer in time"), at=2)
    h = harness(tmp_path, backend, TWO_CELLS, repeat=2)
    outcome = h.run()
    assert [c.ok for c in outcome.cells] == [False, False]
    [error] = h.of("error", cell="secs=5", stage="cell")  # its round 2 needed a new boot, which failed
    assert error["message"].startswith("guest(s) did not come up")  # not "node a is gone" from the stopped rig


def test_a_doubt_two_figures_share_is_said_once_in_the_progress_line(tmp_path, backend, data_dir):
    udp = (data_dir / "netperf" / "udp_stream_confidence.txt").read_text()
    backend.when(r"^netperf .* -t UDP_STREAM ", node="a", result={"returncode": 0, "stdout": udp, "seconds": 50.2})
    text = TWO_NODE.replace("{test: TCP_STREAM, seconds: 5}", "{test: UDP_STREAM, seconds: 5, confidence: {}}")
    h = harness(tmp_path, backend, text)
    assert h.run().ok
    [line] = [line for line in h.lines if line.startswith("netperf UDP_STREAM: send_throughput_mbps")]
    assert line.count("[netperf's 99 % confidence target (±2.5 %) was missed after 10 iterations") == 1


HOSTILE = "\x1b[2J\x1b[H\x1b[32mall benchmarks passed\x1b]52;c;ZXZpbA==\x07\r\nnext line"


def test_what_a_tool_prints_reaches_progress_and_records_with_its_controls_escaped(tmp_path, backend):
    backend.when(NETPERF_STREAM, node="a", result={"returncode": 1, "stderr": HOSTILE})
    h = harness(tmp_path, backend)
    h.run()
    [error] = h.of("error")
    assert "\\x1b[2J\\x1b[H\\x1b[32mall benchmarks passed\\x1b]52;c;ZXZpbA==\\x07\\r\\nnext line" in error["message"]
    shown = [line for line in h.lines if "all benchmarks passed" in line]
    assert shown and all(ch.isprintable() for line in shown for ch in line)
    assert all(ch.isprintable() for ch in error["message"])


def test_a_figure_that_is_not_a_number_fails_its_run_and_the_cells_next_benchmark_runs(tmp_path, backend, replay):
    """netperf printed THROUGHPUT=nan: the cell failed as an internal error (ValidationError) and its next
    benchmark never ran. It is netperf's own error now, and the cell goes on."""
    backend.when(NETPERF_STREAM, node="a", result=with_throughput(replay.result(NETPERF_STREAM, node="a"), "nan"))
    h = harness(tmp_path, backend)
    h.run()
    [error] = h.of("error")
    assert error["stage"] == "benchmark" and "traceback" not in error
    assert error["message"].startswith("netperf printed THROUGHPUT='nan', not a finite number")
    assert h.of("run", label="netperf TCP_RR") and h.info()["internal_errors"] == []
