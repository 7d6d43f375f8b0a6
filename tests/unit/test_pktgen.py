"""pktgen: its set-up, its Result line and the server's counters read as packet rates, loss and drops."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from niclab.base.problems import ScenarioError
from niclab.model.bench import pktgen
from niclab.model.bench.base import BenchContext, BenchmarkError
from niclab.model.bench.pktgen import PktgenOptions, counters_script, parse, parse_counters, setup_script
from niclab.model.scenario import load_scenario
from tests.helpers import FakeNode, answer, bench_context

RESULT = """\
Params: count 0  min_pkt_size: 60  max_pkt_size: 60
     frags: 0  delay: 0  clone_skb: 0  ifname: link0
Current:
     pkts-sofar: 100000  errors: 0
Result: OK: 5000000(c4990000+d10000) usec, 100000 (60byte,0frags)
  20000pps 9Mb/sec (9600000bps) errors: 2
"""
BEFORE = {"rx_packets": 1000, "rx_bytes": 100000, "rx_dropped": 5, "rx_missed_errors": 0}
AFTER = {"rx_packets": 91000, "rx_bytes": 100000 + 90000 * 60, "rx_dropped": 1005, "rx_missed_errors": 7}


def test_the_sent_rate_is_pktgens_and_the_received_rate_the_servers_counters():
    found = {m.metric: m for m in parse(RESULT, BEFORE, AFTER, 64)}
    assert found["tx_pps"].value == 20000
    assert found["tx_mbps"].value == pytest.approx(100000 * 64 * 8 / 5 / 1e6)  # whole frames, FCS included
    assert found["rx_pps"].value == pytest.approx(18000)  # 90000 frames in 5.0 s
    assert found["rx_mbps"].value == pytest.approx(90000 * 64 * 8 / 5 / 1e6)
    assert found["loss_pct"].value == pytest.approx(10.0)  # 100000 sent, 90000 counted
    assert found["rx_dropped"].value == 1007 and found["tx_errors"].value == 2
    assert found["rx_pps"].extra == {
        "sent": 100000,
        "received": 90000,
        "rx_bytes": 90000 * 60,
        "frame_size": 64,
        "seconds": 5.0,
        "xmit_mode": "start_xmit",
        "queued_at_stop": 0,
        "queued_at_end": 0,
    }


def test_the_received_bit_rate_does_not_depend_on_whether_the_driver_counts_the_fcs():
    with_fcs = {**AFTER, "rx_bytes": 100000 + 90000 * 64}
    assert {m.metric: m.value for m in parse(RESULT, BEFORE, with_fcs, 64)}["rx_mbps"] == pytest.approx(
        {m.metric: m.value for m in parse(RESULT, BEFORE, AFTER, 64)}["rx_mbps"]
    )


def test_a_result_line_of_another_size_than_asked_is_refused():
    with pytest.raises(BenchmarkError, match="frames of 82 bytes, not the 64 asked"):
        parse(RESULT.replace("(60byte", "(78byte"), BEFORE, AFTER, 64)


def counted(before: tuple[int, int], after: tuple[int, int]) -> tuple[dict[str, int], dict[str, int]]:
    return (dict(zip(("rx_packets", "rx_bytes"), before, strict=True)),
            dict(zip(("rx_packets", "rx_bytes"), after, strict=True)))  # fmt: skip


def test_a_guests_result_and_its_servers_counters_read_as_rates(data_dir):
    """e1000, IPv4, 64 bytes, as a micro guest printed it and the server counted (without the FCS)."""
    result = (data_dir / "pktgen" / "ipv4-64.txt").read_text()
    found = {m.metric: m.value for m in parse(result, *counted((9, 776), (116529, 6991994)), 64)}
    assert found["tx_pps"] == 43172
    assert found["rx_pps"] == pytest.approx(116520 / 3.039473)
    assert found["loss_pct"] == pytest.approx(100 * (131221 - 116520) / 131221)


def test_frames_the_kernel_enlarged_are_refused_by_what_the_server_counted(data_dir):
    """A 64-byte IPv6 frame has no room for pktgen's own header: the kernel sent 82-byte frames and its Result
    line still said 60 bytes (captured in a micro guest before IPv6 frames below 82 bytes were refused). The
    server's 78 bytes per frame give it away."""
    result = (data_dir / "pktgen" / "ipv6-64-enlarged.txt").read_text()
    assert "(60byte" in result
    with pytest.raises(BenchmarkError, match=r"the server counted 78.0 bytes per frame, not the 64 asked"):
        parse(result, *counted((112498, 6750290), (242865, 16918888)), 64)
    assert [m.metric for m in parse(RESULT, BEFORE, AFTER, 64) if m.headline] == ["tx_pps", "rx_pps", "loss_pct"]


@pytest.mark.parametrize(
    ("result", "after", "said"),
    [
        ("Result: Idle\n", AFTER, "pktgen printed no result"),
        (RESULT.replace("100000 (60byte", "0 (60byte"), AFTER, "pktgen sent 0 frames"),
        (RESULT, {**AFTER, "rx_packets": 10}, "counters went back"),
    ],
)
def test_a_result_that_is_not_one_is_the_benchmarks_error(result, after, said):
    with pytest.raises(BenchmarkError, match=said):
        parse(result, BEFORE, after, 64)


def test_the_counters_are_read_from_sysfs_and_a_missing_one_is_an_error():
    assert "cat /sys/class/net/link0/statistics/rx_packets" in counters_script("link0")
    assert parse_counters("rx_packets=12\nrx_bytes=3400\nrx_dropped=0\n") == {
        "rx_packets": 12,
        "rx_bytes": 3400,
        "rx_dropped": 0,
    }
    with pytest.raises(BenchmarkError, match="not readable"):
        parse_counters("cat: /sys/class/net/link0/statistics/rx_packets: No such file or directory\n")


def test_pktgen_is_given_the_frame_without_its_fcs_and_the_family_of_the_address():
    v4 = setup_script("link0", PktgenOptions(frame_size=64), "198.18.0.2", "02:4e:4c:01:00:00", 4)
    assert "echo 'pkt_size 60' > /proc/net/pktgen/link0" in v4
    assert "echo 'dst 198.18.0.2' > /proc/net/pktgen/link0" in v4
    assert "echo 'dst_mac 02:4e:4c:01:00:00' > /proc/net/pktgen/link0" in v4
    assert "echo 'count 0' > /proc/net/pktgen/link0" in v4 and "modprobe pktgen" in v4
    v6 = setup_script("link0", PktgenOptions(frame_size=1518, family=6), "2001:2::2", "02:4e:4c:01:00:00", 6)
    assert "echo 'dst6 2001:2::2' > /proc/net/pktgen/link0" in v6 and "pkt_size 1514" in v6


@pytest.mark.parametrize("size", [63, 9019])
def test_a_frame_size_outside_ethernets_is_refused(size):
    with pytest.raises(ValueError, match="frame_size"):
        PktgenOptions(frame_size=size)


def test_pktgen_over_loopback_is_refused():
    with pytest.raises(ValueError, match="no peer: self"):
        PktgenOptions(peer="self")


def test_an_ipv6_frame_below_82_bytes_is_refused_and_82_taken():
    with pytest.raises(ValueError, match="smallest IPv6 frame is 82 bytes"):
        PktgenOptions(frame_size=81, family=6)
    assert PktgenOptions(frame_size=82, family=6).frame_size == 82
    assert PktgenOptions(frame_size=64, family=4).frame_size == 64


def test_a_run_shorter_than_a_second_is_refused():
    """pktgen's thread takes the start a moment after the write returns: a stop before it would count nothing."""
    with pytest.raises(ValueError, match="seconds"):
        PktgenOptions(seconds=0.5)


def load(tmp_path: Path, link: str, benchmark: str):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nnodes: [a, b]\nlinks:\n  - {link}\nbenchmarks:\n  - pktgen: {benchmark}\n")
    return load_scenario(path)


def test_a_frame_larger_than_the_links_mtu_carries_is_refused_with_the_largest_it_takes(tmp_path):
    with pytest.raises(ScenarioError, match=r"frame_size 1519 is more than link 0 carries .*frame_size <= 1518"):
        load(tmp_path, "{between: [a, b], nic: e1000}", "{frame_size: 1519}")
    assert load(tmp_path, "{between: [a, b], nic: e1000, mtu: 9000}", "{frame_size: 9018}")


def test_with_netem_on_its_end_the_sender_goes_through_the_qdisc_so_the_netem_applies():
    script = setup_script("link0", PktgenOptions(), "198.18.0.2", "02:4e:4c:01:00:00", 4)
    assert (
        "if tc qdisc show dev link0 | grep -q ' netem '; then echo 'xmit_mode queue_xmit' > /proc/net/pktgen/link0; "
        "echo xmit_mode=queue_xmit; else echo xmit_mode=start_xmit; fi"
    ) in script
    assert {m.extra["xmit_mode"] for m in parse(RESULT, BEFORE, AFTER, 64, "queue_xmit")} == {"queue_xmit"}


def test_frames_netem_still_held_are_late_not_lost_and_those_it_let_go_after_the_stop_not_counted_as_sent_in_time():
    """netem's rate or delay holds frames in the client's qdisc: 2000 were there at the stop, 500 still when the
    wait for it ended. The 1500 that left in between arrived after the sending."""
    found = {m.metric: m.value for m in parse(RESULT, BEFORE, AFTER, 64, "queue_xmit", (2000, 500))}
    assert found["rx_pps"] == pytest.approx((90000 - 1500) / 5)
    assert found["loss_pct"] == pytest.approx(100 * (100000 - 90000 - 500) / 100000)
    assert pktgen.parse_queued(" backlog 3028b 2p requeues 0\nqueued=2\n") == 2
    assert pktgen.parse_queued("") == 0  # no qdisc said anything: nothing held


def test_pps_caps_the_rate_with_pktgens_ratep():
    assert "echo 'ratep 2000' > /proc/net/pktgen/link0" in setup_script(
        "link0", PktgenOptions(pps=2000), "198.18.0.2", "02:4e:4c:01:00:00", 4
    )
    assert "ratep" not in setup_script("link0", PktgenOptions(), "198.18.0.2", "02:4e:4c:01:00:00", 4)
    assert pktgen.PLUGIN.describe(PktgenOptions(frame_size=1518, pps=2000)) == "pktgen 1518B at 2000 pps"


QUEUED = "tc -s qdisc show dev link0 | sed -n 's/^ backlog [0-9]*b \\([0-9]*\\)p.*/queued=\\1/p' | head -n 1"


def on_link0(client: FakeNode, server: FakeNode, raw: list) -> BenchContext:
    ctx = bench_context(client, server, raw)
    return replace(ctx, ends=replace(ctx.ends, client_ifname="link0", server_ifname="link0"))


COUNTERS = "rx_packets={}\nrx_bytes={}\nrx_dropped=0\nrx_missed_errors=0\n"


def test_a_run_sets_up_the_sender_reads_the_servers_counters_around_it_then_stops_and_resets_it(monkeypatch):
    monkeypatch.setattr(pktgen.time, "sleep", lambda seconds: None)
    log: list = []
    client = FakeNode(
        "a",
        {"cat /proc/net/pktgen/link0": answer(RESULT), "modprobe pktgen": answer("xmit_mode=queue_xmit\n")},
        log=log,
    )
    server = FakeNode(
        "b",
        {
            "/address": answer("02:4e:4c:01:00:01\n"),
            "statistics": [answer(COUNTERS.format(1000, 60000)), answer(COUNTERS.format(91000, 60000 + 90000 * 60))],
        },
        log=log,
    )
    ctx = on_link0(client, server, raw := [])
    measured = pktgen.PLUGIN.run(ctx, PktgenOptions(seconds=5))
    found = {m.metric: m.value for m in measured}
    assert found["rx_pps"] == pytest.approx(18000) and found["loss_pct"] == pytest.approx(10.0)
    assert measured[0].extra["xmit_mode"] == "queue_xmit"  # as its set-up said: netem on its end
    steps = [(kind, node, str(command).splitlines()[-1]) for kind, node, command in log]
    assert steps == [
        ("run", "b", "cat /sys/class/net/link0/address"),
        (
            "run",
            "a",
            "grep -q 'Result: OK' /proc/net/pktgen/link0 || { grep Result: /proc/net/pktgen/link0 >&2; exit 1; }",
        ),
        ("run", "b", "echo rx_missed_errors=$(cat /sys/class/net/link0/statistics/rx_missed_errors)"),
        ("spawn", "a", "echo start > /proc/net/pktgen/pgctrl"),
        ("run", "a", QUEUED),  # the stop, and what netem still holds then
        ("stop", "a", "echo start > /proc/net/pktgen/pgctrl"),
        ("run", "a", QUEUED),  # the wait until netem let them go, and what it still holds after
        ("run", "b", "echo rx_missed_errors=$(cat /sys/class/net/link0/statistics/rx_missed_errors)"),
        ("run", "a", "cat /proc/net/pktgen/link0"),
        ("run", "a", "echo stop > /proc/net/pktgen/pgctrl; echo reset > /proc/net/pktgen/pgctrl"),
    ]
    assert raw[0][0] == "pktgen-64" and "Result: OK" in raw[0][1]


def test_the_sender_is_stopped_and_reset_when_the_server_cannot_be_read(monkeypatch):
    monkeypatch.setattr(pktgen.time, "sleep", lambda seconds: None)
    client = FakeNode("a", {"cat /proc/net/pktgen/link0": answer(RESULT)})
    server = FakeNode(
        "b",
        {
            "/address": answer("02:4e:4c:01:00:01\n"),
            "statistics": [answer(COUNTERS.format(1, 60)), answer("cat: no such file\n", 1)],
        },
    )
    ctx = on_link0(client, server, [])
    with pytest.raises(BenchmarkError, match="counters are not readable"):
        pktgen.PLUGIN.run(ctx, PktgenOptions(seconds=5))
    assert client.commands[-1] == "echo stop > /proc/net/pktgen/pgctrl; echo reset > /proc/net/pktgen/pgctrl"


@pytest.mark.parametrize("answer_", ["02:4e:4c:01:00:01'; reboot; echo '", "", "x" * 5000])
def test_a_server_mac_that_is_no_mac_is_refused_before_it_reaches_the_clients_script(answer_):
    client = FakeNode("a")
    server = FakeNode("b", {"/address": answer(answer_ + "\n")})
    with pytest.raises(BenchmarkError, match="b gave no MAC address for link0"):
        pktgen.PLUGIN.run(on_link0(client, server, []), PktgenOptions(seconds=5))
    assert client.commands == []  # nothing ran on the client
