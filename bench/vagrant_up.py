#!/usr/bin/env python3
"""Wall time of `vagrant up` of a scenario's rig next to `niclab run` bringing up the same rig.

Both bring up the same cell (default scenarios/two-node.yaml): `vagrant up`
boots the Debian box under libvirt and provisions and checks the links;
niclab boots the micro image under QEMU and configures and checks the same
links (a Session, without benchmarks). Measured in one run, alternating, so
the ratio holds on a busy host even when the seconds do not. Needs root:
libvirtd, virtlogd and Vagrant run in a network namespace made for the
purpose (as the integration test does), and the box must build or be there.

    sudo .venv/bin/python bench/vagrant_up.py [--runs 2] [SCENARIO]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, TWO_NODE, medians, niclab, niclab_script, tests_importable
from niclab.model.scenario import load_scenario
from niclab.plumbing.accel import choose_accel
from niclab.plumbing.backends import get_backend
from niclab.plumbing.image import find_image
from niclab.run.session import Session

tests_importable()

from tests.integration.libvirt_netns import isolated_libvirt, why_not  # noqa: E402


def niclab_up(scenario: Path, workdir: Path) -> float:
    cell = load_scenario(scenario).cells[0]
    started = time.monotonic()
    with Session(cell, get_backend("qemu"), workdir):
        up = time.monotonic() - started
    return up


def vagrant(command: list[str], env: dict[str, str], timeout: float = 1800) -> float:
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command[3:])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default=str(TWO_NODE))
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if (reason := why_not()) is not None:
        sys.exit(f"cannot measure here: {reason}")
    scenario = Path(args.scenario).resolve()
    with tempfile.TemporaryDirectory(prefix="niclab-bench-vagrant-", dir="/tmp") as scratch:
        work = Path(scratch)
        work.chmod(0o755)  # libvirt's QEMU user reads the box's kernel under VAGRANT_HOME
        env = {
            **os.environ,
            "VAGRANT_HOME": str(work / "vagrant.d"),
            "VAGRANT_DOTFILE_PATH": str(work / "dotfile"),
            "VAGRANT_CHECKPOINT_DISABLE": "1",
            "VAGRANT_DEFAULT_PROVIDER": "libvirt",
            "NICLAB_SCENARIO": str(scenario),
            "NICLAB": str(niclab_script()),
        }
        subprocess.run(niclab("vagrant", "box"), env=env, check=True)
        image = find_image("debian")
        assert image is not None
        with isolated_libvirt(work / "libvirt", hide_kvm=choose_accel(image).accel != "kvm") as libvirt:
            ups, destroys, niclabs = [], [], []
            for i in range(args.runs):
                ups.append(vagrant(libvirt.command(["vagrant", "up"]), env))
                destroys.append(vagrant(libvirt.command(["vagrant", "destroy", "-f"]), env))
                niclabs.append(niclab_up(scenario, work / f"niclab-{i}"))
                print(
                    f"run {i + 1}: vagrant up {ups[-1]:.1f} s, destroy {destroys[-1]:.1f} s; "
                    f"niclab rig up {niclabs[-1]:.1f} s; ratio {ups[-1] / niclabs[-1]:.1f}",
                    flush=True,
                )
    up, down, ours = medians(ups, destroys, niclabs)
    print(f"\n{scenario.name}, {args.runs} runs, medians:")
    print(f"  vagrant up (Debian box, libvirt, provision + check)   {up:6.1f} s")
    print(f"  vagrant destroy -f                                   {down:6.1f} s")
    print(f"  niclab rig up (micro image, QEMU, netconf + check)   {ours:6.1f} s")
    print(f"  vagrant up / niclab rig up                           {up / ours:6.1f}x")


if __name__ == "__main__":
    main()
