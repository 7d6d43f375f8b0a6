"""The harness in a container: docker-compose.yml's `lab` service, as a user runs it.

The image is built the way `make docker` builds it (images/docker/build.sh: the base made from Debian
packages by base.sh where no registry answers, then compose), and Docker's build cache keeps it between
runs. The test starts dockerd itself when none answers, with no bridge and no iptables rules, and ends it
afterwards; the host's network must look the same after as before.

A copy of the checkout owned by an unprivileged user stands in for a user's clone: the container runs
as that user, without privileges, capabilities or network, and the run directory it writes must be on
the host and that user's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from niclab.plumbing.accel import choose_accel
from tests.fakes import REPO
from tests.integration.libvirt_netns import end_daemon, host_links, isolated_libvirt, names, virsh
from tests.integration.libvirt_netns import why_not as why_no_libvirt
from tests.records import read_records

USER = 4242  # the owner of the stand-in clone, as a user's own clone would be
BUILD_TIMEOUT_S = 2400  # a build with an empty cache on a slow machine (here: about 160 s)

# pytest-timeout's limit covers fixture set-up too, and the first test builds the image.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(BUILD_TIMEOUT_S + 900)]


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "starting dockerd and handing the clone to another user need root"
    for program in ("docker", "dockerd", "mmdebstrap"):
        if shutil.which(program) is None:
            return f"{program} is not installed (make test installs it: scripts/setup-host --test)"
    if compose() is None:
        return "neither `docker compose` nor docker-compose is installed (make test installs docker-compose)"
    return None


def compose() -> list[str] | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


if (reason := why_not()) is not None:
    pytest.skip(f"the lab container test cannot run here: {reason}", allow_module_level=True)
COMPOSE = compose() or []


def engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[None]:
    """A Docker engine: the one that answers, else a dockerd of the test's own, ended by PID at the end."""
    if engine_answers():
        yield
        return
    links = host_links()
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with open(log, "w") as sink:
        daemon = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false"],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not engine_answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not answer; the end of {log}:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        assert host_links() == links, "dockerd added a network device to the host's namespace"
        yield
    finally:
        end_daemon(daemon, seconds=60)
    assert host_links() == links


@pytest.fixture(scope="module")
def lab_image(engine, tmp_path_factory) -> str:
    log = tmp_path_factory.mktemp("build") / "build.log"
    started = time.monotonic()
    with open(log, "w") as sink:
        build = REPO / "images" / "docker" / "build.sh"
        proc = subprocess.run([str(build)], stdout=sink, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"images/docker/build.sh failed; the end of {log}:\n{log.read_text()[-4000:]}"
    print(f"\nlab image built (or found in the build cache) in {time.monotonic() - started:.0f} s", flush=True)
    return "niclab/lab"


def clone(repo: Path, into: Path, owner: int) -> Path:
    """The checkout's files (tracked and new, not ignored), owned by `owner`: a user's clone."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = repo / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    for path in [into, *into.rglob("*")]:
        os.chown(path, owner, owner)
    return into


@pytest.fixture(scope="module")
def user_clone(tmp_path_factory) -> Path:
    return clone(REPO, tmp_path_factory.mktemp("clone"), USER)


def lab(project: Path, *argv: str, files: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """`docker compose [-f …] run -T …` in `project`, as a user types it (without a terminal)."""
    command = [*COMPOSE, *(arg for f in ("docker-compose.yml", *files) for arg in ("-f", f)), "run", "-T"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NICLAB_")}  # the user's, not the suite's
    return subprocess.run(
        [*command, *argv], cwd=project, capture_output=True, text=True, timeout=900, env={**environment, **(env or {})}
    )


def only_run_dir(runs: Path, scenario: str = "two-node") -> Path:
    """The one run directory of `scenario` directly in `runs` (other tests' subdirectories aside)."""
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and p.name.endswith(f"-{scenario}")]
    return run_dir


def records(run_dir: Path) -> list[dict]:
    return read_records(run_dir / "results.jsonl")


def metrics(recs: list[dict]) -> dict[str, float]:
    return {r["name"]: r["value"] for r in recs if r["type"] == "measurement"}


def test_two_node_runs_in_the_container_and_the_results_land_on_the_host(lab_image, user_clone):
    name = f"niclab-test-{os.getpid()}"
    proc = lab(user_clone, "--name", name, "lab", "niclab", "run", "scenarios/two-node.yaml")
    try:
        inspected = json.loads(subprocess.run(["docker", "inspect", name], capture_output=True, check=True).stdout)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    host_config = inspected[0]["HostConfig"]
    assert host_config["Privileged"] is False and not host_config["Devices"]
    assert [cap.removeprefix("CAP_") for cap in host_config["CapDrop"]] == ["ALL"]
    assert sorted(cap.removeprefix("CAP_") for cap in host_config["CapAdd"]) == ["CHOWN", "SETGID", "SETPCAP", "SETUID"]
    assert host_config["NetworkMode"] == "none" and host_config["Init"] is True
    assert "no-new-privileges:true" in host_config["SecurityOpt"]

    run_dir = only_run_dir(user_clone / "runs")
    assert f"results: runs/{run_dir.name}/results.jsonl" in proc.stdout
    assert (run_dir / "report.html").stat().st_size > 0
    strangers = [p for p in [run_dir, *run_dir.rglob("*")] if p.stat().st_uid != USER or p.stat().st_gid != USER]
    assert not strangers, f"not the clone owner's: {strangers[:5]}"

    recs = records(run_dir)
    assert {r["type"] for r in recs} >= {"cell", "run", "measurement", "summary", "cell_end"}
    (cell,) = [r for r in recs if r["type"] == "cell"]
    assert cell["rig"]["backend"] == "qemu" and cell["rig"]["accel"] in ("kvm", "tcg")
    assert cell["network"]["interfaces"]["a/link0"]["model"] == "e1000"
    assert metrics(recs)["netperf.TCP_STREAM.throughput_mbps"] > 10
    assert metrics(recs)["netperf.TCP_RR.transaction_rate"] > 0


def no_capabilities(lines: list[str]) -> bool:
    """`grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status` says the process has no capability at all."""
    return len(lines) == 3 and all(line.split()[1] == "0000000000000000" for line in lines)


def test_the_container_runs_as_the_clone_owner_without_capabilities(lab_image, user_clone):
    proc = lab(user_clone, "--rm", "lab", "sh", "-c", "id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status")
    assert proc.returncode == 0, proc.stderr
    uid, gid, *caps = proc.stdout.splitlines()
    assert (int(uid), int(gid)) == (USER, USER)
    assert no_capabilities(caps), caps


def test_the_lab_containers_state_directory_is_their_own(lab_image, user_clone):
    """docker-compose.lab.yml: not the host's /var/lib/niclab, but a volume in which each user has a 0700
    directory of their own; niclab's checks of it pass."""
    made_run_libvirt = not Path("/run/libvirt").exists()  # the override mounts it: Docker makes it if missing
    try:
        proc = lab(
            user_clone,
            "--rm",
            "lab",
            "sh",
            "-c",
            'niclab lab leases && stat -c "%n %u %a" "$NICLAB_STATE" /var/lib/niclab',
            files=("docker-compose.lab.yml",),
        )
    finally:
        remove_state_volumes()
        if made_run_libvirt:
            shutil.rmtree("/run/libvirt", ignore_errors=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    leases, mine, volume = proc.stdout.splitlines()
    assert leases == "no card is leased"
    assert mine == f"/var/lib/niclab/uid-{USER} {USER} 700"
    assert volume.split()[1] == "0" and int(volume.split()[2], 8) & 0o022 == 0, volume


def remove_state_volumes() -> None:
    """The lab-state volumes docker-compose.lab.yml made (the test's own engine keeps them otherwise)."""
    listed = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.volume=lab-state"],
        capture_output=True,
        text=True,
    ).stdout.split()
    if listed:
        subprocess.run(["docker", "volume", "rm", "-f", *listed], capture_output=True)


def test_pytest_runs_the_scenario_in_the_container(lab_image, user_clone):
    proc = lab(user_clone, "--rm", "lab", "pytest", "scenarios/two-node.yaml", "--niclab-out", "runs/pytest")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
    run_dir = only_run_dir(user_clone / "runs" / "pytest")
    assert metrics(records(run_dir))["netperf.TCP_STREAM.throughput_mbps"] > 10
    assert run_dir.stat().st_uid == USER


@pytest.mark.skipif(not Path("/dev/kvm").exists(), reason="this host has no /dev/kvm to pass in")
def test_the_kvm_override_passes_dev_kvm_in(lab_image, user_clone):
    proc = lab(
        user_clone,
        "--rm",
        "lab",
        "sh",
        "-c",
        "test -c /dev/kvm && id -G && niclab accel",
        files=("docker-compose.kvm.yml",),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    groups, verdict = proc.stdout.split("\n", 1)
    kvm_group = Path("/dev/kvm").stat().st_gid
    assert (str(kvm_group) in groups.split()) == (kvm_group != 0)  # its group, unless that is root's
    assert verdict.split()[0] in ("kvm", "tcg"), verdict
    print(f"\nin the container with docker-compose.kvm.yml: {verdict.strip()}")


@pytest.fixture(scope="module")
def host_libvirtd(tmp_path_factory, image):
    if (reason := why_no_libvirt(("libvirtd", "virtlogd", "virsh", "ip"))) is not None:
        pytest.skip(f"no libvirtd of the test's own for the container to drive: {reason}")
    hide_kvm = choose_accel(image).accel != "kvm"
    with isolated_libvirt(tmp_path_factory.mktemp("libvirtd"), hide_kvm=hide_kvm) as isolated:
        yield isolated


FAKE_LAB = """\
name: fake-lab
hosts:
  rig1: {libvirt: qemu:///system}
cards:
  - {id: intel-a, host: rig1, pci: "0000:03:00.0", model: e1000}
  - {id: intel-b, host: rig1, pci: "0000:04:00.0", model: e1000}
cables:
  - [intel-a, intel-b]
"""


def test_a_lab_run_from_the_container_drives_the_hosts_libvirtd(lab_image, repo, host_libvirtd, tmp_path):
    # As root (without polkit, which this host lacks, libvirtd admits only root); leases in the containers'
    # own volume, never the host's /var/lib/niclab.
    root_clone = clone(repo, tmp_path / "clone", 0)
    (root_clone / "lab.yaml").write_text(FAKE_LAB)

    # The container's side of a passthrough run: /sys takes no writes there, and the cells map onto the
    # lab's cards as hostdevs (a dry run: these cards do not exist).
    planned = lab(
        root_clone,
        "--rm",
        "lab",
        "sh",
        "-c",
        "python3 -c 'from niclab.plumbing.lab.sysfs import Sysfs; print(\"sys writable:\", Sysfs().writable())' && "
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status && "  # root, as the checkout's owner: still none
        "niclab run scenarios/nic-shootout.yaml --lab lab.yaml --dry-run",
        files=("docker-compose.lab.yml",),
    )
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    assert "sys writable: False" in planned.stdout
    assert no_capabilities([line for line in planned.stdout.splitlines() if line.startswith("Cap")]), planned.stdout
    assert "cable 0: a/link0 intel-a (e1000 0000:03:00.0 on rig1) <-> b/link0 intel-b" in planned.stdout
    (domain,) = root_clone.glob("runs/dry-run-nic-shootout/nic=e1000/a.xml")
    hostdev = ET.parse(domain).find("devices/hostdev")
    assert hostdev is not None and hostdev.get("managed") == "yes"

    proc = lab(
        root_clone,
        "--rm",
        "lab",
        "niclab",
        "run",
        "scenarios/two-node.yaml",
        "--backend",
        "libvirt",
        files=("docker-compose.lab.yml",),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(only_run_dir(root_clone / "runs"))
    (cell,) = [r for r in recs if r["type"] == "cell"]
    assert cell["rig"]["backend"] == "libvirt" and set(cell["rig"]["libvirt"]) == {"a", "b"}
    assert metrics(recs)["netperf.TCP_STREAM.throughput_mbps"] > 10
    assert not {d for d in names(virsh("list", "--all", "--name")) if d.startswith("niclab-")}
    remove_state_volumes()
