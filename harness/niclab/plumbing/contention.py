"""Did the guests get their CPU? The host's load while a benchmark ran, sampled from /proc.

Per guest its QEMU threads' time on and waiting for a CPU (`schedstat`); the host's CPU pressure, steal and
other processes' busy time. A benchmark is contended when the host was saturated (`SATURATED_PCT`) and others
used `OTHERS_LIMIT_PCT` of a core, or steal passed `STEAL_LIMIT_PCT` (docs/architecture.md, "A busy host is
told apart from a slower driver"; the calibration: docs/measurements.md, "Host contention").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from niclab.base.procs import stat_fields

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: The host's CPUs this busy (all of them, in %) or more: saturated, no spare CPU for the guests.
SATURATED_PCT = 80.0
#: Processes other than the guests (the harness among them) using this much of a core on a saturated host.
OTHERS_LIMIT_PCT = 20.0
#: Steal time (the hypervisor under this host ran something else) beyond this share: contended.
STEAL_LIMIT_PCT = 5.0


@dataclass(frozen=True)
class ThreadTimes:
    name: str  # the thread's comm, e.g. "CPU 0/TCG" or "qemu-system-x86"
    run_ns: int  # on a CPU
    wait_ns: int  # runnable, waiting for a CPU

    @property
    def vcpu(self) -> bool:
        return self.name.startswith("CPU ")


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic()
    cpu_ticks: tuple[int, ...]  # /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal ...
    pressure_us: int | None  # /proc/pressure/cpu "some total", None without PSI
    threads: dict[str, dict[int, ThreadTimes]]  # node -> tid -> times (nodes whose process is gone: absent)
    process_ticks: dict[str, int]  # node -> its process's user + system time (/proc/PID/stat), in clock ticks


@dataclass(frozen=True)
class HostLoad:
    """The host while one benchmark ran. Percentages are of the wall time; CPU use is in % of one core."""

    seconds: float
    cpus: int
    vcpu_wait_pct: dict[str, float]  # node -> the most any of its vCPU threads waited for a CPU
    vcpu_run_pct: dict[str, float]  # node -> its vCPU threads' CPU use
    qemu_cpu_pct: float  # every guest's QEMU, all threads
    others_cpu_pct: float  # the host's busy time beyond the guests' (the harness included)
    pressure_pct: float | None  # CPU pressure, "some"
    steal_pct: float  # of all the host's CPUs
    contended: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def cpu_ticks(proc: Path = PROC) -> tuple[int, ...]:
    text = _read(proc / "stat") or ""
    for line in text.splitlines():
        if line.startswith("cpu "):
            return tuple(int(v) for v in line.split()[1:])
    return ()


def pressure_us(proc: Path = PROC) -> int | None:
    text = _read(proc / "pressure" / "cpu")
    for line in (text or "").splitlines():
        if line.startswith("some "):
            fields = dict(item.split("=", 1) for item in line.split()[1:])
            return int(fields["total"])
    return None


def thread_times(pid: int, proc: Path = PROC) -> dict[int, ThreadTimes]:
    """Each thread of the process: its name and its schedstat (empty if the process is gone)."""
    found = {}
    try:
        tids = [int(t) for t in os.listdir(proc / str(pid) / "task")]
    except OSError:
        return {}
    for tid in tids:
        task = proc / str(pid) / "task" / str(tid)
        stat, name = _read(task / "schedstat"), _read(task / "comm")
        if stat is None or name is None:
            continue  # the thread ended meanwhile
        run_ns, wait_ns, *_ = (int(v) for v in stat.split())
        found[tid] = ThreadTimes(name.strip(), run_ns, wait_ns)
    return found


def process_ticks(pid: int, proc: Path = PROC) -> int | None:
    """The process's user + system time in clock ticks, all its threads (None if it is gone)."""
    fields = stat_fields(pid, proc)
    return None if fields is None else int(fields[11]) + int(fields[12])  # utime, stime


def snapshot(pids: Mapping[str, int], proc: Path = PROC) -> Snapshot:
    return Snapshot(
        time.monotonic(),
        cpu_ticks(proc),
        pressure_us(proc),
        {node: times for node, pid in pids.items() if (times := thread_times(pid, proc))},
        {node: ticks for node, pid in pids.items() if (ticks := process_ticks(pid, proc)) is not None},
    )


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole > 0 else 0.0


def host_load(
    before: Snapshot,
    after: Snapshot,
    cpus: int | None = None,
    saturated_pct: float = SATURATED_PCT,
    others_limit_pct: float = OTHERS_LIMIT_PCT,
    steal_limit_pct: float = STEAL_LIMIT_PCT,
) -> HostLoad:
    cpus = cpus or os.cpu_count() or 1
    wall = after.at - before.at
    wall_ns = wall * 1e9
    wait, run = {}, {}
    for node, now in after.threads.items():
        then = before.threads.get(node, {})
        deltas = {tid: (t, t.run_ns - then[tid].run_ns, t.wait_ns - then[tid].wait_ns) for tid, t in now.items()
                  if tid in then}  # fmt: skip
        vcpus = [(d_run, d_wait) for t, d_run, d_wait in deltas.values() if t.vcpu]
        wait[node] = _pct(max((d_wait for _, d_wait in vcpus), default=0), wall_ns)
        run[node] = _pct(sum(d_run for d_run, _ in vcpus), wall_ns)
    ticks = [a - b for a, b in zip(after.cpu_ticks, before.cpu_ticks, strict=False)]
    wall_ticks = wall * CLOCK_TICKS * cpus
    idle = sum(ticks[3:5]) if len(ticks) >= 5 else 0  # idle and iowait
    steal = ticks[7] if len(ticks) >= 8 else 0
    busy_core_pct = 100.0 * (sum(ticks[:8]) - idle - steal) / (wall * CLOCK_TICKS) if wall > 0 else 0.0
    # the guests' CPU from their processes' accounting, which every kernel keeps (schedstat may be missing)
    qemu_ticks = sum(t - before.process_ticks[n] for n, t in after.process_ticks.items() if n in before.process_ticks)
    qemu_pct = _pct(qemu_ticks, wall * CLOCK_TICKS)
    pressure = None
    if before.pressure_us is not None and after.pressure_us is not None:
        pressure = _pct(after.pressure_us - before.pressure_us, wall * 1e6)
    load = HostLoad(
        seconds=round(wall, 2),
        cpus=cpus,
        vcpu_wait_pct=wait,
        vcpu_run_pct=run,
        qemu_cpu_pct=qemu_pct,
        others_cpu_pct=round(max(0.0, busy_core_pct - qemu_pct), 1),
        pressure_pct=pressure,
        steal_pct=_pct(steal, wall_ticks),
    )
    reasons = []
    host_busy_pct = (load.qemu_cpu_pct + load.others_cpu_pct) / cpus
    if host_busy_pct >= saturated_pct and load.others_cpu_pct >= others_limit_pct:
        waited = max(wait.values(), default=0.0)
        reasons.append(
            f"other processes used {load.others_cpu_pct:g} % of a core while the host's {cpus} CPUs were "
            f"{host_busy_pct:.0f} % busy (the guests' vCPUs waited for a CPU up to {waited:g} % of the time)"
        )
    if load.steal_pct >= steal_limit_pct:
        reasons.append(f"the host's hypervisor stole {load.steal_pct:g} % of its CPU time")
    return replace(load, contended=bool(reasons), reasons=reasons)


def contention_of(loads: Sequence[HostLoad]) -> list[str]:
    """A benchmark's contention over its repeats, for its summary: one line (how many runs, and the worst
    one's reasons), or none when every run got its CPU."""
    contended = [load for load in loads if load.contended]
    if not contended:
        return []
    worst = max(contended, key=lambda load: load.others_cpu_pct + load.steal_pct)
    return [f"{len(contended)} of {len(loads)} runs; the worst: {'; '.join(worst.reasons)}"]


class Watch:
    """What `watch` measured, once its block has ended."""

    load: HostLoad | None = None


@contextmanager
def watch(pids: Mapping[str, int], proc: Path = PROC) -> Iterator[Watch]:
    """Sample the host around the block; `.load` is set when it ends (None without guests on this host)."""
    result = Watch()
    before = snapshot(pids, proc) if pids else None
    yield result
    if before is not None:
        result.load = host_load(before, snapshot(pids, proc))
