#!/usr/bin/env python3
"""Print how faithful the emulation is: what the fidelity scenario asks against what is measured.

Boots tests/integration/fidelity.yaml once (three nodes, seven links) and prints,
for each impairment, the asked value, the measured one and their ratio:
netem delay (ping RTT over the unimpaired baseline; each of four TCP_RR flows'
median), netem loss (iperf3 UDP; pktgen at 2000 frames/s), netem rate (netperf
TCP; pktgen at 1518 bytes against a 10 Mbit/s cap), pktgen at a fixed 2000
frames/s over IPv4 and IPv6, a 3-port balance-rr bond (packets per port), and
a switched segment (ping loss between every pair).

    .venv/bin/python bench/fidelity.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import REPO
from niclab.model.scenario import load_scenario
from niclab.plumbing.backends import get_backend
from niclab.run.session import Session

SCENARIO = REPO / "tests" / "integration" / "fidelity.yaml"


def metric(found, name):
    return next(m.value for m in found if m.metric == name)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    cell = load_scenario(SCENARIO).cells[0]
    with (
        tempfile.TemporaryDirectory(prefix="niclab-fidelity-") as work,
        Session(cell, get_backend("qemu"), Path(work), lambda m: print(f"  {m}", file=sys.stderr)) as s,
    ):
        base = metric(s.bench("ping", link=0, count=30, interval=0.1), "rtt_avg_ms")
        delayed = metric(s.bench("ping", link=1, count=30, interval=0.1), "rtt_avg_ms")
        print(
            f"delay 10ms each end   expected RTT {20 + base:6.2f} ms   measured {delayed:6.2f} ms   "
            f"ratio {delayed / (20 + base):.3f}   (unimpaired {base:.2f} ms)"
        )
        loss = metric(s.bench("iperf3", link=2, protocol="udp", bitrate="10M", length=1000, seconds=10), "loss_pct")
        print(f"loss 5%               expected  5.00 %      measured {loss:6.2f} %    ratio {loss / 5:.3f}")
        rate = metric(s.bench("netperf", test="TCP_STREAM", link=3, seconds=10), "throughput_mbps")
        print(f"rate 50mbit           expected 50.0 Mbit/s  measured {rate:6.1f} Mbit/s  ratio {rate / 50:.3f}")
        ports = [p.ifname for p in s.iface("a", link=4).ports]
        read = "for p in " + " ".join(ports) + "; do cat /sys/class/net/$p/statistics/tx_packets; done"
        before = [int(n) for n in s.node("a").run(read).stdout.split()]
        bonded = metric(s.bench("netperf", test="TCP_STREAM", link=4, seconds=5), "throughput_mbps")
        sent = [b - a for a, b in zip(before, [int(n) for n in s.node("a").run(read).stdout.split()], strict=True)]
        shares = ", ".join(f"{p} {n / sum(sent):.1%}" for p, n in zip(ports, sent, strict=True))
        print(f"bond balance-rr x3    TCP {bonded:.1f} Mbit/s; packets per port: {shares}")
        lost = {
            f"{a}->{b}": metric(s.bench("ping", link=5, count=5, interval=0.1, **{"from": a, "to": b}), "loss_pct")
            for a in "abc"
            for b in "abc"
            if a != b
        }
        print("segment of 3 nodes    ping loss " + ", ".join(f"{k} {v:g}%" for k, v in lost.items()))
        flows = s.bench("netperf", test="TCP_RR", link=1, seconds=3, flows=4)
        medians = next(m.extra["per_flow"] for m in flows if m.metric == "latency_p50_us")
        print(
            f"delay, 4 TCP_RR flows expected p50 >= 20 ms  measured {', '.join(f'{v / 1000:.1f}' for v in medians)} ms"
            f"   fairness {metric(flows, 'fairness'):.3f}"
        )
        frames = {"frame_size": 1518, "seconds": 3}
        v4 = metric(s.bench("pktgen", link=0, pps=2000, **frames), "rx_pps")
        v6 = metric(s.bench("pktgen", link=0, pps=2000, family=6, **frames), "rx_pps")
        print(f"pktgen pps 2000       expected 2000 /s      measured {v4:.0f} /s (IPv4), {v6:.0f} /s (IPv6)")
        lossy = metric(s.bench("pktgen", link=2, pps=2000, **frames), "loss_pct")
        print(f"pktgen, loss 5%       expected  5.00 %      measured {lossy:6.2f} %    ratio {lossy / 5:.3f}")
        capped = s.bench("pktgen", link=6, **frames)
        cap = 10e6 / 8 / 1514
        got = metric(capped, "rx_pps")
        print(
            f"pktgen, rate 10mbit   expected {cap:.0f} /s       measured {got:.0f} /s     ratio {got / cap:.3f}"
            f"   (loss {metric(capped, 'loss_pct'):.2f} %)"
        )


if __name__ == "__main__":
    main()
