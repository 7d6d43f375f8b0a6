"""Where niclab keeps things: the source tree, the user's cache, run directories."""

from __future__ import annotations

import os
from pathlib import Path

from niclab.base.errors import NiclabError

#: The repository root when niclab runs from a clone (pip install -e).
SOURCE_ROOT = Path(__file__).resolve().parents[3]  # harness/niclab/base/paths.py


def cache_dir() -> Path:
    """The per-user cache: $NICLAB_CACHE, else $XDG_CACHE_HOME/niclab, else ~/.cache/niclab."""
    if env := os.environ.get("NICLAB_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "niclab"


def images_dir() -> Path:
    """The image recipes (images/ in the source tree, or $NICLAB_IMAGES_DIR)."""
    path = Path(os.environ.get("NICLAB_IMAGES_DIR") or SOURCE_ROOT / "images")
    if not path.is_dir():
        raise NiclabError(
            f"image recipes not found at {path}: run niclab from a clone of the "
            "repository, or set NICLAB_IMAGES_DIR to its images/ directory"
        )
    return path


def live_dir() -> Path:
    """Where running harnesses register their run directories, for `niclab down`."""
    return cache_dir() / "live"


def state_dir() -> Path:
    """What must outlive a run and be shared by every run on the host: card journals and leases.

    $NICLAB_STATE, else /var/lib/niclab for root (who binds cards), else the cache's state/.
    """
    if env := os.environ.get("NICLAB_STATE"):
        return Path(env)
    return Path("/var/lib/niclab") if os.geteuid() == 0 else cache_dir() / "state"


def runtime_dir() -> Path:
    """What lives only while niclab runs (ssh control sockets): $XDG_RUNTIME_DIR/niclab when the session has
    one, else /run/niclab for root, else the cache's run/."""
    if env := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(env) / "niclab"
    return Path("/run/niclab") if os.geteuid() == 0 else cache_dir() / "run"
