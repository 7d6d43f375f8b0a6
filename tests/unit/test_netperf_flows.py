"""netperf with `flows: N`: N instances at once, each its own connection, their figures combined into one.

The outputs are a micro guest's (e1000, TCG): four TCP_RR flows and two UDP_STREAM flows, as niclab's
command gathered them.
"""

from __future__ import annotations

import subprocess

import pytest

from niclab.model.bench.base import BenchmarkError
from niclab.model.bench.netperf import PLUGIN as NETPERF
from niclab.model.bench.netperf import NetperfOptions, measurements, parse_keyvals
from niclab.model.bench.netperf_flows import combined, flows_command, jain, split_flows


def flows_of(data_dir, name: str, test: str, flows: int) -> dict:
    outputs = split_flows((data_dir / "netperf-flows" / name).read_text(), flows)
    return {m.metric: m for m in combined(test, [measurements(test, parse_keyvals(o)) for o in outputs])}


def test_the_flows_rates_add_up_and_their_latencies_read_as_every_transactions(data_dir):
    found = flows_of(data_dir, "tcp-rr-4.txt", "TCP_RR", 4)
    rates = [382.87, 377.43, 367.93, 381.89]
    assert found["transaction_rate"].value == pytest.approx(sum(rates))
    assert found["transaction_rate"].extra["per_flow"] == rates and found["transaction_rate"].extra["flows"] == 4
    means = [2598.51, 2625.36, 2701.82, 2605.68]  # each transaction's mean: weighted by the flows' rates
    assert found["latency_mean_us"].value == pytest.approx(
        sum(r * m for r, m in zip(rates, means, strict=True)) / sum(rates)
    )
    assert found["latency_p50_us"].value == 2086.0  # the median flow's
    assert found["latency_p99_us"].value == 10666.0  # the worst flow's
    assert found["latency_max_us"].value == 44316.0 and found["latency_min_us"].value == 382.0
    assert found["slowest_flow_rate"].value == 367.93 and found["slowest_flow_rate"].unit == "/s"
    assert found["fairness"].value == pytest.approx(sum(rates) ** 2 / (4 * sum(r * r for r in rates)))


def test_udp_loss_is_the_flows_datagrams_together(data_dir):
    found = flows_of(data_dir, "udp-stream-2.txt", "UDP_STREAM", 2)
    sent, received = 12956 + 12247, 12440 + 11862
    assert found["loss_pct"].value == pytest.approx(100 * (sent - received) / sent)
    assert (found["loss_pct"].extra["sent_datagrams"], found["loss_pct"].extra["received_datagrams"]) == (
        sent,
        received,
    )
    assert found["slowest_flow_mbps"].unit == "Mbit/s"


def test_jains_index_is_1_for_equal_flows_and_1_over_n_when_one_takes_all():
    assert jain([10.0, 10.0, 10.0, 10.0]) == 1.0
    assert jain([40.0, 0.0, 0.0, 0.0]) == 0.25
    assert jain([0.0, 0.0]) is None


def test_the_command_runs_each_flow_at_once_and_gathers_their_outputs_in_order():
    """Run by this machine's sh, with a stand-in for netperf that says which flow it was."""
    script = flows_command('echo "THROUGHPUT=$i"', 3)
    printed = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert [parse_keyvals(o)["THROUGHPUT"] for o in split_flows(printed, 3)] == ["1", "2", "3"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("== niclab flow 1\nNICLAB_EXIT=0\n", "did not all report"),
        ("== niclab flow 1\nNICLAB_EXIT=0\n== niclab flow 2\nestablish control: are you sure\nNICLAB_EXIT=1\n",
         "flow 2 of 2 exited 1: establish control"),
        ("== niclab flow 1\nNICLAB_EXIT=0\n== niclab flow 2\n", "flow 2 of 2 exited ?"),
    ],
)  # fmt: skip
def test_a_flow_that_did_not_report_or_failed_fails_the_run(text, said):
    with pytest.raises(BenchmarkError, match=said.replace("?", r"\?")):
        split_flows(text, 2)


def test_flows_take_no_cpu_figures_nor_confidence_and_say_so_in_the_label():
    with pytest.raises(ValueError, match="cpu: true with flows"):
        NetperfOptions(flows=4, cpu=True)
    with pytest.raises(ValueError, match="confidence with flows"):
        NetperfOptions(flows=4, confidence="99,5")
    assert NETPERF.describe(NetperfOptions(test="TCP_RR", flows=8)) == "netperf TCP_RR 8 flows"
    assert NETPERF.describe(NetperfOptions(test="TCP_RR")) == "netperf TCP_RR"
