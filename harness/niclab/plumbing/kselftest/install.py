"""tools/testing/selftests installed for some targets, read, packed; an installed tree from elsewhere checked.

A kernel source (Debian's linux-source tarball, or a copy of a build tree's
parts) is installed as the kernel's own Makefile does it:
`make -C tools/testing/selftests TARGETS=... INSTALL_PATH=DIR install`
(needs make, rsync and gcc: net/lib's csum helper is compiled on the host).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.text import said
from niclab.base.treewalk import open_beneath, shown_path, walk_untrusted
from niclab.model.selftests import LIST_FILE, parse_list, parse_settings
from niclab.plumbing.confined import give_to_nobody, run_step

#: What `make install` of the selftests reads of a kernel tree (the rest of it is not needed): folders, files.
SOURCE_DIRS = ("tools", "Documentation/netlink", "scripts", "include/uapi", "usr/include")
SOURCE_FILES = ("Makefile",)
HOST_TOOLS = ("make", "rsync", "gcc")
MAKE_TIMEOUT = 600
MAX_BYTES = 64 << 20  # an installed tree a scenario names: the drivers/net targets install about 1 MB
MAX_FILES = 20000


def missing_tools() -> list[str]:
    return [tool for tool in HOST_TOOLS if shutil.which(tool) is None]


def make_install(source: Path, targets: tuple[str, ...], out: Path, log: Path) -> None:
    """Install the targets' selftests of the kernel tree `source` (niclab's own copy) into `out`; its make output
    goes to `log`. The tree's Makefiles are untrusted: as root they run as nobody (the copy and `out` made
    nobody's), and nothing they start outlives the install (plumbing.confined)."""
    if missing := missing_tools():
        raise NiclabError(f"installing kernel selftests needs {', '.join(missing)} on this host: run `make setup`")
    out.mkdir(parents=True, exist_ok=True)
    give_to_nobody(source, out)
    command = [
        "make",
        "-s",
        "-C",
        str(source / "tools/testing/selftests"),
        f"TARGETS={' '.join(targets)}",
        f"INSTALL_PATH={out}",
        "install",
    ]
    log.write_text("$ " + " ".join(command) + "\n")
    where = f"installing the selftests of {source}"
    status = run_step(command, log, MAKE_TIMEOUT, where, append=True)
    if status != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise NiclabError(f"{where} failed ({said(tail[0], 200, last=False)}); its output: {log}")


def copy_tree_parts(tree: Path, out: Path) -> None:
    """The parts of a build tree `make install` reads, copied to `out` (it writes next to its sources, and the
    developer's tree is not niclab's to write)."""
    for part in SOURCE_DIRS + SOURCE_FILES:
        path = tree / part
        if path.is_dir():
            shutil.copytree(path, out / part, symlinks=True, ignore_dangling_symlinks=True)  # links as links
        elif path.is_file():
            (out / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out / part)


def extract_source(deb: Path, package: str, out: Path) -> Path:
    """The parts of Debian's linux-source-X.Y package's tarball `make install` reads, under `out`; the tree."""
    member = f"./usr/src/{package}.tar.xz"
    patterns = [f"{package}/{part}/*" for part in SOURCE_DIRS] + [f"{package}/{part}" for part in SOURCE_FILES]
    unpack = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    inner = subprocess.Popen(["tar", "-xO", "-f", "-", member], stdin=unpack.stdout, stdout=subprocess.PIPE)
    assert unpack.stdout is not None and inner.stdout is not None
    unpack.stdout.close()
    done = subprocess.run(
        ["tar", "-xJ", "--no-same-owner", "-C", str(out), "--wildcards", *patterns],
        stdin=inner.stdout,
        capture_output=True,
        timeout=MAKE_TIMEOUT,
    )
    inner.stdout.close()
    inner.wait(timeout=MAKE_TIMEOUT)
    unpack.wait(timeout=MAKE_TIMEOUT)
    tree = out / package
    # a part the tarball lacks (usr/include: headers not installed) is tar's "Not found in archive", no failure
    trouble = [
        line
        for line in done.stderr.decode(errors="replace").splitlines()
        if line.strip() and "Not found in archive" not in line and "Exiting with failure status" not in line
    ]
    if unpack.returncode or inner.returncode or trouble or not (tree / "tools/testing/selftests/Makefile").is_file():
        reason = (trouble or [f"no {member} with tools/testing/selftests"])[0]
        raise NiclabError(f"{deb.name} holds no kernel selftests to install ({reason[:200]})")
    return tree


@dataclass(frozen=True)
class Installed:
    """What an installed selftests tree lists: its tests and each target's timeout."""

    tests: tuple[tuple[str, str], ...]
    timeouts: dict[str, int]


def read_installed(root: Path, targets: tuple[str, ...], where: str) -> Installed:
    """kselftest-list.txt and the targets' `settings` of an installed tree; `where` names it in errors."""
    listing = root / LIST_FILE
    if not listing.is_file() or listing.is_symlink():
        raise NiclabError(
            f"{where} has no {LIST_FILE}: it is not what `make -C tools/testing/selftests "
            f'TARGETS="{" ".join(targets)}" INSTALL_PATH=DIR install` writes'
        )
    try:
        tests = parse_list(listing.read_text(errors="replace"), f"{where}/{LIST_FILE}")
    except ValueError as exc:
        raise NiclabError(f"{exc}; fix: install the selftests again") from None
    listed = {target for target, _ in tests}
    if absent := [t for t in targets if t not in listed]:
        raise NiclabError(
            f"{where} has no {', '.join(absent)} tests in its {LIST_FILE}; fix: install them with "
            f'`make -C tools/testing/selftests TARGETS="{" ".join(targets)}" INSTALL_PATH=DIR install`'
        )
    timeouts = {}
    for target in targets:
        settings = root / target / "settings"
        if settings.is_file() and not settings.is_symlink():
            if (seconds := parse_settings(settings.read_text(errors="replace")[:4096])) is not None:
                timeouts[target] = seconds
    return Installed(tuple((t, test) for t, test in tests if t in targets), timeouts)


def walk(root: Path, where: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` (relative path, lstat), refusing what an installed tree never holds: symbolic
    links that leave it, devices, sockets and pipes, more than MAX_BYTES or MAX_FILES."""
    return walk_untrusted(
        root,
        where,
        MAX_BYTES,
        MAX_FILES,
        fix="install only the selftests' targets",
        link_fix="install with `make ... install` (it copies files), or replace the link by its file",
    )


def stamp(root: Path, where: str) -> str:
    """What changes when a file of the tree does: every entry's path, size and time."""
    digest = hashlib.sha256()
    for path, info in walk(root, where):
        digest.update(os.fsencode(path) + f" {info.st_mode:o} {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def pack(root: Path, out: Path, where: str) -> None:
    """A gzip'd tar of the tree (paths relative to it, owned by root), checked as it is read: a file that
    turned into something else since `walk` is refused, never followed."""
    with tarfile.open(out, "w:gz", compresslevel=6) as archive:
        for path, seen in walk(root, where):
            full = root / path
            try:  # a file opened from its folder's, each folder from the one above it: never through a link
                fd = open_beneath(root, path) if stat.S_ISREG(seen.st_mode) else -1
            except OSError as exc:
                raise NiclabError(
                    f"{where}: cannot read {shown_path(path)} ({exc.strerror or exc}); fix: make it readable"
                ) from None
            try:
                info = os.fstat(fd) if fd >= 0 else os.lstat(full)
                member = tarfile.TarInfo(path)
                member.mtime = int(info.st_mtime)
                member.mode = stat.S_IMODE(info.st_mode) & 0o755
                if stat.S_ISLNK(info.st_mode):
                    member.type, member.linkname = tarfile.SYMTYPE, os.readlink(full)
                    archive.addfile(member)
                elif stat.S_ISDIR(info.st_mode):
                    member.type = tarfile.DIRTYPE
                    archive.addfile(member)
                elif stat.S_ISREG(info.st_mode):
                    member.size = info.st_size
                    with os.fdopen(os.dup(fd), "rb") as data:
                        archive.addfile(member, data)
                else:
                    raise NiclabError(f"{where}: {path} changed while it was packed; fix: try again")
            finally:
                if fd >= 0:
                    os.close(fd)
