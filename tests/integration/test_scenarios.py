"""The shipped scenarios run as a user runs them, and the guests had what each one asks.

`niclab run` already refuses to measure a network that differs from the
scenario (netconf's read-back); these tests also read the provenance the run
recorded, so a realization that silently dropped a setting would fail here.
The long sweeps run one representative cell each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import run_dirs
from tests.records import read_records

from .processes import niclab, wait_no_qemu


def run_scenario(repo, tmp_path, name: str, cells: list[str], *extra: str) -> tuple[dict, list[dict]]:
    args = ["run", str(repo / "scenarios" / name), "--out", str(tmp_path), "-q", *extra]
    for cell in cells:
        args += ["--cell", cell]
    proc = niclab(*args)
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    run = run_dirs(tmp_path)[0]
    records = read_records(run / "results.jsonl")
    cell = next(r for r in records if r["type"] == "cell")
    assert wait_no_qemu(tmp_path, seconds=2) == []
    runs = {r["run"]: r for r in records if r["type"] == "run"}
    # each measurement with the run it came from (where, NICs, counters)
    return cell, [
        r | {"nics": runs[r["run"]]["nics"], "counters": runs[r["run"]]["counters"]}
        for r in records
        if r["type"] == "measurement"
    ]


def values(measurements, name, **where):
    return [m["value"] for m in measurements if m["name"] == name and all(m.get(k) == v for k, v in where.items())]


@pytest.mark.measures
def test_three_node_switch(image, repo, tmp_path):
    cell, found = run_scenario(repo, tmp_path, "three-node-switch.yaml", [], "--repeat", "1")
    assert len(cell["network"]["idle_rtt_ms"]) == 6  # every node reached every other before measuring
    assert values(found, "ping.loss_pct") == [0]
    assert all(v > 10 for v in values(found, "netperf.TCP_STREAM.throughput_mbps"))
    assert {(m["client"], m["server"]) for m in found if m["tool"] == "netperf"} == {("a", "b"), ("c", "b")}


def shortened(repo, tmp_path, name: str, seconds: float, iterations: list[int], drop: tuple[str, ...] = ()) -> Path:
    """A shipped scenario with shorter runs: every netperf `seconds`, confidence `iterations`, the tools in `drop`
    left out; written beside the test as `name`'s file name."""
    scenario = yaml.safe_load((repo / "scenarios" / name).read_text())
    kept = []
    for entry in scenario["benchmarks"]:
        ((tool, options),) = entry.items()
        if tool in drop:
            continue
        if tool == "netperf":
            options["seconds"] = seconds
            if "iterations" in options:
                options["iterations"] = iterations
        kept.append({tool: options})
    scenario["benchmarks"] = kept
    path = tmp_path / Path(name).name
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


@pytest.mark.measures
def test_the_bonding_studys_netperf_with_confidence_on_three_bonded_rtl8139(image, repo, tmp_path):
    """Study 000's own netperf method (-i MAX,MIN -I 99,5: confidence iterations) on one RTL8139 and on three
    bonded, shortened: every run records what netperf's iteration reached, and the bond carries every port."""
    path = shortened(repo, tmp_path, "studies/netperf-cards-and-bonds.yaml", 2, [3, 4], drop=("netpipe",))
    out = tmp_path / "runs"
    proc = niclab("run", str(path), "--cell", "nic=rtl8139,ports=3", "--out", str(out), "-q")
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    records = read_records(next(out.iterdir()) / "results.jsonl")
    assert wait_no_qemu(tmp_path, seconds=2) == []
    assert [r for r in records if r["type"] == "error"] == []
    cell = next(r for r in records if r["type"] == "cell")
    for node in ("a", "b"):
        bond = cell["network"]["observed"][node]["iface bond1"]
        assert bond["bond_mode"] == "balance-rr"
        assert {k: v for k, v in bond.items() if k.startswith("bond_port.")} == {
            "bond_port.link1p0": "up",
            "bond_port.link1p1": "up",
            "bond_port.link1p2": "up",
        }
        assert cell["nodes"][node]["interfaces"]["link1p0"]["driver"] == "8139cp"

    runs = {r["run"]: r for r in records if r["type"] == "run"}
    assert [(r["label"], r["link"]) for r in runs.values()] == [
        ("netperf TCP_STREAM", 0),
        ("netperf TCP_STREAM (link 1)", 1),
        ("netperf UDP_STREAM", 0),
        ("netperf UDP_STREAM (link 1)", 1),
    ]
    for run in runs.values():  # the options as the scenario gave them, in their JSON form
        assert run["options"]["confidence"] == {"level": 99, "width": 5.0}
        assert run["options"]["iterations"] == [3, 4]
    figures = [
        r for r in records if r["type"] == "measurement" and r["metric"] in ("throughput_mbps", "recv_throughput_mbps")
    ]
    assert len(figures) == 4
    assert all(m["value"] > 0 for m in figures if m["metric"] == "throughput_mbps")  # TCP; UDP may lose all
    for m in figures:  # netperf's confidence iteration, per run: what it was asked and what it reached
        extra = m["extra"]
        assert (extra["confidence_level"], extra["confidence_width_pct"]) == (99, 5)
        assert 3 <= extra["confidence_iterations"] <= 4
        assert extra["confidence_met"] == (m.get("warning") is None)
        # a width reached, unless nothing arrived (netperf's interval around a mean of 0 is nan: a missed target)
        assert extra["confidence_achieved_width_pct"].get("throughput", 0) > 0 or m["value"] == 0
    for run in ("2.1", "3.1"):  # UDP over confidence iterations: the loss from the mean rates netperf printed
        sent, received, loss = (
            next(m["value"] for m in records if m["type"] == "measurement" and m["run"] == run and m["metric"] == name)
            for name in ("send_throughput_mbps", "recv_throughput_mbps", "loss_pct")
        )
        assert loss == pytest.approx(100 * max(0, sent - received) / sent)
    bonded = runs["1.1"]
    assert bonded["nics"]["a"]["ports"] == 3
    # the interrupt counts of every bonded port are recorded (the spread matters in a bond)
    assert set(bonded["counters"]["a"]) == {"link1p0", "link1p1", "link1p2"}
    assert all(port["tx_packets"] > 0 for port in bonded["counters"]["a"].values())


@pytest.mark.measures
def test_wan_delay_jitter_loss(image, repo, tmp_path):
    cell, found = run_scenario(repo, tmp_path, "wan.yaml", ["delay=25ms,loss=1%"])
    for node in ("a", "b"):
        qdisc = cell["network"]["observed"][node]["iface link0"]["qdisc"]
        assert "netem" in qdisc and "delay 25ms  1ms" in qdisc and "loss 1%" in qdisc
    rtt = values(found, "ping.rtt_avg_ms")[0]
    assert 45 < rtt < 65  # 2 x 25 ms plus a little


@pytest.mark.measures
def test_mtu_sweep_jumbo_frames_on_one_boot_with_interleaved_repeats(image, repo, tmp_path):
    """Two MTUs of one card: one boot, repeats alternating between the cells, each MTU read back."""
    proc = niclab(
        "run", str(repo / "scenarios" / "mtu-sweep.yaml"), "--cell", "nic=e1000,mtu=9000", "--cell",
        "nic=e1000,mtu=1500", "--repeat", "2", "--out", str(tmp_path), "-q",
    )  # fmt: skip
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    records = read_records(next(tmp_path.iterdir()) / "results.jsonl")
    cells = {r["cell"]: r for r in records if r["type"] == "cell"}
    jumbo, plain = cells["nic=e1000,mtu=9000"], cells["nic=e1000,mtu=1500"]
    assert (jumbo["boot"]["number"], jumbo["boot"]["reused"]) == (1, False)
    assert (plain["boot"]["number"], plain["boot"]["reused"]) == (1, True)
    for node in ("a", "b"):
        assert jumbo["nodes"][node]["interfaces"]["link0"]["mtu"] == 9000
        assert plain["nodes"][node]["interfaces"]["link0"]["mtu"] == 1500
    runs = [(r["cell"].split("=")[-1], r["repeat"], r["nics"]["a"]["mtu"]) for r in records if r["type"] == "run"]
    assert runs == [("9000", 1, 9000), ("1500", 1, 1500), ("1500", 2, 1500), ("9000", 2, 9000)]  # each round turns
    ends = {r["cell"]: r for r in records if r["type"] == "cell_end"}
    assert ends["nic=e1000,mtu=9000"]["nodes"]["a"]["interfaces"]["link0"]["mtu"] == 9000  # read at its own end
    assert all(m["value"] > 10 for m in records if m["type"] == "measurement")
    assert wait_no_qemu(tmp_path, seconds=2) == []


@pytest.mark.measures
def test_nic_shootout_card_with_udp(image, repo, tmp_path):
    # every benchmark of the shoot-out once: what is checked here does not need the scenario's three repeats
    cell, found = run_scenario(repo, tmp_path, "nic-shootout.yaml", ["nic=tulip"], "--repeat", "1")
    assert cell["nodes"]["a"]["interfaces"]["link0"]["driver"] == "tulip"
    assert cell["nodes"]["a"]["interfaces"]["link0"]["pci_id"] == "1011:0019"
    sent = values(found, "netperf.UDP_STREAM.send_throughput_mbps")[0]
    received = values(found, "netperf.UDP_STREAM.recv_throughput_mbps")[0]
    assert 0 < received <= sent * 1.01
    assert values(found, "netperf.TCP_RR.transaction_rate")[0] > 100


@pytest.mark.measures
def test_offloads_are_set_in_the_guest(image, repo, tmp_path):
    cell, found = run_scenario(repo, tmp_path, "offloads.yaml", ["segmentation=off,gro=off"], "--repeat", "1")
    for node in ("a", "b"):
        features = cell["network"]["observed"][node]["port link0"]["offloads"]
        assert features["tcp-segmentation-offload"] == "off"
        assert features["generic-segmentation-offload"] == "off"
        assert features["generic-receive-offload"] == "off"
    assert values(found, "netperf.TCP_STREAM.throughput_mbps")[0] > 10


def test_an_offload_the_driver_cannot_change_stops_the_cell(image, tmp_path):
    """virtio-net on a socket backend has TSO fixed off: asking for it must fail, saying so."""
    from niclab.model.scenario import parse
    from niclab.plumbing.backends.qemu import QemuBackend
    from niclab.plumbing.netconf import NetconfError
    from niclab.run.session import Session

    cell = parse(
        "name: fixed\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: virtio\n    offloads: {tso: on}\n",
        "fixed.yaml",
    ).cells[0]
    with pytest.raises(NetconfError) as caught:
        with Session(cell, QemuBackend(image=image), tmp_path):
            pass
    assert "a/link0 (virtio): offload tso: asked on, is off (fixed by the driver)" in str(caught.value)
    assert wait_no_qemu(tmp_path, seconds=2) == []


@pytest.mark.measures
def test_packet_rate_sends_with_pktgen_and_counts_at_the_receiver_over_both_families(image, repo, tmp_path):
    cells = [
        "nic=e1000,frame_size=64,family=4",
        "nic=e1000,frame_size=128,family=6",
        "nic=virtio,frame_size=1518,family=6",
    ]
    proc = niclab("run", str(repo / "scenarios" / "packet-rate.yaml"), "--out", str(tmp_path), "-q", "--repeat", "1",
                  *[w for c in cells for w in ("--cell", c)])  # fmt: skip
    _out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    records = read_records(run_dirs(tmp_path)[0] / "results.jsonl")
    found = {
        (r["cell"], r["name"]): r for r in records if r["type"] == "measurement" and r["name"].startswith("pktgen.")
    }
    for cell in cells:
        sent, received = found[(cell, "pktgen.tx_pps")], found[(cell, "pktgen.rx_pps")]
        assert sent["value"] > 100 and received["value"] > 100, (sent, received)
        counted = received["extra"]
        assert counted["received"] <= counted["sent"] * 1.01  # counted at the receiver
        loss = 100 * (counted["sent"] - counted["received"]) / counted["sent"]
        assert found[(cell, "pktgen.loss_pct")]["value"] == pytest.approx(max(0.0, loss))
        # the frames arrived at the size asked: the server's bytes per frame, with its FCS or without
        size = counted["frame_size"]
        mean = counted["rx_bytes"] / counted["received"]
        assert abs(mean - size) <= 2 or abs(mean - (size - 4)) <= 2, counted
    runs = {r["cell"]: r for r in records if r["type"] == "run"}
    assert runs["nic=e1000,frame_size=128,family=6"]["options"]["family"] == 6
    assert runs["nic=virtio,frame_size=1518,family=6"]["options"]["frame_size"] == 1518
    assert wait_no_qemu(tmp_path, seconds=2) == []
