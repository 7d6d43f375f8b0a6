#!/usr/bin/env python3
"""How long from Ctrl-C to no guest left: SIGINT to `niclab run` at a chosen moment, N times.

Starts `niclab run` on a scenario (default: scenarios/two-node.yaml), waits for
a progress line (default: the first benchmark starting), sends SIGINT, and
times until no QEMU of that run is left and until niclab has exited. Prints
each run and the medians. The guarantee is 5 s (docs/architecture.md,
"Failure handling").

    .venv/bin/python bench/interrupt.py [--runs 5] [--at "running netperf"] [SCENARIO]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import TWO_NODE, medians, niclab


def qemus_under(directory: Path) -> list[int]:
    """PIDs of QEMU processes whose working directory is inside `directory`."""
    found, root = [], str(directory.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"qemu-system" in argv0 and (cwd == root or cwd.startswith(root + "/")):
            found.append(int(entry.name))
    return found


def restore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job may have inherited it ignored


def one_run(scenario: Path, out: Path, at: str) -> tuple[float, float]:
    proc = subprocess.Popen(
        niclab("run", str(scenario), "--out", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=restore_sigint,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if at in line:
            break
    else:
        sys.exit(f"niclab run ended before printing {at!r}")
    time.sleep(0.5)
    if not qemus_under(out):
        sys.exit("no guest was running when the signal was to be sent")
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    gone = None
    while proc.poll() is None or gone is None:
        if gone is None and not qemus_under(out):
            gone = time.monotonic() - sent
        if time.monotonic() - sent > 60:
            proc.kill()
            sys.exit("niclab did not stop within 60 s of SIGINT")
        time.sleep(0.01)
    proc.stderr.read()
    return gone, time.monotonic() - sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=str(TWO_NODE))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--at", default="running netperf", help="send SIGINT once a progress line has this")
    args = parser.parse_args()
    gones, exits = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-interrupt-") as out:
        for n in range(1, args.runs + 1):
            gone, exited = one_run(Path(args.scenario), Path(out), args.at)
            gones.append(gone)
            exits.append(exited)
            print(f"run {n}: no guest left {gone:.2f} s after SIGINT; niclab exited after {exited:.2f} s")
    gone, exited = medians(gones, exits)
    print(
        f"median of {args.runs}: no guest left {gone:.2f} s, niclab exited {exited:.2f} s after SIGINT (at {args.at!r})"
    )


if __name__ == "__main__":
    main()
