"""Real passthrough, end to end, in `make test`: lab mode on a nested lab host (tests/integration/nested_host.py).

Inside L1, niclab (this checkout) runs `niclab lab doctor` and `niclab run
scenarios/two-node.yaml --lab lab.yaml` against L1's two e1000 cards: it leases
them, binds them to vfio-pci, passes them through to two libvirt domains (KVM
inside L1 where kvm_amd loads, which exercises niclab's KVM path), measures
over them, and gives them back to e1000. The test checks what the run
recorded and what L1 looks like afterwards. Where L1's kernel dies of the
emulated SVM's known crash, L1 boots again and the command runs again
(nested_host.NestedLabHost); any other death of L1 fails the test.
"""

from __future__ import annotations

import json
import sys

import pytest

from niclab.plumbing.image.store import build_image
from tests.integration.nested_host import CARDS, LabHostGone, NestedLabHost, niclab_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("nested")


@pytest.fixture(scope="module")
def l1(workdir, image):
    debian = build_image("debian", progress=lambda m: print(f"[image] {m}", file=sys.stderr))
    with NestedLabHost(workdir, debian, image) as host:
        yield host


CONSOLES = "/root/runs/*/cells/*/*.serial.log"  # the L2 guests' consoles, as the run keeps them


def niclab_in_l1(l1: NestedLabHost, args: str, timeout: float):
    """niclab in L1; if L1 itself goes for good, the failure shows the end of its console."""
    try:
        return l1.run(f"{niclab_env()} python3 -m niclab {args}", timeout=timeout, check=False, consoles=CONSOLES)
    except LabHostGone as exc:
        pytest.fail(str(exc))


def test_the_doctor_finds_both_cards_of_the_nested_host_usable(l1):
    result = niclab_in_l1(l1, "lab doctor --lab /root/lab.yaml", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for card, pci in zip(("card-a", "card-b"), CARDS, strict=True):
        assert f"card {card} ({pci}, e1000)" in result.stdout
    assert "fail" not in result.stdout.lower(), result.stdout


def test_two_node_runs_on_the_passed_through_cards_and_they_go_back_to_e1000(l1):
    result = niclab_in_l1(l1, "run /mnt/niclab/scenarios/two-node.yaml --lab /root/lab.yaml --out /root/runs", 1800)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-6000:] + l1.guest_logs(CONSOLES)
    run_dir = l1.run("ls -d /root/runs/*/").stdout.strip()
    records = [json.loads(line) for line in l1.get(f"{run_dir}results.jsonl").decode().splitlines()]
    (cell,) = [r for r in records if r["type"] == "cell"]
    rig = cell["rig"]
    assert rig["backend"] == "libvirt"
    cards = rig["cards"]
    assert {cards["a/link0"]["pci"], cards["b/link0"]["pci"]} == set(CARDS)
    for port in ("a/link0", "b/link0"):
        assert cards[port]["guest_pci_id"] == "8086:100e" and cards[port]["guest_driver"] == "e1000", cards
    measured = {r["name"]: r["value"] for r in records if r["type"] == "measurement"}
    throughput = measured["netperf.TCP_STREAM.throughput_mbps"]
    assert throughput > 0
    why = l1.run(f"{niclab_env()} python3 -m niclab accel", check=False).stdout.strip()  # the cached verdict
    print(
        f"\nnested passthrough: accel {rig['accel']} in L1 ({why}), TCP_STREAM {throughput} Mbit/s, "
        f"agents ready {rig['agent_ready_s']}",
        file=sys.stderr,
    )
    for pci in CARDS:
        driver = l1.run(f"basename $(readlink /sys/bus/pci/devices/{pci}/driver)").stdout.strip()
        override = l1.run(f"cat /sys/bus/pci/devices/{pci}/driver_override").stdout.strip()
        assert (driver, override) == ("e1000", "(null)"), pci
    assert l1.run("ls /var/lib/niclab/vfio").stdout.strip() == "", "the journal still names a card"
    assert l1.run("virsh -c qemu:///system list --name").stdout.strip() == ""
