"""Each bad scenario in tests/errors/ (and lab inventory in tests/errors/lab/) prints exactly its .err file,
and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.ui.cli.main import main

ERRORS = Path(__file__).resolve().parents[1] / "errors"
# Each kind of file: its directory, the command that checks one, and how many cases it must have at least.
KINDS = {"scenario": (ERRORS, ["validate"], 25), "lab": (ERRORS / "lab", ["lab", "check"], 10)}
CASES = [(kind, case) for kind, (directory, _, _) in KINDS.items() for case in sorted(directory.glob("*.yaml"))]


@pytest.mark.parametrize("kind", KINDS)
def test_there_are_enough_cases(kind):
    directory, _, minimum = KINDS[kind]
    cases = {p.stem for p in directory.glob("*.yaml")}
    assert len(cases) >= minimum
    assert {p.stem for p in directory.glob("*.err")} == cases


@pytest.mark.parametrize("kind,case", CASES, ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_prints_exactly_the_expected_error(kind, case, monkeypatch, capsys):
    directory, command, _ = KINDS[kind]
    monkeypatch.chdir(directory)
    assert main([*command, case.name]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.err == (directory / f"{case.stem}.err").read_text()
    assert captured.out == ""
