"""The kselftest benchmark: what it runs in the guests, how it judges each program, crashes and reboots."""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from niclab.base.node import CommandResult, GuestCommandError, NodeGone
from niclab.model.bench import kselftest
from niclab.model.bench.base import BenchContext, BenchmarkError, Endpoints, Measurement, PartialRun
from niclab.model.bench.base import TestOutcome as Outcome
from niclab.model.bench.kselftest import PLUGIN, KselftestOptions
from niclab.model.kernel_choice import KernelChoice
from niclab.model.scenario import ScenarioError, parse
from niclab.model.selftests import SelftestBundle, kernel_problem

PING_KTAP = """TAP version 13
1..3
ok 1 ping.test_v4
ok 2 ping.test_v6 # SKIP Test requires IPv6 connectivity
ok 3 ping.test_tcp
# Totals: pass:2 fail:0 xfail:0 xpass:0 skip:1 error:0
"""
STATS_KTAP = """TAP version 13
1..2
ok 1 stats.check_pause # XFAIL pause not supported by the device
ok 2 stats.pkt_byte_sum # SKIP qstats not supported by the device
"""
FAILED_KTAP = """KTAP version 1
1..3
ok 1 stats.check_fec # XFAIL FEC not supported by the device
# Check| At /opt/niclab-kselftest/drivers/net/./stats.py, line 29, in check_pause:
# Check|     ksft_true(data['stats'], "driver does not report stats")
# Check failed {} does not eval to True driver does not report stats
not ok 2 stats.check_pause
ok 3 stats.pkt_byte_sum # SKIP qstats not supported by the device
"""


@dataclass
class Guest:
    """A node that answers by the program a command runs; `dies_on` makes a program kill the guest."""

    name: str
    answers: dict[str, tuple[int, str]] = field(default_factory=dict)  # test program -> (exit, output)
    dmesg: dict[str, list[str]] = field(default_factory=dict)  # test program -> the kernel's lines during it
    dies_on: str | None = None
    commands: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    dead: bool = False
    last: str = ""

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        assert isinstance(command, str)
        if self.dead:
            raise NodeGone(f"node {self.name} is gone")
        self.commands.append(command)
        found = re.search(r"timeout -s KILL \d+ \./(\S+)", command)
        if found:
            self.last = program = found[1]
            if program == self.dies_on:
                self.dead = True
                raise NodeGone(f"node {self.name} is gone")
            code, out = self.answers.get(program, (0, ""))
            return CommandResult(self.name, ("/bin/sh", "-c", command), code, out, "", 1.5)
        if command.startswith("dmesg"):
            lines = self.dmesg.get(self.last, [])
            return CommandResult(self.name, ("/bin/sh", "-c", command), 0, "\n".join(lines) + "\n", "", 0.1)
        return CommandResult(self.name, ("/bin/sh", "-c", command), 0, "", "", 0.1)

    def spawn(self, command):  # pragma: no cover - not used by the plug-in
        raise AssertionError("kselftest spawns nothing")

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = data

    def get(self, path: str) -> bytes:
        return b"ssh-ed25519 AAAA niclab" if path.endswith(".pub") else self.files[path]


def bundle(tmp_path: Path, tests: list[tuple[str, str]]) -> SelftestBundle:
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    return SelftestBundle(archive, "Debian trixie linux-source-6.12 6.12.107-1", "6.12.107", tuple(tests))


@dataclass
class Rig:
    tmp_path: Path
    client: Guest
    server: Guest
    the_bundle: SelftestBundle
    boots: int = 0
    raw: dict[str, str] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    accel: str = "tcg"
    addresses6: tuple[str | None, str | None] = ("2001:2::1", "2001:2::2")

    def ends(self) -> Endpoints:
        return Endpoints(
            self.client, self.server, "198.18.0.1", "198.18.0.2", 0, None, "link0", "link0", *self.addresses6
        )

    def restart(self) -> Endpoints:
        self.boots += 1
        self.client = Guest("a", self.client.answers, self.client.dmesg, None)
        self.server = Guest("b")
        return self.ends()

    def save_raw(self, name: str, text: str) -> Path:
        self.raw[name] = text
        return self.tmp_path / name

    def ctx(self) -> BenchContext:
        return BenchContext(
            self.ends(),
            self.save_raw,
            self.said.append,
            selftests=lambda node: self.the_bundle,
            restart=self.restart,
            gone=lambda: {"a": "QEMU exited (the guest panicked)"} if self.client.dead else {},
            console=lambda node: (
                "[ 5.0] sysrq: Trigger a crash\n[ 5.1] Kernel panic - not syncing: sysrq triggered crash\n"
            ),
            journal=self.tmp_path / "kselftest.attempted",
            accel=self.accel,
        )


def outcomes(found) -> dict[tuple[str, str | None], Outcome]:
    return {(o.test, o.subtest): o for o in found if isinstance(o, Outcome)}


def counts(found) -> dict[str, float]:
    return {m.metric: m.value for m in found if isinstance(m, Measurement)}


PANIC = "[ 5.0] sysrq: Trigger a crash\n[ 5.1] Kernel panic - not syncing: sysrq triggered crash\n"
TESTS = [("drivers/net", "ping.py"), ("drivers/net", "stats.py"), ("drivers/net/hw", "csum.py")]


def test_each_program_and_subtest_gets_its_result_and_reason(tmp_path):
    client = Guest("a", answers={"ping.py": (0, PING_KTAP), "stats.py": (4, STATS_KTAP)})
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    found = PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"]))
    got = outcomes(found)
    assert got[("ping.py", None)].result == "pass"
    assert got[("ping.py", None)].seconds == 1.5
    assert got[("ping.py", "ping.test_v6")].result == "skip"
    assert got[("ping.py", "ping.test_v6")].reason == "Test requires IPv6 connectivity"
    assert got[("stats.py", None)].result == "skip"
    assert got[("stats.py", None)].reason == "stats.check_pause: pause not supported by the device"
    assert got[("stats.py", "stats.check_pause")].result == "xfail"
    assert ("csum.py", None) not in got  # drivers/net/hw was not asked for
    assert counts(found) == {"passed": 1, "failed": 0, "skipped": 1, "xfailed": 0, "crashed": 0}
    assert (tmp_path / "kselftest.attempted").read_text() == "drivers/net:ping.py\ndrivers/net:stats.py\n"


def test_the_tests_run_on_the_client_with_the_server_as_their_ssh_remote(tmp_path):
    client, server = Guest("a"), Guest("b")
    rig = Rig(tmp_path, client, server, bundle(tmp_path, TESTS))
    PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"]))
    config = client.files["/opt/niclab-kselftest/drivers/net/net.config"].decode()
    assert config.splitlines() == [
        "NETIF=link0",
        "LOCAL_V4=198.18.0.1",
        "REMOTE_V4=198.18.0.2",
        "LOCAL_V6=2001:2::1",  # the link is dual-stack: the tests' IPv6 cases run
        "REMOTE_V6=2001:2::2",
        "REMOTE_TYPE=ssh",
        "REMOTE_ARGS=root@198.18.0.2",
    ]
    assert server.files["/root/.ssh/authorized_keys"] == b"ssh-ed25519 AAAA niclab"
    assert any("sshd-up" in c for c in server.commands)
    [test] = [c for c in client.commands if "./ping.py" in c]
    assert "KSFT_MACHINE_SLOW=yes" in test  # under TCG
    assert "cd /opt/niclab-kselftest/drivers/net" in test
    assert not any("./stats.py" in c for c in client.commands)


@pytest.mark.parametrize(
    ("family", "ends", "config"),
    [
        (4, ("198.18.0.1", "198.18.0.2"), ["LOCAL_V4=198.18.0.1", "REMOTE_V4=198.18.0.2"]),
        (6, ("2001:2::1", "2001:2::2"), ["LOCAL_V6=2001:2::1", "REMOTE_V6=2001:2::2"]),
    ],
)
def test_a_family_gives_the_selftests_that_familys_addresses_only(tmp_path, family, ends, config):
    """Without family they get both, and their own traffic goes over IPv6 (their env's default); family: 4
    keeps it on IPv4, and the tests that need IPv6 skip (and the other way round)."""
    client = Guest("a")
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    ctx = rig.ctx()
    ctx = replace(ctx, ends=replace(ctx.ends, client_address=ends[0], server_address=ends[1]))
    PLUGIN.run(ctx, KselftestOptions(targets=["drivers/net"], tests=["ping.py"], family=family))
    written = client.files["/opt/niclab-kselftest/drivers/net/net.config"].decode().splitlines()
    assert [line for line in written if "_V" in line] == config
    assert f"REMOTE_ARGS=root@{ends[1]}" in written  # ssh to the server over that family too


def test_a_link_without_ipv6_gives_the_selftests_no_v6_addresses(tmp_path):
    client = Guest("a")
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS), addresses6=(None, None))
    PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"]))
    assert "_V6" not in client.files["/opt/niclab-kselftest/drivers/net/net.config"].decode()


def test_a_program_that_kills_the_guest_is_a_crash_and_the_next_runs_after_a_reboot(tmp_path):
    client = Guest("a", answers={"stats.py": (0, "ok 1 stats.pkt_byte_sum\n")}, dies_on="ping.py")
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    found = PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"]))
    got = outcomes(found)
    crash = got[("ping.py", None)]
    assert crash.result == "crash"
    assert crash.reason == "Kernel panic - not syncing: sysrq triggered crash"
    assert "sysrq: Trigger a crash" in crash.console[0]
    assert rig.boots == 1
    assert got[("stats.py", None)].result == "pass"  # on the new boot
    assert "/opt/niclab-kselftest/drivers/net/net.config" in rig.client.files  # set up again
    assert counts(found)["crashed"] == 1
    # the journal names the crashing test before the reboot, then the next
    assert (tmp_path / "kselftest.attempted").read_text().splitlines() == [
        "drivers/net:ping.py",
        "drivers/net:stats.py",
    ]


def test_an_oops_in_the_kernel_log_is_a_crash_even_when_the_guest_lives_on(tmp_path):
    client = Guest(
        "a", dmesg={"ping.py": ["[ 9.1] BUG: kernel NULL pointer dereference", "[ 9.2] RIP: 0010:e1000_xmit"]}
    )
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"])))
    assert got[("ping.py", None)].result == "crash"
    assert got[("ping.py", None)].reason == "BUG: kernel NULL pointer dereference"
    assert got[("ping.py", None)].dmesg[0].endswith("NULL pointer dereference")


@pytest.mark.parametrize(
    ("accel", "reason"),
    [
        ("kvm", "timeout after 5 s"),
        ("tcg", "timeout after 5 s under TCG (the benchmark's `timeout:` gives each program more)"),
        ("mixed", "timeout after 5 s under TCG (the benchmark's `timeout:` gives each program more)"),
    ],
)
def test_a_timeout_is_a_failure_that_says_so_and_under_tcg_how_to_give_more_time(tmp_path, accel, reason):
    client = Guest("a", answers={"ping.py": (137, "ok 1 ping.test_v4\n")})
    client.run = _slow(client.run)  # type: ignore[method-assign]
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS), accel=accel)
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"], timeout=5)))
    assert got[("ping.py", None)].result == "fail"
    assert got[("ping.py", None)].reason == reason


@pytest.mark.parametrize(("accel", "slow"), [("kvm", False), ("tcg", True), ("mixed", True)])
def test_a_rig_with_any_node_under_tcg_is_a_slow_machine_to_the_tests(tmp_path, accel, slow):
    client = Guest("a")
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS), accel=accel)
    PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"]))
    [test] = [c for c in client.commands if "./ping.py" in c]
    assert ("KSFT_MACHINE_SLOW=yes" in test) == slow


def _slow(run):
    def slow(command, timeout=60.0, check=True):
        result = run(command, timeout, check)
        if "./ping.py" in command:
            return CommandResult(result.node, result.argv, result.returncode, result.stdout, "", 5.2)
        return result

    return slow


def test_a_test_the_bundle_lacks_is_named_with_a_suggestion(tmp_path):
    rig = Rig(tmp_path, Guest("a"), Guest("b"), bundle(tmp_path, TESTS))
    with pytest.raises(BenchmarkError, match=r"have no pnig\.py in drivers/net; did you mean 'ping\.py'"):
        PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["pnig.py"]))


SCENARIO = """
name: selftests
nodes: [a, b]
kernel: {kernel}
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - kselftest: {{targets: [drivers/net], tests: [ping.py]}}
"""


def test_a_kernel_without_the_tests_is_refused_before_boot():
    parse(SCENARIO.format(kernel="trixie"), "s.yaml")
    with pytest.raises(ScenarioError) as refused:
        parse(SCENARIO.format(kernel="bookworm"), "s.yaml")
    [line] = refused.value.lines()
    assert line.startswith("s.yaml:9:")
    assert "kernel bookworm (Debian 12's kernel 6.1)" in line and "has no drivers/net selftests" in line
    assert "use kernel: trixie" in line


def test_kernel_problem_of_a_build_tree_looks_for_the_targets(tmp_path):
    (tmp_path / "tools/testing/selftests/drivers/net").mkdir(parents=True)
    (tmp_path / "tools/testing/selftests/drivers/net/Makefile").write_text("")
    tree = KernelChoice(build=str(tmp_path))
    assert kernel_problem(tree, ("drivers/net",)) is None
    assert "has no drivers/net/hw selftests" in (kernel_problem(tree, ("drivers/net", "drivers/net/hw")) or "")


def test_unknown_target_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown target 'drivers/nte'; did you mean 'drivers/net'"):
        KselftestOptions(targets=["drivers/nte"])


def test_a_lost_agent_without_a_dead_guest_is_no_crash_but_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(kselftest, "GONE_WAIT_S", 0.1)
    client = Guest("a")
    client.run = _failing(client.run)  # type: ignore[method-assign]
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"])))
    assert got[("ping.py", None)].result == "fail" and "timed out after 105 s" in got[("ping.py", None)].reason
    assert rig.boots == 1  # a clean boot for what comes next


def _failing(run):
    def failing(command, timeout=60.0, check=True):
        if "./ping.py" in command:
            raise GuestCommandError("a: `ping.py` timed out after 105 s")
        return run(command, timeout, check)

    return failing


def test_a_failed_subtest_says_what_check_failed(tmp_path):
    client = Guest("a", answers={"stats.py": (1, FAILED_KTAP)})
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["stats.py"])))
    why = "Check failed {} does not eval to True driver does not report stats"
    assert got[("stats.py", None)].result == "fail"
    assert got[("stats.py", None)].reason == f"stats.check_pause: {why}"
    assert got[("stats.py", "stats.check_pause")].reason == why


class Dying(Guest):
    """A guest that dies in every test program it runs."""

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        if "timeout -s KILL" in command and not self.dead:
            self.dead = True
            raise NodeGone(f"node {self.name} is gone")
        return super().run(command, timeout, check)


def test_after_the_last_reboot_a_crash_stops_the_run_and_keeps_what_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(kselftest, "MAX_RESTARTS", 1)
    rig = Rig(tmp_path, Dying("a"), Guest("b"), bundle(tmp_path, TESTS))

    def restart() -> Endpoints:
        rig.boots += 1
        rig.client = Dying("a")
        return rig.ends()

    rig.restart = restart  # type: ignore[method-assign]
    with pytest.raises(
        PartialRun, match=r"stats\.py: it crashed the guest; 0 test\(s\) not run \(after 1 reboots\)"
    ) as stopped:
        PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"]))
    got = outcomes(stopped.value.found)
    assert got[("ping.py", None)].result == "crash" and got[("stats.py", None)].result == "crash"
    assert counts(stopped.value.found)["crashed"] == 2


def test_a_program_that_never_lets_go_of_a_live_guest_fails_and_the_rig_boots_anew(tmp_path, monkeypatch):
    monkeypatch.setattr(kselftest, "GONE_WAIT_S", 0.1)
    client = Guest("a", answers={"stats.py": (0, "ok 1 stats.pkt_byte_sum\n")})
    client.run = _failing(client.run)  # type: ignore[method-assign]
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"])))
    assert got[("ping.py", None)].result == "fail"
    assert got[("ping.py", None)].reason.startswith("no end within 105 s, the guest alive")
    assert rig.boots == 1 and got[("stats.py", None)].result == "pass"


def test_an_oops_keeps_its_trace_from_the_kernels_log(tmp_path):
    trace = [
        "[ 9.0] e1000 0000:00:03.0 link0: reset",
        "[ 9.1] BUG: kernel NULL pointer dereference",
        "[ 9.2] RIP: 0010:e1000_xmit",
        "[ 9.3] Call Trace:",
        "[ 9.4]  <TASK>",
        "[ 9.5]  dev_hard_start_xmit",
    ]
    client = Guest("a", dmesg={"ping.py": trace})
    rig = Rig(tmp_path, client, Guest("b"), bundle(tmp_path, TESTS))
    got = outcomes(PLUGIN.run(rig.ctx(), KselftestOptions(targets=["drivers/net"], tests=["ping.py"])))
    assert got[("ping.py", None)].console == tuple(trace)  # the lines before and the frames after, not just RIP


def test_kselftest_takes_no_peer_self():
    with pytest.raises(ValueError, match="takes no `peer: self`"):
        KselftestOptions(targets=["drivers/net"], peer="self")


def test_counts_of_tests_are_shown_as_whole_numbers():
    from niclab.ui.formats import format_value

    assert (format_value(10.0, "tests"), format_value(3.0, "tests")) == ("10", "3")
    assert format_value(1.5, "tests") == "1.5"  # a mean over repeats keeps its fraction
    assert format_value(10.0, "Mbit/s") == "10.0"
