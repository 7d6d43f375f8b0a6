"""`pytest -m "not integration"` runs the unit tests alone: every test below tests/integration is marked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_not_integration_deselects_every_integration_test(repo: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not integration"]
        + ["tests/integration"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = collected.stdout
    assert collected.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, out[-3000:] + collected.stderr[-3000:]
    assert [line for line in out.splitlines() if line.startswith("tests/integration/")] == [], out[-3000:]
    deselected = re.search(r"no tests collected \((\d+) deselected\)", out)
    assert deselected is not None and int(deselected[1]) > 0, out[-3000:]
