import json
import os
import subprocess
import sys
import textwrap
import time

from niclab.base import procs


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if procs.process_start_time(pid) is None:
            return True
        time.sleep(0.05)
    return False


def test_supervisor_records_and_stops_children(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    with procs.Supervisor(tmp_path / "run") as supervisor:
        child = supervisor.start("sleeper", ["sleep", "60"], cwd=tmp_path, log=tmp_path / "sleep.log")
        record = json.loads((tmp_path / "run" / "pids" / "sleeper.json").read_text())
        assert record["pid"] == child.pid and record["start"] == procs.process_start_time(child.pid)
        assert len(list((tmp_path / "cache" / "live").glob("*.json"))) == 1
    assert child.popen.poll() is not None
    assert not (tmp_path / "run" / "pids" / "sleeper.json").exists()
    assert not list((tmp_path / "cache" / "live").glob("*.json"))


def test_children_die_with_a_killed_harness(tmp_path):
    """A harness killed with SIGKILL runs no cleanup; PR_SET_PDEATHSIG must end its children."""
    script = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        os.environ["NICLAB_CACHE"] = {str(tmp_path / "cache")!r}
        from niclab.base.procs import Supervisor
        supervisor = Supervisor(Path({str(tmp_path / "run")!r})).__enter__()
        child = supervisor.start("sleeper", ["sleep", "60"], cwd=Path("/"), log=Path({str(tmp_path / "log")!r}))
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(harness.stdout.readline())
    assert procs.process_start_time(child_pid) is not None
    harness.kill()
    harness.wait()
    assert wait_gone(child_pid), "the child outlived its SIGKILLed harness"


def test_down_ends_only_what_a_dead_harness_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    # A leftover: a process recorded by a harness that is gone (pid 0 start 0 never matches).
    leftover = subprocess.Popen(["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        pid_dir = tmp_path / "run" / "pids"
        pid_dir.mkdir(parents=True)
        (pid_dir / "qemu-a.json").write_text(
            json.dumps({"name": "qemu-a", "pid": leftover.pid, "start": procs.process_start_time(leftover.pid)})
        )
        # A record whose PID was recycled: same PID, other start time, must be left alone.
        (pid_dir / "qemu-b.json").write_text(json.dumps({"name": "qemu-b", "pid": bystander.pid, "start": 1}))
        live = tmp_path / "cache" / "live"
        live.mkdir(parents=True)
        (live / "dead.json").write_text(
            json.dumps({"harness_pid": 999999999, "harness_start": 0, "pid_dir": str(pid_dir)})
        )
        ended = procs.down()
        assert [(e.name, e.pid) for e in ended] == [("qemu-a", leftover.pid)]
        assert leftover.wait(5) is not None
        assert bystander.poll() is None
        assert not list(live.glob("*.json")) and not list(pid_dir.glob("*.json"))
        assert procs.down() == []
    finally:
        for proc in (leftover, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_down_leaves_running_harnesses_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    with procs.Supervisor(tmp_path / "run") as supervisor:
        child = supervisor.start("sleeper", ["sleep", "60"], cwd=tmp_path, log=tmp_path / "log")
        assert procs.down() == []
        assert child.popen.poll() is None
        ended = procs.down(include_running=True)
        assert [e.pid for e in ended] == [child.pid]
    assert os.path.exists(tmp_path / "run")
