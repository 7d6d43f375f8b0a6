"""Cost per Mbit/s: a card's price over the most it moved in the run.

Prices come from the scenario, a lab run's inventory or `niclab report --prices`, each over the one before;
every card is divided by the same metric: the first of the throughput metrics the benchmarks declare as peaks
that every priced card measured (docs/reports.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from niclab.base import yamlpos
from niclab.model import bench, nics
from niclab.ui.report.data import RunData


@dataclass(frozen=True)
class CostRow:
    card: str
    cell: str
    price: float
    peak_mbps: float
    peak_metric: str

    @property
    def per_mbps(self) -> float:
        return self.price / self.peak_mbps


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        price = float(value)
    except OverflowError:
        return None
    return price if math.isfinite(price) else None


def prices_of(run: RunData, extra: dict[str, float] | None = None) -> tuple[dict[str, float], str]:
    """The card prices and their currency; the scenario text is the run's (untrusted: read with
    niclab.base.yamlpos's limits, and what is not a price of a card is left out)."""
    try:
        scenario = yamlpos.load(run.info.scenario_text or "")[0]
    except yamlpos.YamlError:
        scenario = None
    if not isinstance(scenario, dict):
        scenario = {}
    given = scenario.get("prices")
    prices = {}
    lab = run.info.lab.prices if run.info.lab is not None else {}
    for model, price in {**(given if isinstance(given, dict) else {}), **lab, **(extra or {})}.items():
        found = nics.lookup(str(model))
        if (number := _number(price)) is not None:
            prices[found.name if found else str(model)] = number
    currency = scenario.get("currency")
    return prices, currency if isinstance(currency, str) else ""


def cost_rows(run: RunData, prices: dict[str, float]) -> list[CostRow]:
    """Each priced card's price over one metric, the same for every card: the first of the declared peak
    metrics that every priced cell measured (else the one most of them did; a cell without it gets no row).
    A card's price over NetPIPE's peak beside another's over netperf's throughput compares nothing."""
    priced = []
    for cell in run.cells:
        model = nics.lookup(cell.card)
        price = prices.get(model.name if model else cell.card)
        if price is not None:
            priced.append((cell, price))
    counts = {name: sum(1 for cell, _ in priced if cell.summary(name)) for name in bench.peak_metrics()}
    if not priced or not any(counts.values()):
        return []
    most = max(counts.values())
    metric = next(name for name in bench.peak_metrics() if counts[name] == most)
    rows = []
    for cell, price in priced:
        summary = cell.summary(metric)
        if summary is not None and summary.mean > 0:
            rows.append(CostRow(cell.card, cell.id, price, summary.mean, metric))
    return rows
