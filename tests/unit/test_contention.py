"""Host contention from /proc: a fake /proc tree with the figures measured on this machine's kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.plumbing import contention
from niclab.plumbing.contention import host_load, snapshot

HZ = contention.CLOCK_TICKS


class FakeProc:
    """/proc/stat, /proc/pressure/cpu and QEMU processes whose threads have schedstat and comm."""

    def __init__(self, root: Path):
        self.root = root
        self.ticks = [0] * 10
        self.pressure: int | None = 0
        self.threads: dict[int, dict[int, tuple[str, int, int]]] = {}
        self.write()

    def write(self) -> None:
        (self.root / "pressure").mkdir(parents=True, exist_ok=True)
        (self.root / "stat").write_text("cpu  " + " ".join(map(str, self.ticks)) + "\ncpu0 0 0 0 0\n")
        if self.pressure is None:
            (self.root / "pressure" / "cpu").unlink(missing_ok=True)
        else:
            (self.root / "pressure" / "cpu").write_text(
                f"some avg10=1.00 avg60=1.00 avg300=1.00 total={self.pressure}\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            )
        for pid, threads in self.threads.items():
            ticks = sum(run_ns for _, run_ns, _ in threads.values()) * HZ // 1_000_000_000
            fields = ["S"] + ["0"] * 10 + [str(ticks), "0"] + ["0"] * 30  # state, ..., utime, stime, ...
            (self.root / str(pid)).mkdir(parents=True, exist_ok=True)
            (self.root / str(pid) / "stat").write_text(f"{pid} (niclab-x) {' '.join(fields)}\n")
            for tid, (name, run_ns, wait_ns) in threads.items():
                task = self.root / str(pid) / "task" / str(tid)
                task.mkdir(parents=True, exist_ok=True)
                (task / "comm").write_text(name + "\n")
                (task / "schedstat").write_text(f"{run_ns} {wait_ns} 100\n")

    def advance(self, seconds: float, *, guests_core_pct: float, others_core_pct: float, wait_pct: float,
                steal_pct: float = 0.0, cpus: int = 2) -> None:  # fmt: skip
        """`seconds` of the host: the guests' QEMUs and other processes busy so much, the rest idle."""
        busy_ticks = seconds * HZ * (guests_core_pct + others_core_pct) / 100
        steal_ticks = seconds * HZ * cpus * steal_pct / 100
        self.ticks[0] += int(busy_ticks)
        self.ticks[7] += int(steal_ticks)
        self.ticks[3] += int(seconds * HZ * cpus - busy_ticks - steal_ticks)
        if self.pressure is not None:
            self.pressure += int(seconds * 1e6 * 0.4)
        share = guests_core_pct / 100 / sum(len(t) for t in self.threads.values())
        for threads in self.threads.values():
            for tid, (name, run_ns, wait_ns) in threads.items():
                waited = wait_pct / 100 * seconds * 1e9 if name.startswith("CPU ") else 0
                threads[tid] = (name, run_ns + int(share * seconds * 1e9), wait_ns + int(waited))
        self.write()


@pytest.fixture
def proc(tmp_path):
    fake = FakeProc(tmp_path / "proc")
    fake.threads = {100: {100: ("niclab-a", 0, 0), 101: ("CPU 0/TCG", 0, 0)},
                    200: {200: ("niclab-b", 0, 0), 201: ("CPU 0/TCG", 0, 0)}}  # fmt: skip
    fake.write()
    return fake


def measure(proc: FakeProc, monkeypatch, **host) -> contention.HostLoad:
    clock = iter([1000.0, 1008.0])
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(clock))
    before = snapshot({"a": 100, "b": 200}, proc.root)
    proc.advance(8.0, **host)
    return host_load(before, snapshot({"a": 100, "b": 200}, proc.root), cpus=2)


def test_a_quiet_host_is_not_contended_though_the_vcpus_wait(proc, monkeypatch):
    load = measure(proc, monkeypatch, guests_core_pct=143, others_core_pct=0, wait_pct=20)
    assert not load.contended and load.reasons == []
    assert load.vcpu_wait_pct == {"a": 20.0, "b": 20.0} and load.qemu_cpu_pct == pytest.approx(143, abs=0.5)
    assert load.others_cpu_pct == pytest.approx(0, abs=1) and load.pressure_pct == 40.0 and load.steal_pct == 0


def test_a_busy_process_beside_the_guests_is_contention(proc, monkeypatch):
    load = measure(proc, monkeypatch, guests_core_pct=96, others_core_pct=90, wait_pct=35)
    assert load.contended
    (reason,) = load.reasons
    assert reason.startswith("other processes used 90 % of a core while the host's 2 CPUs were 93 % busy")
    assert reason.endswith("(the guests' vCPUs waited for a CPU up to 35 % of the time)")


def test_other_processes_on_a_host_with_cpu_to_spare_are_no_contention(proc, monkeypatch):
    load = measure(proc, monkeypatch, guests_core_pct=60, others_core_pct=60, wait_pct=2)
    assert not load.contended and load.others_cpu_pct == pytest.approx(60, abs=1)


def test_steal_time_is_contention(proc, monkeypatch):
    load = measure(proc, monkeypatch, guests_core_pct=100, others_core_pct=0, wait_pct=5, steal_pct=12)
    assert load.contended and load.reasons == ["the host's hypervisor stole 12 % of its CPU time"]


def test_no_psi_and_a_guest_gone_meanwhile(proc, monkeypatch):
    proc.pressure = None
    proc.write()
    clock = iter([0.0, 5.0])
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(clock))
    before = snapshot({"a": 100, "b": 200, "c": 300}, proc.root)  # c: no such process
    assert set(before.threads) == {"a", "b"}
    load = host_load(before, snapshot({"a": 100}, proc.root), cpus=2)
    assert load.pressure_pct is None and set(load.vcpu_wait_pct) == {"a"}


def test_watch_without_guests_on_this_host_measures_nothing(proc):
    with contention.watch({}, proc.root) as watched:
        pass
    assert watched.load is None


def test_a_benchmarks_contention_is_one_line_with_its_worst_run(proc, monkeypatch):
    quiet = measure(proc, monkeypatch, guests_core_pct=143, others_core_pct=0, wait_pct=20)
    busy = measure(proc, monkeypatch, guests_core_pct=96, others_core_pct=90, wait_pct=35)
    busier = measure(proc, monkeypatch, guests_core_pct=90, others_core_pct=99, wait_pct=38)
    assert contention.contention_of([quiet, quiet]) == []
    (line,) = contention.contention_of([busy, quiet, busier])
    assert line.startswith("2 of 3 runs; the worst: other processes used 99 % of a core")


def test_without_schedstat_the_guests_cpu_still_comes_from_their_processes(proc, monkeypatch):
    clock = iter([0.0, 8.0])
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(clock))
    before = snapshot({"a": 100, "b": 200}, proc.root)
    proc.advance(8.0, guests_core_pct=143, others_core_pct=0, wait_pct=20)
    for stat in proc.root.glob("*/task/*/schedstat"):
        stat.unlink()  # a kernel without schedstats
    load = host_load(before, snapshot({"a": 100, "b": 200}, proc.root), cpus=2)
    assert load.vcpu_wait_pct == {} and load.qemu_cpu_pct == pytest.approx(143, abs=1)
    assert load.others_cpu_pct == pytest.approx(0, abs=1) and not load.contended
