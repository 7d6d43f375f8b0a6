"""KTAP (and kselftest's TAP 13) results: each test's result, its reason, its subtests and what it printed.

Subtests nest by indentation or behind `# `, to any depth; the format, with an example, is in
docs/benchmarks.md, "KTAP". The output is a guest's: lines are only matched, never evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Result = Literal["pass", "fail", "skip", "xfail"]

_RESULT = re.compile(r"(?P<not>not )?ok (?P<number>\d{1,9})(?: -)?(?: (?P<name>.*?))?(?: # (?P<directive>.*))?")
_DIRECTIVE = re.compile(r"(?P<word>SKIP|XFAIL|TODO|TIMEOUT)\b\s*(?P<reason>.*)", re.IGNORECASE)
_PLAN = re.compile(r"\d+\.\.\d+(?: #.*)?")
_VERSION = re.compile(r"(?:K?TAP version \d+)")
_MAX_DEPTH = 16  # deeper nesting is kept as output: a guest's text cannot make the parser recurse without end
MAX_RESULTS = 10_000  # tests and subtests read of one program (16 MiB of `ok N x` lines would be 2.4 million)
MAX_LINES = 200_000  # lines read of one program's output; the rest is left in its raw file


@dataclass
class KtapResult:
    """One test: its number and name at its level, its result, why (a skip's or failure's reason)."""

    number: int
    name: str
    result: Result
    reason: str = ""
    subtests: list[KtapResult] = field(default_factory=list)
    output: list[str] = field(default_factory=list)  # the lines it printed that are no KTAP, one level in

    def walk(self, prefix: str = "") -> list[tuple[str, KtapResult]]:
        """This test and every subtest below it, each with its path (`parent/child`)."""
        path = f"{prefix}/{self.name}" if prefix else self.name
        found = [(path, self)]
        for sub in self.subtests:
            found += sub.walk(path)
        return found


def _judge(failed: bool, directive: str) -> tuple[Result, str]:
    match = _DIRECTIVE.fullmatch(directive.strip()) if directive else None
    if match is None:
        return ("fail" if failed else "pass"), (directive.strip() if failed else "")
    word, reason = match["word"].upper(), match["reason"].strip()
    if word == "SKIP":
        return "skip", reason
    if word in ("XFAIL", "TODO"):
        return "xfail", reason
    return "fail", f"{word.lower()} {reason}".strip()  # TIMEOUT: a failure, whether `ok` or `not ok`


def _inner(line: str) -> str | None:
    """The line one level in (behind `# ` or two spaces), or None if it is at this level."""
    if line.startswith("  "):
        return line[2:]
    if line.startswith("# "):
        return line[2:]
    if line == "#":
        return ""
    return None


def parse(text: str) -> list[KtapResult]:
    """The results at the top level of a KTAP (or TAP 13) text, each with its subtests."""
    return parse_bounded(text)[0]


def parse_bounded(text: str, limit: int = MAX_RESULTS) -> tuple[list[KtapResult], int]:
    """parse's results, at most `limit` of them (tests and subtests) from at most MAX_LINES lines, and how
    many result lines were left out."""
    lines = text.split("\n", MAX_LINES)[:MAX_LINES]
    budget = [limit]
    results = _parse(lines, 0, budget)
    return results, 0 if budget[0] >= 0 else sum(1 for line in lines if _is_ktap_result(line)) - limit


def _is_ktap_result(line: str) -> bool:
    inner: str | None = line.rstrip("\r")
    while inner is not None and (deeper := _inner(inner)) is not None:
        inner = deeper
    return inner is not None and _RESULT.fullmatch(inner.strip()) is not None


def _parse(lines: list[str], depth: int, budget: list[int]) -> list[KtapResult]:
    results: list[KtapResult] = []
    pending: list[str] = []  # the lines one level in since the last result: the next result's own
    for raw in lines:
        line = raw.rstrip("\r")
        inner = _inner(line)
        if inner is not None:
            pending.append(inner)
            continue
        text = line.strip()
        if not text or _PLAN.fullmatch(text) or _VERSION.fullmatch(text):
            continue
        match = _RESULT.fullmatch(text)
        if match is None:
            pending.append(text)
            continue
        budget[0] -= 1
        if budget[0] < 0:  # past the limit: counted, not kept
            pending = []
            continue
        result, reason = _judge(bool(match["not"]), match["directive"] or "")
        test = KtapResult(
            number=int(match["number"]),
            name=(match["name"] or "").strip(),
            result=result,
            reason=reason,
        )
        if depth < _MAX_DEPTH:
            test.subtests = _parse(pending, depth + 1, budget)
        test.output = [p for p in pending if _inner(p) is None and not _is_ktap(p)]
        results.append(test)
        pending = []
    return results


def _is_ktap(line: str) -> bool:
    text = line.strip()
    return bool(_RESULT.fullmatch(text) or _PLAN.fullmatch(text) or _VERSION.fullmatch(text))
