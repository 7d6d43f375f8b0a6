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


class TerminalFilter:
    """A guest's serial line on the user's terminal (`niclab console`): what a shell needs passes (text, line
    breaks, tabs, backspace, and CSI sequences that move the cursor, erase or set colours); every other control
    (OSC titles and clipboard, DCS, private modes, C1 controls, bidi overrides) is written escaped, as one_line
    writes it. Fed the stream in any pieces: a sequence or a character split between reads is held back."""

    PASSED = frozenset("\n\r\t\b")
    CSI_FINALS = frozenset("ABCDEFGHJKPX@Lfmn")  # moves, erases, inserts, colours, the cursor's position
    CSI_LONGEST = 32

    def __init__(self) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # an escape sequence begun and not yet ended

    def feed(self, data: bytes) -> bytes:
        out: list[str] = []
        for ch in self._decoder.decode(data):
            if self._held:
                self._sequence(ch, out)
            elif ch == "\x1b":
                self._held = ch
            elif ch.isprintable() or ch in self.PASSED:
                out.append(ch)
            else:
                out.append(one_line(ch))
        return "".join(out).encode()

    def _sequence(self, ch: str, out: list[str]) -> None:
        held = self._held + ch
        if held == "\x1b[":
            self._held = held
            return
        if len(held) == 2 or not held.startswith("\x1b["):  # ESC and one character: not a CSI
            self._held = ""
            out.append(one_line(held))
            return
        if "0" <= ch <= "9" or ch == ";":
            if len(held) > self.CSI_LONGEST:
                self._held = ""
                out.append(one_line(held))
            else:
                self._held = held
            return
        self._held = ""
        out.append(held if ch in self.CSI_FINALS else one_line(held))
