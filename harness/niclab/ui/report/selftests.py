"""The kernel's own selftests in a report: per test (and subtest) and card, what came of it.

A cell's `test` records become one state per test and link over its repeats; the map is tests down the side,
cards (or cells) across, each entry with its reason and a crash's console excerpt. It is all a guest's text:
the page escapes it, and it is cut here to bounded lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from niclab.base.text import one_line
from niclab.run.records import TestRecord
from niclab.ui.report.data import CellData, RunData

RESULTS = ("pass", "xfail", "skip", "fail", "crash")  # from best to worst
SEVERITY = {result: rank for rank, result in enumerate(RESULTS)}
NAME_LIMIT = 120  # characters of a target, test or subtest name, as shown
REASON_LIMIT = 300  # characters of a reason
CONSOLE_LINES = 60  # the last lines of a crash's console excerpt
LINE_LIMIT = 240  # characters of a console line


def clip(text: str, limit: int) -> str:
    """Guest text on one line (control characters as escapes), at most `limit` characters."""
    line = one_line(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class TestKey:
    """One test program (subtest None) or subtest, on one link."""

    target: str
    test: str
    subtest: str | None
    link: int

    @property
    def program(self) -> TestKey:
        return TestKey(self.target, self.test, None, self.link)

    def name(self) -> str:
        """drivers/net ping.py, or drivers/net ping.py: test_v4 for a subtest."""
        shown = f"{clip(self.target, NAME_LIMIT)} {clip(self.test, NAME_LIMIT)}"
        return shown + (f": {clip(self.subtest, NAME_LIMIT)}" if self.subtest is not None else "")


def key_of(record: TestRecord) -> TestKey:
    return TestKey(record.target, record.test, record.subtest, record.link)


@dataclass(frozen=True)
class State:
    """What came of one test in one cell, over its repeats: the worst result, and each repeat's."""

    result: str
    results: tuple[str, ...]  # per repeat, in repeat order
    reason: str | None  # the worst repeat's reason, clipped
    console: tuple[str, ...] = ()  # a crash's console excerpt, clipped

    @property
    def agreed(self) -> bool:
        return len(set(self.results)) == 1

    def text(self) -> str:
        """fail, or fail 1/3 when the repeats disagreed (one of three failed)."""
        if self.agreed:
            return self.result
        return f"{self.result} {self.results.count(self.result)}/{len(self.results)}"


def states(cell: CellData) -> dict[TestKey, State]:
    """The cell's tests and subtests, in the order they were first recorded, each with its state."""
    found: dict[TestKey, list[TestRecord]] = {}
    for record in cell.tests:
        found.setdefault(key_of(record), []).append(record)
    out = {}
    for key, records in found.items():
        records = sorted(records, key=lambda r: r.repeat)
        worst = max(records, key=lambda r: SEVERITY[r.result])
        out[key] = State(
            worst.result,
            tuple(r.result for r in records),
            clip(worst.reason, REASON_LIMIT) if worst.reason else None,
            tuple(clip(line, LINE_LIMIT) for line in worst.console[-CONSOLE_LINES:]),
        )
    return out


def ordered(keys: list[TestKey]) -> list[TestKey]:
    """Programs in the order first seen, each followed by its subtests (a subtest without its program's own
    record still gets its program's place)."""
    programs: dict[TestKey, list[TestKey]] = {}
    for key in keys:
        below = programs.setdefault(key.program, [])
        if key.subtest is not None and key not in below:
            below.append(key)
    return [k for program, below in programs.items() for k in ([program] + below)]


def card_of(cell: CellData) -> str:
    """The card under test, as the cell's test records name it: model (driver), else the cell's card."""
    nic = next((t.nic for t in cell.tests if t.nic.model or t.nic.driver), None)
    if nic is None:
        return clip(cell.card, NAME_LIMIT)
    model, driver = nic.model or nic.driver or "", nic.driver
    return clip(model + (f" ({driver})" if driver and driver != model else ""), NAME_LIMIT)


def column_labels(cells: list[CellData]) -> list[str]:
    """One label per cell: its card; cells on the same card (kernels, drivers) add their other parameters."""
    cards = [card_of(cell) for cell in cells]
    labels = []
    for cell, card in zip(cells, cards, strict=True):
        if cards.count(card) == 1:
            labels.append(card)
            continue
        others = ", ".join(f"{k}={v}" for k, v in cell.params.items() if k != "nic") or cell.id
        labels.append(f"{card} · {clip(others, NAME_LIMIT)}")
    return labels


@dataclass(frozen=True)
class Entry:
    result: str  # pass, xfail, skip, fail or crash: the page's colour
    text: str
    reason: str  # on hover; empty when none
    note: int | None  # its footnote's number
    crash: int | None  # its console excerpt's number


@dataclass(frozen=True)
class MapRow:
    label: str
    depth: int  # 0 for a test program, 1 for its subtests, 2 below those
    entries: list[Entry | None]  # one per column; None where the cell did not run it


@dataclass(frozen=True)
class Crash:
    number: int
    column: str
    test: str
    lines: tuple[str, ...]


@dataclass
class SelftestMap:
    columns: list[str]
    rows: list[MapRow]
    notes: list[str] = field(default_factory=list)  # footnote n is notes[n - 1]: one per distinct reason
    crashes: list[Crash] = field(default_factory=list)
    counts: list[dict[str, int]] = field(default_factory=list)  # per column: test programs per result
    sources: list[str] = field(default_factory=list)  # "column: kernel …, tests from …", per column that says


def _source(cell: CellData) -> str:
    first = next(iter(cell.tests))
    parts = [f"kernel {clip(first.kernel, NAME_LIMIT)}" if first.kernel else ""]
    parts.append(f"tests from {clip(first.tests_from, NAME_LIMIT)}" if first.tests_from else "")
    return ", ".join(p for p in parts if p)


def selftest_map(run: RunData) -> SelftestMap | None:
    """The run's map of tests × cards; None when it recorded no selftests."""
    cells = [cell for cell in run.cells if cell.tests]
    if not cells:
        return None
    per_cell = [states(cell) for cell in cells]
    keys = ordered([key for found in per_cell for key in found])
    several_links = len({key.link for key in keys}) > 1
    # a cell that tests several links: each program's row names its link's card where every cell agrees on it
    link_cards: dict[int, set[str]] = {}
    for cell in cells:
        for record in cell.tests:
            link_cards.setdefault(record.link, set()).add(clip(record.nic.model or record.nic.driver or "", NAME_LIMIT))
    columns = column_labels(cells)
    notes: dict[str, int] = {}
    crashes: list[Crash] = []
    rows = []
    for key in keys:
        entries: list[Entry | None] = []
        for column, found in zip(columns, per_cell, strict=True):
            state = found.get(key)
            if state is None:
                entries.append(None)
                continue
            note = notes.setdefault(state.reason, len(notes) + 1) if state.reason else None
            crash = None
            if state.result == "crash" and state.console:
                crash = len(crashes) + 1
                crashes.append(Crash(crash, column, key.name(), state.console))
            entries.append(Entry(state.result, state.text(), state.reason or "", note, crash))
        if key.subtest is None:
            card = link_cards.get(key.link, set())
            named = f": {next(iter(card))}" if len(card) == 1 and "" not in card else ""
            label = key.name() + (f" (link {key.link}{named})" if several_links else "")
            depth = 0
        else:
            label, depth = clip(key.subtest.rpartition("/")[2], NAME_LIMIT), key.subtest.count("/") + 1
        rows.append(MapRow(label, min(depth, 3), entries))
    counts = []
    for found in per_cell:
        programs = [state.result for key, state in found.items() if key.subtest is None]
        counts.append({result: programs.count(result) for result in RESULTS if result in programs})
    sources = [f"{column}: {source}" for column, cell in zip(columns, cells, strict=True) if (source := _source(cell))]
    return SelftestMap(columns, rows, list(notes), crashes, counts, sources)
