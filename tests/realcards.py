"""The real cards niclab's lab image must drive: PCI ID -> the module the guest kernel's modules.alias gives it.

The studies' cards (3C905B, DP83820, 88E8056, nForce CK804, 82541GI) and today's (Intel, Mellanox,
Broadcom, Realtek, Solarflare). tests/data/lab/real-cards.yaml names each by PCI address and ID.
"""

REAL_CARDS = {
    "10b7:9055": "3c59x",
    "100b:0022": "ns83820",
    "11ab:4364": "sky2",
    "10de:0057": "forcedeth",
    "8086:1076": "e1000",
    "8086:10d3": "e1000e",
    "8086:1533": "igb",
    "8086:10fb": "ixgbe",
    "8086:1572": "i40e",
    "8086:1592": "ice",
    "15b3:1017": "mlx5_core",
    "14e4:1657": "tg3",
    "14e4:16d7": "bnxt_en",
    "10ec:8168": "r8169",
    "1924:0a03": "sfc",
}

# Firmware the image must carry for some of them: module -> a file (or directory prefix) it names.
FIRMWARE = {
    "r8169": "rtl_nic/",
    "tg3": "tigon/",
    "ice": "intel/ice/ddp/ice.pkg",
    "bnx2x": "bnx2x/",
}
