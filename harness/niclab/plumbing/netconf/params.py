"""Read back the driver module parameters a node booted with (`module_params:`, on its kernel command line).

A parameter the driver shows in /sys/module/<driver>/parameters is compared
with what was asked. Many drivers keep theirs out of sysfs (e1000's are all
private); for those the driver's own kernel log lines are the evidence, and
both go into the cell's provenance.
"""

from __future__ import annotations

import re
import shlex

from niclab.plumbing.guestsh import sections

LOG_LINES = 8  # the driver's last kernel log lines kept per parameter


def asked(cmdline: tuple[str, ...]) -> dict[str, str]:
    """'e1000.InterruptThrottleRate=8000' words -> {'e1000.InterruptThrottleRate': '8000'}."""
    return dict(word.split("=", 1) for word in cmdline if "=" in word and "." in word.split("=", 1)[0])


def readback_script(params: dict[str, str]) -> str:
    lines = []
    for key in params:
        module, _, name = key.partition(".")
        m, n = shlex.quote(module), shlex.quote(name)
        logged = re.sub("[-_]", "[-_]", module)  # the kernel log may spell ne2k_pci ne2k-pci
        lines += [
            f"echo '[param {key}]'",
            f'[ -r /sys/module/{m}/parameters/{n} ] && echo "sysfs=$(cat /sys/module/{m}/parameters/{n})"',
            f"dmesg | grep -E '^\\[[ 0-9.]+\\] {logged}[ :]' | tail -n {LOG_LINES} | sed 's/^/log=/'",
            "true",
        ]
    return "\n".join(lines) + "\n"


def parse_readback(text: str, params: dict[str, str]) -> tuple[dict[str, dict], list[str]]:
    """(provenance per parameter, the ones sysfs shows with another value than asked)."""
    found, problems = {}, []
    named = sections(text)[1]
    for key, value in params.items():
        lines = named.get(f"param {key}", [])
        sysfs = next((line[len("sysfs=") :] for line in lines if line.startswith("sysfs=")), None)
        log = [line[len("log=") :].split("] ", 1)[-1] for line in lines if line.startswith("log=")]
        found[key] = {"asked": value, "sysfs": sysfs, "log": log}
        name = key.partition(".")[2]
        ignored = [line for line in log if f"unknown parameter '{name}'" in line]
        if ignored:  # the module loaded without it
            problems.append(f"module parameter {key}: the driver said {ignored[0]!r}")
        elif sysfs is not None and sysfs.strip() != value and not _same(sysfs.strip(), value):
            problems.append(f"module parameter {key} is {sysfs.strip()} in /sys/module, asked {value}")
    return found, problems


def _same(shown: str, value: str) -> bool:
    """Booleans read back as Y/N."""
    return {"Y": "1", "N": "0"}.get(shown, shown) == {"y": "1", "n": "0", "true": "1", "false": "0"}.get(
        value.lower(), value
    )
