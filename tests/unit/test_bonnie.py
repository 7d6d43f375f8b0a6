"""The bonnie benchmark: bonnie++ 2.00a's CSV line (captured on a Debian 12 host, tests/data/bonnie/), its command,
its run on the NFS share.

Rates: bonnie++'s K/sec (K = 1024 bytes) x 1024 / 10^6 is MB/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from niclab.base.problems import Problems
from niclab.model.bench import REGISTRY, bonnie
from niclab.model.bench.base import BenchmarkError
from niclab.model.scenario.model import benchmark_spec
from niclab.run.records import RunInfoRecord, SummaryRecord
from niclab.ui.report import plots
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.tables import summary_table
from tests import records
from tests.helpers import FakeNode, answer, bench_context, nfs_client


def sample(data_dir, name: str) -> str:
    return (data_dir / "bonnie" / name).read_text()


def by_metric(found):
    return {m.metric: m for m in found}


def test_block_tests_and_file_tests_of_a_1g_run(data_dir):
    found = by_metric(bonnie.parse(sample(data_dir, "direct_1g_files.csv")))
    # 1.98,2.00a,niclab,1,…,1G,,8192,5,,,79296,26,92860,24,,,+++++,+++,9299,69,1,,,,,2045,32,…,1219,19,…
    assert found["block_write_mb_s"].value == pytest.approx(79296 * 1024 / 1e6)  # 81.2 MB/s
    assert found["rewrite_mb_s"].value == pytest.approx(92860 * 1024 / 1e6)
    assert found["seeks_per_s"].value == 9299 and found["seeks_per_s"].unit == "/s"
    assert found["block_write_mb_s"].unit == "MB/s" and found["block_write_mb_s"].headline
    assert found["block_write_mb_s"].extra["cpu_pct"] == 26 and found["block_write_mb_s"].extra["latency_us"] == 18515
    assert found["seq_create_per_s"].value == 2045 and found["seq_create_per_s"].extra["files"] == 1024
    assert found["random_create_per_s"].extra["latency_us"] == 232_000  # "232ms"
    # block reads and stats finished too quickly to time: left out, and named
    assert "block_read_mb_s" not in found and "seq_stat_per_s" not in found
    assert found["seeks_per_s"].extra["too_fast"] == ["get_block", "seq_stat", "seq_del", "ran_stat", "ran_del"]
    assert {m.tool for m in found.values()} == {"bonnie"} and {m.test for m in found.values()} == {None}


def test_per_character_figures_are_not_headlines(data_dir):
    found = by_metric(bonnie.parse(sample(data_dir, "per_char_64m.csv")))
    assert found["char_write_mb_s"].value == pytest.approx(564 * 1024 / 1e6)
    assert found["char_read_mb_s"].value == pytest.approx(1064 * 1024 / 1e6)
    assert set(found) == {"char_write_mb_s", "char_read_mb_s"}
    assert not any(m.headline for m in found.values())


def test_every_metric_parsed_is_declared(data_dir):
    declared = {m.name for m in bonnie.PLUGIN.metrics()}
    for name in ("direct_1g_files.csv", "direct_128m_files.csv", "per_char_64m.csv"):
        assert {f"bonnie.{m.metric}" for m in bonnie.parse(sample(data_dir, name))} <= declared
    assert {"bonnie.block_write_mb_s", "bonnie.block_read_mb_s", "bonnie.rewrite_mb_s"} <= declared


def test_what_is_not_a_result_is_a_clear_error(data_dir):
    with pytest.raises(BenchmarkError, match='no CSV line: You must use the "-u" switch when running as root'):
        bonnie.parse("", sample(data_dir, "no_u_as_root.stderr.txt"))
    with pytest.raises(BenchmarkError, match="no CSV line: Can't change to directory"):
        bonnie.parse("", sample(data_dir, "no_directory.stderr.txt"))
    with pytest.raises(BenchmarkError, match=r"CSV format 1\.97, niclab reads 1\.98"):
        bonnie.parse(sample(data_dir, "direct_1g_files.csv").replace("1.98,", "1.97,", 1))
    with pytest.raises(BenchmarkError, match="has 20 fields, not 50"):
        bonnie.parse(",".join(sample(data_dir, "direct_1g_files.csv").split(",")[:20]))
    too_fast = sample(data_dir, "direct_1g_files.csv").split(",")
    for i, name in enumerate(bonnie.FIELDS):
        if name in ("put_block", "rewrite", "seeks", "seq_create", "ran_create"):
            too_fast[i] = "+++++"
    with pytest.raises(BenchmarkError, match=r"timed none of its tests.*too quickly to time: raise size_mib"):
        bonnie.parse(",".join(too_fast))


def test_latencies_in_every_unit():
    assert [bonnie.latency_us(t) for t in ("77us", "232ms", "2s", "", "+++")] == [77, 232_000, 2_000_000, None, None]


def test_the_command_runs_as_root_on_the_share_without_per_char_tests():
    assert bonnie.argv(bonnie.BonnieOptions()) == [
        "bonnie++", "-d", "/mnt/niclab-nfs", "-s", "64", "-r", "32", "-n", "0", "-u", "0", "-q", "-m", "niclab",
        "-f", "-D",
    ]  # fmt: skip
    custom = bonnie.argv(bonnie.BonnieOptions(size_mib=96, ram_mib=48, files=2, per_char=True, direct=False))
    assert custom[3:10] == ["-s", "96", "-r", "48", "-n", "2", "-u"] and "-f" not in custom and "-D" not in custom


def test_options_are_checked():
    with pytest.raises(ValidationError, match="at least twice ram_mib"):
        bonnie.BonnieOptions(size_mib=40, ram_mib=32)
    with pytest.raises(ValidationError, match="does not fit in export_size 128m"):
        bonnie.BonnieOptions(size_mib=128)
    assert bonnie.BonnieOptions(size_mib=256, export_size="300m").nfs_version == "4.2"


def test_a_scenario_names_it_bonnie():
    spec = benchmark_spec({"bonnie": {"size_mib": 96, "ram_mib": 48, "nfs_version": "4.1"}})
    assert spec.tool == "bonnie" and spec.options.size_mib == 96 and REGISTRY["bonnie"] is bonnie.PLUGIN
    with pytest.raises(Problems):
        benchmark_spec({"bonnie": {"size": 64}})  # unknown option


def test_run_mounts_the_share_runs_bonnie_and_cleans_up(data_dir):
    client = nfs_client({"bonnie++ -d": answer(sample(data_dir, "direct_1g_files.csv"))})
    server, raw = FakeNode("b"), []
    found = bonnie.PLUGIN.run(bench_context(client, server, raw), bonnie.BonnieOptions())
    assert by_metric(found)["block_write_mb_s"].extra["mount"]["vers"] == "4.2"
    assert [name for name, _ in raw] == ["bonnie"] and raw[0][1].startswith("$ bonnie++ -d /mnt/niclab-nfs -s 64")
    assert any("command -v bonnie++" in c for c in client.commands)
    assert client.commands[-1].startswith("if grep -q ' /mnt/niclab-nfs ' /proc/mounts; then umount")
    assert any("rpc.nfsd 0" in c for c in server.commands) and server.spawned[0].stopped


def test_a_failed_run_names_its_raw_output_and_still_cleans_up():
    client = nfs_client(
        {"bonnie++ -d": answer(stderr='Can\'t change to directory "/mnt/niclab-nfs".\nusage: …', returncode=1)}
    )
    server, raw = FakeNode("b"), []
    with pytest.raises(
        BenchmarkError, match=r"bonnie\+\+ exited 1: Can't change to directory .* \(raw output: raw/bonnie\)"
    ):
        bonnie.PLUGIN.run(bench_context(client, server, raw), bonnie.BonnieOptions())
    assert any("umount" in c for c in client.commands) and server.spawned[0].stopped


def test_the_report_shows_its_rows_and_figures(data_dir):
    def summary(m) -> SummaryRecord:
        return records.summary(
            f"bonnie.{m.metric}", label="bonnie", metric=m.metric, unit=m.unit, mean=m.value, headline=m.headline
        )

    found = bonnie.parse(sample(data_dir, "direct_1g_files.csv"))
    run = RunData(
        Path("run"),
        RunInfoRecord(scenario="bonnie"),
        [CellData("nic=e1000", {"nic": "e1000"}, summaries=[summary(m) for m in found])],
    )
    rows = [row[0] for row in summary_table(run).rows]
    assert rows == [
        "bonnie++ block write",
        "bonnie++ rewrite",
        "bonnie++ seeks",
        "bonnie++ creates",
        "bonnie++ random creates",
    ]
    drawn = [p.title for figure in plots.sections()["bonnie++ over NFS"] for p in plots.draw(run, figure)]
    assert drawn == ["bonnie++ over NFS: throughput per test", "bonnie++ over NFS: random seeks"]


def test_file_tests_that_cannot_remove_their_directory_name_the_kernel_they_need():
    # what bookworm's 6.1 guests print: a tmpfs directory read over NFS skips entries while files are deleted
    said = "Bonnie: drastic I/O error (rmdir): Directory not empty\nCleaning up test directory after error."
    client = nfs_client({"bonnie++ -d": answer(stderr=said, returncode=1)})
    with pytest.raises(BenchmarkError, match=r"Directory not empty; the file tests .* kernel of 6.6 or later"):
        bonnie.PLUGIN.run(bench_context(client, FakeNode("b"), []), bonnie.BonnieOptions(files=1))
    with pytest.raises(BenchmarkError) as without_files:  # the block tests alone: no word of file tests
        bonnie.PLUGIN.run(
            bench_context(nfs_client({"bonnie++ -d": answer(stderr=said, returncode=1)}), FakeNode("b"), []),
            bonnie.BonnieOptions(),
        )
    assert "file tests" not in str(without_files.value)
