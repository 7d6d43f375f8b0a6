"""The emulation does what the scenario says, measured, not only configured.

In the spirit of Mininet's high-fidelity tests: one boot of three nodes
carries an unimpaired cable (the baseline), a cable with 10 ms of netem delay
on each end, one with 5 % loss, one limited to 50 Mbit/s, a three-port
balance-rr bond, a switched segment of all three nodes, and a cable whose
one end is limited to 10 Mbit/s (for pktgen, which sends from a), and each is
measured against what it claims (the topology: fidelity.yaml beside this
file). bench/fidelity.py prints the same figures without asserting.

pktgen and netperf's flows are judged on the same cables beside a busy
process (one of the host's CPUs kept busy, as a CI machine's other work
does): the rate cap and the loss show in pktgen's count, a fixed rate
arrives as such over IPv4 and IPv6, and the delay in each flow's round trip.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from niclab.model.scenario import load_scenario
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.run.session import Session

SCENARIO = Path(__file__).with_name("fidelity.yaml")

pytestmark = pytest.mark.measures


def metric(found, name):
    return next(m.value for m in found if m.metric == name)


@pytest.fixture(scope="module")
def session(image, tmp_path_factory):
    cell = load_scenario(SCENARIO).cells[0]
    with Session(cell, QemuBackend(image=image), tmp_path_factory.mktemp("fidelity")) as running:
        yield running


def test_delay_adds_what_it_says_to_the_round_trip(session):
    baseline = metric(session.bench("ping", link=0, count=30, interval=0.1), "rtt_avg_ms")
    delayed = metric(session.bench("ping", link=1, count=30, interval=0.1), "rtt_avg_ms")
    expected = 2 * 10 + baseline
    assert abs(delayed - expected) <= 0.10 * expected, (
        f"RTT {delayed:.2f} ms with 10 ms on each end; expected {expected:.2f} ms ± 10 % "
        f"(20 ms + the unimpaired {baseline:.2f} ms)"
    )


def test_loss_drops_that_share_of_udp_datagrams(session):
    found = session.bench("iperf3", link=2, protocol="udp", bitrate="10M", length=1000, seconds=10)
    loss = metric(found, "loss_pct")
    packets = next(m.extra["packets"] for m in found if m.metric == "loss_pct")
    assert packets > 5000
    assert 3.0 <= loss <= 7.0, f"{loss:.2f} % of {packets} UDP datagrams lost with netem loss 5 %"


def test_rate_limits_tcp_to_just_under_the_rate(session):
    throughput = metric(session.bench("netperf", test="TCP_STREAM", link=3, seconds=10), "throughput_mbps")
    assert 0.80 * 50 <= throughput <= 50, f"TCP {throughput:.1f} Mbit/s through netem rate 50mbit"


def test_round_robin_bond_moves_traffic_over_every_port(session):
    ports = [port.ifname for port in session.iface("a", link=4).ports]
    assert len(ports) == 3
    read = "for p in " + " ".join(ports) + "; do cat /sys/class/net/$p/statistics/tx_packets; done"
    before = [int(n) for n in session.node("a").run(read).stdout.split()]
    throughput = metric(session.bench("netperf", test="TCP_STREAM", link=4, seconds=5), "throughput_mbps")
    after = [int(n) for n in session.node("a").run(read).stdout.split()]
    sent = [b - a for a, b in zip(before, after, strict=True)]
    assert throughput > 0
    per_port = dict(zip(ports, sent, strict=True))
    assert all(n >= 0.2 * sum(sent) for n in sent), f"packets sent per port of the bond: {per_port}"


def test_switched_segment_reaches_every_node_from_every_other(session):
    for source in "abc":
        for target in "abc":
            if source != target:
                found = session.bench("ping", link=5, count=5, interval=0.1, **{"from": source, "to": target})
                assert metric(found, "loss_pct") == 0, f"{source} -> {target} over the segment lost pings"


@pytest.fixture
def busy() -> Iterator[None]:
    """One of the host's CPUs kept busy for the test's length."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def pktgen(session, **options):
    return {m.metric: m for m in session.bench("pktgen", frame_size=1518, seconds=3, **options)}


def test_a_fixed_packet_rate_arrives_as_such_over_ipv4_and_ipv6(session, busy):
    v4 = pktgen(session, link=0, pps=2000)["rx_pps"].value
    v6 = pktgen(session, link=0, pps=2000, family=6)["rx_pps"].value
    assert v4 == pytest.approx(2000, rel=0.05) and v6 == pytest.approx(2000, rel=0.05), (v4, v6)


def test_netems_rate_caps_pktgens_received_rate(session, busy):
    """10 Mbit/s of 1514-byte frames is 826 frames/s; through the qdisc, TCG sends some 4000."""
    found = pktgen(session, link=6)
    assert found["rx_pps"].extra["xmit_mode"] == "queue_xmit"  # through the qdisc, where netem is
    assert found["rx_pps"].value == pytest.approx(10e6 / 8 / 1514, rel=0.10), found["rx_pps"]
    assert found["tx_errors"].value > found["tx_pps"].value, found["tx_errors"]  # the cap held pktgen back
    assert found["loss_pct"].value < 2, found["loss_pct"]  # netem held the frames it could not send yet


def test_netems_loss_shows_in_pktgens_count(session, busy):
    loss = pktgen(session, link=2, pps=2000)["loss_pct"].value
    assert 3.0 <= loss <= 7.0, f"{loss:.2f} % of pktgen's frames lost with netem loss 5 %"


def test_delay_shows_in_each_flows_round_trip(session, busy):
    found = {m.metric: m for m in session.bench("netperf", test="TCP_RR", link=1, seconds=3, flows=4)}
    medians = found["latency_p50_us"].extra["per_flow"]
    assert len(medians) == 4 and all(20_000 <= p50 <= 40_000 for p50 in medians), medians  # 10 ms each way
    assert found["fairness"].value > 0.9, found["fairness"]


def test_no_benchmark_left_a_process_in_any_guest(session):
    """Runs last in this module: netperf, iperf3 and ping ran on every node; none may linger."""
    for node in "abc":
        processes = session.node(node).run("ps -o pid,args").stdout.splitlines()
        left = [
            line for line in processes if any(tool in line for tool in ("netserver", "netperf", "iperf3", " ping "))
        ]
        assert left == [], f"{node} still runs: {left}"
