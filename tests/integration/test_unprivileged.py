"""The emulated mode needs no root: a plain user boots the pair and measures.

Run as root (as CI does), the test creates a system user and runs the
scenario as that user, from a world-readable copy of the package, its Python
dependencies and the image (the clone and the root's cache may not be
readable by others). Run as a user, it runs the scenario as that user.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pydantic

import niclab
from tests.records import read_records

from .processes import wait_no_qemu

USER = "niclab-ci"


def ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        return pwd.getpwnam(USER)


def usable_python(user: str) -> str:
    """An interpreter the user can run that can load this venv's compiled packages."""
    candidates = [
        str(Path(sys.executable).resolve()),
        f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}",
    ]
    for candidate in candidates:
        if subprocess.run(["runuser", "-u", user, "--", "test", "-x", candidate]).returncode == 0:
            return candidate
    raise AssertionError(
        f"no Python {sys.version_info.major}.{sys.version_info.minor} that {user} can run "
        f"(tried {candidates}); install python3 from Debian"
    )


def link_or_copy(source: str, target: str) -> None:
    """Hard-link (instant, and the files are world-readable), or copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


# what `niclab run` never imports: left out of the user's copy of the packages
NOT_NEEDED = (
    "__pycache__",
    "niclab*",
    "_niclab*",
    "__editable__*",
    "playwright*",
    "pyarrow*",
    "pip",
    "pip-*",
    "setuptools*",
    "_pytest",
    "pytest*",
    "xdist*",
    "execnet*",
    "greenlet*",
    "pyee*",
)


def run_as(user: pwd.struct_passwd, base: Path, image, scenario: Path) -> subprocess.CompletedProcess:
    site = Path(pydantic.__file__).resolve().parents[1]
    shutil.copytree(Path(niclab.__file__).parent, base / "src" / "niclab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(site, base / "site", ignore=shutil.ignore_patterns(*NOT_NEEDED), copy_function=link_or_copy)
    (base / "image").mkdir()
    for name in ("vmlinuz", "initrd.img", "manifest.json"):
        shutil.copy(image.directory / name, base / "image" / name)
    shutil.copy(scenario, base / "scenario.yaml")
    for writable in ("home", "cache", "runs"):
        (base / writable).mkdir()
        os.chown(base / writable, user.pw_uid, user.pw_gid)
    env = [
        f"HOME={base / 'home'}",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"PYTHONPATH={base / 'src'}:{base / 'site'}",
        f"NICLAB_IMAGE={base / 'image'}",
        f"NICLAB_CACHE={base / 'cache'}",
    ]
    command = [
        "runuser",
        "-u",
        user.pw_name,
        "--",
        "env",
        "-i",
        *env,
        usable_python(user.pw_name),
        "-m",
        "niclab",
        "run",
        str(base / "scenario.yaml"),
        "--out",
        str(base / "runs"),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=base)


def test_unprivileged_user_runs_the_emulated_scenario(image, repo, tmp_path):
    scenario = repo / "scenarios" / "two-node.yaml"
    if os.geteuid() != 0:
        result = subprocess.run(
            [sys.executable, "-m", "niclab", "run", str(scenario), "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        base, uid = tmp_path, os.geteuid()
    else:
        user = ensure_user()
        base = Path(tempfile.mkdtemp(prefix="niclab-unprivileged-", dir="/tmp"))
        base.chmod(0o755)
        uid = user.pw_uid
        try:
            result = run_as(user, base, image, scenario)
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise
    try:
        assert result.returncode == 0, result.stderr
        run = next((base / "runs").iterdir()) if (base / "runs").is_dir() else next(tmp_path.iterdir())
        assert (run / "results.jsonl").stat().st_uid == uid != 0
        records = read_records(run / "results.jsonl")
        stream = next(r for r in records if r.get("name") == "netperf.TCP_STREAM.throughput_mbps")
        assert stream["value"] > 0
        cell = next(r for r in records if r["type"] == "cell")
        kvm_closed_to_others = os.path.exists("/dev/kvm") and not os.stat("/dev/kvm").st_mode & 0o006
        if os.geteuid() == 0 and kvm_closed_to_others:
            # The user cannot open /dev/kvm: the probe must fall back to TCG and say why.
            assert cell["rig"]["accel"] == "tcg"
            assert "not accessible" in cell["rig"]["accel_reason"]
        assert json.loads((run / "run.json").read_text())["status"] == "ok"
        assert wait_no_qemu(base, seconds=2) == []
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)
