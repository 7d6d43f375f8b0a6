"""The NIC lab: its inventory of real cards (and, in a later issue, passthrough host preparation)."""
