"""The whole run's progress: the tally of what ended and the estimate of the time left (niclab.run.progress),
and how `niclab run` shows it (niclab.ui.console): one updating line in a terminal, plain lines in a log."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from niclab.model.scenario import load_scenario
from niclab.run.plan import estimates
from niclab.run.progress import RunProgress, RunTally, time_left
from niclab.ui import console
from niclab.ui.console import CLEAR, ProgressLines, clock, describe_progress
from tests.helpers import TWO_CELLS  # two cells of the replay's two-node e1000 pair


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cells(tmp_path: Path):
    path = tmp_path / "scenario.yaml"
    path.write_text(TWO_CELLS)
    return load_scenario(path).cells


def tally(cells, repeat: int | None = None) -> tuple[RunTally, list[RunProgress], Clock]:
    seen: list[RunProgress] = []
    ticks = Clock()
    return RunTally(cells, seen.append, repeat, clock=ticks), seen, ticks


# -- the estimate --------------------------------------------------------------------------------------


def test_with_nothing_ended_the_time_left_is_the_plans():
    assert time_left(100.0, 0.0, 0.0, 25.0) == 100.0
    assert time_left(100.0, 0.0, 0.0, 0.0) == 100.0  # no plan to lean on either: the pace is the plan's


def test_the_measured_pace_blends_with_the_plan_and_takes_over_as_work_ends():
    # half the plan credited in twice its planned time: the plan, counted as 25 s run at its word, tempers it
    assert time_left(100.0, 50.0, 100.0, 25.0) == pytest.approx(50.0 * 125.0 / 75.0)
    assert time_left(100.0, 50.0, 100.0, 0.0) == pytest.approx(100.0)  # the measured pace alone: twice as slow
    late = time_left(10_000.0, 9_000.0, 18_000.0, 25.0)  # most of the run ended: nearly the measured pace
    assert 1.99 * 1_000 < late < 2.0 * 1_000
    assert time_left(100.0, 50.0, 25.0, 0.0) == pytest.approx(25.0)  # faster than planned (KVM, --parallel)
    assert time_left(100.0, 100.0, 80.0, 25.0) == 0.0


def test_before_anything_ends_the_tally_counts_down_from_the_plan(cells):
    counted, seen, ticks = tally(cells, repeat=2)
    counted.start()
    planned = sum(e.total_s for e in estimates(cells, 2))
    (first,) = seen
    assert (first.event, first.cells, first.cells_done, first.runs, first.runs_done) == ("start", 2, 0, 8, 0)
    assert first.elapsed_s == 0.0 and first.left_s == pytest.approx(planned) == pytest.approx(counted.planned_s)
    later = first.advanced(ticks.now + 10)
    assert later.elapsed_s == 10.0 and later.left_s == pytest.approx(planned - 10)
    assert first.advanced(ticks.now + planned + 60).left_s == 0.0  # over the estimate: never below nothing


def test_ended_runs_teach_the_pace_and_the_first_one_credits_the_boot_and_network(cells):
    counted, seen, ticks = tally(cells)
    first_cell = estimates(cells)[0]
    stream_s = first_cell.benchmarks_s / 2  # each benchmark of the cell estimates itself alike here (5 s + 1)
    ticks.now += 2 * (first_cell.boot_s + first_cell.network_s + stream_s)  # twice as slow as planned
    counted.run_ended(1, 0)
    credited = first_cell.boot_s + first_cell.network_s + stream_s
    (ran,) = seen
    assert (ran.event, ran.runs_done, ran.cells_done) == ("run", 1, 0)
    prior = counted.planned_s / 2
    assert ran.left_s == pytest.approx(time_left(counted.planned_s, credited, 2 * credited, prior))
    assert ran.left_s > counted.planned_s - credited  # slower than planned: more time left than the plan says
    ticks.now += stream_s
    counted.run_ended(1, 1)
    assert seen[-1].runs_done == 2 and seen[-1].left_s == pytest.approx(
        time_left(counted.planned_s, first_cell.total_s, 2 * credited + stream_s, prior)
    )


def test_a_failed_cell_counts_as_done_with_the_runs_it_did_not_get_to(cells):
    counted, seen, ticks = tally(cells)
    counted.run_ended(1, 0)
    ticks.now += 30
    counted.cell_ended(1, "secs=5", failed=True)
    ended = seen[-1]
    assert (ended.event, ended.cell, ended.cells_done, ended.cells_failed) == ("cell", "secs=5", 1, 1)
    assert (ended.runs_done, ended.runs) == (2, 4)
    assert ended.left_s is not None and not ended.finished
    counted.cell_ended(1, "secs=5", failed=True)  # told twice (a parallel unit that broke): counted once
    counted.run_ended(1, 1)  # a run of an ended cell changes nothing
    assert len(seen) == 2


def test_cells_may_end_in_any_order_and_the_last_leaves_no_time(cells):
    counted, seen, ticks = tally(cells)
    counted.cell_ended(2, "secs=4", failed=False)
    assert seen[-1].cells_done == 1 and seen[-1].left_s is not None
    counted.cell_ended(1, "secs=5", failed=False)
    last = seen[-1]
    assert last.finished and last.left_s is None and (last.runs_done, last.cells_failed) == (4, 0)
    assert last.advanced(ticks.now + 5).left_s is None


# -- the line ------------------------------------------------------------------------------------------


class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def progress(event: str, done: int, *, cell: str | None = None, failed: int = 0, left: float | None = 70.0):
    """Progress told now: `done` cells of two ended, with their two runs each, 65 s a cell."""
    runs_done = {0: 0, 1: 2, 2: 4}[done]
    at = time.monotonic()
    return RunProgress(event, 2, done, failed, 4, runs_done, 65.0 * done, left, at, cell)  # type: ignore[arg-type]


def test_the_line_says_cells_runs_elapsed_and_left():
    assert clock(7) == "0:07" and clock(754) == "12:34" and clock(3723) == "1:02:03" and clock(-1) == "0:00"
    assert describe_progress(progress("cell", 1, failed=1, left=160.0)) == (
        "1/2 cells done (1 failed), 2/4 runs, 1:05 elapsed, about 2:40 left"
    )
    assert describe_progress(progress("cell", 2, left=None)) == "2/2 cells done, 4/4 runs, 2:10 elapsed"
    assert describe_progress(progress("run", 1, left=0.2)).endswith(", over the estimate")
    every_run = RunProgress("run", 2, 1, 0, 4, 4, 100.0, 0.0, time.monotonic())  # the last cell is ending
    assert describe_progress(every_run) == "1/2 cells done, 4/4 runs, 1:40 elapsed, ending"


def test_in_a_log_the_run_gets_plain_lines_at_its_start_and_per_ended_cell(monkeypatch):
    stream = Stream(tty=False)
    lines = ProgressLines(stream=stream)
    with lines.showing_run():
        lines.watch(progress("start", 0))
        lines("cell 1/2: secs=5")
        lines.watch(progress("run", 0))  # a run ending is no line of its own in a log
        lines.watch(progress("cell", 1, cell="secs=5"))
    out = stream.getvalue()
    assert "\r" not in out and "\x1b" not in out
    said = [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in out.splitlines()]
    assert said == [
        "run: 0/2 cells done, 0/4 runs, 0:00 elapsed, about 1:10 left",
        "cell 1/2: secs=5",
        "cell secs=5 ended: 1/2 cells done, 2/4 runs, 1:05 elapsed, about 1:10 left",
    ]


def test_in_a_terminal_the_run_is_one_line_under_the_progress_lines_updated_in_place(monkeypatch):
    monkeypatch.setattr(console, "TICK_S", 3600.0)  # no tick during the test: what is drawn is what was told
    monkeypatch.setattr(ProgressLines, "_width", lambda self: 60)
    stream = Stream(tty=True)
    lines = ProgressLines(stream=stream)
    lines("run directory runs/x")
    with lines.showing_run():
        lines.watch(progress("start", 0))
        lines("cell 1/2: secs=5")
        lines.watch(progress("run", 1))
        lines("running netperf TCP_RR (about 5 s)")
        lines.watch(progress("cell", 2, left=None))
    out = stream.getvalue()
    assert out.endswith("\n")  # the run's last state stays, as a line of its own
    finished = out.split("\n")[:-1]
    shown = [line.split(CLEAR)[-1].split("\r")[-1] for line in finished]  # what the terminal keeps of each line
    assert [re.sub(r"^\[ *[\d.]+s\] ", "", line) for line in shown] == [
        "run directory runs/x",
        "cell 1/2: secs=5",
        "running netperf TCP_RR (about 5 s)",
        "run: 2/2 cells done, 4/4 runs, 2:10 elapsed",
    ]
    assert all(line.count("s] ") == 1 for line in shown)  # no progress line glued to the run's
    drawn = re.findall(r"\r(?:\x1b\[K)?(\[[^\r\n]*?cells done[^\r\n\x1b]*)(?=\r)", out)
    assert drawn and all(len(line) <= 59 for line in drawn)  # cut to the terminal's width, not wrapped
    assert any("1/2 cells done, 2/4 runs" in line for line in drawn)
    assert finished[1].startswith("\r") and CLEAR in finished[2]  # the line under way is erased, then redrawn


def test_quiet_shows_no_progress_even_in_a_terminal():
    stream = Stream(tty=True)
    lines = ProgressLines(quiet=True, stream=stream)
    with lines.showing_run():
        lines.watch(progress("start", 0))
        lines("cell 1/2: secs=5")
        lines.watch(progress("cell", 2, left=None))
    assert stream.getvalue() == ""


def test_the_terminals_line_ticks_with_the_clock(monkeypatch):
    monkeypatch.setattr(console, "TICK_S", 0.01)
    stream = Stream(tty=True)
    lines = ProgressLines(stream=stream)
    with lines.showing_run():
        lines.watch(progress("start", 0))
        deadline = time.monotonic() + 5
        while stream.getvalue().count("cells done") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert stream.getvalue().count("cells done") >= 3  # drawn again without anything told
