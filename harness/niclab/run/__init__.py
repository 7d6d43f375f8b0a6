"""niclab's run layer: a run of a scenario, from cells to records.

session (one realized cell), rigs (booted rigs cells share), runner (cells, repeats, summaries,
expectations), start (a run as the CLI and the pytest plugin start it), records (the results format),
results (a run directory), stats, realizable, plan. It imports niclab.plumbing, niclab.model, niclab.base.
"""
