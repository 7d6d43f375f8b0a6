"""Untrusted text (what guests, tools, remote hosts, run directories and files say) as niclab shows it.

One way, everywhere: control characters, line breaks and other characters that are not printable are written
as escapes (`\\x1b`, `\\n`, `\\u202e`), so such text can neither move a terminal's cursor, set its clipboard
or title, nor make a line look like two. ui.console applies it to all a command prints; messages that quote
a tool's output apply it where they are made (`said`), so records hold the same text.
"""

from __future__ import annotations


def one_line(text: str) -> str:
    """`text` with every character that is not printable (controls, line breaks, format characters) escaped."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape", "backslashreplace").decode("ascii") for ch in text
    )


def said(text: str, limit: int = 300, *, last: bool = True) -> str:
    """What a tool, guest or host printed, quoted in a one-line message: stripped, at most `limit` characters
    of it (its end; its start with last=False), escaped as one_line does."""
    text = text.strip()
    return one_line(text[-limit:] if last else text[:limit])
