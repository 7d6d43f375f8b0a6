"""Modules built or fetched for a node's kernel, so that a link's card can be driven by another driver.

`ensure_driver` (build) turns a DriverChoice into .ko files for one kernel, cached per choice, kernel and
source; `layer` puts them behind the node image's initramfs; `asked` is what the cell proves
(docs/architecture.md, "plumbing": drivers/).
"""
