"""`niclab vagrant domain`: the rig's domain of a node, found by name with virsh.

virsh's answers are the ones virsh 9.0 (Debian 12) printed for a running
vagrant-libvirt domain, for a name it does not have, and with no libvirtd.
"""

import json
import subprocess

import pytest

from niclab.cli import main
from niclab.vagrant import domain
from niclab.vagrant.state import domain_prefix

URI = "qemu:///system"
NAME = "niclab-6eadabb7-b"
UUID = "e8afb621-b2f2-4691-8ec4-4b9204dfa017"


class Virsh:
    """Replays virsh: `answers` maps a verb to (returncode, stdout, stderr); every call is kept."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]):
        self.answers, self.calls = answers, []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        assert argv[:4] == ["virsh", "-c", URI, "-q"], argv
        code, out, err = self.answers[argv[4]]
        return subprocess.CompletedProcess(argv, code, out, err)


def test_a_domain_is_found_by_name_with_its_uuid_and_state():
    virsh = Virsh({"domuuid": (0, UUID + "\n", ""), "domstate": (0, "running\n", "")})
    assert domain.lookup(URI, NAME, virsh) == domain.Domain(NAME, UUID, "running")
    assert [argv[4:] for argv in virsh.calls] == [["domuuid", NAME], ["domstate", NAME]]


def test_no_domain_of_that_name_is_none():
    virsh = Virsh({"domuuid": (1, "", f"error: failed to get domain '{NAME}'\n")})
    assert domain.lookup(URI, NAME, virsh) is None


def test_a_libvirtd_that_does_not_answer_is_an_error_not_an_absent_domain():
    virsh = Virsh({"domuuid": (1, "", "error: failed to connect to the hypervisor\n")})
    with pytest.raises(domain.DomainError) as raised:
        domain.lookup(URI, NAME, virsh)
    assert str(raised.value) == (
        f"cannot tell whether {URI} has the rig's domain {NAME}: error: failed to connect to the hypervisor "
        f"(is libvirtd running? `virsh -c {URI} list --all` shows what it has)"
    )


def test_the_command_looks_the_rigs_own_name_up_and_prints_json(monkeypatch, tmp_path, capsys):
    asked = []

    def lookup(uri, name):
        asked.append((uri, name))
        return domain.Domain(name, UUID, "shut off")

    monkeypatch.setattr(domain, "lookup", lookup)
    dotfile = tmp_path / "dotfile"
    assert main(["vagrant", "domain", "--node", "b", "--dotfile", str(dotfile), "--uri", URI]) == 0
    name = domain_prefix(dotfile) + "b"
    assert asked == [(URI, name)]
    assert json.loads(capsys.readouterr().out) == {"name": name, "uuid": UUID, "state": "shut off"}
