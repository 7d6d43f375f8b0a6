"""niclab's base layer: what every other layer stands on, importing nothing of niclab's above it.

Its modules and the job of each: docs/architecture.md, "base".
"""
