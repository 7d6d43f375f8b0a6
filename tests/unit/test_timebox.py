"""The fuzzers' time limit really stops a hang: a FIFO that nobody writes, a loop that never ends."""

from __future__ import annotations

import os
import time

import pytest

from tests.timebox import Hang, timebox


def test_a_blocking_open_of_a_fifo_is_stopped(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(Hang, match=r"open of a FIFO took over 0\.3 s"), timebox(0.3, "open of a FIFO"):
        fifo.read_text()
    assert time.monotonic() - started < 2


def test_a_busy_loop_is_stopped_and_a_quick_block_is_not():
    with pytest.raises(Hang), timebox(0.2, "loop"):
        while True:
            pass
    with timebox(5, "quick"):
        assert sum(range(10)) == 45
    time.sleep(0.1)  # no alarm left armed: it would raise here


def test_code_that_catches_every_exception_is_stopped_all_the_same():
    with pytest.raises(Hang), timebox(0.2, "swallower"):
        while True:
            try:
                time.sleep(1)
            except Exception:  # what cli.main does with an unexpected exception
                pass
