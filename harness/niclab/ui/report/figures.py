"""matplotlib figures as embedded PNGs (data: URIs), so a report opens offline as one file.

The object API (Figure, no pyplot) keeps no global state between plots. Labels and titles come from run
directories (a NIC's name, a cell's id): `plain_text` makes them text to matplotlib, never math text (a
`$\\frac{…}$` nested 60 deep exhausted its parser's recursion; a plain `$…$` made a plot fail to draw).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class Plot:
    title: str
    image: str  # data:image/png;base64,...
    caption: str


@contextmanager
def plain_text() -> Iterator[None]:
    """Within the block, every text matplotlib makes (titles, labels, ticks, legends) is taken as it is."""
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


LABEL_LIMIT = 40  # characters of a name from a run directory as a plot shows it (a tick, a legend's entry)


def short(text: str, limit: int = LABEL_LIMIT) -> str:
    """A label as a plot shows it: at most `limit` characters (a name may be 600 long; the page has it whole)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def new_figure(width: float = 7.5, height: float = 4.2) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return figure, figure.subplots()


def new_panels(count: int, height: float = 4.2) -> tuple[Figure, list[Axes]]:
    """Small multiples: `count` panels in a row sharing one y scale, at most a page wide."""
    figure = Figure(figsize=(min(2.6 * count + 1.2, 11.5), height), dpi=100, layout="constrained")
    return figure, list(figure.subplots(1, count, sharey=True, squeeze=False)[0])


def to_plot(figure: Figure, title: str, caption: str) -> Plot:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return Plot(title, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode(), caption)


def cut_at_zero(points: list[tuple[float, float | None]]) -> list[list[float]]:
    """Error bars for (value, half-width) points, the part below cut at zero: [[below, ...], [above, ...]]."""
    return [[min(e or 0, max(v, 0.0)) for v, e in points], [e or 0 for _, e in points]]


def grouped_bars(
    ax: Axes, groups: list[str], series: dict[str, list[tuple[float | None, float | None]]], unit: str
) -> None:
    """Bars per group, one per series, each (value, half-width of its interval or None). An interval is cut
    at zero: a time or a rate is never negative, and a bar of 685 ± 2059 µs must not stretch the axis to
    -1000 µs and flatten every other bar. A series with no value at all is left out (and so from the legend)."""
    series = {name: values for name, values in series.items() if any(v is not None for v, _ in values)}
    count = max(len(series), 1)
    width = 0.8 / count
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (count - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0 for v, _ in values]
        errors = [e or 0 for _, e in values]
        ax.bar(
            xs,
            heights,
            width,
            yerr=cut_at_zero(list(zip(heights, errors, strict=True))) if any(errors) else None,
            capsize=3,
            label=short(name),
            color=COLORS[i % len(COLORS)],
        )
    shown = [short(group) for group in groups]
    ax.set_xticks(range(len(groups)), shown, rotation=20 if max(map(len, shown), default=0) > 10 else 0)
    ax.set_ylabel(unit)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend()


def size_label(value: float, _position: int | None = None) -> str:
    """1, 64, 4K, 256K, 2M: message sizes as NIC studies label them."""
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if value >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def bytes_axis(ax: Axes) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=8))
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xlabel("message size (bytes)")
