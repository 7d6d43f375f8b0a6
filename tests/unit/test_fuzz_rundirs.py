"""Fuzz `niclab report`, `compare` and `export` with damaged run directories (property-based, Hypothesis).

Each example starts from a real run directory (tests/data/runs/*, cut to its first cells, and one the
runner writes through the replay fake, tests/fakes.py) and damages it: records' keys deleted, renamed or
added, values of the wrong type or of the right type but odd (inf, nan, huge, negative, empty, formulas),
deep nesting, huge strings, records retyped, dropped, duplicated or swapped; lines cut, duplicated,
swapped, deleted, garbage lines and bytes that are not UTF-8; run.json replaced by [] and the like, a
FIFO, a directory, a symlink (to a file outside, to /dev/zero, to nothing) or missing; results.jsonl
likewise now and then; and the files the commands write (report.html, report.html.tmp,
measurements.csv, summaries.parquet, the compare output) planted beforehand as symlinks to files outside
or as directories. The command then runs in-process through cli.main, as `niclab …` runs it.

The properties: the exit status is 0, 1 or 2; no traceback, no "this is a bug" (cli.save_crash is
replaced by one that fails the test with the exception), nothing in the crash directory; a refusal is
one line; each example ends within SLOW_SECONDS (an interval timer fails it as a hang); and nothing
outside the run directories changes: the tree around them (the files the planted symlinks point at,
the crash directory) is the same before and after, by names, types, content, modes and mtimes. An
output written is a regular file, never a symlink's target.

The run is derandomized, so CI sees the same examples every time, and does not shrink (a failing
example prints the damage it did, RunFiles(...), and @reproduce_failure replays it). EXAMPLES (5,050)
in all: most on export and compare (the loader, the statistics, the CSV and Parquet writers: 12 to
20 ms an example), a share on report, whose matplotlib figures are the slow part (each report example
starts from one cell, so it draws a few figures: about 220 ms an example). Measured on this 2-core
machine: export 2,400 examples in 22 s, compare 2,500 in 33 s, report 150 in 42 s: about 1.6 minutes
one after the other (pytest -n 2 spreads the three tests over two workers). The report's reading of
the run directories is the loader compare and export fuzz too; its tables and figures get the 150.
Each test prints how many examples it ran and how they ended (pytest -s or -rA shows it).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import json
import math
import os
import shutil
import signal
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from niclab.ui.cli import main as cli
from tests.timebox import timebox

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "data" / "runs"

EXPORT_EXAMPLES = 2400  # about 9 ms each here
COMPARE_EXAMPLES = 2500  # about 12 ms each
REPORT_EXAMPLES = 150  # about 220 ms each: matplotlib draws the figures of the ones that load
EXAMPLES = EXPORT_EXAMPLES + COMPARE_EXAMPLES + REPORT_EXAMPLES
SLOW_SECONDS = 60.0  # one example that takes longer is a hang (each takes milliseconds to about a second)

FUZZ_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a run directory's bytes shrink for many minutes
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)

# -- the seeds -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    name: str
    records: list[dict]
    info: dict


def _cut(records: list[dict], info: dict, cells: int) -> tuple[list[dict], dict]:
    keep = list(dict.fromkeys(r["cell"] for r in records))[:cells]
    return [r for r in records if r["cell"] in keep], {**info, "cells": keep}


def _fake_run() -> tuple[list[dict], dict]:
    """A run the runner writes through the replay fake: repeats, an expectation, a failed benchmark."""
    from tests.fakes import FakeBackend, Replay
    from tests.helpers import harness

    text = (
        "name: fake-two-node\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\nrepeat: 2\n"
        "benchmarks:\n  - netperf: {test: TCP_STREAM, seconds: 5}\n  - netperf: {test: TCP_RR, seconds: 5}\n"
        "expect:\n  - netperf.TCP_STREAM.throughput_mbps > 1\n"
    )
    with tempfile.TemporaryDirectory(prefix="niclab-fuzz-seed-") as name:
        h = harness(Path(name), FakeBackend(Replay.load()), text)
        h.run()
        return [json.loads(line) for line in h.run_dir.results.read_text().splitlines()], h.info()


@functools.cache
def seeds(cells: int) -> list[Seed]:
    """The starting points: each shipped run cut to its first `cells` cells (nic-shootout's first alone:
    it has 129 records a cell), and the replay fake's run."""
    found = []
    for path in sorted(RUNS.iterdir()):
        records = [json.loads(line) for line in (path / "results.jsonl").read_text().splitlines()]
        info = json.loads((path / "run.json").read_text())
        found.append(Seed(path.name, *_cut(records, info, 1 if path.name == "nic-shootout" else cells)))
    found.append(Seed("fake", *_cut(*_fake_run(), cells)))
    return found


# -- building blocks -------------------------------------------------------------------------------------------

KINDS = ["cell", "run", "measurement", "summary", "cell_end", "expectation", "error"]
KEYS = [
    "type",
    "version",
    "scenario",
    "cell",
    "params",
    "run",
    "runs",
    "repeat",
    "benchmark",
    "label",
    "tool",
    "benchmark_index",
    "name",
    "metric",
    "test",
    "unit",
    "value",
    "mean",
    "n",
    "samples",
    "ci_low",
    "ci_high",
    "ci_level",
    "headline",
    "unstable",
    "reasons",
    "link",
    "client",
    "server",
    "nics",
    "counters",
    "ports",
    "extra",
    "curve",
    "interleaved_with",
    "contended",
    "contention",
    "message",
    "passed",
    "measured",
    "cells",
    "scenario_text",
    "lab",
    "prices",
    "nic",
    "mtu",
    "",
    " ",
    "=x",
    "a.b",
    "ñ",
    "\n",
]
TEXTS = st.sampled_from(
    [
        "",
        " ",
        "x",
        "default",
        "nic=e1000",
        "nic=e1000,mtu=9000",
        "0.1",
        "1.2",
        "x.y",
        "0.99999999999",
        "a",
        "b",
        "Mbit/s",
        "us",
        "%",
        "netperf.TCP_STREAM.throughput_mbps",
        "netpipe.peak_throughput_mbps",
        "netperf.UDP_STREAM.send_throughput_mbps",
        "netperf.UDP_STREAM.recv_throughput_mbps",
        '=HYPERLINK("http://example.com","x")',
        "+1",
        "-1",
        "@SUM(A1)",
        "\tx",
        "\rx",
        "\n",
        "a\nb",
        "\x00",
        "<script>alert(1)</script>",
        "{{ 7*7 }}",
        "%s%n",
        "💥",
        "\u2028",
        "\ud800",
        "\udcff",
        "../../etc/passwd",
        "name: x\nprices: {e1000: 35}\ncurrency: ${",
        "prices: &a [*a]",
        "prices: {e1000: abc}\ncurrency: [1]",
        "- 1\n- 2",
        "x" * 300,
    ]
) | st.text(max_size=12)
NUMBERS = (
    st.sampled_from(
        [
            0,
            -1,
            1,
            2,
            3,
            1500,
            9000,
            2**31,
            2**63 - 1,
            2**63,
            2**64,
            2**64 + 1,
            10**30,
            -(10**30),
            0.0,
            -0.0,
            0.5,
            -2.5,
            1e-300,
            5e-324,
            1e300,
            1.7e308,
            -1.7e308,
            math.inf,
            -math.inf,
            math.nan,
        ]
    )
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
)
SCALARS = st.one_of(NUMBERS, st.booleans(), st.none(), TEXTS)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=8,
)

DEEP = "zzdeepzz"  # a sentinel string, replaced by deep nesting once the record is text
DEPTHS = [63, 64, 65, 70, 1000, 200_000]
HUGE_STRING = "zzhugezz"
HUGE_SIZES = [100_000, 2_000_000]


def _paths(value: Any, limit: int = 300) -> list[tuple]:
    """Paths to the values inside a record (breadth first, at most `limit`)."""
    found: list[tuple] = []
    queue: list[tuple[Any, tuple]] = [(value, ())]
    while queue and len(found) < limit:
        item, at = queue.pop(0)
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            found.append((*at, key))
            queue.append((child, (*at, key)))
    return found


def _parent(record: Any, path: tuple) -> Any:
    for step in path[:-1]:
        record = record[step]
    return record


def _same_type(draw, value: Any) -> Any:
    """A value of the same JSON type, but odd: what validates yet may trip a reader."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return draw(NUMBERS)
    if isinstance(value, str):
        return draw(TEXTS)
    if isinstance(value, list):
        how = draw(st.sampled_from(["empty", "one", "double", "reverse", "append"]))
        if how == "empty":
            return []
        if how == "one":
            return value[:1]
        if how == "double":
            return value + value
        if how == "reverse":
            return value[::-1]
        return value + [copy.deepcopy(value[-1]) if value else draw(SCALARS)]
    if isinstance(value, dict):
        return {} if draw(st.booleans()) else {**value, draw(st.sampled_from(KEYS)): draw(VALUES)}
    return draw(SCALARS)


def _mutate_record(draw, record: dict, log: list[str], what: str, odd_only: bool = False) -> dict:
    paths = _paths(record)
    path = paths[draw(st.integers(0, len(paths) - 1))] if paths else None
    ops = ["same-type"] * 6 + ["delete", "rename", "add", "wrong-type", "wrong-type", "deep", "huge", "retype", "move"]
    op = draw(st.sampled_from(["same-type"] if odd_only else ops))
    log.append(f"{what}: {op} at {path}")
    if op == "retype":
        record["type"] = draw(st.sampled_from(KINDS + ["", "Cell", "summaryx", 1, None]))
        return record
    if op == "add" or path is None:
        target = record if path is None or draw(st.booleans()) else _parent(record, path)
        if isinstance(target, dict):
            target[draw(st.sampled_from(KEYS))] = draw(VALUES)
        return record
    parent, key = _parent(record, path), path[-1]
    if op == "delete":
        del parent[key]
    elif op == "rename" and isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS))] = parent.pop(key)
    elif op == "same-type":
        parent[key] = _same_type(draw, parent[key])
        log[-1] += f" = {shown(parent[key])}"
    elif op == "wrong-type":
        parent[key] = draw(VALUES)
        log[-1] += f" = {shown(parent[key])}"
    elif op == "deep":
        parent[key] = f"{DEEP}{draw(st.sampled_from(DEPTHS))}"
    elif op == "huge":
        parent[key] = f"{HUGE_STRING}{draw(st.sampled_from(HUGE_SIZES))}"
    elif op == "move":
        other = paths[draw(st.integers(0, len(paths) - 1))]
        parent[key] = copy.deepcopy(_parent(record, other)[other[-1]])
    return record


def _text(value: Any) -> bytes:
    """JSON as a damaged file may hold it: NaN and Infinity, lone surrogates, deep nesting, huge strings."""
    text = json.dumps(value)
    if "zz" not in text:
        return text.encode("utf-8", "surrogatepass")
    for depth in DEPTHS:
        text = text.replace(f'"{DEEP}{depth}"', "[" * depth + "]" * depth)
    for size in HUGE_SIZES:
        text = text.replace(f'"{HUGE_STRING}{size}"', '"' + "x" * size + '"')
    return text.encode("utf-8", "surrogatepass")


GARBAGE_LINES = [
    b"[]",
    b"1",
    b'"x"',
    b"{",
    b"null",
    b"{}",
    b'{"type": "summary"}',
    b'{"type": "cell", "cell": "x"}',
    b"\xff\xfe",
    b"NaN",
    b"\x00",
    b'{"a": 1, "a": 2}',
    b"[" * 100_000,
]
BAD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r", b"\x1b[2J", b"\xef\xbb\xbf"]


def _mutate_lines(draw, data: bytes, log: list[str]) -> bytes:
    lines = data.split(b"\n")
    i = draw(st.integers(0, max(0, len(lines) - 2)))
    op = draw(
        st.sampled_from(
            ["cut-file", "cut-line", "dup-line", "swap-lines", "del-line", "blank", "garbage", "bad-bytes"]
            + ["number", "crlf", "bom"]
        )
    )
    log.append(f"results.jsonl: {op} at line {i + 1}")
    if op == "cut-file":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if op == "cut-line" and lines[i]:
        lines[i] = lines[i][: draw(st.integers(0, len(lines[i]) - 1))]
    elif op == "dup-line":
        lines.insert(i, lines[i])
    elif op == "swap-lines":
        j = draw(st.integers(0, max(0, len(lines) - 2)))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "del-line" and len(lines) > 1:
        del lines[i]
    elif op == "blank":
        lines.insert(i, draw(st.sampled_from([b"", b"   ", b"\t"])))
    elif op == "garbage":
        lines.insert(i, draw(st.sampled_from(GARBAGE_LINES)))
    elif op == "bad-bytes" and lines[i]:
        at = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:at] + draw(st.sampled_from(BAD_BYTES)) + lines[i][at:]
    elif op == "number":
        line = lines[i]
        at = line.find(b": ", draw(st.integers(0, max(0, len(line) - 1))))
        if at >= 0 and line[at + 2 : at + 3].isdigit():
            end = at + 2
            while end < len(line) and line[end : end + 1] in b"0123456789.e-+":
                end += 1
            token = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"1" + b"0" * 30]))
            lines[i] = line[: at + 2] + token + line[end:]
    elif op == "crlf":
        return data.replace(b"\n", b"\r\n")
    elif op == "bom":
        return b"\xef\xbb\xbf" + data
    return b"\n".join(lines)


SPECIALS = ["missing", "fifo", "directory", "link-outside", "link-zero", "link-nowhere", "empty"]
INFO_TEXTS = [b"[]", b"{}", b"null", b'"x"', b"1", b"\xff", b"[" * 50_000, b'{"cells": "x"}', b'{"lab": []}']


@dataclass
class RunFiles:
    """A damaged run's results.jsonl and run.json (bytes, or one of SPECIALS), and how they were damaged."""

    results: Any
    info: Any
    log: list[str]

    def __repr__(self) -> str:  # what a failing example shows: the damage, not 100 kB of records
        return f"RunFiles({'; '.join(self.log)})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis's printer would show a dataclass's fields
        printer.text(repr(self))


def _logged(draw, log: list[str], strategy, what: str) -> Any:
    value = draw(strategy)
    log.append(f"{what} {shown(value)}")
    return value


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


@st.composite
def run_files(draw, cells: int) -> RunFiles:
    seed = draw(st.sampled_from(seeds(cells)))
    records = copy.deepcopy(seed.records)
    log = [seed.name]
    if draw(st.booleans()):  # odd but valid: values of the right type, for the readers behind the loader
        for _ in range(draw(st.integers(1, 6))):
            if records:
                at = draw(st.integers(0, len(records) - 1))
                records[at] = _mutate_record(draw, records[at], log, f"line {at + 1}", odd_only=True)
        return RunFiles(b"".join(_text(r) + b"\n" for r in records), _text(seed.info), log)
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 3]))):
        op = draw(st.sampled_from(["record"] * 8 + ["drop", "duplicate", "swap"]))
        i = draw(st.integers(0, len(records) - 1)) if records else 0
        if not records:
            break
        if op == "record":
            records[i] = _mutate_record(draw, records[i], log, f"line {i + 1}")
        elif op == "drop":
            del records[i]
        elif op == "duplicate":
            records.insert(i, copy.deepcopy(records[i]))
        else:
            j = draw(st.integers(0, len(records) - 1))
            records[i], records[j] = records[j], records[i]
        if op != "record":
            log.append(f"{op} line {i + 1}")
    results: Any = b"".join(_text(r) + b"\n" for r in records)
    if draw(st.integers(0, 9)) >= 7:  # (Hypothesis tries the simplest draws, 0, most: the common case there)
        results = _mutate_lines(draw, results, log)
    if draw(st.integers(0, 39)) == 39:
        results = _logged(draw, log, st.sampled_from(SPECIALS), "results.jsonl:")
    info = copy.deepcopy(seed.info)
    how = draw(st.sampled_from(["as-is"] * 6 + ["mutate", "mutate", "text", "special"]))
    if how == "mutate":
        info_data: Any = _text(_mutate_record(draw, info, log, "run.json"))
    elif how == "text":
        info_data = _logged(draw, log, st.sampled_from(INFO_TEXTS), "run.json:")
    elif how == "special":
        info_data = _logged(draw, log, st.sampled_from(SPECIALS), "run.json:")
    else:
        info_data = _text(info)
    return RunFiles(results, info_data, log)


OUTPUTS = [
    "report.html",
    "report.html.tmp",
    "measurements.csv",
    "summaries.csv",
    "measurements.parquet",
    "summaries.parquet",
    "compare.out",
]


@st.composite
def plants(draw) -> dict[str, str]:
    """Output files planted beforehand: name -> link-outside, link-nowhere or directory."""
    if draw(st.integers(0, 9)) < 6:
        return {}
    names = draw(st.lists(st.sampled_from(OUTPUTS), min_size=1, max_size=3, unique=True))
    return {
        name: draw(st.sampled_from(["link-outside", "link-outside", "link-nowhere", "directory"])) for name in names
    }


# -- running one example ---------------------------------------------------------------------------------------


def _reraise(exc: BaseException) -> str:
    """Stands in for cli.save_crash: an unexpected exception fails the test with its own traceback."""
    raise exc


_build_parser = functools.cache(cli.build_parser)


@dataclass
class Example:
    root: Path
    runs: list[Path] = field(default_factory=list)

    @property
    def outside(self) -> Path:
        return self.root / "outside"


def _place(path: Path, content: Any, example: Example) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "fifo":
        os.mkfifo(path)
    elif content == "directory":
        path.mkdir()
    elif content == "link-outside":
        path.symlink_to(example.outside / "victim.txt")
    elif content == "link-zero":
        path.symlink_to("/dev/zero")
    elif content == "link-nowhere":
        path.symlink_to(example.outside / "nowhere")
    elif content == "empty":
        path.write_bytes(b"")
    # missing: nothing


def materialize(root: Path, runs: list[RunFiles], planted: dict[str, str]) -> Example:
    if root.exists():
        shutil.rmtree(root)
    example = Example(root)
    example.outside.mkdir(parents=True)
    (example.outside / "victim.txt").write_text("outside the run directory\n")
    for n, files in enumerate(runs):
        run = root / "runs" / f"run{n}"
        run.mkdir(parents=True, mode=0o700)
        _place(run / "results.jsonl", files.results, example)
        _place(run / "run.json", files.info, example)
        example.runs.append(run)
    for name, how in planted.items():
        _place(example.runs[0] / name, how, example)
    return example


def snapshot(example: Example) -> dict[str, tuple]:
    """Everything under the example's root but inside its run directories: type, mode, mtime, content."""
    found = {}
    inside = {str(run) for run in example.runs}
    for directory, dirs, files in os.walk(example.root):
        dirs[:] = [d for d in dirs if os.path.join(directory, d) not in inside]
        for name in dirs + files:
            path = os.path.join(directory, name)
            status = os.lstat(path)
            if stat.S_ISLNK(status.st_mode):
                content = os.readlink(path).encode()
            elif stat.S_ISREG(status.st_mode):
                content = hashlib.sha256(Path(path).read_bytes()).digest()
            else:
                content = b""
            found[os.path.relpath(path, example.root)] = (status.st_mode, status.st_mtime_ns, content)
    return found


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    """`niclab ARGV` in-process under a SLOW_SECONDS timer: (status, stdout, stderr, seconds)."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict")  # as the real stdout: strict UTF-8
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace")
    saved = cli.save_crash, cli.build_parser, signal.getsignal(signal.SIGTERM)
    cli.save_crash, cli.build_parser = _reraise, _build_parser
    started = time.monotonic()
    try:
        with (
            timebox(SLOW_SECONDS, f"niclab {' '.join(argv)}"),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")  # scipy's and matplotlib's remarks on odd numbers
            status = cli.main(argv)
    finally:
        cli.save_crash, cli.build_parser = saved[:2]
        signal.signal(signal.SIGTERM, saved[2])  # cli.main sets its own
    seconds = time.monotonic() - started
    out.flush()
    err.flush()
    return status, out_bytes.getvalue().decode(), err_bytes.getvalue().decode(), seconds


def check(example: Example, argv: list[str], outputs: list[Path], cache: Path) -> int:
    """Run the command on the example and check every property; returns its exit status."""
    before = snapshot(example)
    status, _, err, _ = run_cli(argv)
    assert status in (0, 1, 2), (status, err)
    assert "Traceback" not in err and "bug in niclab" not in err and "internal error" not in err, err
    assert not (cache / "crashes").exists(), err
    assert snapshot(example) == before, f"niclab {' '.join(argv)} changed something outside the run directory"
    errors = [line for line in err.splitlines() if not line.startswith("niclab: warning: ")]
    if status == 0 or (status == 1 and argv[0] == "compare" and not errors):  # compare's 1: a metric got worse
        assert errors == [], err
        for output in outputs:
            assert output.is_file() and not output.is_symlink(), f"{output} is not a regular file"
    else:
        assert len(errors) == 1 and errors[0].startswith("niclab: "), err
    for run in example.runs:  # no temp file left behind
        if run.is_dir():
            assert not [p for p in os.listdir(run) if p.startswith(".") and p.endswith(".tmp")], os.listdir(run)
    return status


# -- the tests ---------------------------------------------------------------------------------------------------


@pytest.fixture
def work_dir(tmp_path, monkeypatch):
    """Where the examples are written (RAM if there is some); NICLAB_CACHE in it, for crash files."""
    if os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="niclab-fuzz-") as name:
            monkeypatch.setenv("NICLAB_CACHE", str(Path(name) / "example" / "cache"))
            yield Path(name)
        return
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "example" / "cache"))
    yield tmp_path


def _fuzz(strategy, examples: int, work_dir: Path, record, run_one) -> None:
    statuses = {0: 0, 1: 0, 2: 0}

    @settings(max_examples=examples, **FUZZ_SETTINGS)
    @given(strategy)
    def fuzz(case) -> None:
        statuses[run_one(case, work_dir / "example")] += 1

    started = time.monotonic()
    fuzz()
    ran = sum(statuses.values())
    print(
        f"\n{ran} examples in {time.monotonic() - started:.1f} s: "
        f"{statuses[0]} ok, {statuses[1]} refused, {statuses[2]} usage errors"
    )
    record("examples", ran)
    assert ran >= examples
    assert statuses[0] and statuses[1], "the examples should be a mix of readable and damaged run directories"


@st.composite
def export_cases(draw):
    return (
        draw(run_files(2)),
        draw(plants()),
        draw(st.sampled_from(["csv", "parquet"])),
        draw(st.sampled_from(["measurements", "summaries"])),
    )


def test_export_never_crashes_nor_writes_outside(work_dir, record_property):
    def run_one(case, root: Path) -> int:
        files, planted, fmt, what = case
        example = materialize(root, [files], planted)
        out = example.runs[0] / f"{what}.{fmt}"
        return check(example, ["export", str(example.runs[0]), "--format", fmt, "--what", what], [out], root / "cache")

    _fuzz(export_cases(), EXPORT_EXAMPLES, work_dir, record_property, run_one)


@st.composite
def compare_cases(draw):
    first = draw(run_files(2))
    second = draw(run_files(2)) if draw(st.booleans()) else None
    cells = None
    if draw(st.integers(0, 2)) == 2:  # mostly cells of the first run's seed, now and then one it lacks
        own = [r["cell"] for seed in seeds(2) if seed.name == first.log[0] for r in seed.records]
        ids = st.sampled_from(list(dict.fromkeys(own))) | st.sampled_from(["nic=nope", "", "nic=e1000"])
        cells = [draw(ids), draw(ids)]
    return first, second, cells, draw(plants()), draw(st.sampled_from(["text", "json", "html"])), draw(st.booleans())


def test_compare_never_crashes_nor_writes_outside(work_dir, record_property):
    def run_one(case, root: Path) -> int:
        first, second, cells, planted, fmt, to_file = case
        example = materialize(root, [first] + ([second] if second else []), planted)
        argv = ["compare", *map(str, example.runs), "--format", fmt]
        if cells:
            argv += ["--cells", *cells]
        out = example.runs[0] / "compare.out"
        if to_file:
            argv += ["--out", str(out)]
        if not cells and not second:
            argv = ["compare", str(example.runs[0]), str(example.runs[0]), *argv[2:]]
        return check(example, argv, [out] if to_file else [], root / "cache")

    _fuzz(compare_cases(), COMPARE_EXAMPLES, work_dir, record_property, run_one)


@st.composite
def report_cases(draw):
    runs = [draw(run_files(1))] + ([draw(run_files(1))] if draw(st.integers(0, 4)) == 0 else [])
    return runs, draw(plants())


def test_report_never_crashes_nor_writes_outside(work_dir, record_property):
    def run_one(case, root: Path) -> int:
        runs, planted = case
        example = materialize(root, runs, planted)
        out = example.runs[0] / "report.html"
        return check(example, ["report", *map(str, example.runs), "--out", str(out)], [out], root / "cache")

    _fuzz(report_cases(), REPORT_EXAMPLES, work_dir, record_property, run_one)
