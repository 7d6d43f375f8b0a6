"""The report's map of the kernel's selftests: test × card, from `test` records in a run directory."""

from __future__ import annotations

from pathlib import Path

from niclab.ui.report.build import build
from niclab.ui.report.data import load_run
from niclab.ui.report.page import report_runs
from niclab.ui.report.selftests import selftest_map
from tests import records
from tests.records import in_cell as at
from tests.records import write_run

VIRTIO = {"model": "virtio-net-pci", "driver": "virtio_net", "pci_id": "1af4:1041"}


def selftests_run(tmp_path: Path) -> Path:
    e1000 = at(
        "nic=e1000",
        {"nic": "e1000"},
        records.selftest("ping.py", "pass", seconds=3.2),
        records.selftest("ping.py", "pass", subtest="ping.test_v4"),
        records.selftest("ping.py", "skip", subtest="ping.test_v6", reason="no IPv6 address configured"),
        records.selftest("stats.py", "fail", reason="ethtool -S: <no stats> & nothing"),
        records.selftest(
            "csum.py",
            "crash",
            reason="kernel BUG at net/core/skbuff.c:200",
            console=["[  12.1] kernel BUG at net/core/skbuff.c:200!", "[  12.2] RIP: 0010:skb_panic+0x4b/0x50"],
        ),
    )
    virtio = at(
        "nic=virtio",
        {"nic": "virtio"},
        records.selftest("ping.py", "pass", nic=VIRTIO),
        records.selftest("ping.py", "pass", subtest="ping.test_v4", nic=VIRTIO),
        records.selftest("ping.py", "pass", subtest="ping.test_v6", nic=VIRTIO),
        records.selftest("stats.py", "skip", reason="no IPv6 address configured", nic=VIRTIO),
    )
    return write_run(tmp_path / "run", e1000 + virtio, ["nic=e1000", "nic=virtio"])


def test_the_map_has_a_row_per_test_and_subtest_and_a_column_per_card(tmp_path):
    found = selftest_map(load_run(selftests_run(tmp_path)))
    assert found is not None
    assert found.columns == ["e1000", "virtio-net-pci (virtio_net)"]
    rows = [(row.label, row.depth, [e.text if e else None for e in row.entries]) for row in found.rows]
    assert rows == [
        ("drivers/net ping.py", 0, ["pass", "pass"]),
        ("ping.test_v4", 1, ["pass", "pass"]),
        ("ping.test_v6", 1, ["skip", "pass"]),
        ("drivers/net stats.py", 0, ["fail", "skip"]),
        ("drivers/net csum.py", 0, ["crash", None]),
    ]
    # one footnote per distinct reason, the same reason the same number
    assert found.notes[0] == "no IPv6 address configured"
    assert found.rows[2].entries[0].note == 1 and found.rows[3].entries[1].note == 1  # type: ignore[union-attr]
    assert found.crashes[0].lines[1].endswith("RIP: 0010:skb_panic+0x4b/0x50")
    assert found.counts == [{"pass": 1, "fail": 1, "crash": 1}, {"pass": 1, "skip": 1}]


def test_the_page_colours_entries_escapes_guest_text_and_shows_a_crash(tmp_path):
    run = selftests_run(tmp_path)
    page = report_runs([run], tmp_path / "report.html").read_text()
    assert "<h3>Kernel selftests</h3>" in page
    assert 'class="t-fail" title="ethtool -S: &lt;no stats&gt; &amp; nothing"' in page
    assert "<li>ethtool -S: &lt;no stats&gt; &amp; nothing</li>" in page
    assert "<no stats>" not in page
    assert '<a href="#crash-1-1">crash</a>' in page and 'id="crash-1-1"' in page
    assert "kernel BUG at net/core/skbuff.c:200!" in page
    assert "No results were recorded." not in page  # the run's results are its selftests


def test_cells_on_one_card_get_a_column_each_named_by_their_parameters(tmp_path):
    recs = at("nic=e1000,kernel=6.12", {"nic": "e1000", "kernel": "6.12"}, records.selftest("ping.py", "pass"))
    recs += at("nic=e1000,kernel=6.16", {"nic": "e1000", "kernel": "6.16"}, records.selftest("ping.py", "fail"))
    found = selftest_map(load_run(write_run(tmp_path / "run", recs, [])))
    assert found is not None and found.columns == ["e1000 · kernel=6.12", "e1000 · kernel=6.16"]


def test_repeats_that_disagree_show_the_worst_and_how_often(tmp_path):
    recs = [records.selftest("ping.py", result, repeat=n) for n, result in enumerate(["pass", "fail", "pass"], 1)]
    found = selftest_map(load_run(write_run(tmp_path / "run", recs, [])))
    assert found is not None and found.rows[0].entries[0].text == "fail 1/3"  # type: ignore[union-attr]


def test_hostile_guest_text_is_cut_to_one_bounded_line(tmp_path):
    recs = [records.selftest("ping.py", "fail", reason="\x1b[31m" + "x" * 5000)]
    found = selftest_map(load_run(write_run(tmp_path / "run", recs, [])))
    assert found is not None
    assert "\x1b" not in found.notes[0] and len(found.notes[0]) <= 300
    crash_recs = [records.selftest("ping.py", "crash", console=["y" * 2000] * 300)]
    found = selftest_map(load_run(write_run(tmp_path / "crashed", crash_recs, [])))
    assert found is not None
    assert len(found.crashes[0].lines) == 60 and all(len(line) <= 240 for line in found.crashes[0].lines)


def test_a_run_without_selftests_has_no_map(data_dir):
    report = build([load_run(data_dir / "runs" / "nic-shootout")])
    assert report.runs[0].selftests is None


def test_a_cell_that_tests_two_links_names_each_links_card_in_its_rows(tmp_path):
    both = at(
        "default",
        {},
        records.selftest("ping.py", "pass", nic=VIRTIO),
        records.selftest("ping.py", "pass", link=1),
    )
    found = selftest_map(load_run(write_run(tmp_path / "run", both, ["default"])))
    assert found is not None
    assert [row.label for row in found.rows] == [
        "drivers/net ping.py (link 0: virtio-net-pci)",
        "drivers/net ping.py (link 1: e1000)",
    ]
