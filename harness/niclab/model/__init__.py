"""niclab's model layer: what a scenario, a lab and a benchmark are, as data and pure functions.

It imports only niclab.base. Its modules and the job of each: docs/architecture.md, "model".
"""
