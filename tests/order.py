"""The suite's order: its slowest modules first, by the durations stored in tests/durations.json.

On several pytest-xdist workers with `--dist loadscope` (tests/conftest.py orders the suite only then) a module's
tests stay on one worker (its module fixtures, a booted session or a nested lab, are made once), and a worker that
runs out of work takes the next module in collection order. Collected longest first, the modules are handed out
as the longest processing time first rule would: the nested lab's module does not start last and leave one worker
running alone. Within a module the tests keep their order.

The file is pytest-split's (test id -> seconds of set-up, call and tear-down), so the same file also splits the
suite over several CI runners (docs/development.md, "Sharding"). Refresh it with `make durations`. A module the
file does not know counts as the median known module: new tests land in the middle, not at either end.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

DURATIONS = Path(__file__).parent / "durations.json"


class _Item(Protocol):
    nodeid: str


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The stored durations; none (and so the collection order) when the file is missing or unreadable."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float))}


def module_seconds(durations: Mapping[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for nodeid, seconds in durations.items():
        totals[module_of(nodeid)] = totals.get(module_of(nodeid), 0.0) + seconds
    return totals


def longest_first(items: Sequence[_Item], durations: Mapping[str, float]) -> list[_Item]:
    """The items, their modules ordered by stored seconds (longest first), each module's items in their order."""
    known = module_seconds(durations)
    default = statistics.median(known.values()) if known else 0.0
    modules: dict[str, list[_Item]] = {}
    for item in items:
        modules.setdefault(module_of(item.nodeid), []).append(item)
    order = sorted(modules, key=lambda module: -known.get(module, default))  # stable: ties keep collection order
    return [item for module in order for item in modules[module]]
