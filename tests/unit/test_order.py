"""The suite's order (tests/order.py): the slowest modules first, each module's tests in their own order."""

from __future__ import annotations

from dataclasses import dataclass

from tests.order import longest_first, read_durations


@dataclass
class Item:
    nodeid: str


def ids(items) -> list[str]:
    return [item.nodeid for item in items]


def test_modules_go_longest_first_and_keep_their_tests_in_order():
    items = [Item("a.py::one"), Item("b.py::one"), Item("a.py::two"), Item("c.py::one"), Item("b.py::two")]
    durations = {"a.py::one": 1.0, "a.py::two": 2.0, "b.py::one": 10.0, "c.py::one": 0.5}
    assert ids(longest_first(items, durations)) == ["b.py::one", "b.py::two", "a.py::one", "a.py::two", "c.py::one"]


def test_a_module_the_file_does_not_know_counts_as_the_median_one():
    items = [Item("new.py::t"), Item("slow.py::t"), Item("mid.py::t"), Item("fast.py::t")]
    durations = {"slow.py::t": 100.0, "mid.py::t": 10.0, "fast.py::t": 1.0}
    # ties keep the collection order: the new module (10 s, the median) comes before mid.py
    assert ids(longest_first(items, durations)) == ["slow.py::t", "new.py::t", "mid.py::t", "fast.py::t"]


def test_without_durations_the_collection_order_stays(tmp_path):
    items = [Item("b.py::t"), Item("a.py::t")]
    assert ids(longest_first(items, read_durations(tmp_path / "missing.json"))) == ["b.py::t", "a.py::t"]
    (tmp_path / "bad.json").write_text("[1, 2")
    assert read_durations(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text('[["a.py::t", 3]]')
    assert read_durations(tmp_path / "list.json") == {}
