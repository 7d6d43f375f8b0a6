"""Cost per Mbit/s: a card's price over the most it moved in the run.

Prices come from the scenario, a lab run's inventory or `niclab report --prices`, each over the one before;
the peak is the highest mean among the throughput metrics the benchmarks declare as peaks (docs/reports.md).
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
    rows = []
    for cell in run.cells:
        model = nics.lookup(cell.card)
        price = prices.get(model.name if model else cell.card)
        peaks = [(s.mean, s.name) for name in bench.peak_metrics() if (s := cell.summary(name))]
        if price is None or not peaks:
            continue
        peak, metric = max(peaks)
        if peak > 0:
            rows.append(CostRow(cell.card, cell.id, price, peak, metric))
    return rows
