"""The kernel's own NIC driver tests on emulated cards: ping.py on virtio and e1000, and a guest that panics.

Both cards are links of one rig (one boot): the kselftest benchmark runs
drivers/net's ping.py and stats.py on node a with NETIF its port on each link
and node b as the remote, over ssh. Trixie's kernel, whose linux-source has the
tests (fetched and cached once, like its kernel). The second test runs a
bundle of the developer's own (`bundle:`): the same tests plus one that
panics the guest, which must be recorded as a crash, and the next test must
run on the rig booted anew.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from niclab.model.kernel_choice import KernelChoice
from niclab.plumbing.kselftest.bundle import bundle_for
from tests.helpers import run_dirs
from tests.records import read_records

from .processes import niclab, wait_no_qemu

TWO_CARDS = """\
name: selftests-two-cards
nodes: [a, b]
kernel: trixie
links:
  - between: [a, b]
    nic: virtio
  - between: [a, b]
    nic: e1000
benchmarks:
  - kselftest: {targets: [drivers/net], tests: [ping.py, stats.py], link: 0}
  - kselftest: {targets: [drivers/net], tests: [ping.py, stats.py], link: 1}
"""

PANIC = """\
name: selftests-panic
nodes: [a, b]
kernel: trixie
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - kselftest: {targets: [drivers/net], tests: [niclab_panic.sh, ping.py], bundle: bundle}
"""

PANIC_TEST = """\
#!/bin/sh
# A test that panics the guest's kernel (sysrq c): the crash a driver bug would cause.
echo "TAP version 13"
echo c > /proc/sysrq-trigger
"""


def run(scenario: Path, out: Path, timeout: float = 1500) -> tuple[int, str, str, Path]:
    proc = niclab("run", str(scenario), "--out", str(out))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (run_dir,) = run_dirs(out)
    return proc.returncode, stdout, stderr, run_dir


def results_of(run_dir: Path) -> dict[tuple[int, str, str | None], dict]:
    return {
        (r["link"], r["test"], r.get("subtest")): r
        for r in read_records(run_dir / "results.jsonl")
        if r["type"] == "test"
    }


def test_ping_and_stats_on_virtio_and_e1000(image, tmp_path):
    scenario = tmp_path / "two-cards.yaml"
    scenario.write_text(TWO_CARDS)
    code, out, err, run_dir = run(scenario, tmp_path / "runs")
    assert wait_no_qemu(tmp_path) == []
    tests = results_of(run_dir)
    assert code == 0 and tests, err
    for link, driver in ((0, "virtio_net"), (1, "e1000")):
        ping = tests[(link, "ping.py", None)]
        assert ping["nic"]["driver"] == driver, ping
        assert ping["result"] == "pass", (ping, (run_dir / "cells/default/raw").iterdir())
        assert tests[(link, "ping.py", "ping.test_v4")]["result"] == "pass"
        # the links are dual-stack: the IPv6 case runs (LOCAL_V6), and socat's TCP goes over IPv6, both ways
        assert tests[(link, "ping.py", "ping.test_v6")]["result"] == "pass"
        assert tests[(link, "ping.py", "ping.test_tcp")]["result"] == "pass"
        stats = tests[(link, "stats.py", None)]
        assert stats["result"] in ("pass", "fail"), stats  # ran to its end and judged (the map says which)
        subtests = {sub for (on, test, sub) in tests if on == link and test == "stats.py" and sub}
        assert subtests >= {"stats.check_pause", "stats.pkt_byte_sum"}, subtests
        assert ping["kernel"].startswith("6.12"), ping
        assert ping["tests_from"].startswith("Debian trixie linux-source-6.12"), ping
    nipa = run_dir / "nipa.json"
    assert nipa.is_file()
    assert "kselftest" in out  # the table's rows


def test_a_panicking_test_is_a_crash_and_the_next_runs_after_a_reboot(image, tmp_path):
    installed = bundle_for(KernelChoice(suite="trixie"), ("drivers/net",), lambda m: None)
    bundle = tmp_path / "bundle"
    with tarfile.open(installed.archive) as archive:
        archive.extractall(bundle)  # niclab's own cached bundle
    (bundle / "drivers/net/niclab_panic.sh").write_text(PANIC_TEST)
    (bundle / "drivers/net/niclab_panic.sh").chmod(0o755)
    listed = (bundle / "kselftest-list.txt").read_text()
    (bundle / "kselftest-list.txt").write_text("drivers/net:niclab_panic.sh\n" + listed)
    scenario = tmp_path / "panic.yaml"
    scenario.write_text(PANIC)
    code, _, err, run_dir = run(scenario, tmp_path / "runs")
    assert wait_no_qemu(tmp_path) == []
    tests = results_of(run_dir)
    crash = tests[(0, "niclab_panic.sh", None)]
    assert crash["result"] == "crash", crash
    assert "panic" in crash["reason"].lower() or "sysrq" in crash["reason"].lower(), crash
    assert any("sysrq" in line.lower() or "Kernel panic" in line for line in crash["console"]), crash
    assert "booting the rig anew" in err
    assert tests[(0, "ping.py", None)]["result"] == "pass", tests[(0, "ping.py", None)]  # on the new boot
    attempted = (run_dir / "cells/default/kselftest.attempted").read_text().splitlines()
    assert attempted == ["drivers/net:niclab_panic.sh", "drivers/net:ping.py"]
    assert code == 0, err  # a crash is a result, not a failure of the run
    shutil.rmtree(bundle)
