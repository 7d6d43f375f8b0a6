"""Python's cyclic garbage collector held off while a large set of objects is built.

Its walks over every live object cost more than building a big run directory's records (some 150,000
models), which hold no reference cycles (docs/results.md, "Reading big runs").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector disabled for the block (if it was enabled), enabled again after it, whatever happens."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
