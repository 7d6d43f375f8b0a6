"""`run --parallel`: the pure scheduler of units, and the executor over the replay fake (tests/fakes.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError, UsageError
from niclab.model.lab.inventory import parse_inventory
from niclab.model.lab.match import Unrealizable
from niclab.model.lab.spread import Claim, Held, Load, spread
from niclab.model.scenario import parse
from niclab.run.parallel import ParallelRun
from niclab.run.progress import RunProgress, Watch
from niclab.run.units import Unit, starts, units_of
from niclab.ui.cli.main import main
from tests.fakes import FakeBackend, Replay
from tests.helpers import NETPERF_STREAM, harness
from tests.records import read_records

# Six cells, three topologies (the memory differs): three units of two cells that share a boot, repeats
# interleaved within each.
SIX_CELLS = """\
name: fake-parallel
nodes:
  a: {memory: "${mem}"}
  b: {memory: "${mem}"}
links:
  - between: [a, b]
    nic: e1000
matrix:
  mem: [256M, 320M, 384M]
  secs: [5, 4]
repeat: 2
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: "${secs}"}
"""

ROOMY = """\
name: roomy
hosts:
  rig1: {capacity: {cpus: 8, memory_mib: 1024}}
  rig2: {capacity: {cpus: 8, memory_mib: 1024}}
"""

TWO_HOSTS = """\
name: pair
hosts:
  rig1: {capacity: {cpus: 2, memory_mib: 1024}}
  rig2: {capacity: {cpus: 2, memory_mib: 1024}}
"""


def topology(memory: int = 256):
    text = (
        f"name: s\nnodes: {{a: {{memory: {memory}}}, b: {{memory: {memory}}}}}\n"
        "links:\n  - {between: [a, b], nic: e1000}\nbenchmarks:\n  - ping: {}\n"
    )
    return parse(text, "s.yaml").cells[0].scenario.topology()


# -- the scheduler --------------------------------------------------------------


def test_cells_that_share_a_boot_are_one_unit_in_the_order_of_a_sequential_run():
    units = units_of([topology(256), topology(320), topology(256), topology(384)])
    assert [(u.number, u.cells) for u in units] == [(1, (0, 2)), (2, (1,)), (3, (3,))]


def capacity_fits(lab):
    def fits(unit: Unit, held: Held):
        found = spread(unit.topology, lab, held)
        return None if found is None else (found.claim(unit.topology), found.hosts)

    return fits


def test_a_unit_starts_where_capacity_is_free_the_earliest_that_fits_first():
    lab = parse_inventory(ROOMY, "lab.yaml")
    big, small = topology(512), topology(256)  # 1024 MiB: a whole host; 512 MiB: half one
    units = units_of([big, topology(500), small, topology(250)])
    begun = starts(units, [], capacity_fits(lab))
    assert [(s.unit.number, s.placed) for s in begun] == [
        (1, {"a": "rig1", "b": "rig1"}),
        (2, {"a": "rig2", "b": "rig2"}),
    ]
    # unit 1 ended: unit 3 (the earliest waiting) takes half of rig1, and unit 4 the other half
    later = starts(units[2:], [begun[1].claim], capacity_fits(lab))
    assert [(s.unit.number, s.placed["a"]) for s in later] == [(3, "rig1"), (4, "rig1")]
    assert starts(units[2:], [begun[0].claim, begun[1].claim], capacity_fits(lab)) == []  # all full: they wait


def test_a_later_unit_that_fits_starts_while_an_earlier_one_waits():
    lab = parse_inventory(ROOMY, "lab.yaml")
    units = units_of([topology(512), topology(256)])
    running = [Claim(hosts=(("rig1", Load(1, 400)), ("rig2", Load(1, 600))))]
    assert [s.unit.number for s in starts(units, running, capacity_fits(lab))] == [2]


def test_never_two_units_on_one_card_whatever_the_placement_says():
    units = units_of([topology(256), topology(320), topology(384)])
    claims = {1: frozenset({"a1", "b1"}), 2: frozenset({"b1", "a2"}), 3: frozenset({"a3", "b3"})}
    begun = starts(units, [], lambda unit, held: (Claim(cards=claims[unit.number]), None))
    assert [s.unit.number for s in begun] == [1, 3]
    assert starts(units[1:2], [Claim(cards=claims[1])], lambda u, h: (Claim(cards=claims[2]), None)) == []


# -- the executor ----------------------------------------------------------------


class SpreadingFake(FakeBackend):
    """The replay fake on a lab of two hosts with room for one unit each; benchmarks take a while."""

    name = "libvirt"

    def __init__(self, replay: Replay, lab_text: str = TWO_HOSTS, delay: float = 0.3):
        super().__init__(replay)
        self.lab = parse_inventory(lab_text, "lab.yaml")
        self.live = 0
        self.most = 0
        self._count = threading.Lock()
        self.when(NETPERF_STREAM, node="a", call=lambda node, text: self._slow(delay))

    def _slow(self, delay: float) -> None:
        with self._count:
            self.live += 1
            self.most = max(self.most, self.live)
        time.sleep(delay)
        with self._count:
            self.live -= 1

    def claim(self, topology, held):
        found = spread(topology, self.lab, held)
        return None if found is None else (found.claim(topology), self)


def run(
    tmp_path: Path,
    backend: FakeBackend,
    parallel: bool,
    text: str = SIX_CELLS,
    name: str = "run",
    watch: Watch | None = None,
):
    h = harness(tmp_path, backend, text, watch=watch, name=name)
    started = time.monotonic()
    outcome = ParallelRun(h.runner).run(h.cells) if parallel else h.run()
    return outcome, h.run_dir, h.lines, time.monotonic() - started


# What differs between two runs of the same cells whatever the order: times, and durations (*_s).
VARYING = {"time", "started_at", "finished_at", "seconds", "timings", "host_load"}


def comparable(value):
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in VARYING and not k.endswith("_s")}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def test_a_parallel_run_writes_what_a_sequential_run_writes_and_its_units_overlap(tmp_path, replay):
    sequential = SpreadingFake(replay)
    seq, seq_dir, _, seq_wall = run(tmp_path, sequential, parallel=False, name="seq")
    parallel = SpreadingFake(replay)
    par, par_dir, lines, par_wall = run(tmp_path, parallel, parallel=True, name="par")
    assert seq.ok and par.ok, (seq, par)
    assert [o.cell.id for o in par.cells] == [o.cell.id for o in seq.cells]
    seq_records, par_records = read_records(seq_dir.results), read_records(par_dir.results)
    assert len(par_records) == len(seq_records) > 20
    for got, want in zip(comparable(par_records), comparable(seq_records), strict=True):
        assert got == want, {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert sequential.most == 1 and parallel.most == 2  # two units ran their benchmarks at once
    assert par_wall < seq_wall
    assert json.loads((par_dir.path / "run.json").read_text())["status"] == "ok"
    assert any(line.startswith("[mem=320M,secs=5] cell 3/6: mem=320M,secs=5") for line in lines)
    assert all(r.closed for r in parallel.realizations) and parallel.misses == []


def test_a_failed_unit_does_not_stop_the_others(tmp_path, replay):
    backend = SpreadingFake(replay, delay=0.05)
    backend.fail_realize(NiclabError("rig2 did not answer"), at=1)
    outcome, run_dir, _, _ = run(tmp_path, backend, parallel=True)
    failed = [o.cell.id for o in outcome.cells if not o.ok]  # the first boot failed; its unit's next cell boots
    assert len(failed) == 1 and len([o for o in outcome.cells if o.ok]) == 5
    errors = [r for r in read_records(run_dir.results) if r["type"] == "error"]
    assert {r["cell"] for r in errors} == set(failed) and "rig2 did not answer" in errors[0]["message"]


def test_the_units_of_a_parallel_run_tell_one_tally_as_their_cells_end_out_of_order(tmp_path, replay):
    backend = SpreadingFake(replay, delay=0.05)
    backend.fail_realize(NiclabError("rig2 did not answer"), at=1)
    told: list[RunProgress] = []
    outcome, _, _, _ = run(tmp_path, backend, parallel=True, watch=told.append)
    ended = [p.cell for p in told if p.event == "cell"]
    assert sorted(ended) == sorted(o.cell.id for o in outcome.cells)  # each cell once, in the order they ended
    assert told[0].event == "start" and {(p.cells, p.runs) for p in told} == {(6, 12)}
    assert [p.cells_done for p in told] == sorted(p.cells_done for p in told)  # counts only grow
    assert [p.runs_done for p in told] == sorted(p.runs_done for p in told)
    last = told[-1]
    assert last.finished and last.left_s is None and last.runs_done == 12 and last.cells_failed == 1


def test_a_unit_no_host_can_ever_take_fails_its_cells_and_the_others_run(tmp_path, replay):
    lab = TWO_HOSTS.replace("memory_mib: 1024}}\n  rig2", "memory_mib: 600}}\n  rig2").replace(
        "rig2: {capacity: {cpus: 2, memory_mib: 1024}}", "rig2: {capacity: {cpus: 2, memory_mib: 700}}"
    )
    backend = SpreadingFake(replay, lab_text=lab, delay=0.01)
    outcome, run_dir, _, _ = run(tmp_path, backend, parallel=True)
    by_cell = {o.cell.id: o for o in outcome.cells}
    assert by_cell["mem=256M,secs=5"].ok and by_cell["mem=320M,secs=4"].ok
    assert "the cell spreads over hosts: link 0 joins a on rig1 and b on rig2" in by_cell["mem=384M,secs=5"].errors[0]
    assert [r["cell"] for r in read_records(run_dir.results) if r["type"] == "cell"] == [
        "mem=256M,secs=5",
        "mem=256M,secs=4",
        "mem=320M,secs=5",
        "mem=320M,secs=4",
    ]


def test_ctrl_c_stops_every_unit_and_ends_the_run_interrupted(tmp_path, replay):
    backend = SpreadingFake(replay, delay=0.2)
    with pytest.raises(KeyboardInterrupt):
        run_in_main_thread_interrupted(tmp_path, backend)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "interrupted"
    assert len(backend.realizations) == 2 and all(r.closed for r in backend.realizations)  # unit 3 never began
    cells = [r["cell"] for r in read_records(tmp_path / "run" / "results.jsonl") if r["type"] == "cell"]
    assert cells[:2] == ["mem=256M,secs=5", "mem=256M,secs=4"]  # the first unit's, then what the other had


def run_in_main_thread_interrupted(tmp_path: Path, backend: SpreadingFake) -> None:
    """A unit's thread cannot take Ctrl-C; the main thread does: raise it there once a unit's benchmark ran."""
    original = ParallelRun._write_done

    def write_done(self: ParallelRun) -> None:
        original(self)
        if any(r.done for r in self.units):
            raise KeyboardInterrupt

    ParallelRun._write_done = write_done  # type: ignore[method-assign]
    try:
        run(tmp_path, backend, parallel=True)
    finally:
        ParallelRun._write_done = original  # type: ignore[method-assign]


def test_parallel_needs_a_backend_that_spreads(tmp_path, replay):
    with pytest.raises(UsageError, match="--parallel needs libvirt"):
        run(tmp_path, FakeBackend(replay), parallel=True)


def test_the_cli_refuses_parallel_without_a_lab_in_one_line(repo, capsys):
    assert main(["run", str(repo / "scenarios" / "two-node.yaml"), "--parallel", "--dry-run"]) == 2
    assert capsys.readouterr().err == "niclab: --parallel runs cells at once over a lab's hosts: give --lab LAB_YAML\n"


def test_spread_refuses_what_never_fits():
    with pytest.raises(Unrealizable):
        spread(topology(2048), parse_inventory(TWO_HOSTS, "lab.yaml"))
