"""netpipe and lmbench plug-ins: parsers on real guest output (tests/data/netpipe, tests/data/lmbench),
command lines, unit conversions checked by hand, failures, and run() against fake nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from niclab.base.node import CommandResult, GuestCommandError
from niclab.model import bench
from niclab.model.bench import lmbench, netpipe
from niclab.model.bench.base import BenchContext, BenchmarkError, Endpoints
from niclab.model.bench.lmbench import LmbenchOptions
from niclab.model.bench.netpipe import NetpipeOptions
from tests.fakes import captured
from tests.helpers import CLIENT, SERVER, FakeNode, answer

TESTS = ("bw_tcp", "lat_tcp", "lat_udp", "lat_connect")


# -- netpipe: parsing and conversions --------------------------------------------------------------


def test_netpipe_rows_and_the_2_20_conversion(data_dir):
    rows = netpipe.parse_rows((data_dir / "netpipe" / "e1000.out").read_text())
    assert len(rows) == 40 and rows[0] == (1, 0.070049, 0.00010891)
    found = {m.metric: m for m in netpipe.measurements(rows)}
    # the smallest message's time is already half the round trip: 0.00010891 s = 108.91 us
    assert found["latency_us"].value == pytest.approx(108.91) and found["latency_us"].unit == "us"
    assert found["latency_us"].extra == {"bytes": 1}
    # peak row `196608 591.145868 0.00253744`: 591.145868 x 2^20 bit/s = 619.86137 x 10^6 bit/s
    assert found["peak_throughput_mbps"].value == pytest.approx(619.86137, abs=1e-5)
    assert found["peak_throughput_mbps"].unit == "Mbit/s"
    assert found["peak_size_bytes"].value == 196608 and found["peak_size_bytes"].unit == "bytes"
    assert not found["peak_size_bytes"].headline


def test_netpipe_curve_layout_is_bytes_mbps_half_rtt_us_for_every_row(data_dir):
    rows = netpipe.parse_rows((data_dir / "netpipe" / "e1000.out").read_text())
    curve = next(m for m in netpipe.measurements(rows) if m.metric == "peak_throughput_mbps").extra["curve"]
    assert len(curve) == len(rows) and [point[0] for point in curve] == [row[0] for row in rows]
    assert curve[0] == [1, pytest.approx(0.073452, abs=1e-6), pytest.approx(108.91)]
    assert curve[-1] == [1048576, pytest.approx(595.986688, abs=1e-5), pytest.approx(14075.16)]  # 568.377197 x 1.048576
    for size, mbps, half_rtt_us in curve:
        # the 10^6 figure is the bits moved one way in the one-way time (up to NPtcp's rounding)
        assert mbps == pytest.approx(size * 8 / half_rtt_us, rel=2e-3)


def test_netpipe_sizes_replay_nptcp_sweep(data_dir):
    plain = [row[0] for row in netpipe.parse_rows((data_dir / "netpipe" / "e1000.out").read_text())]
    assert plain == netpipe.sizes(1, 1 << 20, 0)
    probed = [row[0] for row in netpipe.parse_rows((data_dir / "netpipe" / "e1000_perturbed.out").read_text())]
    assert probed == netpipe.sizes(1, 131072, 3)
    assert probed[:12] == [1, 2, 3, 4, 6, 8, 12, 13, 16, 19, 21, 24]
    assert netpipe.sizes(1000, 4000, 0) == [1000, 1500, 2000, 3000, 4000]


def test_netpipe_streaming_reports_no_latency(data_dir):
    rows = netpipe.parse_rows((data_dir / "netpipe" / "e1000.out").read_text())
    assert [m.metric for m in netpipe.measurements(rows, streaming=True)] == ["peak_throughput_mbps", "peak_size_bytes"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no measurements"),
        ("       1 0.070049\n", "line 1 is not `bytes Mbps seconds`"),
        ("       1 0.070049   0.00010891\nSending output\n", "line 2"),
    ],
)
def test_netpipe_bad_output_file(text, message):
    with pytest.raises(BenchmarkError, match=message):
        netpipe.parse_rows(text)


@pytest.mark.parametrize(
    "name, code, message",
    [
        ("refused", 246, r"Client: Cannot Connect! errno=111 \(Connection refused\)"),
        ("reset", 3, 'NetPIPE: "end of file" encountered on reading from socket'),
        ("streaming_reset", 3, "NetPIPE: error writing or reading synchronization string: Connection reset by peer"),
    ],
)
def test_netpipe_failure_messages(data_dir, name, code, message):
    result = captured(data_dir, "netpipe", name)
    assert result.returncode == code
    assert netpipe.failure(result.returncode, result.stdout, result.stderr) == (
        f"NPtcp exited {code}: " + message.replace("\\(", "(").replace("\\)", ")")
    )


def test_netpipe_command_lines():
    options = NetpipeOptions(start=16, end=65536, perturbation=3, buffer=262144, streaming=True)
    assert netpipe.receiver_argv(options) == [
        "NPtcp",
        "-P",
        "5002",
        "-l",
        "16",
        "-u",
        "65536",
        "-p",
        "3",
        "-b",
        "262144",
        "-s",
    ]
    assert netpipe.sender_argv(options, SERVER) == [
        "NPtcp",
        "-h",
        SERVER,
        "-o",
        netpipe.OUTPUT,
        "-P",
        "5002",
        "-l",
        "16",
        "-u",
        "65536",
        "-p",
        "3",
        "-b",
        "262144",
        "-s",
    ]
    assert netpipe.receiver_argv(NetpipeOptions()) == ["NPtcp", "-P", "5002", "-l", "1", "-u", "1048576", "-p", "0"]


def test_netpipe_options():
    with pytest.raises(ValidationError, match="larger than end"):
        NetpipeOptions(start=4096, end=1024)
    with pytest.raises(ValidationError):
        NetpipeOptions(size=12)
    assert NetpipeOptions.model_validate({"end": 65536, "from": "b"}).from_ == "b"


def test_netpipe_default_run_is_well_under_a_minute():
    # measured on an e1000 pair under TCG: 14 to 16 s for the 40 default sizes
    assert 10 < netpipe.PLUGIN.estimate_seconds(NetpipeOptions()) < 30
    # NPtcp's own defaults (to 8 MiB, perturbation 3): 124 sizes, 87 s measured
    assert 60 < netpipe.PLUGIN.estimate_seconds(NetpipeOptions(end=1 << 23, perturbation=3)) < 120


# -- lmbench: parsing and conversions --------------------------------------------------------------


def test_lmbench_bw_tcp_mb_is_10_6_bytes(data_dir):
    """`0.065536 55.10 MB/sec`: lmbench's MB is 10^6 bytes (its first column is 65536 / 10^6), so x 8."""
    [found] = lmbench.measurements("bw_tcp", captured(data_dir, "lmbench", "bw_tcp"))
    assert (found.name, found.unit) == ("lmbench.bw_tcp.throughput_mbps", "Mbit/s")
    assert found.value == pytest.approx(440.8)  # 55.10 x 8, not 55.10 x 8 x 1.048576 = 462.2
    assert found.extra == {
        "lmbench_mb_per_s": 55.10,
        "message_bytes": 65536,
        "tcp_connections": 1,
        "tcp_retransmits": 0,
    }


@pytest.mark.parametrize(
    "test, value, extra",
    [
        ("lat_tcp", 251.6065, {"tcp_connections": 1, "tcp_retransmits": 0}),
        ("lat_udp", 223.4912, {"udp_datagrams_in": 35209}),
        ("lat_connect", 501.6161, {"tcp_connections": 1244, "tcp_retransmits": 0}),
    ],
)
def test_lmbench_latencies_are_round_trips_in_us(data_dir, test, value, extra):
    [found] = lmbench.measurements(test, captured(data_dir, "lmbench", test))
    assert (found.name, found.value, found.unit, found.extra) == (f"lmbench.{test}.latency_us", value, "us", extra)


def test_lmbench_counters_parse(data_dir):
    before, after = lmbench.snapshots(captured(data_dir, "lmbench", "lat_tcp").stdout)
    assert before["Tcp.ActiveOpens"] == 680 and after["Tcp.ActiveOpens"] == 681
    assert before["Tcp.MaxConn"] == -1 and after["Udp.InDatagrams"] == 64779


@pytest.mark.parametrize("odd", ["nan", "9" * 5000, "1e3"])
def test_a_counter_that_is_no_number_is_left_out_not_a_traceback(odd):
    """A guest's /proc/net/snmp is untrusted: int() of "nan", or of more than 4300 digits, raised."""
    text = "Udp: InDatagrams NoPorts InErrors\nUdp: 64779 ODD 0\n".replace("ODD", odd)
    assert lmbench.snapshots(text) == [{"Udp.InDatagrams": 64779, "Udp.InErrors": 0}]


@pytest.mark.parametrize(
    "name, message",
    [
        # a refused connect is retried 10 times, then timed anyway: lat_tcp printed 0.69 us, lat_connect 285.9 us
        ("lat_tcp_no_server", "11 of 11 TCP connection attempts to the server failed"),
        ("lat_connect_no_server", "1337 of 1337 TCP connection attempts to the server failed"),
        ("bw_tcp_no_server", "bw_tcp printed no result: socket connection: Connection refused"),
        ("lat_udp_no_server", "lat_udp printed no result: lat_udp client: recv failed: Connection refused"),
        # the server's process group killed during the run: silence, a timeout, or refusals timed
        ("bw_tcp_server_gone", "bw_tcp printed no result and no error"),
        ("lat_tcp_server_gone", "lat_tcp printed no result and no error"),
        ("lat_udp_server_gone", "lat_udp printed no result: Recv timed out"),
        ("lat_connect_server_gone", "9068 of 12795 TCP connection attempts to the server failed"),
    ],
)
def test_lmbench_failures_exit_0_and_are_caught(data_dir, name, message):
    result = captured(data_dir, "lmbench", name)
    assert result.returncode == 0
    with pytest.raises(BenchmarkError, match=message):
        lmbench.measurements(name.split("_no_server")[0].split("_server_gone")[0], result)


def test_lmbench_bogus_no_server_numbers_look_like_results(data_dir):
    """Why the counters are read: without them these would pass as measurements."""
    assert lmbench.parse("lat_tcp", captured(data_dir, "lmbench", "lat_tcp_no_server").stderr).value == 0.6903
    assert lmbench.parse("lat_connect", captured(data_dir, "lmbench", "lat_connect_no_server").stderr).value == 285.9158


def test_lmbench_result_of_another_test_is_not_taken():
    with pytest.raises(BenchmarkError, match="lat_udp printed no result"):
        lmbench.parse("lat_udp", "TCP latency using 198.18.0.2: 251.6065 microseconds\n")


def test_lmbench_missing_counters_are_an_error(data_dir):
    result = captured(data_dir, "lmbench", "lat_tcp")
    with pytest.raises(BenchmarkError, match="counters before and after"):
        lmbench.measurements("lat_tcp", CommandResult("a", (), 0, "", result.stderr, 1.0))


def test_lmbench_command_lines():
    binary = "/usr/lib/lmbench/bin/x86_64-linux-gnu"
    options = LmbenchOptions(test="bw_tcp", message_size=131072, repetitions=5, warmup=1.5, interval_ms=200)
    assert lmbench.client_argv(options, SERVER) == [
        "env",
        "ENOUGH=200000",
        "TIMING_O=0",
        "LOOP_O=0",
        f"{binary}/bw_tcp",
        "-m",
        "131072",
        "-W",
        "1500000",
        "-N",
        "5",
        SERVER,
    ]
    assert lmbench.client_argv(LmbenchOptions(test="lat_connect"), SERVER)[4:] == [
        f"{binary}/lat_connect",
        "-N",
        "11",
        SERVER,
    ]
    assert lmbench.server_argv("lat_udp") == [f"{binary}/lat_udp", "-s"]
    assert lmbench.shutdown_argv("lat_udp", SERVER) == [f"{binary}/lat_udp", "-S", SERVER]
    command = lmbench.client_command(lmbench.client_argv(LmbenchOptions(test="lat_tcp"), SERVER))
    assert command.startswith(lmbench.SNMP + "; env ENOUGH=100000 ") and command.endswith("; exit $rc")


def test_lmbench_options():
    with pytest.raises(ValidationError, match="test"):
        LmbenchOptions()
    with pytest.raises(ValidationError):
        LmbenchOptions(test="lat_pipe")
    with pytest.raises(ValidationError, match="lat_connect takes neither"):
        LmbenchOptions(test="lat_connect", message_size=64)
    with pytest.raises(ValidationError, match="4 to 65507"):
        LmbenchOptions(test="lat_udp", message_size=2)
    with pytest.raises(ValidationError):
        LmbenchOptions(test="lat_tcp", parallel=2)


def test_lmbench_estimates_follow_the_measured_durations():
    estimate = lmbench.PLUGIN.estimate_seconds
    # measured with the defaults (11 repetitions) under TCG: 11, 40, 19 and 3.4 s
    assert 8 < estimate(LmbenchOptions(test="bw_tcp")) < 15
    assert 30 < estimate(LmbenchOptions(test="lat_tcp")) < 50
    assert 14 < estimate(LmbenchOptions(test="lat_udp")) < 25
    assert 2 < estimate(LmbenchOptions(test="lat_connect")) < 6


# -- metrics declared ------------------------------------------------------------------------------


def test_every_produced_metric_is_declared_with_its_unit(data_dir):
    declared = {m.name: m.unit for m in netpipe.PLUGIN.metrics() + lmbench.PLUGIN.metrics()}
    rows = netpipe.parse_rows((data_dir / "netpipe" / "e1000.out").read_text())
    produced = netpipe.measurements(rows) + [
        m for test in TESTS for m in lmbench.measurements(test, captured(data_dir, "lmbench", test))
    ]
    assert {m.name for m in produced} == set(declared)
    for m in produced:
        assert declared[m.name] == m.unit, f"{m.name} ({m.unit}) is not declared with that unit"
    assert bench.get("netpipe") is netpipe.PLUGIN and bench.get("lmbench") is lmbench.PLUGIN
    assert all(m.better in ("higher", "lower", None) for m in netpipe.PLUGIN.metrics() + lmbench.PLUGIN.metrics())


# -- run() against fake nodes (tests/helpers.FakeNode) ---------------------------------------------


def context(tmp_path: Path, client: FakeNode, server: FakeNode) -> BenchContext:
    def save_raw(name: str, text: str) -> Path:
        path = tmp_path / f"{name}.txt"
        path.write_text(text)
        return path

    return BenchContext(Endpoints(client, server, CLIENT, SERVER, 0), save_raw, lambda message: None)


def test_netpipe_run_reads_the_senders_file_and_stops_the_receiver(tmp_path, data_dir):
    table = (data_dir / "netpipe" / "e1000.out").read_bytes()
    client = FakeNode("a", {"NPtcp -h": answer("Sending output to /tmp/niclab-netpipe.out\n")}, {netpipe.OUTPUT: table})
    server = FakeNode("b")
    found = netpipe.PLUGIN.run(context(tmp_path, client, server), NetpipeOptions())
    assert [m.metric for m in found] == ["latency_us", "peak_throughput_mbps", "peak_size_bytes"]
    assert server.spawned[0].command == "NPtcp -P 5002 -l 1 -u 1048576 -p 0" and server.spawned[0].stopped
    assert client.commands[-1] == (
        f"rm -f {netpipe.OUTPUT} && NPtcp -h {SERVER} -o {netpipe.OUTPUT} -P 5002 -l 1 -u 1048576 -p 0"
    )
    assert table.decode() in (tmp_path / "netpipe.txt").read_text()


class TimingOutNode(FakeNode):
    """A client whose sweep runs out of time: the agent kills it; the rows written so far stay."""

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        if "NPtcp -h" in command:
            self.commands.append(command)
            self.timeout = timeout
            raise GuestCommandError(f"a: `{command}` did not finish in {timeout:.0f} s; killed it")
        return super().run(command, timeout, check)


def test_a_sweep_out_of_time_keeps_its_curve_with_a_warning(tmp_path, data_dir):
    rows = (data_dir / "netpipe" / "e1000.out").read_text().splitlines()[:12]
    client = TimingOutNode("a", files={netpipe.OUTPUT: ("\n".join(rows) + "\n").encode()})
    server = FakeNode("b")
    found = netpipe.PLUGIN.run(context(tmp_path, client, server), NetpipeOptions(max_seconds=60))
    assert client.timeout == 60 and server.spawned[0].stopped
    curve = next(m for m in found if m.metric == "peak_throughput_mbps").extra["curve"]
    assert len(curve) == 12
    last = int(rows[-1].split()[0])
    assert all(
        m.warning == f"the NPtcp sweep ran out of its 60 s budget at {last} bytes (of 1048576): the curve stops there"
        for m in found
    )
    assert "did not finish in 60 s" in (tmp_path / "netpipe.txt").read_text()


@pytest.mark.parametrize(
    "name, message",
    [
        ("refused", "Cannot Connect! errno=111"),
        ("reset", "end of file"),
        ("streaming_reset", "Connection reset by peer"),
    ],
)
def test_netpipe_run_failure_names_the_tool_message_and_raw_output(tmp_path, data_dir, name, message):
    client = FakeNode("a", {"NPtcp -h": captured(data_dir, "netpipe", name)})
    server = FakeNode("b")
    with pytest.raises(BenchmarkError, match=message) as caught:
        netpipe.PLUGIN.run(context(tmp_path, client, server), NetpipeOptions())
    assert f"raw output: {tmp_path / 'netpipe.txt'}" in str(caught.value)
    assert server.spawned[0].stopped


@pytest.mark.parametrize("test", TESTS)
def test_lmbench_run_stops_its_server_with_S_and_sweeps_both_guests(tmp_path, data_dir, test):
    client = FakeNode("a", {f"{test} -N": captured(data_dir, "lmbench", test)})
    server = FakeNode("b")
    [found] = lmbench.PLUGIN.run(context(tmp_path, client, server), LmbenchOptions(test=test, repetitions=3))
    assert found.name in {m.name for m in lmbench.PLUGIN.metrics()}
    assert server.spawned[0].command == f"{lmbench.BIN}/{test} -s" and server.spawned[0].stopped
    assert f"{lmbench.BIN}/{test} -S {SERVER}" in server.commands
    assert lmbench.SWEEP in server.commands and lmbench.SWEEP in client.commands
    raw = (tmp_path / f"lmbench-{test}.txt").read_text()
    assert "ENOUGH=100000" in raw and "# counters:" in raw


def test_lmbench_run_failure_still_stops_the_server(tmp_path, data_dir):
    client = FakeNode("a", {"lat_tcp -N": captured(data_dir, "lmbench", "lat_tcp_no_server")})
    server = FakeNode("b")
    with pytest.raises(BenchmarkError, match=r"connection attempts to the server failed.*raw output: "):
        lmbench.PLUGIN.run(context(tmp_path, client, server), LmbenchOptions(test="lat_tcp"))
    assert server.spawned[0].stopped and f"{lmbench.BIN}/lat_tcp -S {SERVER}" in server.commands


def test_lmbench_server_that_never_listens_is_stopped_and_reported(tmp_path):
    client = FakeNode("a")
    server = FakeNode("b", {"/proc/net/udp": answer(returncode=1, seconds=20.0)})
    with pytest.raises(BenchmarkError, match="nothing listens on udp port 34298"):
        lmbench.PLUGIN.run(context(tmp_path, client, server), LmbenchOptions(test="lat_udp"))
    assert server.spawned[0].stopped and not any("lat_udp -N" in c for c in client.commands)
