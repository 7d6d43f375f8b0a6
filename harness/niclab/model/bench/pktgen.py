"""pktgen (the kernel's packet generator): packets per second at a frame size, sent and received.

The client's kernel sends UDP frames of one size as fast as its driver takes them (`/proc/net/pktgen`, one
thread, `clone_skb 0`: a fresh buffer per frame, which every driver takes) for `seconds`; the server's
interface counters (`rx_packets`, `rx_bytes`) say what arrived, so a card or driver that drops shows it.
`frame_size` is the Ethernet frame on the wire with its 4-byte FCS, as RFC 2544 counts it (64 … MTU + 18;
82 over IPv6, whose headers leave pktgen no room for its own below that): pktgen is given 4 bytes less, and a
run whose server counted frames of another size fails. Frames go straight to the driver (`start_xmit`), or
through the client's qdisc (`queue_xmit`) when its end of the link has netem, so the netem applies. `pps`
caps the rate (pktgen's `ratep`). Under TCG the rate is the emulated CPU's, not the card's
(docs/benchmarks.md, "Packet rate").
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import ClassVar, Protocol

from pydantic import Field, model_validator

from niclab.base.errors import NiclabError
from niclab.base.problems import Problem
from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo
from niclab.model.bench.declare import GuestNeeds, KernelModule, Row, Shows

FCS = 4  # bytes the card adds to what pktgen is given
ETHERNET = 14 + FCS  # a frame's header and FCS around the link's MTU
# the smallest IPv6 frame pktgen sends as asked: Ethernet 14, IPv6 40, UDP 8, pktgen's own header 16, FCS 4
# (below, fill_packet_ipv6 enlarges the payload to hold its header: a 64-byte cell would measure 82)
MIN_FRAME_V6 = 14 + 40 + 8 + 16 + FCS
PROC = "/proc/net/pktgen"
RESULT = re.compile(
    r"Result: OK: ([0-9]{1,15})\(c[0-9]{1,15}\+d[0-9]{1,15}\) usec, ([0-9]{1,15}) \(([0-9]{1,6})byte,[0-9]{1,3}frags\)"
    r"\s+([0-9]{1,15})pps ([0-9]{1,15})Mb/sec \(([0-9]{1,18})bps\) errors: ([0-9]{1,15})"
)
COUNTERS = re.compile(r"^(rx_packets|rx_bytes|rx_dropped|rx_missed_errors)=([0-9]{1,20})$", re.MULTILINE)
MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
XMIT_MARK = "xmit_mode="  # the set-up says which way the frames go
QUEUED = re.compile(r"^queued=([0-9]{1,12})$", re.MULTILINE)
SETTLE_S = 0.5  # after the stop, for the last frames to reach the server's counters
DRAIN_S = 10.0  # the longest the client's netem is waited for to let go of the frames it holds after the stop
SIZE_SLACK = 2.0  # bytes by which the server's mean frame may differ from the size asked (a few other frames),
SIZE_SLACK_PCT = 1.0  # or this much of it, if more (rx_packets and rx_bytes are read apart: frames between)
SIZE_CHECKED_FROM = 100  # frames received, below which the mean size says too little to be checked


class Link(Protocol):
    """What pktgen's check reads of the scenario's link (niclab.model.scenario.model.Link)."""

    @property
    def mtu(self) -> int: ...


class PktgenOptions(BenchOptions):
    frame_size: int = Field(
        64, ge=64, le=9018, description="bytes of each Ethernet frame on the wire, FCS included (RFC 2544: 64 … 1518)"
    )
    seconds: float = Field(5.0, ge=1, le=3600, description="how long it sends")
    pps: int | None = Field(
        None, ge=1, le=100_000_000, description="frames per second at most (as fast as the driver takes them if absent)"
    )

    @model_validator(mode="after")
    def _through_a_card(self) -> PktgenOptions:
        if self.peer == "self":
            raise ValueError("pktgen sends through the link's card: it takes no peer: self")
        if self.family == 6 and self.frame_size < MIN_FRAME_V6:
            raise ValueError(
                f"frame_size {self.frame_size} over IPv6: pktgen's smallest IPv6 frame is {MIN_FRAME_V6} bytes "
                f"(its headers and its own 16); give frame_size >= {MIN_FRAME_V6}, or exclude the cell"
            )
        return self


def setup_script(ifname: str, options: PktgenOptions, dst: str, dst_mac: str, family: int) -> str:
    """Load pktgen and give its first thread the client's interface, sending to the server until stopped."""
    device = f"{PROC}/{ifname}"
    settings = [
        "count 0",  # until stopped
        "clone_skb 0",
        f"pkt_size {options.frame_size - FCS}",
        "delay 0",
        *([f"ratep {options.pps}"] if options.pps else []),
        f"{'dst6' if family == 6 else 'dst'} {dst}",
        f"dst_mac {dst_mac}",
    ]
    lines = [
        "set -e",
        "modprobe pktgen",
        f"echo reset > {PROC}/pgctrl",
        f"echo rem_device_all > {PROC}/kpktgend_0",
        f"echo 'add_device {ifname}' > {PROC}/kpktgend_0",
    ]
    lines += [f"echo '{setting}' > {device}" for setting in settings]
    # netem on the client's end (netconf put it there): through the qdisc, so its delay, loss and rate apply
    lines.append(
        f"if tc qdisc show dev {ifname} | grep -q ' netem '; then echo 'xmit_mode queue_xmit' > {device}; "
        f"echo {XMIT_MARK}queue_xmit; else echo {XMIT_MARK}start_xmit; fi"
    )
    lines.append(f"grep -q 'Result: OK' {device} || {{ grep Result: {device} >&2; exit 1; }}")
    return "\n".join(lines) + "\n"


def counters_script(ifname: str) -> str:
    stats = f"/sys/class/net/{ifname}/statistics"
    return "".join(
        f"echo {name}=$(cat {stats}/{name})\n" for name in ("rx_packets", "rx_bytes", "rx_dropped", "rx_missed_errors")
    )


def queued_script(ifname: str) -> str:
    """The frames the client's root qdisc still holds (netem's delay or rate keeps them after the stop)."""
    return f"tc -s qdisc show dev {ifname} | sed -n 's/^ backlog [0-9]*b \\([0-9]*\\)p.*/queued=\\1/p' | head -n 1\n"


def drain_script(ifname: str) -> str:
    """Wait, up to DRAIN_S, until the client's qdisc holds no frame; then say how many it still holds."""
    read = queued_script(ifname).strip()
    ticks = int(DRAIN_S / 0.1)
    return f'for i in $(seq {ticks}); do q=$({read}); [ "$q" = queued=0 ] && break; sleep 0.1; done\n{read}\n'


def parse_queued(text: str) -> int:
    found = QUEUED.search(text)
    return int(found[1]) if found else 0


def parse_counters(text: str) -> dict[str, int]:
    found = dict(COUNTERS.findall(text))
    if "rx_packets" not in found or "rx_bytes" not in found:
        raise BenchmarkError(f"pktgen: the server's counters are not readable: {said(text)}")
    return {name: int(value) for name, value in found.items()}


def parse(
    result: str,
    before: dict[str, int],
    after: dict[str, int],
    frame_size: int,
    xmit_mode: str = "start_xmit",
    queued: tuple[int, int] = (0, 0),
) -> list[Measurement]:
    """pktgen's Result line on the client, and the server's counters before and after. Both rates in Mbit/s
    are of whole frames (`frame_size`, FCS included), whether or not a driver counts the FCS in rx_bytes.
    `xmit_mode`: start_xmit (to the driver) or queue_xmit (through the qdisc: the client's netem). `queued`:
    the frames the client's qdisc held at the stop and when the wait for it to empty ended, before the
    server's counters were read. Those that left it in between arrived after the sending: rx_pps counts what
    arrived while it sent; those still held are late, not lost."""
    found = RESULT.search(result)
    if found is None:
        raise BenchmarkError(f"pktgen printed no result: {said(result)}")
    usec, sent, pps, size, errors = int(found[1]), int(found[2]), int(found[4]), int(found[3]), int(found[7])
    if usec <= 0 or sent <= 0:
        raise BenchmarkError(f"pktgen sent {sent} frames in {usec} us: {said(found[0])}")
    if size != frame_size - FCS:
        raise BenchmarkError(f"pktgen sent frames of {size + FCS} bytes, not the {frame_size} asked: {said(found[0])}")
    received = after["rx_packets"] - before["rx_packets"]
    received_bytes = after["rx_bytes"] - before["rx_bytes"]
    if received < 0 or received_bytes < 0:
        raise BenchmarkError("pktgen: the server's counters went back (its interface was reset meanwhile)")
    # the kernel may send larger frames than pkt_size and still print it in the Result line (an IPv6 frame
    # with no room for pktgen's header): what arrived says the size that was measured
    if received >= SIZE_CHECKED_FROM:
        mean = received_bytes / received
        slack = max(SIZE_SLACK, frame_size * SIZE_SLACK_PCT / 100)
        if all(abs(mean - size) > slack for size in (frame_size - FCS, frame_size)):
            raise BenchmarkError(
                f"the server counted {mean:.1f} bytes per frame, not the {frame_size} asked "
                f"({frame_size - FCS} without the FCS): the frames were sent at another size"
            )
    seconds = usec / 1e6
    at_stop, at_end = (max(0, n) for n in queued)
    late = min(received, max(0, at_stop - at_end))  # left the client's queue after the stop
    dropped = sum(after.get(k, 0) - before.get(k, 0) for k in ("rx_dropped", "rx_missed_errors"))
    extra = {
        "sent": sent,
        "received": received,
        "rx_bytes": received_bytes,  # as the server's driver counts them: with the FCS or without
        "frame_size": frame_size,
        "seconds": round(seconds, 3),
        "xmit_mode": xmit_mode,
        "queued_at_stop": at_stop,
        "queued_at_end": at_end,
    }
    bits = frame_size * 8
    return [
        Measurement("pktgen", None, "tx_pps", float(pps), "/s", extra),
        Measurement("pktgen", None, "tx_mbps", sent * bits / seconds / 1e6, "Mbit/s", extra, headline=False),
        Measurement("pktgen", None, "rx_pps", (received - late) / seconds, "/s", extra),
        Measurement(
            "pktgen", None, "rx_mbps", (received - late) * bits / seconds / 1e6, "Mbit/s", extra, headline=False
        ),
        Measurement("pktgen", None, "loss_pct", max(0.0, 100.0 * (sent - received - at_end) / sent), "%", extra),
        Measurement("pktgen", None, "rx_dropped", float(max(0, dropped)), "frames", extra, headline=False),
        Measurement("pktgen", None, "tx_errors", float(errors), "frames", extra, headline=False),
    ]


class Pktgen:
    name: ClassVar[str] = "pktgen"
    Options: ClassVar[type[PktgenOptions]] = PktgenOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(
        modules=(KernelModule("pktgen", "NET_PKTGEN", "the pktgen benchmark's sender", ("NET", "PROC_FS")),)
    )
    shows: ClassVar[Shows] = Shows(rows=(Row("pktgen.rx_pps", "pktgen"),))

    def metrics(self) -> list[MetricInfo]:
        return [
            MetricInfo("pktgen.tx_pps", "/s", "frames the client's driver took per second", "higher", pace="rate"),
            MetricInfo("pktgen.tx_mbps", "Mbit/s", "frames sent, as bits (FCS included)", "higher", pace="rate"),
            MetricInfo("pktgen.rx_pps", "/s", "frames the server's interface counted per second", "higher", "rate"),
            MetricInfo(
                "pktgen.rx_mbps", "Mbit/s", "frames the server counted, as bits (FCS included)", "higher", "rate"
            ),
            MetricInfo("pktgen.loss_pct", "%", "frames sent that the server's interface did not count", "lower"),
            MetricInfo("pktgen.rx_dropped", "frames", "the server's rx_dropped and rx_missed_errors", "lower"),
            MetricInfo("pktgen.tx_errors", "frames", "frames pktgen could not hand the driver", "lower"),
        ]

    def link_problems(self, options: PktgenOptions, link: Link, client: str) -> list[Problem]:
        """A frame larger than the link carries."""
        problems = []
        if options.frame_size > link.mtu + ETHERNET:
            problems.append(
                Problem(
                    ("frame_size",),
                    f"frame_size {options.frame_size} is more than link {options.link} carries "
                    f"(its MTU {link.mtu} + {ETHERNET}: {link.mtu + ETHERNET})",
                    f"give frame_size <= {link.mtu + ETHERNET}, or the link mtu: {options.frame_size - ETHERNET}",
                )
            )
        return problems

    def describe(self, options: PktgenOptions) -> str:
        return f"pktgen {options.frame_size}B" + (f" at {options.pps} pps" if options.pps else "")

    def estimate_seconds(self, options: PktgenOptions) -> float:
        return options.seconds + 3

    def run(self, ctx: BenchContext, options: PktgenOptions) -> list[Measurement]:
        ends = ctx.ends
        client, server = ends.client, ends.server
        mac = server.run(f"cat /sys/class/net/{ends.server_ifname}/address", timeout=30).stdout.strip()
        if not MAC.fullmatch(mac):  # the server's answer goes into the client's set-up script
            raise BenchmarkError(f"pktgen: {server.name} gave no MAC address for {ends.server_ifname}: {said(mac)}")
        setup = setup_script(ends.client_ifname, options, ends.server_address, mac, ends.family)
        done = client.run(setup, timeout=60, check=False)
        if not done.ok:
            raise BenchmarkError(f"pktgen could not be set up on {client.name}: {said(done.stderr or done.stdout)}")
        before = parse_counters(server.run(counters_script(ends.server_ifname), timeout=30).stdout)
        sending = client.spawn(f"echo start > {PROC}/pgctrl")  # returns once stopped
        xmit_mode = "queue_xmit" if f"{XMIT_MARK}queue_xmit" in done.stdout else "start_xmit"
        queued = (0, 0)
        try:
            time.sleep(options.seconds)
            if xmit_mode == "queue_xmit":  # netem holds frames past the stop: how many then, and until it let them go
                stopped = client.run(f"echo stop > {PROC}/pgctrl\n{queued_script(ends.client_ifname)}", timeout=30)
                sending.wait(timeout=30)
                drained = client.run(drain_script(ends.client_ifname), timeout=DRAIN_S + 30, check=False)
                queued = (parse_queued(stopped.stdout), parse_queued(drained.stdout))
            else:
                client.run(f"echo stop > {PROC}/pgctrl", timeout=30, check=False)
                sending.wait(timeout=30)
            time.sleep(SETTLE_S)
            after = parse_counters(server.run(counters_script(ends.server_ifname), timeout=30).stdout)
            result = client.run(f"cat {PROC}/{ends.client_ifname}", timeout=30).stdout
        finally:  # whatever failed, the sender stops: the next benchmark has the link to itself
            with contextlib.suppress(NiclabError):  # a guest that died: the cause is raised, not this
                client.run(f"echo stop > {PROC}/pgctrl; echo reset > {PROC}/pgctrl", timeout=30, check=False)
        path = ctx.save_raw(
            f"pktgen-{options.frame_size}",
            f"$ {setup}{done.stdout}{result}\n# server counters before: {before}\n# after: {after}\n",
        )
        try:
            return parse(result, before, after, options.frame_size, xmit_mode, queued)
        except BenchmarkError as exc:
            raise type(exc)(f"{exc} (raw output: {path})") from None


PLUGIN = Pktgen()
