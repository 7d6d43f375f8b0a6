"""A new user's walk through niclab's answers: each mistake a user makes, and each case a run can end in, as
the CLI prints it, with its exit code (0 fine, 1 the file or the result failed, 2 unusable input)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from niclab.ui.cli.main import main
from tests.helpers import RECORDED_RUNS, TWO_E1000_LAB, edited_run, failure, of_benchmark

ROOT = Path(__file__).resolve().parents[2]


def validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    code = main(["validate", str(scenario)])
    captured = capsys.readouterr()
    return code, [line.removeprefix(f"{scenario}:") for line in captured.err.splitlines()]


# -- a misspelt key gets the key meant, or the keys valid there ------------------------------------------------

MISSPELT = """\
name: s
repeats: 3
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
    mut: 9000
    netem: {dealy: 10ms}
    speed: 100
benchmarks:
  - netperf: {test: TCP_STREAM, duration: 10}
  - netperf: {test: TCP_STREAM, -l: 10}
"""


def test_every_misspelt_key_gets_what_was_meant_in_one_pass_in_file_order(tmp_path, capsys):
    code, lines = validate(tmp_path, MISSPELT, capsys)
    assert code == 1
    assert lines == [
        "2:1: repeats: unknown key; did you mean 'repeat'?",
        "7:5: links[0].mut: unknown key; did you mean 'mtu'?",
        "8:13: links[0].netem.dealy: unknown key; did you mean 'delay'?",
        "9:5: links[0].speed: unknown key; the keys here are: between, bond, coalesce, count, driver, "
        "ip, module_params, mtu, netem, nic, offloads, queues, rings, switch",
        "11:33: benchmarks[0].netperf.duration: unknown key; niclab calls it 'seconds'",
        "12:33: benchmarks[1].netperf.-l: unknown key; niclab calls it 'seconds'",
    ]


LINK = "links: [{between: [a, b], nic: e1000}]\n"


def test_a_node_key_nothing_is_close_to_lists_the_node_keys(tmp_path, capsys):
    code, lines = validate(tmp_path, "name: s\nnodes: {a: {zzz: 1}, b: {}}\n" + LINK, capsys)
    assert (code, lines) == (1, ["2:13: nodes.a.zzz: unknown key; the keys here are: cpus, kernel, memory"])


def test_memory_is_a_size_or_a_number_of_mib(tmp_path, capsys):
    code, lines = validate(tmp_path, "name: s\nnodes: {a: {memory: lots}, b: {memory: 512}}\n" + LINK, capsys)
    assert (code, lines) == (1, ["2:21: nodes.a.memory: memory 'lots' is not a size: 256M, 1G, or a number of MiB"])


# -- compare is a gate: every figure of the base accounted for --------------------------------------------------

UDP = 6  # nic-shootout's netperf UDP_STREAM: the seventh benchmark
UDP_FAILED = "a: `netperf -t UDP_STREAM -H 198.18.0.2` did not finish in 99 s; killed it"


def udp_lost(target: Path) -> Path:
    """nic-shootout as it would be had e1000's UDP_STREAM failed all three times (its error records in place)."""
    return edited_run(
        "nic-shootout",
        target,
        drop=lambda r: of_benchmark(r, "nic=e1000", UDP),
        add=[failure("nic=e1000", UDP_FAILED, "netperf UDP_STREAM", f"{UDP}.{n}") for n in (1, 2, 3)],
    )


def compare(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_benchmark_that_failed_every_repeat_in_the_new_run_is_lost_and_fails_the_gate(tmp_path, capsys):
    new = udp_lost(tmp_path / "new")
    code, out, _ = compare(capsys, RECORDED_RUNS / "nic-shootout", new)
    assert code == 1
    assert (
        f"  nic=e1000  netperf UDP_STREAM  netperf.UDP_STREAM.send_throughput_mbps: failed 3 time(s): {UDP_FAILED}"
        in out
    )
    assert ", 0 untested, 5 lost, 0 new" in out  # UDP_STREAM's five headline figures
    assert out.rstrip().endswith("gate: FAILED (5 lost)")


def test_a_cell_that_failed_to_boot_loses_all_its_figures(tmp_path, capsys):
    new = edited_run(
        "nic-shootout",
        tmp_path / "new",
        drop=lambda r: r["cell"] == "nic=tulip" and r["type"] != "cell",
        add=[failure("nic=tulip", "node a did not answer its guest agent within 240 s (boot log: a.qemu.log)")],
    )
    code, out, _ = compare(capsys, RECORDED_RUNS / "nic-shootout", new)
    assert code == 1
    lost = [line for line in out.splitlines() if line.startswith("  nic=tulip  ")]
    assert lost and all(
        line.endswith(": the cell failed: node a did not answer its guest agent within 240 s (boot log: a.qemu.log)")
        for line in lost
    )
    assert "gate: FAILED" in out


def test_a_figure_only_the_new_run_has_is_new_and_passes(tmp_path, capsys):
    base = edited_run("nic-shootout", tmp_path / "base", drop=lambda r: of_benchmark(r, "nic=e1000", UDP))
    code, out, _ = compare(capsys, base, RECORDED_RUNS / "nic-shootout")
    assert code == 0
    assert (
        "new (only the new run has these):\n  nic=e1000  netperf UDP_STREAM  netperf.UDP_STREAM.send_throughput_mbps"
        in out
    )
    assert ", 0 lost, 5 new" in out and "gate: passed" in out


def test_cells_of_one_run_with_a_failed_side_say_so(capsys):
    """virtio's UDP_STREAM failed all three times in the recorded run."""
    code, out, _ = compare(capsys, RECORDED_RUNS / "nic-shootout", "--cells", "nic=e1000", "nic=virtio")
    assert code == 1
    assert (
        "  nic=e1000 → nic=virtio  netperf UDP_STREAM  netperf.UDP_STREAM.send_throughput_mbps: failed 3 time(s): a: `"
        in out
    )
    code, out, _ = compare(capsys, RECORDED_RUNS / "nic-shootout", "--cells", "nic=virtio", "nic=e1000")
    said = "failed in the base run (nothing to compare):\n  nic=virtio → nic=e1000  netperf UDP_STREAM: failed 3 time"
    assert said + "(s) in the base run: a: `" in out
    assert "netperf.UDP_STREAM.send_throughput_mbps" in out.split("new (only")[1]
    assert code == 1 and "lost" not in out.splitlines()[-1]  # e1000 is slower than virtio: worse, nothing lost


def test_runs_of_two_scenarios_are_refused_with_the_fix(tmp_path, capsys):
    other = edited_run("nic-shootout", tmp_path / "other", info={"scenario": "nic-shootout-2"})
    code, out, err = compare(capsys, RECORDED_RUNS / "nic-shootout", other)
    assert code == 2 and out == ""
    assert err == (
        f"niclab: {RECORDED_RUNS / 'nic-shootout'} ran scenario 'nic-shootout' and {other} ran 'nic-shootout-2': "
        "compare two runs of one scenario, or pair two cells with --cells BASE_CELL NEW_CELL\n"
    )


def test_runs_with_no_cell_in_common_are_refused_not_called_worse(tmp_path, capsys):
    def only(*cells: str):
        return lambda r: r["cell"] not in cells

    base = edited_run(
        "nic-shootout", tmp_path / "base", only("nic=e1000", "nic=virtio"), info={"cells": ["nic=e1000", "nic=virtio"]}
    )
    new = edited_run(
        "nic-shootout", tmp_path / "new", only("nic=tulip", "nic=rtl8139"), info={"cells": ["nic=tulip", "nic=rtl8139"]}
    )
    code, out, err = compare(capsys, base, new)
    assert (code, out) == (2, "")
    assert err.endswith(
        "have no cell in common (base: nic=e1000, nic=virtio; new: nic=tulip, nic=rtl8139): "
        "pair two cells with --cells BASE_CELL NEW_CELL\n"
    )


def test_a_single_sample_says_untested_and_the_fix(capsys):
    code, out, _ = compare(capsys, RECORDED_RUNS / "mtu-sweep", "--cells", "nic=e1000,mtu=1500", "nic=e1000,mtu=9000")
    assert code == 0
    assert "+56.3 %" in out and "untested (1 sample): add repeat: 3" in out


def test_json_for_ci_systems_carries_the_gate(tmp_path, capsys):
    new = edited_run(
        "nic-shootout",
        tmp_path / "new",
        drop=lambda r: of_benchmark(r, "nic=e1000", UDP),
        add=[failure("nic=e1000", UDP_FAILED, "netperf UDP_STREAM", f"{UDP}.1")],
    )
    code, out, _ = compare(capsys, RECORDED_RUNS / "nic-shootout", new, "--format", "json")
    found = json.loads(out)
    assert code == 1 and found["version"] == 1 and found["gate"] == "failed"
    assert found["counts"]["lost"] == 5 and found["counts"]["worse"] == 0
    assert found["lost"][0] == {
        "cell": "nic=e1000",
        "label": "netperf UDP_STREAM",
        "name": "netperf.UDP_STREAM.send_throughput_mbps",
        "reason": f"failed 1 time(s): {UDP_FAILED}",
    }


def test_compare_help_reads_per_cent_and_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "%%" not in out and "in % of the base mean" in out
    assert "Exit status: 0 nothing worse and nothing lost; 1" in " ".join(out.split())


# -- single samples are said, with the fix ---------------------------------------------------------------------

ONCE = "name: s\nnodes: [a, b]\n" + LINK + "benchmarks:\n  - netperf: {test: TCP_RR}\n  - ping: {repeat: 1}\n"
ONCE_WARNING = (
    "warning: netperf TCP_RR runs once per cell: one sample cannot tell a change from noise (compare says "
    "untested); add repeat: 3 to the scenario"
)


def test_validate_and_plan_warn_of_a_benchmark_that_runs_once_by_default(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(ONCE)  # ping said repeat: 1 itself: that is a choice, not an oversight
    assert main(["validate", str(scenario)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{scenario}: ok (1 cell)\n" and captured.err == f"{scenario}: {ONCE_WARNING}\n"
    assert main(["plan", str(scenario)]) == 0
    assert capsys.readouterr().err == f"{scenario}: {ONCE_WARNING}\n"
    scenario.write_text(ONCE.replace("benchmarks:", "repeat: 3\nbenchmarks:"))
    assert main(["validate", str(scenario)]) == 0 and capsys.readouterr().err == ""


def test_the_shipped_scenarios_repeat_or_say_why_not(capsys):
    shipped = sorted((ROOT / "scenarios").rglob("*.yaml"))  # the studies too
    assert main(["validate", *map(str, shipped)]) == 0
    assert capsys.readouterr().err == ""
    for path in shipped:
        text = path.read_text()
        assert "\nrepeat: 3" in text or "\nrepeat: 1 " in text, f"{path.name} says nothing of its repeats"


def test_the_readmes_minimal_scenario_repeats():
    readme = (ROOT / "README.md").read_text()
    minimal = readme.split("## A minimal scenario", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    assert "\nrepeat: 3 " in minimal


# -- lab honesty: what the lab cannot realize is said, and not run silently -------------------------------------

MISSING = [
    f"nic={nic}: lab fake-lab lacks cards: the cell needs 2 {nic} (it has 0)"
    for nic in ("rtl8139", "i82559er", "tulip", "virtio")
]


def test_validate_with_a_lab_that_cannot_realize_most_cells_fails_naming_each(tmp_path, capsys):
    lab, shootout = tmp_path / "lab.yaml", ROOT / "scenarios" / "nic-shootout.yaml"
    lab.write_text(TWO_E1000_LAB)
    assert main(["validate", str(shootout), "--lab", str(lab)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"{shootout}: lab {lab} cannot realize 4 of 5 cells:",
        *(f"{shootout}: cell {line}" for line in MISSING),
        f"{shootout}: run the others with `niclab run --allow-partial`, or choose cells with --cell",
    ]


def test_plan_with_the_lab_estimates_only_what_it_can_run(tmp_path, capsys):
    lab = tmp_path / "lab.yaml"
    lab.write_text(TWO_E1000_LAB)
    assert main(["plan", str(ROOT / "scenarios" / "nic-shootout.yaml"), "--lab", str(lab)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("nic=e1000 ") and "scenario nic-shootout: 1 cell, about" in out
    assert f"left out of the estimate: 4 of 5 cells, which lab {lab} cannot realize:" in out
    assert all(f"  {line}" in out for line in MISSING)


def test_run_with_the_lab_refuses_a_partial_run_unless_asked(tmp_path, capsys):
    lab = tmp_path / "lab.yaml"
    lab.write_text(TWO_E1000_LAB)
    argv = ["run", str(ROOT / "scenarios" / "nic-shootout.yaml"), "--lab", str(lab), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("niclab: the libvirt backend cannot realize 4 of the 5 cells of nic-shootout (nic=rtl8139:")
    assert err.endswith("run the others with --allow-partial, or pick cells with --cell\n")
    assert not (tmp_path / "o").exists()  # refused before anything was made


# -- the tools' own vocabulary ----------------------------------------------------------------------------------


def test_the_seeds_netperf_flags_are_taken_as_netperf_says_them(tmp_path, capsys):
    entry = '{test: UDP_STREAM, seconds: 60, iterations: "10,2", confidence: {level: 99, width: 5%}}'
    code, lines = validate(
        tmp_path, f"name: s\nnodes: [a, b]\n{LINK}repeat: 3\nbenchmarks:\n  - netperf: {entry}\n", capsys
    )
    assert (code, lines) == (0, [])
    from niclab.model.scenario import load_scenario

    (spec,) = load_scenario(tmp_path / "s.yaml").cells[0].scenario.benchmarks
    assert spec.options.iterations == (3, 10) and spec.options.confidence.width == 5.0  # -i 10,2: min raised to 3


@pytest.mark.parametrize(
    "entry,said",
    [
        (
            "{iterations: [10, 2]}",
            'iterations: [10, 2] is [min, max]: for netperf\'s -i 10,2 (max,min) write "10,2" or [3, 10]',
        ),
        ("{iterations: ten}", 'iterations: \'ten\' is not netperf\'s -i "max,min", e.g. "10,2"; or write [min, max]'),
        ("{-l: 60}", "-l: unknown key; niclab calls it 'seconds'"),
        ("{-i: '10,2'}", "-i: unknown key; niclab calls it 'iterations'"),
        ("{duration: 60}", "duration: unknown key; niclab calls it 'seconds'"),
    ],
)
def test_netperf_vocabulary_is_answered_with_the_option_to_use(tmp_path, capsys, entry, said):
    code, lines = validate(
        tmp_path, f"name: s\nnodes: [a, b]\n{LINK}repeat: 3\nbenchmarks:\n  - netperf: {entry}\n", capsys
    )
    assert code == 1 and len(lines) == 1 and lines[0].endswith(f": benchmarks[0].netperf.{said}"), lines


def test_the_seeds_command_lines_as_docs_translate_them_validate(tmp_path, capsys):
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    translated = docs.split("The seed studies' command lines, translated:", 1)[1].split("\n\n", 2)[1]
    entries = [row.split(" | ")[1].split("`")[1] for row in translated.splitlines()[2:]]
    entries = [e for e in entries if e.startswith(("netperf:", "netpipe:"))]
    assert len(entries) == 5
    benchmarks = "".join(f"  - {entry}\n" for entry in entries)
    code, lines = validate(tmp_path, f"name: s\nnodes: [a, b]\n{LINK}repeat: 3\nbenchmarks:\n{benchmarks}", capsys)
    assert (code, lines) == (0, [])


def test_every_flag_the_options_name_is_in_the_docs_table():
    from niclab.base.problems import _flags
    from niclab.model import bench

    rows = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    for tool, named in (("netperf", "netperf"), ("iperf3", "iperf3"), ("netpipe", "NetPIPE"), ("lmbench", "lmbench")):
        for flag, key in _flags(bench.get(tool).Options).items():
            said = [r for r in rows if r.startswith(f"| {named}") and re.search(rf"[ `]{flag}[ `,]", r)]
            assert any(f"{key}:" in row for row in said), (tool, flag, key)


# -- cells you can pick: partial ids in any order, -k, -D -------------------------------------------------------

MTU_SWEEP = ROOT / "scenarios" / "mtu-sweep.yaml"


def planned(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    """plan's exit status, the ids of the cells it lists, and what it said on stderr."""
    code = main(["plan", str(MTU_SWEEP), *args])
    captured = capsys.readouterr()
    rows = captured.out.splitlines()[1:-1]
    return code, [row.split()[0] for row in rows if row and not row.startswith(("scenario ", " "))], captured.err


def test_a_cell_is_picked_by_some_of_its_axes_in_any_order(capsys):
    code, cells, _ = planned(capsys, "--cell", "nic=e1000")
    assert code == 0 and cells == [f"nic=e1000,mtu={mtu}" for mtu in (1500, 3000, 4000, 6000, 9000)]
    assert planned(capsys, "--cell", "mtu=9000,nic=e1000")[1] == ["nic=e1000,mtu=9000"]
    picked = planned(capsys, "--cell", "mtu=9000", "--cell", "nic=virtio,mtu=1500")[1]
    nics = ("e1000", "e1000e", "vmxnet3", "virtio")  # in the scenario's order; rtl8139 at 9000 is excluded
    assert sorted(picked) == sorted([f"nic={nic},mtu=9000" for nic in nics] + ["nic=virtio,mtu=1500"])


@pytest.mark.parametrize(
    "pattern,said",
    [
        (
            "mtu=9001",
            "--cell mtu=9001: mtu has no value '9001'; did you mean '9000'? its values are: 1500, 3000, 4000, 6000, "
            "9000",
        ),
        ("nci=e1000", "--cell nci=e1000: no axis 'nci'; did you mean 'nic'? axes are: nic, mtu"),
        ("nic=rtl8139,mtu=9000", "no cell has nic=rtl8139,mtu=9000 (that combination is excluded); cells are: "),
    ],
)
def test_a_cell_nothing_matches_is_refused_with_the_fix(capsys, pattern, said):
    code, _, err = planned(capsys, "--cell", pattern)
    assert code == 2 and err.startswith(f"niclab: {MTU_SWEEP}: {said}")


def test_k_picks_cells_as_pytest_reads_names(capsys):
    code, cells, _ = planned(capsys, "-k", "(e1000 or virtio) and not e1000e and mtu=9")
    assert code == 0 and cells == ["nic=e1000,mtu=9000", "nic=virtio,mtu=9000"]
    code, _, err = planned(capsys, "-k", "e1000 and (")
    assert code == 2 and "-k 'e1000 and (': it ends too early; write words of cell ids" in err
    code, _, err = planned(capsys, "-k", "tulip")
    assert code == 2 and "-k 'tulip' matches no cell; cells are: nic=e1000,mtu=1500" in err


def test_d_gives_an_axis_its_values_without_editing_the_file(capsys):
    code, cells, _ = planned(capsys, "-D", "mtu=9000", "-D", "nic=e1000,rtl8139")
    assert code == 0 and cells == ["nic=e1000,mtu=9000"]  # rtl8139 at 9000 stays excluded
    code, _, err = planned(capsys, "-D", "mut=9000")
    assert code == 2 and err == (
        f"niclab: {MTU_SWEEP}: -D mut: the scenario has no axis 'mut' and uses no ${{mut}}; did you mean 'mtu'? "
        "axes are: nic, mtu\n"
    )
    with pytest.raises(SystemExit):
        main(["plan", str(MTU_SWEEP), "-D", "mtu"])
    assert "'mtu' is not AXIS=VALUE[,VALUE...], e.g. mtu=9000" in capsys.readouterr().err


def test_report_and_compare_pick_cells_too(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(RECORDED_RUNS / "mtu-sweep"), "--cell", "nic=e1000", "--out", str(out)]) == 0
    html = out.read_text()
    assert "nic=e1000,mtu=9000" in html and "nic=virtio,mtu=9000" not in html
    shootout = RECORDED_RUNS / "nic-shootout"
    code, text, _ = compare(capsys, shootout, shootout, "-k", "e1000")
    assert code == 0 and {line.split()[0] for line in text.splitlines()[4:] if line.startswith("nic=")} == {"nic=e1000"}


# -- a finished run in the terminal ------------------------------------------------------------------------------


def test_show_prints_the_tables_the_run_ended_with(capsys):
    code = main(["show", str(RECORDED_RUNS / "nic-shootout")])
    out = capsys.readouterr().out
    assert code == 1  # the run failed: virtio's UDP_STREAM did not run
    assert out.startswith("scenario nic-shootout · cell nic=rtl8139 · accel=tcg · 3 runs, mean ± 95 % interval\n")
    assert "\nnetperf TCP_STREAM  throughput_mbps       480.5 ± 479.3       unstable\n" in out
    assert "FAILED: netperf UDP_STREAM (run 6.3): netperf UDP_STREAM exited 255: establish control" in out
    assert out.rstrip().endswith(f"run:     {RECORDED_RUNS / 'nic-shootout'} (failed)")


def test_show_takes_the_run_latest_points_at_and_escapes_what_the_run_says(tmp_path, capsys):
    runs = tmp_path / "runs"
    edited_run("mtu-sweep", runs / "2026-11-20T10-00-00-mtu-sweep")
    newer = edited_run(
        "nic-shootout",
        runs / "2026-11-21T10-00-00-nic-shootout",
        add=[
            failure("nic=tulip", "node a\x1b[2J\x1b[Hok everything fine"),
            failure("nic=tulip", "no run id written", "netperf TCP_RR"),
        ],
    )
    (runs / "latest").symlink_to(newer.name)
    code = main(["show", "--runs", str(runs), "--cell", "nic=tulip"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("scenario nic-shootout · cell nic=tulip")
    assert "FAILED: node a\\x1b[2J\\x1b[Hok everything fine" in out and "\x1b" not in out
    assert "FAILED: netperf TCP_RR: no run id written" in out
    assert main(["show", "--runs", str(tmp_path / "none")]) == 2
    assert (
        "holds no run; run one with `niclab run SCENARIO`, or name it: niclab show RUN_DIR" in capsys.readouterr().err
    )


# -- the report answers first -----------------------------------------------------------------------------------


def report_text(capsys: pytest.CaptureFixture[str], out: Path, *args: object) -> tuple[str, str]:
    """The report's HTML, and its text as a reader sees it (tags out, spaces folded)."""
    assert main(["report", *map(str, args), "--out", str(out)]) == 0
    capsys.readouterr()
    html = out.read_text()
    return html, as_read(html)


def as_read(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_report_opens_with_what_was_measured_what_failed_and_the_ranking(tmp_path, capsys):
    html, _text = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "nic-shootout")
    after_title = html.split("</h1>", 1)[1].split("</header>", 1)[1].lstrip()
    assert after_title.startswith('<section id="answers">')
    answers = as_read(after_title.split("</section>", 1)[0])
    assert answers.startswith(
        "Emulated: these figures describe QEMU's device models on this host's CPU (AMD EPYC) under TCG, not the "
        "real cards."
    )
    assert "The run failed. 2 benchmarks lost runs: nic=i82559er: netpipe failed 3 of 3 runs (no figure)" in answers
    assert "nic=virtio: netperf UDP_STREAM failed 3 of 3 runs (no figure)" in answers
    assert (
        "netperf TCP_STREAM throughput_mbps (higher is better) # cell mean n CV from the best against the best "
        "1 nic=e1000 ★ 841.5 ± 91.0 3 4.4 % best 2 nic=virtio 651.7 ± 17.1 3 1.1 % -22.6 % significantly worse"
    ) in answers
    assert "4 nic=rtl8139 480.5 ± 479.3 3 40.2 % -42.9 % not significantly different" in answers


def test_findings_are_grouped_by_kind_with_counts(tmp_path, capsys):
    html, _ = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "nic-shootout")
    kinds = re.findall(r'<summary><span class="kind">([\w-]+)</span> (\d+)\s+findings? in (\d+)', html)
    assert ("unstable", "19", "5") in kinds and len(kinds) == len({k for k, _, _ in kinds})


def test_a_sweep_ranks_the_cards_per_mtu_and_says_a_single_sample_is_untested(tmp_path, capsys):
    _, text = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "mtu-sweep")
    assert "The cells ranked by nic, per headline metric" in text
    assert "netperf TCP_STREAM throughput_mbps, mtu=9000 (higher is better)" in text
    assert "2 nic=e1000,mtu=9000 1026.3 1 -1.9 % untested (1 sample): add repeat: 3" in text


def test_two_runs_of_one_scenario_are_before_and_after_with_compares_verdicts(tmp_path, capsys):
    new = udp_lost(tmp_path / "2026-11-23T00-00-00-nic-shootout")
    _html, text = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "nic-shootout", new)
    assert text.startswith("niclab report: nic-shootout (before and after)")
    assert "nic-shootout → 2026-11-23T00-00-00-nic-shootout: what changed gate: FAILED (5 lost)" in text
    assert f"nic=e1000 netperf UDP_STREAM send_throughput_mbps failed 3 time(s): {UDP_FAILED} lost" in text
    assert "nic-shootout (base)" in text and "nic-shootout (new)" in text and "Merged from" not in text


def test_shards_of_one_run_still_merge(tmp_path, capsys):
    one = edited_run("nic-shootout", tmp_path / "a", drop=lambda r: r["cell"] in ("nic=e1000", "nic=virtio"))
    two = edited_run("nic-shootout", tmp_path / "b", drop=lambda r: r["cell"] not in ("nic=e1000", "nic=virtio"))
    _, text = report_text(capsys, tmp_path / "r.html", one, two)
    assert "Merged from 2 run directories (shards)" in text and "(before and after)" not in text


def test_cost_per_mbit_divides_every_card_by_one_metric(tmp_path, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("e1000: 45\nrtl8139: 20\nvirtio: 1\n")
    _html, text = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "nic-shootout", "--prices", prices)
    table = text.split("Cost per Mbit/s", 1)[1].split("Expectations", 1)[0]
    (metric,) = set(re.findall(r"\b\w+\.[\w.]+_mbps\b", table))
    assert f"the same for every card: {metric}" in table and table.count(metric) == 4  # the sentence, 3 cards


# -- plots a person can read ------------------------------------------------------------------------------------


def test_an_interval_wider_than_its_bar_never_takes_the_axis_below_zero():
    from niclab.ui.report.figures import grouped_bars, new_figure

    _, ax = new_figure()
    grouped_bars(ax, ["virtio", "e1000"], {"lat_tcp": [(685.0, 2059.0), (230.0, 40.0)]}, "µs")  # virtio's, recorded
    assert ax.get_ylim()[0] >= 0
    (bars,) = [c for c in ax.containers if hasattr(c, "errorbar")]
    low, _high = bars.errorbar.lines[2][0].get_segments()[0][:, 1]  # virtio's error bar, bottom to top
    assert low == 0.0


def test_a_series_no_cell_measured_is_not_in_the_legend():
    from niclab.ui.report.figures import grouped_bars, new_figure

    _, ax = new_figure()
    grouped_bars(
        ax,
        ["e1000", "virtio"],
        {
            "netperf": [(900.0, 9.0), (950.0, 5.0)],
            "NetPIPE peak": [(None, None)] * 2,
            "bw_tcp": [(800.0, 8.0), (None, None)],
        },
        "Mbit/s",
    )
    assert ax.get_legend_handles_labels()[1] == ["netperf", "bw_tcp"]


def test_round_trips_and_one_way_times_are_drawn_apart():
    from niclab.ui.report.data import load_run
    from niclab.ui.report.plots import draw, figures

    run = load_run(RECORDED_RUNS / "nic-shootout")
    (latency,) = [f for f in figures() if f.kind == "latency"]
    drawn = draw(run, latency)
    assert [p.title for p in drawn] == ["Latency per card", "Latency per card: one way"]
    assert drawn[0].caption == "nic-shootout: round trips: TCP_RR mean, lmbench lat_tcp, lmbench lat_udp."
    assert drawn[1].caption == "nic-shootout: one-way time (half the round trip, as NetPIPE reports it): NetPIPE."


def test_a_nic_by_mtu_matrix_draws_a_panel_per_mtu_and_its_table_grows_down(tmp_path, capsys):
    from niclab.ui.report.data import load_run
    from niclab.ui.report.plots import draw, figures

    run = load_run(RECORDED_RUNS / "mtu-sweep")
    (throughput,) = [f for f in figures() if f.kind == "throughput"]
    (plot,) = draw(run, throughput)
    assert plot.caption.endswith("One panel per mtu.")
    html, text = report_text(capsys, tmp_path / "r.html", RECORDED_RUNS / "mtu-sweep")
    assert '<table class="summary pivoted">' in html
    assert "cell tcp (Mbit/s) nic=e1000,mtu=1500 656.7" in text


# -- every problem of a file at once ----------------------------------------------------------------------------

EIGHT_MISTAKES = """\
name: Eight Mistakes
nodes: [a, b]
links:
  - between: [a, c]
    nic: E1000
    mtu: 99999
    netem: {delay: fast}
benchmarks:
  - netperf: {test: TCP_STRAEM}
  - ping: {count: 0}
repeat: 0
"""


def test_validate_reports_every_problem_in_one_pass_in_file_order(tmp_path, capsys):
    """A link's unknown node and NIC model were said only once every field passed: a second round."""
    code, lines = validate(tmp_path, EIGHT_MISTAKES, capsys)
    assert code == 1
    assert [line.split(": ", 2)[:2] for line in lines] == [
        ["1:7", "name"],
        ["4:18", "links[0].between[1]"],
        ["5:10", "links[0].nic"],
        ["6:10", "links[0].mtu"],
        ["7:20", "links[0].netem.delay"],
        ["9:21", "benchmarks[0].netperf.test"],
        ["10:19", "benchmarks[1].ping.count"],
        ["11:9", "repeat"],
    ]
    assert lines[1].endswith("unknown node 'c'; nodes are: a, b")
    assert lines[2].endswith("unknown NIC model 'E1000'; did you mean 'e1000'? run 'niclab nics' for the list")


def test_cells_run_in_the_order_asked_for(capsys):
    """Repeats of cells that share a boot alternate in the order the cells were named."""
    assert planned(capsys, "--cell", "nic=e1000,mtu=9000", "--cell", "nic=e1000,mtu=1500")[1] == [
        "nic=e1000,mtu=9000",
        "nic=e1000,mtu=1500",
    ]
