"""What several verbs of `niclab` share: the backend's options, the lab's URI guard, a count's type, picking
cells (--cell, -k) and overriding axes (-D)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from niclab.plumbing.backends import BackendOption


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """--backend, --lab and the options the backends declare that matter before anything starts."""
    from niclab.plumbing.backends import declared_options, defaults, registry

    plain, with_lab = defaults()
    parser.add_argument(
        "--backend",
        choices=tuple(registry()),
        help="how nodes are realized: "
        + "; ".join(f"{p.name}: {p.summary}" for p in registry().values())
        + f" (default: {plain}, or {with_lab} with --lab)",
    )
    parser.add_argument("--lab", metavar="LAB_YAML", help="a lab inventory: run on its real cards and cables")
    add_allow_uri_params(parser)
    add_declared(parser, declared_options(starts_nodes=False))


def add_start_options(parser: argparse.ArgumentParser) -> None:
    """The options the backends declare for a run that starts nodes."""
    from niclab.plumbing.backends import declared_options

    add_declared(parser, [option for option in declared_options() if option.starts_nodes])


def add_declared(parser: argparse.ArgumentParser, options: list[BackendOption]) -> None:
    for option in options:
        if option.flag:
            parser.add_argument(f"--{option.name}", action="store_true", help=option.help)
        else:
            parser.add_argument(f"--{option.name}", metavar=option.metavar, default=option.default, help=option.help)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1; give 1 or more")
    return value


def add_allow_uri_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-uri-params",
        action="store_true",
        help="accept libvirt URI parameters such as command= or socket= in the lab inventory "
        "(they make libvirt run a program as you: only for an inventory you trust)",
    )


def add_cell_options(parser: argparse.ArgumentParser, what: str = "run") -> None:
    """--cell (an id, or some of its axes in any order; repeatable) and -k (pytest's keyword expression)."""
    parser.add_argument(
        "--cell",
        action="append",
        metavar="ID",
        help=f"{what} only this cell: its id, or some of its axes in any order (nic=e1000 picks every cell "
        "with that NIC); repeat for several",
    )
    parser.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help=f"{what} only the cells whose ids match, as pytest's -k reads names: words joined by and, or, not "
        'and parentheses, e.g. -k "e1000 and not 9000"',
    )


def add_axis_option(parser: argparse.ArgumentParser) -> None:
    """-D AXIS=VALUE[,VALUE...]: the matrix axis takes these values (or a new axis for a ${AXIS} in the file)."""
    parser.add_argument(
        "-D",
        dest="axes",
        action="append",
        type=axis_override,
        metavar="AXIS=VALUE[,VALUE...]",
        help="give a matrix axis these values without editing the file (e.g. -D mtu=9000 or -D nic=e1000,virtio); "
        "an axis the matrix lacks is set if the file uses ${AXIS}; repeat for several",
    )


def axis_override(text: str) -> tuple[str, list]:
    """`mtu=1500,9000` -> ("mtu", [1500, 9000]): each value read as YAML reads a scalar (numbers stay numbers)."""
    import yaml

    axis, _, values = text.partition("=")
    if not axis.strip() or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not AXIS=VALUE[,VALUE...], e.g. mtu=9000")
    parsed = []
    for value in values.split(","):
        try:
            item = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            item = value.strip()
        parsed.append(item if isinstance(item, str | int | float | bool) else value.strip())
    return axis.strip(), parsed


def overrides(args: argparse.Namespace) -> dict[str, list]:
    """The -D overrides, the last of an axis winning."""
    return dict(getattr(args, "axes", None) or [])
