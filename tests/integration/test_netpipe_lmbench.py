"""netpipe and lmbench through a Session on one booted e1000 pair.

Each benchmark runs as a scenario file would give it; the values must be
plausible for an emulated e1000 under TCG, and neither guest may keep an
NPtcp or lmbench process afterwards. About a minute in all (boot included).
"""

from __future__ import annotations

import itertools

import pytest

from niclab.model.scenario import parse
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.run.session import Session

pytestmark = [pytest.mark.integration, pytest.mark.measures]

SCENARIO = "name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
LMBENCH = {  # short runs: a few repetitions, 1 s of warm-up for bw_tcp instead of 7.5
    "bw_tcp": {"warmup": 1, "repetitions": 5},
    "lat_tcp": {"repetitions": 3},
    "lat_udp": {"repetitions": 5},
    "lat_connect": {"repetitions": 5},
}


@pytest.fixture(scope="module")
def session(image, tmp_path_factory):
    cell = parse(SCENARIO, "t.yaml").cells[0]
    with Session(cell, QemuBackend(image=image), tmp_path_factory.mktemp("netpipe-lmbench")) as running:
        yield running


def leftovers(session) -> dict[str, list[str]]:
    """NPtcp or lmbench processes in either guest, from `ps`."""
    found = {}
    for name in ("a", "b"):
        lines = session.node(name).run("ps -o pid,args").stdout.splitlines()
        found[name] = [line for line in lines if "NPtcp" in line or "/lmbench/" in line]
    return found


def by_metric(found):
    return {m.metric: m for m in found}


def test_netpipe_sweep(session):
    found = by_metric(session.bench("netpipe", end=262144))
    latency, peak = found["latency_us"].value, found["peak_throughput_mbps"].value
    assert 10 <= latency <= 10_000, f"netpipe one-way latency {latency} us"
    assert peak > 10, f"netpipe peak {peak} Mbit/s"
    curve = found["peak_throughput_mbps"].extra["curve"]
    sizes = [point[0] for point in curve]
    assert len(curve) >= 30 and sizes[0] == 1 and sizes[-1] == 262144
    assert all(a < b for a, b in itertools.pairwise(sizes)), sizes
    assert all(isinstance(s, int) and mbps > 0 and rtt > 0 for s, mbps, rtt in curve)
    assert max(mbps for _, mbps, _ in curve) == peak
    assert found["peak_size_bytes"].value in sizes
    assert curve[0][2] == latency
    assert leftovers(session) == {"a": [], "b": []}


@pytest.mark.parametrize("test", list(LMBENCH))
def test_lmbench(session, test):
    [found] = session.bench("lmbench", test=test, **LMBENCH[test])
    assert found.name in {"lmbench.bw_tcp.throughput_mbps", f"lmbench.{test}.latency_us"}
    if test == "bw_tcp":
        assert found.value > 10, f"bw_tcp {found.value} Mbit/s"
        assert found.extra["tcp_connections"] >= 1
    else:
        assert 10 <= found.value <= 10_000, f"{test} {found.value} us"
    assert leftovers(session) == {"a": [], "b": []}


def test_lmbench_runs_again_on_the_same_ports(session):
    """The fixed ports are free again after a stop: the same test twice in a row works."""
    first = session.bench("lmbench", test="lat_connect", repetitions=3)[0].value
    second = session.bench("lmbench", test="lat_connect", repetitions=3)[0].value
    assert first > 0 and second > 0
    assert leftovers(session) == {"a": [], "b": []}


def link_and_loopback_bytes(session, node: str) -> tuple[int, int]:
    """Bytes the node's link0 interface and its loopback have sent so far."""
    name = session.iface(node, 0).name
    out = session.node(node).run(f"cat /sys/class/net/{name}/statistics/tx_bytes /sys/class/net/lo/statistics/tx_bytes")
    link, loopback = (int(v) for v in out.stdout.split())
    return link, loopback


def test_lmbench_with_peer_self_measures_over_loopback_and_leaves_the_card_alone(session):
    """peer: self (seed study 002's localhost reference): client and server on a, at 127.0.0.1."""
    link_before, lo_before = link_and_loopback_bytes(session, "a")
    b_link_before, _ = link_and_loopback_bytes(session, "b")
    [found] = session.bench("lmbench", test="bw_tcp", peer="self", **LMBENCH["bw_tcp"])
    link_after, lo_after = link_and_loopback_bytes(session, "a")
    b_link_after, _ = link_and_loopback_bytes(session, "b")

    assert found.name == "lmbench.bw_tcp.throughput_mbps" and found.value > 10, f"bw_tcp {found.value} Mbit/s"
    assert lo_after - lo_before > 10**6, f"lo sent {lo_after - lo_before} bytes"  # bw_tcp moves megabytes
    # the card carried none of it: what link0 sent meanwhile is a small part of what lo did
    assert link_after - link_before < (lo_after - lo_before) / 100, f"link0 sent {link_after - link_before} bytes"
    assert b_link_after - b_link_before < (lo_after - lo_before) / 100
    assert leftovers(session) == {"a": [], "b": []}
