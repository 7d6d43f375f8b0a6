import json
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError, UsageError
from niclab.run.records import RunInfoRecord
from niclab.ui.report.compare import CONTENTION_BOUND_PCT, Verdicts, as_html, as_json, as_text, compare, compare_cells
from niclab.ui.report.data import CellData, RunData, for_comparing_runs, load_run
from tests import records


def run_with(samples: dict[str, list[float]], cell="nic=e1000") -> RunData:
    summaries = [records.summary(name, label=name.split(".")[0], samples=v) for name, v in samples.items()]
    return RunData(Path("run"), RunInfoRecord(), [CellData(cell, {}, summaries=summaries)])


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
    busy.cells[0].summaries[0].contended, busy.cells[0].summaries[0].contention = True, [why]
    (change,) = compare(quiet, busy)
    assert change.verdict == "host contention, no verdict" and change.contention == [f"new: {why}"]
    (change,) = compare(busy, quiet)
    assert change.verdict == "host contention, no verdict" and change.contention == [f"base: {why}"]
    quiet.cells[0].summaries[0].contention = []  # measured and quiet: judged as before
    assert verdicts({"netperf.TCP_STREAM.throughput_mbps": [460, 465, 470]},
                    {"netperf.TCP_STREAM.throughput_mbps": [260, 270, 280]}) == {
        "netperf.TCP_STREAM.throughput_mbps": "worse"
    }  # fmt: skip


STREAM, LATENCY = "netperf.TCP_STREAM.throughput_mbps", "netperf.TCP_RR.latency_mean_us"
BUSY = "other processes used 92 % of a core while the host's 2 CPUs were 96 % busy"


def contended_on(run: RunData, load: float | None = 95.0) -> RunData:
    """The run with every summary measured while the host was contended: other processes took `load` % of a core
    in each of its runs (one busy process: about 95), or its runs did not measure it (None)."""
    cell = run.cells[0]
    for summary in cell.summaries:
        summary.contended, summary.contention = True, [BUSY]
        summary.runs = [f"0.{n}" for n in range(1, len(summary.samples) + 1)]
        host_load = {"contended": True, **({"others_cpu_pct": load, "steal_pct": 0.0, "cpus": 2} if load else {})}
        cell.runs |= {run_id: records.run(run_id, host_load=host_load) for run_id in summary.runs}
    return run


def judged(
    base: dict[str, list[float]], new: dict[str, list[float]], busy: str, load: float | None = 95.0
) -> dict[str, str]:
    """Each metric's verdict line (`shown`) with side `busy` ("base", "new" or "both") contended by `load`."""
    base_run, new_run = run_with(base), run_with(new)
    for side, run in (("base", base_run), ("new", new_run)):
        if busy in (side, "both"):
            contended_on(run, load)
    return {c.name: c.shown for c in compare(base_run, new_run)}


BEYOND = f"beyond host contention (at most {CONTENTION_BOUND_PCT:g} % slower)"
SLOWEST = 1 - CONTENTION_BOUND_PCT / 100  # the least speed a bounded contended side ran at, of its quiet speed


def around(value: float) -> list[float]:
    """Three samples about `value`, 0.5 % apart: a change between two such sides is significant."""
    return [value, value * 1.005, value * 0.995]


def test_a_drop_beyond_what_contention_costs_is_worse_and_says_so():
    # the integration test's case: 378.6 -> 93.08 Mbit/s (-75 %) while the new run was contended
    base, new = {STREAM: [380.0, 376.0, 379.8]}, {STREAM: [93.0, 92.5, 93.7]}
    assert judged(base, new, "new") == {STREAM: f"worse, {BEYOND}"}
    assert judged(base, new, "both") == {STREAM: f"worse, {BEYOND}"}
    # contention of the base made the base slower, not the new one: a drop is no less a drop
    assert judged(base, new, "base") == {STREAM: f"worse, {BEYOND}"}
    (change,) = compare(run_with(base), contended_on(run_with(new)))
    assert (change.verdict, change.beyond) == ("worse", BEYOND)  # machine-readable as ever
    text = as_text(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05)
    assert text.splitlines()[4].endswith(f"worse, {BEYOND}")
    assert "1 worse, 0 better" in text and "without a verdict" not in text
    assert f"nic=e1000 {STREAM}: worse, {BEYOND}: new: {BUSY}" in text
    html = as_html(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05)
    assert '<td class="worse" title="new: other processes' in html and f">worse, {BEYOND}</td>" in html
    assert json.loads(as_json(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05))["changes"][0]["beyond"] == BEYOND


def test_two_run_directories_compared_from_disk_keep_the_load_the_bound_needs(tmp_path):
    """A run loaded for comparing holds little of it (report.data.for_comparing_runs), but its host load it keeps."""

    base, new = run_with({STREAM: [380.0, 376.0, 379.8]}), contended_on(run_with({STREAM: [93.0, 92.5, 93.7]}))
    paths = []
    for name, run in (("base", base), ("new", new)):
        cell = run.cells[0]
        given = [records.cell(cell="default", params={}), *cell.runs.values(), *cell.summaries]
        paths.append(records.write_run(tmp_path / name, given, ["default"], scenario="two-node"))
    (change,) = compare(*(load_run(path, for_comparing_runs) for path in paths))
    assert (change.verdict, change.beyond, change.unbounded) == ("worse", BEYOND, [])


def test_a_drop_contention_can_explain_gets_no_verdict():
    base, new = {STREAM: [460.0, 465.0, 470.0]}, {STREAM: [320.0, 325.0, 330.0]}  # -30 %
    assert judged(base, new, "new") == {STREAM: "host contention, no verdict"}
    (change,) = compare(run_with(base), contended_on(run_with(new)))
    assert change.p_value is None and change.beyond == ""
    # the edge: SLOWEST of the base's speed is the most contention explains
    assert judged({STREAM: around(400.0)}, {STREAM: around(400.0 * SLOWEST * 1.03)}, "new") == {
        STREAM: "host contention, no verdict"
    }
    assert judged({STREAM: around(400.0)}, {STREAM: around(400.0 * SLOWEST * 0.97)}, "new") == {
        STREAM: f"worse, {BEYOND}"
    }
    # one sample cannot be tested, and under contention says why there is no verdict
    assert judged({STREAM: [400.0]}, {STREAM: [90.0]}, "new") == {STREAM: "host contention, no verdict"}


def test_which_side_was_contended_decides_which_way_contention_explains_a_change():
    base, gain = {STREAM: [300.0, 302.0, 298.0]}, {STREAM: [390.0, 392.0, 388.0]}  # +30 %
    # contention only slows: a contended new side that is faster anyway is faster
    assert judged(base, gain, "new") == {STREAM: f"better, {BEYOND}"}
    # a contended base was slowed down, which a 30 % gain may be all of
    assert judged(base, gain, "base") == {STREAM: "host contention, no verdict"}
    assert judged(base, gain, "both") == {STREAM: "host contention, no verdict"}
    # ... but not a gain beyond the base's speed over SLOWEST
    assert judged(base, {STREAM: around(300.0 / SLOWEST * 1.03)}, "base") == {STREAM: "better, " + BEYOND}
    assert judged(base, {STREAM: around(300.0 / SLOWEST * 0.97)}, "base") == {STREAM: "host contention, no verdict"}
    # a contended base cannot explain a drop at all
    assert judged(base, {STREAM: [250.0, 252.0, 248.0]}, "base") == {STREAM: f"worse, {BEYOND}"}


def test_for_a_time_contention_explains_a_rise_up_to_the_base_over_the_least_speed():
    base = {LATENCY: around(200.0)}
    assert judged(base, {LATENCY: around(300.0)}, "new") == {LATENCY: "host contention, no verdict"}
    assert judged(base, {LATENCY: around(200.0 / SLOWEST * 0.97)}, "new") == {LATENCY: "host contention, no verdict"}
    assert judged(base, {LATENCY: around(200.0 / SLOWEST * 1.03)}, "new") == {LATENCY: f"worse, {BEYOND}"}
    assert judged(base, {LATENCY: around(150.0)}, "new") == {LATENCY: f"better, {BEYOND}"}
    assert judged(base, {LATENCY: around(150.0)}, "base") == {LATENCY: "host contention, no verdict"}
    assert judged(base, {LATENCY: around(200.0 * SLOWEST * 0.97)}, "base") == {LATENCY: f"better, {BEYOND}"}


def test_contention_heavier_than_the_bound_was_measured_under_explains_any_change_its_way():
    base, new = {STREAM: [380.0, 376.0, 379.8]}, {STREAM: [93.0, 92.5, 93.7]}  # -75 %
    # two busy processes' worth (as on a shared machine): the guests may have lost more than half their speed
    assert judged(base, new, "new", load=161.0) == {STREAM: "host contention, no verdict"}
    (change,) = compare(run_with(base), contended_on(run_with(new), load=161.0))
    assert change.unbounded == ["new"]
    text = as_text(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05)
    assert "no verdict (new: heavier than the one busy core the bound was measured under, or not measured)" in text
    assert judged(base, new, "new", load=None) == {STREAM: "host contention, no verdict"}  # not measured: no bound
    # however busy the base's host was, it only made the base slower: a drop stays a drop
    assert judged(base, new, "base", load=161.0) == {STREAM: f"worse, {BEYOND}"}
    assert judged(new, base, "base", load=161.0) == {STREAM: "host contention, no verdict"}
    assert judged(base, new, "both", load=161.0) == {STREAM: "host contention, no verdict"}


def test_metrics_contention_has_no_bound_for_get_no_verdict_however_far_they_move():
    loss, tail = "netperf.UDP_STREAM.loss_pct", "netperf.TCP_RR.latency_p99_us"
    base = {loss: [0.1, 0.12, 0.11], tail: [300.0, 303.0, 297.0], "ping.rtt_avg_ms": [1.0, 1.01, 0.99]}
    new = {loss: [40.0, 41.0, 39.0], tail: [3000.0, 3030.0, 2970.0], "ping.rtt_avg_ms": [5.0, 5.05, 4.95]}
    assert judged(base, new, "new") == {
        loss: "host contention, no verdict",
        tail: "host contention, no verdict",
        "ping.rtt_avg_ms": f"worse, {BEYOND}",  # a typical time: bounded
    }


def ab_run(
    base: list[float],
    new: list[float],
    alternated: bool = True,
    contended: bool = False,
    hit: dict[str, set[int]] | None = None,
    boots: dict[str, list[int]] | None = None,
) -> RunData:
    """One run with cells A and B of one metric; their repeats alternated on one boot, or not.

    `hit`: cell -> the repeats the host was contended in (their run records say so); `boots`: cell -> each
    repeat's boot number (all 1 if not given)."""
    name = "netperf.TCP_STREAM.throughput_mbps"

    def cell(cid: str, other: str, samples: list[float]) -> CellData:
        summary = records.summary(
            name,
            label="netperf TCP_STREAM",
            unit="Mbit/s",
            samples=samples,
            runs=[f"0.{n}" for n in range(1, len(samples) + 1)],
            **({"contended": True, "contention": ["in 4 of 4 runs: others used 95 % of a core"]} if contended else {}),
        )
        facts = records.cell(boot={"number": 1}, **({"interleaved_with": [other]} if alternated else {}))
        runs = {
            f"0.{n}": records.run(
                f"0.{n}",
                boot=(boots or {}).get(cid, [1] * len(samples))[n - 1],
                host_load={"contended": n in (hit or {}).get(cid, set())},
            )
            for n in range(1, len(samples) + 1)
        }
        return CellData(cid, {}, facts=facts, summaries=[summary], runs=runs)

    return RunData(Path("run"), RunInfoRecord(), [cell("A", "B", base), cell("B", "A", new)])


# The host sped up and slowed down through the run; B was 10 % below A in every round.
DRIFTING_A = [400.0, 300.0, 450.0, 280.0, 420.0]
DRIFTING_B = [360.0, 270.0, 405.0, 252.0, 378.0]


def test_alternated_cells_are_judged_repeat_by_repeat_so_host_drift_cancels():
    paired = compare_cells(ab_run(DRIFTING_A, DRIFTING_B), "A", "B")
    assert [(c.cell, c.verdict, c.paired) for c in paired] == [("A → B", "worse", True)]
    # the same figures from cells that did not alternate: the drift drowns the change
    unpaired = compare_cells(ab_run(DRIFTING_A, DRIFTING_B, alternated=False), "A", "B")
    assert [(c.verdict, c.paired) for c in unpaired] == [("no significant change", False)]


def test_alternated_cells_get_a_verdict_under_contention_and_still_list_it():
    [change] = compare_cells(ab_run(DRIFTING_A, DRIFTING_B, contended=True), "A", "B")
    assert change.verdict == "worse" and change.contention[0].startswith("base: in 4 of 4 runs")
    assert change.beyond == "" and change.shown == "worse"  # paired: judged as ever, no bound needed
    [change] = compare_cells(ab_run(DRIFTING_A, DRIFTING_B, alternated=False, contended=True), "A", "B")
    assert change.verdict == "host contention, no verdict"


def test_pairs_are_the_repeats_both_cells_have():
    run = ab_run([400.0, 300.0, 450.0], [360.0, 270.0])
    [change] = compare_cells(run, "A", "B")
    assert (change.base_n, change.new_n) == (2, 2)


def test_an_unknown_cell_names_the_cells_there_are():
    with pytest.raises(UsageError, match=r"run has no cell 'C'; its cells: A, B"):
        compare_cells(ab_run([1.0, 2.0], [1.0, 2.0]), "A", "C")
    with pytest.raises(UsageError, match=r"run has no cell 'AA'; did you mean 'A'\? its cells: A, B"):
        compare_cells(ab_run([1.0, 2.0], [1.0, 2.0]), "AA", "B")


def test_a_round_whose_repeats_ran_on_different_boots_is_left_out_of_the_pairs():
    # another cell's failure stopped the rig between A's and B's third repeat: B's ran on a new boot
    base, new = [400.0, 410.0, 405.0, 395.0], [360.0, 369.0, 500.0, 355.5]
    [change] = compare_cells(ab_run(base, new, boots={"A": [1, 1, 1, 2], "B": [1, 1, 2, 2]}), "A", "B")
    assert (change.base_n, change.new_n, change.left_out) == (3, 3, 1)
    assert change.verdict == "worse"


def test_a_round_the_host_hit_on_one_side_only_is_left_out_of_the_pairs():
    # B was 10 % below A in every round, but a burst (the hypervisor's steal) halved A's third repeat only
    base, new = [400.0, 410.0, 200.0, 405.0, 395.0], [360.0, 369.0, 351.0, 364.5, 355.5]
    [change] = compare_cells(ab_run(base, new, hit={"A": {3}}), "A", "B")
    assert (change.verdict, change.left_out, change.base_n) == ("worse", 1, 4)
    assert change.change_pct == pytest.approx(-10.0)  # over the pairs it judged
    # a host busy through both repeats of a round hit them alike: that pair stays
    [change] = compare_cells(ab_run(base, new, hit={"A": {3}, "B": {3}}), "A", "B")
    assert (change.left_out, change.base_n) == (0, 5)


def on_hosts(run: RunData, hosts: dict[str, str]) -> RunData:
    """The run with each cell's nodes on the lab host named for it (its rig facts' hosts)."""
    for cell in run.cells:
        if cell.facts is None:
            cell.facts = records.cell()
        cell.facts.rig.hosts = {"a": hosts[cell.id], "b": hosts[cell.id]}
    return run


def test_a_comparison_across_lab_hosts_says_so_in_its_verdict_line():
    base = on_hosts(run_with({"netperf.TCP_STREAM.throughput_mbps": [600, 610, 590]}), {"nic=e1000": "rig1"})
    new = on_hosts(run_with({"netperf.TCP_STREAM.throughput_mbps": [95, 96, 94]}), {"nic=e1000": "rig2"})
    (change,) = compare(base, new)
    assert (change.verdict, change.across) == ("worse", "across hosts (rig1 vs rig2)")
    text = as_text(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05)
    assert text.splitlines()[4].endswith("worse, across hosts (rig1 vs rig2)")
    assert "worse, across hosts (rig1 vs rig2)" in as_html(Verdicts([change]), Path("a"), Path("b"), 5.0, 0.05)
    (same,) = compare(base, on_hosts(new, {"nic=e1000": "rig1"}))
    assert same.across == "" and same.shown == "worse"
    (no_lab,) = compare(run_with({"ping.rtt_avg_ms": [1, 1.1, 0.9]}), run_with({"ping.rtt_avg_ms": [1, 1.2, 0.9]}))
    assert no_lab.across == ""  # runs without a lab name no host: as ever


def test_a_cell_whose_nodes_swapped_hosts_ran_across_hosts_though_on_the_same_two():
    swapped = [run_with({"netperf.TCP_STREAM.throughput_mbps": [600, 610, 590]}) for _ in range(2)]
    for run, (a, b) in zip(swapped, (("rig1", "rig2"), ("rig2", "rig1")), strict=True):
        for cell in run.cells:
            cell.facts = records.cell()
            cell.facts.rig.hosts = {"a": a, "b": b}
    (change,) = compare(*swapped)
    assert change.across == "across hosts (a: rig1, b: rig2 vs a: rig2, b: rig1)"


def test_a_paired_comparison_of_cells_on_two_hosts_is_refused_and_an_unpaired_one_labelled():
    with pytest.raises(NiclabError, match=r"^cells A and B alternated but ran across hosts \(rig1 vs rig2\): a paired"):
        compare_cells(on_hosts(ab_run(DRIFTING_A, DRIFTING_B), {"A": "rig1", "B": "rig2"}), "A", "B")
    apart = on_hosts(ab_run(DRIFTING_A, DRIFTING_B, alternated=False), {"A": "rig1", "B": "rig2"})
    [change] = compare_cells(apart, "A", "B")
    assert not change.paired and change.across == "across hosts (rig1 vs rig2)"


def test_each_plugin_declares_which_of_its_metrics_move_with_the_guests_speed():
    from niclab.model.bench import all_metrics

    declared = {m.name: m for m in all_metrics()}
    for metric in declared.values():  # a rate is better higher, a typical time better lower
        assert metric.pace is None or (metric.pace, metric.better) in (("rate", "higher"), ("time", "lower")), metric
    paces = {name: declared[name].pace for name in (STREAM, LATENCY, "netperf.TCP_RR.latency_p99_us")}
    assert paces == {STREAM: "rate", LATENCY: "time", "netperf.TCP_RR.latency_p99_us": None}
    # one fio job's extremes are a spread: contention moves them without a known bound
    whole, slowest_job = "nfs.seqread.bandwidth_mb_s", "nfs.seqread.bandwidth_min_mb_s"
    base, new = {whole: around(100.0), slowest_job: around(90.0)}, {whole: around(20.0), slowest_job: around(10.0)}
    assert judged(base, new, "new") == {whole: f"worse, {BEYOND}", slowest_job: "host contention, no verdict"}
