#!/usr/bin/env python3
"""How the work over untrusted sizes grows: a lab's placement, a host's interfaces, a sysfs snapshot, a
NIPA export, a program's KTAP output, a JSON text's nesting.

Each is timed (CPU seconds of this process) at a few sizes, doubling, and printed with the ratio to the
size before: about 2 for linear work, 4 for quadratic. The inputs are what a hostile lab host, guest or
run directory could send, made here (tests/helpers builds the labs and cells).

    .venv/bin/python bench/sizes.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import tests_importable
from niclab.base import jsonbound
from niclab.model.bench import ktap
from niclab.model.lab.match import Unrealizable, place
from niclab.plumbing.lab.hostnet import HostNet
from niclab.plumbing.lab.snapshot import HostSnapshot
from niclab.ui.nipa import nipa_results

tests_importable()  # tests/ holds the builders of synthetic labs and run directories

from tests import records  # noqa: E402
from tests.helpers import ring, ring_lab  # noqa: E402
from tests.records import in_cell, write_run  # noqa: E402

NIC = "0000:03:00.0"


def cpu(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def series(name: str, sizes: list[int], make: Callable[[int], Callable[[], object]]) -> None:
    before = None
    for size in sizes:
        seconds = cpu(make(size))
        ratio = f"  ×{seconds / before:.1f}" if before else ""
        print(f"{name:<44} {size:>9,}  {seconds:8.3f} s{ratio}")
        before = max(seconds, 1e-6)


def placement(links: int, odd: bool) -> Callable[[], object]:
    inventory, cell = ring_lab(100, 10), ring(links, odd=odd)

    def run() -> None:
        try:
            place(cell, inventory)
        except Unrealizable:
            pass

    return run


def vlan_chain(count: int) -> Callable[[], object]:
    links = [{"ifname": "eth0", "addr_info": []}] + [
        {"ifname": f"v{i}", "link": "eth0" if i == 0 else f"v{i - 1}", "addr_info": []} for i in range(count)
    ]
    text = json.dumps(links)
    return lambda: HostNet(lambda argv: text if "addr" in argv else "[]").uses("eth0")


def snapshot(count: int) -> Callable[[], object]:
    body = "".join(f"iommu\tdmar{i}\n" for i in range(count)) + "".join(
        f"ecap\tdmar{i}\t0xf020df\n" for i in range(count)
    )
    body += f"pci\t{NIC}\t0x020000\t0x8086\t0x100e\n" + "".join(f"net\t{NIC}\teth{i}\n" for i in range(count))
    text = "niclab-snapshot 1\n" + body + "end\n"
    return lambda: HostSnapshot("rig2", text).netdevs(NIC)


def nipa_export(programs: int) -> Callable[[], object]:
    root = Path(tempfile.mkdtemp(prefix="niclab-bench-nipa-"))
    names = [f"t{i}.py" for i in range(programs)]
    recs = in_cell("nic=e1000", {"nic": "e1000"}, *(records.selftest(n, "pass", seconds=1.0) for n in names))
    run = write_run(root / "run", recs, ["nic=e1000"])
    raw = run / "raw" / "nic=e1000"
    raw.mkdir(parents=True)
    for name in names:
        (raw / f"kselftest-drivers-net-{name}-1.txt").write_text("ok\n")
    return lambda: nipa_results(run)


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(f"{'what':<44} {'size':>9}  {'cpu':>10}")
    series("placement, 100 cables: links placed", [4, 8, 16, 32], lambda n: placement(n, odd=False))
    series("placement, 100 cables: links refused", [4, 8, 16, 32], lambda n: placement(n, odd=True))
    series("host interfaces: a chain of VLANs", [800, 1600, 3200, 6400], vlan_chain)
    series("sysfs snapshot: lines of each kind", [10_000, 20_000, 40_000, 80_000], snapshot)
    series("NIPA export: programs", [1500, 3000, 6000], nipa_export)
    series(
        "KTAP: `ok N x` lines",
        [250_000, 500_000, 1_000_000, 2_000_000],
        lambda n: lambda: ktap.parse_bounded("ok 1 x\n" * n),
    )
    series(
        "JSON depth count: bytes of brackets",
        [1 << 20, 2 << 20, 4 << 20, 8 << 20],
        lambda n: lambda: jsonbound.depth(b"[" * (n // 2) + b"]" * (n // 2)),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
