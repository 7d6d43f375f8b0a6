"""The report's plots, each built from run data; a plot with nothing to show is None.

NetPIPE curves come from the `curve` a netpipe measurement carries; with
repeats, the run whose peak is the median stands for its cell.
"""

from __future__ import annotations

import math

from niclab.run.records import SummaryRecord
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.figures import COLORS, Plot, bytes_axis, grouped_bars, new_figure, to_plot

NFS_PATTERNS = (
    ("seqread", "nfs.seqread.bandwidth_mb_s"),
    ("randread", "nfs.randread.bandwidth_mb_s"),
    ("randrw read", "nfs.randrw.read_bandwidth_mb_s"),
    ("randrw write", "nfs.randrw.write_bandwidth_mb_s"),
)


def half_width(summary: SummaryRecord | None) -> float | None:
    """Half the width of the summary's interval, for an error bar (None: no interval, or one too wide to draw)."""
    if not summary or summary.n < 2 or summary.ci_low is None or summary.ci_high is None:
        return None
    half = (summary.ci_high - summary.ci_low) / 2
    return half if math.isfinite(half) else None


def netpipe_curve(cell: CellData) -> list[list[float]] | None:
    """The curve of the cell's median-peak NetPIPE run: [[bytes, Mbit/s, half RTT us], ...]."""
    runs = [m for m in cell.measurements if m.name == "netpipe.peak_throughput_mbps" and m.extra.curve]
    if not runs:
        return None
    peaks = sorted(runs, key=lambda m: m.value)
    return peaks[(len(peaks) - 1) // 2].extra.curve


def _mtu_of(cell: CellData) -> int | None:
    value = cell.params.get("mtu")
    try:
        return int(value) if isinstance(value, int | float | str) else None
    except (ValueError, OverflowError):  # not a number, or inf
        return None


def netpipe_plots(run: RunData) -> list[Plot]:
    curves = {cell.id: (cell, c) for cell in run.cells if (c := netpipe_curve(cell))}
    if not curves:
        return []
    plots = []
    by_card: dict[str, list[tuple[CellData, list]]] = {}
    for cell, curve in curves.values():
        by_card.setdefault(cell.card, []).append((cell, curve))
    # one line per card (at its smallest MTU when the run sweeps MTUs)
    figure, ax = new_figure()
    latency_figure, latency_ax = new_figure()
    for i, (card, cells) in enumerate(by_card.items()):
        cell, curve = min(cells, key=lambda item: _mtu_of(item[0]) or 0)
        label = card + (f" (MTU {_mtu_of(cell)})" if len(cells) > 1 else "")
        color = COLORS[i % len(COLORS)]
        ax.plot([p[0] for p in curve], [p[1] for p in curve], label=label, color=color, linewidth=1.4)
        latency_ax.plot([p[0] for p in curve], [p[2] for p in curve], label=label, color=color, linewidth=1.4)
    for axis, ylabel in ((ax, "throughput (Mbit/s)"), (latency_ax, "one-way time (µs)")):
        bytes_axis(axis)
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        axis.legend()
    latency_ax.set_yscale("log")
    plots.append(
        to_plot(
            figure,
            "NetPIPE: throughput against message size",
            f"{run.scenario}: one line per card; NPtcp's sweep, Mbit/s = 10^6 bit/s.",
        )
    )
    plots.append(
        to_plot(
            latency_figure,
            "NetPIPE: time against message size",
            f"{run.scenario}: half the round trip of each message size (log-log).",
        )
    )
    # one plot per card with a line per MTU
    for card, cells in by_card.items():
        if len(cells) < 2:
            continue
        figure, ax = new_figure(6.5, 3.8)
        for i, (cell, curve) in enumerate(sorted(cells, key=lambda item: _mtu_of(item[0]) or 0)):
            ax.plot(
                [p[0] for p in curve],
                [p[1] for p in curve],
                label=f"MTU {cell.params.get('mtu', cell.id)}",
                color=COLORS[i % len(COLORS)],
                linewidth=1.3,
            )
        bytes_axis(ax)
        ax.set_ylabel("throughput (Mbit/s)")
        ax.grid(alpha=0.3)
        ax.legend()
        plots.append(to_plot(figure, f"NetPIPE on {card}, per MTU", f"{run.scenario}: one line per MTU."))
    return plots


def _bars(
    run: RunData, title: str, caption: str, unit: str, series: dict[str, str], link: int | None = None
) -> Plot | None:
    """Bars per cell for the named summaries (series label -> metric name)."""
    cells = [c for c in run.cells if any(c.summary(name, link) for name in series.values())]
    if not cells:
        return None
    figure, ax = new_figure()
    data = {
        label: [(s.mean if (s := cell.summary(name, link)) else None, half_width(s)) for cell in cells]
        for label, name in series.items()
    }
    grouped_bars(ax, [c.card if run.axes == ["nic"] else c.id for c in cells], data, unit)
    return to_plot(figure, title, caption)


def throughput_bars(run: RunData) -> list[Plot]:
    plots = [
        _bars(
            run,
            "TCP throughput per card",
            f"{run.scenario}: netperf TCP_STREAM, mean with its confidence interval.",
            "Mbit/s",
            {
                "TCP_STREAM": "netperf.TCP_STREAM.throughput_mbps",
                "NetPIPE peak": "netpipe.peak_throughput_mbps",
                "lmbench bw_tcp": "lmbench.bw_tcp.throughput_mbps",
            },
            link=0,
        ),
        _bars(
            run,
            "UDP: sent against received",
            f"{run.scenario}: netperf UDP_STREAM; the gap is what the receiver lost.",
            "Mbit/s",
            {"sent": "netperf.UDP_STREAM.send_throughput_mbps", "received": "netperf.UDP_STREAM.recv_throughput_mbps"},
            link=0,
        ),
        _bars(
            run,
            "Latency per card",
            f"{run.scenario}: round trips (netperf TCP_RR mean, lmbench medians) and NetPIPE's one-way time.",
            "µs",
            {
                "TCP_RR mean": "netperf.TCP_RR.latency_mean_us",
                "lmbench lat_tcp": "lmbench.lat_tcp.latency_us",
                "lmbench lat_udp": "lmbench.lat_udp.latency_us",
                "NetPIPE": "netpipe.latency_us",
            },
            link=0,
        ),
    ]
    for test in ("TCP_STREAM", "UDP_STREAM", "TCP_RR"):
        plots.append(
            _bars(
                run,
                f"CPU utilization, netperf {test}",
                f"{run.scenario}: netperf -c -C.",
                "%",
                {"local": f"netperf.{test}.local_cpu_pct", "remote": f"netperf.{test}.remote_cpu_pct"},
            )
        )
        unit, suffix = ("µs per transaction", "tr") if test.endswith("RR") else ("µs per KB", "kb")
        plots.append(
            _bars(
                run,
                f"Service demand, netperf {test}",
                f"{run.scenario}: CPU time per unit of work.",
                unit,
                {
                    "local": f"netperf.{test}.local_sd_us_per_{suffix}",
                    "remote": f"netperf.{test}.remote_sd_us_per_{suffix}",
                },
            )
        )
    return [p for p in plots if p]


def mtu_lines(run: RunData) -> Plot | None:
    """Peak throughput against MTU, one line per card (runs with an mtu axis)."""
    points: dict[str, list[tuple[int, float, float | None]]] = {}
    for cell in run.cells:
        mtu = _mtu_of(cell)
        s = cell.summary("netperf.TCP_STREAM.throughput_mbps") or cell.summary("netpipe.peak_throughput_mbps")
        if mtu is not None and s:
            points.setdefault(cell.card, []).append((mtu, s.mean, half_width(s)))
    if not points or max(len(v) for v in points.values()) < 2:
        return None
    figure, ax = new_figure()
    for i, (card, values) in enumerate(points.items()):
        values.sort(key=lambda v: v[0])
        ax.errorbar(
            [v[0] for v in values],
            [v[1] for v in values],
            yerr=[v[2] or 0 for v in values],
            marker="o",
            capsize=3,
            label=card,
            color=COLORS[i % len(COLORS)],
        )
    ax.set_xlabel("MTU (bytes)")
    ax.set_ylabel("TCP throughput (Mbit/s)")
    ax.grid(alpha=0.3)
    ax.legend()
    return to_plot(figure, "Throughput against MTU", f"{run.scenario}: netperf TCP_STREAM per card and MTU.")


def bonding_plot(run: RunData) -> Plot | None:
    """TCP throughput against the number of bonded ports, beside N times the single port."""
    series: dict[str, dict[int, float]] = {}
    for cell in run.cells:
        for s in cell.summaries:
            if s.name != "netperf.TCP_STREAM.throughput_mbps":
                continue
            nic = cell.nic_of(s.runs[0], s.client) if s.runs else None
            series.setdefault(cell.card, {})[(nic.ports if nic is not None else None) or 1] = s.mean
    series = {card: values for card, values in series.items() if len(values) > 1 and 1 in values}
    if not series:
        return None
    figure, ax = new_figure()
    for i, (card, values) in enumerate(series.items()):
        ports = sorted(values)
        color = COLORS[i % len(COLORS)]
        ax.plot(ports, [values[p] for p in ports], marker="o", color=color, label=f"{card} measured")
        ax.plot(
            ports, [values[1] * p for p in ports], linestyle="--", color=color, alpha=0.6, label=f"{card}: N × one port"
        )
    ax.set_xlabel("bonded ports")
    ax.set_ylabel("TCP throughput (Mbit/s)")
    ax.set_xticks(sorted({p for v in series.values() for p in v}))
    ax.grid(alpha=0.3)
    ax.legend()
    return to_plot(
        figure,
        "Bonding: throughput against ports",
        f"{run.scenario}: netperf TCP_STREAM over one card "
        "and over the bond, against the ideal of N times the single card.",
    )


def nfs_plot(run: RunData) -> Plot | None:
    cells = [c for c in run.cells if any(c.summary(name) for _, name in NFS_PATTERNS)]
    if not cells:
        return None
    figure, ax = new_figure()
    data = {
        cell.card if run.axes == ["nic"] else cell.id: [
            (s.mean if (s := cell.summary(name)) else None, half_width(s)) for _, name in NFS_PATTERNS
        ]
        for cell in cells
    }
    grouped_bars(ax, [label for label, _ in NFS_PATTERNS], data, "MB/s (10^6 bytes)")
    return to_plot(figure, "fio over NFS: bandwidth per pattern", f"{run.scenario}: NFSv4 on a tmpfs across the link.")


SWEEP_METRICS = 6  # at most this many headline metrics are drawn against a swept axis


def sweep_lines(run: RunData) -> list[Plot]:
    """Each headline metric against a numeric matrix axis other than MTU (a driver knob such as rx_usecs),
    one line per value of the other axes: the knob's effect on throughput, latency and CPU side by side."""
    plots = []
    for axis in run.axes:
        given = [cell.params.get(axis) for cell in run.cells]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in given)
        if axis == "mtu" or not numeric or len(set(given)) < 3:  # not a set first: a kernel {build: DIR} is a dict
            continue
        names: list[str] = []
        for cell in run.cells:
            names += [s.name for s in cell.summaries if s.headline and s.name not in names]
        for name in names[:SWEEP_METRICS]:
            lines: dict[str, list[tuple[float, float, float | None]]] = {}
            unit = ""
            for cell in run.cells:
                if (s := cell.summary(name)) is not None:
                    others = ",".join(f"{k}={v}" for k, v in cell.params.items() if k != axis) or name
                    lines.setdefault(others, []).append((cell.params[axis], s.mean, half_width(s)))
                    unit = s.unit
            if max((len(points) for points in lines.values()), default=0) < 2:
                continue
            figure, ax = new_figure()
            for i, (label, points) in enumerate(lines.items()):
                points.sort(key=lambda p: p[0])
                ax.errorbar(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    yerr=[p[2] or 0 for p in points],
                    marker="o",
                    capsize=3,
                    label=label,
                    color=COLORS[i % len(COLORS)],
                )
            ax.set_xlabel(axis)
            ax.set_ylabel(f"{name.split('.')[-1]} ({unit})")
            ax.grid(alpha=0.3)
            ax.legend()
            plots.append(to_plot(figure, f"{name} against {axis}", f"{run.scenario}: {name} per value of {axis}."))
    return plots
