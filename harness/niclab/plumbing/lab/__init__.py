"""A lab host: its PCI devices (sysfs, nodedev), its network (hostnet), the doctor, the state directory,
leases, and moving cards to vfio-pci and back (vfio, passthrough). The inventory is niclab.model.lab."""
