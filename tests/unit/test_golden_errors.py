"""Each bad scenario in tests/errors/ prints exactly its .err file, and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.cli import main

ERRORS = Path(__file__).resolve().parents[1] / "errors"
CASES = sorted(ERRORS.glob("*.yaml"))
LAB_ERRORS = ERRORS / "lab"
LAB_CASES = sorted(LAB_ERRORS.glob("*.yaml"))


def test_there_are_enough_cases():
    assert len(CASES) >= 25
    assert {p.stem for p in ERRORS.glob("*.err")} == {p.stem for p in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_prints_exactly_the_expected_error(case, monkeypatch, capsys):
    monkeypatch.chdir(ERRORS)
    assert main(["validate", case.name]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err == (ERRORS / f"{case.stem}.err").read_text()
    assert captured.out == ""


def test_there_are_enough_lab_inventory_cases():
    assert len(LAB_CASES) >= 10
    assert {p.stem for p in LAB_ERRORS.glob("*.err")} == {p.stem for p in LAB_CASES}


@pytest.mark.parametrize("case", LAB_CASES, ids=lambda p: p.stem)
def test_a_bad_lab_inventory_prints_exactly_the_expected_error(case, monkeypatch, capsys):
    monkeypatch.chdir(LAB_ERRORS)
    assert main(["lab", "check", case.name]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err == (LAB_ERRORS / f"{case.stem}.err").read_text()
    assert captured.out == ""
