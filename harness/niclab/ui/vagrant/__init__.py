"""The Vagrant rig: a scenario cell as vagrant-libvirt machines, for people who want to log in.

`machines` turns a cell into machines, UDP cables and provisioning scripts (the
Vagrantfile reads them as JSON), `box` packs the Debian image as a box,
`check` reads the links back over SSH after `vagrant up`, `state` keeps what
must stay the same between vagrant commands.
"""
