"""Shared fixtures. Integration tests (tests/integration) boot real QEMU guests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy  # noqa: F401
import pytest
import scipy.special
import scipy.stats  # noqa: F401

from tests.order import longest_first, read_durations

if TYPE_CHECKING:
    from tests.fakes import Replay

# pytester's in-process runs (runpytest) unload, when they end, every module first imported during them; numpy
# then refuses to load again ("cannot load module more than once per process") and any later test that computes
# a statistic fails. Loaded here, before any test, they stay.

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="module")
def replay() -> Replay:
    """What two real e1000 guests answered (tests/fakes.py): the FakeBackend's script, loaded once a module."""
    from tests.fakes import Replay  # the fakes import niclab: only the tests that ask for them load it

    return Replay.load()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers that take whole modules (`--dist loadscope`), the slowest modules first (tests/order.py),
    so the workers finish together; otherwise the collection's order."""
    if config.getoption("dist", None) == "loadscope":
        items[:] = longest_first(items, read_durations())
