"""The report's plots, each built from run data; a plot with nothing to show is None.

Each benchmark declares figures of the kinds drawn here (model.bench.declare.Figure); the shared kinds gather
every benchmark's series. A curve comes from a measurement's `curve`; with repeats, the median run's stands
for its cell.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import assert_never

from niclab.model import bench
from niclab.model.bench import Figure
from niclab.run.records import SummaryRecord
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.figures import (
    COLORS,
    Plot,
    bytes_axis,
    cut_at_zero,
    grouped_bars,
    new_figure,
    new_panels,
    short,
    to_plot,
)

BARS_SECTION = "throughput, latency and CPU"
#: The figures several benchmarks add series to: the report's title, caption and place; the series come from them.
SHARED = {
    "throughput": Figure(
        "throughput",
        (),
        BARS_SECTION,
        "TCP throughput per card",
        "netperf TCP_STREAM, mean with its confidence interval.",
        "Mbit/s",
        order=20,
        link=0,
    ),
    "latency": Figure(
        "latency",
        (),
        BARS_SECTION,
        "Latency per card",
        "round trips (netperf TCP_RR mean, lmbench medians) and NetPIPE's one-way time.",
        "µs",
        order=22,
        link=0,
    ),
    "against-mtu": Figure(
        "against-mtu",
        (),
        "throughput against MTU",
        "Throughput against MTU",
        "netperf TCP_STREAM per card and MTU.",
        "TCP throughput (Mbit/s)",
        order=30,
    ),
}
SWEEP_SECTION = "against a swept setting"
MAX_BARS = 60  # groups of bars in one figure: one per cell; more cannot be told apart (nor labelled)
MAX_LINES = 20  # lines in one figure; more cannot be told apart (the colours repeat after ten)


class Crowded(Exception):
    """A figure would hold more bars or lines than anyone can read (a sweep of thousands of cells): not drawn."""


def figures(declared: list[Figure] | None = None) -> list[Figure]:
    """The figures of the report in order: the shared ones with every benchmark's series (by their `order`),
    beside each benchmark's own (by default the registry's declarations)."""
    declared = bench.figures() if declared is None else declared
    shared = {
        kind: replace(
            figure,
            series=tuple(sorted((s for f in declared if f.kind == kind for s in f.series), key=lambda s: s.order)),
        )
        for kind, figure in SHARED.items()
    }
    own = [f for f in declared if f.kind not in SHARED]
    return sorted([f for f in shared.values() if f.series] + own, key=lambda f: f.order)


def sections(declared: list[Figure] | None = None) -> dict[str, list[Figure]]:
    """Section title -> its figures, the sections in the order of their first figure."""
    found: dict[str, list[Figure]] = {}
    for figure in figures(declared):
        found.setdefault(figure.section, []).append(figure)
    return found


def draw(run: RunData, figure: Figure) -> list[Plot]:
    """The plots of one figure (none when the run has nothing for it)."""
    match figure.kind:
        case "latency" if any(s.one_way for s in figure.series) and not all(s.one_way for s in figure.series):
            # round trips and one-way times never share an axis: one plot each
            trips = tuple(s for s in figure.series if not s.one_way)
            ways = tuple(s for s in figure.series if s.one_way)
            round_trip = replace(figure, series=trips, caption=f"round trips: {', '.join(s.label for s in trips)}.")
            one_way = replace(
                figure,
                series=ways,
                title=f"{figure.title}: one way",
                caption="one-way time (half the round trip, as NetPIPE reports it): "
                + ", ".join(s.label for s in ways)
                + ".",
            )
            return [plot for part in (round_trip, one_way) for plot in draw(run, part)]
        case "throughput" | "latency" | "bars":
            series = with_loopback(run, figure)
            made = _bars(run, figure.title, f"{run.scenario}: {figure.caption}", figure.unit, series, figure.link)
        case "pattern-bars":
            made = pattern_bars(run, figure)
        case "size-curve":
            return size_curve_plots(run, figure)
        case "against-mtu":
            made = mtu_lines(run, figure)
        case "against-ports":
            made = bonding_plot(run, figure)
        case _:
            assert_never(figure.kind)
    return [made] if made else []


def half_width(summary: SummaryRecord | None) -> float | None:
    """Half the width of the summary's interval, for an error bar (None: no interval, or one too wide to draw)."""
    if not summary or summary.n < 2 or summary.ci_low is None or summary.ci_high is None:
        return None
    half = (summary.ci_high - summary.ci_low) / 2
    return half if math.isfinite(half) else None


def size_curve(cell: CellData, metric: str) -> list[list[float]] | None:
    """The curve of the cell's run whose `metric` is the median: [[bytes, Mbit/s, one-way us], ...]."""
    runs = [m for m in cell.measurements if m.name == metric and m.extra.curve]
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


def size_curve_plots(run: RunData, figure: Figure) -> list[Plot]:
    """Throughput and one-way time against message size, a line per card; then per card, a line per MTU."""
    metric, name = figure.series[0].metric, figure.title
    curves = {cell.id: (cell, c) for cell in run.cells if (c := size_curve(cell, metric))}
    if not curves:
        return []
    plots = []
    by_card: dict[str, list[tuple[CellData, list]]] = {}
    for cell, curve in curves.values():
        by_card.setdefault(cell.card, []).append((cell, curve))
    if len(by_card) > MAX_LINES:
        raise Crowded(f"{len(by_card)} cards, more than the {MAX_LINES} lines a figure shows")
    # one line per card (at its smallest MTU when the run sweeps MTUs)
    drawing, ax = new_figure()
    latency_figure, latency_ax = new_figure()
    for i, (card, cells) in enumerate(by_card.items()):
        cell, curve = min(cells, key=lambda item: _mtu_of(item[0]) or 0)
        label = short(card) + (f" (MTU {_mtu_of(cell)})" if len(cells) > 1 else "")
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
            drawing,
            f"{name}: throughput against message size",
            f"{run.scenario}: one line per card; {figure.caption}",
        )
    )
    plots.append(
        to_plot(
            latency_figure,
            f"{name}: time against message size",
            f"{run.scenario}: half the round trip of each message size (log-log).",
        )
    )
    # one plot per card with a line per MTU
    for card, cells in by_card.items():
        if len(cells) < 2 or len(cells) > MAX_LINES:  # more lines than anyone can tell apart: the first plot has it
            continue
        drawing, ax = new_figure(6.5, 3.8)
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
        plots.append(to_plot(drawing, f"{name} on {card}, per MTU", f"{run.scenario}: one line per MTU."))
    return plots


def with_loopback(run: RunData, figure: Figure) -> dict[str, tuple[str, str | None]]:
    """The figure's series (label -> metric name and peer), each followed by its loopback reference (a
    benchmark run with `peer: self`) when the run measured one: the node's ceiling beside the link's figure."""
    found: dict[str, tuple[str, str | None]] = {}
    for series in figure.series:
        found[series.label] = (series.metric, None)
        if any(cell.summary(series.metric, figure.link, peer="self") for cell in run.cells):
            found[f"{series.label} (loopback)"] = (series.metric, "self")
    return found


def _bars(
    run: RunData,
    title: str,
    caption: str,
    unit: str,
    series: dict[str, tuple[str, str | None]],
    link: int | None = None,
) -> Plot | None:
    """Bars per cell for the named summaries (series label -> metric name and peer)."""
    cells = [c for c in run.cells if any(c.summary(name, link, peer) for name, peer in series.values())]
    if not cells:
        return None
    if len(cells) > MAX_BARS:
        raise Crowded(f"{len(cells):,} cells, more than the {MAX_BARS} bars a figure shows")
    if len(run.axes) == 2:  # a two-axis matrix (nic × mtu): one panel per value of the second axis
        return _panels(run, cells, title, caption, unit, series, link)
    figure, ax = new_figure()
    data = {
        label: [(s.mean if (s := cell.summary(name, link, peer)) else None, half_width(s)) for cell in cells]
        for label, (name, peer) in series.items()
    }
    grouped_bars(ax, [c.card if run.axes == ["nic"] else c.id for c in cells], data, unit)
    return to_plot(figure, title, caption)


MAX_PANELS = 8  # small multiples side by side in one figure


def _panels(
    run: RunData,
    cells: list[CellData],
    title: str,
    caption: str,
    unit: str,
    series: dict[str, tuple[str, str | None]],
    link: int | None,
) -> Plot | None:
    """Small multiples: a panel per value of the second axis, bars per value of the first, one y scale."""
    first, second = run.axes
    values = list(dict.fromkeys(str(c.params.get(second)) for c in cells))
    if len(values) > MAX_PANELS:
        raise Crowded(f"{len(values)} values of {second}, more than the {MAX_PANELS} panels a figure shows")
    figure, axes = new_panels(len(values))
    for ax, value in zip(axes, values, strict=True):
        here = [c for c in cells if str(c.params.get(second)) == value]
        data = {
            label: [(s.mean if (s := cell.summary(name, link, peer)) else None, half_width(s)) for cell in here]
            for label, (name, peer) in series.items()
        }
        grouped_bars(ax, [str(c.params.get(first, c.id)) for c in here], data, unit if ax is axes[0] else "")
        ax.set_title(f"{second} {value}", fontsize=10)
        for tick in ax.get_xticklabels():
            tick.set_rotation(45)
            tick.set_horizontalalignment("right")
    return to_plot(figure, title, f"{caption} One panel per {second}.")


def mtu_lines(run: RunData, figure: Figure) -> Plot | None:
    """Throughput against MTU, one line per card (runs with an mtu axis): the first of the series a cell has."""
    points: dict[str, list[tuple[int, float, float | None]]] = {}
    for cell in run.cells:
        mtu = _mtu_of(cell)
        s = next((found for series in figure.series if (found := cell.summary(series.metric))), None)
        if mtu is not None and s:
            points.setdefault(cell.card, []).append((mtu, s.mean, half_width(s)))
    if not points or max(len(v) for v in points.values()) < 2:
        return None
    if len(points) > MAX_LINES or sum(map(len, points.values())) > MAX_BARS * MAX_LINES:
        raise Crowded(f"{sum(map(len, points.values())):,} points on {len(points)} lines, too many to tell apart")
    drawing, ax = new_figure()
    for i, (card, values) in enumerate(points.items()):
        values.sort(key=lambda v: v[0])
        ax.errorbar(
            [v[0] for v in values],
            [v[1] for v in values],
            yerr=cut_at_zero([(v[1], v[2]) for v in values]),
            marker="o",
            capsize=3,
            label=short(card),
            color=COLORS[i % len(COLORS)],
        )
    ax.set_xlabel("MTU (bytes)")
    ax.set_ylabel(figure.unit)
    ax.grid(alpha=0.3)
    ax.legend()
    return to_plot(drawing, figure.title, f"{run.scenario}: {figure.caption}")


def bonding_plot(run: RunData, figure: Figure) -> Plot | None:
    """The metric (throughput) against the number of bonded ports, beside N times the single port."""
    metric = figure.series[0].metric
    series: dict[str, dict[int, float]] = {}
    for cell in run.cells:
        for s in cell.summaries:
            if s.name != metric or s.peer is not None:  # the loopback reference crosses no bonded port
                continue
            nic = cell.nic_of(s.runs[0], s.client) if s.runs else None
            series.setdefault(cell.card, {})[(nic.ports if nic is not None else None) or 1] = s.mean
    series = {card: values for card, values in series.items() if len(values) > 1 and 1 in values}
    if not series:
        return None
    drawing, ax = new_figure()
    for i, (card, values) in enumerate(series.items()):
        ports = sorted(values)
        color = COLORS[i % len(COLORS)]
        ax.plot(ports, [values[p] for p in ports], marker="o", color=color, label=f"{short(card)} measured")
        ideal = f"{short(card)}: N × one port"
        ax.plot(ports, [values[1] * p for p in ports], linestyle="--", color=color, alpha=0.6, label=ideal)
    ax.set_xlabel("bonded ports")
    ax.set_ylabel(figure.unit)
    ax.set_xticks(sorted({p for v in series.values() for p in v}))
    ax.grid(alpha=0.3)
    ax.legend()
    return to_plot(drawing, figure.title, f"{run.scenario}: {figure.caption}")


def pattern_bars(run: RunData, figure: Figure) -> Plot | None:
    """A group of bars per series (an access pattern), one bar per cell."""
    cells = [c for c in run.cells if any(c.summary(s.metric, figure.link) for s in figure.series)]
    if not cells:
        return None
    if len(cells) > MAX_BARS:
        raise Crowded(f"{len(cells):,} cells, more than the {MAX_BARS} bars a figure shows")
    drawing, ax = new_figure()
    data = {
        cell.card if run.axes == ["nic"] else cell.id: [
            (s.mean if (s := cell.summary(series.metric, figure.link)) else None, half_width(s))
            for series in figure.series
        ]
        for cell in cells
    }
    grouped_bars(ax, [series.label for series in figure.series], data, figure.unit)
    return to_plot(drawing, figure.title, f"{run.scenario}: {figure.caption}")


SWEEP_METRICS = 6  # at most this many headline metrics are drawn against a swept axis


def sweep_lines(run: RunData) -> list[Plot]:
    """Each headline metric against a numeric matrix axis other than MTU (a driver knob such as rx_usecs),
    one line per value of the other axes: the knob's effect on throughput, latency and CPU side by side."""
    plots, crowded = [], 0
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
            if len(lines) > MAX_LINES:
                crowded = max(crowded, len(lines))
                continue
            figure, ax = new_figure()
            for i, (label, points) in enumerate(lines.items()):
                points.sort(key=lambda p: p[0])
                ax.errorbar(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    yerr=cut_at_zero([(p[1], p[2]) for p in points]),
                    marker="o",
                    capsize=3,
                    label=short(label),
                    color=COLORS[i % len(COLORS)],
                )
            ax.set_xlabel(axis)
            ax.set_ylabel(f"{name.split('.')[-1]} ({unit})")
            ax.grid(alpha=0.3)
            ax.legend()
            plots.append(to_plot(figure, f"{name} against {axis}", f"{run.scenario}: {name} per value of {axis}."))
    if crowded and not plots:
        raise Crowded(f"{crowded:,} lines, one per value of the other axes: more than the {MAX_LINES} a figure shows")
    return plots
