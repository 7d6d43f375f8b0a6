"""A NIC lab as data: its inventory (hosts, NIC models, cards, cables), where a cell's cables go on it
(match), and the PCI classes lab mode may pass through (pciclass). The lab's hosts are niclab.plumbing.lab."""
