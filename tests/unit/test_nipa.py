"""nipa.json: a run's selftests in NIPA's result format, checked against files shaped by NIPA's code
(tests/data/nipa/README.md says where in NIPA)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from niclab.base.errors import UsageError
from niclab.run.results import save_raw_file
from niclab.ui.cli.main import main
from niclab.ui.nipa import namify, nipa_results, write_nipa
from tests import records
from tests.records import in_cell, write_run

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "nipa"
OOPS = [
    "[   41.2] kernel BUG at net/core/skbuff.c:200!",
    "[   41.2] RIP: 0010:skb_panic+0x4b/0x50",
    "[   41.3] Call Trace:",
    "[   41.3]  <TASK>",
    "[   41.3]  skb_put+0x3e/0x40",
    "[   41.3]  e1000_xmit_frame+0x2a1/0xd90 [e1000]",
    "[   41.3]  dev_hard_start_xmit+0xa1/0x1e0",
]


def shape(value: Any) -> Any:
    """What a JSON value is made of: its type, a mapping's keys' shapes, a list's elements' (merged: every key
    any element has)."""
    if isinstance(value, dict):
        return {key: shape(v) for key, v in value.items()}
    if isinstance(value, list):
        shapes = [shape(element) for element in value]
        return [merged(shapes)] if shapes else []
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__


def merged(shapes: list[Any]) -> Any:
    if not all(isinstance(s, dict) for s in shapes):
        return shapes[0]
    keys = dict.fromkeys(k for s in shapes for k in s)
    out = {}
    for key in keys:
        found = [s[key] for s in shapes if key in s]
        if all(isinstance(f, list) for f in found):
            inner = [f[0] for f in found if f]
            out[key] = [merged(inner)] if inner else []
        else:
            out[key] = merged(found)
    return out


def fits(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where `ours` is not shaped as `theirs`: keys it lacks or adds, types that differ, nesting."""
    if isinstance(theirs, dict):
        if not isinstance(ours, dict):
            return [f"{where}: {ours!r} is not a mapping"]
        problems = [f"{where}.{key}: not in NIPA's record" for key in ours if key not in theirs]
        return problems + [p for key in ours if key in theirs for p in fits(ours[key], theirs[key], f"{where}.{key}")]
    if isinstance(theirs, list):
        if not isinstance(ours, list):
            return [f"{where}: {ours!r} is not a list"]
        return [p for n, element in enumerate(ours) for p in fits(element, theirs[0], f"{where}[{n}]")]
    return [] if shape(ours) == theirs else [f"{where}: {shape(ours)} where NIPA has {theirs}"]


def selftests_run(tmp_path: Path) -> Path:
    recs = in_cell(
        "nic=e1000",
        {"nic": "e1000"},
        records.selftest("ping.py", "pass", seconds=4.5),
        records.selftest("ping.py", "pass", subtest="ping.test_v4"),
        records.selftest("ping.py", "skip", subtest="ping.test_v6", reason="no IPv6"),
        records.selftest("ping.py", "fail", seconds=4.1, repeat=2),
        records.selftest("ping.py", "fail", subtest="ping.test_v4", repeat=2),
        records.selftest("ping.py", "skip", subtest="ping.test_v6", repeat=2),
        records.selftest("stats.py", "xfail", seconds=1.0),
        records.selftest("csum.py", "crash", seconds=9.0, target="drivers/net/hw", console=OOPS),
    ) + in_cell("nic=virtio", {"nic": "virtio"}, records.selftest("ping.py", "skip", reason="no ethtool"))
    run = write_run(tmp_path / "run", recs, ["nic=e1000", "nic=virtio"])
    save_raw_file(run / "raw" / "nic=e1000", "kselftest-drivers-net-ping.py", "TAP version 13\n")
    save_raw_file(run / "raw" / "nic=e1000", "kselftest-drivers-net-ping.py", "TAP version 13\n")
    return run


def test_namify_names_as_nipa_does():
    assert [namify(x) for x in ("ping.py", "drivers/net/hw", "ping.test_v4", "", "a..b-")] == [
        "ping-py",
        "drivers-net-hw",
        "ping-test-v4",
        "no-name",
        "a-b",
    ]


def test_each_executor_file_is_shaped_as_nipas(tmp_path):
    reference = shape(json.loads((REFERENCE / "executor.json").read_text()))
    files = nipa_results(selftests_run(tmp_path), branch="net-next-2026-08-20--15-00")
    assert set(files) == {"nipa/nic=e1000.json", "nipa/nic=virtio.json"}
    for executor in files.values():
        assert fits(json.loads(json.dumps(executor)), reference) == []
        assert {"executor", "branch", "start", "end", "results"} <= set(executor)
        assert all({"test", "group", "result", "link"} <= set(r) for r in executor["results"])


def test_results_map_to_nipas_words(tmp_path):
    run = selftests_run(tmp_path)
    e1000 = nipa_results(run)["nipa/nic=e1000.json"]
    assert e1000["executor"] == "niclab-selftests-nic-e1000" and e1000["branch"] == "run"
    ping, stats, csum = e1000["results"]
    assert ping == {
        "test": "ping-py",
        "group": "selftests-drivers-net",
        "result": "pass",
        "link": "raw/nic=e1000/kselftest-drivers-net-ping.py-1.txt",
        "time": 4.5,
        "retry": "fail",
        "results": [
            {"test": "ping-test-v4", "result": "pass", "retry": "fail"},
            {"test": "ping-test-v6", "result": "skip", "retry": "skip"},
        ],
    }
    assert (run / ping["link"]).is_file()
    assert stats["result"] == "pass"  # xfail counts as a pass, as KTAP counts it
    assert csum["group"] == "selftests-drivers-net-hw" and csum["result"] == "fail"
    assert csum["crashes"] == ["skb_panic:skb_put:e1000_xmit_frame:dev_hard_start_xmit"]
    assert csum["link"] == "raw/nic=e1000"  # no raw output saved: the cell's


def test_write_nipa_writes_the_manifest_nipas_collector_reads(tmp_path, capsys):
    run = selftests_run(tmp_path)
    assert main(["export", str(run), "--format", "nipa", "--url", "https://lab.example/runs/r1/"]) == 0
    manifest = json.loads((run / "nipa.json").read_text())
    assert fits(manifest, shape(json.loads((REFERENCE / "manifest.json").read_text()))) == []
    assert manifest[0]["url"] == "https://lab.example/runs/r1/nipa/nic=e1000.json"
    executor = json.loads((run / "nipa" / "nic=e1000.json").read_text())
    assert executor["results"][0]["link"].startswith("https://lab.example/runs/r1/raw/nic=e1000/")


def test_a_run_without_selftests_writes_nothing(tmp_path, capsys):
    run = write_run(tmp_path / "run", in_cell("default", {}, records.summary("ping.rtt_avg_ms")), [])
    assert write_nipa(run) is None and not (run / "nipa.json").exists()
    assert main(["export", str(run), "--format", "nipa"]) == 2
    assert "has no kernel selftest results" in capsys.readouterr().err


def test_a_planted_symlink_is_not_written_through(tmp_path):
    run = selftests_run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (run / "nipa").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="not a directory niclab made"):
        write_nipa(run)
    assert not list((tmp_path / "elsewhere").iterdir())


def test_an_export_of_6000_programs_reads_the_raw_folder_once(tmp_path):
    """3,000 and 6,000 programs took 6.4 s and 30 s (the raw folder globbed once per program); now the folder
    is read once, and the time grows with the programs."""
    import time

    programs = [f"t{i}.py" for i in range(6000)]
    recs = in_cell("nic=e1000", {"nic": "e1000"}, *(records.selftest(name, "pass", seconds=1.0) for name in programs))
    run = write_run(tmp_path / "run", recs, ["nic=e1000"])
    raw = run / "raw" / "nic=e1000"
    raw.mkdir(parents=True)
    for name in programs:
        (raw / f"kselftest-drivers-net-{name}-1.txt").write_text("ok\n")
    started = time.process_time()
    [executor] = nipa_results(run).values()
    assert time.process_time() - started < 5  # 0.3 s here, 21.7 s before
    links = {r["test"]: r["link"] for r in executor["results"]}
    assert links["t5999-py"] == "raw/nic=e1000/kselftest-drivers-net-t5999.py-1.txt"
