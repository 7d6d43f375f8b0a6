"""IPv6 on every link: dual-stack addresses from 2001:2::/48, and `family: 6` on the benchmarks that speak it."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.base.problems import ScenarioError
from niclab.model.bench import nfs
from niclab.model.bench.netperf import server_argv
from niclab.model.scenario import load_scenario
from niclab.plumbing import netconf
from niclab.run.session import Session
from tests.fakes import FakeBackend, Replay

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
        ("kselftest: {family: 6}", "given both addresses of their link"),
        ("ping: {family: 5}", "family"),
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
