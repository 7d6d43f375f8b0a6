"""docs/results.md says what the record models hold: its field tables are what niclab.run.recordsdoc generates."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.run import recordsdoc
from niclab.run.records import ErrorRecord

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def test_the_page_lists_every_field_of_every_record_as_the_models_define_it():
    assert recordsdoc.section(PAGE.read_text()) == recordsdoc.tables(), (
        "docs/results.md's field tables differ from the models: run "
        "`python -m niclab.run.recordsdoc --write docs/results.md` and read the diff"
    )


def test_a_field_without_its_docstring_cannot_be_documented():
    class Undocumented(ErrorRecord):
        exit_code: int | None = None

    with pytest.raises(recordsdoc.UndocumentedField, match=r"Undocumented.exit_code has no docstring"):
        recordsdoc._table(Undocumented, set(ErrorRecord.model_fields))


def test_types_read_as_python_writes_them():
    from niclab.run.records import CellRecord, RunRecord

    assert recordsdoc.type_name(RunRecord.model_fields["counters"].annotation) == "dict[str, dict[str, PortCounters]]"
    assert recordsdoc.type_name(CellRecord.model_fields["boot"].annotation) == "BootFacts | None"
    assert recordsdoc.type_name(int) == "int"
