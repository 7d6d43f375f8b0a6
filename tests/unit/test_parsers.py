"""Parsers fed real output captured from the tools in the guest (tests/data/)."""

import json

import pytest

from niclab.model.bench import iperf3, ping
from niclab.model.bench.base import BenchmarkError
from niclab.model.bench.netperf import NetperfOptions, client_argv, measurements, parse_keyvals


def by_metric(found):
    return {m.metric: m for m in found}


def test_netperf_udp_stream_separates_sender_receiver_and_loss(data_dir):
    found = by_metric(measurements("UDP_STREAM", parse_keyvals((data_dir / "netperf" / "udp_stream.txt").read_text())))
    assert found["send_throughput_mbps"].value == 561.32
    assert found["recv_throughput_mbps"].value == 499.03
    assert found["loss_pct"].value == pytest.approx(100 * (143034 - 127163) / 143034)
    assert found["loss_pct"].extra["lost_datagrams"] == 143034 - 127163


def test_netperf_udp_command_line_carries_message_size():
    argv = client_argv(NetperfOptions(test="UDP_STREAM", seconds=3, message_size=1472), "198.18.0.2")
    assert argv[argv.index("--") :][:3] == ["--", "-m", "1472"]
    assert "REMOTE_RECV_CALLS" in argv[-1]


def test_iperf3_tcp(data_dir):
    found = by_metric(iperf3.parse((data_dir / "iperf3" / "tcp.json").read_text(), "tcp"))
    assert found["throughput_mbps"].value == pytest.approx(595.193363, rel=1e-6)
    assert found["sent_throughput_mbps"].value == pytest.approx(598.810988, rel=1e-6)
    assert found["retransmits"].value == 162
    assert found["rtt_mean_us"].value == 2244
    assert found["throughput_mbps"].extra["cpu_host_pct"] == pytest.approx(70.4385, rel=1e-4)


def test_iperf3_udp_loss_and_jitter(data_dir):
    found = by_metric(iperf3.parse((data_dir / "iperf3" / "udp_loss5.json").read_text(), "udp"))
    assert found["loss_pct"].value == 4.88
    assert found["loss_pct"].extra == {"lost_packets": 183, "packets": 3750}
    assert found["jitter_ms"].value == pytest.approx(0.045362, rel=1e-4)
    assert found["throughput_mbps"].value == pytest.approx(9.49411, rel=1e-5)


def test_iperf3_error_key_is_a_failure_even_with_exit_0(data_dir):
    text = (data_dir / "iperf3" / "refused.json").read_text()
    assert json.loads(text)["error"]
    with pytest.raises(BenchmarkError, match="unable to connect to server: Connection refused"):
        iperf3.parse(text, "tcp")


def test_iperf3_udp_start_lost_on_a_lossy_cable_is_its_own_error(data_dir):
    """Captured in guests over netem loss 25 %: the hello or its reply was lost, nothing was measured."""
    text = (data_dir / "iperf3" / "udp_lost_start.json").read_text()
    with pytest.raises(iperf3.UdpStartLost, match="unable to read from stream socket"):
        iperf3.parse(text, "udp")
    with pytest.raises(BenchmarkError) as tcp:
        iperf3.parse(text, "tcp")
    assert not isinstance(tcp.value, iperf3.UdpStartLost)


def test_iperf3_command_line():
    options = iperf3.Iperf3Options(protocol="udp", seconds=5, bitrate="10M", length=1000, streams=2, reverse=True)
    assert iperf3.client_argv(options, "198.18.0.2") == [
        "iperf3",
        "-c",
        "198.18.0.2",
        "-p",
        "5201",
        "-t",
        "5",
        "-J",
        "-P",
        "2",
        "-R",
        "-u",
        "-b",
        "10M",
        "-l",
        "1000",
    ]


def test_an_iperf3_bitrate_is_ascii_digits_and_a_unit():
    assert iperf3.Iperf3Options(bitrate="2.5G").bitrate == "2.5G"
    with pytest.raises(ValueError, match="should match pattern"):
        iperf3.Iperf3Options(bitrate="\u0661\u0660M")  # Arabic-Indic digits: iperf3 would not read them


def test_ping_summary(data_dir):
    found = by_metric(ping.parse((data_dir / "ping" / "ok.txt").read_text()))
    assert found["loss_pct"].value == 0
    assert (found["rtt_min_ms"].value, found["rtt_avg_ms"].value, found["rtt_max_ms"].value) == (1.037, 1.151, 1.431)
    assert found["rtt_mdev_ms"].value == 0.120


def test_ping_without_a_summary_is_an_error(data_dir):
    with pytest.raises(BenchmarkError, match="Network is unreachable"):
        ping.parse((data_dir / "ping" / "unreachable.txt").read_text())


def test_every_parsed_metric_is_declared(data_dir):
    """What the parsers produce from real output is what the plug-ins declare (niclab metrics)."""
    from niclab.model import bench

    declared = {m.name: m.unit for m in bench.all_metrics()}
    produced = (
        measurements("TCP_STREAM", parse_keyvals((data_dir / "netperf" / "tcp_stream.txt").read_text()))
        + measurements("TCP_RR", parse_keyvals((data_dir / "netperf" / "tcp_rr.txt").read_text()))
        + measurements("UDP_STREAM", parse_keyvals((data_dir / "netperf" / "udp_stream.txt").read_text()))
        + iperf3.parse((data_dir / "iperf3" / "tcp.json").read_text(), "tcp")
        + iperf3.parse((data_dir / "iperf3" / "udp_loss5.json").read_text(), "udp")
        + iperf3.parse((data_dir / "iperf3" / "tcp_bidir.json").read_text(), "tcp")
        + ping.parse((data_dir / "ping" / "ok.txt").read_text())
    )
    for m in produced:
        assert declared.get(m.name) == m.unit, f"{m.name} ({m.unit}) is not declared with that unit"


def test_iperf3_both_ways_at_once(data_dir):
    found = by_metric(iperf3.parse((data_dir / "iperf3" / "tcp_bidir.json").read_text(), "tcp"))
    assert found["throughput_mbps"].value == pytest.approx(38.279465, rel=1e-6)
    assert found["reverse_throughput_mbps"].value == pytest.approx(46.697365, rel=1e-6)
    assert iperf3.client_argv(iperf3.Iperf3Options(bidir=True, seconds=3), "x")[-1] == "--bidir"
    with pytest.raises(ValueError, match="reverse and bidir exclude each other"):
        iperf3.Iperf3Options(bidir=True, reverse=True)
