"""bonnie: bonnie++ 2.00a on the nfs benchmark's share: block write, rewrite, read, seeks, file tests.

Its command line and the CSV line it prints: docs/benchmarks.md, "bonnie++ 2.00a". Rates are in MB/s of 10^6
bytes; a test too quick to time (`+++++`) is left out and named (`extra.too_fast`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import ClassVar

from pydantic import Field, model_validator

from niclab.base.node import GuestCommandError
from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, Measurement, MetricInfo, quote
from niclab.model.bench.declare import Figure, GuestNeeds, Row, Series, Shows
from niclab.model.bench.nfs import MOUNT_DIR, ShareOptions, share, size_bytes

FORMAT_VERSION = "1.98"
HEAD = (
    "format_version",
    "version",
    "machine",
    "concurrency",
    "seed",
    "file_size",
    "chunk_size",
    "seek_count",
    "seekers",
)
#: the bulk tests in the line's order: (field, metric, what it is, headline)
BULK = (
    ("putc", "char_write_mb_s", "sequential output per character (putc)", False),
    ("put_block", "block_write_mb_s", "sequential output in blocks (write)", True),
    ("rewrite", "rewrite_mb_s", "read, change and write back each block", True),
    ("getc", "char_read_mb_s", "sequential input per character (getc)", False),
    ("get_block", "block_read_mb_s", "sequential input in blocks (read)", True),
    ("seeks", "seeks_per_s", "random seeks, each reading a block (and writing one back in 10 %)", True),
)
FILE_SHAPE = ("num_files", "max_size", "min_size", "num_dirs", "file_chunk_size")
#: the file tests in the line's order: (field, metric, what it is, headline)
FILES = (
    ("seq_create", "seq_create_per_s", "files created in order", True),
    ("seq_stat", "seq_stat_per_s", "files stat()ed in order", False),
    ("seq_del", "seq_delete_per_s", "files deleted in order", False),
    ("ran_create", "random_create_per_s", "files created in random order", True),
    ("ran_stat", "random_stat_per_s", "files stat()ed in random order", False),
    ("ran_del", "random_delete_per_s", "files deleted in random order", False),
)
FIELDS = (
    *HEAD,
    *(name for field, *_ in BULK for name in (field, f"{field}_cpu")),
    *FILE_SHAPE,
    *(name for field, *_ in FILES for name in (field, f"{field}_cpu")),
    *(f"{field}_latency" for field, *_ in (*BULK, *FILES)),
)
TOO_FAST = "+++++"
LATENCY = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(us|ms|s)")
LATENCY_US = {"us": 1, "ms": 1e3, "s": 1e6}


# What bonnie++'s file tests over the share's tmpfs need: guest kernels before 6.6 give tmpfs directories
# unstable readdir offsets, so over NFS a directory read while its files are deleted skips some of them, and
# bonnie++ cannot remove its directory (measured: bookworm's 6.1 fails, trixie's 6.12 passes).
FILE_TESTS_HINT = (
    "; the file tests (files:) over the share's tmpfs need a guest kernel of 6.6 or later (kernel: trixie), or files: 0"
)


class BonnieOptions(ShareOptions):
    size_mib: int = Field(64, ge=1, le=65536, description="the test file's size in MiB (-s); at least twice ram_mib")
    ram_mib: int = Field(32, ge=1, le=32768, description="the RAM bonnie++ assumes, in MiB (-r)")
    files: int = Field(0, ge=0, le=64, description="file tests over files x 1024 empty files (-n; 0: none)")
    per_char: bool = Field(False, description="also the per-character tests (putc, getc; about 1 MB/s)")
    direct: bool = Field(True, description="O_DIRECT for the block tests (-D), so every block crosses the link")

    @model_validator(mode="after")
    def _fits(self) -> BonnieOptions:
        if self.size_mib < 2 * self.ram_mib:
            raise ValueError(f"bonnie++ wants size_mib at least twice ram_mib ({2 * self.ram_mib})")
        if self.size_mib * 2**20 + 2**20 > size_bytes(self.export_size):
            raise ValueError(
                f"size_mib {self.size_mib} does not fit in export_size {self.export_size} (leave 1 MiB for metadata)"
            )
        return self


def argv(options: BonnieOptions) -> list[str]:
    found = ["bonnie++", "-d", MOUNT_DIR, "-s", str(options.size_mib), "-r", str(options.ram_mib)]
    found += ["-n", str(options.files), "-u", "0", "-q", "-m", "niclab"]
    return found + ([] if options.per_char else ["-f"]) + (["-D"] if options.direct else [])


def csv_line(stdout: str) -> list[str] | None:
    """The fields of the last line that looks like bonnie++'s CSV (it starts with its format version)."""
    lines = [line.strip().split(",") for line in stdout.splitlines() if re.match(r"[0-9]+\.[0-9]+,", line.strip())]
    return lines[-1] if lines else None


def latency_us(text: str) -> float | None:
    found = LATENCY.fullmatch(text)
    return float(found[1]) * LATENCY_US[found[2]] if found else None


def _said(stderr: str) -> str:
    """bonnie++'s complaint: its first line (before the usage it prints after it)."""
    return next((line.strip() for line in stderr.splitlines() if line.strip()), "")


def parse(stdout: str, stderr: str = "") -> list[Measurement]:
    """The measurements of bonnie++'s CSV line (what it printed on stdout with -q)."""
    fields = csv_line(stdout)
    if fields is None:
        raise BenchmarkError(f"bonnie++ printed no CSV line: {said(_said(stderr), last=False) or '(nothing)'}")
    if fields[0] != FORMAT_VERSION:
        raise BenchmarkError(f"bonnie++ printed CSV format {fields[0]}, niclab reads {FORMAT_VERSION} (bonnie++ 2.00)")
    if len(fields) < len(FIELDS):
        raise BenchmarkError(f"bonnie++'s CSV line has {len(fields)} fields, not {len(FIELDS)}: {','.join(fields)}")
    row = dict(zip(FIELDS, fields, strict=False))
    too_fast = [field for field, *_ in (*BULK, *FILES) if row[field] == TOO_FAST]
    common = {"file_size": row["file_size"], "too_fast": too_fast}
    found = []
    for field, metric, _what, headline in BULK:
        if row[field] in ("", TOO_FAST):
            continue
        # K/sec, K = 1024 bytes, into MB/s (10^6 bytes); seeks per second as they are
        value = _figure(row, field) * (1 if field == "seeks" else 1024 / 1e6)
        unit = "/s" if field == "seeks" else "MB/s"
        extra = {"cpu_pct": _number(row[f"{field}_cpu"]), "latency_us": latency_us(row[f"{field}_latency"]), **common}
        found.append(Measurement("bonnie", None, metric, value, unit, extra, headline=headline))
    files = int(row["num_files"]) * 1024 if re.fullmatch("[0-9]{1,6}", row["num_files"]) else 0
    for field, metric, _what, headline in FILES:
        if row[field] in ("", TOO_FAST):
            continue
        extra = {"cpu_pct": _number(row[f"{field}_cpu"]), "latency_us": latency_us(row[f"{field}_latency"])}
        extra |= {"files": files, **common}
        found.append(Measurement("bonnie", None, metric, _figure(row, field), "/s", extra, headline=headline))
    if not found:
        raise BenchmarkError(
            "bonnie++ timed none of its tests"
            + (f" ({', '.join(too_fast)} finished too quickly to time: raise size_mib)" if too_fast else "")
        )
    return found


def _number(text: str) -> float | None:
    """A field of bonnie++'s CSV as a number; None for "+++" (too fast), empty (not run) or anything else."""
    return float(text) if re.fullmatch(r"[0-9]{1,15}(?:\.[0-9]{1,9})?", text) else None


def _figure(row: dict[str, str], field: str) -> float:
    if (value := _number(row[field])) is None:
        raise BenchmarkError(f"bonnie++'s CSV field {field} is {said(row[field], 40)!r}, not a number")
    return value


class Bonnie:
    name: ClassVar[str] = "bonnie"
    Options: ClassVar[type[BonnieOptions]] = BonnieOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("bonnie++",), programs=("/usr/sbin/bonnie++",))
    shows: ClassVar[Shows] = Shows(
        rows=(
            Row("bonnie.block_write_mb_s", "bonnie++ block write"),
            Row("bonnie.rewrite_mb_s", "bonnie++ rewrite"),
            Row("bonnie.block_read_mb_s", "bonnie++ block read"),
            Row("bonnie.seeks_per_s", "bonnie++ seeks"),
            Row("bonnie.seq_create_per_s", "bonnie++ creates"),
            Row("bonnie.random_create_per_s", "bonnie++ random creates"),
        ),
        figures=(
            Figure(
                "pattern-bars",
                (
                    Series("bonnie.block_write_mb_s", "block write"),
                    Series("bonnie.rewrite_mb_s", "rewrite"),
                    Series("bonnie.block_read_mb_s", "block read"),
                ),
                section="bonnie++ over NFS",
                title="bonnie++ over NFS: throughput per test",
                caption="bonnie++ on NFSv4 (a tmpfs on the server) across the link.",
                unit="MB/s (10^6 bytes)",
                order=55,
            ),
            Figure(
                "bars",
                (Series("bonnie.seeks_per_s", "seeks"),),
                section="bonnie++ over NFS",
                title="bonnie++ over NFS: random seeks",
                caption="seeks per second, each a read of a block across the link.",
                unit="/s",
                order=55,
            ),
        ),
    )

    def metrics(self) -> list[MetricInfo]:
        found = []
        for field, metric, what, _ in BULK:
            unit, note = ("/s", "") if field == "seeks" else ("MB/s", ", 1 MB = 10^6 bytes")
            found.append(MetricInfo(f"bonnie.{metric}", unit, what + note, "higher", pace="rate"))
        return found + [
            MetricInfo(f"bonnie.{metric}", "/s", what, "higher", pace="rate") for _, metric, what, _ in FILES
        ]

    def describe(self, options: BonnieOptions) -> str:
        return "bonnie++"

    def estimate_seconds(self, options: BonnieOptions) -> float:
        bulk = options.size_mib * 4 / 10  # write, rewrite (a read and a write), read at ~10 MB/s under TCG
        chars = options.size_mib * 2 if options.per_char else 0  # putc and getc at ~1 MB/s
        files = options.files * 1024 * 6 / 200  # six passes at ~200 files/s over NFS
        return 8 + bulk + chars + 20 + files  # NFS set-up and clean-up ~8 s, the seeks ~20 s

    def run(self, ctx: BenchContext, options: BonnieOptions) -> list[Measurement]:
        command = quote(argv(options))
        client = ctx.ends.client
        with share(ctx, options, ["bonnie++"]) as mount:
            ctx.progress("bonnie++ on the NFS share")
            try:
                result = client.run(command, timeout=self.estimate_seconds(options) * 3 + 60, check=False)
            except GuestCommandError as exc:  # a time-out, or the agent went away
                raise BenchmarkError(f"bonnie: bonnie++ on {client.name} failed: {exc}") from None
            path = ctx.save_raw("bonnie", f"$ {command}\n# exit {result.returncode}\n{result.stdout}{result.stderr}")
            if not result.ok:
                said = _said(result.stderr) or _said(result.stdout) or "no message"
                hint = FILE_TESTS_HINT if options.files and "(rmdir): Directory not empty" in said else ""
                raise BenchmarkError(f"bonnie: bonnie++ exited {result.returncode}: {said}{hint} (raw output: {path})")
            try:
                found = parse(result.stdout, result.stderr)
            except BenchmarkError as exc:
                raise BenchmarkError(f"bonnie: {exc} (raw output: {path})") from None
        return [replace(m, extra={**m.extra, "mount": mount}) for m in found]


PLUGIN = Bonnie()
