"""The image cache read by a user who cannot write it (the lab container's, built with its Docker image)."""

from __future__ import annotations

import json
import os

import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image import store


@pytest.fixture
def read_only_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    (tmp_path / "images").mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: False if path == tmp_path / "images" else real_access(path, mode)
    )
    return tmp_path / "images"


def test_a_read_only_cache_without_the_current_image_says_how_to_get_one(read_only_cache):
    with pytest.raises(NiclabError, match=r"has no image for the current micro recipe \(micro-[0-9a-f]{16}\)") as e:
        store.build_image("micro", progress=lambda message: None)
    assert "`make docker` rebuilds its image" in str(e.value)
    assert not (read_only_cache / ".lock").exists()  # not even the lock was taken


def test_a_read_only_cache_with_the_current_image_gives_it(read_only_cache):
    wanted = store.recipe("micro")
    built = read_only_cache / f"micro-{wanted.input_hash()}"
    built.mkdir()
    for name in ("vmlinuz", "initrd.img"):
        (built / name).write_bytes(b"")
    manifest = {"recipe": "micro", "input_hash": wanted.input_hash(), "cmdline": "console=ttyS0"}
    (built / "manifest.json").write_text(json.dumps(manifest))
    assert store.ensure_image("micro").directory == built
    assert store.build_image("micro", progress=lambda message: None).directory == built
