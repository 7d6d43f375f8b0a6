"""IPv6 on every link: dual-stack addresses from 2001:2::/48, and `family: 6` on the benchmarks that speak it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import pytest

from niclab.base.problems import ScenarioError
from niclab.model.bench import nfs
from niclab.model.bench.netperf import server_argv
from niclab.model.expect import ExpectationError, evaluate, parse
from niclab.model.scenario import load_scenario
from niclab.plumbing import netconf
from niclab.plumbing.netconf import verify
from niclab.run.reader import read_results
from niclab.run.session import Session
from niclab.ui.report.data import load_run
from niclab.ui.report.tables import summary_table
from niclab.ui.table import cell_table
from tests.fakes import FakeBackend, Replay
from tests.helpers import NETPERF_RR, FakeNode, answer, harness

TWO_LINKS = """\
name: s
nodes: [a, b, c]
links:
  - {between: [a, b], nic: e1000}
  - {between: [b, c], nic: e1000, ip: 4}
  - {between: [a, b, c], nic: virtio, mtu: 1000}
benchmarks:
"""


def scenario(tmp_path: Path, benchmarks: str = "  - ping: {}\n"):
    path = tmp_path / "s.yaml"
    path.write_text(TWO_LINKS + benchmarks)
    return load_scenario(path)


def test_each_segment_gets_the_64_of_its_number_and_each_end_its_host_number(tmp_path):
    net = netconf.plan(scenario(tmp_path).cells[0].scenario)
    assert [(i.node, i.address, i.address6) for i in net.ifaces] == [
        ("a", "198.18.0.1", "2001:2::1"),
        ("b", "198.18.0.2", "2001:2::2"),
        ("b", "198.18.1.1", None),  # ip: 4
        ("c", "198.18.1.2", None),
        ("a", "198.18.2.1", None),  # an MTU below IPv6's 1280
        ("b", "198.18.2.2", None),
        ("c", "198.18.2.3", None),
    ]


@pytest.mark.parametrize(
    ("benchmark", "said"),
    [
        ("netperf: {test: TCP_RR, family: 6, link: 1}", "family 6 on link 1, which has no IPv6 (ip: 4)"),
        ("ping: {family: 6, link: 2}", "its MTU 1000 being below 1280"),
        ("netpipe: {family: 6}", "NetPIPE's NPtcp resolves its peer as IPv4 only"),
        ("lmbench: {test: lat_tcp, family: 6}", "lmbench's programs resolve their peer as IPv4 only"),
        ("ping: {family: 5}", "ping.family: 5 is not one of 4 or 6"),
    ],
)
def test_a_family_the_link_or_the_tool_cannot_take_is_refused_naming_why(tmp_path, benchmark, said):
    with pytest.raises(ScenarioError) as caught:
        scenario(tmp_path, f"  - {benchmark}\n")
    [line] = caught.value.lines()
    assert line.startswith(str(tmp_path / "s.yaml") + ":") and said in line


def test_the_session_gives_a_family_6_benchmark_the_ends_ipv6_addresses(tmp_path):
    cell = load_scenario(Path(__file__).parents[2] / "scenarios" / "two-node.yaml").cells[0]
    with Session(cell, FakeBackend(Replay.load()), tmp_path / "cell") as session:
        v6 = session.endpoints(session.spec("netperf", test="TCP_RR", family=6))
        v4 = session.endpoints(session.spec("netperf", test="TCP_RR"))
        loopback = session.endpoints(session.spec("netperf", test="TCP_RR", family=6, peer="self"))
        facts = session.facts
    assert (v6.client_address, v6.server_address, v6.family) == ("2001:2::1", "2001:2::2", 6)
    assert (v4.client_address, v4.server_address, v4.family) == ("198.18.0.1", "198.18.0.2", 4)
    assert (v4.client_address6, v4.server_address6) == ("2001:2::1", "2001:2::2")  # the selftests' LOCAL_V6
    assert loopback.server_address == "::1"
    assert facts is not None and facts.network.interfaces["a/link0"].address6 == "2001:2::1/64"


def test_the_nfs_share_is_exported_and_mounted_at_an_ipv6_address_in_brackets():
    options = nfs.NfsOptions(family=6)
    export = dict(nfs.server_setup(options, "2001:2::2", "2001:2::1"))["export the tmpfs"]
    mount = dict(nfs.client_mount(options, "2001:2::2"))["mount the export"]
    assert export.endswith(f" '[2001:2::1]:{nfs.EXPORT_DIR}'")
    assert "[2001:2::2]:/" in mount
    assert "198.18.0.2:/" in dict(nfs.client_mount(options, "198.18.0.2"))["mount the export"]


def test_netserver_listens_on_the_family_of_its_address():
    assert server_argv("198.18.0.2")[-1] == "198.18.0.2,inet"
    assert server_argv("2001:2::2")[-1] == "2001:2::2,inet6"


# -- the runner's records, expectations and tables -------------------------------------------------

BOTH = """\
name: fake-both-families
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - netperf: {test: TCP_RR, seconds: 5}
  - netperf: {test: TCP_RR, seconds: 5, family: 6}
expect:
  - netperf.TCP_RR.transaction_rate > 0
  - netperf.TCP_RR.transaction_rate[family=6] > 1000000000
"""


@pytest.fixture
def backend():
    fake = FakeBackend(Replay.load())
    replay = fake.replay
    netserver = replay.find(r"^netserver ", node="b", op="spawn")["events"]
    fake.when(r"^netserver -D -p 12865 -L 2001:2::2,inet6$", node="b", op="spawn", result=netserver)
    fake.when(r"^netperf -H 2001:2::2 -p 12865 -t TCP_RR ", node="a", result=replay.result(NETPERF_RR, node="a"))
    yield fake
    assert fake.misses == []


def test_a_run_over_ipv6_is_recorded_judged_and_shown_apart_from_the_same_benchmark_over_ipv4(tmp_path, backend):
    run = harness(tmp_path, backend, BOTH)
    [outcome] = run.run().cells
    v4, v6 = run.of("run")
    assert "family" not in v4 and v6["family"] == 6 and v6["label"] == "netperf TCP_RR (IPv6)"
    assert all("family" not in m for m in run.of("measurement", run="0.1"))
    assert {m["family"] for m in run.of("measurement", run="1.1")} == {6}
    summaries = [s for s in run.of("summary") if s["name"] == "netperf.TCP_RR.transaction_rate"]
    assert [s.get("family") for s in summaries] == [None, 6]
    # without family=, each family is judged alone; with it, only that family
    assert [(v.expectation.text.endswith("> 0"), v.passed, v.where) for v in outcome.verdicts] == [
        (True, True, "a->b on link 0"),
        (True, True, "a->b on link 0 over IPv6"),
        (False, False, "a->b on link 0 over IPv6"),
    ]
    list(read_results(run.run_dir.results))  # every record reads back through the models

    printed = re.findall(r"^(netperf TCP_RR(?: \(IPv6\))?) +transaction_rate", cell_table("x", outcome), re.M)
    assert printed == ["netperf TCP_RR", "netperf TCP_RR (IPv6)"]
    table = summary_table(load_run(run.run_dir.path))
    assert [label for label, _, _ in table.rows] == ["rr", "rr latency", "rr (IPv6)", "rr latency (IPv6)"]
    rates = {label: cells[0].mean for label, _, cells in table.rows}
    assert [rates["rr"], rates["rr (IPv6)"]] == [s["mean"] for s in summaries]


def test_family_selects_runs_over_ipv4_or_ipv6_and_nothing_else():
    assert parse("ping.rtt_avg_ms[family=6] < 1").selector == (("family", "6"),)
    with pytest.raises(ExpectationError, match="selector 'family=5' is not understood") as caught:
        parse("ping.rtt_avg_ms[family=5] < 1")
    assert caught.value.hint == "family=4 or family=6"
    v4 = SimpleNamespace(name="ping.rtt_avg_ms", mean=0.8, n=1, link=0, client="a", server="b", peer=None, family=4)
    [verdict] = evaluate(parse("ping.rtt_avg_ms[family=4] < 1"), [v4, SimpleNamespace(**{**vars(v4), "family": 6})])
    assert verdict.where == "a->b on link 0"


def test_the_network_check_gives_a_dual_stack_pair_the_time_of_both_waits(tmp_path):
    """The check waits up to PING_TIMEOUT_S for IPv4 to answer, then as long for IPv6: its command's own limit
    covers both, or a slow IPv6 answer would read as the guest not answering."""
    net = netconf.plan(scenario(tmp_path).cells[0].scenario)
    limits = {}
    for link in (0, 1):  # dual-stack, then ip: 4
        source, target = [i for i in net.ifaces if i.link == link][:2]
        node = FakeNode(source.node, {"ping": answer(f"target {target.address}\nrtt min/avg/max/mdev = 1/2/3/0 ms\n")})
        rig = SimpleNamespace(node=lambda name, node=node: node)
        with patch.object(node, "run", wraps=node.run) as run:
            netconf.probe(rig, source, target)
        limits[link] = run.call_args.kwargs["timeout"]
    assert limits == {0: 2 * netconf.PING_TIMEOUT_S + 5, 1: netconf.PING_TIMEOUT_S + 5}


def test_the_read_back_finds_each_address_and_its_dad_state_in_ip_s_own_output(data_dir):
    """The guest's `ip -o addr` lines (captured in a micro guest) through the read-back's own awk: each address
    by its interface, a tentative one flagged, a VLAN's name whole."""
    captured = [line for line in (data_dir / "ip" / "addr-global.txt").read_text().splitlines(True) if line[0] != "#"]
    printed = subprocess.run(
        ["awk", verify.ADDR_AWK], input="".join(captured), capture_output=True, text=True, check=True
    ).stdout
    state = verify.parse_state("[addresses]\n" + printed)
    assert state["addresses"] == {
        "addr.link0.198.18.0.1/24": "",
        "addr.link0.2001:2:0:9::1/64": "tentative ",
        "addr.link0.2001:2::1/64": "",
        "addr.link0.7.198.18.7.1/24": "",
    }
