"""bench.base.served, the one server/client sequence: its order of operations against fake nodes, and that
netperf, iperf3, lmbench and netpipe all go through it (port freed first, server stopped, raw output kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.base.node import GuestCommandError
from niclab.model.bench import iperf3, lmbench, netperf, netpipe
from niclab.model.bench.base import BenchContext, BenchmarkError, Endpoints, served
from tests.fakes import captured
from tests.helpers import CLIENT, SERVER, FakeNode, answer

FREE, LISTENING = "netstat -ln", "awk -v p=:"  # what free_port's and wait_listening's scripts contain


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        client: dict | None = None,
        server: dict | None = None,
        files: dict | None = None,
        server_output=None,
    ):
        self.log: list[tuple[str, str, str]] = []
        self.client = FakeNode("a", client, files, log=self.log)
        self.server = FakeNode("b", server, server_output=server_output, log=self.log)
        self.raw: dict[str, list[str]] = {}
        self.tmp_path = tmp_path

    def save_raw(self, name: str, text: str) -> Path:
        self.raw.setdefault(name, []).append(text)
        path = self.tmp_path / f"{name}-{len(self.raw[name])}.txt"
        path.write_text(text)
        return path

    @property
    def ctx(self) -> BenchContext:
        return BenchContext(Endpoints(self.client, self.server, CLIENT, SERVER, 0), self.save_raw, lambda _: None)

    def steps(self) -> list[str]:
        """The log as short names: free, spawn, listening, client (any other client command), stop, ..."""
        names = []
        for kind, node, command in self.log:
            if kind == "run" and FREE in command:
                names.append("free")
            elif kind == "run" and LISTENING in command:
                names.append("listening")
            elif kind == "run":
                names.append("client" if node == "a" else "server-run")
            else:
                names.append(kind)
        return names


# -- the helper ------------------------------------------------------------------------------------


def test_frees_the_port_then_spawns_waits_runs_the_client_and_stops(tmp_path):
    rig = Rig(tmp_path, client={"echo hi": answer("hi\n")})
    with served(rig.ctx, ["srv", "-p", "7"], 7, label="thing") as run:
        assert rig.steps() == ["free", "spawn", "listening"]
        got = run.run_client(["echo", "hi"], timeout=5)
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"]
    free, spawn = rig.log[0], rig.log[1]
    assert free[1] == "b" and "netstat -lntp" in free[2] and ":7$/" in free[2]
    assert spawn == ("spawn", "b", "srv -p 7")
    assert rig.log[3] == ("run", "a", "echo hi")
    assert got.stdout == "hi\n" and run.result is got and run.client_command == "echo hi"
    assert run.server_output == "server says hello\n" and run.stopped.returncode == 143
    assert run.ended == [] and run.leftovers == ""
    assert rig.raw == {}  # on success the plug-in writes its own raw output


def test_udp_port_is_freed_and_waited_for_as_udp(tmp_path):
    rig = Rig(tmp_path)
    with served(rig.ctx, "srv", 9, "udp", label="thing"):
        pass
    assert "netstat -lnup" in rig.log[0][2] and "/proc/net/udp" in rig.log[2][2]


def test_what_free_port_ended_is_kept_for_the_raw_output(tmp_path):
    rig = Rig(tmp_path, server={FREE: answer(" 812:netserver\n")})
    with served(rig.ctx, "srv", 12865, label="thing") as run:
        pass
    assert run.ended == ["812:netserver"]
    assert run.leftovers == "\n# ended a leftover on port 12865 first: 812:netserver"


def test_a_port_that_stays_taken_starts_no_server(tmp_path):
    rig = Rig(tmp_path, server={FREE: answer(" 9:x", returncode=1)})
    with pytest.raises(BenchmarkError, match="tcp port 7 is still taken"):
        with served(rig.ctx, "srv", 7, label="thing"):
            pytest.fail("the block must not run")
    assert rig.steps() == ["free"]


def test_a_client_that_raises_still_stops_the_server_and_keeps_both_sides_output(tmp_path):
    rig = Rig(tmp_path, client={"cli": GuestCommandError("a: `cli` did not finish in 5 s; killed it")})
    with pytest.raises(GuestCommandError) as caught:
        with served(rig.ctx, "srv --port 7", 7, label="thing") as run:
            run.run_client("cli --go", timeout=5)
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"]
    [raw] = rig.raw["thing"]
    assert "$ cli --go\n" in raw and "# client: a: `cli` did not finish in 5 s; killed it" in raw
    assert "# server `srv --port 7` (exit 143): server says hello" in raw
    assert str(caught.value) == f"a: `cli` did not finish in 5 s; killed it (raw output: {tmp_path / 'thing-1.txt'})"
    assert run.client_error and run.result is None


def test_a_failure_after_the_client_ran_keeps_what_the_client_printed(tmp_path):
    rig = Rig(tmp_path, client={"cli": answer("half a table\n", 3, "oops\n")})
    with pytest.raises(BenchmarkError, match=r"^bad table \(raw output: .*thing-1.txt\)$"):
        with served(rig.ctx, "srv", 7, label="thing") as run:
            run.run_client("cli", timeout=5)
            raise BenchmarkError("bad table")
    [raw] = rig.raw["thing"]
    assert raw.startswith("$ cli\n# exit 3 after 0.1 s\nhalf a table\noops\n")
    assert "# failed: BenchmarkError: bad table" in raw


def test_a_server_that_never_listens_is_stopped_and_the_client_never_runs(tmp_path):
    rig = Rig(tmp_path, server={LISTENING: answer(returncode=1)}, server_output=answer("", 1, "bind: address in use\n"))
    with pytest.raises(BenchmarkError, match=r"nothing listens on tcp port 7 .*\(raw output: "):
        with served(rig.ctx, "srv", 7, label="thing"):
            pytest.fail("the block must not run")
    assert rig.steps() == ["free", "spawn", "listening", "stop"]
    [raw] = rig.raw["thing"]
    assert "# the client did not run" in raw and "bind: address in use" in raw


def test_hooks_run_around_the_stop_in_order_also_on_failure(tmp_path):
    for fail in (False, True):
        rig = Rig(tmp_path)
        hooks = {
            "before_stop": lambda log=rig.log: log.append(("hook", "b", "before")) or "# asked it to go",
            "after_stop": lambda log=rig.log: log.append(("hook", "b", "after")) or "# swept",
        }
        try:
            with served(rig.ctx, "srv", 7, label=f"thing-{fail}", **hooks) as run:
                run.run_client("cli", timeout=5)
                if fail:
                    raise BenchmarkError("no")
        except BenchmarkError:
            assert fail
        assert rig.steps() == ["free", "spawn", "listening", "client", "hook", "stop", "hook"]
        assert [entry[2] for entry in rig.log if entry[0] == "hook"] == ["before", "after"]
        assert (run.before, run.after) == ("# asked it to go", "# swept")
        if fail:
            [raw] = rig.raw[f"thing-{fail}"]
            assert raw.index("# asked it to go") < raw.index("# server `srv`") < raw.index("# swept")


def test_a_failing_before_stop_hook_still_stops_the_server(tmp_path):
    rig = Rig(tmp_path)

    def refuse() -> str:
        raise GuestCommandError("-S timed out")

    with pytest.raises(GuestCommandError, match="-S timed out"):
        with served(rig.ctx, "srv", 7, label="thing", before_stop=refuse):
            pass
    assert rig.steps()[-1] == "stop"


def test_a_server_that_fails_to_stop_does_not_hide_the_first_error(tmp_path):
    rig = Rig(tmp_path, server_output=GuestCommandError("agent gone"))
    with pytest.raises(BenchmarkError, match="bad table") as caught:
        with served(rig.ctx, "srv", 7, label="thing"):
            raise BenchmarkError("bad table")
    assert any("stopping the server failed too: agent gone" in note for note in caught.value.__notes__)
    assert "# server `srv`: not stopped" in rig.raw["thing"][0]


def test_other_errors_keep_their_message_and_get_a_note(tmp_path):
    rig = Rig(tmp_path)
    with pytest.raises(KeyError) as caught:
        with served(rig.ctx, "srv", 7, label="thing"):
            raise KeyError("x")
    assert caught.value.args == ("x",) and caught.value.__notes__ == [f"raw output: {tmp_path / 'thing-1.txt'}"]
    assert rig.steps()[-1] == "stop"


# -- the four plug-ins go through it ---------------------------------------------------------------


def plugin_cases(data_dir: Path) -> dict:
    """name -> (plug-in, options, port, proto, client replies, client files, raw file name)."""
    return {
        "netperf": (
            netperf.PLUGIN,
            netperf.NetperfOptions(test="TCP_STREAM", seconds=1),
            netperf.PORT,
            "tcp",
            {"netperf -H": answer((data_dir / "netperf" / "tcp_stream.txt").read_text())},
            {},
            "netperf-TCP_STREAM",
        ),
        "iperf3": (
            iperf3.PLUGIN,
            iperf3.Iperf3Options(seconds=1),
            iperf3.PORT,
            "tcp",
            {"iperf3 -c": answer((data_dir / "iperf3" / "tcp.json").read_text())},
            {},
            "iperf3-tcp",
        ),
        "lmbench": (
            lmbench.PLUGIN,
            lmbench.LmbenchOptions(test="lat_udp", repetitions=3),
            34298,
            "udp",
            {"lat_udp -N": captured(data_dir, "lmbench", "lat_udp")},
            {},
            "lmbench-lat_udp",
        ),
        "netpipe": (
            netpipe.PLUGIN,
            netpipe.NetpipeOptions(),
            netpipe.PORT,
            "tcp",
            {"NPtcp -h": answer()},
            {netpipe.OUTPUT: (data_dir / "netpipe" / "e1000.out").read_bytes()},
            "netpipe",
        ),
    }


@pytest.mark.parametrize("name", ["netperf", "iperf3", "lmbench", "netpipe"])
def test_each_plugin_frees_its_port_first_and_records_what_it_ended(tmp_path, data_dir, name):
    plugin, options, port, proto, replies, files, raw_name = plugin_cases(data_dir)[name]
    rig = Rig(tmp_path, client=replies, files=files, server={FREE: answer(" 4242:leftover\n")})
    found = plugin.run(rig.ctx, options)
    assert found and all(m.tool == name for m in found)
    steps = rig.steps()
    assert steps[:3] == ["free", "spawn", "listening"]
    assert f":{port}$/" in rig.log[0][2] and f"netstat -ln{proto[0]}p" in rig.log[0][2]
    assert f"/proc/net/{proto}" in rig.log[2][2]
    assert steps.index("stop") > steps.index("client")
    [raw] = rig.raw[raw_name]
    assert raw.rstrip().endswith(f"# ended a leftover on port {port} first: 4242:leftover")


@pytest.mark.parametrize("name", ["netperf", "iperf3", "lmbench", "netpipe"])
def test_each_plugin_keeps_its_raw_output_when_the_client_breaks(tmp_path, data_dir, name):
    plugin, options, _port, _proto, replies, _files, raw_name = plugin_cases(data_dir)[name]
    [needle] = replies
    rig = Rig(tmp_path, client={needle: GuestCommandError(f"a: `{needle}` lost the agent")})
    # netpipe reads a killed sweep's partial curve: here there is none, so reading it fails
    with pytest.raises(KeyError if name == "netpipe" else GuestCommandError):
        plugin.run(rig.ctx, options)
    [spawned] = rig.server.spawned
    assert rig.steps()[:4] == ["free", "spawn", "listening", "client"] and ("stop", "b", spawned.command) in rig.log
    [raw] = rig.raw[raw_name]
    assert "lost the agent" in raw and f"# server `{spawned.command}` (exit 143): server says hello" in raw


def test_netperf_udp_stream_hang_is_retried_once_through_the_helper(tmp_path, data_dir):
    text = (data_dir / "netperf" / "udp_stream.txt").read_text()
    hung = GuestCommandError("a: `netperf` did not finish in 34 s; killed it")
    rig = Rig(tmp_path, client={"netperf -H": [hung, answer(text)]})
    found = netperf.PLUGIN.run(rig.ctx, netperf.NetperfOptions(test="UDP_STREAM", seconds=1))
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"] * 2
    first, second = rig.raw["netperf-UDP_STREAM"]
    assert "did not end within 34 s" in first and "killed it" in first
    assert "# server: server says hello" in second
    warning = (
        f"the first attempt hung and was retried (netperf UDP_STREAM did not end within 34 s (raw output: "
        f"{tmp_path / 'netperf-UDP_STREAM-1.txt'}))"
    )
    assert all(m.warning == warning for m in found)


def test_netperf_hang_of_another_test_is_not_retried(tmp_path):
    rig = Rig(tmp_path, client={"netperf -H": GuestCommandError("killed it")})
    with pytest.raises(netperf.NetperfHung, match=r"did not end within 34 s \(raw output: .*-1.txt\)$"):
        netperf.PLUGIN.run(rig.ctx, netperf.NetperfOptions(test="TCP_RR", seconds=1))
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"]


def test_lmbench_shuts_its_server_down_with_S_then_stops_then_sweeps(tmp_path, data_dir):
    rig = Rig(
        tmp_path,
        client={"lat_tcp -N": captured(data_dir, "lmbench", "lat_tcp")},
        server={lmbench.SWEEP: answer("killed leftover 77: lat_tcp -s\n")},
    )
    lmbench.PLUGIN.run(rig.ctx, lmbench.LmbenchOptions(test="lat_tcp", repetitions=3))
    after = [(kind, node, command) for kind, node, command in rig.log[4:]]
    assert after == [
        ("run", "b", f"{lmbench.BIN}/lat_tcp -S {SERVER}"),
        ("stop", "b", f"{lmbench.BIN}/lat_tcp -s"),
        ("run", "b", lmbench.SWEEP),
        ("run", "a", lmbench.SWEEP),
    ]
    [raw] = rig.raw["lmbench-lat_tcp"]
    assert raw.endswith(
        "# lat_tcp -S: exit 0 \n# server (exit 143): server says hello\n# b: killed leftover 77: lat_tcp -s\n"
    )


def test_iperf3_json_error_still_fails_after_the_helper(tmp_path, data_dir):
    rig = Rig(tmp_path, client={"iperf3 -c": answer((data_dir / "iperf3" / "refused.json").read_text())})
    with pytest.raises(BenchmarkError, match=r"iperf3: .*\(raw output: .*iperf3-tcp-1.txt\)"):
        iperf3.PLUGIN.run(rig.ctx, iperf3.Iperf3Options(seconds=1))
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"]


def test_iperf3_udp_start_lost_is_tried_again_on_a_fresh_server_and_counted(tmp_path, data_dir):
    lost = answer((data_dir / "iperf3" / "udp_lost_start.json").read_text())
    good = answer((data_dir / "iperf3" / "udp_loss5.json").read_text())
    rig = Rig(tmp_path, client={"iperf3 -c": [lost, lost, good]})
    found = iperf3.PLUGIN.run(rig.ctx, iperf3.Iperf3Options(protocol="udp", seconds=1))
    assert rig.steps() == ["free", "spawn", "listening", "client", "stop"] * 3
    assert len(rig.raw["iperf3-udp"]) == 3
    assert all(m.extra["lost_starts"] == 2 for m in found)
    assert next(m for m in found if m.metric == "loss_pct").extra["packets"] == 3750


def test_iperf3_udp_that_never_starts_fails_after_three_tries(tmp_path, data_dir):
    lost = answer((data_dir / "iperf3" / "udp_lost_start.json").read_text())
    rig = Rig(tmp_path, client={"iperf3 -c": [lost, lost, lost, lost]})
    with pytest.raises(BenchmarkError, match=r"iperf3-udp-3.txt\); the UDP stream failed to start 3 times in a row$"):
        iperf3.PLUGIN.run(rig.ctx, iperf3.Iperf3Options(protocol="udp", seconds=1))
    assert len(rig.raw["iperf3-udp"]) == 3


def test_netpipe_sweep_out_of_time_keeps_its_partial_curve(tmp_path, data_dir):
    rows = (data_dir / "netpipe" / "e1000.out").read_text().splitlines()[:10]
    rig = Rig(
        tmp_path,
        client={"NPtcp -h": GuestCommandError("a: `NPtcp` did not finish in 30 s; killed it")},
        files={netpipe.OUTPUT: ("\n".join(rows) + "\n").encode()},
    )
    found = netpipe.PLUGIN.run(rig.ctx, netpipe.NetpipeOptions(max_seconds=30))
    assert all("ran out of its 30 s budget" in m.warning for m in found)
    assert rig.steps() == ["free", "spawn", "listening", "client", "get", "stop"]
    assert "did not finish in 30 s" in rig.raw["netpipe"][0]
