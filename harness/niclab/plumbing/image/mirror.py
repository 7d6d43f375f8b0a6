"""Find the Debian mirror the host's apt already uses, so the project names none."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from niclab.base.errors import NiclabError

APT_DIR = Path("/etc/apt")


def _deb822_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and "uris" in fields:
            for uri in fields["uris"].split():
                yield uri, fields.get("suites", "").split()


def _one_line_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            yield words[1], [words[2]]


def debian_mirror(suite: str, apt_dir: Path = APT_DIR) -> str:
    """The URI of an apt source that carries `suite` itself ($NICLAB_DEBIAN_MIRROR wins)."""
    if env := os.environ.get("NICLAB_DEBIAN_MIRROR"):
        return env
    sources: list[tuple[Path, str]] = []
    main_list = apt_dir / "sources.list"
    if main_list.is_file():
        sources.append((main_list, "list"))
    for path in sorted((apt_dir / "sources.list.d").glob("*")):
        kind = {".sources": "deb822", ".list": "list"}.get(path.suffix)
        if kind:
            sources.append((path, kind))
    for path, kind in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        entries = _deb822_entries(text) if kind == "deb822" else _one_line_entries(text)
        for uri, suites in entries:
            if suite in suites:
                return uri
    raise NiclabError(
        f"no apt source for Debian '{suite}' in {apt_dir}: set NICLAB_DEBIAN_MIRROR "
        "to the URI of a Debian mirror (the one your apt would use)"
    )
