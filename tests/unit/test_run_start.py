"""The run exists once (niclab.run.start): `niclab run` and the pytest plugin both go through it, and a
backend's plug-in declares what the front ends ask (its options, its kernel check).

A plug-in for the replay fake (tests/fakes.py) is added to the registry for these tests, as a backend
module's PLUGIN would be: `--backend fake` and `--niclab-backend fake` then run a cell without a VM.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from niclab.model.scenario import load_scenario
from niclab.plumbing.backends import BackendOptions, registry
from niclab.run import start as run_start
from niclab.run.start import NothingRealizable, RunRequest, plan, start
from niclab.ui.cli.main import main
from tests.fakes import Replay
from tests.helpers import Fake, fake_plugin, run_dirs

SCENARIO = """\
name: fake-two-node
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - netperf: {test: TCP_RR, seconds: 5}
expect:
  - netperf.TCP_RR.transaction_rate > 1
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> list[RunRequest]:
    """The fake backend registered; returns the requests niclab.run.start was given, in order."""
    monkeypatch.setitem(registry(), "fake", fake_plugin())
    given: list[RunRequest] = []
    real = run_start.start

    def recording(planned: run_start.Plan, progress: run_start.Progress) -> run_start.Started:
        given.append(planned.request)
        return real(planned, progress)

    monkeypatch.setattr(run_start, "start", recording)
    return given


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_niclab_run_and_the_pytest_plugin_run_a_cell_through_the_one_run_module(fake, pytester, tmp_path, capsys):
    scenario = pytester.path / "scenarios" / "fake-two-node.yaml"
    scenario.parent.mkdir()
    scenario.write_text(SCENARIO)
    cli_out, pytest_out = tmp_path / "cli", tmp_path / "pytest"
    assert main(["run", str(scenario), "--backend", "fake", "--fake-note", "hi", "--out", str(cli_out), "-q"]) == 0
    result = pytester.runpytest(
        str(scenario), "--niclab-backend", "fake", "--niclab-fake-note", "hi", "--niclab-out", str(pytest_out)
    )
    result.assert_outcomes(passed=1)

    by_cli, by_pytest = fake  # each front end started its run through niclab.run.start
    assert [c.id for c in by_cli.cells] == [c.id for c in by_pytest.cells] == ["default"]
    assert (by_cli.scenario.text, by_cli.kernel, by_cli.repeat) == (by_pytest.scenario.text, None, None)

    [cli_run], [pytest_run] = run_dirs(cli_out), run_dirs(pytest_out)
    assert (cli_out / "latest").resolve() == cli_run.resolve()  # niclab run points RUNS/latest at it
    cli_records, pytest_records = records(cli_run), records(pytest_run)
    assert [r["type"] for r in cli_records] == [r["type"] for r in pytest_records]
    assert [r["rig"]["note"] for r in cli_records if r["type"] == "cell"] == ["hi"]  # the declared option, given
    assert [r["rig"]["note"] for r in pytest_records if r["type"] == "cell"] == ["hi"]
    cli_info, pytest_info = (json.loads((run / "run.json").read_text()) for run in (cli_run, pytest_run))
    for key in ("scenario", "scenario_file", "scenario_text", "cells", "backend", "status", "warnings"):
        assert cli_info[key] == pytest_info[key], key
    assert cli_info["scenario_text"] == SCENARIO and cli_info["status"] == "ok"


def test_a_backends_declared_option_is_an_option_of_niclab_and_of_pytest(fake, pytester, capsys):
    for verb in ("run", "plan", "validate"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert "--fake-note TEXT a note the fake backend keeps in its rig facts" in shown
    shown = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert "--niclab-fake-note=TEXT a note the fake backend keeps in its rig facts" in shown
    assert "--niclab-libvirt-uri=URI libvirt connection" in shown and "--niclab-wait a lab card" in shown


@pytest.mark.parametrize("checked", [True, False])
def test_the_kernels_are_checked_only_for_a_backend_that_declares_it(monkeypatch, tmp_path, checked):
    monkeypatch.setitem(registry(), "fake", fake_plugin(kernel_check=checked))
    asked: list[list[str]] = []
    monkeypatch.setattr(run_start, "check_kernels", lambda cells, progress: asked.append([c.id for c in cells]))
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    request = RunRequest(scenario=scenario, cells=scenario.cells, out=tmp_path / "runs")
    started = start(plan(request, Fake(Replay.load())), lambda line: None)
    assert asked == ([["default"]] if checked else [])
    assert started.info.scenario_text == SCENARIO and started.run_dir.path.parent == tmp_path / "runs"


def test_a_cell_no_backend_can_realize_is_refused_before_the_run_directory(tmp_path):
    path = tmp_path / "s.yaml"
    link = "  - between: [a, b]\n    nic: e1000\n    count: 8\n"
    path.write_text(SCENARIO.replace("links:\n", "links:\n" + link * 4))  # 33 NICs a node: more than a pc has slots
    scenario = load_scenario(path)
    request = RunRequest(scenario=scenario, cells=scenario.cells, out=tmp_path / "runs")
    qemu = registry()["qemu"].create(BackendOptions())
    with pytest.raises(NothingRealizable, match="the qemu backend cannot realize any cell of fake-two-node: node a"):
        start(plan(request, qemu), lambda line: None)
    assert not (tmp_path / "runs").exists()


def test_an_internal_error_in_a_cell_exits_3_and_the_last_line_says_niclab_failed_not_the_card(
    monkeypatch, tmp_path, capsys
):
    def broken(backend: Fake) -> None:
        backend.when(r"^netperf ", raises=RuntimeError("a bug nobody foresaw"))

    monkeypatch.setitem(registry(), "fake", fake_plugin(prepare=broken))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    assert main(["run", str(scenario), "--backend", "fake", "--out", str(tmp_path / "runs"), "-q"]) == 3
    out, err = capsys.readouterr()
    [run_dir] = run_dirs(tmp_path / "runs")
    log = run_dir / "cells" / "default" / "cell.log"
    assert "FAILED: netperf TCP_RR: internal error: RuntimeError: a bug nobody foresaw" in out
    assert err.splitlines()[-1] == (
        f"niclab failed, not the card: 1 internal error (a bug in niclab); see the traceback in {log}, "
        "and please report it"
    )
    assert "a bug nobody foresaw" in log.read_text() and "Traceback" in log.read_text()
    assert json.loads((run_dir / "run.json").read_text())["internal_errors"][0]["cell"] == "default"


def test_a_benchmark_that_failed_exits_1_and_blames_the_run_not_niclab(monkeypatch, tmp_path, capsys):
    def refused(backend: Fake) -> None:
        backend.when(r"^netperf ", result={"returncode": 1, "stderr": "netperf: send_data: Connection refused"})

    monkeypatch.setitem(registry(), "fake", fake_plugin(prepare=refused))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    assert main(["run", str(scenario), "--backend", "fake", "--out", str(tmp_path / "runs"), "-q"]) == 1
    out, err = capsys.readouterr()
    assert "FAILED: netperf TCP_RR: netperf TCP_RR exited 1: netperf: send_data: Connection refused" in out
    assert "niclab failed" not in out + err and "internal error" not in out + err


def test_a_tools_escape_sequences_reach_the_terminal_escaped(monkeypatch, tmp_path, capsys):
    """netperf's stderr clears the screen, fakes a pass and writes the clipboard (OSC 52): on niclab's terminal
    each control character shows as its escape, in the progress lines and in the table alike."""
    hostile = "\x1b[2J\x1b[H\x1b[32mall benchmarks passed\x1b]52;c;ZXZpbA==\x07"

    def shouting(backend: Fake) -> None:
        backend.when(r"^netperf ", result={"returncode": 1, "stderr": hostile})

    monkeypatch.setitem(registry(), "fake", fake_plugin(prepare=shouting))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    assert main(["run", str(scenario), "--backend", "fake", "--out", str(tmp_path / "runs")]) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    escaped = "\\x1b[2J\\x1b[H\\x1b[32mall benchmarks passed\\x1b]52;c;ZXZpbA==\\x07"
    assert escaped in out and escaped in err  # the table's FAILED line; the progress line


def test_the_terminal_streams_escape_control_characters_and_keep_line_breaks(capsys):
    from niclab.ui.console import terminal_streams

    with terminal_streams():
        print("a\x1b[31mred\x1b[0m\tline\nsecond\x9b line")
    assert capsys.readouterr().out == "a\\x1b[31mred\\x1b[0m\\tline\nsecond\\x9b line\n"
