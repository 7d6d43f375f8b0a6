"""Shell functions niclab's guest scripts share (POSIX sh: dash or busybox).

The scripts call iproute2's `ip` (netconf's `ip -batch -`): the images' /bin/sh is dash, and busybox's own
sh would run busybox's `ip` applet, which has no -batch.
"""

# kv KEY FILE: "KEY=<the file's first line>" ("KEY=" if it cannot be read), with the shell's own `read`:
# `$(cat FILE)` forks and execs a process, about 15 ms under TCG, and the scripts read dozens of sysfs files.
KV = 'kv() { v=; read -r v 2>/dev/null < "$2" || true; echo "$1=$v"; }'

# by_mac MAC: the name of the interface with that MAC (drivers load in modalias
# order, so eth0, eth1 … say nothing about which cable is which).
BY_MAC = (
    'by_mac() { for d in /sys/class/net/*; do a=; read -r a 2>/dev/null < "$d/address" || true; '
    '[ "$a" = "$1" ] && { echo "${d##*/}"; return 0; }; '
    'done; echo "no interface has MAC $1" >&2; return 3; }'
)

# pci_dir IFACE: the PCI function behind an interface: its `device`, or, for
# virtio_net, whose `device` is the virtio device, its first PCI ancestor.
PCI_DIR = (
    'pci_dir() { d=$(readlink -f "/sys/class/net/$1/device"); '
    'while [ "$d" != /sys ] && [ "$(cd -P "$d/subsystem" 2>/dev/null && pwd)" != /sys/bus/pci ]; '
    'do d=${d%/*}; done; echo "$d"; }'
)

# module_facts DEVICE (kv comes with it): the module that owns the driver bound to a device (a sysfs directory), its
# version, srcversion, taint flags and the bytes of its GNU build-id note, as key=value lines (none but module= if
# unbound).
# $SYS is sysfs (/sys unless a test points it at a tree of its own).
MODULE_FACTS = (
    KV
    + "\n"
    + (
        'module_facts() { m=$(readlink "$1/driver/module"); m=${m##*/}; echo "module=$m"; [ -n "$m" ] || return 0; '
        'kv module_version "${SYS:-/sys}/module/$m/version"; '
        'for k in srcversion taint; do kv $k "${SYS:-/sys}/module/$m/$k"; done; '
        'n="${SYS:-/sys}/module/$m/notes/.note.gnu.build-id"; '
        'echo "build_note=$(od -An -tx1 -v "$n" 2>/dev/null | tr -d " \\n")"; }'
    )
)


def note_build_id(note_hex: str) -> str:
    """The build id in a GNU build-id note's bytes, in hex (namesz, descsz, type, the name, then the id)."""
    try:
        raw = bytes.fromhex(note_hex)
    except ValueError:
        return ""
    if len(raw) < 16:
        return ""
    namesz, descsz = int.from_bytes(raw[0:4], "little"), int.from_bytes(raw[4:8], "little")
    start = 12 + ((namesz + 3) & ~3)
    return raw[start : start + descsz].hex() if len(raw) >= start + descsz else ""


def sections(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """Split a guest script's output at '[name]' lines: (the lines before any section, {name: its lines}).

    A name seen twice gathers the lines of both sections, in order.
    """
    head: list[str] = []
    named: dict[str, list[str]] = {}
    current = head
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = named.setdefault(line[1:-1], [])
        else:
            current.append(line)
    return head, named
