"""A restored guest made the node's: resumed, its own name, clock and randomness, its cards plugged in and their
drivers loaded by modalias, as its boot script does at boot (images/micro/rootfs/etc/niclab/boot).

The drivers' module parameters (the node's `module.param=value` words) go into /etc/modprobe.d before the
drivers load, so every restored cell still probes its cards live, with what it asked for.
"""

from __future__ import annotations

import secrets
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.plumbing.backends.qemu_cmd import VmPlan, device_add, nic_slots
from niclab.plumbing.backends.qmp import Qmp, QmpError
from niclab.plumbing.guest import AgentNode

CARDS_TIMEOUT_S = 20  # for the plugged cards to show on the guest's PCI bus, then for their interfaces


class RestoreError(NiclabError):
    """A restore that did not work: the rig boots cold instead, saying why."""


def resume(name: str, plan: VmPlan, qmp_socket: Path, alive: Callable[[], str | None], deadline: float) -> float:
    """Wait until QEMU has read the saved state, let the guest run (it was saved stopped) and plug its cards in
    at once: the guest takes them while its agent is reached. Returns when the cards were plugged (monotonic)."""
    try:
        with Qmp(name, qmp_socket, deadline, alive) as qmp:
            qmp.wait_migration(deadline, alive)
            qmp.execute("cont")
            plugged = time.monotonic()
            for slot, nic in nic_slots(plan):
                qmp.execute("device_add", device_add(nic, slot))
    except QmpError as exc:
        raise RestoreError(str(exc)) from None
    return plugged


def arrival_script(
    name: str, plan: VmPlan, params: Mapping[str, list[str]], epoch: int, seed: str, timeout: int = CARDS_TIMEOUT_S
) -> str:
    """The guest command after the cards were plugged: the node's identity, then its drivers; prints
    `missing=MAC …` for cards whose interface did not come."""
    slots = " ".join(f"0000:00:{slot:02x}.0" for slot, _ in nic_slots(plan))
    macs = " ".join(nic.mac for nic in plan.nics)
    options = "".join(f"options {module} {' '.join(words)}\n" for module, words in sorted(params.items()))
    lines = [
        f"hostname {shlex.quote(name)}",
        f"echo {shlex.quote(f'127.0.0.1 localhost {name}')} > /etc/hosts",
        f"date -s @{epoch} > /dev/null",
        f"echo {seed} > /dev/urandom",  # mixed in, on top of the vmgenid reseed a kernel that knows it does
        "mkdir -p /etc/modprobe.d",
        f"printf %s {shlex.quote(options)} > /etc/modprobe.d/niclab-params.conf",
        f"end=$(( $(date +%s) + {timeout} ))",
        f"for s in {slots}; do while [ ! -e /sys/bus/pci/devices/$s ] && [ $(date +%s) -le $end ]; do "
        "sleep 0.02; done; done",
        # as the boot script: one modprobe per bus, the PCI devices first (virtio-net is a virtio device too)
        'load() { set -- "$1"/*/modalias; [ -r "$1" ] && modprobe -q -a $(cat "$@"); }',
        "load /sys/bus/pci/devices; load /sys/bus/virtio/devices",
        "missing=",
        f"for m in {macs}; do while ! grep -qx $m /sys/class/net/*/address 2>/dev/null && "
        "[ $(date +%s) -le $end ]; do sleep 0.02; done; "
        'grep -qx $m /sys/class/net/*/address 2>/dev/null || missing="$missing $m"; done',
        'echo "missing=$missing"',
        # the console says what a boot's script says there (images/micro/rootfs/etc/niclab/boot)
        f'echo "niclab: node "{shlex.quote(name)}": drivers loaded: '
        "$(cut -d' ' -f1 /proc/modules | tr '\\n' ' ')(after a restore)\" > /dev/console",
    ]
    return "\n".join(lines) + "\n"


def arrive(node: AgentNode, plan: VmPlan, params: Mapping[str, list[str]], plugged: float) -> float:
    """Load the drivers of the node's cards (plugged at `plugged`, monotonic); seconds from then until every
    card's interface was there (a card whose driver did not bind is left to the driver check, which says why)."""
    script = arrival_script(node.name, plan, params, round(time.time()), secrets.token_hex(32))
    try:
        result = node.run(["/bin/sh", "-c", script], timeout=CARDS_TIMEOUT_S * 2 + 30, check=False)
    except NiclabError as exc:  # the agent gone, or the command not done in time
        raise RestoreError(f"{node.name}: the restored guest did not take its cards: {exc}") from None
    if result.returncode != 0 or "missing=" not in result.stdout:
        told = (result.stderr or result.stdout).strip()[-300:]
        raise RestoreError(f"{node.name}: the restored guest could not take its cards: {told or result.returncode}")
    return round(time.monotonic() - plugged, 2)
