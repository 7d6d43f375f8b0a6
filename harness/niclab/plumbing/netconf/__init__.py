"""Configure the guests' test network, check it is what was asked, and that it passes traffic.

Everything runs in the guests through each node's command channel (`ip`, `tc`,
`ethtool`), so the same code serves emulated NICs and passed-through cards.
"""

from __future__ import annotations

import re
import shlex
import statistics
import time
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import TypeVar

from niclab.base.errors import NiclabError
from niclab.base.node import Node, Progress
from niclab.base.threads import at_once
from niclab.model import offloads
from niclab.model.facts import NetworkFacts, PlannedInterface
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.guestsh import sections
from niclab.plumbing.netconf import clock, modules, pairs, params, verify
from niclab.plumbing.netconf.plan import PREFIX, PREFIX6, Iface, NetconfError, NetPlan, plan, subnet
from niclab.plumbing.netconf.script import CARRIER_TIMEOUT_S, features_script, knobs_script, node_script, reset_script

PING_TIMEOUT_S = 20
RTT_RE = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)")
T = TypeVar("T")

__all__ = [
    "PREFIX",
    "Iface",
    "NetPlan",
    "NetconfError",
    "apply_node",
    "check_node",
    "configure",
    "node_script",
    "plan",
    "offload_baseline",
    "reachability",
    "reset",
    "subnet",
]


def ping_script(source: Iface, targets: list[Iface]) -> str:
    """Wait until each target answers once, then measure the idle round trip with three more, 50 ms apart (the
    guest's root may go below ping's 200 ms; the wait is most of a check's time)."""
    lines = []
    for target in targets:
        via = f"-I {shlex.quote(source.name)} {target.address}"
        lines.append(
            f"{_answers(via, target.address)}; "
            f"echo 'target {target.address}'; ping -n -q -c 3 -i 0.05 -W 1 {via} | tail -n 1"
        )
        if source.address6 and target.address6:  # IPv6 too, once it answers (no figure: the RTT is IPv4's)
            lines.append(_answers(f"-6 -I {shlex.quote(source.name)} {target.address6}", target.address6))
    return "\n".join(lines) + "\n"


def _answers(via: str, address: str) -> str:
    """Ping (ping's arguments `via`) until `address` answers once, up to PING_TIMEOUT_S tries; else say it is
    unreachable and end the script."""
    return (
        f"ok=''; for i in $(seq {PING_TIMEOUT_S}); do ping -n -q -c 1 -W 1 {via} >/dev/null && "
        f"{{ ok=1; break; }}; done; [ -n \"$ok\" ] || {{ echo 'unreachable {address}'; exit 1; }}"
    )


def parallel(jobs: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Run one job per node at once. Failures are raised in the caller's thread, all of them, in node order
    (so the message does not depend on which thread lost the race)."""
    results, errors = at_once(jobs)
    failed = list(errors.items())
    unexpected = [(key, exc) for key, exc in failed if not isinstance(exc, NiclabError)]
    if unexpected:  # a bug (or Ctrl-C) is raised as itself, with its traceback, not dressed as a known failure
        key, exc = unexpected[0]
        exc.add_note(f"(in the job of node {key})")
        raise exc
    if len(failed) == 1:
        raise failed[0][1]
    if failed:
        raise NetconfError(
            "\n".join(str(exc) if isinstance(exc, NiclabError) else f"{key}: {exc}" for key, exc in failed)
        ) from failed[0][1]
    return results


SHOWN_PAIRS = 3  # up to this many round trips are listed; more are summarized


def rtt_summary(rtts: Mapping[str, float]) -> str:
    """The idle round trips for the progress line: each of a few pairs, or min / median / max of many with the
    worst pair named (eight nodes on a segment have 56; the cell record keeps every one)."""
    if len(rtts) <= SHOWN_PAIRS:
        return ", ".join(f"{k} {v:.2f} ms" for k, v in sorted(rtts.items()))
    worst = max(sorted(rtts), key=lambda k: rtts[k])
    return (
        f"min {min(rtts.values()):.2f} / median {statistics.median(rtts.values()):.2f} / max {rtts[worst]:.2f} ms "
        f"over {len(rtts)} pairs, the worst {worst}"
    )


def probe(rig: Rig, source: Iface, target: Iface) -> float | None:
    """Ping `target` from `source` until it answers, then measure the idle round trip (None: no figure)."""
    waits = 2 if source.address6 and target.address6 else 1  # IPv4's wait, then IPv6's: each up to PING_TIMEOUT_S
    result = rig.node(source.node).run(ping_script(source, [target]), timeout=waits * PING_TIMEOUT_S + 5, check=False)
    rtt = None
    for line in result.stdout.splitlines():
        if line.startswith("unreachable "):
            v6 = line.split()[-1] == target.address6
            mine, theirs = (source.address6, target.address6) if v6 else (source.address, target.address)
            raise NetconfError(
                f"link {source.link}: {source.node}/{source.name} ({mine}) cannot reach "
                f"{target.node}/{target.name} ({theirs}) over {source.ports[0].model} within {PING_TIMEOUT_S} s"
            )
        if match := RTT_RE.search(line):
            rtt = float(match[1])
    if not result.ok and rtt is None:
        raise NetconfError(
            f"{source.node}: ping from {source.name} to {target.node}/{target.name} failed: "
            f"{(result.stderr or result.stdout).strip()}"
        )
    return rtt


def reachability(rig: Rig, net: NetPlan, seed: int | None = None) -> dict[str, float]:
    """Ping across every cable (one way) and around every segment (a ring, plus a few seeded chords: see
    netconf.pairs), the probes of a round at once. `seed`: the chords' (by default the plan's own)."""
    rtts: dict[str, float] = {}
    for pairs_of_round in pairs.rounds(net, pairs.plan_seed(net) if seed is None else seed):
        jobs: dict[str, Callable[[], float | None]] = {
            f"{s.node}->{t.node} {s.name}": partial(probe, rig, s, t) for s, t in pairs_of_round
        }
        found = parallel(jobs)
        rtts.update((key, rtt) for key in jobs if (rtt := found[key]) is not None)
    return rtts


def _run_script(node: Node, script: str, doing: str, timeout: float) -> None:
    """Run a netconf script in one node's guest; a failure says what it was doing and what the guest printed."""
    result = node.run(script, timeout=timeout, check=False)
    if not result.ok:
        raise NetconfError(f"{node.name}: {doing} failed: {(result.stderr or result.stdout).strip()}")


def apply_node(node: Node, ifaces: list[Iface], macs: dict[tuple[str, int, int], str]) -> None:
    """Run the configuration script in one node's guest (after asking its drivers whether they take its knobs)."""
    wanted = {
        p.ifname: (macs[p.key], list(dict.fromkeys(k for k, _, _ in p.knobs)))
        for i in ifaces
        for p in i.ports
        if p.knobs
    }
    unchanged: frozenset[tuple[str, str, str]] = frozenset()
    if wanted:
        shown = verify.read_knobs(node.run(knobs_script(wanted), timeout=30, check=False).stdout)
        if problems := verify.knob_problems(node.name, ifaces, shown, before=True):
            raise NetconfError(f"{node.name}: a driver knob the driver does not take:\n  " + "\n  ".join(problems))
        unchanged = verify.knobs_at_value(ifaces, shown)
    doing = f"configuring {', '.join(i.name for i in ifaces)}"
    _run_script(node, node_script(ifaces, macs, unchanged), doing, CARRIER_TIMEOUT_S + 60)


def check_node(
    node: Node,
    ifaces: list[Iface],
    drivers: Mapping[tuple[str, int, int], str] | None = None,
    started: Mapping[str, dict[str, bool]] | None = None,
    proven: Collection[tuple[str, int, int]] = (),
) -> dict:
    """Read one node's network back and compare it with the plan; returns the observed state.
    `started`: the offloads its ports started with, where an earlier cell on this boot may have changed them.
    `proven`: the ports whose driver netconf.modules checked (by the module that owns it, not its name)."""
    text = node.run(verify.state_script(ifaces), timeout=60).stdout
    state, shown = verify.parse_state(text), verify.read_knobs(text)
    problems = verify.mismatches(node.name, ifaces, state, drivers, started, proven)
    problems += verify.knob_problems(node.name, ifaces, shown, before=False)
    if problems:
        raise NetconfError(f"{node.name}: the network is not what the scenario asks:\n  " + "\n  ".join(problems))
    observed = verify.summary(state)
    for section, values in verify.knob_readback(ifaces, shown).items():
        observed.setdefault(section, {}).update(values)
    return observed


def offload_baseline(rig: Rig, net: NetPlan) -> dict[str, dict[str, dict[str, bool]]]:
    """node -> port -> feature -> on (each the driver lets change), for the ports the plan changes offloads on,
    read before it does."""
    wanted = {node: {p.ifname: rig.mac(p) for i in net.on(node) if i.offloads for p in i.ports} for node in rig.nodes}

    def read(node: str) -> dict[str, dict[str, bool]]:
        text = rig.node(node).run(features_script(wanted[node]), timeout=30).stdout
        return {
            name.removeprefix("port "): offloads.changeable("\n".join(lines))
            for name, lines in sections(text)[1].items()
        }

    return parallel({node: partial(read, node) for node in wanted if wanted[node]})


def reset(rig: Rig, previous: NetPlan, baseline: Mapping[str, dict[str, dict[str, bool]]]) -> None:
    """Undo what `previous` set in every guest (bonds, netem, addresses, changed offloads), for the next plan."""

    def reset_node(node: str) -> None:
        script = reset_script(previous.on(node), baseline.get(node, {}))
        _run_script(rig.node(node), script, "undoing the previous cell's network", 60)

    parallel({node: partial(reset_node, node) for node in rig.nodes if previous.on(node)})


def configure(
    rig: Rig, net: NetPlan, progress: Progress, baseline: Mapping[str, dict[str, dict[str, bool]]] | None = None
) -> NetworkFacts:
    """Configure every node (in parallel), check the result, ping across every wire, and check each guest's
    clock ran at the host's rate meanwhile (netconf.clock). Returns the network's facts: the interfaces as asked
    and as the guests reported them, the idle round trips, the seed that chose the segments' extra pairs
    (netconf.pairs), and the nodes whose clock was settled.

    `baseline` (node -> port -> feature -> on): the offloads the driver started with, on a rig earlier
    cells used; a port that differs in a feature this plan does not name fails the check."""
    started = time.monotonic()

    def configure_node(node: str) -> dict:
        ifaces = net.on(node)
        if not ifaces:
            return {}
        asked = {p: (rig.mac(p), rig.modules[p.key]) for i in ifaces for p in i.ports if p.key in rig.modules}
        proven: dict[str, dict[str, str]] = {}
        if asked:  # before anything is set: a card no driver took has no interface to configure
            text = rig.node(node).run(modules.proof_script(asked), timeout=30).stdout
            proven, problems = modules.check(node, asked, text)
            if problems:
                raise NetconfError(
                    f"{node}: a card is not on the driver the scenario asks:\n  " + "\n  ".join(problems)
                )
        apply_node(rig.node(node), ifaces, {port.key: rig.mac(port) for iface in ifaces for port in iface.ports})
        observed = check_node(rig.node(node), ifaces, rig.drivers, (baseline or {}).get(node), {p.key for p in asked})
        for section, values in proven.items():
            observed.setdefault(section, {})["driver_proof"] = values
        if wanted := params.asked(rig.topology.node(node).cmdline):
            text = rig.node(node).run(params.readback_script(wanted), timeout=30).stdout
            observed["module_params"], problems = params.parse_readback(text, wanted)
            if problems:
                raise NetconfError(f"{node}: the driver is not what the scenario asks:\n  " + "\n  ".join(problems))
        return observed

    def clocks(names: Collection[str] = tuple(rig.nodes)) -> dict[str, clock.Reading | str]:
        return parallel({name: partial(clock.read, rig.node(name)) for name in names})

    before = clocks()
    seed = pairs.plan_seed(net)
    try:
        states = parallel({node: partial(configure_node, node) for node in rig.nodes})
        configured = time.monotonic() - started
        rtts = reachability(rig, net, seed)
    except NetconfError as exc:  # a guest whose clock runs fast gives up its waits early: then that is why
        try:
            wrong = clock.problems(before, clocks())
        except NiclabError:
            raise exc from None
        if wrong:
            raise NetconfError("\n".join([*wrong, f"(and so: {exc})"])) from exc
        raise
    settled: dict[str, str] = {}
    if ran_off := clock.judge(before, clocks()):
        if still := clock.settle(clocks, ran_off):
            raise NetconfError("\n".join(still.values()))
        settled = ran_off
        progress(
            f"{', '.join(settled)}: the guest's clock ran off the host's while the network was set up, and keeps "
            "the host's time now (its kernel left the TSC): the benchmarks go on"
        )
    progress(
        f"network up and checked in {time.monotonic() - started:.1f} s ({len(net.ifaces)} interfaces; "
        f"idle RTT {rtt_summary(rtts)})"
    )
    idle_rtt_ms: dict[str, float | None] = dict(rtts)  # an older record may hold a pair without a figure
    return NetworkFacts(
        configure_s=round(configured, 2),
        idle_rtt_ms=idle_rtt_ms,
        ping_seed=seed,
        interfaces={
            f"{i.node}/{i.name}": PlannedInterface(
                model=i.ports[0].model,
                address=f"{i.address}/{PREFIX}",
                address6=f"{i.address6}/{PREFIX6}" if i.address6 else None,
                mtu=i.mtu,
                link=i.link,
                lane=i.lane,
                ports=[p.ifname for p in i.ports],
                bond=i.bond.model_dump(exclude_none=True) if i.bond else None,
                netem=i.netem.describe() if i.netem else None,
                offloads=i.offloads or None,
            )
            for i in net.ifaces
        },
        observed=states,
        clock_settled=settled or None,
    )
