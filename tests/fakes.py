"""A backend that replays what real guests printed, so the runner and the session run without VMs.

`FakeBackend` implements the Backend protocol (`name`, `realize`) and hands out
`FakeNode`s (the Node protocol: run, spawn, put, get) that answer each guest
command with the CommandResult a real guest gave it, from a replay file that
a `RecordingBackend` wrote around the QEMU backend. Tests add their own
answers and faults on top: a failing realize, a command that raises, a node
that dies.

The replay format (JSON, "format": "niclab-replay/1")::

    {
      "format": "niclab-replay/1",
      "captured": {"scenario": ..., "cell": ..., "at": ..., "niclab_version": ..., "host": {...}},
      "rig": {"nodes": ["a", "b"], "facts": {<the QEMU backend's rig facts>},
              "macs": {"a/0/0": "02:4e:4c:00:00:00", ...}},
      "normalize": [["REGEX", "REPLACEMENT"], ...],
      "calls": [
        {"node": "a", "op": "run", "command": "<the /bin/sh -c text>" or ["argv", ...],
         "timeout": 30.0, "check": false,
         "result": {"returncode": 0, "stdout": "...", "stderr": "", "seconds": 0.2}},
        {"node": "a", "op": "run", ..., "error": {"type": "GuestCommandError", "message": "..."}},
        {"node": "b", "op": "spawn", "command": ..., "events": [{"call": "stop", "result": {...}}]},
        {"node": "a", "op": "put", "path": "/x", "mode": 420, "data_b64": "..."},
        {"node": "a", "op": "get", "path": "/x", "data_b64": "..."},
        ...
      ]
    }

Every call was recorded in the order it was made; any call may also carry
"note" (why it was captured, e.g. a deliberate failure) and "match" (a regex
the command must match in full, for commands that carry run-specific values).

How a command on node N finds its answer, first hit wins:

1. the rules a test added with `FakeBackend.when` (newest first);
2. N's recorded calls of the same op with exactly the same command;
3. the same after the "normalize" substitutions, applied to both sides
   (durations, counts, pids: `-l 5` and `-l 3` both become `-l <seconds>`);
4. N's recorded calls whose "match" regex matches the command in full.

Calls recorded several times with the same command (the NIC counters read
before and after each benchmark, the facts read at the start and the end of a
cell) are answered in the recorded order; past the last one, the last one
repeats. Each realization (each boot: cells that share a rig share one)
starts the replay over.

The capture ran one cell, so it holds no reset (what a cell sharing a rig
runs to undo the previous cell's network): the fake answers it, and the
offload read-back before a plan changes offloads, with an empty success
(`RESET_COMMANDS`), under any rule a test adds; a guest's uptime (netconf.clock) with
the host's clock (`GUEST_CLOCK`): a fake guest keeps time.

A command nothing answers raises `ReplayMiss` and is kept in
`FakeBackend.misses`, so a test can tell a replay gap from the failure it
meant to cause.

Re-capture (boots two e1000 guests under TCG; about 30 s on an idle 2-core host)::

    NICLAB_ACCEL=tcg .venv/bin/python -m tests.fakes capture
    # or: NICLAB_ACCEL=tcg .venv/bin/python bench/capture_replay.py
"""

from __future__ import annotations

import argparse
import base64
import copy
import difflib
import json
import os
import re
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError
from niclab.base.node import CommandResult, GuestCommandError, NodeGone, as_argv
from niclab.model.bench.base import BenchmarkError
from niclab.model.facts import RigFacts
from niclab.model.topology import Topology
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.backends.qemu_cmd import mac_address
from niclab.plumbing.guest import AgentError
from niclab.plumbing.netconf import clock

REPO = Path(__file__).resolve().parents[1]
REPLAY_DIR = Path(__file__).parent / "data" / "replay"
TWO_NODE_E1000 = REPLAY_DIR / "two-node-e1000.json"
FORMAT = "niclab-replay/1"

#: What varies from run to run inside a command, replaced on both sides before the second matching pass.
DEFAULT_NORMALIZE = [
    [r"(?<= -l )\d+(?:\.\d+)?(?= )", "<seconds>"],  # netperf -l SECONDS, iperf3 -l LENGTH
    [r"(?<= -t )\d+(?:\.\d+)?(?= )", "<seconds>"],  # iperf3 -t SECONDS
    [r"(?<= -c )\d+(?= )", "<count>"],  # ping -c COUNT
    [r"(?<= -i )\d+(?:\.\d+)?(?= )", "<interval>"],  # ping -i INTERVAL
    [r"(kill -s [A-Z]+ -?)\d+", r"\1<pid>"],  # signals to a guest process
    [r"/tmp/niclab-[A-Za-z0-9_]+", "/tmp/niclab-<random>"],  # temporary names
]

#: Exception types a recorded call may have raised, by name.
ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls for cls in (GuestCommandError, AgentError, BenchmarkError, NodeGone, NiclabError)
}

KILLED = "process qemu-{node} (pid 1) was killed by signal 9"

#: What netconf runs between cells on a shared rig (reset_script), never captured: answered with success.
RESET_COMMANDS = r"\Aset -e\n(?:tc qdisc del dev \S+ root |ip link del \S+ |by_mac.*\necho '\[port )"

#: netconf.clock's reading of a guest's uptime: a fake guest's clock keeps the host's time (a replayed reading
#: would stand still while the host's clock runs, and fail the check).
GUEST_CLOCK = "\\A" + re.escape(clock.UPTIME) + "\\Z"


def _guest_clock(node: str, command: str) -> str:
    return f"uptime={time.monotonic():.3f}\n"


def captured(data_dir: Path, tool: str, name: str) -> CommandResult:
    """A command's result as captured in the guest (tests/data/TOOL/NAME.json: command, returncode, seconds,
    stdout, stderr)."""
    found = json.loads((data_dir / tool / f"{name}.json").read_text())
    return CommandResult(
        "a",
        ("/bin/sh", "-c", found["command"]),
        found["returncode"],
        found["stdout"],
        found["stderr"],
        found["seconds"],
    )


class ReplayMiss(AssertionError):
    """A guest command that neither the replay nor a test's rule answers."""


def command_text(argv: tuple[str, ...]) -> str:
    """How a command is matched and shown: the shell text of `/bin/sh -c TEXT`, else the argv joined."""
    if len(argv) == 3 and argv[:2] == ("/bin/sh", "-c"):
        return argv[2]
    return shlex.join(argv)


def _stored(argv: tuple[str, ...]) -> str | list[str]:
    return argv[2] if len(argv) == 3 and argv[:2] == ("/bin/sh", "-c") else list(argv)


def result_dict(result: CommandResult) -> dict:
    return {
        "returncode": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "seconds": round(result.seconds, 3),
    }


def make_result(value: Any, node: str, argv: tuple[str, ...]) -> CommandResult:
    """A CommandResult from what a replay or a rule gives: a CommandResult, a dict, or stdout text."""
    if isinstance(value, CommandResult):
        return replace(value, node=node, argv=argv)
    if isinstance(value, str):
        return CommandResult(node, argv, 0, value, "", 0.0)
    if isinstance(value, dict):
        return CommandResult(
            node,
            argv,
            int(value.get("returncode", 0)),
            value.get("stdout", ""),
            value.get("stderr", ""),
            float(value.get("seconds", 0.0)),
        )
    raise TypeError(f"not a command result: {value!r}")


# -- the replay file ---------------------------------------------------------


@dataclass
class Replay:
    calls: list[dict]
    rig: dict
    normalize: list[list[str]] = field(default_factory=lambda: [list(r) for r in DEFAULT_NORMALIZE])
    captured: dict = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, path: Path = TWO_NODE_E1000) -> Replay:
        data = json.loads(Path(path).read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a {FORMAT} file (format {data.get('format')!r})")
        return cls(
            calls=data["calls"],
            rig=data["rig"],
            normalize=data.get("normalize", []),
            captured=data.get("captured", {}),
            path=Path(path),
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "format": FORMAT,
            "captured": self.captured,
            "rig": self.rig,
            "normalize": self.normalize,
            "calls": self.calls,
        }
        path.write_text(json.dumps(data, indent=1) + "\n")

    def normalized(self, text: str) -> str:
        for pattern, replacement in self.normalize:
            text = re.sub(pattern, replacement, text)
        return text

    @staticmethod
    def text_of(call: dict) -> str:
        command = call["command"]
        return command if isinstance(command, str) else shlex.join(command)

    def candidates(self, node: str, op: str, text: str) -> tuple[str, list[dict]]:
        """The recorded calls that answer `text` on `node` (in recorded order), and the key of that group."""
        mine = [c for c in self.calls if c["node"] == node and c["op"] == op and "command" in c]
        exact = [c for c in mine if self.text_of(c) == text]
        if exact:
            return f"exact:{text}", exact
        wanted = self.normalized(text)
        normal = [c for c in mine if self.normalized(self.text_of(c)) == wanted]
        if normal:
            return f"normal:{wanted}", normal
        for call in mine:
            if (pattern := call.get("match")) and re.fullmatch(pattern, text, re.DOTALL):
                return f"match:{pattern}", [c for c in mine if c.get("match") == pattern]
        return "", []

    def nearest(self, node: str, op: str, text: str) -> str:
        texts = [self.text_of(c) for c in self.calls if c["node"] == node and c["op"] == op and "command" in c]
        close = difflib.get_close_matches(text, texts, n=1, cutoff=0.0)
        return close[0] if close else "(nothing recorded)"

    def find(self, pattern: str, node: str | None = None, op: str = "run", note: str | None = None) -> dict:
        """The first recorded call whose command `pattern` finds (re.search), on `node`, with `note` in its note."""
        for call in self.calls:
            if call["op"] != op or (node and call["node"] != node) or "command" not in call:
                continue
            if note is not None and note not in call.get("note", ""):
                continue
            if re.search(pattern, self.text_of(call)):
                return call
        raise KeyError(
            f"no recorded {op} on {node or 'any node'} matches {pattern!r}" + (f" with note {note!r}" if note else "")
        )

    def result(self, pattern: str, node: str | None = None, note: str | None = None) -> CommandResult:
        """What a recorded command printed, as a CommandResult (for a test to give another command)."""
        call = self.find(pattern, node, note=note)
        return make_result(call["result"], call["node"], as_argv(call["command"]))


# -- rules and faults a test adds ----------------------------------------------


@dataclass
class Rule:
    """An answer a test gives to the commands `pattern` finds (re.search), ahead of the replay.

    `call(node, command)` runs first (to look around mid-run, or to answer: a
    non-None return is the result); then `raises` is raised, or `result` (or the
    next of `results`, the last repeating) is returned. A rule with neither
    lets the replay answer. `realization` limits it to one realize (1-based),
    `times` to that many hits.
    """

    pattern: str
    node: str | None = None
    op: str = "run"
    result: Any = None
    results: list | None = None
    raises: BaseException | type[BaseException] | None = None
    call: Callable[[str, str], Any] | None = None
    realization: int | None = None
    times: int | None = None
    hits: int = 0

    def applies(self, node: str, op: str, text: str, realization: int) -> bool:
        return (
            op == self.op
            and (self.node is None or self.node == node)
            and (self.realization is None or self.realization == realization)
            and (self.times is None or self.hits < self.times)
            and re.search(self.pattern, text) is not None
        )


@dataclass
class Death:
    """A node that dies: after `after` commands, or at the first command `on` finds, in realization `realization`."""

    node: str
    after: int | None = None
    on: str | None = None
    realization: int | None = 1
    why: str = ""


@dataclass
class Realization:
    """One realize() of the fake backend: what it was given and what ran on it."""

    index: int
    topology: Topology
    workdir: Path
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, command text)
    counts: dict[str, int] = field(default_factory=dict)  # commands per node
    cursors: dict[tuple[str, str, str], int] = field(default_factory=dict)
    dead: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    def ran(self, node: str | None = None, pattern: str = "") -> list[str]:
        """The commands run (op run or spawn) on `node` (all nodes: None) that `pattern` finds."""
        return [
            text
            for n, op, text in self.calls
            if (node is None or n == node) and op in ("run", "spawn") and re.search(pattern, text)
        ]


class FakeBackend:
    """A Backend whose nodes replay a capture; faults and answers are added per test."""

    name = "fake"

    def __init__(self, replay: Replay | Path | str = TWO_NODE_E1000, accel: str = "tcg", facts: dict | None = None):
        self.replay = replay if isinstance(replay, Replay) else Replay.load(Path(replay))
        self.accel = accel
        self.facts = facts or {}  # added to (or replacing) the rig facts, e.g. {"accel_fallback": "..."}
        self.rules: list[Rule] = [Rule(RESET_COMMANDS, result=""), Rule(GUEST_CLOCK, call=_guest_clock)]
        self.deaths: list[Death] = []
        self.realize_failures: dict[int, BaseException] = {}
        self.realizations: list[Realization] = []
        self.misses: list[str] = []
        self._lock = threading.RLock()

    # -- what a test declares --

    def when(self, pattern: str, *, node: str | None = None, op: str = "run", **answer) -> Rule:
        """Answer the commands `pattern` finds (see Rule): result=, results=, raises=, call=, realization=, times=."""
        rule = Rule(pattern, node, op, **answer)
        self.rules.insert(0, rule)
        return rule

    def fail_realize(self, error: BaseException, at: int = 1) -> None:
        """The `at`-th realize (1-based: the `at`-th cell) raises `error` before any node exists."""
        self.realize_failures[at] = error

    def kill(
        self,
        node: str,
        *,
        after: int | None = None,
        on: str | None = None,
        realization: int | None = 1,
        why: str | None = None,
    ) -> Death:
        """Declare `node` dead after `after` commands, or at the first command that `on` finds.

        The command that kills it raises AgentError (the agent's connection reset),
        so does every later one; `Rig.gone()` then reports
        "process qemu-NODE (pid 1) was killed by signal 9" (or `why`).
        """
        if (after is None) == (on is None):
            raise ValueError("give exactly one of after= and on=")
        death = Death(node, after, on, realization, why or KILLED.format(node=node))
        self.deaths.append(death)
        return death

    # -- the Backend protocol --

    @contextmanager
    def realize(self, topology: Topology, workdir: Path, progress: Callable[[str], None]) -> Iterator[Rig]:
        with self._lock:
            index = len(self.realizations) + 1
            realization = Realization(index, topology, workdir)
            self.realizations.append(realization)
        workdir.mkdir(parents=True, exist_ok=True)
        if (error := self.realize_failures.get(index)) is not None:
            realization.closed = True
            raise copy.copy(error)
        names = [spec.name for spec in topology.nodes]
        source = self.replay.path.name if self.replay.path else "a replay"
        progress(f"booting {len(names)} guests (fake: replaying {source})")
        facts = {
            **self.replay.rig.get("facts", {}),
            "backend": self.name,
            "accel": self.accel,
            "accel_reason": f"replayed from {source}",
            "agent_ready_s": {n: 0.0 for n in names},
            "accel_fallback": None,
            **self.facts,
        }
        try:
            yield Rig(
                topology=topology,
                nodes={name: FakeNode(name, self, realization) for name in names},
                macs={
                    port.key: mac_address(spec.index, port.link, port.lane)
                    for spec in topology.nodes
                    for port in spec.ports
                },
                facts=RigFacts.model_validate(facts),
                # a stopped rig's guests are all gone, as a real QEMU's are once the backend ended it
                gone=lambda: (
                    {n: "stopped by the backend" for n in names} if realization.closed else dict(realization.dead)
                ),
            )
        finally:
            realization.closed = True

    # -- answering --

    def _enter(self, realization: Realization, node: str, op: str, text: str) -> None:
        """Count the command; raise AgentError if the node is dead or dies now."""
        with self._lock:
            realization.calls.append((node, op, text))
            if node in realization.dead:
                raise AgentError(f"{node}: the guest agent closed the connection")
            count = realization.counts[node] = realization.counts.get(node, 0) + 1
            for death in self.deaths:
                if death.node != node or death.realization not in (None, realization.index):
                    continue
                if (death.after is not None and count > death.after) or (
                    death.on is not None and re.search(death.on, text)
                ):
                    realization.dead[node] = death.why
                    raise AgentError(f"{node}: lost the guest agent connection ([Errno 104] Connection reset by peer)")

    def _check_alive(self, realization: Realization, node: str) -> None:
        if node in realization.dead:
            raise AgentError(f"{node}: the guest agent closed the connection")

    def _rule(self, realization: Realization, node: str, op: str, text: str, argv: tuple[str, ...]):
        """What a test's rule says: ("result", value), ("replay", None) or None when no rule applies."""
        with self._lock:
            rule = next((r for r in self.rules if r.applies(node, op, text, realization.index)), None)
            if rule is None:
                return None
            rule.hits += 1
            hit = rule.hits
        if rule.call is not None:
            answer = rule.call(node, text)
            if answer is not None:
                return ("result", answer)
        if rule.raises is not None:
            error = rule.raises
            raise error() if isinstance(error, type) else copy.copy(error)
        if rule.results:
            return ("result", rule.results[min(hit, len(rule.results)) - 1])
        if rule.result is not None:
            return ("result", rule.result)
        return ("replay", None)

    def _recorded(self, realization: Realization, node: str, op: str, text: str) -> dict:
        key, found = self.replay.candidates(node, op, text)
        if not found:
            message = (
                f"{node}: no recorded {op} answers {text[:300]!r}; the nearest recorded: "
                f"{self.replay.nearest(node, op, text)[:300]!r}"
            )
            with self._lock:
                self.misses.append(message)
            raise ReplayMiss(message)
        with self._lock:
            n = realization.cursors.get((node, op, key), 0)
            realization.cursors[(node, op, key)] = n + 1
        return found[min(n, len(found) - 1)]

    def answer_run(self, realization: Realization, node: str, argv: tuple[str, ...]) -> CommandResult:
        text = command_text(argv)
        self._enter(realization, node, "run", text)
        ruled = self._rule(realization, node, "run", text, argv)
        if ruled is not None and ruled[0] == "result":
            return make_result(ruled[1], node, argv)
        call = self._recorded(realization, node, "run", text)
        if "error" in call:
            raise ERRORS.get(call["error"]["type"], GuestCommandError)(call["error"]["message"])
        return make_result(call["result"], node, argv)

    def answer_spawn(self, realization: Realization, node: str, argv: tuple[str, ...]) -> FakeProcess:
        text = command_text(argv)
        self._enter(realization, node, "spawn", text)
        ruled = self._rule(realization, node, "spawn", text, argv)
        if ruled is not None and ruled[0] == "result":
            value = ruled[1]
            events = value if isinstance(value, list) else [{"call": "stop", "result": value}]
            return FakeProcess(self, realization, node, argv, events)
        call = self._recorded(realization, node, "spawn", text)
        return FakeProcess(self, realization, node, argv, call.get("events", []))

    def answer_get(self, realization: Realization, node: str, path: str) -> bytes:
        self._enter(realization, node, "get", path)
        ruled = self._rule(realization, node, "get", path, (path,))
        if ruled is not None and ruled[0] == "result":
            return ruled[1] if isinstance(ruled[1], bytes) else str(ruled[1]).encode()
        for call in self.replay.calls:
            if call["node"] == node and call["op"] == "get" and call["path"] == path:
                if "error" in call:
                    raise ERRORS.get(call["error"]["type"], GuestCommandError)(call["error"]["message"])
                return base64.b64decode(call.get("data_b64", ""))
        message = f"{node}: no recorded get of {path}"
        self.misses.append(message)
        raise ReplayMiss(message)

    def answer_put(self, realization: Realization, node: str, path: str) -> None:
        self._enter(realization, node, "put", path)
        self._rule(realization, node, "put", path, (path,))


class FakeProcess:
    """A replayed background command: running until stopped or waited for, then what the real one printed."""

    def __init__(
        self, backend: FakeBackend, realization: Realization, node: str, argv: tuple[str, ...], events: list[dict]
    ):
        self._backend, self._realization, self.node, self.argv = backend, realization, node, argv
        self._events = events
        self._result: CommandResult | None = None

    def _event(self, *calls: str) -> CommandResult | None:
        for wanted in calls:
            for event in self._events:
                if event.get("call") == wanted and event.get("result") is not None:
                    return make_result(event["result"], self.node, self.argv)
        return None

    def poll(self) -> CommandResult | None:
        self._backend._check_alive(self._realization, self.node)
        if self._result is None and (
            self._events and self._events[0].get("call") == "poll" and self._events[0].get("result") is not None
        ):
            self._result = self._event("poll")  # it had already exited when it was first polled
        return self._result

    def wait(self, timeout: float) -> CommandResult:
        self._backend._check_alive(self._realization, self.node)
        if self._result is None:
            self._result = self._event("wait", "stop") or CommandResult(self.node, self.argv, 0, "", "", 0.0)
        return self._result

    def stop(self, grace: float = 5.0) -> CommandResult:
        self._backend._check_alive(self._realization, self.node)
        if self._result is None:
            self._result = self._event("stop", "wait") or CommandResult(self.node, self.argv, 143, "", "", 0.0)
        return self._result


class FakeNode:
    """A Node whose commands are answered by its FakeBackend (a test's rules, then the replay)."""

    def __init__(self, name: str, backend: FakeBackend, realization: Realization):
        self.name = name
        self._backend = backend
        self._realization = realization

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        result = self._backend.answer_run(self._realization, self.name, as_argv(command))
        return result.check() if check else result

    def spawn(self, command) -> FakeProcess:
        return self._backend.answer_spawn(self._realization, self.name, as_argv(command))

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._backend.answer_put(self._realization, self.name, path)

    def get(self, path: str) -> bytes:
        return self._backend.answer_get(self._realization, self.name, path)


# -- recording a real session --------------------------------------------------


class Recorder:
    """Every Node call of a real session, in the order made, for the replay file."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.rig: dict = {}
        self._lock = threading.Lock()
        self.note = ""  # attached to the calls recorded while it is set

    def add(self, entry: dict) -> dict:
        if self.note:
            entry["note"] = self.note
        with self._lock:
            self.calls.append(entry)
        return entry


def _error_dict(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


class RecordingProcess:
    def __init__(self, inner, entry: dict):
        self._inner, self._entry = inner, entry
        self._entry["events"] = []

    def _record(self, name: str, do: Callable[[], CommandResult | None]) -> CommandResult | None:
        try:
            result = do()
        except Exception as exc:
            self._entry["events"].append({"call": name, "error": _error_dict(exc)})
            raise
        self._entry["events"].append({"call": name, "result": result_dict(result) if result is not None else None})
        return result

    def poll(self) -> CommandResult | None:
        return self._record("poll", self._inner.poll)

    def wait(self, timeout: float) -> CommandResult:
        return self._record("wait", lambda: self._inner.wait(timeout))

    def stop(self, *args, **kwargs) -> CommandResult:
        return self._record("stop", lambda: self._inner.stop(*args, **kwargs))


class RecordingNode:
    """A Node that delegates to a real one (AgentNode) and records each call with what it gave."""

    def __init__(self, inner, recorder: Recorder):
        self._inner = inner
        self._recorder = recorder
        self.name = inner.name

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        argv = as_argv(command)
        entry = self._recorder.add(
            {"node": self.name, "op": "run", "command": _stored(argv), "timeout": timeout, "check": check}
        )
        try:
            result = self._inner.run(command, timeout=timeout, check=False)
        except Exception as exc:
            entry["error"] = _error_dict(exc)
            raise
        entry["result"] = result_dict(result)
        return result.check() if check else result

    def spawn(self, command) -> RecordingProcess:
        argv = as_argv(command)
        entry = self._recorder.add({"node": self.name, "op": "spawn", "command": _stored(argv)})
        try:
            process = self._inner.spawn(command)
        except Exception as exc:
            entry["error"] = _error_dict(exc)
            raise
        return RecordingProcess(process, entry)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        entry = self._recorder.add(
            {"node": self.name, "op": "put", "path": path, "mode": mode, "data_b64": base64.b64encode(data).decode()}
        )
        try:
            self._inner.put(path, data, mode)
        except Exception as exc:
            entry["error"] = _error_dict(exc)
            raise

    def get(self, path: str) -> bytes:
        entry = self._recorder.add({"node": self.name, "op": "get", "path": path})
        try:
            data = self._inner.get(path)
        except Exception as exc:
            entry["error"] = _error_dict(exc)
            raise
        entry["data_b64"] = base64.b64encode(data).decode()
        return data


class RecordingBackend:
    """Wraps a real backend: its nodes become RecordingNodes, its rig's facts and MACs are kept."""

    def __init__(self, inner, recorder: Recorder | None = None):
        self.inner = inner
        self.name = inner.name
        self.recorder = recorder or Recorder()

    @contextmanager
    def realize(self, topology: Topology, workdir: Path, progress) -> Iterator[Rig]:
        with self.inner.realize(topology, workdir, progress) as rig:
            self.recorder.rig = {
                "nodes": list(rig.nodes),
                "facts": rig.facts.model_dump(mode="json", by_alias=True, exclude_unset=True),
                "macs": {"/".join(map(str, key)): mac for key, mac in rig.macs.items()},
            }
            yield Rig(
                topology=rig.topology,
                macs=rig.macs,
                facts=rig.facts,
                gone=rig.gone,
                nodes={name: RecordingNode(node, self.recorder) for name, node in rig.nodes.items()},
            )


def capture(
    scenario: Path = REPO / "scenarios" / "two-node.yaml",
    out: Path = TWO_NODE_E1000,
    cheap_extras: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Replay:
    """Boot the scenario's first cell for real, run its benchmarks (and iperf3, ping, one failing netperf),
    and write every guest call with its result to `out`."""
    from niclab import __version__
    from niclab.model.scenario import load_scenario
    from niclab.plumbing.backends.qemu import QemuBackend
    from niclab.plumbing.facts import host_facts
    from niclab.run.results import utc_now
    from niclab.run.session import Session

    def say(message: str) -> None:
        print(f"[capture {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    progress = progress or say
    cell = load_scenario(scenario).cells[0]
    recorder = Recorder()
    backend = RecordingBackend(QemuBackend(), recorder)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="niclab-capture-") as tmp,
        Session(cell, backend, Path(tmp) / "cell", progress) as session,
    ):
        for spec in cell.scenario.benchmarks:
            found = session.run(spec).measurements
            progress(f"{spec.describe()}: " + ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in found))
        if cheap_extras:
            for tool, options in (("iperf3", {"seconds": 3}), ("ping", {"count": 10, "interval": 0.2})):
                found = session.bench(tool, **options)
                progress(f"{tool}: " + ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in found))
            # Real failures, for the tests to hand to other commands.
            recorder.note = "probe: netperf with no netserver listening (exits non-zero)"
            server = session.iface("b", 0).address
            session.node("a").run(
                f"netperf -H {server} -p 12866 -t TCP_STREAM -l 1 -P 0 -- -k THROUGHPUT", timeout=30, check=False
            )
            recorder.note = ""
        session.facts_now()  # as the runner does at the end of a cell
    replay = Replay(
        calls=recorder.calls,
        rig=recorder.rig,
        captured={
            "scenario": os.path.relpath(scenario, REPO) if scenario.is_absolute() else str(scenario),
            "cell": cell.id,
            "at": utc_now(),
            "niclab_version": __version__,
            "accel_env": os.environ.get("NICLAB_ACCEL"),
            "host": host_facts().model_dump(mode="json"),
            "seconds": round(time.monotonic() - started, 1),
        },
    )
    replay.save(out)
    progress(f"{len(recorder.calls)} calls recorded in {out}")
    return replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes", description="Record a replay file for FakeBackend.")
    sub = parser.add_subparsers(dest="verb", required=True)
    cap = sub.add_parser("capture", help="boot the scenario's first cell and record every guest call")
    cap.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "two-node.yaml")
    cap.add_argument("--out", type=Path, default=TWO_NODE_E1000)
    cap.add_argument("--no-extras", action="store_true", help="only the scenario's benchmarks (no iperf3, ping, probe)")
    args = parser.parse_args(argv)
    if args.verb == "capture":
        capture(args.scenario.resolve(), args.out, cheap_extras=not args.no_extras)
    return 0


if __name__ == "__main__":
    sys.exit(main())
