"""ensure_driver: a DriverChoice's modules for one kernel, built (or fetched) once and cached.

<cache>/drivers/<choice slug>-<kernel version>-<key>/ holds the .ko files, build.log and driver.json; the key
hashes the choice, the kernel and a source's content. A build runs in a temporary folder under the store's
lock and is renamed into place; a failed one keeps only its log (<dir>.failed.log). docs/scenarios.md,
"Drivers: one card, two drivers".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from niclab.base.atomic import building
from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.base.paths import cache_dir
from niclab.base.treewalk import open_beneath, walk_untrusted
from niclab.model.driver_choice import DriverChoice, module_key
from niclab.model.kernel_choice import DEFAULT_SUITE, KernelChoice
from niclab.plumbing.confined import give_to_nobody, readable_by_step, run_step
from niclab.plumbing.drivers import commands
from niclab.plumbing.drivers.buildlog import first_error
from niclab.plumbing.drivers.makefile import rewrite_makefile
from niclab.plumbing.drivers.modules import BuiltModule, choose_driver, read_built
from niclab.plumbing.drivers.source import copy_source, source_hash
from niclab.plumbing.image.kernelfiles import KernelFiles, from_build_tree, from_root, module_set
from niclab.plumbing.image.mirror import debian_mirror
from niclab.plumbing.image.modinfo import COMPRESSED, decompress
from niclab.plumbing.image.modules import module_name
from niclab.plumbing.image.rootfs import run_mmdebstrap
from niclab.plumbing.image.store import Image
from niclab.plumbing.image.tartree import TarTree

MANIFEST = "driver.json"
LOG = "build.log"
MAX_BUILD_BYTES = 2 << 30  # what a module's build folder may hold when its modules are taken (a driver: MBs)
MAX_BUILD_FILES = 200_000
BUILD_FIX = "build the module alone (M=DIR), not a tree"
MAKE_TIMEOUT = commands.MAKE_TIMEOUT  # a build of a vendor driver: minutes at most
MAX_MODULE_BYTES = 64 << 20  # a built .ko with its debug info: a few MB (e1000e: 5 MB)


@dataclass(frozen=True)
class BuiltDriver:
    choice: DriverChoice
    kernel_version: str  # uname -r it was built for (the image manifest's kernel_version)
    directory: Path  # <cache>/drivers/<slug>-<kernel_version>-<key[:12]>/
    source_hash: str  # sha256 of the source as built (files' relative paths + contents); named: of the .ko
    origin: str  # "module /abs/dir", "Debian bookworm r8168-dkms 8.051.02-2", ...
    modules: tuple[BuiltModule, ...]  # every module built (or fetched, with its dependencies the image lacks)
    driver: str  # the module among them that drives the card
    log: Path  # the build's whole log


@dataclass(frozen=True)
class _Result:
    source_hash: str
    origin: str
    taken: str = ""  # the hash of the source directory as copied for the build (module, a build tree's folder)


def store() -> Path:
    return cache_dir() / "drivers"


def ensure_driver(choice: DriverChoice, kernel: KernelChoice | None, image: Image, progress: Progress) -> BuiltDriver:
    """The modules of `choice` for the kernel of `image` (the node's kernel image; `kernel` its choice, None: the
    image's own suite), built first if the cache lacks them. NiclabError in one line if they cannot be."""
    if choice.is_default:
        raise ValueError("the default driver is the kernel's own: nothing to build")
    kver = str(image.manifest["kernel_version"])
    tree = Path(kernel.build) if kernel is not None and kernel.build else None
    suite = kernel.suite if kernel is not None and kernel.suite else str(image.manifest.get("suite") or DEFAULT_SUITE)
    where = f"driver {choice} for kernel {kver}"
    if choice.kind == "dkms" and tree is not None:
        raise NiclabError(
            f"{where}: DKMS packages are built for a Debian suite's kernel, not a build tree's; "
            "fix: use {module: DIR} with the package's source (its /usr/src directory)"
        )
    expected = _source_of(choice, tree, where)
    target = store() / f"{choice.slug}-{kver}-{_key(choice, kver, tree or suite, expected)[:12]}"
    if (known := _load(target, choice)) is not None:
        return known
    with locked(store() / ".lock"):
        if (known := _load(target, choice)) is not None:
            return known
        started = time.monotonic()
        failed_log = target.with_name(target.name + ".failed.log")
        with building(target) as work:
            try:
                if tree is not None:
                    result = _build_on_host(choice, tree, kver, image, work, failed_log, where, progress)
                else:
                    result = _build_in_root(choice, suite, kver, image, work, failed_log, where, progress)
            except NiclabError:
                _keep_log(work, failed_log)
                raise
            if expected and result.taken != expected:  # the key would name a build of other source
                raise NiclabError(f"{where}: the source of driver {choice} changed while it was built; run again")
            manifest = {
                "choice": str(choice),
                "kernel_version": kver,
                "kernel": str(tree) if tree else suite,
                "source_hash": result.source_hash,
                "origin": result.origin,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.monotonic() - started, 1),
            }
            (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            _load(work, choice, check_only=True)  # the driver module is among them, or no cache entry
        failed_log.unlink(missing_ok=True)
    built = _load(target, choice)
    assert built is not None
    progress(f"driver {choice} for kernel {kver} ready in {manifest['build_seconds']:.0f} s ({target})")
    return built


def _unprivileged(scratch: Path, tree: Path, where: str) -> None:
    """As root, `scratch` made nobody's, who builds there (its Makefiles come from a scenario file): refused in
    one line if nobody cannot read the tree. As another user, the build runs as that user."""
    give_to_nobody(scratch)
    if not readable_by_step(tree / "Makefile"):
        raise NiclabError(
            f"{where}: as root, niclab builds a scenario's module as nobody, who cannot read {tree}/Makefile; "
            f"fix: let others read the tree (chmod -R o+rX {tree}, and o+x on the folders above it), "
            "or run niclab as its owner"
        )


def _tree_folder(tree: Path, choice: DriverChoice) -> Path | None:
    """The folder of a `{build: DIR}` tree a kernel-source choice names (in the tree, or its `source` link)."""
    return next((base / choice.source for base in (tree, tree / "source") if (base / choice.source).is_dir()), None)


def _source_of(choice: DriverChoice, tree: Path | None, where: str) -> str:
    """The hash of the source a build takes from a directory as it is now ("" for a Debian package's): a module's
    directory, a build tree's folder (a developer's patched driver is another build)."""
    if choice.kind == "module":
        return source_hash(Path(choice.source), f"driver {choice}")
    if choice.kind == "kernel-source" and tree is not None:
        if (found := _tree_folder(tree, choice)) is None:
            raise NiclabError(f"{where}: kernel tree {tree} has no directory {choice.source}")
        return source_hash(found, f"{where}: {found}")
    return ""


def _key(choice: DriverChoice, kver: str, kernel: Path | str, source: str = "") -> str:
    """The cache key: the choice, the kernel and the source's hash; a Debian package by its name and the kernel."""
    digest = hashlib.sha256(f"{choice.kind}\0{choice.source}\0{choice.name}\0{kver}\0{kernel}\0".encode())
    digest.update(source.encode())
    if isinstance(kernel, Path):  # a rebuilt tree (another .config or exported symbols) is another build
        for name in (".config", "Module.symvers"):
            path = kernel / name
            digest.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"-")
    return digest.hexdigest()


def _load(directory: Path, choice: DriverChoice, check_only: bool = False) -> BuiltDriver | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    modules = tuple(read_built(path, f"driver {choice}") for path in sorted(directory.glob("*.ko")))
    driver = choose_driver(choice, modules)
    if check_only:
        return None
    return BuiltDriver(
        choice=choice,
        kernel_version=manifest["kernel_version"],
        directory=directory,
        source_hash=manifest["source_hash"],
        origin=manifest["origin"],
        modules=modules,
        driver=driver,
        log=directory / LOG,
    )


def _keep_log(work: Path, failed_log: Path) -> None:
    for name in (LOG, "mmdebstrap.log"):
        if (work / name).is_file():
            shutil.copyfile(work / name, failed_log)
            return


def _failed(where: str, log: Path, failed_log: Path) -> NiclabError:
    return NiclabError(
        f"{where}: the build failed: {first_error(log.read_text(errors='replace'))}; whole log: {failed_log}"
    )


def _build_in_root(
    choice: DriverChoice,
    suite: str,
    kver: str,
    image: Image,
    work: Path,
    failed_log: Path,
    where: str,
    progress: Progress,
) -> _Result:
    # the mirror the image's own packages came from (its recipe's suite): it carries the other suites too, as
    # image.kernels fetches their kernels from it; the host's apt may name no source for the kernel's suite
    mirror = debian_mirror(str(image.manifest.get("suite") or DEFAULT_SUITE))
    log = work / "mmdebstrap.log"
    if choice.kind == "named":
        return _fetch_named(choice, suite, kver, image, mirror, work, failed_log, where, progress)
    taken = copy_source(Path(choice.source), work / "src", f"driver {choice}") if choice.kind == "module" else ""
    progress(f"building {where} in a Debian {suite} root with its headers (mmdebstrap); log: {log}")
    try:
        run_mmdebstrap(commands.build_command(choice, kver, suite, mirror, work), log, progress)
    except NiclabError as exc:
        raise _root_failed(exc, log, failed_log, where, suite, kver) from None
    out = work / "out"
    status = (out / "status").read_text().strip() if (out / "status").is_file() else "?"
    shutil.move(out / LOG, work / LOG)
    if status in commands.TIMED_OUT:
        raise NiclabError(f"{where}: the build timed out after {MAKE_TIMEOUT} s; whole log: {failed_log}")
    if status != "0":
        raise _failed(where, work / LOG, failed_log)
    for ko in sorted((out / "ko").iterdir()):
        _take_module(out / "ko", ko.name, work, where)
    built_source = source_hash(out / "src", f"the source of {where}")
    version = (out / "source-version").read_text().strip() if (out / "source-version").is_file() else ""
    origin = {
        "module": f"module {choice.source}",
        "kernel-source": f"Debian {commands.source_package(kver)} {version} {choice.source}",
        "dkms": f"Debian {suite} {choice.source} {version}",
    }[choice.kind]
    shutil.rmtree(out)
    shutil.rmtree(work / "src", ignore_errors=True)
    return _Result(built_source, origin, taken)


def _root_failed(exc: NiclabError, log: Path, failed_log: Path, where: str, suite: str, kver: str) -> NiclabError:
    """mmdebstrap's failure in one line: what a hook said, or that the suite lost the kernel's headers."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    for line in text.splitlines():
        if line.startswith(commands.MARK):
            return NiclabError(f"{where}: {line[len(commands.MARK) :].strip()}; whole log: {failed_log}")
    headers = f"linux-headers-{kver}"
    if any(
        headers in line and ("nable to locate" in line or "installation candidate" in line)
        for line in text.splitlines()
    ):
        return NiclabError(
            f"{where}: Debian {suite} no longer has {headers} (its kernel moved to a newer ABI since the image "
            "was built); fix: `niclab image build --force` to take the suite's current kernel"
        )
    return NiclabError(f"{where}: {str(exc).splitlines()[0]}; whole log: {failed_log}")


def _take_module(root: Path, path: str, work: Path, where: str) -> None:
    """A built .ko (`path` under `root`) into the build's folder, unpacked if the kernel compresses its modules.
    What the build left there is read as a regular file of at most MAX_MODULE_BYTES, opened from the folders
    above it, never through a link, else NiclabError."""
    name = Path(path).name
    suffix = Path(path).suffix
    if suffix not in COMPRESSED and suffix != ".ko":
        return
    try:
        fd = open_beneath(root, path)
    except OSError as exc:
        why = "is not a regular file" if exc.strerror is None else f"cannot be read as a file ({exc.strerror})"
        raise NiclabError(f"{where}: the build left {name}, which {why}") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_MODULE_BYTES + 1)
    if len(data) > MAX_MODULE_BYTES:
        raise NiclabError(f"{where}: the build left {name}, over {MAX_MODULE_BYTES >> 20} MB: not a module")
    if suffix in COMPRESSED:
        data = decompress(data, suffix)
    (work / f"{module_name(name)}.ko").write_bytes(data)


def _fetch_named(
    choice: DriverChoice,
    suite: str,
    kver: str,
    image: Image,
    mirror: str,
    work: Path,
    failed_log: Path,
    where: str,
    progress: Progress,
) -> _Result:
    log = work / "mmdebstrap.log"
    tar = work / "kernel.tar"
    progress(f"fetching Debian's linux-image-{kver} for {where}; log: {log}")
    try:
        run_mmdebstrap(commands.named_command(kver, suite, mirror, tar), log, progress)
    except NiclabError as exc:
        raise _root_failed(exc, log, failed_log, where, suite, kver) from None
    with TarTree(tar) as root:
        result = _take_named(choice, from_root(root, origin=f"Debian linux-image-{kver}"), image, work, where)
    tar.unlink()
    shutil.move(log, work / LOG)
    return result


def _take_named(choice: DriverChoice, files: KernelFiles, image: Image, work: Path, where: str) -> _Result:
    """The named module of `files` and what it depends on that the image does not carry."""
    wanted = module_key(choice.source)
    if wanted not in files.modules:
        built_in = " (it is built into the kernel)" if wanted in files.builtin else ""
        raise NiclabError(f"{where}: {files.origin} has no module {choice.source}{built_in}")
    have = {module_key(m) for m in image.manifest.get("modules", [])}
    chosen = module_set(files, [wanted])
    digest = ""
    for entry in chosen.entries:
        name = entry.name.rsplit("/", 1)[-1]
        if not name.endswith(".ko"):
            continue
        module = module_name(name)
        if module == wanted or module not in have:
            (work / f"{module}.ko").write_bytes(entry.data)
        if module == wanted:
            digest = hashlib.sha256(entry.data).hexdigest()
    return _Result(digest, files.origin)


def _build_on_host(
    choice: DriverChoice,
    tree: Path,
    kver: str,
    image: Image,
    work: Path,
    failed_log: Path,
    where: str,
    progress: Progress,
) -> _Result:
    """A `{build: DIR}` kernel: the module built with the tree and the host's compiler (the tree was built there)."""
    if choice.kind == "named":
        result = _take_named(choice, from_build_tree(tree), image, work, where)
        (work / LOG).write_text(f"taken from {tree}\n")
        return result
    with tempfile.TemporaryDirectory(prefix="niclab-driver-") as scratch:  # where nobody may build, as root
        src = Path(scratch) / "src"
        if choice.kind == "module":
            origin = f"module {choice.source}"
            built_source = taken = copy_source(Path(choice.source), src, f"driver {choice}")
        else:
            if (found := _tree_folder(tree, choice)) is None:
                raise NiclabError(f"{where}: kernel tree {tree} has no directory {choice.source}")
            taken = copy_source(found, src, f"{where}: {found}")
            if choice.name:
                try:
                    rewrite_makefile(src, choice.name, found.name)
                except (OSError, ValueError) as exc:
                    raise NiclabError(
                        f"{where}: renaming the module of {choice.source} to {choice.name}: {exc}"
                    ) from None
            built_source = source_hash(src, f"driver {choice}")
            origin = f"build tree {tree} {choice.source}"
        _unprivileged(Path(scratch), tree, where)
        progress(f"building {where} with {tree} on this host (make M=...); log: {work / LOG}")
        returncode = _make(["make", "-C", str(tree), f"M={src}", "modules"], work / LOG, where, failed_log)
        if returncode != 0:
            raise _failed(where, work / LOG, failed_log)
        # without their debug information, as Debian installs its modules: the build id stays (a module strip
        # cannot take is kept whole; what it said is in the log)
        strip = ["find", str(src), "-type", "f", "-name", "*.ko", "-exec", "strip", "--strip-debug", "{}", "+"]
        run_step(strip, work / LOG, 300, where, append=True)
        for path, info in walk_untrusted(src, where, MAX_BUILD_BYTES, MAX_BUILD_FILES, BUILD_FIX, BUILD_FIX):
            if path.endswith(tuple(COMPRESSED) + (".ko",)) and not stat.S_ISDIR(info.st_mode):
                _take_module(src, path, work, where)
    return _Result(built_source, origin, taken)


def _make(command: list[str], log: Path, where: str, failed_log: Path) -> int:
    """Run make as the step's user (plumbing.confined: nobody as root), its output to `log`; past MAKE_TIMEOUT
    it and everything it started are ended."""
    try:
        return run_step(command, log, MAKE_TIMEOUT, where, env={**os.environ, "LC_ALL": "C"})
    except NiclabError as exc:
        if "took more than" in str(exc):
            raise NiclabError(f"{where}: the build timed out after {MAKE_TIMEOUT} s; whole log: {failed_log}") from None
        raise NiclabError(f"{where}: make did not run; whole log: {failed_log}") from None
