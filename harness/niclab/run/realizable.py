"""Which cells a backend (and its lab) can realize, asked before anything boots.

`run`, `plan`, `validate` and `run --dry-run` share this: the command line's
backend options become a Backend, and each cell's topology is checked by it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from niclab.model.lab.inventory import load_inventory
from niclab.model.scenario import Cell
from niclab.plumbing.backends import Backend, BackendOptions, declared_options, get_backend
from niclab.run.results import cell_dirname


@dataclass(frozen=True)
class Verdict:
    cell: Cell
    reason: str | None  # None: the backend can realize it

    @property
    def ok(self) -> bool:
        return self.reason is None


@contextmanager
def backend_from_args(args: argparse.Namespace) -> Iterator[Backend]:
    """The backend the command line asks for; inside the block a lab's NIC models are known to scenarios."""
    lab = None
    if getattr(args, "lab", None):
        lab = load_inventory(Path(args.lab), allow_uri_params=getattr(args, "allow_uri_params", False))
    options = BackendOptions(lab, **{o.dest: getattr(args, o.dest, o.default) for o in declared_options()})
    with lab.models_known() if lab is not None else nullcontext():
        yield get_backend(getattr(args, "backend", None), options)


def verdicts(backend: Backend, cells: list[Cell]) -> list[Verdict]:
    return [Verdict(cell, backend.check(cell.topology)) for cell in cells]


def refused_cells(args: argparse.Namespace, backend: Backend, cells: list[Cell]) -> tuple[list[Verdict], str]:
    """What `validate` and `plan` say of a rig the command line asks for (--lab or --backend): the cells it
    cannot realize, and how to name it ("lab LAB_YAML", "the B backend"); none without either option."""
    if not (getattr(args, "lab", None) or getattr(args, "backend", None)):
        return [], ""
    where = f"lab {args.lab}" if args.lab else f"the {backend.name} backend"
    return [v for v in verdicts(backend, cells) if not v.ok], where


def describe(backend: Backend, checked: list[Verdict], out: Path | None) -> str:
    """What `run --dry-run` prints: per cell, how it maps onto the backend (and lab), or why it cannot."""
    lines = []
    for verdict in checked:
        cell = verdict.cell
        if not verdict.ok:
            lines.append(f"{cell.id}: cannot realize: {verdict.reason}")
            continue
        lines.append(f"{cell.id}:")
        workdir = out / cell_dirname(cell.id) if out is not None else None
        lines += [f"  {line}" for line in backend.describe(cell.topology, workdir)]
    return "\n".join(lines)
