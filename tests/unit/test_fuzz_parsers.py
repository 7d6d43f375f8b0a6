"""Every parser of what a guest prints is total: right-typed, finite figures, or that tool's own error.

A guest is untrusted: netperf may print `THROUGHPUT=nan`, iperf3 a JSON list or a string for a rate, ping
`0 packets transmitted`, bonnie++ `abc` in a field, fio its jobs as a mapping, /proc/interrupts a `²`, a
counter 5,000 digits long. Each parser here is fed output captured from the real tool (tests/data), mutated
by Hypothesis (lines dropped, doubled or cut, numbers swapped for such tokens, JSON values swapped for any
JSON), and plain arbitrary text and JSON. The property: it returns measurements whose values are finite
floats (results of the right shape for KTAP, the facts and the counters), or it raises the benchmark's own
error (BenchmarkError), which fails that benchmark run only; never a TypeError, KeyError, ValueError,
ZeroDivisionError, OverflowError or RecursionError.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from niclab.model.bench import bonnie, iperf3, ktap, lmbench, netpipe, nfs, ping, pktgen
from niclab.model.bench.base import BenchmarkError, Measurement
from niclab.model.bench.netperf_flows import combined, split_flows
from niclab.model.bench.netperf_parse import REQUEST_RESPONSE, STREAMS, measurements, parse_keyvals
from niclab.model.facts import NodeFacts
from niclab.plumbing.facts import counter_deltas, parse_counters, parse_node_facts

DATA = Path(__file__).resolve().parents[1] / "data"
SETTINGS = dict(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: What a hostile or broken tool prints where a number belongs.
ODD = ["nan", "-nan", "NaN", "inf", "-inf", "1e999", "-1e999", "", "abc", "²", "٣", "9" * 5000, "1" * 25, "-1", "0",
       "0x10", "1,5", "+++++", "null", "true", "[]", "{}", '"', "\x00", "\x1b[2J", "1e-400", "-0"]  # fmt: skip
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """`text` with lines dropped, doubled or cut, and numbers replaced by odd tokens."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "double", "cut", "number", "number", "number", "insert"]))
        if action == "drop":
            del lines[at]
        elif action == "double":
            lines.insert(at, lines[at])
        elif action == "cut":
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
        elif action == "insert":
            lines.insert(at, draw(st.text(max_size=30)))
        else:
            numbers = list(NUMBER.finditer(lines[at]))
            if numbers:
                found = draw(st.sampled_from(numbers))
                token = draw(st.sampled_from(ODD) | st.text(max_size=6))
                lines[at] = lines[at][: found.start()] + token + lines[at][found.end() :]
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


def json_mutated(data: object) -> st.SearchStrategy:
    """`data` with one of its values (or itself) replaced by any JSON value, or a key dropped."""

    def paths(value: object, at: tuple = ()) -> list[tuple]:
        found = [at]
        if isinstance(value, dict):
            for key, inner in value.items():
                found += paths(inner, (*at, key))
        elif isinstance(value, list):
            for index, inner in enumerate(value[:3]):
                found += paths(inner, (*at, index))
        return found

    def put(value: object, at: tuple, new: object, drop: bool) -> object:
        if not at:
            return new
        copy = json.loads(json.dumps(value))
        target = copy
        for step in at[:-1]:
            target = target[step]
        if drop and isinstance(target, dict):
            target.pop(at[-1], None)
        else:
            target[at[-1]] = new
        return copy

    every = paths(data)
    return st.builds(put, st.just(data), st.sampled_from(every), JSON_VALUES, st.booleans())


def sound(found: list) -> None:
    """What a parser returned: measurements with finite float values."""
    for m in found:
        assert isinstance(m, Measurement), m
        assert type(m.value) is float and math.isfinite(m.value), (m.name, m.value)
        assert all(isinstance(part, str) for part in (m.tool, m.metric, m.unit))


def total(parse, *args) -> None:
    try:
        found = parse(*args)
    except BenchmarkError:
        return
    sound(found)


# -- netperf --------------------------------------------------------------------------------------------------

NETPERF = {path.stem: path.read_text() for path in (DATA / "netperf").glob("*.txt")}
NETPERF_TESTS = [*STREAMS, *REQUEST_RESPONSE]


@settings(**SETTINGS)
@given(data=st.data())
def test_netperf(data):
    text = data.draw(st.sampled_from(sorted(NETPERF.values())).flatmap(mutated) | st.text(max_size=300))
    test, cpu = data.draw(st.sampled_from(NETPERF_TESTS)), data.draw(st.booleans())
    total(lambda: measurements(test, parse_keyvals(text), cpu=cpu))


# -- iperf3 -----------------------------------------------------------------------------------------------------

IPERF3 = [json.loads(path.read_text()) for path in sorted((DATA / "iperf3").glob("*.json"))]


@settings(**SETTINGS)
@given(data=st.data())
def test_iperf3(data):
    sample = data.draw(st.sampled_from(IPERF3))
    stdout = sample["stdout"] if isinstance(sample, dict) and "stdout" in sample else json.dumps(sample)
    parsed = json.loads(stdout) if stdout.strip().startswith("{") else {}
    text = data.draw(
        json_mutated(parsed).map(json.dumps)
        | JSON_VALUES.map(json.dumps)
        | mutated(stdout)
        | st.just("[" * 100_000)
        | st.text(max_size=100)
    )
    total(iperf3.parse, text, data.draw(st.sampled_from(["tcp", "udp"])))


# -- NetPIPE ------------------------------------------------------------------------------------------------------

NETPIPE = [(DATA / "netpipe" / name).read_text() for name in ("e1000.out", "e1000_perturbed.out")]


@settings(**SETTINGS)
@given(data=st.data())
def test_netpipe(data):
    text = data.draw(st.sampled_from(NETPIPE).flatmap(mutated) | st.text(max_size=200))
    streaming = data.draw(st.booleans())
    total(lambda: netpipe.measurements(netpipe.parse_rows(text), streaming))


# -- lmbench ------------------------------------------------------------------------------------------------------

LMBENCH = [json.loads(path.read_text()) for path in sorted((DATA / "lmbench").glob("*.json"))]


@settings(**SETTINGS)
@given(data=st.data())
def test_lmbench(data):
    sample = data.draw(st.sampled_from(LMBENCH))
    test = data.draw(st.sampled_from(["bw_tcp", "lat_tcp", "lat_udp", "lat_connect"]))
    stderr = data.draw(mutated(sample["stderr"]) | st.text(max_size=200))
    stdout = data.draw(mutated(sample["stdout"]) | st.text(max_size=200))
    from niclab.base.node import CommandResult

    result = CommandResult("a", ("sh",), sample["returncode"], stdout, stderr, 1.0)
    total(lmbench.measurements, test, result)


# -- ping -------------------------------------------------------------------------------------------------------------

PING = [path.read_text() for path in sorted((DATA / "ping").glob("*.txt"))]


@settings(**SETTINGS)
@given(text=st.sampled_from(PING).flatmap(mutated) | st.text(max_size=200))
def test_ping(text):
    total(ping.parse, text)


NETPERF_FLOWS = sorted(path.read_text() for path in (DATA / "netperf-flows").glob("*.txt"))


@settings(**SETTINGS)
@given(data=st.data())
def test_netperf_flows(data):
    text = data.draw(st.sampled_from(NETPERF_FLOWS).flatmap(mutated) | st.text(max_size=300))
    test, flows = data.draw(st.sampled_from(NETPERF_TESTS)), data.draw(st.integers(1, 5))
    total(lambda: combined(test, [measurements(test, parse_keyvals(o)) for o in split_flows(text, flows)]))


PKTGEN = sorted(path.read_text() for path in (DATA / "pktgen").glob("*.txt"))
COUNTS = st.integers(-(2**64), 2**64)


@settings(**SETTINGS)
@given(data=st.data())
def test_pktgen(data):
    text = data.draw(st.sampled_from(PKTGEN).flatmap(mutated) | st.text(max_size=300))
    before, after = ({"rx_packets": data.draw(COUNTS), "rx_bytes": data.draw(COUNTS)} for _ in range(2))
    total(pktgen.parse, text, before, after, data.draw(st.integers(64, 9018)))


def test_ping_of_no_packets_is_pings_error():
    text = "--- x ping statistics ---\n0 packets transmitted, 0 received, 0% packet loss, time 0ms\n"
    with pytest.raises(BenchmarkError):
        sound(ping.parse(text))


# -- bonnie++ -------------------------------------------------------------------------------------------------------

BONNIE = [path.read_text() for path in sorted((DATA / "bonnie").glob("*.csv"))]


@settings(**SETTINGS)
@given(data=st.data())
def test_bonnie(data):
    stdout = data.draw(st.sampled_from(BONNIE).flatmap(mutated) | st.text(max_size=200))
    if data.draw(st.booleans()) and stdout:  # a field of the CSV swapped for an odd token
        fields = stdout.split(",")
        fields[data.draw(st.integers(0, len(fields) - 1))] = data.draw(st.sampled_from(ODD))
        stdout = ",".join(fields)
    total(bonnie.parse, stdout, data.draw(st.text(max_size=50)))


# -- fio (the nfs benchmark) ------------------------------------------------------------------------------------------

FIO = {path.stem: json.loads(path.read_text()) for path in sorted((DATA / "fio").glob("*.json"))}


@settings(**SETTINGS)
@given(data=st.data())
def test_fio(data):
    name = data.draw(st.sampled_from(sorted(FIO)))
    pattern = name.split("_")[0]
    text = data.draw(
        json_mutated(FIO[name]).map(json.dumps)
        | JSON_VALUES.map(json.dumps)
        | st.just('{"jobs": {"a": 1}}')
        | st.just("{" + "[" * 100_000)
        | st.text(max_size=100)
    )
    total(nfs.parse, pattern, "fio: some message\n" + text)


# -- KTAP -------------------------------------------------------------------------------------------------------------

KTAP = (
    "TAP version 13\n1..3\n# Subtest: a\n    ok 1 a.b\n    not ok 2 a.c # SKIP x\n    1..2\nok 1 a\n"
    "not ok 2 b\nok 3 c # XFAIL y\n"
)


@settings(**SETTINGS)
@given(text=mutated(KTAP) | st.text(max_size=300))
def test_ktap(text):
    for result in ktap.parse(text):
        assert result.result in ("pass", "fail", "skip", "xfail")
        assert isinstance(result.name, str)


# -- node facts and NIC counters ---------------------------------------------------------------------------------------

FACTS = (
    "kernel=6.1.0\nclocksource=tsc\n[link0]\ndriver=e1000\nversion=6.1.0\nbus-info=0000:00:03.0\n"
    "vendor=0x8086\ndevice=0x100e\nsubsystem_vendor=0x1af4\nsubsystem_device=0x1100\nmac=02:4e:4c:00:00:00\n"
    "mtu=1500\n"
)
COUNTERS = (
    "[link0]\nrx_packets=10\ntx_packets=12\nrx_bytes=1000\ntx_bytes=1200\nrx_dropped=0\ntx_dropped=0\n"
    "irq 11=5 7 | IO-APIC 11-fasteoi eth0\n"
)


@settings(**SETTINGS)
@given(text=mutated(FACTS) | st.text(max_size=200))
def test_node_facts(text):
    facts = parse_node_facts(text)  # as the cell record takes them
    head = facts.model_dump(exclude_unset=True)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in head.items() if k != "interfaces")
    NodeFacts.model_validate(facts.model_dump(by_alias=True, exclude_unset=True))  # as a reader takes them back


@settings(**SETTINGS)
@given(before=mutated(COUNTERS) | st.text(max_size=100), after=mutated(COUNTERS))
def test_counters(before, after):
    first, second = parse_counters(before), parse_counters(after)
    for port in (*first.values(), *second.values()):
        for key, value in port.items():
            if key != "irqs":
                assert type(value) is int and 0 <= value < 2**64, (key, value)
        for irq in port["irqs"].values():
            assert all(type(n) is int and 0 <= n < 2**64 for n in irq["cpus"])
    for delta in counter_deltas(first, second).values():
        assert all(type(v) is int for k, v in delta.items() if k not in ("interrupts_per_cpu", "shared_irqs"))
