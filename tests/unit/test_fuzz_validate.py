"""Fuzz `niclab validate` with mutants of the shipped scenarios (property-based, Hypothesis).

Every mutant goes through the CLI in-process, exactly as `niclab validate FILE`
runs it. The property: no traceback and no "internal error" ever; the exit
status is 0 (ok) or 1 (rejected); and every line of a rejection is
`FILE:LINE:COL: PATH: message` with a line inside the file, or names the file
and says why no line can be named (an empty or oversized file).

Mutants are made two ways: on the parsed document (keys deleted, renamed or
added, values of the wrong type, odd numbers and strings, huge values, deep
nesting and alias bombs spliced in, subtrees moved), then dumped with
PyYAML's safe dumper; and on the raw bytes (lines deleted, duplicated, swapped or
re-indented, characters inserted, swapped or deleted, bytes that are not
UTF-8, YAML tags, anchors, aliases and merge keys, numbers PyYAML cannot
convert, document markers).

The run is derandomized, so CI sees the same examples every time. The example
counts are the constants below (EXAMPLES in total); each test prints how many
it ran (pytest -s or -rA shows it). The tests at the end check the guards
directly, at sizes the fuzzer does not reach: nesting thousands of levels deep,
alias bombs (time and memory), recursive aliases, a matrix of 10**12 cells,
100 kB values and an oversized file.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import math
import os
import re
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from niclab.ui.cli import main as cli
from tests.timebox import timebox

ROOT = Path(__file__).resolve().parents[2]
VALID = sorted((ROOT / "scenarios").rglob("*.yaml")) + [
    path
    for name in ("fidelity.yaml", "rate-capped.yaml", "rate-open.yaml")
    if (path := ROOT / "tests" / "integration" / name).exists()
]
SEEDS = VALID + sorted((ROOT / "tests" / "errors").glob("*.yaml"))  # the golden errors: one mistake each
VALID_SEEDS = len(VALID)  # the first seeds validate: half the mutants start from one of them
SEED_BYTES = [path.read_bytes() for path in SEEDS]  # some golden errors are not UTF-8, on purpose
SEED_TEXTS = [data.decode("utf-8", "replace") for data in SEED_BYTES]


def _safe_load(text: str):
    try:
        return yaml.safe_load(text)
    except Exception:  # some golden errors are broken YAML on purpose, too deep, or a number too long
        return None


def _small(doc, limit: int = 10_000) -> bool:
    """Few enough values to mutate (the alias-bomb golden error expands to a billion)."""
    count, stack = 0, [doc]
    while stack and count < limit:
        value = stack.pop()
        count += 1
        stack.extend(value.values() if isinstance(value, dict) else value if isinstance(value, list) else ())
    return not stack


SEED_DOCS = [doc for doc in map(_safe_load, SEED_TEXTS) if isinstance(doc, dict) and _small(doc)]  # valid ones first
SEED_LINES = sorted({line for text in SEED_TEXTS for line in text.splitlines() if line.strip()})

DOC_EXAMPLES = 3000  # mutants of the parsed document, dumped back to YAML (about 5 ms each)
TEXT_EXAMPLES = 3500  # mutants of the raw bytes (about 4 ms each)
EXAMPLES = DOC_EXAMPLES + TEXT_EXAMPLES
SLOW_SECONDS = 60.0  # a mutant still running after this is stopped and fails: a hang (an alias bomb, a matrix
# explosion), not a slow one (each takes milliseconds, the largest about a second, beside a busy process a few)
# The directed tests below feed values of 100,000+ characters, nesting thousands deep and alias bombs: each is
# stopped and fails after GUARD_SECONDS. They take 0.01 to 2 s here; anything quadratic in their size (a
# regular expression that backtracks, a loop over a loop) takes minutes. The guard is the only time limit:
# beside a busy process the same work takes two or three times as long, and must still pass.
GUARD_SECONDS = 30.0

FUZZ_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
)


# -- running the validator ----------------------------------------------------------------------------


def _reraise(exc: BaseException) -> str:
    """Stands in for cli.save_crash: an unexpected exception fails the test with its own traceback."""
    raise exc


_build_parser = functools.cache(cli.build_parser)  # half the time of a call goes to building argparse's parser


@pytest.fixture
def work_dir(tmp_path):
    """Where the mutants are written: RAM if there is some (/tmp can take 2 ms a file), else tmp_path."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="niclab-fuzz-") as name:
        yield Path(name)


def validate(data: bytes, work_dir: Path, limit: float = SLOW_SECONDS) -> tuple[int, str, str, float]:
    """Write `data` to a file and run `niclab validate` on it in-process, stopped after `limit` seconds:
    (status, stdout, stderr, seconds)."""
    path = work_dir / "fuzz.yaml"
    path.write_bytes(data)
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    # what the real streams do: stdout is strict UTF-8, stderr escapes what it cannot encode
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict")
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace")
    saved = cli.save_crash, cli.build_parser
    cli.save_crash, cli.build_parser = _reraise, _build_parser
    started = time.monotonic()
    try:
        with timebox(limit, "validate"), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["validate", str(path)])
    finally:
        cli.save_crash, cli.build_parser = saved
    seconds = time.monotonic() - started
    out.flush()
    err.flush()
    return status, out_bytes.getvalue().decode(), err_bytes.getvalue().decode(), seconds


# a rejection that cannot name a line says why, in one of these ways
POSITIONLESS = re.compile(r"\(top level\): the file is (empty|[\d,]+ bytes;) ")


def check(data: bytes, work_dir: Path) -> int:
    status, out, err, _ = validate(data, work_dir)
    name = str(work_dir / "fuzz.yaml")
    assert "Traceback" not in err and "internal error" not in err and "bug in niclab" not in err, err
    assert status in (0, 1), (status, out, err)
    if status == 0:  # at most a warning, one line naming the file (benchmarks that run once)
        assert all(line.startswith(f"{name}: warning: ") and line.isprintable() for line in err.splitlines()), err
        assert re.fullmatch(re.escape(name) + r": ok \(\d+ cells?\)\n", out), out
        return status
    assert out == ""
    assert err.endswith("\n") and err.strip(), err
    try:  # lines as editors, grep and sed count them: only \n ends one
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = None
    for line in err[:-1].split("\n"):
        assert line.startswith(name + ":"), f"a rejection line does not name the file: {line!r}"
        rest = line[len(name) + 1 :]
        where = re.match(r"(\d+):(\d+): \S.*: \S", rest)
        if where:
            number, column = int(where[1]), int(where[2])
            assert 1 <= number <= data.count(b"\n") + 1, f"line {number} is not in the file: {line!r}"
            assert 1 <= column <= (len(lines[number - 1]) + 1 if lines else len(data) + 1), (
                f"no column {column}: {line!r}"
            )
        else:
            assert POSITIONLESS.match(rest.lstrip()), f"a rejection names no line and says no reason: {line!r}"
    return status


# -- building blocks ---------------------------------------------------------------------------------------


def _keys(value, found: set) -> set:
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(str(key))
            _keys(item, found)
    elif isinstance(value, list):
        for item in value:
            _keys(item, found)
    return found


KEYS = sorted(
    _keys(SEED_DOCS, set())
    | {
        "name",
        "description",
        "nodes",
        "links",
        "benchmarks",
        "repeat",
        "statistics",
        "expect",
        "prices",
        "currency",
        "matrix",
        "exclude",
        "between",
        "nic",
        "count",
        "bond",
        "mtu",
        "offloads",
        "netem",
        "cpus",
        "memory",
        "mode",
        "miimon",
        "xmit_hash_policy",
        "delay",
        "jitter",
        "distribution",
        "loss",
        "duplicate",
        "reorder",
        "corrupt",
        "rate",
        "limit",
        "confidence",
        "max_cv",
        "max_ci_width",
        "from",
        "to",
        "link",
        "test",
        "seconds",
        "tso",
        "gro",
        "kernel",
        "build",
        "module_params",
        "coalesce",
        "rings",
        "queues",
        "a",
        "b",
        "c",
        "<<",
        "",
        " ",
        "${nic}",
        "ñ",
        "a.b",
        "x\ny",
        "1",
        "true",
        "null",
    }
)

TEXTS = st.sampled_from(
    [
        "",
        " ",
        "on",
        "off",
        "yes",
        "no",
        "none",
        "null",
        "~",
        "${nic}",
        "${mtu}",
        "${",
        "${}",
        "${a}${b}",
        "$",
        "10ms",
        "5%",
        "101%",
        "100mbit",
        "100mbps",
        "256M",
        "1G",
        "64G",
        "0M",
        "e1000",
        "virtio",
        "rtl8139",
        "virtio-net-pci",
        "TCP_RR",
        "TCP_STREAM",
        "a",
        "b",
        "c",
        "balance-rr",
        "802.3ad",
        "ñ",
        "💥",
        "\x00",
        "\t",
        "\n",
        " a ",
        "A",
        "a b",
        "-",
        "--",
        "0x_",
        "1:2",
        "2024-13-45",
        "1e400",
        "nan",
        "inf",
        "-0",
        "+1",
        "\u2028",
        "\ud7ff",
        "netperf.TCP_RR.transaction_rate > 500",
        "netperf.TCP_STREAM.throughput_mbps >= 1 Gbit/s",
        "netperf.TCP_STREAM.throughput_mbps[link=1,from=a] > 5",
        "ping.rtt_avg_ms < 1e999 ms",
        "x > 1 " + " " * 200 + "y",
        "trixie",
        "~nosuchuser/linux",
        "../../../../tmp",
        "/dev/zero",
        "a/../../b",
    ]
) | st.text(max_size=24)

SCALARS = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.sampled_from(
        [
            0,
            -1,
            1,
            2,
            3,
            7,
            8,
            9,
            16,
            17,
            64,
            65,
            68,
            100,
            1500,
            9000,
            65535,
            65536,
            2**31,
            2**63,
            2**64 + 1,
            10**40,
            -(10**40),
            10**300,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.5, -0.0, 1e-300, 1e308]),
    st.booleans(),
    st.none(),
    TEXTS,
)

VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


def deep_flow(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "x" + "]" * depth
    if kind == "map":
        return "{k: " * depth + "x" + "}" * depth
    return "[{k: " * (depth // 2) + "x" + "}]" * (depth // 2)


def deep_block(depth: int, indent: int = 0, kind: str = "map") -> str:
    lines = []
    for level in range(depth):
        pad = " " * (indent + 2 * level)
        lines.append(f"{pad}k:" if kind == "map" else f"{pad}- ")
    text = "\n".join(lines)
    return (text + " x\n") if kind == "map" else (text.rstrip() + " x\n")


def alias_bomb(levels: int, width: int, tag: str) -> str:
    """The billion laughs in flow style: level i is `width` aliases of level i-1 (width**levels leaves)."""
    parts = [f"&{tag}0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        parts.append(f"&{tag}{level} [" + ", ".join([f"*{tag}{level - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


def merge_bomb(levels: int, tag: str) -> str:
    """Merge keys that pull in the level below twice over (a bomb through <<)."""
    parts = [f"&{tag}0 {{x0: lol, y0: lol}}"]
    for level in range(1, levels):
        parts.append(f"&{tag}{level} {{<<: [*{tag}{level - 1}], x{level}: [*{tag}{level - 1}, *{tag}{level - 1}]}}")
    return "[" + ", ".join(parts) + "]"


SPLICES = {  # sentinel -> text put in its place after the dump (what safe_dump cannot write, or would overflow doing)
    "zzdeeplistzz": deep_flow(600, "list"),
    "zzdeepmapzz": deep_flow(400, "map"),
    "zzdeepmixzz": deep_flow(300, "mix"),
    "zzbombzz": alias_bomb(9, 9, "lol"),
    "zzmergebombzz": merge_bomb(30, "mb"),
    "zzcyclezz": "&cyc [x, *cyc]",
    "zzcyclemapzz": "&cycm {k: *cycm}",
    "zzundefinedzz": "*nowhere",
}

BIG = st.sampled_from(["long-string", "long-list", "long-map", "long-ints", "huge-int", "sentinel"])

WEIRD_SCALARS = [  # YAML texts the constructor may choke on
    "!!python/object:os.system x",
    "!!python/name:os.system ''",
    "!foo bar",
    "!!int abc",
    "!!int ''",
    "!!float abc",
    "!!float ''",
    "!!bool maybe",
    "!!binary '!!!'",
    "!!binary aGVsbG8=",
    "!!timestamp foo",
    "!!set [1]",
    "!!set {a, b}",
    "!!omap [a]",
    "!!omap {a: 1}",
    "!!omap [{a: 1}, {a: 2}]",
    "!!pairs x",
    "!!map x",
    "!!seq x",
    "!!str [a, b]",
    "!!null x",
    "!<tag:yaml.org,2002:int> x",
    "!!merge x",
    "!!value x",
    "!!yaml x",
    "2024-13-45",
    "2024-02-30",
    "2024-01-01",
    "2024-01-01 25:00:00",
    "2024-01-01T10:00:00+99:00",
    "0x_",
    "0b_",
    "0o17",
    "0x" + "f" * 5000,
    "9" * 5000,
    "-" + "9" * 4400,
    "1_000",
    "._",
    "+._",
    "-._",
    ".inf",
    "-.inf",
    ".nan",
    "1e400",
    "-1e400",
    "1:30",
    "190:20:30",
    "1:30.5",
    "0b1010",
    "012",
    "09",
    "~",
    "null",
    "",
    "''",
    '""',
    '"\\x41"',
    '"\\uD800"',
    '"\\U0010FFFF"',
    '"\\U00110000"',
    '"\\U1F680000"',
    '"\\0"',
    '"\\N\\_\\L\\P"',
    "'it''s'",
    "|\n  x",
    ">-\n  x",
    "*undefined",
    "&anchor",
    "&anchor x",
    "*anchor",
    "? [a]",
    "? {a: 1}",
    "{[1]: 2}",
    "{? {a: b}: c}",
    "{1: a, 1.0: b}",
    "{null: a}",
    "{true: a}",
    "{.nan: a}",
    "{2024-01-01: a}",
    "{0x" + "f" * 4000 + ": a}",
    "{" + "9" * 4400 + ": a}",
    "[a, b",
    "{a",
    "'open",
    '"open',
    "@x",
    "`x",
    "%x",
    "\t",
    "- - - -",
    "a: b: c",
    "&a [*a]",
    "&m {k: *m}",
    "!!set &s {*s}",
    deep_flow(700, "list"),
    deep_flow(700, "map"),
    alias_bomb(10, 10, "bb"),
    merge_bomb(40, "mm"),
    "[" + ", ".join(["x"] * 20000) + "]",
    "x" * 200000,
    "'" + "${" * 30000 + "'",
]

SNIPPET_LINES = [
    "<<: *a",
    "<<: 1",
    "<<: [1, 2]",
    "<<: {name: x}",
    "<<: [*a, *b]",
    "a: &a {name: x}",
    "b: &b [1]",
    "<<: *nowhere",
    "--- ",
    "...",
    "%YAML 1.1",
    "%YAML 2.0",
    "%TAG ! tag:example.com,2000:",
    "%FOO bar",
    "---\nname: other",
    "? complex",
    ": value",
    "- item",
    "key: value",
    "\tindented: with tab",
    "#comment",
    "'quoted key': 1",
    "name: &n x",
    "description: *n",
    "nodes: !!set {a, b}",
    "links: !!omap [{between: [a, b]}]",
    "matrix: {nic: [e1000, virtio]}",
    "exclude: [{nic: e1000}]",
    "expect: [netperf.TCP_RR.transaction_rate > 1]",
    "prices: {e1000: 10, virtio: .nan}",
    "statistics: {confidence: .inf}",
    "repeat: 0x" + "f" * 3000,
    "deep: " + deep_flow(800, "list"),
    "bomb: " + alias_bomb(9, 9, "zz"),
    "merges: " + merge_bomb(35, "mz"),
    "deep:\n" + deep_block(500, 2),
    "deeplist:\n" + deep_block(400, 0, "list"),
]

BAD_BYTES = [
    b"\xff",
    b"\xfe",
    b"\xc3",
    b"\xc3(",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\xaf",
    b"\x80",
    b"\x00",
    b"\x01",
    b"\x07",
    b"\x1b[31m",
    b"\x7f",
    b"\t",
    b"\r",
    b"\r\n",
    b"\xc2\x85",
    b"\xe2\x80\xa8",
    b"\xef\xbb\xbf",
    b"\xef\xbf\xbe",
    b"\xef\xbf\xbf",
    b"\xf0\x9f\x92\xa5",
    b"\\",
    b"'",
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"&",
    b"*",
    b"!",
    b"|",
    b">",
    b"%",
    b"@",
    b"`",
    b"#",
    b"-",
    b"?",
    b" ",
    b"\n",
]


# -- document-level mutants --------------------------------------------------------------------------------


DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's is faster; both write the same YAML


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, path + (i,))


def _get(doc, path):
    for part in path:
        doc = doc[part]
    return doc


def _set(doc, path, value):
    if not path:
        return value
    try:
        _get(doc, path[:-1])[path[-1]] = value
    except (KeyError, IndexError, TypeError):  # an earlier change of this mutation moved the path
        pass
    return doc


def _big_value(draw, kind: str):
    if kind == "long-string":
        return draw(st.sampled_from(["x", "ab ", "${", "é", "a\n"])) * draw(st.sampled_from([1000, 5000, 50000]))
    if kind == "long-list":
        return [draw(SCALARS)] * draw(st.sampled_from([300, 1000, 3000]))
    if kind == "long-map":
        return {f"k{i}": i for i in range(draw(st.sampled_from([300, 1000])))}
    if kind == "long-ints":
        return list(range(draw(st.sampled_from([300, 2000]))))
    if kind == "huge-int":
        return draw(st.sampled_from([10**40, -(10**40), 10**99, 10**100, 10**150, -(10**4200)]))  # < 4300 digits
    return draw(st.sampled_from(sorted(SPLICES)))


def _mutate_doc(draw, doc):
    paths = list(_paths(doc))
    path = draw(st.sampled_from(paths))
    target = _get(doc, path)
    op = draw(
        st.sampled_from(
            [
                "delete",
                "replace",
                "retype",
                "add-key",
                "rename-key",
                "repeat-item",
                "big",
                "move",
                "placeholder",
                "matrix-axis",
                "wrap",
            ]
        )
    )
    if op == "delete" and path:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
    elif op == "replace":
        doc = _set(doc, path, draw(VALUES))
    elif op == "retype":
        if isinstance(target, dict):
            new = draw(st.sampled_from([list(target.values()), list(target), str(target), None, 0, [target]]))
        elif isinstance(target, list):
            new = draw(
                st.sampled_from(
                    [
                        {i: v for i, v in enumerate(target)},
                        ", ".join(map(str, target)),
                        None,
                        1,
                        {"x": target},
                        target[:1],
                        [],
                    ]
                )
            )
        elif isinstance(target, str):
            new = draw(
                st.sampled_from(
                    [
                        [target],
                        {target: target},
                        {target: None},
                        1,
                        1.5,
                        True,
                        None,
                        target.upper(),
                        target + "x",
                        target[:-1],
                        " " + target,
                    ]
                )
            )
        elif isinstance(target, bool) or target is None:
            new = draw(st.sampled_from(["on", "off", 1, 0, [], {}, "true"]))
        else:
            new = draw(
                st.sampled_from(
                    [
                        str(target),
                        [target],
                        {"v": target},
                        -target if target == target else 0,
                        target * 10**30 if isinstance(target, int) else math.inf,
                        float(target),
                        True,
                        None,
                    ]
                )
            )
        doc = _set(doc, path, new)
    elif op == "add-key":
        if isinstance(target, dict):
            target[draw(st.sampled_from(KEYS) | st.text(max_size=8))] = draw(VALUES)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(VALUES))
    elif op == "rename-key" and path and isinstance(_get(doc, path[:-1]), dict):
        parent = _get(doc, path[:-1])
        key = path[-1]
        new_key = draw(
            st.sampled_from(KEYS) | st.just(str(key)[:-1]) | st.just(str(key) + "s") | st.just(str(key).upper())
        )
        items = [(new_key if k == key else k, v) for k, v in parent.items()]
        parent.clear()
        parent.update(items)
    elif op == "repeat-item" and isinstance(target, list) and target:
        item = draw(st.sampled_from(target))
        target.extend(copy.deepcopy(item) for _ in range(draw(st.sampled_from([1, 2, 10, 50]))))
    elif op == "big" and draw(st.integers(0, 2)) == 0:  # a third of the time: big values are slow to parse
        doc = _set(doc, path, _big_value(draw, draw(BIG)))
    elif op == "move" and len(paths) > 1:
        other = draw(st.sampled_from(paths))
        doc = _set(doc, path, copy.deepcopy(_get(doc, other)))
    elif op == "placeholder":
        axis = draw(
            st.sampled_from(
                list((doc.get("matrix") or {}) if isinstance(doc, dict) and isinstance(doc.get("matrix"), dict) else {})
                + ["nic", "zz", ""]
            )
        )
        doc = _set(doc, path, draw(st.sampled_from([f"${{{axis}}}", f"x${{{axis}}}y", f"${{{axis}"])))
    elif op == "matrix-axis" and isinstance(doc, dict):
        matrix = doc.get("matrix") if isinstance(doc.get("matrix"), dict) else {}
        doc["matrix"] = matrix
        axis = draw(st.sampled_from(["nic", "mtu", "count", "new", "x y", "1a"]))
        matrix[axis] = draw(st.lists(SCALARS, max_size=draw(st.sampled_from([3, 12, 40]))))
        if draw(st.booleans()):
            doc = _set(doc, path, f"${{{axis}}}")
    elif op == "wrap":
        doc = _set(doc, path, draw(st.sampled_from([[target], {"x": target}, [[target]], {"": target}])))
    return doc


@st.composite
def doc_mutants(draw) -> bytes:
    doc = copy.deepcopy(draw(st.sampled_from(SEED_DOCS[:VALID_SEEDS]) | st.sampled_from(SEED_DOCS)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))):
        doc = _mutate_doc(draw, doc)
    text = yaml.dump(
        doc,
        Dumper=DUMPER,
        sort_keys=False,
        allow_unicode=draw(st.booleans()),
        default_flow_style=draw(st.sampled_from([False, None, True])),
        width=draw(st.sampled_from([80, 20, 10**6])),
    )
    for sentinel, splice in SPLICES.items():
        text = text.replace(sentinel, splice)
    return text.encode("utf-8", "surrogatepass")


# -- text-level mutants ------------------------------------------------------------------------------------


def _mutate_text(draw, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i = draw(st.integers(0, max(0, len(lines) - 1)))
    op = draw(
        st.sampled_from(
            [
                "delete-line",
                "duplicate-line",
                "swap-lines",
                "insert-line",
                "indent",
                "dedent",
                "value",
                "value",
                "value",
                "insert-bytes",
                "insert-bytes",
                "delete-byte",
                "swap-bytes",
                "replace-byte",
                "truncate",
                "prefix",
                "key-value",
            ]
        )
    )
    if op == "delete-line" and lines:
        del lines[i]
    elif op == "duplicate-line" and lines:
        lines.insert(i, lines[i])
    elif op == "swap-lines" and len(lines) > 1:
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "insert-line":
        indent = b" " * draw(st.sampled_from([0, 2, 4, 6]))
        line = draw(st.sampled_from(SEED_LINES) | st.sampled_from(SNIPPET_LINES)).encode("utf-8", "surrogatepass")
        lines.insert(i, indent + line)
    elif op == "indent" and lines:
        lines[i] = b" " * draw(st.integers(1, 5)) + lines[i]
    elif op == "dedent" and lines:
        lines[i] = lines[i][draw(st.integers(1, 4)) :]
    elif op in ("value", "key-value") and lines:
        # replace what follows "key:" or "- " on a line with a weird YAML text
        line = lines[i]
        cut = line.find(b": ")
        cut = cut + 2 if cut >= 0 else (line.find(b"- ") + 2 if b"- " in line else len(line))
        weird = draw(st.sampled_from(WEIRD_SCALARS)).encode("utf-8", "surrogatepass")
        if op == "key-value":
            lines[i] = weird + b": " + line[cut:] if cut < len(line) else weird + b": x"
        else:
            lines[i] = line[:cut] + weird
    elif op == "prefix":
        head = draw(
            st.sampled_from(
                [
                    b"%YAML 1.1\n---\n",
                    b"%YAML 1." + b"9" * 5000 + b"\n---\n",
                    b"--- !!map\n",
                    b"---\n",
                    b"--- |\n",
                    b"...\n",
                    b"\xef\xbb\xbf",
                    b"\xff\xfe",
                    b"&top\n",
                    b"!!omap\n",
                    b"- \n",
                    b"? \n",
                    b"\n" * 5000,
                    b"# " + b"x" * 100000 + b"\n",
                ]
            )
        )
        return head + data if draw(st.booleans()) else data + b"\n" + head
    else:
        text = b"\n".join(lines)
        at = draw(st.integers(0, max(0, len(text) - 1)))
        if op == "insert-bytes":
            chunk = draw(st.sampled_from(BAD_BYTES) | st.binary(min_size=1, max_size=4))
            return text[:at] + chunk * draw(st.sampled_from([1, 1, 2, 50])) + text[at:]
        if op == "delete-byte":
            return text[:at] + text[at + draw(st.integers(1, 3)) :]
        if op == "swap-bytes" and len(text) > at + 1:
            return text[:at] + text[at + 1 : at + 2] + text[at : at + 1] + text[at + 2 :]
        if op == "replace-byte":
            return text[:at] + draw(st.sampled_from(BAD_BYTES)) + text[at + 1 :]
        if op == "truncate":
            return text[:at]
        return text
    return b"\n".join(lines)


@st.composite
def text_mutants(draw) -> bytes:
    data = draw(st.sampled_from(SEED_BYTES[:VALID_SEEDS]) | st.sampled_from(SEED_BYTES))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))):
        data = _mutate_text(draw, data)
    return data


# -- the tests -------------------------------------------------------------------------------------------------


def _run(strategy, examples: int, work_dir: Path, record) -> None:
    statuses = {0: 0, 1: 0}

    @settings(max_examples=examples, **FUZZ_SETTINGS)
    @given(strategy)
    def fuzz(data: bytes) -> None:
        statuses[check(data, work_dir)] += 1

    started = time.monotonic()
    fuzz()
    ran = sum(statuses.values())
    print(f"\n{ran} examples in {time.monotonic() - started:.1f} s: {statuses[0]} ok, {statuses[1]} rejected")
    record("examples", ran)
    assert ran >= examples
    assert statuses[0] and statuses[1], "the mutants should be a mix of valid and invalid scenarios"


def test_document_mutants_never_crash(work_dir, record_property):
    _run(doc_mutants(), DOC_EXAMPLES, work_dir, record_property)


def test_text_mutants_never_crash(work_dir, record_property):
    _run(text_mutants(), TEXT_EXAMPLES, work_dir, record_property)


def test_every_seed_is_valid_or_cleanly_rejected(work_dir):
    for text in SEED_TEXTS:
        check(text.encode(), work_dir)


# -- the guards, directly -----------------------------------------------------------------------------------


def _validate_measured(text: str, work_dir: Path) -> tuple[int, str, float, int]:
    tracemalloc.start()
    try:
        status, _, err, seconds = validate(text.encode(), work_dir, GUARD_SECONDS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return status, err, seconds, peak


BASE = "name: x\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"


@pytest.mark.parametrize(
    "text",
    [
        BASE + "description: " + deep_flow(5000, "list") + "\n",
        BASE + "description: " + deep_flow(5000, "map") + "\n",
        BASE + "description:\n" + deep_block(400, 2),
        BASE + "description:\n" + deep_block(400, 0, "list"),
    ],
    ids=["flow-list", "flow-map", "block-map", "block-list"],
)
def test_deep_nesting_is_rejected_not_a_recursion_error(text, work_dir):
    status, err, _, _ = _validate_measured(text, work_dir)
    assert status == 1
    assert re.search(r"fuzz\.yaml:\d+:\d+: description\S*: lists and mappings are nested more than 64", err), err


@pytest.mark.parametrize(
    "text",
    [
        BASE + "description: " + alias_bomb(9, 9, "lol") + "\n",  # 9**9 = 387 million leaves
        BASE + "description: " + alias_bomb(30, 2, "two") + "\n",  # 2**30
        BASE + "description: " + merge_bomb(40, "m") + "\n",
        BASE
        + "bomb: &a [x, x]\n"
        + "".join(
            f"bomb{i}: &a{i} [*{'a' if i == 0 else f'a{i - 1}'}, *{'a' if i == 0 else f'a{i - 1}'}]\n"
            for i in range(40)
        ),
        "lol: &l [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else '*l'] * 10)}]\n" for i in range(9))
        + "name: x\n",
    ],
    ids=["laughs-9x9", "doubling-30", "merge-keys", "block-doubling", "classic-billion-laughs"],
)
def test_alias_bombs_are_rejected_fast(text, work_dir):
    status, err, _, peak = _validate_measured(text, work_dir)
    assert status == 1
    assert re.search(r"fuzz\.yaml:\d+:\d+: .*alias", err), err
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("text", ["a: &a [x, *a]\n", "a: &a {k: *a}\n", "a: &a {<<: *a}\n", "a: &a !!set {? *a}\n"])
def test_recursive_aliases_are_rejected(text, work_dir):
    status, err, _, _ = _validate_measured(text, work_dir)
    assert status == 1
    assert re.search(r"fuzz\.yaml:1:\d+: ", err), err


def test_a_huge_matrix_is_rejected_before_it_is_expanded(work_dir):
    axes = "".join(f"  x{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" for i in range(12))  # 10**12 cells
    text = BASE + "description: '" + "".join(f"${{x{i}}}" for i in range(12)) + "'\nmatrix:\n" + axes
    status, err, _, _ = _validate_measured(text, work_dir)
    assert status == 1
    assert re.search(r"fuzz\.yaml:\d+:\d+: matrix: the matrix has 1,000,000,000,000 combinations", err), err


def test_a_chain_of_aliases_is_as_deep_as_its_expansion(work_dir):
    chain = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 200))  # 200 levels, 200 values
    status, err, _, _ = _validate_measured(BASE + chain, work_dir)
    assert status == 1
    assert re.search(r"fuzz\.yaml:\d+:\d+: a\d+: through its aliases this value is nested more than 64", err), err


NODES = ", ".join(f"n{i}" for i in range(5000))
STRANGERS = ", ".join(f"m{i}" for i in range(2000))


@pytest.mark.parametrize(
    "text",
    [
        BASE + "benchmarks: [netperf]\nexpect: ['netperf.TCP_STREAM.throughput_mbps > 1" + " " * 200_000 + "x y']\n",
        BASE + "benchmarks: [netperf]\nexpect: ['" + "a" * 200_000 + " > 1']\n",
        BASE + "description: '" + "${" * 150_000 + "'\n",
        BASE + "    offloads:\n      " + "tos" * 60_000 + ": off\n",
        BASE + "    netem: {delay: '" + "9" * 100_000 + "ms'}\n",
        BASE + "benchmarks: [" + "x" * 200_000 + "]\n",
        "name: x\nnodes: [" + NODES + "]\nlinks:\n  - between: [" + STRANGERS + "]\n    nic: e1000\n",
        BASE + "    mtu: 0x" + "f" * 300_000 + "\n",
    ],
    ids=[
        "expect-spaces",
        "expect-name",
        "placeholders",
        "offload-name",
        "netem-digits",
        "benchmark-name",
        "thousands-of-unknown-nodes",
        "hex-number",
    ],
)
def test_long_values_take_linear_time_and_short_messages(text, work_dir):
    status, err, _, _ = _validate_measured(text, work_dir)
    assert status in (0, 1), err
    assert max((len(line) for line in err.splitlines()), default=0) < 1000, "a message quotes a whole long value"


def test_an_oversized_file_is_rejected_before_it_is_parsed(work_dir):
    text = BASE + "description: '" + "x" * 600_000 + "'\n"
    status, err, _, _ = _validate_measured(text, work_dir)
    assert status == 1
    assert err.endswith(
        f"fuzz.yaml: (top level): the file is {len(text):,} bytes; a scenario file is at most 512 KiB\n"
    )
