"""What a failed build says first: the compiler's first `error:` line, else the log's last line."""

from __future__ import annotations

import re

ERROR = re.compile(r"(?:^|\s|:)(?:fatal )?error:\s")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
BUILD_DIRS = ("/build/src/", "/build/")  # where the build root keeps the source: left out of the message


def first_error(log: str) -> str:
    lines = [ANSI.sub("", line).rstrip() for line in log.splitlines()]
    chosen = next((line for line in lines if ERROR.search(line)), "") or next(
        (line for line in reversed(lines) if line.strip()), "the build said nothing"
    )
    for prefix in BUILD_DIRS:
        chosen = chosen.replace(prefix, "")
    return chosen.strip()[:300]
