"""The nfs and bonnie benchmarks on a real e1000 pair: b exports a tmpfs, a mounts it and runs fio, then bonnie++.

One boot for all tests (about 75 s under TCG). The first checks the image's
NFS server and client by hand (they need no fio); the next one runs the
benchmark with its defaults, checks the figures and that the bytes went over
the test link; the last that a second run in the same guests works. Each
ends by checking that nothing is left mounted or running.
"""

from __future__ import annotations

import re

import pytest

from niclab.model.bench import nfs
from niclab.model.scenario import parse
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.run.session import Session

SCENARIO = "name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
PATTERNS = ("seqread", "randread", "randrw")


@pytest.fixture(scope="module")
def session(image, tmp_path_factory):
    cell = parse(SCENARIO, "t.yaml").cells[0]
    with Session(cell, QemuBackend(image=image), tmp_path_factory.mktemp("nfs")) as running:
        yield running


@pytest.fixture
def fio(session, image):
    """fio is built from Debian's source into the image (images/micro/recipe.toml); it must be there."""
    assert "/usr/bin/fio" in image.manifest.get("binaries", []), f"image {image.id} has no fio"
    assert session.node("a").run("fio --version").stdout.startswith("fio-")


def link_bytes(session, node: str) -> tuple[int, int]:
    name = session.iface(node, 0).name
    out = (
        session.node(node)
        .run(f"cat /sys/class/net/{name}/statistics/rx_bytes /sys/class/net/{name}/statistics/tx_bytes")
        .stdout.split()
    )
    return int(out[0]), int(out[1])


def assert_nothing_left(session) -> None:
    for node in ("a", "b"):
        mounts = session.node(node).get("/proc/mounts").decode()
        assert not re.search(r" nfs4? | nfsd |niclab-nfs", mounts), f"{node} still has mounts:\n{mounts}"
        processes = session.node(node).run("ps").stdout
        left = [line for line in processes.splitlines() if re.search(r"nfsd|mountd|\bfio\b|bonnie", line)]
        assert not left, f"{node} still runs: {left}"


def test_the_image_serves_and_mounts_nfs(session):
    """The benchmark's own set-up and clean-up steps, with dd instead of fio."""
    options = nfs.NfsOptions()
    client, server = session.node("a"), session.node("b")
    client_address, server_address = session.iface("a").address, session.iface("b").address
    mountd = None
    try:
        for _step, command in nfs.server_setup(options, server_address, client_address):
            server.run(command)
        mountd = server.spawn(nfs.MOUNTD)
        for _step, command in nfs.server_start(server_address):
            server.run(command)
        for _step, command in nfs.client_mount(options, server_address):
            client.run(command)
        client.run(f"dd if=/dev/zero of={nfs.MOUNT_DIR}/x bs=64k count=64 conv=fsync 2>/dev/null")
        assert server.run(f"wc -c < {nfs.EXPORT_DIR}/x").stdout.strip() == str(64 * 65536)
    finally:
        assert nfs.cleanup(client, server, mountd) == []
    assert_nothing_left(session)


@pytest.mark.measures
def test_nfs_figures_and_traffic_over_the_link(session, fio):
    rx_before, tx_before = link_bytes(session, "a")
    found = session.bench("nfs")  # the defaults, as a scenario file that names no option gets them
    rx_after, tx_after = link_bytes(session, "a")

    figures = {m.name: m for m in found}
    for pattern in PATTERNS:
        for prefix in ("read_", "write_") if pattern == "randrw" else ("",):
            for metric in (f"{prefix}bandwidth_mb_s", f"{prefix}iops", f"{prefix}bandwidth_min_mb_s"):
                assert figures[f"nfs.{pattern}.{metric}"].value > 0, f"nfs.{pattern}.{metric}"
    assert figures["nfs.seqread.bandwidth_mb_s"].extra["mount"]["vers"] == "4.2"

    # O_DIRECT: every byte fio read came over link0 to the client, every byte it wrote went out on it
    read = sum(m.extra["bytes"] for m in found if m.metric in ("bandwidth_mb_s", "read_bandwidth_mb_s"))
    written = figures["nfs.randrw.write_bandwidth_mb_s"].extra["bytes"]
    assert rx_after - rx_before >= read, f"link0 received {rx_after - rx_before} bytes, fio read {read}"
    assert tx_after - tx_before >= written, f"link0 sent {tx_after - tx_before} bytes, fio wrote {written}"
    assert_nothing_left(session)


@pytest.mark.measures
def test_nfs_runs_again_in_the_same_guests(session, fio):
    found = session.bench("nfs", seconds=3, numjobs=1, nfs_version="4.1")
    figures = {m.name: m.value for m in found}
    assert figures["nfs.seqread.bandwidth_mb_s"] > 0 and figures["nfs.randrw.write_iops"] > 0
    assert "nfs.seqread.bandwidth_min_mb_s" not in figures  # one job: no spread to report
    assert_nothing_left(session)


@pytest.mark.measures
def test_bonnie_on_the_share_sends_its_blocks_over_the_link(session):
    """bonnie++ (seed study 002 ran it beside fio) on the same share: block figures, and O_DIRECT bytes on link0."""
    rx_before, tx_before = link_bytes(session, "a")
    found = session.bench("bonnie", size_mib=32, ram_mib=16)
    rx_after, tx_after = link_bytes(session, "a")

    figures = {m.metric: m.value for m in found}
    too_fast = found[0].extra["too_fast"]
    for metric in ("block_write_mb_s", "rewrite_mb_s"):
        assert figures.get(metric, 0) > 0, f"bonnie++ gave no {metric}: {sorted(figures)}, too fast: {too_fast}"
    # Random seeks read what the rewrite just left in the client's cache: on a quick pass bonnie++ cannot time
    # them (+++++; CI saw it once), and then the figure is left out and named, never reported as 0.
    assert figures.get("seeks_per_s", 0) > 0 or "seeks" in too_fast, f"{sorted(figures)}, {too_fast}"
    assert "seeks_per_s" not in figures or "seeks" not in too_fast
    # A block read bonnie++ could not time (+++++) is left out and named. Over the link 32 MiB take a second or
    # more under TCG; a read it could not time came from the client's cache, not the link (a fresh-clone run
    # saw it: +++++ for the block read, and link0 received 36.8 MB, the rewrite's reads alone).
    timed = figures.get("block_read_mb_s", 0) > 0
    assert timed or "get_block" in too_fast, f"{sorted(figures)}, {too_fast}"
    # the 32 MiB file was written, then read and written again (rewrite), then read (timed: through link0)
    assert tx_after - tx_before >= 2 * 32 * 2**20, f"link0 sent {tx_after - tx_before} bytes"
    reads = 2 if timed else 1
    assert rx_after - rx_before >= reads * 32 * 2**20, f"link0 received {rx_after - rx_before} bytes, {too_fast}"
    assert_nothing_left(session)
