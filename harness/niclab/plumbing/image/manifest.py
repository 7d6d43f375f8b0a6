"""What went into an image: Debian package versions, read from the root's dpkg status."""

from __future__ import annotations


def installed_packages(status: str) -> dict[str, str]:
    """package -> version for every package dpkg marks installed."""
    packages: dict[str, str] = {}
    for stanza in status.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages[fields["Package"]] = fields.get("Version", "?")
    return dict(sorted(packages.items()))
