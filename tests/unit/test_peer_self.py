"""`peer: self`: a benchmark's client and server on one node over loopback, the reference beside the link's figure.

The scenario takes it (and refuses it with `to` and on the NFS share), the session puts both ends on
one node at 127.0.0.1, the runner records it apart from the link's figure, expectations judge it only
when asked, and the tables show it in its own row right below the link's.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from niclab.base.problems import ScenarioError
from niclab.model.bench import lmbench
from niclab.model.bench.base import LOOPBACK, BenchContext, Endpoints
from niclab.model.bench.lmbench import LmbenchOptions
from niclab.model.expect import ExpectationError, evaluate, parse
from niclab.model.scenario import load_scenario
from niclab.run.reader import read_results
from niclab.run.records import RunInfoRecord, SummaryRecord
from niclab.run.session import Session
from niclab.ui.export import rows
from niclab.ui.formats import beside_their_link
from niclab.ui.report import plots
from niclab.ui.report.data import CellData, RunData, load_run
from niclab.ui.report.tables import summary_table
from niclab.ui.table import cell_table
from tests import records
from tests.fakes import FakeBackend, Replay, captured
from tests.helpers import LO_COUNTERS, LO_COUNTERS_READ, NETPERF_RR, FakeNode, harness

# The loopback run first: its row still comes below the link's.
SCENARIO = """\
name: fake-loopback
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - netperf: {test: TCP_RR, seconds: 5, peer: self}
  - netperf: {test: TCP_RR, seconds: 5}
expect:
  - netperf.TCP_RR.transaction_rate > 0
  - netperf.TCP_RR.transaction_rate[peer=self] > 1000000000
"""


def scenario(benchmarks: str, tmp_path: Path):
    path = tmp_path / "scenario.yaml"
    path.write_text(
        "name: s\nnodes: [a, b, c]\nlinks:\n  - {between: [a, b], nic: e1000}\n  - {between: [b, c], nic: e1000}\n"
        + benchmarks
    )
    return load_scenario(path).cells[0].scenario


# -- the scenario ----------------------------------------------------------------------------------


def test_peer_self_parses_and_labels_the_benchmark_loopback(tmp_path):
    found = scenario(
        "benchmarks:\n  - lmbench: {test: lat_tcp, peer: self}\n"
        "  - lmbench: {test: lat_tcp, peer: self, from: c, link: 1}\n  - lmbench: {test: lat_tcp}\n",
        tmp_path,
    )
    assert [spec.options.peer for spec in found.benchmarks] == ["self", "self", None]
    assert [spec.describe() for spec in found.benchmarks] == [
        "lmbench lat_tcp (loopback)",
        "lmbench lat_tcp (link 1, loopback on c)",
        "lmbench lat_tcp",
    ]


@pytest.mark.parametrize(
    "benchmark, message",
    [
        ("lmbench: {test: lat_tcp, peer: self, to: b}", "peer: self runs its server on its client's node"),
        ("nfs: {peer: self}", "benchmarks on the NFS share take no peer: self"),
        ("bonnie: {peer: self}", "benchmarks on the NFS share take no peer: self"),
        ("ping: {peer: b}", "ping.peer: 'b' is not one of 'self'"),
    ],
)
def test_peer_self_is_refused_with_to_on_the_nfs_share_and_any_other_peer(tmp_path, benchmark, message):
    with pytest.raises(ScenarioError, match=re.escape(message)):
        scenario(f"benchmarks:\n  - {benchmark}\n", tmp_path)


def test_an_expectation_on_the_link_is_refused_when_only_the_loopback_measures_it(tmp_path):
    with pytest.raises(ScenarioError, match=r"measured here only over loopback.*\[peer=self\]"):
        scenario("benchmarks:\n  - ping: {peer: self}\nexpect:\n  - ping.rtt_avg_ms < 1\n", tmp_path)
    with pytest.raises(ScenarioError, match=r"no benchmark of this scenario measures ping.rtt_avg_ms over loopback"):
        scenario("benchmarks:\n  - ping: {}\nexpect:\n  - ping.rtt_avg_ms[peer=self] < 1\n", tmp_path)


# -- expectations ----------------------------------------------------------------------------------


def summary(mean: float, peer: str | None = None) -> SimpleNamespace:
    client, server = ("a", "a") if peer else ("a", "b")
    return SimpleNamespace(
        name="ping.rtt_avg_ms", mean=mean, n=1, link=0, client=client, server=server, peer=peer, family=4
    )


def test_an_expectation_judges_the_link_unless_it_asks_for_peer_self():
    link, loopback = summary(0.8), summary(0.02, "self")
    [verdict] = evaluate(parse("ping.rtt_avg_ms < 0.5"), [loopback, link])
    assert (verdict.passed, verdict.measured, verdict.where) == (False, 0.8, "a->b on link 0")
    [verdict] = evaluate(parse("ping.rtt_avg_ms[peer=self] < 0.5"), [loopback, link])
    assert (verdict.passed, verdict.measured, verdict.where) == (True, 0.02, "a over loopback (beside link 0)")
    assert evaluate(parse("ping.rtt_avg_ms[from=a] < 0.5"), [loopback])[0].measured is None
    with pytest.raises(ExpectationError, match="selector 'peer=b' is not understood") as caught:
        parse("ping.rtt_avg_ms[peer=b] < 1")
    assert caught.value.hint == "peer=self is the only peer"


# -- a benchmark on one node -----------------------------------------------------------------------


def test_lmbench_over_loopback_runs_server_client_and_shutdown_on_one_node_at_127_0_0_1(tmp_path, data_dir):
    node = FakeNode("a", {"lat_tcp -N": captured(data_dir, "lmbench", "lat_tcp")})

    def save_raw(name: str, text: str) -> Path:
        (path := tmp_path / f"{name}.txt").write_text(text)
        return path

    ends = Endpoints(node, node, LOOPBACK, LOOPBACK, 0, peer="self")
    [found] = lmbench.PLUGIN.run(BenchContext(ends, save_raw, lambda m: None), LmbenchOptions(test="lat_tcp"))
    assert found.metric == "latency_us"
    assert node.spawned[0].command == f"{lmbench.BIN}/lat_tcp -s" and node.spawned[0].stopped
    assert any(c.endswith(f"-N 11 {LOOPBACK}; rc=$?; {lmbench.SNMP}; exit $rc") for c in node.commands)
    assert f"{lmbench.BIN}/lat_tcp -S {LOOPBACK}" in node.commands
    assert node.commands.count(lmbench.SWEEP) == 1  # one node: swept once


# -- the session and the runner --------------------------------------------------------------------


@pytest.fixture
def backend(request):
    fake = FakeBackend(Replay.load())
    replay = fake.replay
    rr = replay.result(NETPERF_RR, node="a")
    netserver = replay.find(r"^netserver ", node="b", op="spawn")["events"]
    fake.when(r"^netserver -D -p 12865 -L 127\.0\.0\.1,inet$", node="a", op="spawn", result=netserver)
    fake.when(r"^netperf -H 127\.0\.0\.1 -p 12865 -t TCP_RR ", node="a", result=rr)
    fake.when(r"^end=.*awk -v p=:3241 ", node="a", result=replay.result(r"awk -v p=:3241 ", node="b"))
    fake.when(r"^ended=''.*:12865\$", node="a", result=replay.result(r"^ended=''.*:12865\$", node="b"))
    fake.when(LO_COUNTERS_READ, node="a", results=[LO_COUNTERS.format(n=10), LO_COUNTERS.format(n=5010)])
    yield fake
    assert fake.misses == []


def test_session_endpoints_for_peer_self_are_one_node_at_127_0_0_1(tmp_path, backend):
    cell = load_scenario(Path(__file__).parents[2] / "scenarios" / "two-node.yaml").cells[0]
    with Session(cell, backend, tmp_path / "cell") as session:
        ends = session.endpoints(session.spec("lmbench", test="lat_tcp", peer="self", **{"from": "b"}))
        across = session.endpoints(session.spec("lmbench", test="lat_tcp"))
    assert ends.client is ends.server and ends.client.name == "b"
    assert (ends.client_address, ends.server_address, ends.link, ends.peer) == (LOOPBACK, LOOPBACK, 0, "self")
    assert (across.client.name, across.server.name, across.server_address) == ("a", "b", "198.18.0.2")
    assert across.peer is None


def test_a_loopback_run_goes_to_one_node_and_is_recorded_apart_beside_the_links(tmp_path, backend):
    run = harness(tmp_path, backend, SCENARIO)
    [outcome] = run.run().cells
    calls = backend.realizations[0].calls
    loopback = [c for c in calls if "127.0.0.1" in c[2]]
    assert {node for node, _, _ in loopback} == {"a"}
    assert [op for _, op, _ in loopback] == ["spawn", "run"]  # netserver, then netperf, both on a
    assert len([c for c in calls if c[2].startswith("netperf -H 198.18.0.2")]) == 1  # the link's run

    [first, second] = run.of("run")
    assert (first["client"], first["server"], first["peer"], first["label"]) == (
        "a",
        "a",
        "self",
        "netperf TCP_RR (loopback)",
    )
    assert first["nics"] == {"a": {"ifname": "lo"}}
    assert first["counters"]["a"]["lo"]["rx_packets"] == 5000
    assert "peer" not in second and set(second["nics"]) == {"a", "b"}
    assert {m["peer"] for m in run.of("measurement", run="0.1")} == {"self"}
    assert all("peer" not in m for m in run.of("measurement", run="1.1"))

    summaries = [s for s in run.of("summary") if s["name"] == "netperf.TCP_RR.transaction_rate"]
    assert [s.get("peer") for s in summaries] == ["self", None]
    assert [(v.passed, v.where) for v in outcome.verdicts] == [
        (True, "a->b on link 0"),
        (False, "a over loopback (beside link 0)"),
    ]
    list(read_results(run.run_dir.results))  # every record reads back through the models

    printed = re.findall(r"^(netperf TCP_RR(?: \(loopback\))?) +(\S+)", cell_table("x", outcome), re.MULTILINE)
    assert printed == [
        ("netperf TCP_RR", "transaction_rate"),
        ("netperf TCP_RR (loopback)", "transaction_rate"),
        ("netperf TCP_RR", "latency_mean_us"),
        ("netperf TCP_RR (loopback)", "latency_mean_us"),
    ]

    table = summary_table(load_run(run.run_dir.path))
    labels = [label for label, _, _ in table.rows]
    assert labels[labels.index("rr") + 1] == "rr (loopback)"
    link_rate, loop_rate = (table.rows[labels.index(label)][2][0].mean for label in ("rr", "rr (loopback)"))
    assert link_rate == loop_rate  # the fake answers both with one capture; each row holds its own summary
    assert "| rr (loopback) |" in table.markdown()
    exported = [(r["name"], r["peer"]) for r in rows(run.run_dir.path, "summaries")]
    assert exported[:2] == [("netperf.TCP_RR.transaction_rate", "self"), ("netperf.TCP_RR.latency_mean_us", "self")]
    assert ("netperf.TCP_RR.transaction_rate", None) in exported


def test_beside_their_link_puts_each_reference_right_after_its_links_figure():
    def record(name: str, peer: str | None = None, link: int = 0, client: str = "a") -> SummaryRecord:
        return SummaryRecord.model_construct(name=name, link=link, peer=peer, client=client)

    loop_a, loop_b = record("x", "self"), record("x", "self", client="b")
    orphan, x, y, x1 = record("z", "self"), record("x"), record("y"), record("x", link=1)
    placed = beside_their_link([loop_a, orphan, x, y, loop_b, x1])
    assert placed == [orphan, x, loop_a, loop_b, y, x1]


def test_the_shared_bars_show_the_loopback_reference_beside_the_links_figure():
    def cell(name: str, *summaries: SummaryRecord) -> CellData:
        return CellData(name, {"nic": name.partition("=")[2]}, summaries=list(summaries))

    lat_tcp = "lmbench.lat_tcp.latency_us"
    run = RunData(
        Path("run"),
        RunInfoRecord(scenario="loopback-reference"),
        [
            cell("nic=e1000", records.summary(lat_tcp, mean=585.0), records.summary(lat_tcp, mean=206.0, peer="self")),
            cell("nic=rtl8139", records.summary(lat_tcp, mean=900.0)),
        ],
    )
    latency = next(f for f in plots.sections()[plots.BARS_SECTION] if f.kind == "latency")
    series = plots.with_loopback(run, latency)
    labels = list(series)
    assert labels[labels.index("lmbench lat_tcp") + 1] == "lmbench lat_tcp (loopback)"
    assert series["lmbench lat_tcp (loopback)"] == (lat_tcp, "self")
    assert "lmbench lat_udp (loopback)" not in series  # only what the run measured over loopback
    [drawn] = plots.draw(run, latency)
    assert drawn.title == latency.title

    without = RunData(Path("run"), RunInfoRecord(scenario="s"), [cell("nic=e1000", records.summary(lat_tcp))])
    assert not any(label.endswith("(loopback)") for label in plots.with_loopback(without, latency))
