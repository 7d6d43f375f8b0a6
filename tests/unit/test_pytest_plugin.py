"""The pytest plugin, checked with pytester: collection, ids, invalid files, skips, shards.

Nothing here boots a guest: skips and failures happen before the boot.
tests/integration/test_pytest_scenarios.py runs real cells.
"""

from __future__ import annotations

import pytest

PAIR = """\
name: pair
nodes: [a, b]
links:
  - between: [a, b]
    nic: ${nic}
    mtu: ${mtu}
matrix:
  nic: [e1000, virtio]
  mtu: [1500, 9000]
benchmarks:
  - netperf: {test: TCP_RR, seconds: 3}
"""


@pytest.fixture
def scenarios(pytester):
    pytester.mkdir("scenarios")
    pytester.path.joinpath("scenarios", "pair.yaml").write_text(PAIR)
    return pytester


def test_one_item_per_cell_with_readable_ids(scenarios):
    result = scenarios.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "scenarios/pair.yaml::nic=e1000,mtu=1500",
            "scenarios/pair.yaml::nic=e1000,mtu=9000",
            "scenarios/pair.yaml::nic=virtio,mtu=1500",
            "scenarios/pair.yaml::nic=virtio,mtu=9000",
            "4 tests collected*",
        ]
    )


def test_yaml_outside_scenarios_is_collected_only_when_named(pytester):
    pytester.path.joinpath("other.yaml").write_text(PAIR)
    assert "no tests collected" in pytester.runpytest("--collect-only", "-q").stdout.str()
    pytester.runpytest("--collect-only", "-q", "other.yaml").stdout.fnmatch_lines(["4 tests collected*"])


def test_an_invalid_scenario_is_one_failing_item_not_a_crash(scenarios):
    scenarios.path.joinpath("scenarios", "bad.yaml").write_text(
        "name: bad\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1001\n"
    )
    result = scenarios.runpytest("scenarios/bad.yaml", "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*bad.yaml does not validate:*",
            "scenarios/bad.yaml:5:10: links[[]0].nic: unknown NIC model 'e1001'; did you mean 'e1000'?*",
            "FAILED scenarios/bad.yaml::validate*",
        ]
    )
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()


def test_cells_a_lab_cannot_realize_are_skipped_with_the_reason(scenarios):
    scenarios.path.joinpath("lab.yaml").write_text(
        "name: small-lab\ncards:\n  - {id: a, host: localhost, pci: '0000:03:00.0', model: e1000}\n"
        "  - {id: b, host: localhost, pci: '0000:03:00.1', model: e1000}\ncables:\n  - [a, b]\n"
    )
    result = scenarios.runpytest("scenarios/pair.yaml", "-k", "virtio", "-rs", "--niclab-lab", "lab.yaml")
    result.assert_outcomes(skipped=2, deselected=2)
    result.stdout.fnmatch_lines(["*lab small-lab lacks cards: the cell needs 2 virtio (it has 0)*"])


def test_a_test_that_needs_kvm_is_skipped_where_kvm_does_not_work(pytester, monkeypatch):
    monkeypatch.setenv("NICLAB_ACCEL", "tcg")
    pytester.makepyfile("import pytest\n\n@pytest.mark.niclab_kvm\ndef test_fast():\n    assert False\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs KVM, and it does not work here: set by NICLAB_ACCEL*"])


def test_shards_split_the_cells_without_overlap(scenarios):
    held = []
    for i in (1, 2, 3):
        out = scenarios.runpytest("--collect-only", "-q", "--niclab-shard", f"{i}/3").stdout.lines
        held += [line for line in out if line.startswith("scenarios/pair.yaml::")]
    assert sorted(held) == sorted(
        f"scenarios/pair.yaml::nic={n},mtu={m}" for n in ("e1000", "virtio") for m in (1500, 9000)
    )


def test_markers_and_options_are_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*niclab_slow*", "*niclab_lab*", "*niclab_kvm*"])
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["*--niclab-backend*", "*--niclab-lab*", "*--niclab-out*", "*--niclab-repeat*", "*--niclab-shard*"]
    )


def test_a_scenario_may_name_a_model_of_the_lab_given(scenarios):
    scenarios.path.joinpath("lab.yaml").write_text(
        "models:\n  x520: {driver: ixgbe, pci_id: '8086:10fb', emulated_by: e1000}\n"
        "cards:\n  - {id: a, host: localhost, pci: '0000:03:00.0', model: x520}\n"
        "  - {id: b, host: localhost, pci: '0000:03:00.1', model: x520}\ncables:\n  - [a, b]\n"
    )
    scenarios.path.joinpath("scenarios", "x520.yaml").write_text(
        "name: x520\nnodes: [a, b]\nlinks:\n  - {between: [a, b], nic: x520}\nbenchmarks:\n  - ping: {}\n"
    )
    without = scenarios.runpytest("scenarios/x520.yaml", "--collect-only", "-q")
    without.stdout.fnmatch_lines(["scenarios/x520.yaml::validate"])  # the item that fails: unknown NIC model
    # In a subprocess, as a user runs it: the lab's models are known from pytest_configure on.
    result = scenarios.runpytest_subprocess("scenarios/x520.yaml", "--collect-only", "-q", "--niclab-lab", "lab.yaml")
    assert result.ret == 0, result.stdout.str()
    collected = [line for line in result.stdout.lines if line.startswith("scenarios/x520.yaml::")]
    assert collected and "validate" not in collected[0], result.stdout.str()
