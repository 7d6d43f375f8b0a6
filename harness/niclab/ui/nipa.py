"""A run's kernel selftests in NIPA's result format, so a niclab run can serve as a NIPA remote executor.

One executor file per matrix cell with selftests (`nipa/<cell>.json`) and a manifest (`nipa.json`); groups,
test names and results mapped NIPA's way, the second repeat as its retry (docs/reports.md, `niclab export
--format nipa`; tests/data/nipa/README.md names the NIPA code that reads them).
"""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path

from niclab.base.atomic import write_text
from niclab.base.errors import UsageError
from niclab.model.selftests import raw_name
from niclab.run.records import TestRecord
from niclab.run.results import cell_dirname
from niclab.ui.report.data import CellData, RunData, load_run

NIPA_RESULT = {"pass": "pass", "xfail": "pass", "skip": "skip", "fail": "fail", "crash": "fail"}
CRASH_UNKNOWN = "crash-extract-fail"  # NIPA's own word for a crash whose trace named no function
NAME_LIMIT = 200
MANIFEST = "nipa.json"
EXECUTORS = "nipa"

_FRAME = re.compile(r".*(  |0:|>\] )([a-z0-9_]+)\+0x[0-9a-f]+/0x[0-9a-f]+.*")


def namify(what: str) -> str:
    """A name as NIPA makes one (contest/remote/lib/fetcher.py namify): runs of other characters as one -."""
    if not what:
        return "no-name"
    name = re.sub(r"[^0-9a-zA-Z]+", "-", what[:NAME_LIMIT])
    return name[:-1] if name[-1] == "-" else name


def finger_print(console: list[str]) -> str:
    """A crash's finger print as NIPA takes it (contest/remote/lib/crash.py): the first five functions of its
    trace, joined by `:`."""
    names = [m.group(2) for line in console if (m := _FRAME.match(line[:1000]))]
    return ":".join(names[:5]) or CRASH_UNKNOWN


def _when(iso: str | None, fallback: datetime.datetime) -> str:
    """An ISO 8601 time as NIPA writes one (str of an aware datetime: 2026-08-20 15:07:12+00:00)."""
    try:
        when = datetime.datetime.fromisoformat(iso) if iso else fallback
    except ValueError:
        when = fallback
    return str(when if when.tzinfo else when.replace(tzinfo=datetime.UTC))


class _Links:
    """Where a test's output is, relative to the run directory (or under a published base URL)."""

    def __init__(self, run_dir: Path, base_url: str | None):
        self.run_dir, self.base_url = run_dir, base_url.rstrip("/") if base_url else None
        self._raw: dict[str, dict[str, dict[int, str]]] = {}  # cell folder -> raw name -> repeat -> file

    def url(self, relative: str) -> str:
        return f"{self.base_url}/{relative}" if self.base_url else relative

    def cell(self, cell: CellData) -> str:
        return f"raw/{cell_dirname(cell.id)}"

    def _files(self, folder: str) -> dict[str, dict[int, str]]:
        """The raw files of a cell's folder, read once: NAME-N.txt by NAME, then N (a folder of thousands of
        programs' outputs was globbed once per program: 30 s for 6,000)."""
        if folder not in self._raw:
            found: dict[str, dict[int, str]] = {}
            try:
                entries = list(os.scandir(self.run_dir / folder))
            except OSError:
                entries = []
            for entry in entries:
                name, _, number = entry.name.removesuffix(".txt").rpartition("-")
                if entry.name.endswith(".txt") and name and _REPEAT.fullmatch(number):
                    found.setdefault(name, {})[int(number)] = entry.name
            self._raw[folder] = found
        return self._raw[folder]

    def test(self, cell: CellData, record: TestRecord) -> str:
        """The program's raw output of that repeat; else its first; else the cell's raw outputs."""
        folder = self.cell(cell)
        files = self._files(folder).get(raw_name(record.target, record.test), {})
        chosen = files.get(record.repeat) or (files[min(files)] if files else None)
        return self.url(f"{folder}/{chosen}" if chosen else folder)


_REPEAT = re.compile("[0-9]{1,6}")


def _subtests(records: list[TestRecord]) -> list[dict]:
    """The program's subtests, NIPA's nested `results`: the first repeat's result, the second's as `retry`."""
    entries: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: r.repeat):
        name = namify(record.subtest or "")
        entry = entries.get(name)
        if entry is None:
            entries[name] = {"test": name, "result": NIPA_RESULT[record.result]}
        elif "retry" not in entry:
            entry["retry"] = NIPA_RESULT[record.result]
    return list(entries.values())


def _results(cell: CellData, links: _Links) -> list[dict]:
    programs: dict[tuple[str, str, int], list[TestRecord]] = {}
    subtests: dict[tuple[str, str, int], list[TestRecord]] = {}
    for record in cell.tests:
        where = (record.target, record.test, record.link)
        (programs if record.subtest is None else subtests).setdefault(where, []).append(record)
    out = []
    for (target, test, link), records in programs.items():
        first, *later = sorted(records, key=lambda r: r.repeat)
        outcome: dict = {
            "test": namify(test) + (f"-link{link}" if link else ""),
            "group": "selftests-" + namify(target),
            "result": NIPA_RESULT[first.result],
            "link": links.test(cell, first),
        }
        if first.seconds is not None:
            outcome["time"] = first.seconds
        if later:
            outcome["retry"] = NIPA_RESULT[later[0].result]
        crashes = [finger_print(r.console) for r in records if r.result == "crash"]
        if crashes:
            outcome["crashes"] = list(dict.fromkeys(crashes))
        nested = _subtests(subtests.get((target, test, link), []))
        if nested:
            outcome["results"] = nested
        out.append(outcome)
    return out


def executor_name(run: RunData, cell: CellData, several: bool) -> str:
    return "niclab-" + namify(run.scenario) + (f"-{namify(cell.id)}" if several else "")


def nipa_results(run_dir: Path, branch: str | None = None, base_url: str | None = None) -> dict[str, dict]:
    """The run's selftests as NIPA executor files: path relative to the run directory -> its content, one per
    cell with selftests (none when the run has no `test` records)."""
    run = load_run(run_dir)
    cells = [cell for cell in run.cells if cell.tests]
    links = _Links(run_dir, base_url)
    now = datetime.datetime.now(datetime.UTC)
    out = {}
    for cell in cells:
        started = _when(run.info.started_at or (cell.facts.time if cell.facts else None), now)
        out[f"{EXECUTORS}/{cell_dirname(cell.id)}.json"] = {
            "executor": executor_name(run, cell, len(cells) > 1),
            "branch": branch or run_dir.resolve().name,
            "start": started,
            "end": _when(run.info.finished_at, now),
            "results": _results(cell, links),
            "link": links.url(links.cell(cell)),
        }
    return out


def write_nipa(run_dir: Path, branch: str | None = None, base_url: str | None = None) -> Path | None:
    """nipa.json (the manifest) and nipa/<cell>.json (the executors' files) in the run directory; None, and
    nothing written, when the run has no selftests."""
    files = nipa_results(run_dir, branch, base_url)
    if not files:
        return None
    folder = run_dir / EXECUTORS
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UsageError(f"{folder} is not a directory niclab made; remove it and export again")
    folder.mkdir(exist_ok=True)
    manifest = []
    for relative, executor in files.items():
        write_text(run_dir / relative, json.dumps(executor, indent=2) + "\n")
        manifest.append({"url": _Links(run_dir, base_url).url(relative), "branch": executor["branch"],
                         "executor": executor["executor"]})  # fmt: skip
    return write_text(run_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
