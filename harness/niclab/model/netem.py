"""Link impairments with tc netem: the scenario's spec, the tc arguments, and a read-back.

Values carry units as tc writes them: delays in us/ms/s, probabilities in %,
rates in bit/kbit/mbit/gbit (SI: 1 kbit = 1000 bit/s). A value without a unit
is an error, never a guess. After installing, `parse_qdisc` reads
`tc qdisc show` back so netconf can check that the guest runs what was asked.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

DURATION_UNITS = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
DISTRIBUTIONS = ("normal", "pareto", "paretonormal")


def _number_and_unit(field: str, value: Any, units: dict, example: str) -> float:
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise ValueError(f"netem {field} {value} needs a unit, e.g. {example}")
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z%]+)\s*", str(value))
    if not match or match[2].lower() not in units:
        raise ValueError(
            f"netem {field} {_shown(value)} is not understood; write it like {example} (units: {', '.join(units)})"
        )
    number = float(match[1]) * units[match[2].lower()]
    if not math.isfinite(number):  # a few hundred digits make float() say inf
        raise ValueError(f"netem {field} {_shown(value)} is too large")
    return number


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:28]}...{text[-28:]}"


def parse_duration_us(field: str, value: Any) -> float:
    return _number_and_unit(field, value, DURATION_UNITS, "10ms or 500us")


def parse_percent(field: str, value: Any) -> float:
    percent = _number_and_unit(field, value, {"%": 1.0}, "0.5%")
    if percent > 100:
        raise ValueError(f"netem {field} {_shown(value)} is more than 100%")
    return percent


def parse_rate_bps(field: str, value: Any) -> float:
    return _number_and_unit(field, value, RATE_UNITS, "100mbit")


def format_duration(us: float) -> str:
    if us >= 1_000_000 and us % 1_000_000 == 0:
        return f"{us / 1_000_000:g}s"
    if us >= 1000:
        return f"{us / 1000:g}ms"
    return f"{us:g}us"


def format_rate(bps: float) -> str:
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale and bps % scale == 0:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"


class Netem(BaseModel):
    """One end's netem settings, stored in plain units (us, %, bit/s)."""

    model_config = ConfigDict(extra="forbid")

    delay: float | None = Field(None, description="one-way delay added on this end's egress (us)")
    jitter: float | None = Field(None, description="delay variation (us); needs delay")
    distribution: Literal["normal", "pareto", "paretonormal"] | None = None
    loss: float | None = Field(None, description="random loss (%)")
    duplicate: float | None = None
    reorder: float | None = Field(None, description="share sent at once, ahead of the delayed (%); needs delay")
    corrupt: float | None = None
    rate: float | None = Field(None, description="egress rate limit (bit/s)")
    limit: int | None = Field(None, ge=1, le=10_000_000, description="queue length (packets; tc's default 1000)")

    @field_validator("delay", "jitter", mode="before")
    @classmethod
    def _duration(cls, value: Any, info: ValidationInfo) -> float | None:
        return None if value is None else parse_duration_us(str(info.field_name), value)

    @field_validator("loss", "duplicate", "reorder", "corrupt", mode="before")
    @classmethod
    def _percent(cls, value: Any, info: ValidationInfo) -> float | None:
        return None if value is None else parse_percent(str(info.field_name), value)

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, value: Any, info: ValidationInfo) -> float | None:
        return None if value is None else parse_rate_bps(str(info.field_name), value)

    @model_validator(mode="after")
    def _needs_delay(self) -> Netem:
        for field in ("jitter", "reorder", "distribution"):
            if getattr(self, field) is not None and not self.delay:
                raise ValueError(f"netem {field} needs a delay (reordering and jitter act on delayed packets)")
        return self

    def is_empty(self) -> bool:
        return all(value is None for value in self.model_dump().values())

    def tc_args(self) -> list[str]:
        args: list[str] = []
        if self.limit is not None:
            args += ["limit", str(self.limit)]
        if self.delay is not None:
            args += ["delay", format_duration(self.delay)]
            if self.jitter is not None:
                args.append(format_duration(self.jitter))
                if self.distribution:
                    args += ["distribution", self.distribution]
        for name in ("loss", "duplicate", "reorder", "corrupt"):
            value = getattr(self, name)
            if value:  # 0 % is no impairment, and tc would not report it back
                args += [name, f"{value:g}%"]
        if self.rate is not None:
            args += ["rate", format_rate(self.rate)]
        return args

    def describe(self) -> str:
        return " ".join(self.tc_args())


# -- reading back what tc installed --------------------------------------

_TC_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_TC_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|Kbit|Mbit|Gbit)$")


def parse_qdisc(line: str) -> dict[str, float] | None:
    """`qdisc netem 8001: root refcnt 2 limit 1000 delay 10ms  1ms loss 0.5% rate 100Mbit` -> values."""
    words = line.split()
    if len(words) < 2 or words[0] != "qdisc" or words[1] != "netem":
        return None
    found: dict[str, float] = {}
    i = 0
    while i < len(words):
        word = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word == "limit" and nxt.isdigit():
            found["limit"] = int(nxt)
            i += 2
            continue
        if word == "delay" and _TC_DURATION.match(nxt):
            found["delay"] = parse_duration_us("delay", nxt)
            i += 2
            if i < len(words) and _TC_DURATION.match(words[i]):
                found["jitter"] = parse_duration_us("jitter", words[i])
                i += 1
            continue
        if word in ("loss", "duplicate", "reorder", "corrupt") and nxt.endswith("%"):
            found[word] = float(nxt[:-1])
            i += 2
            continue
        if word == "rate" and (match := _TC_RATE.match(nxt)):
            found["rate"] = float(match[1]) * RATE_UNITS[match[2].lower()]
            i += 2
            continue
        i += 1
    return found


def _show(key: str, value: float) -> str:
    if key in ("delay", "jitter"):
        return format_duration(value)
    if key == "rate":
        return format_rate(value)
    if key == "limit":
        return f"{value:g} packets"
    return f"{value:g}%"


def mismatches(wanted: Netem, installed: dict[str, float] | None) -> list[str]:
    """What differs between the spec and what tc reports (tc rounds probabilities slightly)."""
    if installed is None:
        return ["no netem qdisc is installed"]
    problems = []
    # a 0 % probability or a 0 delay is no impairment: tc leaves it out of what it shows
    expected = {
        k: v
        for k, v in wanted.model_dump().items()
        if v is not None and k != "distribution" and (v != 0 or k == "limit")
    }
    expected.setdefault("limit", 1000)
    for key, value in expected.items():
        got = installed.get(key)
        if got is None or not math.isclose(got, value, rel_tol=2e-3, abs_tol=1e-6):
            problems.append(
                f"{key}: asked {_show(key, value)}, installed {'nothing' if got is None else _show(key, got)}"
            )
    for key in sorted(installed.keys() - expected.keys()):
        problems.append(f"{key}: not asked, installed {_show(key, installed[key])}")
    return problems
