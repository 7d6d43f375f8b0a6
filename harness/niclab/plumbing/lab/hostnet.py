"""What the host's own networking uses: taking a card it relies on away cuts the host off.

From `ip -j addr` and `ip -j route` (IPv4 and IPv6, every table): a card is used when its interface, or a
bridge, bond or VLAN on it, carries an address or a route. The default route's devices are never passed
through, nor a card in their IOMMU group (docs/lab.md, "Reading the doctor").
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import cached_property
from typing import Any, Protocol

from niclab.base import jsonbound
from niclab.base.errors import NiclabError

#: Runs a command (argv) and returns its standard output.
Runner = Callable[[list[str]], str]

_IGNORED_ROUTE_TYPES = {"local", "broadcast", "multicast", "anycast", "unreachable", "prohibit", "blackhole"}


def run_command(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    except FileNotFoundError:
        raise NiclabError(f"{argv[0]} not found: apt install iproute2") from None
    except subprocess.CalledProcessError as exc:
        raise NiclabError(f"{' '.join(argv)} failed: {exc.stderr.strip() or f'status {exc.returncode}'}") from None
    except subprocess.TimeoutExpired:
        raise NiclabError(f"{' '.join(argv)} did not answer in 30 s") from None


class HostNetError(NiclabError):
    """A host's `ip -j` output that niclab refuses: its cards' use by the host cannot be judged."""


def _json(text: str, argv: list[str], where: str) -> list[dict]:
    said = f"{where}{' '.join(argv)} printed"
    try:
        data = jsonbound.loads(text or "[]")
    except jsonbound.TooDeep as exc:
        raise HostNetError(f"{said} JSON {exc}") from None
    except ValueError:
        looks = text.lstrip()[:1] in ("[", "{")
        raise HostNetError(
            f"{said} JSON that does not parse" if looks else f"{said} no JSON; is iproute2 older than 4.14?"
        ) from None
    if not isinstance(data, list):
        raise HostNetError(f"{said} JSON that is not a list of links or routes")
    return [item for item in data if isinstance(item, dict)]


def _link(item: dict) -> dict | None:
    """A link of `ip -j addr` as the checks read it (another host's output is untrusted): its name, the
    names it is built on, its addresses; None without a name."""
    if not isinstance(item.get("ifname"), str):
        return None
    infos = item.get("addr_info")
    addresses = [
        {"local": info["local"], "prefixlen": info.get("prefixlen")}
        for info in (infos if isinstance(infos, list) else [])
        if isinstance(info, dict) and isinstance(info.get("local"), str)
    ]
    return {
        "ifname": item["ifname"],
        "addr_info": addresses,
        **{key: item[key] for key in ("master", "link") if isinstance(item.get(key), str)},
    }


def _route(item: dict) -> dict:
    """A route of `ip -j route` as the checks read it: its text fields, and the devices of its next hops."""
    route: dict[str, Any] = {key: value for key, value in item.items() if isinstance(value, str) and key != "nexthops"}
    hops = item.get("nexthops")
    if isinstance(hops, list):
        route["nexthops"] = [
            {"dev": hop["dev"]} for hop in hops if isinstance(hop, dict) and isinstance(hop.get("dev"), str)
        ]
    return route


class NetReader(Protocol):
    """What the doctor's card checks read of a host's networking: HostNet on this machine (or, with a
    runner that reaches another host, on that one); UnknownNet on a host it cannot read."""

    def uses(self, ifname: str) -> list[str]: ...
    def default_route_interfaces(self) -> list[str]: ...
    def unread_host(self) -> str | None:
        """The host whose addresses and routes this reader cannot see (the checks that need them are then
        not made, and the doctor says so); None when it sees them."""
        ...


class UnknownNet:
    """A lab host reached through libvirt only: its addresses and routes are not known (libvirt has none).

    It says nothing is in use and no default route leaves anywhere, and `unread_host` names the host, so
    the doctor reports the host-use and default-route checks as not made rather than passed.
    """

    def __init__(self, host: str):
        self.host = host

    def uses(self, ifname: str) -> list[str]:
        return []

    def default_route_interfaces(self) -> list[str]:
        return []

    def unread_host(self) -> str | None:
        return self.host


class HostNet:
    """One look at the host's interfaces and routes (read once, on first use)."""

    def __init__(self, runner: Runner = run_command, host: str | None = None):
        self.runner = runner
        self.host = host  # None: this machine; else the lab host the runner reaches, named in errors

    def unread_host(self) -> str | None:
        return None

    def read(self) -> None:
        """Read the interfaces and routes now: HostNetError (one line naming the host) if they are refused."""
        self._links, self._routes  # noqa: B018

    def _ip(self, *args: str) -> list[dict]:
        argv = ["ip", "-j", *args]
        return _json(self.runner(argv), argv, f"lab host {self.host}: " if self.host else "")

    @cached_property
    def _links(self) -> list[dict]:
        return [link for item in self._ip("addr") if (link := _link(item)) is not None]

    @cached_property
    def _built(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """What is built on each interface (a VLAN on it, the bridge or bond it is a port of) and what each is
        built on (a bridge's or bond's ports, a VLAN's base): read once, so the walks are linear in the links."""
        upper: dict[str, list[str]] = {}
        lower: dict[str, list[str]] = {}
        for link in self._links:
            name = link["ifname"]
            if isinstance(base := link.get("link"), str):
                upper.setdefault(base, []).append(name)
            if isinstance(master := link.get("master"), str):
                upper.setdefault(name, []).append(master)
                lower.setdefault(master, []).append(name)
        for link in self._links:  # a VLAN's base after the ports, as `ip` lists them
            if isinstance(base := link.get("link"), str):
                lower.setdefault(link["ifname"], []).append(base)
        return upper, lower

    @cached_property
    def _addresses(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for link in self._links:
            found[link["ifname"]] = [
                f"{info['local']}/{info['prefixlen']}"
                for info in link.get("addr_info", [])
                if "local" in info and not info["local"].lower().startswith("fe80:")
            ]
        return found

    def addresses(self) -> dict[str, list[str]]:
        """ifname → its addresses as "address/prefix" (IPv6 link-local ones left out: every link has one)."""
        return self._addresses

    @cached_property
    def _routes(self) -> list[dict]:
        found = self._ip("route", "show", "table", "all") + self._ip("-6", "route", "show", "table", "all")
        return [_route(item) for item in found]

    @cached_property
    def _used_routes(self) -> list[dict]:
        return [
            route
            for route in self._routes
            if route.get("type", "unicast") not in _IGNORED_ROUTE_TYPES
            and not str(route.get("dst", "")).lower().startswith(("fe80:", "ff00:"))
        ]

    @cached_property
    def _routes_by_dev(self) -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for route in self._used_routes:
            for dev in sorted(_route_devs(route)):
                found.setdefault(dev, []).append(route)
        return found

    def routes(self) -> list[dict]:
        """The routes that send traffic somewhere: not the kernel's local, broadcast or link-local ones."""
        return self._used_routes

    def uses(self, ifname: str) -> list[str]:
        """Why the host needs `ifname`, one reason each, e.g. "carries the default route"; empty: it does not."""
        reasons: list[str] = []
        for name in self._upper(ifname):
            via = "" if name == ifname else f" (via {name})"
            reasons += [f"carries {address}{via}" for address in self._addresses.get(name, [])]
            for route in self._routes_by_dev.get(name, []):
                if route.get("protocol") == "kernel":
                    continue  # a kernel route only follows from an address, already said
                table = route.get("table", "main")
                where = "" if table == "main" else f" (table {table})"
                family = "IPv6 " if ":" in str(route.get("gateway", route.get("dst", ""))) else ""
                if route.get("dst") == "default":
                    reasons.append(f"carries the {family}default route{where}{via}")
                else:
                    reasons.append(f"carries a route to {route.get('dst')}{where}{via}")
        return list(dict.fromkeys(reasons))  # `ip -6 route show table all` may list one route twice

    def default_route_interfaces(self) -> list[str]:
        """The interfaces a default route (any table, IPv4 or IPv6) leaves by, and those they are built on,
        down to the ones a device has: a bridge's ports, a bond's slaves, a VLAN's or macvlan's base."""
        found = [dev for route in self.routes() if route.get("dst") == "default" for dev in sorted(_route_devs(route))]
        return _closure(list(dict.fromkeys(found)), self._built[1])

    def _upper(self, ifname: str) -> list[str]:
        """`ifname` and what is built on it: the bridge or bond it is a port of, VLANs on it, and so on up."""
        return _closure([ifname], self._built[0])


def _closure(start: list[str], edges: dict[str, list[str]]) -> list[str]:
    """`start` and everything `edges` reaches from it, in the order found; each name once."""
    found = list(start)
    seen = set(found)
    for name in found:  # grows while iterating
        for other in edges.get(name, []):
            if other not in seen:
                seen.add(other)
                found.append(other)
    return found


def _route_devs(route: dict) -> set[str]:
    return {route["dev"]} if "dev" in route else {hop["dev"] for hop in route.get("nexthops", []) if "dev" in hop}
