"""Load run directories into what reports and comparisons work from.

A run directory (see docs/results.md) holds run.json and results.jsonl. Here
its records are grouped per cell: provenance, summaries, measurements, runs.
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from niclab.base.cellpick import pick
from niclab.base.collector import collector_paused
from niclab.base.errors import UsageError
from niclab.run.reader import read_results, read_run_info
from niclab.run.records import (
    CellEndRecord,
    CellRecord,
    ErrorRecord,
    ExpectationRecord,
    MeasurementRecord,
    NicSummary,
    Record,
    RunInfoRecord,
    RunRecord,
    SummaryRecord,
    TestRecord,
)


@dataclass
class CellData:
    id: str
    params: dict[str, Any]
    facts: CellRecord | None = None  # the `cell` record
    end: CellEndRecord | None = None  # the `cell_end` record
    summaries: list[SummaryRecord] = field(default_factory=list)
    measurements: list[MeasurementRecord] = field(default_factory=list)
    runs: dict[str, RunRecord] = field(default_factory=dict)  # run id -> `run` record
    errors: list[ErrorRecord] = field(default_factory=list)
    expectations: list[ExpectationRecord] = field(default_factory=list)
    tests: list[TestRecord] = field(default_factory=list)  # the kernel's selftests and their subtests

    @property
    def card(self) -> str:
        """What the report calls this cell in per-card plots: its NIC, else its id."""
        return str(self.params.get("nic", self.id))

    def summary(
        self, name: str, link: int | None = None, peer: str | None = None, family: int | None = None
    ) -> SummaryRecord | None:
        """The first summary of metric `name` (on `link`, over IP `family`, if given) measured across a link,
        or with `peer` "self" the loopback reference: a plot or finding that asks for the link's figure never
        gets it."""
        for s in self.summaries:
            if (
                s.name == name
                and (link is None or s.link == link)
                and s.peer == peer
                and (family is None or s.family == family)
            ):
                return s
        return None

    def nic_of(self, run_id: str, node: str) -> NicSummary | None:
        run = self.runs.get(run_id)
        return run.nics.get(node) if run is not None else None


@dataclass
class RunData:
    path: Path
    info: RunInfoRecord  # run.json; empty when the run has none
    cells: list[CellData]
    merged_from: list[str] = field(default_factory=list)  # the run directories merged into this one, if any

    @property
    def scenario(self) -> str:
        return self.info.scenario or self.path.name

    def cell(self, cell_id: str) -> CellData:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        ids = [c.id for c in self.cells]
        close = difflib.get_close_matches(cell_id, ids, n=1)
        hint = f"did you mean {_shown(close[0], quoted=True)}? " if close else ""
        listed = ", ".join(map(_shown, ids[:CELLS_LISTED]))
        listed += f", … ({len(ids)} in all)" if len(ids) > CELLS_LISTED else ""
        raise UsageError(f"{self.path} has no cell {cell_id!r}; {hint}its cells: {listed or 'none'}")

    @functools.cached_property
    def axes(self) -> list[str]:
        """The matrix axes, in file order (found once: tables and plots ask per cell)."""
        names: dict[str, None] = {}
        for cell in self.cells:
            names.update(dict.fromkeys(cell.params))
        return list(names)


CELLS_LISTED = 20  # in a message that lists a run's cells


def _shown(cell_id: str, quoted: bool = False) -> str:
    """A cell id from a run directory, in a one-line message: as it is if printable, else as Python writes it."""
    if cell_id.isprintable() and len(cell_id) < 200:
        return f"'{cell_id}'" if quoted else cell_id
    return repr(cell_id[:200])


def params_of(cell_id: str) -> dict:
    """A cell's parameters from its id (nic=e1000,mtu=9000), as text, for cells with no records yet."""
    if cell_id == "default":
        return {}
    return dict(part.partition("=")[::2] for part in cell_id.split(","))


Keep = Callable[[Record], Record | None]  # what of a record to hold: the record, a part of it, or nothing
SHOWN_CELLS = 200  # cells a report shows whole (summary table, provenance): a sweep of thousands stays readable


@runtime_checkable
class PerRun(Protocol):
    """A Keep that depends on the run directory: `of` makes it from the run's run.json."""

    def of(self, info: RunInfoRecord) -> Keep: ...


def every_record(record: Record) -> Record | None:
    return record


def _drawn(record: Record) -> Record | None:
    """All but the `cell_end` records and the measurements without a curve (the summaries hold their figures)."""
    if isinstance(record, MeasurementRecord):
        return record if record.extra.curve else None
    return None if isinstance(record, CellEndRecord) else record


def _bare_cell(record: CellRecord, **kept: Any) -> CellRecord:
    """A `cell` record of the same model with only its header (which cell, when) and the fields `kept`."""
    header = {name: getattr(record, name) for name in ("type", "version", "scenario", "cell", "params", "time")}
    return CellRecord.model_validate(header | kept)


def _bonded(record: RunRecord) -> bool:
    return any((nic.ports or 1) >= 2 for nic in record.nics.values())


class ForReport:
    """What a report draws from. Of the cells it shows whole (the first SHOWN_CELLS, in run.json's order or
    the scenario's, which a merge of shards follows), all but the `cell_end` records and the measurements
    without a curve. Of the others only what its figures and findings read beyond the summaries: a `run`
    record where a NIC bonds ports (the bonding figure, the interrupt finding), and of the `cell` record
    that it was written (a merge of shards prefers a cell that booted). A sweep of 20,000 cells then holds
    its summaries, not 20,000 cells' provenance. A run whose run.json lists no cells holds every cell whole."""

    def of(self, info: RunInfoRecord) -> Keep:
        listed = info.cells
        if not listed:
            return _drawn
        rank = {cell_id: n for n, cell_id in reversed(list(enumerate(info.order)))}
        by_order = sorted(listed, key=lambda cell_id: rank.get(cell_id, len(rank)))
        whole = set(listed[:SHOWN_CELLS]) | set(by_order[:SHOWN_CELLS])
        known = set(listed)

        def keep(record: Record) -> Record | None:
            if record.cell in whole or record.cell not in known:
                return _drawn(record)
            if isinstance(record, RunRecord):
                return record if _bonded(record) else None
            if isinstance(record, CellRecord):
                return _bare_cell(record)
            return _drawn(record)

        return keep

    def __call__(self, record: Record) -> Record | None:  # a record of a run whose shown cells are not known
        return _drawn(record)


for_report = ForReport()


def for_compare(record: Record) -> Record | None:
    """What a comparison judges from: the cells' provenance, their runs, summaries, selftests and failures."""
    return record if isinstance(record, CellRecord | RunRecord | SummaryRecord | TestRecord | ErrorRecord) else None


def for_comparing_runs(record: Record) -> Record | None:
    """What a comparison of two runs judges from: summaries and selftests, and of a cell's provenance only
    the lab hosts its nodes ran on and the cells it alternated with (a cell record of the same model,
    without the rest; none for a cell that has neither). Of a `run` record only the host's load while it
    ran, where it was measured (compare's contention bound reads it, niclab.ui.report.compare.load_pct): the same
    model without its NICs, counters and options. The failures, for what the new run lost."""
    if isinstance(record, RunRecord):
        return record.model_copy(update={"nics": {}, "counters": {}, "options": {}}) if record.host_load else None
    if isinstance(record, CellRecord):
        if not (record.rig.hosts or record.interleaved_with):
            return None  # what the comparison reads of a cell without them is the same without the record
        return _bare_cell(record, rig={"hosts": record.rig.hosts}, interleaved_with=record.interleaved_with)
    return record if isinstance(record, SummaryRecord | TestRecord | ErrorRecord) else None


def load_run(path: Path, keep: Keep | PerRun = every_record) -> RunData:
    """A run directory's records, validated (niclab.run.reader): a damaged file is one RunDirError line.

    Every record is read and validated; only what `keep` takes of them is held (a sweep of 20,000 cells
    has some 150,000 records: a report needs neither the measurements the summaries already hold nor the
    `cell_end` records nor the provenance of cells it does not show, a comparison of two runs only the host
    load of its `run` records and little of a cell's provenance). A cell with no record kept is still listed,
    as run.json names it.
    """
    results = path / "results.jsonl"
    if not results.exists() and not results.is_symlink():
        raise UsageError(f"{path} is not a niclab run directory (it has no results.jsonl)")
    with collector_paused():
        info = read_run_info(path / "run.json") or RunInfoRecord()
        cells: dict[str, CellData] = {cid: CellData(cid, params_of(cid)) for cid in info.cells}
        _hold(cells, read_results(results), keep.of(info) if isinstance(keep, PerRun) else keep)
    return RunData(path, info, list(cells.values()))


Shared = dict[Any, Any]  # what held models share: sets of given fields, and equal flat models


class _GivenFields(set):
    """The names of the fields a held model's input gave, shared by the models given the same ones: a set
    (pydantic's exclude_unset reads it as one) that refuses to change."""

    def _refuse(self, *args: object) -> None:
        raise TypeError("a held record is read, never assigned to: its set of given fields is shared")

    add = discard = remove = pop = clear = update = _refuse
    intersection_update = difference_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse  # type: ignore[assignment]


def _shrunk(model: Any, shared: Shared) -> Any:
    """A model held for reading, and the models inside it, made smaller: one set of the fields their input
    gave, shared with every model given the same ones (and refusing to change); interned text; and a model
    of text and whole numbers only (a NIC's summary, a host's facts) the same object as an equal one held
    before.

    Each model keeps the names of the fields its input set (exclude_unset reads them); as a set of its own
    that is a third of what a summary takes in memory. Held records are read, never assigned to: an
    assignment would fail loudly on the shared set rather than change the others.
    """
    given = frozenset(model.__pydantic_fields_set__)
    if given not in shared:
        shared[given] = _GivenFields(given)
    object.__setattr__(model, "__pydantic_fields_set__", shared[given])
    fields = model.__dict__
    flat = not model.__pydantic_extra__
    for name, value in fields.items():
        if type(value) is str:  # names, units, hosts: the same few words in every record
            fields[name] = sys.intern(value)
        elif isinstance(value, BaseModel):
            fields[name] = _shrunk(value, shared)
            flat = False
        elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), BaseModel):
            for key, inner in value.items():
                value[key] = _shrunk(inner, shared)
            flat = False
        elif value is not None and type(value) not in (int, bool):  # not floats: -0.0 == 0.0
            flat = False
    if not flat:
        return model
    return shared.setdefault((type(model), tuple((k, type(v), v) for k, v in fields.items())), model)


def _hold(cells: dict[str, CellData], records: Iterator[tuple[int, Record]], keep: Keep) -> None:
    """What `keep` takes of the records, each put in its cell (a cell first seen here is added)."""
    shared: Shared = {}
    for _, record in records:
        cell = cells.setdefault(record.cell, CellData(record.cell, {}))
        if cell.params == record.params:  # one dict of a cell's parameters, not one per record
            record.__dict__["params"] = cell.params
        else:
            cell.params = record.params
        held = keep(record)
        if held is None:
            continue
        record = _shrunk(held, shared)
        if isinstance(record, CellRecord):
            cell.facts = record
        elif isinstance(record, CellEndRecord):
            cell.end = record
        elif isinstance(record, SummaryRecord):
            cell.summaries.append(record)
        elif isinstance(record, MeasurementRecord):
            cell.measurements.append(record)
        elif isinstance(record, RunRecord):
            cell.runs[record.run] = record
        elif isinstance(record, ErrorRecord):
            cell.errors.append(record)
        elif isinstance(record, ExpectationRecord):
            cell.expectations.append(record)
        elif isinstance(record, TestRecord):
            cell.tests.append(record)


def load_runs(paths: list[Path], keep: Keep | PerRun = every_record) -> list[RunData]:
    return [load_run(Path(p), keep) for p in paths]


def picked(run: RunData, wanted: list[str] | None, keyword: str | None) -> RunData:
    """The run with only the cells `--cell` and `-k` pick (niclab.base.cellpick); itself when neither."""
    if not wanted and not keyword:
        return run
    chosen = set(pick([cell.id for cell in run.cells], wanted, keyword, str(run.path)))
    cells = [cell for cell in run.cells if cell.id in chosen]
    return RunData(run.path, run.info.model_copy(update={"cells": [c.id for c in cells]}), cells, run.merged_from)


def merge_runs(runs: list[RunData]) -> list[RunData]:
    """Runs of the same scenario (shards of one sweep, or cells run apart) merged into one.

    A cell measured in several of them keeps the one from the later run directory. Cells come in the
    scenario's order, as the later run's run.json keeps it (`cell_order`; `cells` for a run written before).
    """
    groups: dict[str, list[RunData]] = {}
    for run in runs:
        groups.setdefault(run.scenario, []).append(run)
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        group = sorted(group, key=lambda r: r.path.name)
        cells: dict[str, CellData] = {}
        for run in group:
            for cell in run.cells:
                if cell.summaries or cell.tests or cell.facts or cell.id not in cells:
                    cells[cell.id] = cell
        order = group[-1].info.order
        rank = {cell_id: n for n, cell_id in reversed(list(enumerate(order)))}  # the first place of each id
        ranked = sorted(cells.values(), key=lambda c: rank.get(c.id, len(order)))
        info = group[-1].info.model_copy(update={"cells": [c.id for c in ranked]})
        merged.append(RunData(group[-1].path, info, ranked, [str(r.path) for r in group]))
    return merged
