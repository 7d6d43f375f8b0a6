"""What a patch broke: the kernel's selftests whose state changed between two runs, per matching cell.

Each test (and link) counts by its worst result over the cell's repeats; one that passed in the base run and
fails or crashes in the new one "broke", and `niclab compare` exits 1 (docs/reports.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from niclab.ui.report.data import CellData
from niclab.ui.report.selftests import REASON_LIMIT, TestKey, clip, ordered, states

BROKEN = ("fail", "crash")


@dataclass(frozen=True)
class TestChange:
    cell: str
    key: TestKey
    base: str | None  # None: the base run did not run it
    new: str | None  # None: the new run did not run it
    reason: str | None  # why, as the new run said (the base run's for a test that is gone)

    @property
    def name(self) -> str:
        return self.key.name() + (f" (link {self.key.link})" if self.key.link else "")

    @property
    def change(self) -> str:
        """pass → fail, new: fail, gone: was pass."""
        if self.base is None:
            return f"new: {self.new}"
        if self.new is None:
            return f"gone: was {self.base}"
        return f"{self.base} → {self.new}"

    @property
    def broke(self) -> bool:
        """Passed in the base run, fails or crashes in the new one."""
        return self.base == "pass" and self.new in BROKEN

    def as_dict(self) -> dict[str, object]:
        return {
            "cell": self.cell,
            "target": self.key.target,
            "test": self.key.test,
            "subtest": self.key.subtest,
            "link": self.key.link,
            "base": self.base,
            "new": self.new,
            "reason": self.reason,
            "broke": self.broke,
        }


@dataclass(frozen=True)
class TestComparison:
    changes: list[TestChange]
    unchanged: int

    @property
    def broke(self) -> list[TestChange]:
        return [c for c in self.changes if c.broke]

    def lines(self) -> list[str]:
        """The comparison as `niclab compare` prints it: a line per change, then the count."""
        cells = max([len(c.cell) for c in self.changes] + [14]) + 2
        names = max([len(c.name) for c in self.changes] + [10]) + 2
        out = ["selftests whose result changed:" if self.changes else "selftests: no result changed"]
        for c in self.changes:
            why = f"  {c.reason}" if c.reason and c.new != "pass" else ""
            out.append(f"{c.cell:<{cells}}{c.name:<{names}}{c.change:<16}{'BROKE' if c.broke else '':<6}{why}".rstrip())
        out.append(
            f"{len(self.changes)} changed, {self.unchanged} unchanged; {len(self.broke)} broke "
            "(passed in the base run, fail or crash in the new one)"
        )
        return out

    def as_dict(self) -> dict[str, object]:
        return {"changes": [c.as_dict() for c in self.changes], "unchanged": self.unchanged, "broke": len(self.broke)}


def compare_tests(pairs: Iterable[tuple[CellData, CellData]]) -> TestComparison | None:
    """The selftests' changes over matched cells (base, new); None unless both sides recorded selftests."""
    pairs = list(pairs)
    if not any(base.tests for base, _ in pairs) or not any(new.tests for _, new in pairs):
        return None
    changes, unchanged = [], 0
    for base_cell, new_cell in pairs:
        if not base_cell.tests and not new_cell.tests:
            continue
        cell = base_cell.id if base_cell.id == new_cell.id else f"{base_cell.id} → {new_cell.id}"
        before, after = states(base_cell), states(new_cell)
        for key in ordered(list(before) + [k for k in after if k not in before]):
            was, now = before.get(key), after.get(key)
            if was is None and now is None:  # a program only its subtests named
                continue
            if was is not None and now is not None and was.result == now.result:
                unchanged += 1
                continue
            told = now if now is not None else was
            reason = clip(told.reason, REASON_LIMIT) if told is not None and told.reason else None
            changes.append(TestChange(cell, key, was.result if was else None, now.result if now else None, reason))
    return TestComparison(changes, unchanged)
