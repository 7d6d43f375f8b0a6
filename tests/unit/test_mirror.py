import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image.mirror import debian_mirror


def test_deb822_source_for_the_suite(tmp_path, monkeypatch):
    monkeypatch.delenv("NICLAB_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.list").write_text("deb https://example.invalid/apt nodistro main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://mirror.invalid/debian"


def test_one_line_source_with_options(tmp_path, monkeypatch):
    monkeypatch.delenv("NICLAB_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list").write_text(
        "# a comment\ndeb [arch=amd64 signed-by=/x.gpg] http://mirror.invalid/debian bookworm main\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://mirror.invalid/debian"


def test_environment_wins_and_missing_suite_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_DEBIAN_MIRROR", "http://mine.invalid/debian")
    assert debian_mirror("bookworm", tmp_path) == "http://mine.invalid/debian"
    monkeypatch.delenv("NICLAB_DEBIAN_MIRROR")
    with pytest.raises(NiclabError, match="NICLAB_DEBIAN_MIRROR"):
        debian_mirror("bookworm", tmp_path)
