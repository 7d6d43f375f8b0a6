"""What ethtool 6.1 prints in a guest (`ethtool -c/-g/-l`), for the knob tests."""

# `ethtool -g eth0` on an e1000 (82540EM), ethtool 6.1: tabs as ethtool prints them.
E1000_RINGS = """\
Ring parameters for eth0:
Pre-set maximums:
RX:\t\t4096
RX Mini:\tn/a
RX Jumbo:\tn/a
TX:\t\t4096
Current hardware settings:
RX:\t\t256
RX Mini:\tn/a
RX Jumbo:\tn/a
TX:\t\t256
RX Buf Len:\t\tn/a
CQE Size:\t\tn/a
TX Push:\toff
TCP data split:\tn/a
"""

# `ethtool -c eth0` on the same card: the 82540EM's driver has no coalescing through ethtool.
E1000_COALESCE = "netlink error: Operation not supported\n"

# `ethtool -c eth0`, ethtool 6.1, on a driver that supports rx-usecs only. ethtool 6.1 prints the
# frame counts of the low and high rates as rx-frame-low etc. (while -C takes rx-frames-low).
RX_USECS_ONLY_COALESCE = """\
Coalesce parameters for eth0:
Adaptive RX: n/a  TX: n/a
stats-block-usecs: n/a
sample-interval: n/a
pkt-rate-low: n/a
pkt-rate-high: n/a

rx-usecs: 3
rx-frames: n/a
rx-usecs-irq: n/a
rx-frames-irq: n/a

tx-usecs: n/a
tx-frames: n/a
tx-usecs-irq: n/a
tx-frames-irq: n/a

rx-usecs-low: n/a
rx-frame-low: n/a
tx-usecs-low: n/a
tx-frame-low: n/a

rx-usecs-high: n/a
rx-frame-high: n/a
tx-usecs-high: n/a
tx-frame-high: n/a

CQE mode RX: n/a  TX: n/a

"""

# `ethtool -l eth0` on a virtio_net port with 4 queue pairs, one in use.
VIRTIO_QUEUES = """\
Channel parameters for eth0:
Pre-set maximums:
RX:\t\tn/a
TX:\t\tn/a
Other:\t\tn/a
Combined:\t4
Current hardware settings:
RX:\t\tn/a
TX:\t\tn/a
Other:\t\tn/a
Combined:\t1
"""
