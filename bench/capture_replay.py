#!/usr/bin/env python3
"""Record the replay file the runner's unit tests use (tests/data/replay/two-node-e1000.json).

Boots the first cell of a scenario (default: scenarios/two-node.yaml, two
e1000 guests) with the QEMU backend, runs its benchmarks plus iperf3, ping
and one deliberately failing netperf, and writes every guest command with
the result the guest gave (see tests/fakes.py for the format).

    NICLAB_ACCEL=tcg .venv/bin/python bench/capture_replay.py [--scenario FILE] [--out FILE]
"""

from __future__ import annotations

import sys

from common import tests_importable

tests_importable()

from tests.fakes import main  # noqa: E402 (tests/ is importable only once tests_importable() ran)

if __name__ == "__main__":
    sys.exit(main(["capture", *sys.argv[1:]]))
