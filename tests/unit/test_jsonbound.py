"""JSON from others, parsed with a nesting cap and never Python's recursion (niclab.base.jsonbound)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from niclab.base import jsonbound

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=40,
)


def nesting(value) -> int:
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(value=JSON_VALUES, cap=st.integers(0, 8))
def test_a_json_text_within_the_cap_reads_as_json_reads_it_and_deeper_is_too_deep(value, cap):
    text = json.dumps(value)
    assert jsonbound.depth(text.encode(), cap) == min(nesting(value), cap + 1)
    if nesting(value) <= cap:
        assert jsonbound.loads(text, cap) == json.loads(text)
    else:
        with pytest.raises(jsonbound.TooDeep):
            jsonbound.loads(text, cap)


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(data=st.binary(max_size=200) | st.text(alphabet='[]{}"\\:,0123 a', max_size=200).map(str.encode))
def test_any_bytes_read_as_json_or_raise_valueerror_only(data):
    try:
        jsonbound.loads(data)
    except ValueError:
        pass


@pytest.mark.parametrize(
    "text",
    [b"[" * 100_000, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"[" * 65 + b"]" * 65],
)
def test_deep_nesting_is_too_deep_before_it_is_parsed(text):
    with pytest.raises(jsonbound.TooDeep, match="nested more than the 64 levels niclab reads"):
        jsonbound.loads(text)


def test_brackets_in_strings_do_not_count_and_a_string_not_closed_is_not_json():
    assert jsonbound.loads('{"a": "[[[[", "b\\"[": ["]]]"]}') == {"a": "[[[[", 'b"[': ["]]]"]}
    with pytest.raises(ValueError, match="not JSON"):
        jsonbound.loads('["open')


def test_the_depth_is_counted_in_linear_time():
    started = time.process_time()
    jsonbound.depth(b"[" * 2_000_000 + b"]" * 2_000_000)
    jsonbound.depth(b"[" + b"[1]," * 500_000 + b"[1]]")
    assert time.process_time() - started < 2  # about 0.3 s here; a quadratic walk would take hours
