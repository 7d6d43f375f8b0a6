from pathlib import Path

from niclab.run.records import RunInfoRecord, SummaryRecord
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.findings import dips, find
from tests import records

SMOOTH = [[2**i, min(600.0, 2.0 * 1.9**i), 50.0 + i] for i in range(1, 22)]


def test_a_smooth_curve_has_no_dip():
    assert dips(SMOOTH) == []


def test_a_plateau_with_noise_has_no_dip():
    wobbly = [[p[0], p[1] * (0.95 if i % 2 else 1.0), p[2]] for i, p in enumerate(SMOOTH)]
    assert dips(wobbly) == []


def test_a_dip_well_below_both_neighbours_is_found():
    curve = [list(p) for p in SMOOTH]
    curve[15][1] = 250.0  # as the E1000 at MTU 4000: a collapse at one size, recovered at the next
    assert dips(curve) == [(2**16, 250.0, 600.0)]


def test_a_rise_or_a_fall_is_not_a_dip():
    rising = [[1, 10.0, 1], [2, 20.0, 1], [4, 40.0, 1]]
    falling = [[1, 40.0, 1], [2, 20.0, 1], [4, 10.0, 1]]
    assert dips(rising) == [] and dips(falling) == []


def test_depth_decides():
    curve = [[1, 100.0, 1], [2, 88.0, 1], [4, 100.0, 1]]
    assert dips(curve) == []  # 12 % below: noise
    assert dips(curve, depth=0.10) == [(2, 88.0, 100.0)]


def test_host_contention_is_a_finding_once_per_benchmark():
    def summary(name: str, contended: bool) -> SummaryRecord:
        reasons = ["3 of 3 runs; the worst: other processes used 95 % of a core"] if contended else []
        return records.summary(name, contended=contended, contention=reasons)

    cell = CellData(
        "nic=e1000",
        {},
        summaries=[
            summary("netperf.TCP_RR.transaction_rate", True),
            summary("netperf.TCP_RR.latency_mean_us", True),
            summary("netperf.TCP_STREAM.throughput_mbps", False),
        ],
    )
    run = RunData(Path("run"), RunInfoRecord(scenario="two-node"), [cell])
    found = [f for f in find(run) if f.kind == "host-contention"]
    assert [f.text for f in found] == [
        "netperf TCP_RR: host contention: 3 of 3 runs; the worst: other processes used 95 % of a core"
    ]
