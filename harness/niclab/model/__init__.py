"""niclab's model layer: what a scenario, a lab and a benchmark are, as data and pure functions.

scenario (the file, its matrix and cells), topology, nics (the card classes), knobs, offloads, netem,
kernel_choice, expect (expectations), shard, lab (the inventory, the placement of cells on its cards,
PCI classes), bench (each benchmark: its options, metrics, how it runs over the Node protocol and how it
is reported). It imports only niclab.base.
"""
