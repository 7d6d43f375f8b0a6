"""Cells that differ only in what netconf sets share one boot: the next cell finds a booted guest's state.

One boot of two e1000 cables, three networks in turn: bonded jumbo frames
with netem, GRO off and TSO on, then two plain cables, then the first again. Each
network is read back (netconf refuses a network that is not what was asked,
and the test reads the state it recorded), and traffic must pass.
"""

from __future__ import annotations

import pytest

from niclab.model.scenario import parse
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.run.rigs import BootKeeper
from niclab.run.session import Session

from .processes import wait_no_qemu

TOPOLOGY = "nodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n    count: 2\n"
TUNED = TOPOLOGY + "    bond: balance-rr\n    mtu: 9000\n    netem: {delay: 5ms}\n    offloads: {gro: off, tso: on}\n"


def cell(name: str, text: str):
    return parse(f"name: {name}\n{text}", f"{name}.yaml").cells[0]


def mangleid(session: Session, port: str) -> str:
    text = session.node("a").run(f"ethtool -k {port}", timeout=30).stdout
    return next(line.split()[1] for line in text.splitlines() if "tx-tcp-mangleid-segmentation:" in line)


@pytest.mark.measures
def test_one_boot_serves_cells_with_other_bonds_mtus_netem_and_offloads(image, tmp_path):
    lines: list[str] = []
    with BootKeeper(QemuBackend(image=image), lines.append) as rigs:
        tuned = Session(cell("tuned", TUNED), rigs.backend, tmp_path)
        tuned.prepare(rigs)
        observed = tuned.facts.network.model_dump()["observed"]["a"]
        assert observed["iface bond0"]["mtu"] == "9000" and "netem" in observed["iface bond0"]["qdisc"]
        assert observed["port link0p0"]["offloads"]["generic-receive-offload"] == "off"
        # tso on turns on all of TCP segmentation, also the part e1000 starts with off
        assert mangleid(tuned, "link0p0") == "on"
        # what the driver started with, read before the first cell changed it
        assert tuned.booted.baseline["a"]["link0p0"]["generic-receive-offload"] is True
        assert tuned.booted.baseline["a"]["link0p0"]["tx-tcp-mangleid-segmentation"] is False

        plain = Session(cell("plain", TOPOLOGY), rigs.backend, tmp_path)
        plain.prepare(rigs)
        assert plain.booted is tuned.booted and plain.facts.boot.reused is True
        observed = plain.facts.network.model_dump()["observed"]["a"]
        for port in ("link0p0", "link0p1"):
            state = observed[f"iface {port}"]
            assert state["mtu"] == "1500" and "netem" not in state["qdisc"], state
            assert "bond_mode" not in state
            assert observed[f"port {port}"]["offloads"]["generic-receive-offload"] == "on"  # given back
            assert mangleid(plain, port) == "off"  # every part of tso too, though no cell named it
        assert set(plain.facts.network.idle_rtt_ms) == {"a->b link0p0", "a->b link0p1"}
        rtt = plain.bench("ping", count=3)
        assert next(m.value for m in rtt if m.metric == "rtt_avg_ms") < 5  # no 5 ms netem left behind

        tuned.prepare(rigs)  # back to the first network (a cell's next round): configured and checked again
        assert rigs.current is tuned.booted
        rtt = tuned.bench("ping", count=3)
        assert next(m.value for m in rtt if m.metric == "rtt_avg_ms") >= 5
    assert sum(line.startswith("guests answering") for line in lines) == 1  # booted (or restored) once
    assert wait_no_qemu(tmp_path, seconds=5) == []
