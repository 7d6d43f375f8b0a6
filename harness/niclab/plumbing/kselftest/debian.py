"""A Debian suite's `linux-source` package: found in the suite's signed index, fetched, its SHA256 checked.

The chain is apt's: InRelease is checked with gpgv against Debian's archive
keyring, the package index against InRelease's SHA256, the package against
the index's. The mirror is the one the host's apt uses (image.mirror).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import lzma
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.model.kernel_choice import DEFAULT_SUITE
from niclab.plumbing.image.mirror import debian_mirror

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
KERNEL_PACKAGE = "linux-image-amd64"  # what the suite's kernel image (image.kernels) installs
INDEXES = ("main/binary-amd64/Packages.xz", "main/binary-all/Packages.xz")  # arch-all packages are in the second
TIMEOUT = 60  # seconds without a byte from the mirror
MAX_INDEX = 512 << 20  # bytes of one unpacked package index


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    filename: str  # its path on the mirror
    size: int
    sha256: str


@dataclass(frozen=True)
class SourceChoice:
    """The linux-source package for a suite's kernel, and why that one."""

    package: Package
    kernel: str  # the suite's linux-image-amd64 version
    exact: bool  # the source of that very version; else the newest of its major.minor

    @property
    def upstream(self) -> str:
        """The kernel version of the source: 6.12.107 of 6.12.107-1."""
        return upstream(self.package.version)

    def describe(self, suite: str) -> str:
        text = f"Debian {suite} {self.package.name} {self.package.version}"
        if not self.exact:
            text += f" (the newest {self.package.name}: the index has no source of the suite's kernel {self.kernel})"
        return text


def upstream(version: str) -> str:
    """The upstream part of a Debian version: no epoch, no Debian revision."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def _order(char: str) -> int:
    """dpkg's order of a non-digit: ~ before the end of the part, letters before the rest."""
    if not char:
        return 0
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's comparison of one part (upstream or revision): non-digits by _order, digits as numbers."""
    while a or b:
        a_text, a = re.match(r"(\D*)(.*)", a).groups()  # type: ignore[union-attr]
        b_text, b = re.match(r"(\D*)(.*)", b).groups()  # type: ignore[union-attr]
        for x, y in itertools.zip_longest(a_text, b_text, fillvalue=""):
            ox, oy = _order(x), _order(y)
            if ox != oy:
                return -1 if ox < oy else 1
        a_num, a = re.match(r"(\d*)(.*)", a).groups()  # type: ignore[union-attr]
        b_num, b = re.match(r"(\d*)(.*)", b).groups()  # type: ignore[union-attr]
        if int(a_num or 0) != int(b_num or 0):
            return -1 if int(a_num or 0) < int(b_num or 0) else 1
    return 0


def compare_versions(a: str, b: str) -> int:
    """dpkg --compare-versions: -1, 0 or 1."""

    def split(version: str) -> tuple[int, str, str]:
        epoch, colon, rest = version.partition(":")
        if not colon:
            epoch, rest = "0", version
        main, dash, revision = rest.rpartition("-")
        return (int(epoch) if epoch.isdigit() else 0, main if dash else rest, revision if dash else "")

    ea, ua, ra = split(a)
    eb, ub, rb = split(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def _newest_first(packages: list[Package]) -> list[Package]:
    def newer(a: Package, b: Package) -> int:
        return compare_versions(b.version, a.version)

    return sorted(packages, key=functools.cmp_to_key(newer))


def choose_source(packages: list[Package]) -> SourceChoice:
    """The linux-source-X.Y of the suite's kernel: that version if listed, else the newest of its X.Y."""
    kernels = _newest_first([p for p in packages if p.name == KERNEL_PACKAGE])
    if not kernels:
        raise NiclabError(f"the suite's package index lists no {KERNEL_PACKAGE}")
    kernel = kernels[0].version
    major_minor = ".".join(upstream(kernel).split(".")[:2])
    sources = _newest_first([p for p in packages if p.name == f"linux-source-{major_minor}"])
    if not sources:
        raise NiclabError(f"the suite's package index has no linux-source-{major_minor} for its kernel {kernel}")
    exact = [p for p in sources if compare_versions(p.version, kernel) == 0]
    return SourceChoice(exact[0] if exact else sources[0], kernel, bool(exact))


def parse_packages(lines: Iterator[str], wanted: re.Pattern[str]) -> Iterator[Package]:
    """The stanzas of a Packages index whose Package matches `wanted`."""
    fields: dict[str, str] = {}
    for line in [*lines, ""]:
        if line.strip():
            if not line[:1].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            continue
        if fields and wanted.fullmatch(fields.get("package", "")):
            try:
                yield Package(
                    fields["package"], fields["version"], fields["filename"], int(fields["size"]), fields["sha256"]
                )
            except (KeyError, ValueError):
                pass  # a stanza without what a download needs is one apt would not fetch either
        fields = {}


def release_hashes(signed: str) -> dict[str, tuple[str, int]]:
    """The SHA256 section of a Release file: path -> (sha256, size)."""
    hashes: dict[str, tuple[str, int]] = {}
    section = ""
    for line in signed.splitlines():
        if not line[:1].isspace():
            section = line.split(":", 1)[0]
            continue
        words = line.split()
        if section == "SHA256" and len(words) == 3 and words[1].isdigit():
            hashes[words[2]] = (words[0], int(words[1]))
    return hashes


class Archive:
    """One suite of the mirror, read through its signed InRelease."""

    def __init__(self, suite: str, mirror: str = "", keyring: Path | None = None):
        self.suite = suite
        self.mirror = (mirror or _mirror(suite)).rstrip("/")
        self.keyring = keyring or KEYRING
        self._hashes: dict[str, tuple[str, int]] | None = None

    def url(self, path: str) -> str:
        return f"{self.mirror}/{path}"

    def hashes(self) -> dict[str, tuple[str, int]]:
        if self._hashes is None:
            with tempfile.TemporaryDirectory(prefix="niclab-release-") as tmp:
                raw = Path(tmp) / "InRelease"
                download(self.url(f"dists/{self.suite}/InRelease"), raw, limit=64 << 20)
                self._hashes = release_hashes(verified(raw, self.keyring, f"Debian {self.suite}'s InRelease"))
        return self._hashes

    def packages(self, wanted: re.Pattern[str], progress: Progress) -> list[Package]:
        """The packages of the suite's amd64 and all indexes whose names match. An index is read only when its
        SHA256 is InRelease's; one that is not (a mirror caught mid-update) is left out, and said so."""
        found: list[Package] = []
        read = []
        for index in INDEXES:
            if index not in self.hashes():
                continue  # an older suite lists its arch-all packages in binary-amd64 alone
            sha256, size = self.hashes()[index]
            with tempfile.TemporaryDirectory(prefix="niclab-index-") as tmp:
                path = Path(tmp) / "Packages.xz"
                try:
                    self._fetch_index(index, sha256, size, path)
                except NiclabError as exc:
                    progress(f"left out Debian {self.suite}'s {index}: {exc}")
                    continue
                with lzma.open(path, "rt", encoding="utf-8", errors="replace") as text:
                    found += parse_packages(_bounded(text, MAX_INDEX), wanted)
                read.append(index)
        if not read:
            raise NiclabError(
                f"no package index of Debian {self.suite} on {self.mirror} matches its signed InRelease; "
                "fix: try again once the mirror has finished updating"
            )
        return found

    def _fetch_index(self, index: str, sha256: str, size: int, out: Path) -> None:
        """The index by its hash first (Acquire-By-Hash: a mirror's update never mixes two), else by its name."""
        by_hash = f"{index.rsplit('/', 1)[0]}/by-hash/SHA256/{sha256}"
        tried: list[str] = []
        for path in (by_hash, index):
            try:
                download(self.url(f"dists/{self.suite}/{path}"), out, size=size, sha256=sha256)
                return
            except NiclabError as exc:
                tried.append(str(exc))
        raise NiclabError(tried[-1])

    def fetch(self, package: Package, out: Path, progress: Progress) -> None:
        download(self.url(package.filename), out, size=package.size, sha256=package.sha256, progress=progress)


def _bounded(lines: Iterator[str], limit: int) -> Iterator[str]:
    read = 0
    for line in lines:
        read += len(line)
        if read > limit:
            raise NiclabError(f"a package index larger than {limit >> 20} MB unpacked: not a Debian index")
        yield line


def _mirror(suite: str) -> str:
    """The apt source that carries the suite, else the one of the micro image's suite (a mirror has them all)."""
    try:
        return debian_mirror(suite)
    except NiclabError:
        return debian_mirror(DEFAULT_SUITE)


def verified(path: Path, keyring: Path, what: str) -> str:
    """The text gpgv found signed by the keyring (only that part of the file is trusted)."""
    if shutil.which("gpgv") is None:
        raise NiclabError("gpgv is not installed, so Debian's signature cannot be checked: run `make setup`")
    if not keyring.is_file():
        raise NiclabError(f"no Debian archive keyring at {keyring}: run `make setup` (debian-archive-keyring)")
    try:
        done = subprocess.run(
            ["gpgv", "--keyring", str(keyring), "--output", "-", str(path)],
            capture_output=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        raise NiclabError(f"gpgv took over 60 s to check {what}") from None
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no reason given"]
        raise NiclabError(f"{what} is not signed by a key of {keyring}: {reason[0]}")
    return done.stdout.decode(errors="replace")


def download(
    url: str, out: Path, size: int | None = None, sha256: str = "", limit: int = 0, progress: Progress | None = None
) -> None:
    """Fetch `url` into `out`; refused when larger than `size` (or `limit`), or when its SHA256 differs."""
    limit = size if size is not None else limit
    digest = hashlib.sha256()
    read = 0
    step = 32 << 20
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer, out.open("wb") as sink:
            while chunk := answer.read(1 << 20):
                read += len(chunk)
                if limit and read > limit:
                    raise NiclabError(f"{url}: larger than the {limit} bytes the index gives it")
                digest.update(chunk)
                sink.write(chunk)
                if progress and size and read // step != (read - len(chunk)) // step:
                    progress(f"  {read >> 20} of {size >> 20} MB")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise NiclabError(f"cannot fetch {url}: {exc}") from None
    if size is not None and read != size:
        raise NiclabError(f"{url}: {read} bytes, not the {size} the index gives (cut short, or a mirror mid-update)")
    if sha256 and digest.hexdigest() != sha256:
        raise NiclabError(f"{url}: SHA256 {digest.hexdigest()} is not the index's {sha256}: not Debian's file")
