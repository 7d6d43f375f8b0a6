"""A hard time limit on a block of code in the main thread, for fuzzers: a hang fails, it does not stall.

    with timebox(10.0, "report of example 17"):
        cli.main([...])

SIGALRM (ITIMER_REAL) interrupts the block, a blocking open() of a FIFO or a read that never ends
included. The interruption is a BaseException inside the block, so no `except Exception` in the code
under test swallows it; the block's caller gets `Hang` (an AssertionError: a test failure) saying what
hung and for how long. Not reentrant; the main thread only (pytest runs tests there).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Hang(AssertionError):
    """The block ran past its limit."""


class _Expired(BaseException):
    """Raised inside the block when the limit passes."""


def _expired(signum, frame):
    raise _Expired()


@contextmanager
def timebox(seconds: float, what: str) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Expired:
        raise Hang(f"{what} took over {seconds:g} s (a hang)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
