"""Split a sweep's cells across machines: `--shard i/n`, deterministic and stable.

A cell belongs to shard 1 + (SHA-256 of "scenario/cell id") mod n: the same
on every machine and in every run, independent of the order cells are
listed in and of which other cells exist, so a CI matrix of n runners (or n
lab hosts) covers one sweep exactly once.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from niclab.base.errors import UsageError


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def holds(self, scenario: str, cell_id: str) -> bool:
        return shard_of(scenario, cell_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(scenario: str, cell_id: str, count: int) -> int:
    digest = hashlib.sha256(f"{scenario}/{cell_id}".encode()).digest()
    return 1 + int.from_bytes(digest[:8], "big") % count


def parse_shard(text: str) -> Shard:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"shard {text!r}: write i/n with 1 <= i <= n, e.g. 2/4")
    return Shard(int(match[1]), int(match[2]))
