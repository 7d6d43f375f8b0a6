"""What several verbs of `niclab` share: the backend's options, the lab's URI guard, a count's type."""

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
