import pytest

from niclab import accel
from niclab.errors import UsageError


def test_boot_sector_is_a_valid_mbr_with_the_probe_word():
    sector = accel.boot_sector()
    assert len(sector) == 512
    assert sector[510:] == b"\x55\xaa"
    assert sector[0x17:0x17 + len(accel.PROBE_WORD)] == accel.PROBE_WORD
    # mov si, imm16 points at the word: 0x7c00 + 0x17
    assert sector[8:11] == bytes([0xBE, 0x17, 0x7C])


def test_tcg_probe_really_boots():
    worked, what = accel.probe("tcg", accel.qemu_binary())
    assert worked, what


def test_environment_overrides_the_probe(monkeypatch):
    monkeypatch.setenv("NICLAB_ACCEL", "tcg")
    assert accel.choose_accel().accel == "tcg"
    monkeypatch.setenv("NICLAB_ACCEL", "hvf")
    with pytest.raises(UsageError, match="kvm or tcg"):
        accel.choose_accel()


def test_choice_is_cached_per_host(monkeypatch, tmp_path):
    monkeypatch.delenv("NICLAB_ACCEL", raising=False)
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    first = accel.choose_accel(refresh=True)
    assert first.accel in ("kvm", "tcg")
    cached = list((tmp_path / "accel").glob("*.json"))
    assert len(cached) == 1
    assert accel.choose_accel() == first
