"""netperf's parser and command lines, on output captured from netperf 2.7.0 in the guest."""

import pytest
from pydantic import ValidationError

from niclab.model.bench.base import BenchmarkError
from niclab.model.bench.netperf import NetperfOptions, client_argv, measurements, parse_keyvals, server_argv


def parsed(data_dir, name, test, cpu=False):
    found = measurements(test, parse_keyvals((data_dir / "netperf" / name).read_text()), cpu=cpu)
    return {m.metric: m for m in found}


def test_tcp_stream(data_dir):
    found = parsed(data_dir, "tcp_stream.txt", "TCP_STREAM")
    assert (found["throughput_mbps"].value, found["throughput_mbps"].unit) == (685.52, "Mbit/s")
    assert found["throughput_mbps"].extra["transport_mss"] == "1448"
    assert found["throughput_mbps"].warning is None


def test_tcp_rr_latency_percentiles(data_dir):
    found = parsed(data_dir, "tcp_rr.txt", "TCP_RR")
    assert found["transaction_rate"].value == 3975.29 and found["transaction_rate"].unit == "/s"
    assert found["latency_p99_us"].value == 344 and found["latency_p99_us"].unit == "us"
    assert found["latency_mean_us"].headline and not found["latency_p99_us"].headline


def test_confidence_miss_is_a_warning_though_netperf_says_nothing(data_dir):
    """-i 3,3 -I 99,5: netperf exited 0 with THROUGHPUT_CONFID 53.6 against a 5 % target."""
    found = parsed(data_dir, "tcp_stream_cpu_confidence.txt", "TCP_STREAM", cpu=True)
    throughput = found["throughput_mbps"]
    assert throughput.value == 372.10
    assert throughput.extra["confidence_met"] is False
    assert throughput.extra["confidence_achieved_width_pct"] == {
        "throughput": 53.592,
        "local_cpu": 19.116,
        "remote_cpu": 61.255,
    }
    assert throughput.warning == (
        "netperf's 99 % confidence target (±2.5 %) was missed after 3 iterations: "
        "throughput ±26.8 %, local cpu ±9.6 %, remote cpu ±30.6 %"
    )
    assert (found["local_cpu_pct"].value, found["remote_cpu_pct"].value) == (58.74, 55.62)
    assert (found["local_sd_us_per_kb"].value, found["local_sd_us_per_kb"].unit) == (12.952, "us/KB")


def test_no_confidence_asked_is_no_warning(data_dir):
    found = parsed(data_dir, "tcp_maerts.txt", "TCP_MAERTS")
    assert found["throughput_mbps"].value == 233.07 and found["throughput_mbps"].warning is None
    assert "confidence_met" not in found["throughput_mbps"].extra
    assert found["retransmits"].value == 121  # the remote end sends in MAERTS


def test_udp_stream_separates_sender_receiver_and_loss(data_dir):
    found = parsed(data_dir, "udp_stream_cpu.txt", "UDP_STREAM", cpu=True)
    assert found["send_throughput_mbps"].value == 344.04
    assert found["recv_throughput_mbps"].value == 259.57
    assert found["remote_cpu_pct"].value == 64.29


def test_udp_loss_over_confidence_iterations_comes_from_the_mean_rates(data_dir):
    """-i 10,3 -I 99,5 on bonded tulips: netperf printed the mean rates, the last iteration's send count
    (LOCAL_SEND_CALLS=34552) and no receive count (REMOTE_RECV_CALLS=0), which made the loss 100 %."""
    found = parsed(data_dir, "udp_stream_confidence.txt", "UDP_STREAM")
    assert (found["send_throughput_mbps"].value, found["recv_throughput_mbps"].value) == (452.80, 261.83)
    loss = found["loss_pct"]
    assert loss.value == pytest.approx(100 * (452.80 - 261.83) / 452.80)
    assert loss.extra["confidence_iterations"] == 10 and "received_datagrams" not in loss.extra
    plain = parsed(data_dir, "udp_stream.txt", "UDP_STREAM")["loss_pct"]  # one run: from the datagrams counted
    assert plain.value == pytest.approx(100 * (143034 - 127163) / 143034)
    assert plain.extra["received_datagrams"] == 127163


def test_nothing_received_over_confidence_iterations_is_a_total_loss_and_a_missed_target(data_dir):
    """-i 4,3 -I 99,5 over three bonded RTL8139s that passed no datagram: netperf printed THROUGHPUT=0.00 and
    THROUGHPUT_CONFID=-nan (the width of an interval around a mean of 0)."""
    found = parsed(data_dir, "udp_stream_confidence_nothing_received.txt", "UDP_STREAM")
    received, loss = found["recv_throughput_mbps"], found["loss_pct"]
    assert (received.value, loss.value) == (0.0, 100.0)
    assert received.extra["confidence_met"] is False
    assert received.extra["confidence_achieved_width_pct"] == {}
    assert received.warning == (
        "netperf's 99 % confidence target (±2.5 %) was missed after 3 iterations: "
        "throughput has no interval (netperf printed -nan)"
    )


@pytest.mark.parametrize("value", ["nan", "-nan", "inf", "1e999"])
def test_a_figure_that_is_not_finite_is_the_benchmarks_error(data_dir, value):
    text = (data_dir / "netperf" / "tcp_stream.txt").read_text().replace("THROUGHPUT=685.52", f"THROUGHPUT={value}")
    with pytest.raises(BenchmarkError, match=f"netperf printed THROUGHPUT='{value}', not a finite number"):
        measurements("TCP_STREAM", parse_keyvals(text))


def test_request_response_variants(data_dir):
    udp_rr = parsed(data_dir, "udp_rr.txt", "UDP_RR")
    assert udp_rr["transaction_rate"].value == 1500.40 and udp_rr["latency_p90_us"].value == 1897
    assert udp_rr["transaction_rate"].extra["request_size"] == "64"
    crr = parsed(data_dir, "tcp_crr.txt", "TCP_CRR")
    assert crr["transaction_rate"].value == 518.82
    rr_cpu = parsed(data_dir, "tcp_rr_cpu.txt", "TCP_RR", cpu=True)
    assert (rr_cpu["local_sd_us_per_tr"].value, rr_cpu["local_sd_us_per_tr"].unit) == (219.689, "us/Tr")


def test_missing_cpu_figures_are_an_error_when_asked(data_dir):
    with pytest.raises(BenchmarkError, match="no local CPU utilization"):
        parsed(data_dir, "tcp_maerts.txt", "TCP_MAERTS", cpu=True)


def test_no_server_output_is_an_error(data_dir):
    with pytest.raises(BenchmarkError, match="no throughput units"):
        measurements("TCP_STREAM", parse_keyvals((data_dir / "netperf" / "no_server.txt").read_text()))


def test_wrong_units_are_refused():
    with pytest.raises(BenchmarkError, match="expected Trans/s"):
        measurements("TCP_RR", {"THROUGHPUT": "10", "THROUGHPUT_UNITS": "10^6bits/s"})


def test_command_lines():
    argv = client_argv(
        NetperfOptions(
            test="TCP_STREAM",
            seconds=60,
            message_size=8192,
            local_buffer=32768,
            remote_buffer=32768,
            cpu=True,
            iterations=(3, 10),
            confidence={"level": 99, "width": 5},
        ),
        "198.18.0.2",
    )
    assert argv[: argv.index("-k")] == [
        "netperf",
        "-H",
        "198.18.0.2",
        "-p",
        "12865",
        "-t",
        "TCP_STREAM",
        "-l",
        "60",
        "-c",
        "-C",
        "-i",
        "10,3",
        "-I",
        "99,5",
        "-P",
        "0",
        "--",
        "-m",
        "8192",
        "-s",
        "32768",
        "-S",
        "32768",
    ]
    rr = client_argv(NetperfOptions(test="UDP_RR", seconds=5, request_size=64, response_size=1024), "x")
    assert rr[rr.index("--") : rr.index("-k")] == ["--", "-r", "64,1024"]
    assert "P99_LATENCY" in rr[-1] and "LOCAL_SEND_CALLS" not in rr[-1]
    assert server_argv("198.18.0.2") == ["netserver", "-D", "-p", "12865", "-L", "198.18.0.2,inet"]


def test_confidence_and_iterations_fill_each_other_in():
    assert NetperfOptions(confidence={"level": 95, "width": 10}).iterations == (3, 10)
    assert NetperfOptions(iterations=[3, 5]).confidence.level == 99


@pytest.mark.parametrize(
    "options,message",
    [
        ({"test": "TCP_STREAM", "request_size": 64}, "request_size and response_size are for request/response tests"),
        ({"test": "TCP_RR", "message_size": 64}, "message_size is for stream tests"),
        ({"iterations": [2, 10]}, "3 <= min <= max <= 30"),
        ({"iterations": [10, 3]}, r"\[10, 3\] is \[min, max\]: for netperf.s -i 10,3 \(max,min\) write \"10,3\""),
        ({"confidence": {"level": 90}}, "Input should be 95 or 99"),
        ({"local_buffer": 2**31}, "less than or equal to 2147483647"),  # netperf reads sizes into C ints
        ({"test": "TCP_RR", "response_size": 2**64 + 1}, "less than or equal to 2147483647"),
    ],
)
def test_options_that_do_not_fit(options, message):
    with pytest.raises(ValidationError, match=message):
        NetperfOptions(**options)
