#!/usr/bin/env python3
"""How much of a run is booting: time from `niclab run` start to both guests answering.

Runs `niclab run` on a scenario (default: scenarios/two-node.yaml) N times
with its guests booted cold (--cold-boot) and N times restored from their
saved state (niclab's default), alternating, and prints per run and as
medians the time until every guest answered with its cards in (the rig
ready) and until the network was up and checked, each restored figure's
share of the cold one, and last, for the restored runs: the boot, the whole
run's wall time, and the boot's share of it. Ratios measured in one go,
since this machine is shared and absolute times drift. For eight nodes on
one segment: bench/eight-node-switch.yaml.

With --sweep, what a shared boot buys: the five e1000 cells of
scenarios/mtu-sweep.yaml as one run (one boot, the network reset between
cells) against one run per cell (a boot each, as before shared boots),
alternating, with each side's boots and wall time.

With --bzimage, each run is paired with one booting the same image's
compressed bzImage (as niclab did before it kept the kernel unpacked for a
PVH boot): NICLAB_IMAGE points at a view of the image without its vmlinux.

With --seabios, each run is paired with one whose guests start with QEMU's
default firmware (SeaBIOS, NICLAB_QBOOT=0) instead of qboot.

With --against IMAGE_DIR, each run is paired with one booting that built
image instead of the micro image (NICLAB_IMAGE points at it): the lab image
(`niclab image info lab` gives its directory) against micro, under the
same accelerator. Give the scenario memory enough for the other image's
initramfs (its manifest's min_memory_mib).

    .venv/bin/python bench/boot.py [--runs 3] [--bzimage | --seabios | --against IMAGE_DIR] [SCENARIO]
    .venv/bin/python bench/boot.py --sweep [--runs 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import REPO, TWO_NODE, medians, timed_run


def one_run(
    scenario: Path, out: Path, image: Path | None = None, env_extra: dict[str, str] | None = None
) -> tuple[float, float]:
    boot, _, wall = ready_run(scenario, out, image, env_extra)
    return boot, wall


def ready_run(
    scenario: Path, out: Path, image: Path | None = None, env_extra: dict[str, str] | None = None
) -> tuple[float, float, float]:
    """Seconds from the harness's start until the rig answered, until its network was up and checked, and the
    run's wall time."""
    run = timed_run(scenario, out, env={**({"NICLAB_IMAGE": str(image)} if image else {}), **(env_extra or {})})
    cells = [r for r in run.records() if r["type"] == "cell"]
    timings = cells[0]["timings"]
    return timings["agents_ready_since_start_s"], timings["agents_ready_since_start_s"] + timings["network_s"], run.wall


SWEEP = REPO / "scenarios" / "mtu-sweep.yaml"
SWEEP_CELLS = [f"nic=e1000,mtu={mtu}" for mtu in (1500, 3000, 4000, 6000, 9000)]


def sweep_run(cells: list[str], out: Path) -> tuple[float, int]:
    """Wall time of one `niclab run` of these cells, and how many boots it made."""
    run = timed_run(SWEEP, out, *[word for cell in cells for word in ("--cell", cell)])
    return run.wall, len({r["boot"]["number"] for r in run.records() if r["type"] == "cell"})


def sweep(runs: int) -> None:
    shared, separate = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-sweep-") as out:
        for n in range(1, runs + 1):
            wall, boots = sweep_run(SWEEP_CELLS, Path(out) / f"shared-{n}")
            shared.append(wall)
            print(f"round {n}: one run of 5 cells: {boots} boot(s), {wall:5.1f} s", flush=True)
            walls = [sweep_run([cell], Path(out) / f"separate-{n}-{i}")[0] for i, cell in enumerate(SWEEP_CELLS)]
            separate.append(sum(walls))
            print(f"round {n}: a run per cell:     5 boots,    {sum(walls):5.1f} s", flush=True)
    a, b = medians(shared, separate)
    print(f"median: shared boot {a:.1f} s, a boot per cell {b:.1f} s: {a / b:.0%} of the time ({b - a:.0f} s saved)")


def bzimage_view(work: Path) -> Path:
    """The current micro image without its vmlinux: QEMU boots the bzImage."""
    from niclab.plumbing.image import ensure_image

    image = ensure_image()
    view = work / "bzimage-view"
    view.mkdir()
    for name in ("vmlinuz", "initrd.img", "manifest.json"):
        (view / name).symlink_to(image.directory / name)
    return view


def compare_bzimage(scenario: Path, runs: int) -> None:
    pvh, bz = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-boot-") as out:
        view = bzimage_view(Path(out))
        for n in range(1, runs + 1):
            pvh.append(one_run(scenario, Path(out) / "pvh")[0])
            bz.append(one_run(scenario, Path(out) / "bz", view)[0])
            print(f"run {n}: guests answering after {bz[-1]:4.1f} s (bzImage) / {pvh[-1]:4.1f} s (PVH)", flush=True)
    a, b = medians(bz, pvh)
    print(f"median: bzImage {a:.1f} s, PVH {b:.1f} s: {b / a:.0%} of the time (harness start to every agent)")


def compare_firmware(scenario: Path, runs: int) -> None:
    qboot, seabios = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-boot-") as out:
        for n in range(1, runs + 1):
            qboot.append(one_run(scenario, Path(out) / "qboot")[0])
            seabios.append(one_run(scenario, Path(out) / "seabios", env_extra={"NICLAB_QBOOT": "0"})[0])
            print(f"run {n}: guests answering after {seabios[-1]:4.1f} s (SeaBIOS) / {qboot[-1]:4.1f} s (qboot)")
    a, b = medians(seabios, qboot)
    print(f"median: SeaBIOS {a:.1f} s, qboot {b:.1f} s: {b / a:.0%} of the time (harness start to every agent)")


def compare_image(scenario: Path, runs: int, other: Path) -> None:
    micro, them = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-boot-") as out:
        for n in range(1, runs + 1):
            micro.append(one_run(scenario, Path(out) / "micro")[0])
            them.append(one_run(scenario, Path(out) / "other", other)[0])
            print(f"run {n}: guests answering after {them[-1]:4.1f} s ({other.name}) / {micro[-1]:4.1f} s (micro)")
    a, b = medians(them, micro)
    share = f"{a / b:.0%} of micro's time"
    print(f"median: {other.name} {a:.1f} s, micro {b:.1f} s: {share} (harness start to every agent)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=str(TWO_NODE))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sweep", action="store_true", help="a 5-value MTU sweep: one boot against five")
    parser.add_argument("--bzimage", action="store_true", help="pair each run with one booting the bzImage")
    parser.add_argument("--seabios", action="store_true", help="pair each run with one booting SeaBIOS, not qboot")
    parser.add_argument("--against", metavar="IMAGE_DIR", help="pair each run with one booting this built image")
    args = parser.parse_args()
    if args.against:
        compare_image(Path(args.scenario), args.runs, Path(args.against))
        return
    if args.seabios:
        compare_firmware(Path(args.scenario), args.runs)
        return
    if args.sweep:
        sweep(args.runs)
        return
    if args.bzimage:
        compare_bzimage(Path(args.scenario), args.runs)
        return
    cold: list[tuple[float, float]] = []
    restored: list[tuple[float, float]] = []
    walls: list[float] = []
    cold_env = {"NICLAB_COLD_BOOT": "1"}
    with tempfile.TemporaryDirectory(prefix="niclab-bench-boot-") as out:
        ready_run(Path(args.scenario), Path(out) / "first")  # the saved state made, if it is not yet
        for n in range(1, args.runs + 1):
            boot, up, _ = ready_run(Path(args.scenario), Path(out) / "cold", env_extra=cold_env)
            cold.append((boot, up))
            boot, up, wall = ready_run(Path(args.scenario), Path(out) / "restored")
            restored.append((boot, up))
            walls.append(wall)
            print(
                f"run {n}: rig ready after {cold[-1][0]:5.1f} s cold / {boot:5.1f} s restored; "
                f"network up and checked after {cold[-1][1]:5.1f} s / {up:5.1f} s",
                flush=True,
            )
    cold_boot, boot = medians([c[0] for c in cold], [r[0] for r in restored])
    cold_up, up = medians([c[1] for c in cold], [r[1] for r in restored])
    print(
        f"median: rig ready {cold_boot:.1f} s cold, {boot:.1f} s restored ({boot / cold_boot:.0%} of the time); "
        f"up and checked {cold_up:.1f} s cold, {up:.1f} s restored ({up / cold_up:.0%})"
    )
    (wall,) = medians(walls)
    print(
        f"median: boot {boot:.1f} s, run {wall:.1f} s, boot share {boot / wall:.1%} "
        f"(harness start to every agent answering, cards in; first cell; restored)"
    )


if __name__ == "__main__":
    main()
