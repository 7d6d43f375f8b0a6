"""nfs: a file workload over NFS. The server exports a tmpfs, the client runs fio on it.

The patterns and fio's command line, the NFSv4 server's set-up (no rpcbind, lockd or idmapd) and its
clean-up, which always runs: docs/benchmarks.md, "nfs: fio on an NFS share". Other benchmarks use the share
too (`share`, a context manager: bonnie).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from niclab.base import jsonbound
from niclab.base.node import CommandResult, GuestCommandError, GuestProcess, Node
from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo, quote
from niclab.model.bench.declare import Figure, GuestNeeds, KernelModule, Series, Shows
from niclab.model.bench.fields import Fields

EXPORT_DIR = "/srv/niclab-nfs"
MOUNT_DIR = "/mnt/niclab-nfs"
NFSD_FS = "/proc/fs/nfsd"
NFSD_THREADS = 8
SIZE = r"^[1-9][0-9]*[kmgKMG]?$"  # as fio and tmpfs read them (k, m, g: 2^10, 2^20, 2^30 bytes); ASCII digits
#: pattern -> fio's rw= and the directions it moves data in
PATTERNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "seqread": ("read", ("read",)),
    "randread": ("randread", ("read",)),
    "randrw": ("randrw", ("read", "write")),
}


def size_bytes(size: str) -> int:
    size = size.lower()
    return int(size.rstrip("kmg")) * {"k": 2**10, "m": 2**20, "g": 2**30}.get(size[-1], 1)


class ShareOptions(BenchOptions):
    """The NFS share's options, which every benchmark on the share takes (`share`)."""

    nfs_version: Literal["4.0", "4.1", "4.2"] = Field("4.2", description="NFS version the client mounts (vers=)")
    export_size: str = Field("128m", pattern=SIZE, description="size of the tmpfs the server exports (in its RAM)")

    @field_validator("peer")
    @classmethod
    def _across_a_link(cls, peer: str | None) -> str | None:
        if peer == "self":
            raise ValueError(
                "benchmarks on the NFS share take no peer: self (over loopback the node would mount its own "
                "export: no network reference); measure the loopback with lmbench, netperf or iperf3"
            )
        return peer


class NfsOptions(ShareOptions):
    block_size: str = Field("1m", pattern=SIZE, description="fio block size (bs) of seqread")
    random_block_size: str = Field("4k", pattern=SIZE, description="fio block size (bs) of randread and randrw")
    file_size: str = Field("32m", pattern=SIZE, description="each job's file (fio size=)")
    numjobs: int = Field(2, ge=1, le=16, description="fio jobs, each on its own file (numjobs=)")
    seconds: int = Field(10, ge=1, le=3600, description="run time of each pattern (runtime=, time_based)")
    direct: bool = Field(True, description="O_DIRECT on the client (direct=1), so every I/O crosses the link")

    @model_validator(mode="after")
    def _files_fit(self) -> NfsOptions:
        files = self.numjobs * size_bytes(self.file_size)
        if files + 2**20 > size_bytes(self.export_size):
            raise ValueError(
                f"numjobs x file_size ({files / 2**20:g} MiB) does not fit in export_size "
                f"{self.export_size} (leave 1 MiB for metadata)"
            )
        if max(size_bytes(self.block_size), size_bytes(self.random_block_size)) > size_bytes(self.file_size):
            raise ValueError("block sizes must not exceed file_size")
        return self


# -- fio ----------------------------------------------------------------------


def fio_argv(options: NfsOptions, pattern: str) -> list[str]:
    rw = PATTERNS[pattern][0]
    block = options.block_size if pattern == "seqread" else options.random_block_size
    return [
        "fio",
        "--name=niclab",
        f"--directory={MOUNT_DIR}",
        f"--rw={rw}",
        f"--bs={block}",
        f"--size={options.file_size}",
        f"--numjobs={options.numjobs}",
        f"--runtime={options.seconds}",
        "--time_based",
        f"--direct={int(options.direct)}",
        "--ioengine=psync",
        "--output-format=json",
    ]


def _split(stdout: str) -> tuple[str, Any]:
    """fio's own messages (it prints some on stdout, before the JSON) and the JSON (None: none)."""
    start = re.search(r"^\{", stdout, re.MULTILINE)
    if start is None:
        return stdout.strip(), None
    try:
        return stdout[: start.start()].strip(), jsonbound.loads(stdout[start.start() :])
    except ValueError:
        return stdout.strip(), None


def parse(pattern: str, stdout: str, stderr: str = "") -> list[Measurement]:
    """Measurements of one pattern from fio's --output-format=json (what it printed on stdout)."""
    messages, data = _split(stdout)
    messages = "; ".join(line for line in (messages + "\n" + stderr).splitlines() if line.strip())
    if data is None:
        raise BenchmarkError(f"fio {pattern} printed no JSON: {said(messages, 500) or '(nothing)'}")
    found_jobs = Fields(f"fio {pattern}", data).get("jobs")
    jobs = found_jobs.items() if found_jobs is not None else []
    if not jobs:
        raise BenchmarkError(f"fio {pattern}: the JSON has no jobs")
    for job in jobs:
        if (error := job.get("error")) is not None and error.value:
            code = error.integer()
            why = os.strerror(code) if 0 < code < 4096 else "not an errno"
            raise BenchmarkError(f"fio {pattern}: job error {code} ({why}): {said(messages, 500)}")
    found = []
    for direction in PATTERNS[pattern][1]:
        stats = [job[direction] for job in jobs]
        runtime_ms = max(s["runtime"].number() for s in stats)
        moved = math.fsum(s["io_bytes"].number() for s in stats)
        if runtime_ms <= 0 or moved <= 0:
            raise BenchmarkError(f"fio {pattern}: no {direction} completed")
        prefix = "" if len(PATTERNS[pattern][1]) == 1 else f"{direction}_"
        ios = math.fsum(s["total_ios"].number() for s in stats)
        extra = {"jobs": len(jobs), "runtime_s": runtime_ms / 1000, "bytes": moved}
        found += [
            Measurement("nfs", pattern, f"{prefix}bandwidth_mb_s", moved / runtime_ms * 1000 / 1e6, "MB/s", extra),
            Measurement("nfs", pattern, f"{prefix}iops", ios / runtime_ms * 1000, "/s", {"ios": ios}),
        ]
        if len(jobs) > 1:
            per_job = [s["bw_bytes"].number() / 1e6 for s in stats]
            found += [
                Measurement("nfs", pattern, f"{prefix}bandwidth_min_mb_s", min(per_job), "MB/s", headline=False),
                Measurement("nfs", pattern, f"{prefix}bandwidth_max_mb_s", max(per_job), "MB/s", headline=False),
            ]
    return found


# -- guest commands -------------------------------------------------------------


def _mounted(path: str) -> str:
    return f"grep -q ' {path} ' /proc/mounts"


def bracketed(address: str) -> str:
    """An address as exportfs and mount.nfs take it before `:/PATH`: an IPv6 one in brackets."""
    return f"[{address}]" if ":" in address else address


def server_setup(options: ShareOptions, server_address: str, client_address: str) -> list[tuple[str, str]]:
    """(step, shell command) to run on the server before rpc.mountd starts."""
    export = "rw,fsid=0,no_subtree_check,no_root_squash"
    return [
        ("load the nfsd module", "modprobe nfsd"),
        ("mount the nfsd control file system", f"{_mounted(NFSD_FS)} || mount -t nfsd nfsd {NFSD_FS}"),
        (
            "mount the export tmpfs",
            f"mkdir -p {EXPORT_DIR} /var/lib/nfs/v4recovery && "
            f"mount -t tmpfs -o size={options.export_size},mode=0755 niclab-nfs {EXPORT_DIR}",
        ),
        ("export the tmpfs", quote(["exportfs", "-i", "-o", export, f"{bracketed(client_address)}:{EXPORT_DIR}"])),
    ]


MOUNTD = "rpc.mountd -F -N 2 -N 3 -u"


def server_start(server_address: str) -> list[tuple[str, str]]:
    """(step, shell command) to run on the server once rpc.mountd runs."""
    return [
        ("start nfsd", f"rpc.nfsd -N 3 -U -H {server_address} {NFSD_THREADS}"),
        ("end the NFSv4 grace period", f"printf Y > {NFSD_FS}/v4_end_grace"),
    ]


def client_mount(options: ShareOptions, server_address: str) -> list[tuple[str, str]]:
    return [
        ("load the NFS client module", "modprobe nfsv4"),
        (
            "mount the export",
            f"mkdir -p {MOUNT_DIR} && "
            + quote(["mount.nfs", f"{bracketed(server_address)}:/", MOUNT_DIR, "-o", f"vers={options.nfs_version}"]),
        ),
    ]


def client_cleanup() -> list[tuple[str, str]]:
    umount = f"umount {MOUNT_DIR} || umount -f {MOUNT_DIR} || umount -l {MOUNT_DIR}"
    return [
        (
            "unmount the export",
            f"if {_mounted(MOUNT_DIR)}; then {umount}; fi; rmdir {MOUNT_DIR} 2>/dev/null; ! {_mounted(MOUNT_DIR)}",
        )
    ]


def server_cleanup() -> list[tuple[str, str]]:
    """Every step is safe when its part was never set up."""
    return [
        ("unexport", "! command -v exportfs >/dev/null || exportfs -ua"),
        ("stop nfsd", f"[ ! -e {NFSD_FS}/threads ] || rpc.nfsd 0"),
        (
            "remove the export tmpfs",
            f"! {_mounted(EXPORT_DIR)} || umount {EXPORT_DIR}; rmdir {EXPORT_DIR} 2>/dev/null; "
            f"rm -rf /var/lib/nfs/v4recovery; ! {_mounted(EXPORT_DIR)}",
        ),
        ("unmount the nfsd control file system", f"! {_mounted(NFSD_FS)} || umount {NFSD_FS}"),
    ]


def _have(programs: list[str]) -> str:
    return "; ".join(
        f"command -v {p} >/dev/null || {{ echo '{p} is not in the guest image' >&2; exit 1; }}" for p in programs
    )


def _run(node: Node, step: str, command: str, timeout: float = 60.0) -> CommandResult:
    try:
        return node.run(command, timeout=timeout, check=False)
    except GuestCommandError as exc:  # a time-out, or the agent went away
        raise BenchmarkError(f"nfs: {step} on {node.name} failed: {exc}") from None


def _step(node: Node, step: str, command: str, timeout: float = 60.0) -> None:
    result = _run(node, step, command, timeout)
    if not result.ok:
        detail = said(result.stderr.strip() or result.stdout, 500) or "(no output)"
        raise BenchmarkError(f"nfs: {step} on {node.name} failed (exit {result.returncode}): {detail}")


def _mount_options(node: Node) -> dict:
    """What the client really mounted (vers, rsize, wsize, proto), from /proc/mounts."""
    for line in node.get("/proc/mounts").decode().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == MOUNT_DIR:
            options = dict(o.partition("=")[::2] for o in fields[3].split(","))
            return {key: options.get(key) for key in ("vers", "rsize", "wsize", "proto")}
    raise BenchmarkError(f"nfs: {MOUNT_DIR} is not mounted on {node.name} after mount.nfs")


class Nfs:
    name: ClassVar[str] = "nfs"
    Options: ClassVar[type[NfsOptions]] = NfsOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(
        packages=("fio", "nfs-kernel-server"),
        programs=(
            "/usr/bin/fio",
            "/usr/sbin/rpc.nfsd",
            "/usr/sbin/rpc.mountd",
            "/usr/sbin/exportfs",
            "/usr/sbin/mount.nfs",
        ),
        modules=(
            KernelModule("nfsd", "NFSD", "the nfs benchmark's server", ("NETWORK_FILESYSTEMS", "FILE_LOCKING")),
            KernelModule("nfsv4", "NFS_V4", "the nfs benchmark's client", ("NETWORK_FILESYSTEMS", "NFS_FS")),
        ),
    )
    shows: ClassVar[Shows] = Shows(
        figures=(
            Figure(
                "pattern-bars",
                (
                    Series("nfs.seqread.bandwidth_mb_s", "seqread"),
                    Series("nfs.randread.bandwidth_mb_s", "randread"),
                    Series("nfs.randrw.read_bandwidth_mb_s", "randrw read"),
                    Series("nfs.randrw.write_bandwidth_mb_s", "randrw write"),
                ),
                section="fio over NFS",
                title="fio over NFS: bandwidth per pattern",
                caption="NFSv4 on a tmpfs across the link.",
                unit="MB/s (10^6 bytes)",
                order=50,
            ),
        )
    )

    def metrics(self) -> list[MetricInfo]:
        out = []
        for pattern, (_rw, directions) in PATTERNS.items():
            for direction in directions:
                prefix = "" if len(directions) == 1 else f"{direction}_"
                what = f"{pattern} {direction}s" if prefix else pattern
                out += [
                    MetricInfo(
                        f"nfs.{pattern}.{prefix}bandwidth_mb_s",
                        "MB/s",
                        f"{what}: bytes all jobs moved / the longest job's run time, 1 MB = 10^6 bytes",
                        "higher",
                        pace="rate",
                    ),
                    MetricInfo(
                        f"nfs.{pattern}.{prefix}bandwidth_min_mb_s",
                        "MB/s",
                        f"{what}: the slowest job's bandwidth (numjobs > 1), 1 MB = 10^6 bytes",
                        "higher",
                    ),
                    MetricInfo(
                        f"nfs.{pattern}.{prefix}bandwidth_max_mb_s",
                        "MB/s",
                        f"{what}: the fastest job's bandwidth (numjobs > 1), 1 MB = 10^6 bytes",
                        "higher",
                    ),
                    MetricInfo(
                        f"nfs.{pattern}.{prefix}iops",
                        "/s",
                        f"{what}: I/Os all jobs completed / the longest job's run time",
                        "higher",
                        pace="rate",
                    ),
                ]
        return out

    def describe(self, options: NfsOptions) -> str:
        return f"nfs v{options.nfs_version}"

    def estimate_seconds(self, options: NfsOptions) -> float:
        layout = options.numjobs * size_bytes(options.file_size) / 20e6  # written at ~20 MB/s under TCG
        return 8 + layout + len(PATTERNS) * (options.seconds + 1)  # set-up and clean-up take ~8 s

    def run(self, ctx: BenchContext, options: NfsOptions) -> list[Measurement]:
        client = ctx.ends.client
        found: list[Measurement] = []
        with share(ctx, options, ["fio"]) as mount:
            layout = options.numjobs * size_bytes(options.file_size) / 1e6  # 1 MB/s at worst
            for pattern in PATTERNS:
                argv = fio_argv(options, pattern)
                ctx.progress(f"nfs: fio {pattern}")
                result = _run(client, f"fio {pattern}", quote(argv), timeout=options.seconds + layout + 60)
                path = ctx.save_raw(
                    f"nfs-{pattern}", f"$ {quote(argv)}\n# exit {result.returncode}\n{result.stdout}{result.stderr}"
                )
                try:
                    measured = parse(pattern, result.stdout, result.stderr)
                except BenchmarkError as exc:
                    raise BenchmarkError(f"nfs: {exc} (exit {result.returncode}; raw output: {path})") from None
                if not result.ok:
                    raise BenchmarkError(
                        f"nfs: fio {pattern} exited {result.returncode}: "
                        f"{said(result.stderr or result.stdout, 500)} (raw output: {path})"
                    )
                found += [replace(m, extra={**m.extra, "mount": mount}) for m in measured]
        return found


@contextmanager
def share(ctx: BenchContext, options: ShareOptions, programs: list[str]) -> Iterator[dict]:
    """The server's tmpfs exported and mounted on the client at MOUNT_DIR for the length of the block.

    `programs` are what the block runs on the client (checked first, with
    mount.nfs); yields what the client really mounted (_mount_options). Clean-up
    always runs; its failures are an error only when the block succeeded (else
    the block's error is the one that counts).
    """
    ends = ctx.ends
    server, client = ends.server, ends.client
    mountd: GuestProcess | None = None
    try:
        _step(server, "find the NFS server programs", _have(["rpc.nfsd", "rpc.mountd", "exportfs"]))
        needed = [*programs, "mount.nfs"]
        _step(client, f"find {' and '.join(needed)}", _have(needed))
        for step, command in server_setup(options, ends.server_address, ends.client_address):
            _step(server, step, command)
        mountd = server.spawn(MOUNTD)
        for step, command in server_start(ends.server_address):
            _step(server, step, command)
        if (gone := mountd.poll()) is not None:
            raise BenchmarkError(
                f"nfs: rpc.mountd on {server.name} exited {gone.returncode}: {said(gone.stderr or gone.stdout, 500)}"
            )
        for step, command in client_mount(options, ends.server_address):
            _step(client, step, command)
        yield _mount_options(client)
    except BaseException:
        cleanup(client, server, mountd)
        raise
    problems = cleanup(client, server, mountd)
    if problems:
        raise BenchmarkError("nfs: clean-up failed: " + "; ".join(problems))


def cleanup(client: Node, server: Node, mountd: GuestProcess | None) -> list[str]:
    """Undo everything, each step even if an earlier one failed; the failures, as messages."""
    problems = []

    def attempt(node: Node, step: str, command: str) -> None:
        try:
            _step(node, step, command, timeout=30)
        except Exception as exc:  # a clean-up step that fails must not stop the others
            problems.append(str(exc))

    for step, command in client_cleanup():
        attempt(client, step, command)
    steps = server_cleanup()
    attempt(server, *steps[0])
    attempt(server, *steps[1])
    if mountd is not None:
        try:
            mountd.stop()
        except Exception as exc:
            problems.append(f"nfs: stop rpc.mountd on {server.name}: {exc}")
    for step, command in steps[2:]:
        attempt(server, step, command)
    return problems


PLUGIN = Nfs()
