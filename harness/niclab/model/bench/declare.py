"""What a benchmark plug-in declares besides running: what its guests need and what the report shows.

Plain data, read by the layers above: the kernel check asks for `GuestNeeds.modules`,
a unit test checks the image recipes hold `packages` and `programs`, and the report
draws `Shows`: table rows, figures of the kinds it knows how to draw, findings. The
drawing stays in niclab.ui.report; a benchmark only says which metrics go where.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class KernelModule:
    """A kernel module the benchmark loads in the guest, for the kernel check of a developer's tree."""

    name: str  # nfsd (as modprobe takes it, with _)
    option: str  # its config option without CONFIG_: NFSD
    why: str  # what niclab uses it for, in the check's message
    depends: tuple[str, ...] = ()  # the menus and options it depends on (Kconfig): olddefconfig drops it without


@dataclass(frozen=True)
class GuestNeeds:
    """What the guest image must hold for the benchmark (the recipes are checked against it, not built from it)."""

    packages: tuple[str, ...] = ()  # Debian packages (a [[build]] source counts too)
    programs: tuple[str, ...] = ()  # absolute paths the micro image copies into its initramfs (`binaries`)
    modules: tuple[KernelModule, ...] = ()
    # Add-on archives (images/<name>/, `addon = true`) added to the initramfs of every node of a scenario that
    # runs the benchmark, whatever image and kernel it boots: the selftests' Python, socat and OpenSSH
    addons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A row of the summary table: the metric's name and the row's label (tcp, lmbench lat_tcp)."""

    metric: str
    label: str


@dataclass(frozen=True)
class Series:
    """One metric in a figure, under its legend label; `order` places it among other benchmarks' series."""

    metric: str
    label: str
    order: int = 0
    one_way: bool = False  # a time one way (half a round trip, as NetPIPE reports), never on a round trip's axis


#: The figures the report knows how to draw:
#: - "throughput", "latency": the report's shared bars per card; benchmarks add series, the report
#:   owns the title and caption.
#: - "bars": the benchmark's own bars per card, one bar per series (title, caption, unit given).
#: - "pattern-bars": the benchmark's own bars, one group per series, one bar per card.
#: - "size-curve": curves against message size from the measurement's `extra["curve"]` ([[bytes,
#:   Mbit/s, one-way µs], ...]) of its one series' metric; per card and per MTU.
#: - "against-mtu": the first series a cell has, against the MTU axis (one line per card).
#: - "against-ports": the series' metric against the number of bonded ports, beside N × one port.
FigureKind = Literal["throughput", "latency", "bars", "pattern-bars", "size-curve", "against-mtu", "against-ports"]


@dataclass(frozen=True)
class Figure:
    kind: FigureKind
    series: tuple[Series, ...]
    section: str = ""  # the report's section it goes in (the shared kinds have theirs)
    title: str = ""  # the figure's title ("size-curve": the name its titles start with)
    caption: str = ""  # after "SCENARIO: "
    unit: str = ""  # the value axis
    order: int = 0  # place in the report: sections come in the order of their first figure
    link: int | None = None  # only this link's summaries (None: the first a cell has)


@dataclass(frozen=True)
class Dip:
    """A finding: a point of the `size-curve` of `metric` well below both neighbours (NetPIPE at MTU 4000)."""

    metric: str
    label: str  # NetPIPE


@dataclass(frozen=True)
class Shortfall:
    """A finding: `part` below `share` of `whole` in a cell (UDP received against sent).

    `text` is formatted with whole, part (the means) and percent (part / whole x 100).
    """

    kind: str  # udp-receiver
    whole: str
    part: str
    share: float
    text: str


Finding = Dip | Shortfall


@dataclass(frozen=True)
class Shows:
    """What the report shows of the benchmark's metrics."""

    rows: tuple[Row, ...] = ()
    figures: tuple[Figure, ...] = ()
    findings: tuple[Finding, ...] = ()
    peaks: tuple[str, ...] = ()  # throughput metrics (Mbit/s) a card's cost per Mbit/s may be taken over
