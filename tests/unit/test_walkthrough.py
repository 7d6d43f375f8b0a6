"""A new user's walk through niclab's answers: each mistake a user makes, and each case a run can end in, as
the CLI prints it, with its exit code (0 fine, 1 the file or the result failed, 2 unusable input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.ui.cli.main import main


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
        "module_params, mtu, netem, nic, offloads, queues, rings, switch",
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
