"""niclab's front ends: the `niclab` command (cli), the pytest plugin, reports, comparisons, exports, the
table a run prints, and the Vagrant rig. They import every layer below; report, compare and export read
run directories through niclab.run.reader and never import the plumbing or the runner.
"""
