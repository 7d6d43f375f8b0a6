"""A rig machine's libvirt domain, found by its name rather than by Vagrant's id.

vagrant-libvirt finds a machine's domain only by the UUID in
<dotfile>/machines/<node>/libvirt/id. When that file is gone (a `.vagrant`
removed by hand, an interrupted destroy) or names the other machine's
domain, `vagrant destroy -f` exits 0 and leaves a domain running (CI saw
it: b's id named a's domain, destroying b took a's down, a was then "not
created", and b's own domain stayed), and `vagrant up` refuses with "Name
... of domain about to create is already taken". The rig's domains have
names of their own (state.domain_prefix hashes the dotfile's path), so the
Vagrantfile asks `niclab vagrant domain` for the domain of that name and
points the machine at its UUID where the two disagree (docs/vagrant.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from niclab.errors import NiclabError

Run = Callable[[list[str]], subprocess.CompletedProcess]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


class DomainError(NiclabError):
    """libvirt would not say whether the rig's domain exists."""


@dataclass(frozen=True)
class Domain:
    name: str
    uuid: str
    state: str  # virsh domstate: "running", "shut off", ...


def virsh(uri: str, *args: str) -> list[str]:
    return ["virsh", "-c", uri, "-q", *args]


def lookup(uri: str, name: str, run: Run = _run) -> Domain | None:
    """The domain called `name`, or None if libvirt has none."""
    found = {}
    for verb in ("domuuid", "domstate"):
        done = run(virsh(uri, verb, name))
        if done.returncode != 0:
            if "failed to get domain" in done.stderr:
                return None
            raise DomainError(
                f"cannot tell whether {uri} has the rig's domain {name}: {done.stderr.strip()} "
                f"(is libvirtd running? `virsh -c {uri} list --all` shows what it has)"
            )
        found[verb] = done.stdout.strip()
    return Domain(name, found["domuuid"], found["domstate"])
