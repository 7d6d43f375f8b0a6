"""niclab's front ends: the `niclab` command, the pytest plugin, reports, comparisons, exports, the Vagrant rig.

They import every layer below; report, compare and export read run directories through niclab.run.reader
only. Their modules: docs/architecture.md, "ui".
"""
