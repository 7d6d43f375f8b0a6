"""`niclab up`: bring one cell's rig up (restored, cabled, configured, checked) and leave it running.

The command starts a keeper (niclab.run.keeper) in a session of its own and relays how the rig comes up; once
it is up the command returns and the keeper holds the rig until `niclab down`. Ctrl-C, SIGTERM or a terminal
that goes away before then stop the keeper and its guests: nothing is left. The keeper is this same command
run again with --keeper-fd, the pipe it tells through.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from niclab.base.errors import NiclabError, UsageError
from niclab.ui.cli.options import add_axis_option, add_backend_options, add_cell_options, add_start_options, overrides
from niclab.ui.console import EXIT_FAILED, EXIT_OK, ProgressLines

if TYPE_CHECKING:
    from niclab.base.node import Progress
    from niclab.model.scenario import Cell
    from niclab.plumbing.backends import Backend
    from niclab.run.held import HeldRig

STOP_GRACE_S = 60.0  # for a keeper told to stop while its guests start


def cmd_up(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario

    scenario_file = load_scenario(Path(args.scenario), overrides(args))
    cells = scenario_file.select(args.cell, args.keyword)
    if len(cells) != 1:
        ids = ", ".join(cell.id for cell in cells[:6]) + (", …" if len(cells) > 6 else "")
        raise UsageError(
            f"{args.scenario}: up holds one cell's rig, and {len(cells)} match ({ids}): pick one with --cell"
        )
    if args.keeper_fd is not None:
        return _keep(args, cells[0])
    from niclab.run.held import check_name, claim, default_name

    name = check_name(args.name) if args.name else default_name(scenario_file.name)
    path = claim(name)
    return _start_keeper(args, name, path)


def _start_keeper(args: argparse.Namespace, name: str, path: Path) -> int:
    import niclab
    from niclab.base.procs import process_start_time, raise_interrupt
    from niclab.plumbing.backends.boot import tail
    from niclab.run.held import HeldRig, here, remove, write_record

    progress = ProgressLines(args.quiet)
    read_end, write_end = os.pipe()
    # the keeper is this command again, with its pipe and name right after the verb (before any `--`)
    argv = [
        sys.executable,
        *subprocess._args_from_interpreter_flags(),  # type: ignore[attr-defined]
        "-m",
        "niclab",
        "up",
        f"--keeper-fd={write_end}",
        f"--name={name}",
        *args.argv[1:],
    ]
    package_root = str(Path(niclab.__file__).resolve().parents[1])  # found as this process found it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    hangup = signal.getsignal(signal.SIGHUP)
    if hangup != signal.SIG_IGN:  # under nohup a hangup is ignored, and so the rig outlives the terminal
        signal.signal(signal.SIGHUP, raise_interrupt)  # else a terminal gone before the rig is up ends it
    keeper: subprocess.Popen[bytes] | None = None
    told: list[str] = []
    try:
        with (path / "keeper.log").open("ab") as log:
            keeper = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                env=env,
                start_new_session=True,  # no terminal: one that closes after `up` does not end the rig
            )
        os.close(write_end)
        # the directory is the keeper's from now on (the keeper writes its own record as it starts)
        write_record(
            path,
            HeldRig(
                name=name,
                pid=keeper.pid,
                start_time=process_start_time(keeper.pid) or 0,
                where=here(),
                scenario=args.scenario,
                cell="",
                backend="",
                state="starting",
                since=time.time(),
            ),
        )
        with os.fdopen(read_end, "r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                what, _, said = line.partition(" ")
                text = str(json.loads(said)) if said.strip() else ""
                if what == "progress":
                    progress(text)
                elif what == "ready":
                    _say_up(HeldRig.model_validate_json(text))
                    return EXIT_OK
                elif what == "error":
                    told.append(text)
        keeper.wait()
    except KeyboardInterrupt:
        try:
            if keeper is not None:
                _stop(keeper)
        finally:
            remove(path)
        print(f"niclab: interrupted; rig {name} was stopped", file=sys.stderr)
        return EXIT_FAILED
    except BaseException:
        try:
            if keeper is not None:
                _stop(keeper)
        finally:
            remove(path)
        raise
    ending = tail(path / "keeper.log", 20)
    remove(path)
    if told:
        raise KeeperFailed("\n".join(told), keeper.returncode)
    raise KeeperFailed(f"niclab: rig {name}: its keeper exited {keeper.returncode} before the rig was up:\n{ending}", 1)


class KeeperFailed(NiclabError):
    """The keeper said why the rig did not come up (its message as it would have printed it)."""

    shown_as_is = True

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code if exit_code in (1, 2) else 1


def _stop(keeper: subprocess.Popen[bytes]) -> None:
    """End a keeper that is still starting its rig: SIGTERM stops its guests; its process group is killed
    after the grace (its guests die with it)."""
    if keeper.poll() is None:
        keeper.terminate()
    try:
        keeper.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(keeper.pid, signal.SIGKILL)
        keeper.wait()


def _say_up(record: HeldRig) -> None:
    first = record.nodes[0]
    print(f"rig {record.name} is up: cell {record.cell} of {record.scenario}, nodes {', '.join(record.nodes)}")
    steps = [(f"niclab exec {first} -- ip -br addr", "a command in a node")]
    if record.consoles:
        steps.append((f"niclab console {first}", "its serial console (Ctrl-] leaves it)"))
    steps += [("niclab status", "the rigs that are up"), (f"niclab down {record.name}", "stop it")]
    width = max(len(command) for command, _ in steps) + 3
    for command, what in steps:
        print(f"  {command:<{width}}{what}")


def _keep(args: argparse.Namespace, cell: Cell) -> int:
    """The keeper: tell `up` through the pipe, then hold the rig; SIGTERM stops it."""
    from niclab.run.held import rigs_dir
    from niclab.run.keeper import keep
    from niclab.run.realizable import backend_from_args

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pipe: TextIO | None = os.fdopen(args.keeper_fd, "w", encoding="utf-8")

    def tell(what: str, text: str) -> None:
        nonlocal pipe
        line = f"{what} {json.dumps(text)}"
        print(time.strftime("%H:%M:%S"), line, file=sys.stderr, flush=True)  # keeper.log
        if pipe is None:
            return
        try:
            pipe.write(line + "\n")
            pipe.flush()
        except OSError:  # `up` has gone: the rig is held all the same
            pipe = None
            return
        if what == "ready":
            pipe.close()
            pipe = None

    try:
        with backend_from_args(args) as backend:
            _check(cell, backend, lambda line: tell("progress", line))
            keep(cell, backend, rigs_dir() / args.name, args.scenario, tell)
    except NiclabError as exc:
        tell("error", str(exc) if exc.shown_as_is else f"niclab: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_FAILED
    return EXIT_OK


def _check(cell: Cell, backend: Backend, progress: Progress) -> None:
    """What a run checks before it starts: the backend can realize the cell, its kernels have its drivers."""
    from niclab.plumbing.backends import kernel_check
    from niclab.plumbing.kernel_check import check_kernels

    if (why := backend.check(cell.topology)) is not None:
        raise UsageError(f"the {backend.name} backend cannot realize cell {cell.id}: {why}")
    if kernel_check(backend):
        check_kernels([cell], progress)


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = verbs.add_parser(
        "up",
        help="bring a cell's rig up and leave it running",
        description="Bring one cell's rig up (restored, cabled, configured and checked, as a run would) and "
        "leave it running: `niclab exec` and `niclab console` step into its nodes, `niclab status` lists the "
        "rigs that are up, `niclab down` stops them.",
    )
    up.add_argument("scenario", metavar="SCENARIO", help="scenario file (YAML)")
    add_cell_options(up, "bring up")
    add_axis_option(up)
    add_backend_options(up)
    add_start_options(up)
    up.add_argument("--name", metavar="NAME", help="the rig's name (default: the scenario's)")
    up.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    up.add_argument("--keeper-fd", type=int, help=argparse.SUPPRESS)
    up.set_defaults(func=cmd_up)
