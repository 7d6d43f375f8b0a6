"""The layer folders are a contract that `make lint` checks (import-linter, pyproject.toml).

The package as it is keeps the contract; a copy of it with one upward import, or one
import inside a function that closes a cycle, breaks it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
LAYERS = ["base", "model", "plumbing", "run", "ui"]


def lint(harness: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts over the package under `harness`."""
    config = tmp_path / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", config)
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(harness), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    harness = tmp_path / "harness"
    shutil.copytree(ROOT / "harness" / "niclab", harness / "niclab", ignore=shutil.ignore_patterns("__pycache__"))
    return harness


def test_the_package_root_holds_only_the_layer_folders() -> None:
    root = ROOT / "harness" / "niclab"
    entries = {p.name for p in root.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", "__main__.py", "py.typed", *LAYERS}


def test_the_package_keeps_the_layer_contract(package_copy: Path, tmp_path: Path) -> None:
    result = lint(package_copy, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layer_contract(package_copy: Path, tmp_path: Path) -> None:
    paths = package_copy / "niclab" / "base" / "paths.py"
    paths.write_text(paths.read_text() + "\nfrom niclab.run import runner  # deliberate violation\n")
    result = lint(package_copy, tmp_path)
    assert result.returncode != 0
    assert "niclab.base.paths -> niclab.run.runner" in result.stdout


def test_an_import_inside_a_function_that_closes_a_cycle_breaks_the_contract(
    package_copy: Path, tmp_path: Path
) -> None:
    # Two modules of one layer that import each other, one of them lazily: still a cycle.
    knobs = package_copy / "niclab" / "model" / "knobs.py"
    knobs.write_text(knobs.read_text() + "\n\ndef _dodge() -> None:\n    from niclab.model import topology  # noqa\n")
    topology = package_copy / "niclab" / "model" / "topology.py"
    topology.write_text(topology.read_text() + "\nfrom niclab.model import knobs  # noqa\n")
    result = lint(package_copy, tmp_path)
    assert result.returncode != 0
    assert "No import cycles between the modules of one package BROKEN" in result.stdout
    assert "No cycles are allowed in niclab.model." in result.stdout


def test_a_report_that_imports_the_runner_breaks_the_contract(package_copy: Path, tmp_path: Path) -> None:
    tables = package_copy / "niclab" / "ui" / "report" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom niclab.run import runner  # noqa\n")
    result = lint(package_copy, tmp_path)
    assert result.returncode != 0
    assert "niclab.ui.report.tables -> niclab.run.runner" in result.stdout
