"""The accelerator decision, replayed against fake probe outcomes: nothing boots here.

(tests/integration/test_accel_fallback.py boots the real image under TCG and a hung "KVM".)
"""

import re
import time
from pathlib import Path

import pytest

from niclab.base.errors import UsageError
from niclab.plumbing import accel
from tests.helpers import FakeImage


class Probe:
    """A probe that answers as told and counts how often it was asked."""

    def __init__(self, worked: bool, what: str = "fake outcome"):
        self.worked, self.what, self.calls = worked, what, 0

    def __call__(self) -> tuple[bool, str]:
        self.calls += 1
        return self.worked, self.what


def test_a_working_probe_chooses_kvm_and_is_cached():
    probe = Probe(True, "reached userspace under kvm in 1.2 s")
    choice, new = accel.decide(None, None, None, probe)
    assert (choice.accel, choice.reason, new, probe.calls) == ("kvm", "reached userspace under kvm in 1.2 s", True, 1)


def test_a_hung_or_crashed_probe_chooses_tcg_with_its_reason():
    for what in (
        "the image's kernel did not reach userspace under kvm in 20 s",
        "QEMU exited under kvm before the guest's userspace ran: error: failed to set MSR 0x10a",
    ):
        choice, new = accel.decide(None, None, None, Probe(False, what))
        assert (choice.accel, choice.reason, new) == ("tcg", what, True)


def test_no_usable_dev_kvm_means_tcg_without_probing():
    probe = Probe(True)
    choice, new = accel.decide(None, None, "/dev/kvm is not accessible to this user", probe)
    assert (choice.accel, new, probe.calls) == ("tcg", True, 0)
    assert choice.reason == "/dev/kvm is not accessible to this user"


def test_a_cached_verdict_is_used_without_probing():
    cached = accel.AccelChoice("tcg", "KVM failed a real run", "2026-11-22T00:00:00Z")
    probe = Probe(True)
    assert accel.decide(None, cached, None, probe) == (cached, False) and probe.calls == 0


def test_the_environment_overrides_cache_and_probe():
    probe = Probe(False)
    cached = accel.AccelChoice("tcg", "cached", "2026-11-22T00:00:00Z")
    choice, new = accel.decide("kvm", cached, "no /dev/kvm", probe)
    assert (choice.accel, choice.forced, new, probe.calls) == ("kvm", True, False, 0)
    with pytest.raises(UsageError, match="NICLAB_ACCEL='hvf': use kvm or tcg"):
        accel.decide("hvf", None, None, probe)


def test_the_probe_boots_the_images_kernel_as_a_run_would():
    argv = accel.probe_argv("/usr/bin/qemu-system-x86_64", "kvm", FakeImage(), Path("/tmp/s"))
    joined = " ".join(argv)
    assert "-machine pc,accel=kvm" in joined and "-cpu host" in joined  # as qemu_cmd does for kvm
    assert "-kernel /images/vmlinux" in joined and "-initrd /images/initrd.img" in joined  # the kernel runs boot
    # userspace prints the word: busybox echo as init, after the image's own command line
    # and the kernel's messages, the progress that tells a slow boot from a hung one
    assert argv[-1] == f"console=ttyS0 quiet loglevel=6 panic=-1 rdinit=/usr/bin/busybox -- echo {accel.PROBE_WORD}"


def test_choose_caches_per_image_and_a_failed_run_overrides_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("NICLAB_ACCEL", raising=False)
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(accel, "kvm_access", lambda: None)
    probes: list[str] = []

    def fake_probe(kind, binary, image, timeout=accel.PROBE_TIMEOUT_S):
        probes.append(image.id)
        return True, "reached userspace under kvm in 0.9 s"

    monkeypatch.setattr(accel, "probe", fake_probe)
    image, other = FakeImage(), FakeImage(id="micro-fedcba9876543210")
    assert accel.choose_accel(image).accel == "kvm"
    assert accel.choose_accel(image).accel == "kvm" and probes == [image.id]  # cached
    assert accel.choose_accel(other).accel == "kvm" and probes == [image.id, other.id]  # per image
    # A real run contradicts the probe: the verdict for this image becomes tcg, and stays so.
    accel.mark_kvm_unusable(image, "a: the guest agent did not answer in time")
    again = accel.choose_accel(image)
    assert again.accel == "tcg" and "KVM failed a real run" in again.reason and "did not answer" in again.reason
    assert len(probes) == 2
    assert accel.choose_accel(image, refresh=True).accel == "kvm" and len(probes) == 3  # `niclab accel --probe`


def test_a_corrupt_cache_entry_is_probed_again(monkeypatch, tmp_path):
    monkeypatch.delenv("NICLAB_ACCEL", raising=False)
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(accel, "kvm_access", lambda: None)
    monkeypatch.setattr(accel, "probe", lambda *a, **k: (False, "hung"))
    first = accel.choose_accel(FakeImage())
    [entry] = (tmp_path / "accel").glob("*.json")
    entry.write_text("{not json")
    assert accel.choose_accel(FakeImage()).reason == "hung" and first.accel == "tcg"


def test_niclab_qemu_names_the_binary(monkeypatch, tmp_path):
    wrapper = tmp_path / "my-qemu"
    wrapper.write_text("#!/bin/sh\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NICLAB_QEMU", str(wrapper))
    assert accel.qemu_binary() == str(wrapper)
    monkeypatch.setenv("NICLAB_QEMU", str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="no such program"):
        accel.qemu_binary()


FAKE_QEMU = """#!/bin/sh
# A stand-in for QEMU that writes what the script says to the probe's serial file, then ends or hangs.
for arg; do case "$arg" in file:*) serial="${arg#file:}";; esac; done
{script}
"""


def fake_qemu(tmp_path: Path, script: str) -> str:
    binary = tmp_path / "qemu"
    binary.write_text(FAKE_QEMU.replace("{script}", script))
    binary.chmod(0o755)
    return str(binary)


def test_a_slow_boot_that_keeps_printing_passes_the_probe(tmp_path):
    # 3.2 s to userspace with a line every 0.2 s: longer than the 1.5 s of silence the probe allows (a busy
    # host may stretch a 0.2 s step several times, never to 1.5 s)
    script = 'for i in $(seq 16); do echo "[ $i ] booting" >> "$serial"; sleep 0.2; done\n'
    script += f'echo {accel.PROBE_WORD} >> "$serial"; exit 0'
    worked, what = accel.probe("kvm", fake_qemu(tmp_path, script), FakeImage(), timeout=1.5, limit=60)
    assert worked, what
    took = re.fullmatch(r"the image.s kernel reached userspace under kvm in ([0-9.]+) s", what)
    assert took and float(took[1]) >= 3.2, what


def test_a_silent_guest_fails_the_probe_after_the_silence_and_is_killed(tmp_path):
    script = f'echo "[ 0 ] early" >> "$serial"; sleep 30; echo {accel.PROBE_WORD} >> "$serial"'
    started = time.monotonic()
    worked, what = accel.probe("kvm", fake_qemu(tmp_path, script), FakeImage(), timeout=0.5, limit=10)
    assert not worked
    assert "nothing new on its console for 0.5 s" in what, what
    assert time.monotonic() - started < 5  # killed, not waited for


def test_a_guest_that_prints_forever_fails_the_probe_at_the_limit(tmp_path):
    script = 'while :; do echo line >> "$serial"; sleep 0.1; done'
    worked, what = accel.probe("kvm", fake_qemu(tmp_path, script), FakeImage(), timeout=2, limit=3)
    assert (worked, what) == (False, "the image's kernel did not reach userspace under kvm in 3 s")


def test_a_guest_that_printed_the_word_is_left_to_end_itself(tmp_path):
    done = tmp_path / "ended"
    script = f'echo {accel.PROBE_WORD} >> "$serial"; sleep 0.5; touch {done}'
    worked, _ = accel.probe("kvm", fake_qemu(tmp_path, script), FakeImage(), timeout=5, limit=10)
    assert worked and done.exists()  # not killed the moment the word showed
