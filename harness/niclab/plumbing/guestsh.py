"""Shell functions niclab's guest scripts share (POSIX sh: dash or busybox)."""

# by_mac MAC: the name of the interface with that MAC (drivers load in modalias
# order, so eth0, eth1 … say nothing about which cable is which).
BY_MAC = (
    'by_mac() { for d in /sys/class/net/*; do [ -f "$d/address" ] && [ "$(cat "$d/address")" = "$1" ] && '
    '{ echo "${d##*/}"; return 0; }; '
    'done; echo "no interface has MAC $1" >&2; return 3; }'
)

# pci_dir IFACE: the PCI function behind an interface: its `device`, or, for
# virtio_net, whose `device` is the virtio device, its first PCI ancestor.
PCI_DIR = (
    'pci_dir() { d=$(readlink -f "/sys/class/net/$1/device"); '
    'while [ "$d" != /sys ] && [ "$(cd -P "$d/subsystem" 2>/dev/null && pwd)" != /sys/bus/pci ]; '
    'do d=${d%/*}; done; echo "$d"; }'
)


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
