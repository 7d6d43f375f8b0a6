import pytest

from niclab.bench.base import BenchmarkError
from niclab.bench.netperf import NetperfOptions, client_argv, measurements, parse_keyvals, server_argv


def test_tcp_stream_capture(data_dir):
    values = parse_keyvals((data_dir / "netperf" / "tcp_stream.txt").read_text())
    found = measurements("TCP_STREAM", values)
    assert [(m.name, m.value, m.unit) for m in found] == [
        ("netperf.TCP_STREAM.throughput_mbps", 685.52, "Mbit/s")]
    assert found[0].extra["transport_mss"] == "1448"


def test_tcp_rr_capture(data_dir):
    found = {m.metric: m for m in measurements(
        "TCP_RR", parse_keyvals((data_dir / "netperf" / "tcp_rr.txt").read_text()))}
    assert found["transaction_rate"].value == 3975.29 and found["transaction_rate"].unit == "/s"
    assert found["latency_p99_us"].value == 344 and found["latency_p99_us"].unit == "us"
    assert found["latency_mean_us"].headline and not found["latency_p99_us"].headline


def test_no_server_output_has_no_throughput(data_dir):
    values = parse_keyvals((data_dir / "netperf" / "no_server.txt").read_text())
    with pytest.raises(BenchmarkError, match="expected 10\\^6bits/s|printed no THROUGHPUT"):
        measurements("TCP_STREAM", values)


def test_wrong_units_are_refused():
    with pytest.raises(BenchmarkError, match="Trans/s"):
        measurements("TCP_RR", {"THROUGHPUT": "10", "THROUGHPUT_UNITS": "10^6bits/s"})


def test_command_lines():
    options = NetperfOptions(test="TCP_RR", seconds=7)
    assert client_argv(options, "198.18.0.2") == [
        "netperf", "-H", "198.18.0.2", "-p", "12865", "-t", "TCP_RR", "-l", "7", "-P", "0", "--", "-k",
        "THROUGHPUT,THROUGHPUT_UNITS,ELAPSED_TIME,PROTOCOL,RT_LATENCY,MIN_LATENCY,MEAN_LATENCY,"
        "P50_LATENCY,P90_LATENCY,P99_LATENCY,MAX_LATENCY,STDDEV_LATENCY"]
    assert server_argv("198.18.0.2") == ["netserver", "-D", "-p", "12865", "-L", "198.18.0.2,inet"]
