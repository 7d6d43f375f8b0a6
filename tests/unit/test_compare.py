from pathlib import Path

from niclab.compare import compare
from niclab.report.data import CellData, RunData


def run_with(samples: dict[str, list[float]], cell="nic=e1000") -> RunData:
    summaries = [
        {
            "benchmark_index": 0,
            "benchmark": name.split(".")[0],
            "name": name,
            "link": 0,
            "client": "a",
            "server": "b",
            "unit": "x",
            "mean": sum(v) / len(v),
            "samples": v,
        }
        for name, v in samples.items()
    ]
    return RunData(Path("run"), {}, [CellData(cell, {}, summaries=summaries)])


def verdicts(base, new, **kw):
    return {c.name: c.verdict for c in compare(run_with(base), run_with(new), **kw)}


def test_same_figures_are_no_significant_change():
    figures = {"netperf.TCP_STREAM.throughput_mbps": [95.1, 94.8, 95.3]}
    assert verdicts(figures, {"netperf.TCP_STREAM.throughput_mbps": [95.0, 95.2, 94.9]}) == {
        "netperf.TCP_STREAM.throughput_mbps": "no significant change"
    }


def test_direction_decides_better_or_worse():
    base = {"netperf.TCP_STREAM.throughput_mbps": [600, 610, 590], "netperf.TCP_RR.latency_mean_us": [200, 205, 195]}
    new = {"netperf.TCP_STREAM.throughput_mbps": [95, 96, 94], "netperf.TCP_RR.latency_mean_us": [100, 102, 98]}
    assert verdicts(base, new) == {
        "netperf.TCP_STREAM.throughput_mbps": "worse",
        "netperf.TCP_RR.latency_mean_us": "better",
    }


def test_small_but_significant_changes_stay_below_the_threshold():
    base = {"netperf.TCP_STREAM.throughput_mbps": [100.0, 100.1, 99.9]}
    new = {"netperf.TCP_STREAM.throughput_mbps": [103.0, 103.1, 102.9]}
    assert verdicts(base, new, threshold_pct=5) == {"netperf.TCP_STREAM.throughput_mbps": "no significant change"}
    assert verdicts(base, new, threshold_pct=2) == {"netperf.TCP_STREAM.throughput_mbps": "better"}


def test_noisy_samples_are_not_significant():
    base = {"netperf.TCP_STREAM.throughput_mbps": [400, 700, 550]}
    new = {"netperf.TCP_STREAM.throughput_mbps": [350, 650, 500]}
    assert verdicts(base, new) == {"netperf.TCP_STREAM.throughput_mbps": "no significant change"}


def test_one_sample_cannot_be_tested():
    assert verdicts({"ping.rtt_avg_ms": [1.0]}, {"ping.rtt_avg_ms": [9.0]}) == {"ping.rtt_avg_ms": "untested"}


def test_cells_match_by_id_or_as_the_only_cells():
    base, new = run_with({"ping.rtt_avg_ms": [1, 1.1, 0.9]}, "x=1"), run_with({"ping.rtt_avg_ms": [1, 1.1, 0.9]}, "x=2")
    assert [c.cell for c in compare(base, new)] == ["x=1 → x=2"]


def test_a_contended_side_gets_no_verdict_and_says_why():
    quiet = run_with({"netperf.TCP_STREAM.throughput_mbps": [460, 465, 470]})
    busy = run_with({"netperf.TCP_STREAM.throughput_mbps": [260, 270, 280]})
    why = "other processes used 92 % of a core while the host's 2 CPUs were 96 % busy"
    busy.cells[0].summaries[0].update(contended=True, contention=[why])
    (change,) = compare(quiet, busy)
    assert change.verdict == "host contention, no verdict" and change.contention == [f"new: {why}"]
    (change,) = compare(busy, quiet)
    assert change.verdict == "host contention, no verdict" and change.contention == [f"base: {why}"]
    quiet.cells[0].summaries[0].update(contended=False, contention=[])  # measured and quiet: judged as before
    assert verdicts({"netperf.TCP_STREAM.throughput_mbps": [460, 465, 470]},
                    {"netperf.TCP_STREAM.throughput_mbps": [260, 270, 280]}) == {
        "netperf.TCP_STREAM.throughput_mbps": "worse"
    }  # fmt: skip
