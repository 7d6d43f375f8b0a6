"""Prove which module drives each card that a scenario's `driver:` gives another driver.

Before the network is configured, one guest command per node reads each such port's driver module, its
version, srcversion, taint and GNU build id, which must be that of the .ko niclab built (drivers.layer); a
card with no interface is looked up by PCI ID, and the kernel's last words say why it was not bound.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from niclab.model import nics
from niclab.model.driver_choice import module_key
from niclab.model.topology import Port
from niclab.plumbing.drivers.asked import AskedModule
from niclab.plumbing.guestsh import MODULE_FACTS, note_build_id, sections

LOG_LINES = 3  # the kernel's last lines about an unbound card


def _pci_words(port: Port) -> str:
    found = nics.lookup(port.model)
    if found is None or ":" not in found.pci_id:
        return ""
    vendor, device = found.pci_id.split(":", 1)
    return f"0x{vendor.lower()}:0x{device.lower()}"


def proof_script(ports: Mapping[Port, tuple[str, AskedModule]], sys: str = "/sys", proc: str = "/proc") -> str:
    """The guest command for ports (-> their MAC and the module asked): one `[port link0]` section each.
    `sys`, `proc`: where sysfs and procfs are (a test's own trees)."""
    # `used`: the devices found so far (two unbound cards of one PCI ID are two ports)
    lines = [f"SYS={shlex.quote(sys)}; PROC={shlex.quote(proc)}", MODULE_FACTS, "used="]
    for port, (mac, asked) in ports.items():
        pci = shlex.quote(_pci_words(port))
        module = shlex.quote(asked.module)
        lines += [
            f"echo '[port {port.ifname}]'",
            'i=; for f in "$SYS"/class/net/*/address; do '
            f'[ "$(cat "$f" 2>/dev/null)" = {shlex.quote(mac)} ] && i=${{f%/address}}; done',
            'd=; [ -n "$i" ] && d=$(readlink -f "$i/device")',
            f'if [ -z "$d" ] && [ -n {pci} ]; then for p in "$SYS"/bus/pci/devices/*; do '
            'case " $used " in *" $p "*) continue ;; esac; '
            f'[ "$(cat "$p/vendor"):$(cat "$p/device")" = {pci} ] && [ ! -e "$p/driver" ] && d=$p && break; done; fi',
            'used="$used $d"; echo "iface=${i##*/}"; echo "pci=${d##*/}"',
            'if [ -n "$d" ]; then module_facts "$d"; b=$(readlink "$d/driver"); echo "bound=${b##*/}"; fi',
            f'echo "loaded=$(grep -c {shlex.quote("^" + module_key(asked.module) + " ")} "$PROC/modules")"',
            # the kernel's words about the card, else about the module
            'l=; [ -n "$d" ] && l=$(dmesg | grep -F -e "${d##*/}")',
            f'[ -n "$l" ] || l=$(dmesg | grep -F -e {module}); '
            f'[ -z "$l" ] || printf "%s\\n" "$l" | tail -n {LOG_LINES} | sed "s/^/log=/"',
        ]
    return "\n".join(lines) + "\n"


def check(
    node: str, ports: Mapping[Port, tuple[str, AskedModule]], text: str
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """What the guest printed: (`port NAME` -> what drives it, for provenance; what differs from what was asked)."""
    named = sections(text)[1]
    observed: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for port, (_, asked) in ports.items():
        values: dict[str, str] = {}
        log: list[str] = []
        for line in named.get(f"port {port.ifname}", []):
            key, _, value = line.partition("=")
            if key == "log":
                log.append(value.strip())
            else:
                values[key] = value.strip()
        module = values.get("module", "")
        found = note_build_id(values.get("build_note", ""))
        observed[f"port {port.ifname}"] = {
            "module": module,
            "bound": values.get("bound", ""),
            "version": values.get("module_version", ""),
            "srcversion": values.get("srcversion", ""),
            "taint": values.get("taint", ""),
            "build_id": found,
            "asked": asked.choice,
            "source_hash": asked.source_hash if module and module_key(module) == module_key(asked.module) else "",
            "origin": asked.origin,
        }
        card = f"{node}/{port.ifname} ({port.model} card{' ' + values['pci'] if values.get('pci') else ''})"
        if not module and values.get("bound"):
            problems.append(
                f"{card}: driver {values['bound']}, built into the kernel, drives it; the scenario asks "
                f"{asked.module} ({asked.choice}): build the kernel with {values['bound']} as a module (=m)"
            )
        elif not module:
            said = f"; the kernel said: {' | '.join(log)}" if log else ""
            loaded = "is loaded but did not take it" if values.get("loaded", "0") not in ("", "0") else "is not loaded"
            who = asked.module if asked.choice == asked.module else f"{asked.module} ({asked.choice})"
            problems.append(f"{card}: no driver is bound; {who} {loaded}{said}")
        elif module_key(module) != module_key(asked.module):
            instead = f" instead of {asked.replaces}" if asked.replaces else ""
            problems.append(
                f"{card}: module {module} drives it, the scenario asks {asked.module} ({asked.choice}){instead}"
            )
        elif asked.build_id and found != asked.build_id:
            problems.append(
                f"{card}: module {module} drives it, but its build id is {found or 'unknown'}, not the one built "
                f"from {asked.choice} ({asked.build_id}): another build of it was loaded"
            )
    return observed, problems
