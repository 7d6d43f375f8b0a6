import pytest
from pydantic import ValidationError

from niclab.model import offloads
from niclab.model.netem import Netem, mismatches, parse_qdisc


def test_units_are_parsed_and_written_back_the_way_tc_takes_them():
    spec = Netem(
        delay="10ms", jitter="1ms", loss="0.5%", duplicate="0.1%", reorder="1%", corrupt="0.01%", rate="100mbit"
    )
    assert spec.delay == 10000 and spec.jitter == 1000 and spec.rate == 100e6
    assert spec.tc_args() == [
        "delay",
        "10ms",
        "1ms",
        "loss",
        "0.5%",
        "duplicate",
        "0.1%",
        "reorder",
        "1%",
        "corrupt",
        "0.01%",
        "rate",
        "100mbit",
    ]
    assert Netem(delay="250us", rate="1.5mbit").tc_args() == ["delay", "250us", "rate", "1500kbit"]
    assert Netem(delay="2s").tc_args() == ["delay", "2s"]


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("delay", 10, "netem delay 10 needs a unit, e.g. 10ms or 500us"),
        ("loss", 5, "netem loss 5 needs a unit, e.g. 0.5%"),
        ("rate", "100mbps", "netem rate '100mbps' is not understood; write it like 100mbit"),
        ("loss", "150%", "netem loss '150%' is more than 100%"),
    ],
)
def test_values_without_units_are_refused(field, value, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Netem(**{field: value})


def test_jitter_and_reorder_need_a_delay():
    with pytest.raises(ValidationError, match="netem reorder needs a delay"):
        Netem(reorder="1%")


def test_read_back_of_tc_output():
    installed = parse_qdisc(
        "qdisc netem 8001: root refcnt 2 limit 1000 delay 10ms  1ms loss 0.5% "
        "duplicate 0.1% reorder 1% corrupt 0.01% rate 100Mbit gap 1"
    )
    assert installed == {
        "limit": 1000,
        "delay": 10000,
        "jitter": 1000,
        "loss": 0.5,
        "duplicate": 0.1,
        "reorder": 1,
        "corrupt": 0.01,
        "rate": 100e6,
    }
    spec = Netem(
        delay="10ms", jitter="1ms", loss="0.5%", duplicate="0.1%", reorder="1%", corrupt="0.01%", rate="100mbit"
    )
    assert mismatches(spec, installed) == []
    # tc rounds tiny probabilities: 0.001% reads back as 0.00100001%
    rounded = parse_qdisc("qdisc netem 8001: root refcnt 2 limit 1000 loss 0.00100001%")
    assert mismatches(Netem(loss="0.001%"), rounded) == []
    # leftovers of an earlier qdisc are differences too
    assert mismatches(
        Netem(delay="1.5ms"),
        parse_qdisc("qdisc netem 8001: root refcnt 2 limit 1000 delay 1.5ms reorder 1% corrupt 0.01% rate 100Mbit"),
    ) == [
        "corrupt: not asked, installed 0.01%",
        "rate: not asked, installed 100mbit",
        "reorder: not asked, installed 1%",
    ]
    assert parse_qdisc("qdisc noqueue 0: root refcnt 2") is None
    assert mismatches(Netem(delay="1ms"), None) == ["no netem qdisc is installed"]


def test_offload_names_and_switches():
    assert offloads.check_feature("tso") is None
    assert offloads.check_feature("generic-receive-offload") is None
    assert "did you mean 'tso'" in offloads.check_feature("tos")
    assert offloads.parse_switch("tso", False) is False and offloads.parse_switch("gro", "on") is True
    with pytest.raises(ValueError, match="is neither on nor off"):
        offloads.parse_switch("gro", "maybe")
    assert offloads.ethtool_args({"tso": False, "gro": True}) == ["tso", "off", "gro", "on"]
    # ethtool's own flags go by their short names, the kernel's features by theirs
    assert offloads.ethtool_args({"generic-receive-offload": False, "rx-gro-hw": True}) == [
        "gro",
        "off",
        "rx-gro-hw",
        "on",
    ]


def test_offload_read_back():
    features = offloads.parse_features(
        "tcp-segmentation-offload: off\n\ttx-tcp-segmentation: off [fixed]\n"
        "generic-receive-offload: on\nlarge-receive-offload: off [fixed]\n"
    )
    assert features["tcp-segmentation-offload"] == (False, True)  # its only part is fixed
    assert features["large-receive-offload"] == (False, True)
    assert offloads.mismatches({"tso": False, "gro": True}, features) == []
    assert offloads.mismatches({"lro": True}, features) == ["lro: asked on, is off (fixed by the driver)"]


def test_a_group_whose_parts_are_all_fixed_is_fixed():
    features = offloads.parse_features(
        "tcp-segmentation-offload: off\n\ttx-tcp-segmentation: off [fixed]\n"
        "\ttx-tcp6-segmentation: off [fixed]\nscatter-gather: off\n"
        "\ttx-scatter-gather: off [fixed]\n\ttx-scatter-gather-fraglist: off\n"
    )
    assert features["tcp-segmentation-offload"] == (False, True)
    assert features["scatter-gather"] == (False, False)
    assert offloads.mismatches({"tso": True}, features) == ["tso: asked on, is off (fixed by the driver)"]


def test_what_a_driver_started_with_is_read_by_kernel_name_without_groups_or_fixed_features():
    # e1000 in the micro image: tso turns tx-tcp-mangleid-segmentation on too, which the driver starts with off
    started = offloads.changeable(
        "Features for link0:\nrx-checksumming: on\ntx-checksumming: on\n\ttx-checksum-ipv4: off [fixed]\n"
        "\ttx-checksum-ip-generic: on\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\n"
        "\ttx-tcp-mangleid-segmentation: off\n\ttx-tcp6-segmentation: on\nhighdma: on [fixed]\n"
        "generic-receive-offload: on\n"
    )
    assert started == {
        "rx-checksumming": True,
        "tx-checksum-ip-generic": True,
        "tx-tcp-segmentation": True,
        "tx-tcp-mangleid-segmentation": False,
        "tx-tcp6-segmentation": True,
        "generic-receive-offload": True,
    }


E1000 = (
    "tcp-segmentation-offload: {tso}\n\ttx-tcp-segmentation: {tso}\n\ttx-tcp-mangleid-segmentation: {mangleid}\n"
    "generic-receive-offload: {gro}\nlarge-receive-offload: off [fixed]\n"
)


def test_a_feature_held_off_is_what_was_asked_of_the_driver():
    held = offloads.changeable("scatter-gather: off\n\ttx-scatter-gather: off\ntcp-segmentation-offload: off\n"
                               "\ttx-tcp-segmentation: off [requested on]\n")  # fmt: skip
    assert held == {"tx-scatter-gather": False, "tx-tcp-segmentation": True}  # on again once sg is


def test_a_feature_an_earlier_cell_left_changed_is_found_but_not_what_this_cell_names():
    started = offloads.changeable(E1000.format(tso="on", mangleid="off", gro="on"))
    assert offloads.leftovers({}, E1000.format(tso="on", mangleid="off", gro="on"), started) == []
    left = offloads.leftovers({}, E1000.format(tso="on", mangleid="on", gro="on"), started)
    assert left == [
        "tx-tcp-mangleid-segmentation is on, the driver started with off (left by an earlier cell on this boot)"
    ]
    # what the cell names (and the parts of a group it names) is its own business, checked against what it asked
    assert (
        offloads.leftovers({"tso": True, "gro": False}, E1000.format(tso="on", mangleid="on", gro="off"), started) == []
    )
    assert offloads.leftovers({"generic-receive-offload": False}, E1000.format(tso="on", mangleid="off", gro="off"),
                              started) == []  # fmt: skip


def test_zero_percent_is_no_impairment():
    """wan.yaml sweeps loss: [0%, 1%]; tc shows nothing for a zero loss, and that is what was asked."""
    spec = Netem(delay="5ms", jitter="1ms", loss="0%")
    assert spec.tc_args() == ["delay", "5ms", "1ms"]
    assert mismatches(spec, parse_qdisc("qdisc netem 8001: root refcnt 2 limit 1000 delay 5ms  1ms")) == []
