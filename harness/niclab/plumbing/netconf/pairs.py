"""Which port pings which when the network is checked: linear in the nodes of a segment, not quadratic.

A cable is pinged one way; a segment around a ring in `between` order, plus a few chords a seeded generator
picks (the seed from the plan by default), in rounds in which each port sends once, so a round's probes run
at once (docs/architecture.md, "The network check is linear in a segment's nodes").
"""

from __future__ import annotations

import random
import zlib

from niclab.plumbing.netconf.plan import Iface, NetPlan

CHORDS = 3  # the most extra pairs a segment gets besides its ring

Pair = tuple[Iface, Iface]


def plan_seed(net: NetPlan) -> int:
    """The default seed: a checksum of the plan's interfaces, the same for every run of a scenario."""
    text = "\n".join(f"{i.node} {i.name} {i.address}" for i in net.ifaces)
    return zlib.crc32(text.encode())


def segment_pairs(group: list[Iface], rng: random.Random) -> tuple[list[Pair], list[Pair]]:
    """A segment's ring (every port sends once and answers once) and its chords (each from another sender)."""
    if len(group) < 2:
        return [], []
    if len(group) == 2:
        return [(group[0], group[1])], []
    n = len(group)
    ring = [(group[i], group[(i + 1) % n]) for i in range(n)]
    chords = []
    for i in sorted(rng.sample(range(n), min(n, CHORDS))):
        others = [group[j] for j in range(n) if j not in (i, (i + 1) % n)]
        chords.append((group[i], rng.choice(others)))
    return ring, chords


def rounds(net: NetPlan, seed: int) -> list[list[Pair]]:
    """Every segment's pairs in rounds: the rings first, then the chords; a port sends once per round."""
    ring: list[Pair] = []
    chords: list[Pair] = []
    for (link, lane), group in net.segments().items():
        more_ring, more_chords = segment_pairs(group, random.Random(f"{seed}/{link}/{lane}"))
        ring += more_ring
        chords += more_chords
    return [r for r in (ring, chords) if r]
