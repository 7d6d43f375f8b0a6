"""kselftest: the kernel's own NIC driver tests (tools/testing/selftests/drivers/net, drivers/net/hw).

The client node runs them with NETIF its port on the link, the server node is their ssh remote across the
link; each program is journaled before it starts, its KTAP and the kernel's log are kept, and a crash is a
result after which the rig boots anew (docs/benchmarks.md, "The kernel's own driver tests").
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from niclab.base.errors import NiclabError
from niclab.base.node import Node, NodeGone
from niclab.base.problems import Problem, did_you_mean, shown
from niclab.base.text import said
from niclab.model.bench import ktap
from niclab.model.bench.base import (
    BenchContext,
    BenchmarkError,
    BenchOptions,
    Endpoints,
    Measurement,
    MetricInfo,
    PartialRun,
    TestOutcome,
    TestState,
)
from niclab.model.bench.declare import GuestNeeds, Row, Shows
from niclab.model.selftests import TARGETS, SelftestBundle, kernel_problem, raw_name

GUEST_DIR = "/opt/niclab-kselftest"  # where the bundle is unpacked in the client's guest
GUEST_ARCHIVE = "/tmp/niclab-kselftest.tar.gz"  # and where it is put first
ADDON = "kselftest"  # the add-on archive (images/kselftest) with python3, PyYAML, socat and OpenSSH
SSH_KEY = "/root/.ssh/id_ed25519"
SSHD_UP = "/usr/lib/niclab/sshd-up"
EXIT_STATES: dict[int, TestState] = {0: "pass", 4: "skip", 2: "xfail"}  # kselftest's KSFT_* exit codes
CRASH = re.compile(r"\] (?:RIP: |Call Trace:|Kernel panic|BUG: |Oops|general protection fault)")
CONSOLE_LINES = 80  # of a crash's console excerpt
DMESG_LINES = 400  # kept per test program
RUN_SLACK_S = 60  # beyond a program's own limit before niclab gives up on it
GONE_WAIT_S = 15.0  # how long a lost agent may precede its guest's death
MAX_RESTARTS = 3  # boots after crashes in one run; more and the run gives up
SLOW_ACCELS = ("tcg", "mixed")  # a rig with any node under TCG: KSFT_MACHINE_SLOW, and the hint below
TIMEOUT_HINT = " under TCG (the benchmark's `timeout:` gives each program more)"
NO_LIMIT_S = 900  # a program whose target sets no time limit (`timeout=0`) still gets one here
STATES: tuple[TestState, ...] = ("pass", "fail", "skip", "xfail", "crash")
COUNTS = {"pass": "passed", "fail": "failed", "skip": "skipped", "xfail": "xfailed", "crash": "crashed"}


class KselftestOptions(BenchOptions):
    # family: without it the selftests get both of the link's addresses, as netdev's CI gives them (their own
    # traffic then goes over IPv6, their env's default); 4 or 6 gives them that one only (the other's tests skip)
    targets: list[str] = Field(
        default_factory=lambda: ["drivers/net"],
        min_length=1,
        description=f"the selftests' targets to run: {', '.join(TARGETS)}",
    )
    tests: list[str] | None = Field(
        None, min_length=1, description="only these test programs (ping.py, stats.py); all of the targets' if absent"
    )
    timeout: int | None = Field(
        None, ge=5, le=3600, description="seconds per test program (default: its target's own, kselftest's 45)"
    )
    bundle: str | None = Field(
        None,
        description="a directory of installed selftests to run instead of the kernel's (what `make -C "
        "tools/testing/selftests TARGETS=... INSTALL_PATH=DIR install` wrote); relative to the scenario file",
    )

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, value: list[str]) -> list[str]:
        for target in value:
            if target not in TARGETS:
                hint = did_you_mean(target, TARGETS)
                known = f"{hint + ' ' if hint else ''}targets: {', '.join(TARGETS)}"
                raise ValueError(f"unknown target {shown(target)}; {known}")
        return list(dict.fromkeys(value))

    @field_validator("peer")
    @classmethod
    def _no_loopback(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("kselftest tests a link's card: it takes no `peer: self`")
        return value

    @field_validator("bundle")
    @classmethod
    def _relative_to_scenario(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or Path(value).is_absolute():
            return value
        base = (info.context or {}).get("base")
        return str(Path(base) / value) if base is not None else str(Path(value).absolute())


class Kselftest:
    name: ClassVar[str] = "kselftest"
    Options: ClassVar[type[KselftestOptions]] = KselftestOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(addons=(ADDON,))
    shows: ClassVar[Shows] = Shows(
        rows=(Row("kselftest.passed", "selftests passed"), Row("kselftest.failed", "selftests failed"))
    )

    def metrics(self) -> list[MetricInfo]:
        return [
            MetricInfo(f"kselftest.{word}", "tests", f"test programs that ended {state}", better)
            for state, word, better in (
                ("pass", "passed", "higher"),
                ("fail", "failed", "lower"),
                ("skip", "skipped", None),
                ("xfail", "xfailed", None),
                ("crash", "crashed", "lower"),
            )
        ]

    def describe(self, options: KselftestOptions) -> str:
        return f"kselftest {' '.join(options.targets)}"

    def estimate_seconds(self, options: KselftestOptions) -> float:
        return 30.0 + 20.0 * (len(options.tests) if options.tests else 6 * len(options.targets))

    def problems(self, options: KselftestOptions, kernel: object) -> list[Problem]:
        """Why the client's kernel (a KernelChoice, None for the image's own) cannot run the tests: before boot."""
        if options.bundle is not None:
            return []
        why = kernel_problem(kernel, tuple(options.targets))  # type: ignore[arg-type]
        return [Problem((), why)] if why else []

    def run(self, ctx: BenchContext, options: KselftestOptions) -> list[Measurement | TestOutcome]:
        if ctx.selftests is None:
            raise BenchmarkError("kselftest runs only where the session gives the kernel's selftests")
        bundle = ctx.selftests(ctx.ends.client.name)
        tests = _chosen(bundle, options)
        outcomes: list[TestOutcome] = []
        ends = ctx.ends
        _prepare(ctx, ends, bundle, options)
        restarts = 0
        run_token = secrets.token_hex(4)  # the kernel's log keeps earlier runs' markers: this run's are its own
        for number, (target, test) in enumerate(tests, start=1):
            try:
                _journal(ctx.journal, f"{target}:{test}")
                ctx.progress(f"kselftest {number}/{len(tests)}: {target} {test}")
                found, reboot = _run_one(ctx, ends, bundle, options, target, test, f"{run_token}.{number}")
                outcomes += found
                if reboot:
                    if ctx.restart is None or restarts >= MAX_RESTARTS:
                        left = len(tests) - number
                        after = "no reboot here" if ctx.restart is None else f"after {restarts} reboots"
                        raise NodeGone(f"{target} {test}: {reboot}; {left} test(s) not run ({after})")
                    restarts += 1
                    ctx.progress(f"kselftest: {target} {test}: {reboot}: booting the rig anew")
                    ends = ctx.restart()
                    _prepare(ctx, ends, bundle, options)
            except NiclabError as exc:  # what ran so far is a result too: the runner records it and the error
                if not outcomes:
                    raise
                raise PartialRun(str(exc), [*_counts(outcomes), *outcomes]) from exc
        return [*_counts(outcomes), *outcomes]


def _chosen(bundle: SelftestBundle, options: KselftestOptions) -> list[tuple[str, str]]:
    """The bundle's tests of the options' targets, only those `tests` names (each must be there)."""
    targets = tuple(options.targets)
    if options.tests and (missing := bundle.missing_tests(targets, options.tests)):
        _, hint = missing[0]
        have = sorted({test for _, test in bundle.of(targets)})
        raise BenchmarkError(
            f"the selftests from {bundle.source} have no {', '.join(n for n, _ in missing)} in {', '.join(targets)}"
            + (f"; {hint}" if hint else f"; they have {', '.join(have)}")
        )
    chosen = list(bundle.select(targets, options.tests or ()))
    if not chosen:
        raise BenchmarkError(f"the selftests from {bundle.source} have no tests in {', '.join(targets)}")
    return chosen


def _journal(path: Path | None, line: str) -> None:
    """Note the test before it starts, on disk (fsync): what a crash of anything leaves behind."""
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def _prepare(ctx: BenchContext, ends: Endpoints, bundle: SelftestBundle, options: KselftestOptions) -> None:
    """Unpack the selftests on the client, let the client reach the server over ssh, write net.config."""
    client, server = ends.client, ends.server
    client.put(GUEST_ARCHIVE, bundle.archive.read_bytes())
    client.run(
        f"rm -rf {GUEST_DIR} && mkdir -p {GUEST_DIR} && tar -xzf {GUEST_ARCHIVE} -C {GUEST_DIR} "
        f"&& rm -f {GUEST_ARCHIVE}",
        timeout=120,
    )
    client.run(
        f"mkdir -p /root/.ssh && chmod 700 /root/.ssh && "
        f"{{ [ -f {SSH_KEY} ] || ssh-keygen -q -t ed25519 -N '' -f {SSH_KEY}; }}",
        timeout=120,
    )
    public = client.get(f"{SSH_KEY}.pub")
    server.run("mkdir -p /root/.ssh && chmod 700 /root/.ssh", timeout=30)
    server.put("/root/.ssh/authorized_keys", public, mode=0o600)
    server.run(SSHD_UP, timeout=120)
    remote = f"root@{ends.server_address}"
    reach = client.run(
        "i=0; while [ $i -lt 30 ]; do ssh -q -o ConnectTimeout=5 " + shlex.quote(remote) + " true && exit 0; "
        "i=$((i+1)); sleep 1; done; exit 1",
        timeout=240,
        check=False,
    )
    if not reach.ok:
        raise BenchmarkError(
            f"{client.name} cannot reach {server.name} over ssh ({remote}) for the selftests' remote end: "
            f"{said(reach.stderr or reach.stdout)}"
        )
    config = "\n".join(
        [
            f"NETIF={ends.client_ifname}",
            *([f"LOCAL_V4={ends.client_address}", f"REMOTE_V4={ends.server_address}"] if ends.family == 4 else []),
            *(
                [f"LOCAL_V6={ends.client_address6}", f"REMOTE_V6={ends.server_address6}"]
                if options.family != 4 and ends.client_address6 and ends.server_address6
                else []
            ),
            "REMOTE_TYPE=ssh",
            f"REMOTE_ARGS={remote}",
            "",
        ]
    )
    for target in options.targets:
        client.put(f"{GUEST_DIR}/{target}/net.config", config.encode())


def _script(target: str, test: str, seconds: int, marker: str, slow: bool) -> str:
    env = "PYTHONUNBUFFERED=1 HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin"
    env += " KSFT_MACHINE_SLOW=yes" if slow else ""
    return (
        f"echo {shlex.quote('<6>' + marker)} > /dev/kmsg; "
        f"cd {shlex.quote(GUEST_DIR + '/' + target)} && "
        f"env {env} timeout -s KILL {seconds} ./{shlex.quote(test)} 2>&1"
    )


def _run_one(
    ctx: BenchContext,
    ends: Endpoints,
    bundle: SelftestBundle,
    options: KselftestOptions,
    target: str,
    test: str,
    number: str,
) -> tuple[list[TestOutcome], str | None]:
    """One test program and its subtests; why the rig must boot anew before the next (a crash), or None."""
    client = ends.client
    seconds = options.timeout or bundle.timeout(target) or NO_LIMIT_S  # a target's 0: no limit of its own
    marker = f"niclab: kselftest {number} start {target}:{test}"

    def outcome(subtest: str | None, state: TestState, reason: str, **more: object) -> TestOutcome:
        return TestOutcome(
            "kselftest",
            target,
            test,
            subtest,
            state,
            reason,
            node=client.name,
            remote=ends.server.name,
            tests_from=bundle.source,
            **more,  # type: ignore[arg-type]
        )

    raw = raw_name(target, test)
    try:
        script = _script(target, test, seconds, marker, slow=ctx.accel in SLOW_ACCELS)
        result = client.run(script, timeout=seconds + RUN_SLACK_S, check=False)
    except NiclabError as exc:  # the agent lost, a timeout: a crash if a guest died meanwhile
        dead = _wait_gone(ctx)
        if not dead:  # alive, but the program (or what it left running) never let go: a failure, then a clean boot
            why = f"no end within {seconds + RUN_SLACK_S} s, the guest alive ({exc})"
            ctx.save_raw(raw, f"# {test} ({target}): {why}\n")
            return [outcome(None, "fail", said(why, last=False))], "it did not end"
        console = {node: _excerpt(ctx.console(node)) for node in dead}
        reason = "; ".join(f"{node}: {why}" for node, why in sorted(dead.items()))
        lines = [line for node in sorted(console) for line in console[node]]
        ctx.save_raw(raw, f"# {test} ({target}): the guest died: {reason}\n# {exc}\n" + "\n".join(lines) + "\n")
        return [outcome(None, "crash", _crash_reason(lines, reason), console=tuple(lines))], "it crashed the guest"
    output = result.stdout + result.stderr
    dmesg = _dmesg(client, marker)
    oops = [line for line in dmesg if CRASH.search(line)]
    parsed, left_out = ktap.parse_bounded(output)
    if oops:
        state: TestState = "crash"
        reason = said(oops[0].split("] ", 1)[-1], last=False)
    elif result.returncode in EXIT_STATES:
        state, reason = EXIT_STATES[result.returncode], ""
    elif result.returncode in (124, 137) and result.seconds >= seconds - 1:
        state, reason = "fail", f"timeout after {seconds} s" + (TIMEOUT_HINT if ctx.accel in SLOW_ACCELS else "")
    else:
        state, reason = "fail", f"exit {result.returncode}"
    if state in ("skip", "xfail") or (state == "fail" and not reason.startswith("timeout")):
        reason = _why(parsed, output) or reason
    if left_out:
        reason = f"{reason}; " if reason else ""
        reason += f"{left_out:,} more results than the {ktap.MAX_RESULTS:,} niclab records (in its raw output)"
    shown_dmesg = "\n# the kernel's log meanwhile\n" + "\n".join(dmesg) if dmesg else ""
    head = f"$ {test} ({target}): exit {result.returncode} after {result.seconds:.1f} s"
    ctx.save_raw(raw, f"{head}\n{output}{shown_dmesg}")
    outcomes = [
        outcome(
            None,
            state,
            reason,
            seconds=round(result.seconds, 2),
            dmesg=tuple(dmesg[-DMESG_LINES:]),
            console=tuple(_oops_excerpt(dmesg)),
        )
    ]
    for top in parsed:
        outcomes += [outcome(name, sub.result, sub.reason or _said(sub)) for name, sub in top.walk()]
    return outcomes, ("it oopsed" if state == "crash" else None)


def _wait_gone(ctx: BenchContext) -> dict[str, str]:
    """The guests that died: a panicked guest's agent goes quiet a moment before its QEMU has exited."""
    deadline = time.monotonic() + GONE_WAIT_S
    while not (dead := ctx.gone()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return dead


def _said(test: ktap.KtapResult) -> str:
    """What a failed test printed about its failure: kselftest's `Check failed` line, else its last line."""
    if test.result != "fail":
        return ""
    lines = [line.strip() for line in test.output if line.strip()]
    checks = [line for line in lines if line.startswith("Check failed") or line.startswith("Exception|")]
    return said((checks or lines or [""])[-1], last=False)


def _why(parsed: list[ktap.KtapResult], output: str) -> str:
    """A program's reason: its own SKIP/XFAIL line, or the first failed subtest's, or the last line it printed."""
    walked = [(name, sub) for top in parsed for name, sub in top.walk()]
    for name, sub in walked:  # a failure first: it is what made the program fail
        if sub.result == "fail":
            why = sub.reason or _said(sub)
            return f"{name}: {why}" if why else f"{name} failed"
    for name, sub in walked:
        if sub.result in ("skip", "xfail") and sub.reason:
            return f"{name}: {sub.reason}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return said(lines[-1], last=False) if lines else ""


def _dmesg(node: Node, marker: str) -> list[str]:
    """The kernel's log lines since `marker` (the marker's own line left out)."""
    after = "f; index($0, m) { f = 1 }"  # a fixed string, no pattern: the marker names a path
    result = node.run(f"dmesg | awk -v m={shlex.quote(marker)} {shlex.quote(after)}", timeout=60, check=False)
    return [line for line in result.stdout.splitlines() if "niclab: kselftest " not in line]


def _oops_excerpt(dmesg: list[str]) -> list[str]:
    """An oops's lines of the kernel's log: from a little before its first line, with the trace after it."""
    first = _first(dmesg, lambda line: bool(CRASH.search(line)))
    return [] if first is None else dmesg[max(0, first - 5) :][:CONSOLE_LINES]


def _excerpt(console: str) -> list[str]:
    """A crash's lines of the console: from a little before the first oops or panic line to the end."""
    lines = console.splitlines()
    first = _first(lines, lambda line: _panicked(line) or "sysrq: Trigger a crash" in line)
    return lines[max(0, first - 5) if first is not None else 0 :][-CONSOLE_LINES:]


def _crash_reason(lines: Sequence[str], fallback: str) -> str:
    first = _first(lines, _panicked)
    return fallback if first is None else said(lines[first].split("] ", 1)[-1], last=False)


def _panicked(line: str) -> bool:
    """An oops or panic line, with or without the kernel's time stamp before it."""
    return "Kernel panic" in line or bool(CRASH.search(line))


def _first(lines: Sequence[str], hit: Callable[[str], bool]) -> int | None:
    """The index of the first line `hit` finds, or None."""
    return next((index for index, line in enumerate(lines) if hit(line)), None)


def _counts(outcomes: list[TestOutcome]) -> list[Measurement]:
    programs = [o for o in outcomes if o.subtest is None]
    return [
        Measurement(
            "kselftest",
            None,
            COUNTS[state],
            float(sum(1 for o in programs if o.result == state)),
            "tests",
            headline=state in ("pass", "fail", "crash"),
        )
        for state in STATES
    ]


PLUGIN = Kselftest()
