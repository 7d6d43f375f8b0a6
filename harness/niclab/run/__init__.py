"""niclab's run layer: a run of a scenario, from cells to records.

It imports niclab.plumbing, niclab.model and niclab.base. Its modules and the job of each:
docs/architecture.md, "run".
"""
