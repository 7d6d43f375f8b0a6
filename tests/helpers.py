"""Helpers the tests share: the runner over the replay fake, and the fake as a whole backend.

`harness` sets up what `niclab run` sets up (a scenario file, a run directory,
its run.json, a Runner) around a backend, usually tests/fakes.FakeBackend, and
reads back what the runner wrote; `fake_plugin` registers the fake as
`--backend fake`, so the command line runs a cell without a VM.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from niclab.model.scenario import load_scenario
from niclab.model.topology import Topology
from niclab.plumbing.backends import BackendOption, BackendOptions, BackendPlugin
from niclab.run.results import RunDir, new_run_info, read_records
from niclab.run.runner import Runner, RunOutcome
from tests.fakes import FakeBackend, Replay

# -- the runner over a fake backend ----------------------------------------------------------------------------

TWO_NODE = """\
name: fake-two-node
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: 5}
  - netperf: {test: TCP_RR, seconds: 5}
"""
"""The replay's own scenario (tests/data/replay/two-node-e1000.json answers every command it runs)."""

LO_COUNTERS = "[lo]\nrx_packets={n}\ntx_packets={n}\nrx_bytes=100\ntx_bytes=100\nrx_dropped=0\ntx_dropped=0\n"
"""A guest's loopback counters as netconf's facts read them (the replay's session measured no loopback)."""
LO_COUNTERS_READ = r"^kv\(\) .*\necho '\[lo\]'"
"""What reads them."""


@dataclass
class Harness:
    """A Runner set up as `niclab run` sets it up, and what it wrote."""

    runner: Runner
    run_dir: RunDir
    cells: list
    lines: list[str] = field(default_factory=list)
    """The progress lines it printed."""

    def run(self) -> RunOutcome:
        return self.runner.run(self.cells)

    @property
    def records(self) -> list[dict]:
        return read_records(self.run_dir.results)

    def info(self) -> dict:
        return json.loads((self.run_dir.path / "run.json").read_text())

    def of(self, kind: str, **where: Any) -> list[dict]:
        return [r for r in self.records if r["type"] == kind and all(r.get(k) == v for k, v in where.items())]


def harness(tmp_path: Path, backend: FakeBackend, text: str = TWO_NODE, repeat: int | None = None) -> Harness:
    """The scenario `text` in tmp_path/scenario.yaml, a run directory tmp_path/run, and a Runner over `backend`."""
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    scenario = load_scenario(path)
    run_path = tmp_path / "run"
    run_path.mkdir()
    run_dir = RunDir(run_path)
    info = new_run_info(
        scenario=scenario.name,
        scenario_file=str(path),
        scenario_text=text,
        cells=[c.id for c in scenario.cells],
        cell_order=[c.id for c in scenario.cells],
        backend=backend.name,
        command=["niclab", "run"],
    )
    lines: list[str] = []
    return Harness(Runner(backend, run_dir, info, lines.append, repeat=repeat), run_dir, scenario.cells, lines)


class Fake(FakeBackend):
    """The replay fake as a whole backend: it can realize any cell (the replay answers two e1000 guests)."""

    def check(self, topology: Topology) -> str | None:
        return None

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        return ["the replay"]


def fake_plugin(kernel_check: bool = False, prepare: Callable[[Fake], None] | None = None) -> BackendPlugin:
    """The fake as a backend plug-in (`--backend fake`, `--niclab-backend fake`) with one option of its own;
    `prepare` adds a test's rules to each backend it creates."""

    def create(options: BackendOptions, **kwargs: object) -> Fake:
        fake = Fake(Replay.load(), facts={"note": options.text("fake_note")})
        if prepare is not None:
            prepare(fake)
        return fake

    return BackendPlugin(
        "fake",
        "the replay of two e1000 guests",
        create,
        options=(BackendOption("fake-note", "a note the fake backend keeps in its rig facts", metavar="TEXT"),),
        kernel_check=kernel_check,
    )
