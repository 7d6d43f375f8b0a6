"""Reading a run holds the cyclic garbage collector off, and leaves it as it found it."""

import gc

import pytest

from niclab.base.collector import collector_paused


def test_the_collector_is_off_inside_and_back_on_after_even_on_an_error():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("damaged")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_loading_a_run_holds_the_collector_off(data_dir, monkeypatch):
    from niclab.ui.report import data

    seen = []
    real = data._hold

    def hold(*args):
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(data, "_hold", hold)
    data.load_run(data_dir / "runs" / "bonding")
    assert seen == [False] and gc.isenabled()
