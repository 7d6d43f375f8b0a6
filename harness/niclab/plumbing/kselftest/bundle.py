"""One SelftestBundle per kernel source, built once and cached under <cache>/kselftest/<key>/.

The key names the source and the targets (a Debian package's version, a build tree's or a directory's stamp);
`suite-<suite>+<targets>.json` remembers a suite's package, so it is fetched once, as its kernel image is
(`refresh=True` reads the index again). Built in a temporary folder renamed into place, under a lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from niclab.base.atomic import building
from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.base.paths import cache_dir
from niclab.model.kernel_choice import KernelChoice
from niclab.model.selftests import SelftestBundle, kernel_problem
from niclab.plumbing.confined import give_to_nobody
from niclab.plumbing.kselftest.debian import Archive, choose_source
from niclab.plumbing.kselftest.install import copy_tree_parts, extract_source, make_install, pack, read_installed, stamp

ARCHIVE = "bundle.tar.gz"
MANIFEST = "bundle.json"


def store() -> Path:
    return cache_dir() / "kselftest"


def bundle_for(
    choice: KernelChoice | None, targets: tuple[str, ...], progress: Progress = print, refresh: bool = False
) -> SelftestBundle:
    """The installed selftests of these targets for the kernel a node boots: a Debian suite's linux-source
    package, or a build tree's own tools/testing/selftests. None (the image's own kernel) and kernels without
    them are refused (model.selftests.kernel_problem)."""
    targets = tuple(dict.fromkeys(targets))
    if problem := kernel_problem(choice, targets):
        raise NiclabError(problem)
    assert choice is not None
    if choice.build:
        return _from_build_tree(Path(choice.build), targets, progress)
    return _from_suite(choice.suite, targets, progress, refresh)


def bundle_from_dir(path: Path, targets: tuple[str, ...], progress: Progress = print) -> SelftestBundle:
    """An installed tree the developer made (`make install` output), checked as untrusted input and packed."""
    targets = tuple(dict.fromkeys(targets))
    where = f"selftests directory {path}"
    if path.is_symlink() or not path.is_dir():
        raise NiclabError(f"{where}: not a directory; fix: name the INSTALL_PATH of `make ... install`")
    root = path.resolve()
    read_installed(root, targets, where)  # before the walk: a folder of something else is refused by name
    key = f"dir-{_short(str(root))}-{stamp(root, where)}+{_slug(targets)}"
    return _cached(key, lambda work: _pack_dir(root, targets, work, where, progress))


def _from_suite(suite: str, targets: tuple[str, ...], progress: Progress, refresh: bool) -> SelftestBundle:
    pointer = store() / f"suite-{suite}+{_slug(targets)}.json"
    if not refresh and (known := _pointed(pointer)) is not None:
        return known
    archive = Archive(suite)
    progress(f"reading Debian {suite}'s package index for its kernel's selftests")
    source = choose_source(archive.packages(re.compile(r"linux-image-amd64|linux-source-\d+\.\d+"), progress))
    package = source.package
    key = f"{package.name}_{package.version}+{_slug(targets)}"

    def build(work: Path) -> SelftestBundle:
        progress(f"fetching {package.name} {package.version} ({package.size >> 20} MB) for its selftests")
        deb = work / "source.deb"
        archive.fetch(package, deb, progress)
        with tempfile.TemporaryDirectory(prefix="niclab-selftests-") as scratch:  # where nobody may build
            src = Path(scratch) / "src"
            src.mkdir()
            tree = extract_source(deb, package.name, src)
            deb.unlink()
            return _install(tree, Path(scratch), targets, work, source.describe(suite), source.upstream)

    bundle = _cached(key, build)
    _write_atomically(pointer, json.dumps({"key": key}) + "\n")
    return bundle


def _from_build_tree(tree: Path, targets: tuple[str, ...], progress: Progress) -> SelftestBundle:
    key = f"build-{_short(str(tree))}-{tree_stamp(tree)}+{_slug(targets)}"

    def build(work: Path) -> SelftestBundle:
        progress(f"installing the selftests of {tree} (a copy of its tools, scripts and headers)")
        with tempfile.TemporaryDirectory(prefix="niclab-selftests-") as scratch:  # where nobody may build
            copy = Path(scratch) / "src"
            copy_tree_parts(tree, copy)
            return _install(copy, Path(scratch), targets, work, f"build tree {tree}", tree_version(tree))

    return _cached(key, build)


def tree_stamp(tree: Path) -> str:
    """What changes when the tree's selftests (or its version) do: each file's path, size and time."""
    digest = hashlib.sha256()
    for rel in ("Makefile", "include/config/kernel.release"):
        path = tree / rel
        digest.update(path.read_bytes() if path.is_file() else b"-")
    selftests = tree / "tools/testing/selftests"
    for folder, dirs, files in os.walk(selftests):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            try:
                info = path.lstat()
            except OSError:
                continue
            digest.update(os.fsencode(path.relative_to(selftests)) + f" {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def tree_version(tree: Path) -> str:
    """The tree's kernel version: its built kernel.release, else its Makefile's VERSION.PATCHLEVEL.SUBLEVEL."""
    release = tree / "include/config/kernel.release"
    if release.is_file():
        return release.read_text(errors="replace").strip()[:100]
    try:
        head = (tree / "Makefile").read_text(errors="replace")[:4096]
    except OSError:
        return ""
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION)\s*=\s*(\S*)", head, re.M))
    version = ".".join(fields[k] for k in ("VERSION", "PATCHLEVEL", "SUBLEVEL") if fields.get(k))
    return version + fields.get("EXTRAVERSION", "")


def _install(
    tree: Path, scratch: Path, targets: tuple[str, ...], work: Path, source: str, version: str
) -> SelftestBundle:
    """Install the selftests of `tree` (niclab's copy, in `scratch`) there, and pack them into `work`."""
    installed = scratch / "installed"
    give_to_nobody(scratch, whole=False)  # nobody enters it to build there
    make_install(tree, targets, installed, work / "make.log")
    where = f"the selftests installed from {source}"
    return _pack_dir(installed, targets, work, where, None, source, version)


def _pack_dir(
    root: Path,
    targets: tuple[str, ...],
    work: Path,
    where: str,
    progress: Progress | None,
    source: str = "",
    version: str = "",
) -> SelftestBundle:
    found = read_installed(root, targets, where)
    pack(root, work / ARCHIVE, where)
    if progress:
        progress(f"packed {where}: {len(found.tests)} tests")
    return SelftestBundle(work / ARCHIVE, source or f"installed selftests {root}", version, found.tests, found.timeouts)


def _cached(key: str, build: Callable[[Path], SelftestBundle]) -> SelftestBundle:
    """The bundle under `key`, built into a temporary folder and renamed into place if the cache lacks it."""
    target = store() / key
    if (known := _load(target)) is not None:
        return known
    with locked(store() / ".lock"):
        if (known := _load(target)) is not None:
            return known
        started = time.monotonic()
        with building(target) as work:
            bundle = build(work)
            for leftover in work.iterdir():
                if leftover.name not in (ARCHIVE, "make.log"):
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            manifest = {
                "source": bundle.source,
                "version": bundle.version,
                "tests": [list(test) for test in bundle.tests],
                "timeouts": bundle.timeouts,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.monotonic() - started, 1),
            }
            (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    loaded = _load(target)
    assert loaded is not None
    return loaded


def _load(directory: Path) -> SelftestBundle | None:
    """The bundle in `directory`, or None if there is no whole one."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        if not (directory / ARCHIVE).is_file():
            return None
        return SelftestBundle(
            directory / ARCHIVE,
            str(manifest["source"]),
            str(manifest["version"]),
            tuple((str(target), str(test)) for target, test in manifest["tests"]),
            {str(k): int(v) for k, v in manifest["timeouts"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _pointed(pointer: Path) -> SelftestBundle | None:
    try:
        key = json.loads(pointer.read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return _load(store() / key) if isinstance(key, str) and "/" not in key and not key.startswith(".") else None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    partial.replace(path)


def _slug(targets: tuple[str, ...]) -> str:
    return ",".join(t.replace("/", "-") for t in sorted(targets))


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
