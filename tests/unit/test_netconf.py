import subprocess

from niclab.model.scenario import parse
from niclab.plumbing import netconf
from niclab.plumbing.netconf import verify

TOPOLOGY = """\
name: t
nodes: [a, b, c]
links:
  - between: [a, b]
    nic: e1000
    netem: {a: {delay: 10ms, loss: 1%}, b: {delay: 5ms}}
    offloads: {tso: off, gro: on}
  - between: [b, c]
    nic: {b: virtio, c: rtl8139}
    count: 2
    mtu: 4000
  - between: [a, b]
    nic: e1000
    count: 3
    bond: balance-rr
  - between: [a, b, c]
    nic: e1000
"""


def plan():
    return netconf.plan(parse(TOPOLOGY, "t.yaml").cells[0].scenario)


def test_every_cable_bond_and_segment_is_its_own_slash_24():
    got = [(i.node, i.name, i.address, i.mtu, len(i.ports)) for i in plan().ifaces]
    assert got == [
        ("a", "link0", "198.18.0.1", 1500, 1),
        ("b", "link0", "198.18.0.2", 1500, 1),
        ("b", "link1p0", "198.18.1.1", 4000, 1),
        ("c", "link1p0", "198.18.1.2", 4000, 1),
        ("b", "link1p1", "198.18.2.1", 4000, 1),
        ("c", "link1p1", "198.18.2.2", 4000, 1),
        ("a", "bond2", "198.18.3.1", 1500, 3),
        ("b", "bond2", "198.18.3.2", 1500, 3),
        ("a", "link3", "198.18.4.1", 1500, 1),
        ("b", "link3", "198.18.4.2", 1500, 1),
        ("c", "link3", "198.18.4.3", 1500, 1),
    ]
    net = plan()
    assert net.find("c", 1, 1).ports[0].model == "rtl8139"
    assert net.find("a", 2).bond.mode == "balance-rr"
    assert [p.ifname for p in net.find("a", 2).ports] == ["link2p0", "link2p1", "link2p2"]
    assert len(net.segments()[(3, 0)]) == 3


def test_subnets_stay_inside_198_18_0_0_slash_15():
    assert str(netconf.subnet(0)) == "198.18.0.0/24"
    assert str(netconf.subnet(511)) == "198.19.255.0/24"


def run_node_script(tmp_path, script: str, interfaces: dict[str, str], fail: str = "") -> tuple[str, str, int]:
    """Run a node script under sh against a fake /sys/class/net (`interfaces`: name -> MAC, carrier up) with
    `ip`, `tc`, `ethtool` and `modprobe` that log their words and stdin; `ip` fails on a batch holding `fail`.
    Returns (the log, stderr, exit status)."""
    net = tmp_path / "sys" / "class" / "net"
    for name, mac in interfaces.items():
        (net / name).mkdir(parents=True)
        (net / name / "address").write_text(mac + "\n")
    for name in ("link0", "link1p0", "bond2", "link2p0", "link2p1", "link2p2", "link3"):  # after renaming
        (net / name).mkdir(parents=True, exist_ok=True)
        (net / name / "carrier").write_text("1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    for tool in ("ip", "tc", "ethtool", "modprobe"):
        batch = (
            f'[ "$1" = -batch ] && {{ in=$(cat); printf "%s\\n" "$in" >> {log}; '
            f'case "$in" in *"{fail or "never"}"*) echo "Command failed -:1" >&2; exit 1;; esac; }}; '
        )
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}; {batch if tool == "ip" else ""}exit 0\n')
        (bin_dir / tool).chmod(0o755)
    text = script.replace("/sys/class/net", str(net))
    done = subprocess.run(
        ["sh", "-c", text], capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30
    )
    return (log.read_text() if log.exists() else ""), done.stderr, done.returncode


def test_node_script_names_ports_by_mac_and_sets_everything_in_few_ip_runs(tmp_path):
    net = plan()
    ifaces = net.on("a")
    macs = {p.key: f"02:4e:4c:00:{p.link:02x}:{p.lane:02x}" for i in ifaces for p in i.ports}
    script = netconf.node_script(ifaces, macs)
    named = macs[net.find("a", 3).ports[0].key]
    found = {f"eth{n}": mac for n, mac in enumerate(m for m in macs.values() if m != named)}
    found["link3"] = named  # named by an earlier run: left as it is
    log, stderr, status = run_node_script(tmp_path, script, found)
    assert status == 0, stderr
    assert log.splitlines() == [
        "modprobe bonding max_bonds=0",
        "ip link del bond2",
        # one ip for the names and MTUs, before ethtool sets link0's offloads by its new name
        "ip -batch -",
        "link set dev eth0 down",
        "link set dev eth0 name link0",
        "link set dev link0 mtu 1500",
        "ethtool -K link0 tso off gro on",
        # then the other ports, the bond and the addresses, up to the first netem
        "ip -batch -",
        "link set dev eth1 down",
        "link set dev eth1 name link2p0",
        "link set dev link2p0 mtu 1500",
        "link set dev eth2 down",
        "link set dev eth2 name link2p1",
        "link set dev link2p1 mtu 1500",
        "link set dev eth3 down",
        "link set dev eth3 name link2p2",
        "link set dev link2p2 mtu 1500",
        "link set dev link3 mtu 1500",
        "link add bond2 type bond mode balance-rr miimon 100",
        "link set dev link2p0 down",
        "link set dev link2p0 master bond2",
        "link set dev link2p1 down",
        "link set dev link2p1 master bond2",
        "link set dev link2p2 down",
        "link set dev link2p2 master bond2",
        "link set dev bond2 mtu 1500",
        "addr flush dev link0 scope global",  # the IPv6 link-local address stays
        "addr add 198.18.0.1/24 dev link0",
        "addr add 2001:2::1/64 dev link0 nodad",  # dual-stack by default, from RFC 5180's range
        "link set dev link0 up",
        "tc qdisc del dev link0 root",
        "tc qdisc add dev link0 root netem delay 10ms loss 1%",
        "ip -batch -",
        "addr flush dev bond2 scope global",
        "addr add 198.18.3.1/24 dev bond2",
        "addr add 2001:2:0:3::1/64 dev bond2 nodad",
        "link set dev link2p0 up",
        "link set dev link2p1 up",
        "link set dev link2p2 up",
        "link set dev bond2 up",
        "addr flush dev link3 scope global",
        "addr add 198.18.4.1/24 dev link3",
        "addr add 2001:2:0:4::1/64 dev link3 nodad",
        "link set dev link3 up",
    ]
    # b's end of link 0 has its own netem: 5 ms, no loss.
    b_script = netconf.node_script(net.on("b"), {p.key: "02:00:00:00:00:00" for i in net.on("b") for p in i.ports})
    assert "tc qdisc add dev link0 root netem delay 5ms\n" in b_script


def test_a_failed_ip_batch_stops_the_node_script_and_shows_the_batch(tmp_path):
    net = plan()
    ifaces = net.on("a")
    macs = {p.key: f"02:4e:4c:00:{p.link:02x}:{p.lane:02x}" for i in ifaces for p in i.ports}
    found = {f"eth{n}": mac for n, mac in enumerate(macs.values())}
    log, stderr, status = run_node_script(tmp_path, netconf.node_script(ifaces, macs), found, fail="type bond")
    assert status == 1
    assert "Command failed -:1\nin the ip batch:\n" in stderr
    assert "link add bond2 type bond mode balance-rr miimon 100\n" in stderr
    assert "ethtool -K link0" in log and "tc qdisc" not in log  # nothing after the failed batch ran


def test_a_port_without_carrier_fails_the_node_script_naming_it(tmp_path):
    net = plan()
    ifaces = net.on("c")
    macs = {p.key: f"02:4e:4c:00:{p.link:02x}:{p.lane:02x}" for i in ifaces for p in i.ports}
    script = netconf.node_script(ifaces, macs).replace("seq 200", "seq 2")
    found = {f"eth{n}": mac for n, mac in enumerate(macs.values())}
    (tmp_path / "sys" / "class" / "net" / "link1p1").mkdir(parents=True)  # no carrier file: down
    _, stderr, status = run_node_script(tmp_path, script, found)
    assert status == 4
    assert stderr.strip() == "no carrier on: link1p1"


STATE = """\
[addresses]
addr.link0.198.18.0.1/24=
addr.link0.2001:2::1/64=dadfailed tentative
addr.bond2.198.18.3.1/24=
[iface bond2]
mtu=1500
carrier=1
qdisc=qdisc noqueue 0: root refcnt 2
bond_mode=balance-rr
bond_miimon=100
bond_port.link2p0=up
bond_port.link2p1=up
bond_port.link2p2=down
[port link2p0]
mtu=1500
carrier=1
driver=e1000
feature.tcp-segmentation-offload=off
[iface link0]
mtu=1400
carrier=1
qdisc=qdisc netem 8001: root refcnt 2 limit 1000 delay 10ms  loss 2%
[port link0]
mtu=1400
carrier=1
driver=8139too
feature.tcp-segmentation-offload=on [fixed]
feature.generic-receive-offload=on
"""


def test_read_back_reports_every_difference():
    net = plan()
    problems = verify.mismatches("a", [net.find("a", 0), net.find("a", 2)], verify.parse_state(STATE))
    assert problems == [
        "a/link0: address 2001:2::1/64 is dadfailed tentative",
        "a/link0: MTU is 1400, asked 1500",
        "a/link0: netem loss: asked 1%, installed 2%",
        "a/link0: driver 8139too is bound, the e1000 model needs e1000",
        "a/link0 (e1000): offload tso: asked off, is on (fixed by the driver)",
        "a/bond2: has no address 2001:2:0:3::1/64",
        "a/bond2: bond port link2p2 is down",
        "a/link2p1: no carrier",
        "a/link2p1: driver none is bound, the e1000 model needs e1000",
        "a/link2p2: no carrier",
        "a/link2p2: driver none is bound, the e1000 model needs e1000",
    ]


def test_read_back_on_a_shared_boot_finds_an_offload_an_earlier_cell_left_changed():
    net = plan()
    state = verify.parse_state(
        STATE.replace("feature.generic-receive-offload=on", "feature.generic-receive-offload=off")
    )
    started = {"link2p0": {"tx-nocache-copy": False}, "link0": {"generic-receive-offload": True}}
    state["port link2p0"]["feature.tx-nocache-copy"] = "on"
    problems = verify.mismatches("a", [net.find("a", 0), net.find("a", 2)], state, started=started)
    left = [p for p in problems if "earlier cell" in p]
    assert left == [  # link0's gro is named by this cell (asked on): its own mismatch, not a leftover
        "a/link2p0 (e1000): offload tx-nocache-copy is on, the driver started with off "
        "(left by an earlier cell on this boot)"
    ]
    assert "a/link0 (e1000): offload gro: asked on, is off (the driver refused the change)" in problems


def test_parallel_reports_every_failure_in_node_order():
    import time

    import pytest

    def fail(node, delay):
        def job():
            time.sleep(delay)
            raise netconf.NetconfError(f"{node}: broken")

        return job

    with pytest.raises(netconf.NetconfError) as caught:
        netconf.parallel({"a": fail("a", 0.05), "b": fail("b", 0), "c": lambda: 1})
    assert str(caught.value) == "a: broken\nb: broken"


def test_parallel_raises_a_foreign_exception_as_itself_naming_the_node():
    import pytest

    def boom():
        raise RuntimeError("a bug")

    # not dressed as a NetconfError: the runner must see a bug as a bug, with its traceback
    with pytest.raises(RuntimeError, match=r"^a bug") as caught:
        netconf.parallel({"a": lambda: 1, "b": boom})
    assert caught.value.__notes__ == ["(in the job of node b)"]
    assert netconf.parallel({"a": lambda: 1, "b": lambda: 2}) == {"a": 1, "b": 2}


def test_the_script_can_run_again_a_stale_bond_goes_before_ports_are_found_by_mac():
    # A bond's ports carry the bond's MAC; deleting it first gives them their own back (Vagrant provisions again).
    net = plan()
    ifaces = net.on("a")
    macs = {port.key: f"02:00:00:00:00:{i:02x}" for i, port in enumerate(p for i in ifaces for p in i.ports)}
    script = netconf.node_script(ifaces, macs)
    assert script.index("ip link del bond2") < script.index("dev=$(by_mac")
    assert script.index("ip link del bond2") < script.index("link add bond2 type bond")


def test_the_reset_undoes_bonds_netem_addresses_and_changed_offloads_back_to_the_drivers():
    net = plan()
    baseline = {
        "link0": {"tx-tcp-segmentation": True, "tx-tcp-mangleid-segmentation": False, "generic-receive-offload": False}
    }
    script = netconf.reset_script(net.on("a"), baseline)
    assert script.splitlines() == [
        "set -e",  # a step that fails fails the reset, and the cell
        "tc qdisc del dev link0 root >/dev/null 2>&1 || true",
        "ip addr flush dev link0 scope global",
        # as the driver had them, not as asked; every part, also those a short name changed without naming them
        "ethtool -K link0 tx-tcp-segmentation on tx-tcp-mangleid-segmentation off gro off >/dev/null 2>&1 || true",
        "ip link del bond2 >/dev/null 2>&1 || true",  # its ports get their own MACs back
        "tc qdisc del dev link3 root >/dev/null 2>&1 || true",
        "ip addr flush dev link3 scope global",
    ]


def test_the_offloads_a_driver_starts_with_are_read_per_port_found_by_mac():
    script = netconf.script.features_script({"link0": "02:00:00:00:00:01", "link2p1": "02:00:00:00:00:02"})
    assert script.splitlines()[2:] == [
        "echo '[port link0]'; ethtool -k \"$(by_mac 02:00:00:00:00:01)\"",
        "echo '[port link2p1]'; ethtool -k \"$(by_mac 02:00:00:00:00:02)\"",
    ]


def test_the_progress_line_lists_a_few_round_trips_and_summarizes_many():
    from niclab.plumbing.netconf import rtt_summary

    assert rtt_summary({"a->b link0": 1.234, "b->a link1": 0.5}) == "a->b link0 1.23 ms, b->a link1 0.50 ms"
    many = {"a->b link0": 1.0, "a->c link0": 3.0, "b->c link0": 10.0, "c->a link0": 2.0}
    assert rtt_summary(many) == "min 1.00 / median 2.50 / max 10.00 ms over 4 pairs, the worst b->c link0"


# -- the network check: which pairs, in which rounds --------------------------


def one_segment(n: int):
    """A scenario of n nodes (n0, n1, ...) on one switched segment."""
    names = ", ".join(f"n{i}" for i in range(n))
    text = f"name: s\nnodes: [{names}]\nlinks:\n  - between: [{names}]\n    nic: e1000\n"
    return parse(text, "s.yaml").cells[0].scenario


def segment(n: int):
    return netconf.plan(one_segment(n))


def test_a_segment_is_checked_around_a_ring_plus_a_few_chords_linear_in_its_nodes():
    from niclab.plumbing.netconf import pairs

    for n in (3, 4, 5, 8, 16, 32):
        net = segment(n)
        ring, chords = pairs.rounds(net, seed=7)
        nodes = {i.node for i in net.ifaces}
        assert {s.node for s, _ in ring} == nodes == {t.node for _, t in ring}  # every port sends and answers
        assert [(s.node, t.node) for s, t in ring][-1] == (f"n{n - 1}", "n0")  # ... around the ring, back to a
        assert len(ring) == n and len(chords) == min(n, pairs.CHORDS)
        every = [(s.node, t.node) for s, t in ring + chords]
        assert len(set(every)) == len(every) and all(s != t for s, t in every)
        for one_round in (ring, chords):  # a port sends at most once a round: its probes can run at once
            assert len({s.node for s, _ in one_round}) == len(one_round)
    # three ports: the ring both ways is every ordered pair
    ring, chords = pairs.rounds(segment(3), seed=7)
    three = ("n0", "n1", "n2")
    assert {(s.node, t.node) for s, t in ring + chords} == {(a, b) for a in three for b in three if a != b}


def test_the_chords_come_from_the_seed_and_the_default_seed_from_the_plan():
    from niclab.plumbing.netconf import pairs

    def chords(net, seed):
        return [(s.node, t.node) for s, t in pairs.rounds(net, seed)[1]]

    net = segment(8)
    # the same seed, the same pairs, in every process: a run can be reproduced
    assert chords(net, 1) == chords(segment(8), 1) == [("n2", "n6"), ("n3", "n7"), ("n6", "n1")]
    assert len({tuple(chords(net, seed)) for seed in range(20)}) > 1
    assert pairs.plan_seed(net) == pairs.plan_seed(segment(8)) == 61408423  # the same in every process
    assert pairs.plan_seed(segment(9)) != pairs.plan_seed(net)


def test_a_cable_is_pinged_one_way_and_every_segment_of_a_plan_in_the_same_two_rounds():
    from niclab.plumbing.netconf import pairs

    ring, chords = pairs.rounds(plan(), seed=3)
    assert [(s.node, t.node, s.name) for s, t in ring] == [
        ("a", "b", "link0"),  # a cable (and a bond): one ping, whose echo crosses it both ways
        ("b", "c", "link1p0"),
        ("b", "c", "link1p1"),
        ("a", "b", "bond2"),
        ("a", "b", "link3"),
        ("b", "c", "link3"),
        ("c", "a", "link3"),
    ]
    assert {(s.node, t.node) for s, t in chords} == {("b", "a"), ("c", "b"), ("a", "c")}
    assert pairs.rounds(segment(2), seed=3) == [[tuple(segment(2).ifaces)]]


PING_ANSWER = "target {0}\nrtt min/avg/max/mdev = {1}/2.000/3.000/0.100 ms\n"


def eight_node_rig(tmp_path, backend, answer):
    """The fake backend's rig of eight nodes on one segment; `answer(node, target address)` answers each probe."""
    import re

    def call(node, text):
        return answer(node, re.findall(r"198\.18\.\d+\.\d+", text)[0])

    backend.when(r"^ok=''; for i in \$\(seq ", call=call)
    return backend.realize(one_segment(8).topology(), tmp_path / "cell", lambda m: None)


def test_the_check_pings_each_round_at_once_and_keeps_every_round_trip(tmp_path):
    import threading

    from niclab.plumbing.netconf import pairs
    from tests.fakes import FakeBackend

    ring_round = threading.Barrier(8, timeout=5)  # the ring's eight probes must all be running at once
    probes = []

    def answer(node, target):
        probes.append((node, target))
        if len(probes) <= 8:
            ring_round.wait()
        return PING_ANSWER.format(target, f"1.{len(probes):03d}")

    backend = FakeBackend()
    with eight_node_rig(tmp_path, backend, answer) as rig:
        net = segment(8)
        rtts = netconf.reachability(rig, net)
    ring, chords = pairs.rounds(net, pairs.plan_seed(net))
    assert list(rtts) == [f"{s.node}->{t.node} link0" for s, t in ring + chords]  # 11 pairs, not 56
    assert all(1 < v < 2 for v in rtts.values())
    assert {node for node, _ in probes[8:]} == {s.node for s, _ in chords}


def test_a_pair_that_does_not_answer_fails_the_check_in_one_line_naming_both_ports(tmp_path):
    import pytest

    from tests.fakes import FakeBackend

    def answer(node, target):
        if (node, target) == ("n2", "198.18.0.4"):
            return {"returncode": 1, "stdout": f"unreachable {target}\n"}
        return PING_ANSWER.format(target, "1.0")

    backend = FakeBackend()
    with eight_node_rig(tmp_path, backend, answer) as rig, pytest.raises(netconf.NetconfError) as caught:
        netconf.reachability(rig, segment(8))
    assert str(caught.value) == (
        "link 0: n2/link0 (198.18.0.3) cannot reach n3/link0 (198.18.0.4) over e1000 within 20 s"
    )
