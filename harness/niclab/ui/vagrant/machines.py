"""A scenario cell as a Vagrant rig: the machines, their NICs and UDP cables, what to provision.

The Vagrantfile reads this as JSON (`niclab vagrant config`), so the scenario is
parsed, validated and expanded by the same code as `niclab run`, and the guests
are configured by the same netconf script. Only what vagrant-libvirt can realize
is accepted; anything else is an error that says what to do instead.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass

from niclab.base.errors import NiclabError
from niclab.model import nics
from niclab.model.scenario import Cell
from niclab.model.topology import Topology
from niclab.plumbing import netconf
from niclab.plumbing.backends.qemu_cmd import port_macs
from niclab.plumbing.backends.qemu_nics import qemu_nic
from niclab.plumbing.netconf.plan import PREFIX, PREFIX6, Iface, NetPlan

#: A full Debian guest with systemd needs more than the micro image's default.
MIN_MEMORY_MIB = 512
#: Where the netconf script goes in the guest, so `vagrant ssh` users can read or re-run it.
NETCONF_PATH = "/etc/niclab/plumbing/netconf.sh"


class VagrantCellError(NiclabError):
    """The scenario asks for something a Vagrant rig cannot realize."""


@dataclass(frozen=True)
class Cable:
    """One NIC of a machine, and the UDP tunnel on 127.0.0.1 it is one end of."""

    ifname: str
    model: str  # niclab's model name (nic: e1000)
    device: str  # what libvirt's <model type=…> and QEMU's -device call it
    mac: str
    local_port: int
    remote_port: int
    peer: str


@dataclass(frozen=True)
class Provisioner:
    name: str
    script: str


@dataclass(frozen=True)
class Machine:
    name: str
    cpus: int
    memory_mib: int
    nic_model: str  # vagrant-libvirt's provider-wide nic_model_type (one per machine, see one_model)
    cables: tuple[Cable, ...]
    provisioners: tuple[Provisioner, ...]


@dataclass(frozen=True)
class VagrantCell:
    """One scenario cell as the machines the Vagrantfile defines (it reads this as JSON)."""

    scenario: str
    scenario_file: str
    cell: str
    machines: tuple[Machine, ...]
    notes: tuple[str, ...] = ()  # what differs from `niclab run` of the same cell

    def as_dict(self) -> dict:
        return asdict(self)


def one_model(node: str, devices: list[str]) -> str:
    """vagrant-libvirt 0.11 can give a machine's NICs only one model: its provider-wide `nic_model_type`.

    It rewrites every interface to that model when it starts the domain, and a
    per-interface model beside the default (virtio) gets `<driver iommu='off'/>`,
    which libvirt rejects for other models. The management NIC gets the model too.
    """
    models = sorted(set(devices))
    if len(models) > 1:
        raise VagrantCellError(
            f"node {node} has NICs of several models ({', '.join(models)}); vagrant-libvirt 0.11 gives all of a "
            "machine's NICs one model: use one model per node under Vagrant, or `niclab run` for mixed models"
        )
    return models[0] if models else "virtio"


def libvirt_model(model: str) -> tuple[str, str | None]:
    """libvirt's name for a model, and a note if vagrant-libvirt cannot give it niclab's QEMU properties."""
    nic = qemu_nic(nics.get(model).name)
    note = None
    if nic.properties:
        note = (
            f"{model}: vagrant-libvirt cannot set the QEMU properties niclab gives this model "
            f"({nic.properties}), which `niclab run` sets to work around a QEMU bug "
            "(see harness/niclab/plumbing/backends/qemu_nics.py)"
        )
    return nic.libvirt_type, note


def _check_wires(topology: Topology) -> None:
    for wire in topology.wires:
        if wire.switched:
            raise VagrantCellError(
                f"{wire.medium()}; a Vagrant rig has UDP cables between two nodes only, no switch: use `niclab run` "
                "for switched segments"
            )


def hosts_lines(node: str, net: NetPlan) -> list[str]:
    """/etc/hosts lines: each other node by its address on the first link it shares with `node`. IPv4 only:
    with an IPv6 address beside it, `netperf -H b` would go over IPv6 (getaddrinfo prefers it), unlike the
    benchmarks' default; the motd shows the IPv6 addresses."""
    lines = [f"127.0.1.1 {node}"]
    named = {node}
    for group in net.segments().values():
        if any(i.node == node for i in group):
            for iface in group:
                if iface.node not in named:
                    named.add(iface.node)
                    lines.append(f"{iface.address} {iface.node}")
    return lines


def identity_script(node: str, net: NetPlan) -> str:
    """Host name, and the other nodes' names on the test network (`netperf -H b` crosses a test cable)."""
    entries = "\n".join(f"{line} # niclab" for line in hosts_lines(node, net))
    return (
        "set -e\n"
        f"echo {shlex.quote(node)} > /etc/hostname\n"
        f"hostname {shlex.quote(node)}\n"
        "sed -i -e '/ # niclab$/d' -e '/^127\\.0\\.1\\.1[[:space:]]/d' /etc/hosts\n"
        f"cat >> /etc/hosts <<'EOF'\n{entries}\nEOF\n"
    )


def netconf_script(ifaces: list[Iface], macs: dict[tuple[str, int, int], str]) -> str:
    """niclab's own netconf script, kept in the guest and run from there."""
    script = netconf.node_script(ifaces, macs)
    return (
        f"mkdir -p {NETCONF_PATH.rsplit('/', 1)[0]}\n"
        f"cat > {NETCONF_PATH} <<'NICLAB_NETCONF'\n#!/bin/sh\n{script}NICLAB_NETCONF\n"
        f"chmod 0755 {NETCONF_PATH}\n"
        f"exec {NETCONF_PATH}\n"
    )


def _peers(iface: Iface, net: NetPlan) -> str:
    others = [i for i in net.segments()[iface.segment] if i is not iface]
    return ", ".join(f"{o.node} {o.address}" + (f" {o.address6}" if o.address6 else "") for o in others)


def motd_script(node: str, cell: Cell, net: NetPlan) -> str:
    """/etc/motd: which NIC, driver and address each cable end of this node has."""
    title = f"niclab node {node}: scenario {cell.scenario.name}, cell {cell.id}"
    lines = [f"printf '%s\\n' {shlex.quote(title)} > /etc/motd"]
    for iface in net.on(node):
        model = iface.ports[0].model
        port = iface.ports[0].ifname
        what = f"{iface.bond.mode} bond of {', '.join(p.ifname for p in iface.ports)}, " if iface.bond else ""
        extra = f", netem {iface.netem.describe()}" if iface.netem else ""
        before = f"  {iface.name}: {what}{model} (driver "
        v6 = f" {iface.address6}/{PREFIX6}" if iface.address6 else ""
        after = f") {iface.address}/{PREFIX}{v6} mtu {iface.mtu}{extra} -> {_peers(iface, net)}"
        lines.append(  # the text is printf's argument, never its format: netem's "loss 1%" stays whole
            f"drv=$(ethtool -i {shlex.quote(port)} 2>/dev/null | sed -n 's/^driver: //p')\n"
            f"printf '%s\\n' {shlex.quote(before)}\"${{drv:-none}}\"{shlex.quote(after)} >> /etc/motd"
        )
    others = [line.split()[1] for line in hosts_lines(node, net)[1:]]
    if others:
        lines.append(f"printf '%s\\n' {shlex.quote(f'  try: netperf -H {others[0]}')} >> /etc/motd")
    return "\n".join(lines) + "\n"


def vagrant_cell(cell: Cell, scenario_file: str, ports: dict[str, int]) -> VagrantCell:
    """One cell as Vagrant machines; `ports` maps "node/ifname" to the UDP port that end listens on."""
    scenario = cell.scenario
    topology = cell.topology
    _check_wires(topology)
    net = netconf.plan(scenario, topology)
    peer_of = {p.key: q for w in topology.wires for p, q in (w.ports, w.ports[::-1])}
    macs = port_macs(topology)
    machines = []
    for spec in topology.nodes:
        cables = tuple(
            Cable(
                ifname=p.ifname,
                model=p.model,
                device=libvirt_model(p.model)[0],
                mac=macs[p.key],
                local_port=ports[f"{spec.name}/{p.ifname}"],
                remote_port=ports[f"{peer_of[p.key].node}/{peer_of[p.key].ifname}"],
                peer=peer_of[p.key].node,
            )
            for p in spec.ports
        )
        ifaces = net.on(spec.name)
        provisioners = [Provisioner("niclab-identity", identity_script(spec.name, net))]
        if ifaces:
            provisioners += [
                Provisioner("niclab-netconf", netconf_script(ifaces, macs)),
                Provisioner("niclab-motd", motd_script(spec.name, cell, net)),
            ]
        machines.append(
            Machine(
                name=spec.name,
                cpus=spec.cpus,
                memory_mib=max(spec.memory_mib, MIN_MEMORY_MIB),
                nic_model=one_model(spec.name, [c.device for c in cables]),
                cables=cables,
                provisioners=tuple(provisioners),
            )
        )
    notes = tuple(dict.fromkeys(note for p in topology.ports if (note := libvirt_model(p.model)[1])))
    return VagrantCell(scenario.name, scenario_file, cell.id, tuple(machines), notes)


def port_keys(cell: Cell) -> list[str]:
    """Every cable end of the cell, as "node/ifname" (what `vagrant_cell` needs a UDP port for)."""
    return [f"{p.node}/{p.ifname}" for p in cell.topology.ports]
