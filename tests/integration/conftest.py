"""Integration tests boot real QEMU guests from the micro image (built first if missing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from niclab.plumbing.image import Image, ensure_image

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test below this directory `integration`, so `pytest -m "not integration"` runs the unit tests alone.

    A conftest's `pytestmark` would mark nothing: pytest reads it from test modules only.
    """
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def image() -> Image:
    return ensure_image(progress=lambda m: print(f"[image] {m}", file=sys.stderr))
