"""The concrete scenario (one matrix cell): nodes, links, benchmarks, as pydantic models."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from niclab.base.problems import NAME_PATTERN as NAME_RE
from niclab.base.problems import Problem, Problems, did_you_mean, listing, pydantic_problems, shown
from niclab.model import bench, knobs, nics, offloads
from niclab.model.driver_choice import KEYS as DRIVER_KEYS
from niclab.model.driver_choice import DriverChoice, DriverError, module_key, parse_driver
from niclab.model.expect import ExpectationError, parse
from niclab.model.kernel_choice import KernelChoice, parse_kernel
from niclab.model.netem import Netem
from niclab.model.topology import NodeSpec, Port, Topology, Wire, port_ifname

_V = TypeVar("_V")  # the checked value of one named setting of a link end (_settings_per_end)

BOND_MODES = ("balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _memory_mib(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([MG])i?B?\s*", str(value), re.IGNORECASE)
    if not match:
        raise ValueError(f"memory {shown(value)} is not a size: 256M, 1G, or a number of MiB")
    if len(match[1].lstrip("0")) > 9:  # int() of thousands of digits is slow, and refused past 4300
        raise ValueError(f"memory {shown(value)} is outside 64M..64G")
    return int(match[1]) * (1024 if match[2].upper() == "G" else 1)


def _kernel(value: Any, info: ValidationInfo) -> KernelChoice | None:
    """A kernel choice; a relative build directory is relative to the scenario file (context `base`)."""
    if value is None:
        return None
    try:
        return parse_kernel(value, (info.context or {}).get("base"))
    except ValueError as exc:
        raise Problems([Problem((), str(exc))]) from None


class NodeOptions(_Strict):
    cpus: int = Field(1, ge=1, le=16)
    memory: int = Field(256, description="MiB; YAML may say 256M or 1G")
    kernel: KernelChoice | None = Field(None, description="this node's kernel, if not the scenario's")

    _kernel = field_validator("kernel", mode="before")(_kernel)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int:
        mib = _memory_mib(value)
        if not 64 <= mib <= 65536:
            raise ValueError(f"memory {mib} MiB is outside 64M..64G")
        return mib


class Bond(_Strict):
    mode: Literal[
        "balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"
    ] = "balance-rr"
    miimon: int = Field(100, ge=0, le=10000, description="link check interval (ms)")
    xmit_hash_policy: Literal["layer2", "layer2+3", "layer3+4", "encap2+3", "encap3+4"] | None = None


def _per_end(value: dict, ends: list[str]) -> tuple[bool, dict, list[Problem]]:
    """Split settings given per end ({a: {...}, b: {...}}) from settings for every end.

    Settings per end are recognized by their values: all mappings (a netem or
    offload value never is one).
    """
    if value and all(isinstance(v, dict) or v is None for v in value.values()):
        problems = [
            Problem((key,), f"{shown(key)} is not an end of this link ({listing(ends)})", at_key=True)
            for key in value
            if key not in ends
        ]
        return True, {end: (value.get(end) or {}) for end in ends}, problems
    return False, {end: value for end in ends}, []


def _driver_per_end(value: Any, ends: list[str]) -> tuple[bool, dict, list[Problem]]:
    """Split a driver given per end ({a: {module: ../x}, b: in-tree}) from one for every end ({module: ../x}).

    A driver is itself a mapping, so per end is told by the keys: every one an
    end of the link, or some an end and none a driver's own (module, dkms, ...).
    """
    if isinstance(value, dict) and value:
        keys = list(value)
        if all(key in ends for key in keys) or (
            any(key in ends for key in keys) and not any(key in DRIVER_KEYS for key in keys)
        ):
            problems = [
                Problem((key,), f"{shown(key)} is not an end of this link ({listing(ends)})", at_key=True)
                for key in keys
                if key not in ends
            ]
            return True, {end: value.get(end) for end in ends}, problems
    return False, {end: value for end in ends}, []


IPV6_MIN_MTU = 1280
DUAL_STACK: tuple[Literal[4, 6], ...] = (4, 6)


class Link(_Strict):
    between: list[str] = Field(min_length=2, description="2 nodes: a cable; 3 or more: a switched segment")
    switch: bool = Field(False, description="two nodes through a learning switch rather than a cable")
    nic: str | dict[str, str]
    count: int = Field(1, ge=1, le=8, description="parallel cables (or segments)")
    bond: Bond | None = None
    mtu: int = Field(1500, ge=68, le=65535)
    ip: list[Literal[4, 6]] = Field(
        default_factory=lambda: list(DUAL_STACK),
        description="the IP versions the link's ends get addresses of: 4 from 198.18.0.0/15, 6 from 2001:2::/48",
    )
    offloads: dict[str, dict[str, bool]] = Field(default_factory=dict, description="per end, after loading")
    netem: dict[str, Netem] = Field(default_factory=dict, description="per end, after loading")
    coalesce: dict[str, dict[str, int | bool]] = Field(default_factory=dict, description="per end: ethtool -C")
    rings: dict[str, dict[str, int | bool]] = Field(default_factory=dict, description="per end: ethtool -G")
    queues: dict[str, dict[str, int | bool]] = Field(default_factory=dict, description="per end: ethtool -L")
    module_params: dict[str, dict[str, int | str]] = Field(
        default_factory=dict, description="per end: the NIC driver's module parameters, set at boot"
    )
    driver: dict[str, DriverChoice] = Field(
        default_factory=dict, description="per end: the module that drives the card, where not the kernel's own"
    )
    _given_per_end: frozenset[str] = PrivateAttr(default=frozenset())  # the settings written {end: {...}}

    @model_validator(mode="wrap")
    @classmethod
    def _remember_per_end(cls, data: Any, handler: Any) -> Any:
        link = handler(data)
        if isinstance(data, dict):
            ends = data.get("between") or []
            link._given_per_end = frozenset(
                key
                for key, value in data.items()
                if isinstance(value, dict) and (_driver_per_end if key == "driver" else _per_end)(value, ends)[0]
            )
        return link

    @model_validator(mode="after")
    def _ipv6_needs_1280(self) -> Link:
        """IPv6 needs an MTU of 1280 or more (RFC 8200): below it a link is IPv4 only, unless ip asks for 6."""
        if self.mtu < IPV6_MIN_MTU and 6 in self.ip:
            if "ip" in self.model_fields_set:
                raise Problems(
                    [
                        Problem(
                            ("ip",),
                            f"IPv6 needs an MTU of {IPV6_MIN_MTU} or more, and this link's is {self.mtu}",
                            f"use ip: 4, or mtu: {IPV6_MIN_MTU} or more",
                        )
                    ]
                )
            self.ip = [4]
        return self

    @field_validator("ip", mode="before")
    @classmethod
    def _ip(cls, value: Any) -> Any:
        versions = [value] if isinstance(value, int) else value
        if isinstance(versions, list) and versions and all(v in (4, 6) for v in versions):
            if 4 not in versions:
                raise Problems(
                    [
                        Problem(
                            (),
                            "a link without IPv4 is not supported yet: the benchmarks address the IPv4 ends",
                            "use ip: [4, 6] (the default), or ip: 4",
                        )
                    ]
                )
            return sorted(set(versions))
        raise Problems([Problem((), f"ip is {shown(value)}", "give 4, or [4, 6] (the default)")])

    @field_validator("bond", mode="before")
    @classmethod
    def _bond(cls, value: Any) -> Any:
        if value is None or value == "none":
            return None
        if isinstance(value, str):
            if value not in BOND_MODES:
                hint = did_you_mean(value, BOND_MODES)
                raise Problems(
                    [
                        Problem(
                            (),
                            f"unknown bonding mode {shown(value)}",
                            f"{hint + ' ' if hint else ''}modes: {', '.join(BOND_MODES)}",
                        )
                    ]
                )
            return {"mode": value}
        return value

    @field_validator("offloads", mode="before")
    @classmethod
    def _offloads(cls, value: Any, info: ValidationInfo) -> Any:
        return _settings_per_end(
            value, info, "offloads maps ethtool feature names to on or off, e.g. {tso: off}", _offload_switch
        )

    @field_validator("coalesce", "rings", "queues", mode="before")
    @classmethod
    def _knobs(cls, value: Any, info: ValidationInfo) -> Any:
        kind = knobs.KINDS[str(info.field_name)]

        def knob(name: Any, setting: Any) -> int | bool | Problem:
            checked, message, hint = knobs.check_setting(kind, name, setting)
            if message is not None:
                return Problem((), message, hint, at_key=message.startswith("unknown"))
            assert checked is not None
            return checked

        not_a_mapping = f"{kind.key} maps {kind.shown()} names to values, e.g. {kind.example}"
        return _given_ends(_settings_per_end(value, info, not_a_mapping, knob))

    @field_validator("module_params", mode="before")
    @classmethod
    def _module_params(cls, value: Any, info: ValidationInfo) -> Any:
        not_a_mapping = "module_params maps parameter names to values, e.g. {InterruptThrottleRate: 8000}"
        return _given_ends(_settings_per_end(value, info, not_a_mapping, _module_param))

    @field_validator("driver", mode="before")
    @classmethod
    def _driver(cls, value: Any, info: ValidationInfo) -> Any:
        """Each end's driver (a relative module directory is relative to the scenario file, context `base`);
        only the ends not on the kernel's own module for their card are kept."""
        if value is None:
            return {}
        per_end, settings, problems = _driver_per_end(value, info.data.get("between") or [])
        nic = info.data.get("nic")
        base = (info.context or {}).get("base")

        def parsed(written: Any) -> DriverChoice | DriverError:
            try:
                return parse_driver(written, base)
            except DriverError as exc:
                return exc

        if per_end:
            outcomes = {end: parsed(written) for end, written in settings.items()}
        else:  # parsed once (a module's directory is looked at), and reported once
            outcome = parsed(value)
            outcomes = {end: outcome for end in settings}
        result: dict[str, DriverChoice] = {}
        for end, choice in outcomes.items():
            if isinstance(choice, DriverError):
                path = ((end,) if per_end else ()) + ((choice.key,) if choice.key else ())
                problems.append(Problem(path, str(choice), at_key=choice.at_key))
                continue
            model = _model_at(nic, end)
            found = nics.lookup(model) if isinstance(model, str) else None
            named_default = (
                choice.kind == "named" and found is not None and module_key(choice.source) == module_key(found.module)
            )
            if not choice.is_default and not named_default:  # `driver: e1000` on an e1000 card is its own module
                result[end] = choice
        if problems:
            raise Problems(_unique(problems))
        return result

    @field_validator("netem", mode="before")
    @classmethod
    def _netem(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise Problems([Problem((), "netem maps settings to values, e.g. {delay: 10ms, loss: 1%}")])
        per_end, settings, problems = _per_end(value, info.data.get("between") or [])
        result = {}
        for end, spec in settings.items():
            try:
                result[end] = Netem.model_validate(spec or {})
            except ValidationError as exc:
                problems += pydantic_problems(exc.errors(), (end,) if per_end else (), Netem)
        if problems:
            raise Problems(_unique(problems))
        return {end: spec for end, spec in result.items() if not spec.is_empty()}

    @field_validator("nic", mode="after")
    @classmethod
    def _canonical_nic(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        """An alias (virtio-net-pci) becomes its catalog name (virtio); unknown names stay for the error."""

        def canonical(name: str) -> str:
            found = nics.lookup(name)
            return found.name if found else name

        return canonical(value) if isinstance(value, str) else {end: canonical(m) for end, m in value.items()}

    def model_for(self, node: str) -> str:
        """The NIC model of an end: a valid scenario names one for each (KeyError for a node not on the link)."""
        if (model := _model_at(self.nic, node)) is None:
            raise KeyError(node)
        return model

    def knobs_of(self, node: str) -> tuple[tuple[str, str, str], ...]:
        """The ethtool knobs on this end, as (kind, name, value) (niclab.model.knobs)."""
        return tuple(
            (kind, name, knobs.word(value))
            for kind in knobs.KINDS
            for name, value in getattr(self, kind).get(node, {}).items()
        )


def _settings_per_end(
    value: Any, info: ValidationInfo, not_a_mapping: str, check: Callable[[Any, Any], _V | Problem]
) -> dict[str, dict[str, _V]]:
    """A link's named settings for every end ({tso: off}) or per end ({a: {tso: off}, b: ...}), each
    `name: setting` checked by `check` (the value, or a Problem whose path is filled in here): end -> name ->
    value, for every end of the link (empty where none is set); {} for none at all (null)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Problems([Problem((), not_a_mapping)])
    per_end, settings, problems = _per_end(value, info.data.get("between") or [])
    result: dict[str, dict[str, _V]] = {}
    for end, named in settings.items():
        base = (end,) if per_end else ()
        result[end] = {}
        for name, setting in (named or {}).items():
            checked = check(name, setting)
            if isinstance(checked, Problem):
                problems.append(dataclasses.replace(checked, path=base + (name,)))
            else:
                result[end][str(name)] = checked
    if problems:
        raise Problems(_unique(problems))
    return result


def _given_ends(settings: dict[str, dict[str, _V]]) -> dict[str, dict[str, _V]]:
    """The ends that have a setting."""
    return {end: named for end, named in settings.items() if named}


def _offload_switch(feature: Any, switch: Any) -> bool | Problem:
    """An offload feature turned on or off: ethtool must know the feature."""
    if (message := offloads.check_feature(feature)) is not None:
        return Problem((), message, at_key=True)
    try:
        return offloads.parse_switch(feature, switch)
    except ValueError as exc:
        return Problem((), str(exc))


def _module_param(name: Any, setting: Any) -> int | str | Problem:
    """A driver module's parameter: a plain name, set to a number or a word (it goes on the kernel's command line)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
        return Problem((), f"{shown(name)} is not a module parameter name", at_key=True)
    if (
        isinstance(setting, bool)
        or not isinstance(setting, (int, str))
        or not re.fullmatch(r"[A-Za-z0-9_.,:+-]+", str(setting))
    ):
        return Problem((), f"a module parameter is a number or a word, not {shown(setting)}")
    return setting


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, out = set(), []
    for problem in problems:
        if (problem.path, problem.message) not in seen:
            seen.add((problem.path, problem.message))
            out.append(problem)
    return out


class BenchmarkSpec(BaseModel):
    tool: str
    options: bench.BenchOptions

    @property
    def plugin(self) -> bench.Benchmark:
        return bench.get(self.tool)

    @property
    def metric_prefix(self) -> str:
        """What the names of this benchmark's metrics start with (netperf.TCP_RR.)."""
        prefix = getattr(self.plugin, "metric_prefix", None)
        return prefix(self.options) if prefix else f"{self.tool}."

    def describe(self) -> str:
        """netperf TCP_STREAM, plus where it runs when that is not the default (link 1, c->b, loopback on a, IPv6)."""
        where = []
        if self.options.link:
            where.append(f"link {self.options.link}")
        if self.options.peer == "self":
            where.append(f"loopback on {self.options.from_}" if self.options.from_ else "loopback")
        elif self.options.from_ or self.options.to:
            where.append(f"{self.options.from_ or ''}->{self.options.to or ''}")
        if self.options.family == 6:
            where.append("IPv6")
        label = self.plugin.describe(self.options)
        return f"{label} ({', '.join(where)})" if where else label


def benchmark_spec(item: Any, base: Path | None = None) -> BenchmarkSpec:
    """A benchmark's spec from its scenario entry; `base` (the scenario's directory) resolves relative paths."""
    if isinstance(item, BenchmarkSpec):
        return item
    if isinstance(item, str):
        item = {item: {}}
    if not isinstance(item, dict) or len(item) != 1:
        raise Problems(
            [Problem((), "each benchmark is one tool name with its options, e.g. {netperf: {test: TCP_RR}}")]
        )
    ((tool, options),) = item.items()
    if tool not in bench.REGISTRY:
        hint = did_you_mean(tool, bench.REGISTRY)
        raise Problems(
            [
                Problem(
                    (tool,),
                    f"unknown benchmark {shown(tool)}",
                    f"{hint + ' ' if hint else ''}benchmarks are: {', '.join(bench.REGISTRY)}",
                    at_key=True,
                )
            ]
        )
    if options is not None and not isinstance(options, dict):
        raise Problems([Problem((tool,), f"the options of {tool} are a mapping, e.g. {{seconds: 10}}")])
    try:
        parsed = bench.get(tool).Options.model_validate(options or {}, context={"base": base})
    except ValidationError as exc:
        raise Problems(pydantic_problems(exc.errors(), (tool,), bench.get(tool).Options)) from None
    return BenchmarkSpec(tool=tool, options=parsed)


class Statistics(_Strict):
    """How repeated results are summarized, and what spread the scenario accepts."""

    confidence: float = Field(95.0, gt=50, lt=100, description="level of the mean's interval, in %")
    max_cv: float | None = Field(None, description="the highest coefficient of variation accepted (%)")
    max_ci_width: float | None = Field(None, description="the widest interval accepted, full width in % of the mean")

    @field_validator("max_cv", "max_ci_width", mode="before")
    @classmethod
    def _percent(cls, value: Any, info: ValidationInfo) -> float | None:
        if value is None:
            return None
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", str(value))
        if not match or isinstance(value, (int, float)):
            raise ValueError(f"{info.field_name} {shown(value)} needs a unit: 10%")
        if not math.isfinite(percent := float(match[1])):
            raise ValueError(f"{info.field_name} {shown(value)} is too large")
        return percent


class Scenario(_Strict):
    name: str = Field(pattern=NAME_RE)
    description: str = ""
    nodes: dict[str, NodeOptions]
    kernel: KernelChoice | None = Field(None, description="every node's kernel: a Debian suite or {build: DIR}")
    links: list[Link] = Field(min_length=1)
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list)
    repeat: int = Field(1, ge=1, le=100, description="runs of each benchmark per cell")
    statistics: Statistics = Field(default_factory=Statistics)
    expect: list[str] = Field(default_factory=list, description="checks like 'netperf.TCP_RR.transaction_rate > 500'")
    prices: dict[str, float] = Field(
        default_factory=dict, description="price per card, by NIC model, for cost per Mbit/s"
    )
    currency: str = Field("", max_length=8, description="the prices' currency, e.g. USD")

    _kernel = field_validator("kernel", mode="before")(_kernel)

    @field_validator("prices", mode="before")
    @classmethod
    def _prices(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        problems = []
        for model, price in value.items():
            if nics.lookup(model) is None:
                hint = did_you_mean(model, nics.names())
                problems.append(
                    Problem(
                        (model,),
                        f"unknown NIC model {shown(model)}",
                        f"{hint + ' ' if hint else ''}prices are per catalog model",
                        at_key=True,
                    )
                )
            elif isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
                problems.append(Problem((model,), f"a price is a number, not {shown(price)}"))
        if problems:
            raise Problems(problems)
        return {nics.get(model).name: float(price) for model, price in value.items()}

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not all(isinstance(n, str) for n in value):
                raise Problems([Problem((), "nodes is a list of names or a mapping of name to options")])
            if len(set(value)) != len(value):
                seen: dict[str, int] = {}
                for i, name in enumerate(value):  # not value.count(): a long list would take quadratic time
                    if name in seen:
                        raise Problems([Problem((i,), f"node {shown(name)} twice")])
                    seen[name] = i
            return {name: {} for name in value}
        if isinstance(value, dict):
            return {name: ({} if options is None else options) for name, options in value.items()}
        return value

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _benchmarks(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list):
            return value
        specs, problems = [], []
        for i, item in enumerate(value):
            try:
                specs.append(benchmark_spec(item, (info.context or {}).get("base")))
            except Problems as exc:
                problems += [Problem((i, *p.path), p.message, p.hint, p.at_key) for p in exc.problems]
        if problems:
            raise Problems(problems)
        return specs

    @model_validator(mode="after")
    def _semantics(self) -> Scenario:
        problems: list[Problem] = []
        if len(self.nodes) < 2:
            problems.append(Problem(("nodes",), "a scenario needs at least two nodes"))
        for name in self.nodes:
            if not re.fullmatch(NAME_RE, name) or len(name) > 20:
                problems.append(
                    Problem(
                        ("nodes", name),
                        f"node name {shown(name)} must match [a-z0-9-]+ (at most 20 characters)",
                        at_key=True,
                    )
                )
        for i, link in enumerate(self.links):
            problems += [
                Problem(("links", i, *p.path), p.message, p.hint, p.at_key) for p in link_problems(link, self.nodes)
            ]
        problems += self._module_param_conflicts()
        problems += self._driver_conflicts()
        for i, spec in enumerate(self.benchmarks):
            problems += [
                Problem(("benchmarks", i, spec.tool, *p.path), p.message, p.hint, p.at_key)
                for p in benchmark_problems(spec, self)
            ]
        for i, text in enumerate(self.expect):
            problems += [Problem(("expect", i), p.message, p.hint) for p in expectation_problems(text, self)]
        if problems:
            raise Problems(problems)
        return self

    def _module_param_conflicts(self) -> list[Problem]:
        """A driver has one value of a parameter per node: two links of one driver cannot ask two."""
        problems: list[Problem] = []
        seen: dict[tuple[str, str, str], tuple[int, int | str]] = {}
        for i, link in enumerate(self.links):
            for node, params in link.module_params.items():
                module = _driving_module(link, node)
                if module is None:
                    continue
                for name, value in params.items():
                    key = (node, module_key(module), name)
                    if key in seen and str(seen[key][1]) != str(value):
                        end = (node,) if "module_params" in link._given_per_end else ()
                        problems.append(
                            Problem(
                                ("links", i, "module_params", *end, name),
                                f"node {node}'s {module} driver gets {name}={value} here and "
                                f"{name}={seen[key][1]} on link {seen[key][0]}",
                                "a module parameter has one value per node: give both links the same",
                            )
                        )
                    seen.setdefault(key, (i, value))
        return problems

    def _driver_conflicts(self) -> list[Problem]:
        """One driver per node and card PCI ID: the guest binds a card by its ID, so two links of cards with one
        ID on a node cannot ask two drivers (or one a driver, one in-tree); module_params need the module named."""
        problems: list[Problem] = []
        seen: dict[tuple[str, str], tuple[int, DriverChoice]] = {}
        for i, link in enumerate(self.links):
            for node in dict.fromkeys(link.between):
                found = nics.lookup(_model_at(link.nic, node) or "")
                if found is None:
                    continue
                key, choice = (node, found.pci_id.lower()), link.driver.get(node, DriverChoice())
                end = (node,) if "driver" in link._given_per_end else ()
                if not choice.is_default and link.module_params.get(node) and not choice.name:
                    problems.append(
                        Problem(
                            ("links", i, "driver", *end),
                            f"module_params go to the module that drives node {node}'s card, and driver {choice} "
                            "does not say which module that is",
                            "give it name: (the module it builds, e.g. name: e1000e), or drop module_params",
                        )
                    )
                if key not in seen:
                    seen[key] = (i, choice)
                    continue
                j, other = seen[key]
                if other == choice:
                    continue
                # point at a driver setting: this link's, or the earlier one's when this end is on in-tree
                (here, mine), (there, theirs) = (
                    ((i, choice), (j, other)) if not choice.is_default else ((j, other), (i, choice))
                )
                end = (node,) if "driver" in self.links[here]._given_per_end else ()
                problems.append(
                    Problem(
                        ("links", here, "driver", *end),
                        f"node {node}'s {found.pci_id} cards get driver {mine} here and {theirs} on link {there}",
                        "the guest binds a card by its PCI ID, so a node's cards of one ID take one driver: "
                        "give both links the same",
                    )
                )
        return problems

    def topology(self) -> Topology:
        ports: dict[str, list[Port]] = {name: [] for name in self.nodes}
        wires = []
        for i, link in enumerate(self.links):
            for lane in range(link.count):
                ends = tuple(
                    Port(
                        node,
                        i,
                        lane,
                        nics.get(link.model_for(node)).name,
                        port_ifname(i, lane, link.count),
                        link.knobs_of(node),
                        link.driver.get(node),
                    )
                    for node in link.between
                )
                for port in ends:
                    ports[port.node].append(port)
                wires.append(Wire(i, lane, ends, link.switch))
        nodes = tuple(
            NodeSpec(
                name,
                index,
                options.cpus,
                options.memory,
                tuple(ports[name]),
                self.kernel_of(name),
                tuple(f"{module}.{param}={value}" for (module, param), value in self.module_params(name).items()),
                self.addons(),
                self.drivers(name),
            )
            for index, (name, options) in enumerate(self.nodes.items())
        )
        return Topology(nodes, tuple(wires))

    def addons(self) -> tuple[str, ...]:
        """The add-ons every node carries: those the scenario's benchmarks ask for (GuestNeeds.addons), sorted."""
        return tuple(sorted({name for spec in self.benchmarks for name in spec.plugin.guest.addons}))

    def module_params(self, node: str) -> dict[tuple[str, str], int | str]:
        """(driver module, parameter) -> value, from the links of the node's NICs (checked not to conflict).

        A parameter goes to the module that drives the card: the driver's `name` when the link gives one,
        else the card's default module."""
        params: dict[tuple[str, str], int | str] = {}
        for link in self.links:
            if node in link.between:
                module = module_key(_driving_module(link, node) or nics.get(link.model_for(node)).module)
                for name, value in link.module_params.get(node, {}).items():
                    params.setdefault((module, name), value)
        return params

    def drivers(self, node: str) -> tuple[tuple[str, DriverChoice], ...]:
        """(card PCI ID, the driver those cards take instead) on the node, sorted; checked to be one per ID."""
        found: dict[str, DriverChoice] = {}
        for link in self.links:
            if (choice := link.driver.get(node)) is not None:
                found.setdefault(nics.get(link.model_for(node)).pci_id.lower(), choice)
        return tuple(sorted(found.items(), key=lambda item: item[0]))

    def kernel_of(self, node: str) -> KernelChoice | None:
        """The node's kernel; None for the image's own (bookworm), however the scenario says it."""
        choice = self.nodes[node].kernel or self.kernel
        return None if choice is None or choice.is_default else choice


def _model_at(nic: str | dict[str, str] | None, end: str) -> str | None:
    """The NIC model of an end from a link's `nic:` (one model for every end, or end -> model); None for an end
    it names no model for (a problem reported on its own)."""
    return nic if isinstance(nic, str) else (nic or {}).get(end)


def _driving_module(link: Link, node: str) -> str | None:
    """The module that drives an end's card: its driver's `name`, else the card's default one (None: no such card)."""
    choice = link.driver.get(node)
    if choice is not None and choice.name:
        return choice.name
    found = nics.lookup(_model_at(link.nic, node) or "")
    return found.module if found is not None else None


def link_problems(link: Link, nodes: dict[str, NodeOptions]) -> list[Problem]:
    problems = []
    for j, node in enumerate(link.between):
        if node not in nodes:
            problems.append(
                Problem(
                    ("between", j),
                    f"unknown node {shown(node)}",
                    did_you_mean(node, nodes) or f"nodes are: {listing(nodes)}",
                )
            )
    if len(set(link.between)) != len(link.between):
        problems.append(Problem(("between",), "a node appears twice in the same link"))
    if link.bond is not None and link.count < 2:
        problems.append(
            Problem(
                ("bond",),
                f"bonding needs at least two ports per end; this link has count {link.count}",
                "set count: 2 or more, or remove bond",
            )
        )
    per_end = {} if isinstance(link.nic, str) else link.nic
    for node in per_end:
        if node not in link.between:
            problems.append(
                Problem(
                    ("nic", node), f"{shown(node)} is not an end of this link ({listing(link.between)})", at_key=True
                )
            )
    # {} (or a mapping with none of the ends) names no model for any end: the same mistake as a missing end
    missing = [node for node in link.between if not isinstance(link.nic, str) and node not in per_end]
    if missing:
        ends = "end" if len(missing) == 1 else "ends"
        problems.append(Problem(("nic",), f"no NIC model for {ends} {', '.join(map(repr, missing))}"))
    models = (
        [(("nic",), link.nic)]
        if isinstance(link.nic, str)
        else [(("nic", node), model) for node, model in per_end.items()]
    )
    for path, model in models:
        found = nics.lookup(model)
        if found is None:
            hint = did_you_mean(model, nics.names())
            problems.append(
                Problem(
                    path,
                    f"unknown NIC model {shown(model)}",
                    f"{hint + ' ' if hint else ''}run 'niclab nics' for the list",
                )
            )
        elif link.mtu > found.max_mtu:
            problems.append(
                Problem(
                    ("mtu",),
                    f"MTU {link.mtu} is above the {found.name} driver's maximum ({found.max_mtu})",
                    f"use an MTU up to {found.max_mtu}, a model that takes jumbo frames, or exclude the cell",
                )
            )
    return problems


def expectation_problems(text: str, scenario: Scenario) -> list[Problem]:
    try:
        expectation = parse(text)
    except ExpectationError as exc:
        return [Problem((), exc.message, exc.hint)]
    tool = expectation.name.split(".", 1)[0]
    measuring = [s for s in scenario.benchmarks if s.tool == tool and expectation.name.startswith(s.metric_prefix)]
    if not measuring:
        return [
            Problem(
                (),
                f"no benchmark of this scenario measures {expectation.name}",
                f"add a {tool} benchmark that does, or drop the expectation",
            )
        ]
    if not any(spec.options.peer == expectation.peer for spec in measuring):
        if expectation.peer == "self":
            return [
                Problem(
                    (),
                    f"no benchmark of this scenario measures {expectation.name} over loopback",
                    f"give its {tool} benchmark a twin with peer: self, or drop [peer=self]",
                )
            ]
        return [
            Problem(
                (),
                f"{expectation.name} is measured here only over loopback (peer: self), not across a link",
                f"write {expectation.name}[peer=self] to judge the loopback figure",
            )
        ]
    return []


def benchmark_problems(spec: BenchmarkSpec, scenario: Scenario) -> list[Problem]:
    options = spec.options
    if options.link >= len(scenario.links):
        count = len(scenario.links)
        known = "the scenario has one link, link 0" if count == 1 else f"links are numbered 0 to {count - 1}"
        return [Problem(("link",), f"there is no link {options.link}; {known}")]
    link = scenario.links[options.link]
    problems = []
    if options.family == 6 and 6 not in link.ip and options.peer != "self":
        problems.append(
            Problem(
                ("family",),
                f"family 6 on link {options.link}, which has no IPv6 (ip: 4"
                + (f", its MTU {link.mtu} being below 1280)" if link.mtu < IPV6_MIN_MTU else ")"),
                "give the link ip: [4, 6], or measure with family 4",
            )
        )
    for field in ("from_", "to"):
        node = getattr(options, field)
        if node is not None and node not in link.between:
            on_scenario = node in scenario.nodes
            problems.append(
                Problem(
                    (field.rstrip("_"),),
                    f"node {shown(node)} is not on link {options.link} ({listing(link.between)})"
                    if on_scenario
                    else f"unknown node {shown(node)}",
                    "" if on_scenario else did_you_mean(node, scenario.nodes),
                )
            )
    if options.peer == "self" and options.to is not None:
        problems.append(
            Problem(
                ("to",),
                "a benchmark with peer: self runs its server on its client's node, so it takes no `to`",
                "drop `to`, or `peer: self` to measure across the link",
            )
        )
    elif options.from_ is not None and options.from_ == options.to:
        problems.append(Problem(("to",), "a benchmark runs between two different nodes"))
    # a plug-in's own check of what the client's node boots (the kernel's selftests need a kernel that has them)
    own = getattr(spec.plugin, "problems", None)
    client = options.from_ or link.between[0]
    if own is not None and not problems and client in scenario.nodes:
        problems += own(options, scenario.kernel_of(client))
    # and of the link it measures (pktgen: its frames against the link's MTU)
    on_link = getattr(spec.plugin, "link_problems", None)
    if on_link is not None and not problems:
        problems += on_link(options, link, client)
    return problems


PARTIAL_ROUNDS = 8  # keys a link may lose before its remaining settings are checked for what depends on them


def partial_problems(raw: Any) -> list[Problem]:
    """What a scenario's checks across fields find in the parts of `raw` that are sound, when the whole
    failed to validate: pydantic checks fields first and the links' nodes and NIC models only once every
    field passed, so without this a file showed a link's unknown node or NIC model in a second round. A
    link is validated without the keys that failed (so `nic: E1000` is said beside `mtu: 99999`)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("links"), list):
        return []
    given = raw.get("nodes")
    if not isinstance(given, list | dict) or not all(isinstance(name, str) for name in given):
        return []
    nodes = {name: NodeOptions() for name in given}
    problems: list[Problem] = []
    for i, given in enumerate(raw["links"]):
        link = _sound_part(given)
        if link is not None:
            problems += [
                Problem(("links", i, *p.path), p.message, p.hint, p.at_key) for p in link_problems(link, nodes)
            ]
    return problems


def _sound_part(given: Any) -> Link | None:
    """The link `given` describes, without the keys that failed validation (None when between fails)."""
    if not isinstance(given, dict):
        return None
    for _ in range(PARTIAL_ROUNDS):
        try:
            return Link.model_validate(given)
        except ValidationError as exc:
            failed = {err["loc"][0] for err in exc.errors() if err["loc"]}
            if not failed or "between" in failed or "nic" in failed:
                return None
            given = {key: value for key, value in given.items() if key not in failed}
    return None
