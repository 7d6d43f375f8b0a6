import pytest

from niclab.base.yamlpos import Position, YamlError, format_path, load


def test_positions_of_nested_values():
    data, positions = load("a:\n  b: [1, 2]\n  c: {d: x}\n")
    assert data == {"a": {"b": [1, 2], "c": {"d": "x"}}}
    assert positions.of(("a", "b", 1)) == Position(2, 10)
    assert positions.of(("a", "c", "d")) == Position(3, 10)
    assert positions.of(("a", "c", "d"), at_key=True) == Position(3, 7)
    assert positions.of(("a", "c", "missing")) == Position(3, 6)


def test_duplicate_keys_are_errors():
    with pytest.raises(YamlError) as caught:
        load("a: 1\nb: 2\na: 3\n")
    assert caught.value.message == "duplicate key 'a'"
    assert caught.value.position == Position(3, 1)


def test_format_path():
    assert format_path(("links", 0, "nic")) == "links[0].nic"
    assert format_path(()) == "(top level)"
