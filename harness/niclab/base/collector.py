"""Python's cyclic garbage collector held off while a large set of objects is built.

Each collection of the oldest generation walks every object alive, and the
collector runs one whenever enough new containers have piled up: building the
records of a run directory (some 150,000 models, each with dicts and lists)
spends more time in those walks than in parsing and validating. The records
hold no reference cycles, so nothing waits for the collector meanwhile; what
the loading leaves cyclic is collected once the collector runs again.
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
