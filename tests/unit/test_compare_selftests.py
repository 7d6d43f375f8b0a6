"""`niclab compare` on runs of the kernel's selftests: what changed per cell, and exit 1 when a pass broke."""

from __future__ import annotations

import json
from pathlib import Path

from niclab.ui.cli.main import main
from niclab.ui.report.compare import selftest_changes
from niclab.ui.report.data import load_run
from tests import records
from tests.records import in_cell, write_run

E1000, VIRTIO = "nic=e1000", "nic=virtio"


def run_of(path: Path, results: dict[str, dict[tuple[str, str | None], str]], extra=()) -> Path:
    """A run with, per cell, these (test, subtest) -> result; failures say why."""
    recs = [
        record
        for cell, tests in results.items()
        for (test, subtest), result in tests.items()
        for record in in_cell(
            cell,
            {"nic": cell.partition("=")[2]},
            records.selftest(test, result, subtest=subtest, reason=f"{test} said no" if result != "pass" else None),
        )
    ]
    return write_run(path, recs + list(extra), list(results))


BEFORE = {
    E1000: {("ping.py", None): "pass", ("ping.py", "ping.test_v6"): "skip", ("stats.py", None): "pass"},
    VIRTIO: {("ping.py", None): "pass", ("csum.py", None): "fail"},
}


def test_changes_per_cell_pass_to_fail_skip_to_pass_new_and_gone(tmp_path):
    after = {
        E1000: {("ping.py", None): "pass", ("ping.py", "ping.test_v6"): "pass", ("stats.py", None): "fail"},
        VIRTIO: {("ping.py", None): "crash", ("queues.py", None): "pass"},
    }
    base, new = run_of(tmp_path / "a", BEFORE), run_of(tmp_path / "b", after)
    found = selftest_changes(load_run(base), load_run(new))
    assert found is not None
    assert [(c.cell, c.name, c.change, c.broke) for c in found.changes] == [
        ("nic=e1000", "drivers/net ping.py: ping.test_v6", "skip → pass", False),
        ("nic=e1000", "drivers/net stats.py", "pass → fail", True),
        ("nic=virtio", "drivers/net ping.py", "pass → crash", True),
        ("nic=virtio", "drivers/net csum.py", "gone: was fail", False),
        ("nic=virtio", "drivers/net queues.py", "new: pass", False),
    ]
    assert found.unchanged == 1
    assert found.changes[1].reason == "stats.py said no"


def test_compare_exits_1_when_a_passing_test_fails_now_and_prints_what_changed(tmp_path, capsys):
    after = {E1000: {("ping.py", None): "pass", ("ping.py", "ping.test_v6"): "skip", ("stats.py", None): "fail"}}
    base, new = run_of(tmp_path / "a", {E1000: BEFORE[E1000]}), run_of(tmp_path / "b", after)
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "nic=e1000       drivers/net stats.py" in out and "pass → fail" in out and "BROKE" in out
    assert "1 changed, 2 unchanged; 1 broke" in out
    assert main(["compare", str(new), str(base)]) == 0  # fail -> pass: fixed, not broken
    capsys.readouterr()
    assert main(["compare", str(base), str(base), "--format", "json"]) == 0  # the same run: nothing changed
    assert json.loads(capsys.readouterr().out)["selftests"] == {"changes": [], "unchanged": 3, "broke": 0}


def test_json_and_html_carry_the_selftests(tmp_path, capsys):
    after = {E1000: {("ping.py", None): "fail", ("ping.py", "ping.test_v6"): "skip", ("stats.py", None): "pass"}}
    base, new = run_of(tmp_path / "a", {E1000: BEFORE[E1000]}), run_of(tmp_path / "b", after)
    capsys.readouterr()
    assert main(["compare", str(base), str(new), "--format", "json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["changes"] == [] and found["selftests"]["broke"] == 1
    assert found["selftests"]["changes"][0] | {"reason": None} == {
        "cell": "nic=e1000",
        "target": "drivers/net",
        "test": "ping.py",
        "subtest": None,
        "link": 0,
        "base": "pass",
        "new": "fail",
        "reason": None,
        "broke": True,
    }
    out = tmp_path / "compare.html"
    assert main(["compare", str(base), str(new), "--format", "html", "--out", str(out)]) == 1
    page = out.read_text()
    assert "<h2>Kernel selftests</h2>" in page and '<tr class="broke"><td>nic=e1000</td>' in page


def test_cells_of_two_runs_compare_their_selftests(tmp_path, capsys):
    base = run_of(tmp_path / "a", {E1000: {("ping.py", None): "pass"}})
    new = run_of(tmp_path / "b", {VIRTIO: {("ping.py", None): "fail"}})
    assert main(["compare", str(base), str(new), "--cells", "nic=e1000", "nic=virtio"]) == 1
    assert "nic=e1000 → nic=virtio" in capsys.readouterr().out


def test_runs_without_selftests_compare_as_before(data_dir, capsys):
    run = data_dir / "runs" / "nic-shootout"
    assert main(["compare", str(run), str(run)]) == 0
    assert "selftests" not in capsys.readouterr().out


def test_a_run_with_measurements_and_selftests_shows_both(tmp_path, capsys):
    summary = records.summary("ping.rtt_avg_ms", samples=[1.0, 1.1, 0.9])
    extra = in_cell(E1000, {"nic": "e1000"}, summary)
    base = run_of(tmp_path / "a", {E1000: BEFORE[E1000]}, extra)
    new = run_of(tmp_path / "b", {E1000: BEFORE[E1000]}, extra)
    assert main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "no significant change" in out and "selftests: no result changed" in out
