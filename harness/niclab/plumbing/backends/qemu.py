"""The emulated backend: one QEMU per node, NIC models from the catalog, cables as sockets.

KVM where the probe says so, else TCG, with the fallback of backends/boot; each cable a connected pair of UDP
sockets handed to QEMU as fds; a segment of three or more ends a `vde_switch`; each node's QMP and agent
sockets in its work directory (docs/architecture.md, "Cables are socket pairs made by the harness" and
"Segments of three or more nodes go through vde_switch").
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Node, Progress
from niclab.base.procs import Child, Supervisor, down
from niclab.base.threads import at_once
from niclab.model import nics
from niclab.model.facts import RigFacts
from niclab.model.topology import NodeSpec, Topology
from niclab.plumbing.accel import AccelChoice, choose_accel, now, qemu_binary
from niclab.plumbing.backends.base import BackendOption, BackendOptions, BackendPlugin, DownRequest, Leftovers, Rig, Say
from niclab.plumbing.backends.boot import (
    DEFAULT_BOOT_TIMEOUT_S,
    BootError,
    boot_falling_back,
    console_end,
    env_seconds,
    tail,
)
from niclab.plumbing.backends.qemu_cmd import MAX_NICS, NicPlan, VmPlan, mac_address, qemu_argv
from niclab.plumbing.backends.qemu_nics import emulated_model, stand_ins
from niclab.plumbing.backends.restore import RestoreError, arrive, resume
from niclab.plumbing.backends.saved_state import (
    META,
    RefusedState,
    SavedGuestDown,
    SavedState,
    StateKey,
    loaded_before,
    make_state,
    module_words,
    open_state,
)
from niclab.plumbing.drivers.layer import driver_images, rig_modules
from niclab.plumbing.guest import AgentNode, GuestAgent, connect_all
from niclab.plumbing.image import Image, ensure_image
from niclab.plumbing.image.kernels import image_facts, node_images

# A KVM guest answers its agent in 1-3 s. Past this (s), it is hung, not slow: fall back to TCG.
DEFAULT_KVM_DEADLINE_S = 20.0  # $NICLAB_KVM_DEADLINE overrides


def set_aside(workdir: Path, topology: Topology, attempt: str) -> None:
    """Keep a failed attempt's logs (a.serial.log -> a.serial.kvm.log) and clear its sockets for the next."""
    for spec in topology.nodes:
        for kind in ("serial", "qemu"):
            log = workdir / f"{spec.name}.{kind}.log"
            if log.exists():
                log.replace(workdir / f"{spec.name}.{kind}.{attempt}.log")
        for sock in ("qga", "qmp", "serial"):
            (workdir / f"{spec.name}.{sock}").unlink(missing_ok=True)


@dataclass(frozen=True)
class Attachment:
    """How one port joins its wire: the -netdev backend, and the socket QEMU inherits, if any."""

    netdev: str
    fd: int | None = None


def udp_cable() -> tuple[socket.socket, socket.socket]:
    """Two UDP sockets on 127.0.0.1 connected to each other: the two ends of a cable."""
    ends = []
    for _ in range(2):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        ends.append(sock)
    ends[0].connect(ends[1].getsockname())
    ends[1].connect(ends[0].getsockname())
    return ends[0], ends[1]


def start_switch(supervisor: Supervisor, workdir: Path, sockets: Path, name: str, timeout: float = 10.0) -> str:
    """Start a vde_switch with its sockets in sockets/name; returns that path for -netdev vde.

    vde_switch makes its socket paths absolute, and a unix socket path must fit
    in 108 bytes, so the sockets live in a short temporary directory; a symlink
    in the work directory points at them.
    """
    binary = shutil.which("vde_switch")
    if binary is None:
        raise NiclabError(
            "vde_switch is not installed (Debian package vde2): run `make setup`; "
            "switched segments (three or more nodes, or `switch: true`) need it"
        )
    path = sockets / name
    child = supervisor.start(
        name,
        [binary, "--sock", str(path), "--numports", "64"],
        cwd=workdir,
        log=workdir / f"{name}.log",
        stdin_pipe=True,
    )
    (workdir / name).symlink_to(path)
    deadline = time.monotonic() + timeout
    while not (path / "ctl").exists():
        if (gone := child.exit_reason()) is not None or time.monotonic() > deadline:
            raise NiclabError(
                f"{name}: vde_switch did not start: {gone or 'no control socket'} in {path}; "
                f"see {workdir / (name + '.log')}"
            )
        time.sleep(0.02)
    return str(path)


@dataclass(frozen=True)
class Restore:
    """How one node is restored: its saved state's key, opened state, and the module parameters set after."""

    key: StateKey
    params: dict[str, list[str]]
    saved: SavedState


T = TypeVar("T")


def each(work: Callable[[str], T], names: Iterable[str]) -> dict[str, T]:
    """`work` for every node at once (a thread each); the first node's error raised, after all of them ended."""
    done, errors = at_once({name: functools.partial(work, name) for name in names})
    if errors:
        raise next(iter(errors.values()))
    return done


@dataclass(frozen=True)
class BootPlan:
    """One attempt at booting a run's guests: each node's image, under one accelerator."""

    topology: Topology
    images: dict[str, Image]  # node -> the image it boots
    binary: str  # the QEMU that runs them
    choice: AccelChoice  # the accelerator, and why
    workdir: Path  # where QEMU runs: its sockets and logs


QBOOT = "qboot.rom"  # QEMU's minimal x86 firmware (Debian: qemu-system-data), found in QEMU's data directories


def qemu_firmware(binary: str) -> str | None:
    """qboot's path if this QEMU has it and $NICLAB_QBOOT is not 0, else None (SeaBIOS).

    Under TCG, SeaBIOS takes 0.5-1 s before the kernel's entry; qboot does what a direct kernel
    boot needs (PCI, the ACPI tables from fw_cfg, the PVH or bzImage hand-over) in a fraction.
    """
    if os.environ.get("NICLAB_QBOOT", "1") == "0":
        return None
    return qemu_data_file(binary, QBOOT)


@functools.cache
def _data_dirs(binary: str) -> tuple[Path, ...]:
    """This QEMU's data directories (`-L help`), asked once per binary and process."""
    try:
        listed = subprocess.run([binary, "-L", "help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(Path(line.strip()) for line in listed.splitlines() if line.strip())


def qemu_data_file(binary: str, name: str) -> str | None:
    """The file `name` (firmware, an option ROM) where this QEMU finds it, resolved; None if it has none."""
    for directory in _data_dirs(binary):
        if (found := directory / name).is_file():
            return str(found.resolve())
    return None


def qemu_identity(binary: str) -> tuple[tuple[str, str], ...]:
    """What of QEMU shapes a guest's saved state: its version, its binary, the firmware and the option ROM a
    kernel boot runs (their size and time: a package update changes them)."""

    def of(path: str | None) -> str:
        if path is None:
            return "none"
        st = Path(path).stat()
        return f"{path} {st.st_size}:{st.st_mtime_ns}"

    return (
        ("version", qemu_version(binary)),
        ("binary", of(str(Path(binary).resolve()))),
        *((name, of(qemu_data_file(binary, name))) for name in SAVED_FIRMWARE),
    )


SAVED_FIRMWARE = ("bios-256k.bin", "linuxboot_dma.bin")  # what a saved guest booted with (SeaBIOS), and its ROM


@functools.cache
def qemu_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out else "unknown"


class QemuBackend:
    name = "qemu"

    def __init__(
        self,
        image: Image | None = None,
        accel: str | None = None,
        boot_timeout: float | None = None,
        cold_boot: bool = False,
    ):
        self._image = image
        self._accel = accel
        # guests boot cold, not restored from a saved state: asked (--cold-boot, NICLAB_COLD_BOOT=1), or None
        self.cold_boot = "asked (--cold-boot)" if cold_boot else None
        if os.environ.get("NICLAB_COLD_BOOT", "0") not in ("", "0"):
            self.cold_boot = "asked (NICLAB_COLD_BOOT)"
        self.boot_timeout = boot_timeout or env_seconds("NICLAB_BOOT_TIMEOUT", DEFAULT_BOOT_TIMEOUT_S)
        self.kvm_deadline = env_seconds("NICLAB_KVM_DEADLINE", DEFAULT_KVM_DEADLINE_S)

    def check(self, topology: Topology) -> str | None:
        problems = stand_ins(topology)
        for spec in topology.nodes:
            if len(spec.ports) > MAX_NICS:
                problems.append(
                    f"node {spec.name} has {len(spec.ports)} NICs; a pc machine has PCI slots for {MAX_NICS}"
                )
        return "; ".join(problems) or None

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        lines = []
        for wire in topology.wires:
            ends = []
            for port in wire.ports:
                model = nics.stand_in(port.model)
                shown = port.model if model is None or model.name == port.model else f"{port.model} as {model.name}"
                ends.append(f"{port.node}/{port.ifname} ({shown})")
            medium = "vde_switch" if wire.switched else "UDP cable on 127.0.0.1"
            lines.append(f"{medium}: " + " <-> ".join(ends))
        return lines

    def _wire(
        self, topology: Topology, fds: ExitStack, cleanup: ExitStack, supervisor: Supervisor, workdir: Path
    ) -> dict[tuple[str, int, int], Attachment]:
        """Make every cable and switch; returns how each port attaches.

        Cable sockets go on `fds` (closed once QEMU holds them), the switches'
        socket directory on `cleanup` (removed after every process stopped).
        """
        attachments: dict[tuple[str, int, int], Attachment] = {}
        sockets: Path | None = None
        for wire in topology.wires:
            if not wire.switched:
                for port, sock in zip(wire.ports, udp_cable(), strict=True):
                    fds.callback(sock.close)
                    attachments[port.key] = Attachment(f"dgram,local.type=fd,local.str={sock.fileno()}", sock.fileno())
            else:
                if sockets is None:
                    sockets = Path(tempfile.mkdtemp(prefix="niclab-vde-"))
                    cleanup.callback(shutil.rmtree, sockets, ignore_errors=True)
                switch = start_switch(supervisor, workdir, sockets, f"switch{wire.link}l{wire.lane}")
                for port in wire.ports:
                    attachments[port.key] = Attachment(f"vde,sock={switch}")
        return attachments

    def _plan(
        self,
        spec: NodeSpec,
        image: Image,
        accel: str,
        attachments: dict[tuple[str, int, int], Attachment],
        firmware: str | None = None,
        state: Restore | None = None,
    ) -> VmPlan:
        nic_plans = tuple(
            NicPlan(
                port,
                emulated_model(port.model),
                mac_address(spec.index, port.link, port.lane),
                attachments[port.key].netdev,
            )
            for port in spec.ports
        )
        floor = int(image.manifest.get("min_memory_mib", 0))  # an initramfs with add-ons or every driver needs more
        return VmPlan(
            node=replace(spec, memory_mib=max(spec.memory_mib, floor)),
            accel=accel,
            kernel=str(image.boot_kernel),
            initrd=str(image.initrd),
            cmdline=image.cmdline,
            nics=nic_plans,
            serial_log=f"{spec.name}.serial.log",
            serial_socket=f"{spec.name}.serial",
            qmp_socket=f"{spec.name}.qmp",
            agent_socket=f"{spec.name}.qga",
            firmware=None if state else firmware,
            incoming_fd=state.saved.fd if state else None,
            append=state.key.append if state else None,
            vmgenid=state is not None,
        )

    @contextmanager
    def realize(self, topology: Topology, workdir: Path, progress: Progress) -> Iterator[Rig]:
        images = driver_images(topology.nodes, node_images(topology.nodes, self._image, progress), progress)
        image = self._image or ensure_image(progress=progress)  # what the accelerator was probed with
        binary = qemu_binary()
        if self._accel:
            choice = AccelChoice(self._accel, "chosen by the caller", now(), forced=True)
        else:
            choice = choose_accel(image, progress=progress)
        workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o700)  # the QMP and agent sockets in it control the guests
        with ExitStack() as stack:

            def boot(accel: str) -> Rig:
                chosen = (
                    choice if accel == choice.accel else AccelChoice(accel, "KVM fell back, see the warning", now())
                )
                plan = BootPlan(topology, images, binary, chosen, workdir)
                cold = self.cold_boot
                if cold is None and accel != "tcg":
                    cold = "a KVM guest boots in 1-3 s; guests are restored under TCG"
                if cold is None:
                    try:
                        return self._restore(plan, stack, progress)
                    except (RestoreError, RefusedState) as exc:
                        cold = str(exc)
                    except SavedGuestDown:
                        raise  # the guest does not boot at all: booted cold, it would not either
                    except BootError as exc:
                        cold = f"the restored guests did not answer: {exc.summary}"
                    stack.close()
                    set_aside(workdir, topology, "restore")
                    progress(f"warning: restoring the guests failed ({cold}); booting them cold")
                rig = self._boot(plan, stack, progress)
                rig.facts.cold_boot = cold
                return rig

            def undo() -> None:
                stack.close()
                set_aside(workdir, topology, "kvm")

            rig, fallback = boot_falling_back(
                choice.accel, boot, undo, image, progress, "stopped the guests and booted them"
            )
            rig.facts.accel_fallback = fallback
            yield rig

    def _keys(self, plan: BootPlan, progress: Progress) -> dict[str, tuple[StateKey, dict[str, list[str]]]]:
        """Each node's saved state's key and the module parameters set after its restore; the states made first
        where there are none yet. RestoreError where none can be used; SavedGuestDown (a BootError) where the
        guest does not boot at all."""
        identity = qemu_identity(plan.binary)
        wanted: dict[str, tuple[StateKey, dict[str, list[str]]]] = {}
        for spec in plan.topology.nodes:
            image = plan.images[spec.name]
            if image.disk is not None:
                raise RestoreError(f"image {image.id} boots from its disk, whose state a saved guest cannot keep")
            params, words = module_words(spec.cmdline, image)
            memory = max(spec.memory_mib, int(image.manifest.get("min_memory_mib", 0)))
            wanted[spec.name] = (StateKey(image, spec.cpus, memory, plan.choice.accel, identity, words), params)
        for key in {key.digest: key for key, _ in wanted.values()}.values():
            if not (key.directory / META).is_file():
                try:
                    make_state(key, plan.binary, progress, self.boot_timeout, plan.workdir)
                except SavedGuestDown:
                    raise
                except NiclabError as exc:
                    raise RestoreError(f"no saved state could be made: {exc}") from None
        return wanted

    def _restore(self, plan: BootPlan, stack: ExitStack, progress: Progress) -> Rig:
        """The rig's guests restored from their saved states (made first where missing), their cards plugged in
        and their drivers loaded; RestoreError (or BootError) when that did not work."""
        with ExitStack() as opened:
            states: dict[str, Restore] = {}
            for name, (key, params) in self._keys(plan, progress).items():
                saved = open_state(key)
                if saved is None:
                    raise RestoreError(f"the saved state {key.directory} went away")
                opened.callback(os.close, saved.fd)
                if early := loaded_before(saved, params):
                    raise RestoreError(
                        f"node {name}'s module parameters are for {', '.join(early)}, which its saved guest had "
                        "loaded already"
                    )
                states[name] = Restore(key, params, saved)
            try:
                return self._boot(plan, stack, progress, states)
            except RestoreError as exc:
                if "migration failed" in str(exc):  # QEMU could not load a state that is whole: it is of no use
                    for state in {s.key.digest: s for s in states.values()}.values():
                        shutil.rmtree(state.key.directory, ignore_errors=True)
                    raise RestoreError(f"{exc}; its saved state was removed, the next run saves a new one") from None
                raise

    def _boot(
        self, plan: BootPlan, stack: ExitStack, progress: Progress, states: Mapping[str, Restore] | None = None
    ) -> Rig:
        """Start every node of `plan` under its accelerator and wait for their agents; what it starts goes on
        `stack`. With `states` (node -> its saved state), each guest is restored from it, then given its cards.

        Under KVM the wait is short (`kvm_deadline`): a guest that has not answered by then
        is taken to be hung by KVM, not slow.
        """
        topology, images, binary, choice, workdir = plan.topology, plan.images, plan.binary, plan.choice, plan.workdir
        states = states or {}
        accel = choice.accel
        cleanup = stack.enter_context(ExitStack())
        supervisor = stack.enter_context(Supervisor(workdir))
        with ExitStack() as fds:
            attachments = self._wire(topology, fds, cleanup, supervisor, workdir)
            # qboot under TCG only: measured there; under KVM SeaBIOS is quick, and the KVM probe boots with it
            firmware = qemu_firmware(binary) if accel == "tcg" else None
            plans = {
                spec.name: self._plan(spec, images[spec.name], accel, attachments, firmware, states.get(spec.name))
                for spec in topology.nodes
            }
            started = time.monotonic()
            children: dict[str, Child] = {}
            for name, vm in plans.items():
                passed = [fd for port in topology.node(name).ports if (fd := attachments[port.key].fd) is not None]
                if vm.incoming_fd is not None:
                    passed.append(vm.incoming_fd)
                try:
                    argv = qemu_argv(binary, vm)
                except ValueError as exc:
                    raise NiclabError(str(exc)) from None
                children[name] = supervisor.start(
                    f"qemu-{name}",
                    argv,
                    cwd=workdir,
                    log=workdir / f"{name}.qemu.log",
                    pass_fds=passed,
                )
        # the QEMUs hold the cable sockets now
        shown = image_facts(images)
        timeout = min(self.boot_timeout, self.kvm_deadline) if accel == "kvm" else self.boot_timeout
        if states:
            progress(f"restoring {len(plans)} guests ({accel}: {choice.reason}; image {shown['image']})")
            deadline = started + timeout

            def go(name: str) -> float:
                return resume(name, plans[name], workdir / plans[name].qmp_socket, children[name].exit_reason, deadline)

            plugged_at = each(go, plans)
        else:
            progress(f"booting {len(plans)} guests ({accel}: {choice.reason}; image {shown['image']})")
        agents = self._connect_agents(children, workdir, started, timeout, accel)
        for agent, _ in agents.values():
            stack.callback(agent.close)
        ready = {name: round(at - started, 2) for name, (_, at) in agents.items()}
        agent_nodes = {name: AgentNode(name, agent) for name, (agent, _) in agents.items()}
        nodes: dict[str, Node] = dict(agent_nodes)
        plugged: dict[str, float] = {}
        if states:

            def drivers(name: str) -> float:
                return arrive(agent_nodes[name], plans[name], states[name].params, plugged_at[name])

            plugged = each(drivers, plans)
        cards = f" (restored; their cards in after {', '.join(f'{plugged[n]:.1f}' for n in ready)} s)" if states else ""
        progress("guests answering: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()) + cards)
        return Rig(
            topology=topology,
            nodes=nodes,
            macs={nic.port.key: nic.mac for plan in plans.values() for nic in plan.nics},
            drivers={nic.port.key: nic.model.driver for plan in plans.values() for nic in plan.nics},
            modules=rig_modules(topology, images),
            facts=RigFacts.model_validate(
                {
                    "backend": self.name,
                    "accel": accel,
                    "accel_reason": choice.reason,
                    "qemu": qemu_version(binary),
                    "firmware": "seabios" if states else Path(firmware).name if firmware else "seabios",
                    **shown,
                    "kernel_boot": (  # image.pvh
                        "pvh" if all(i.boot_kernel != i.kernel for i in images.values()) else "bzimage"
                    ),
                    "agent_ready_s": ready,
                    "restored": {name: state.saved.key for name, state in states.items()},
                    "cards_plugged_s": plugged,
                }
            ),
            gone=lambda: {name: why for name, child in children.items() if (why := child.exit_reason())},
            host_pids=lambda: {name: child.pid for name, child in children.items()},
            console=lambda name: console_end(workdir / f"{name}.serial.log"),
            serial_sockets={name: workdir / plan.serial_socket for name, plan in plans.items() if plan.serial_socket},
        )

    def _connect_agents(
        self, children: dict[str, Child], workdir: Path, started: float, timeout: float, accel: str
    ) -> dict[str, tuple[GuestAgent, float]]:
        agents = {name: GuestAgent(name, workdir / f"{name}.qga") for name in children}
        answered, failures = connect_all(
            agents, started + timeout, {name: child.exit_reason for name, child in children.items()}
        )
        results = {name: (agents[name], at) for name, at in answered.items()}
        if failures:
            for agent, _ in results.values():
                agent.close()
            details = []
            for name, why in failures.items():
                details.append(
                    f"{why} (waited {time.monotonic() - started:.0f} s of {timeout:.0f} under {accel})\n"
                    f"--- the end of {workdir / (name + '.serial.log')}:\n{tail(workdir / f'{name}.serial.log')}\n"
                    f"--- the end of {workdir / (name + '.qemu.log')}:\n{tail(workdir / f'{name}.qemu.log', 10)}"
                )
            summary = "; ".join(
                f"{why} (waited {time.monotonic() - started:.0f} s)"
                + (
                    f": {last}"
                    if children[name].exit_reason()
                    and (last := tail(workdir / f"{name}.qemu.log", 1)) not in ("(empty)", "(nothing written)")
                    else ""
                )
                for name, why in failures.items()
            )
            raise BootError("guest(s) did not come up: " + "\n".join(details), summary)
        return results


def _create(options: BackendOptions, **kwargs: Any) -> QemuBackend:
    if options.text("libvirt_uri"):
        raise UsageError("--libvirt-uri is an option of --backend libvirt; the qemu backend starts QEMU itself")
    return QemuBackend(cold_boot=options.flag("cold_boot"), **kwargs)


def end_processes(request: DownRequest, say: Say, complain: Say) -> list[str]:
    """`niclab down`: stop the QEMU processes (and switches) a harness that is gone recorded; each said."""
    ended = down(include_running=request.include_running)
    for leftover in ended:
        say(f"stopped {leftover.name} (pid {leftover.pid}) of {leftover.pid_dir.parent}")
    return [leftover.name for leftover in ended]


PLUGIN = BackendPlugin(
    "qemu",
    "QEMU processes with emulated NICs, no root",
    _create,
    options=(
        BackendOption(
            "cold-boot",
            "guests boot cold instead of being restored from a saved state (also NICLAB_COLD_BOOT=1)",
            starts_nodes=True,
        ),
    ),
    leftovers=Leftovers(end_processes, order=0),
    default=True,
)
