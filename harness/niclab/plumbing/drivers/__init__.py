"""Modules built or fetched for a node's kernel, so that a link's card can be driven by another driver.

`ensure_driver` (plumbing.drivers.build) turns a scenario's DriverChoice into the .ko files for one kernel:
an out-of-tree source directory, a directory of the kernel's own source built out of tree (renamed if asked),
a Debian DKMS package, or another in-tree module. Builds are cached per choice, kernel and source.
`layer` puts them behind the node image's initramfs so that the card binds them; `asked` is what the cell
proves against (plumbing.netconf.modules).
"""
