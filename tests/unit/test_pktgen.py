"""pktgen: its set-up, its Result line and the server's counters read as packet rates, loss and drops."""

from __future__ import annotations

import pytest

from niclab.model.bench.base import BenchmarkError
from niclab.model.bench.pktgen import PktgenOptions, counters_script, parse, parse_counters, setup_script

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
    assert found["tx_pps"].value == 20000 and found["tx_mbps"].value == 9
    assert found["rx_pps"].value == pytest.approx(18000)  # 90000 frames in 5.0 s
    assert found["rx_mbps"].value == pytest.approx(90000 * 60 * 8 / 5 / 1e6)
    assert found["loss_pct"].value == pytest.approx(10.0)  # 100000 sent, 90000 counted
    assert found["rx_dropped"].value == 1007 and found["tx_errors"].value == 2
    assert found["rx_pps"].extra == {"sent": 100000, "received": 90000, "frame_size": 64, "seconds": 5.0}
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
