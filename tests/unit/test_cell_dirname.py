"""A cell id becomes a directory name only through results.cell_dirname: safe, unique and reversible."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from niclab.run.results import MAX_DIRNAME, RunDir, cell_dirname, cell_id_of

HOSTILE = [
    "..",
    ".",
    ".hidden",
    "a/../../../../tmp/victim",
    "/etc/passwd",
    "a\x00b",
    "a\nb",
    "x\r",
    "nic=e1000",
    "nic=E1000",
    "NIC=e1000",
    "loss=1%",
    "%2e%2e",
    "a~b",
    "a~0123456789abcdef",
    "",
    "é" * 255,
    "x" * 255,
    "x" * 254 + "é",
    "kernel=build:linux,nic=virtio",
]


def safe(name: str) -> bool:
    return (
        0 < len(name.encode()) <= MAX_DIRNAME
        and name not in (".", "..")
        and not name.startswith(".")
        and "/" not in name
        and name.isprintable()
        and name.isascii()
    )


@pytest.mark.parametrize("cell_id", HOSTILE, ids=repr)
def test_every_name_is_safe_and_maps_back(cell_id):
    name = cell_dirname(cell_id)
    assert safe(name), name
    assert cell_id_of(name, HOSTILE) == cell_id


def test_names_are_unique_even_where_case_is_ignored():
    names = [cell_dirname(c) for c in HOSTILE]
    assert len({n.casefold() for n in names}) == len(HOSTILE)


def test_plain_ids_keep_their_name():
    for cell_id in ("nic=e1000,mtu=9000", "default", "kernel=build:linux+x,loss=0.5", "delay=5ms"):
        assert cell_dirname(cell_id) == cell_id


def test_a_cut_name_is_found_among_the_runs_cells_only():
    long = "x" * 255
    assert cell_id_of(cell_dirname(long)) is None  # the name alone does not hold the whole id
    assert cell_id_of(cell_dirname(long), ["other", long]) == long


def test_names_that_no_cell_id_makes_map_to_none():
    for name in ("a%zz", "a%2", "nic=e1000~deadbeef", "%c3"):
        assert cell_id_of(name) is None


def test_the_run_directory_keeps_every_cell_inside_it(tmp_path):
    run = RunDir(tmp_path / "run")
    for cell_id in HOSTILE:
        for path in (run.cell_dir(cell_id), run.raw_dir(cell_id)):
            assert path.parent.parent == run.path
            path.mkdir(parents=True, exist_ok=True)
    assert sorted(os.listdir(tmp_path)) == ["run"]
    assert len(os.listdir(run.path / "cells")) == len(HOSTILE)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=6, unique=True))
def test_any_ids_get_safe_distinct_reversible_names(ids):
    names = [cell_dirname(cell_id) for cell_id in ids]
    assert all(safe(name) for name in names)
    assert len({n.casefold() for n in names}) == len(ids)
    assert [cell_id_of(name, ids) for name in names] == ids
