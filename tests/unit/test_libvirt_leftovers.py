"""`niclab down`'s choice among a libvirt host's niclab domains: whose harness is gone, and whose PID
cannot be judged here because its run was started in a container or on another host."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from niclab.base.procs import pid_namespace, process_start_time
from niclab.plumbing import libvirt_conn


class FakeError(Exception):
    pass


class FakeDomain:
    def __init__(self, name: str, **meta: str):
        self._name, self.meta, self.destroyed = name, meta, False

    def name(self) -> str:
        return self._name

    def metadata(self, kind, namespace, flags) -> str:
        attributes = " ".join(f'{key}="{value}"' for key, value in self.meta.items())
        return f"<run {attributes}/>"

    def destroy(self) -> None:
        self.destroyed = True


@pytest.fixture
def host(monkeypatch):
    """A libvirt host with four niclab domains: this live process's, a dead one's, and two of runs started
    elsewhere (one with a PID that happens to be alive here)."""
    me = {"harness-pid": str(os.getpid()), "harness-start": str(process_start_time(os.getpid()))}
    domains = [
        FakeDomain("niclab-live-a", **me, **{"harness-at": pid_namespace()}),
        FakeDomain("niclab-dead-a", **{"harness-pid": "1", "harness-start": "1", "harness-at": pid_namespace()}),
        FakeDomain("niclab-box-a", **me, **{"harness-at": "c0ffee/pid:[4026532999]"}),
        FakeDomain("niclab-box-b", **{"harness-pid": "1", "harness-start": "1", "harness-at": "c0ffee/pid:[1]"}),
        FakeDomain("someone-else", **{"harness-pid": "1", "harness-start": "1"}),
    ]
    conn = SimpleNamespace(listAllDomains=lambda flags: domains, close=lambda: None)
    fake = SimpleNamespace(VIR_CONNECT_LIST_DOMAINS_ACTIVE=1, VIR_DOMAIN_METADATA_ELEMENT=2, libvirtError=FakeError)
    monkeypatch.setattr(libvirt_conn, "libvirt_module", lambda: fake)
    monkeypatch.setattr(libvirt_conn, "open_uri", lambda uri: conn)
    return {d.name(): d for d in domains}


def test_down_destroys_the_dead_runs_domains_and_leaves_other_namespaces_alone(host):
    found = libvirt_conn.leftover_domains("qemu:///system")
    assert found.destroyed == ["niclab-dead-a"]
    assert found.elsewhere == ["niclab-box-a", "niclab-box-b"]
    assert [name for name, d in host.items() if d.destroyed] == ["niclab-dead-a"]


def test_down_all_destroys_every_niclab_domain(host):
    found = libvirt_conn.leftover_domains("qemu:///system", include_running=True)
    assert found.destroyed == ["niclab-live-a", "niclab-dead-a", "niclab-box-a", "niclab-box-b"]
    assert not found.elsewhere and not host["someone-else"].destroyed


def test_a_domain_from_before_harness_at_was_recorded_is_judged_by_its_pid(host):
    del host["niclab-dead-a"].meta["harness-at"]
    assert "niclab-dead-a" in libvirt_conn.leftover_domains("qemu:///system").destroyed
