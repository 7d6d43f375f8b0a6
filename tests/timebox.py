"""A hard time limit on a block of code in the main thread, for fuzzers: a hang fails, it does not stall.

    with timebox(10.0, "report of example 17"):
        cli.main([...])

SIGALRM (ITIMER_REAL) interrupts the block, a blocking open() of a FIFO or a read that never ends
included, and `Hang` says what hung and for how long. Not reentrant; the main thread only (pytest runs
tests there).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Hang(AssertionError):
    """The block ran past its limit."""


@contextmanager
def timebox(seconds: float, what: str) -> Iterator[None]:
    def expired(signum, frame):
        raise Hang(f"{what} took over {seconds:g} s (a hang)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
