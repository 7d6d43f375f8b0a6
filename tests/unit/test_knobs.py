"""Driver knobs (niclab.model.knobs): what `ethtool -c/-g/-l` print, what a driver supports, what a scenario may ask."""

from __future__ import annotations

import pytest

from niclab.model import knobs
from niclab.model.knobs import (
    COALESCE,
    QUEUES,
    RINGS,
    Shown,
    check_setting,
    mismatches,
    parse_show,
    set_args,
    unsupported,
)
from tests.unit.ethtool_samples import E1000_COALESCE, E1000_RINGS, RX_USECS_ONLY_COALESCE, VIRTIO_QUEUES

# parse_show


def test_rings_of_an_e1000_current_values_and_maximums_by_their_ethtool_g_names():
    shown = parse_show(RINGS, E1000_RINGS)
    assert shown.maximum == {"rx": "4096", "rx-mini": None, "rx-jumbo": None, "tx": "4096"}
    assert shown.current == {"rx": "256", "rx-mini": None, "rx-jumbo": None, "tx": "256"}
    assert shown.error == ""
    assert shown.supported(RINGS) == ["rx", "tx"]  # a maximum of n/a: not supported


def test_a_driver_that_refuses_ethtool_c_supports_nothing_and_what_it_said_is_kept():
    shown = parse_show(COALESCE, E1000_COALESCE)
    assert shown.current == {} and shown.maximum == {}
    assert shown.error == "netlink error: Operation not supported"
    assert shown.supported(COALESCE) == []


def test_coalesce_of_a_driver_with_rx_usecs_only():
    shown = parse_show(COALESCE, RX_USECS_ONLY_COALESCE)
    assert shown.supported(COALESCE) == ["rx-usecs"]
    assert shown.current["rx-usecs"] == "3"
    # The paired lines are read too, each half by its own name; n/a is None.
    assert {n: shown.current[n] for n in ("adaptive-rx", "adaptive-tx", "cqe-mode-rx", "cqe-mode-tx")} == dict.fromkeys(
        ("adaptive-rx", "adaptive-tx", "cqe-mode-rx", "cqe-mode-tx")
    )
    assert shown.current["tx-usecs"] is None and shown.current["stats-block-usecs"] is None
    assert shown.maximum == {} and shown.error == ""


def test_coalesce_switches_and_values_as_ethtool_prints_them_with_tabs():
    # ethtool since 6.2 separates name and value with tabs; the values are the same.
    text = RX_USECS_ONLY_COALESCE.replace("Adaptive RX: n/a  TX: n/a", "Adaptive RX: on  TX: off").replace(
        "tx-usecs: n/a", "tx-usecs:\t0"
    )
    shown = parse_show(COALESCE, text)
    assert shown.current["adaptive-rx"] == "on" and shown.current["adaptive-tx"] == "off"
    assert shown.current["tx-usecs"] == "0"  # 0 is a value, not n/a
    assert shown.supported(COALESCE) == ["adaptive-rx", "adaptive-tx", "rx-usecs", "tx-usecs"]


def test_frame_counts_of_the_low_and_high_rates_are_read_under_their_ethtool_c_names():
    text = RX_USECS_ONLY_COALESCE.replace("rx-frame-low: n/a", "rx-frame-low: 16")
    shown = parse_show(COALESCE, text)
    assert shown.current.get("rx-frames-low") == "16"
    assert "rx-frames-low" in shown.supported(COALESCE)


def test_channels_maximum_and_current_are_kept_apart():
    shown = parse_show(QUEUES, VIRTIO_QUEUES)
    assert shown.maximum == {"rx": None, "tx": None, "other": None, "combined": "4"}
    assert shown.current == {"rx": None, "tx": None, "other": None, "combined": "1"}
    assert shown.supported(QUEUES) == ["combined"]


def test_a_maximum_of_zero_is_not_supported():
    shown = parse_show(QUEUES, VIRTIO_QUEUES.replace("Other:\t\tn/a\nCombined:\t4", "Other:\t\t0\nCombined:\t4", 1))
    assert shown.maximum["other"] == "0"
    assert shown.supported(QUEUES) == ["combined"]


def test_an_older_ethtools_ioctl_refusal_is_an_error_too():
    shown = parse_show(RINGS, "Ring parameters for eth0:\nCannot get device ring settings: Operation not supported\n")
    assert shown.error == "Cannot get device ring settings: Operation not supported"
    assert shown.supported(RINGS) == []


# unsupported: asked of the driver before anything is set


def test_nothing_to_say_when_the_driver_takes_every_setting():
    assert unsupported(RINGS, {"rx": 4096, "tx": 512}, parse_show(RINGS, E1000_RINGS), "e1000") == []
    assert unsupported(QUEUES, {"combined": 4}, parse_show(QUEUES, VIRTIO_QUEUES), "virtio_net") == []


def test_an_unsupported_setting_names_the_driver_and_what_it_does_support():
    problems = unsupported(RINGS, {"rx": 512, "rx-jumbo": 64}, parse_show(RINGS, E1000_RINGS), "e1000")
    assert problems == ["the e1000 driver does not support rings rx-jumbo; it supports rx, tx (ethtool -g)"]
    problems = unsupported(COALESCE, {"tx-usecs": 10}, parse_show(COALESCE, RX_USECS_ONLY_COALESCE), "8139cp")
    assert problems == ["the 8139cp driver does not support coalesce tx-usecs; it supports rx-usecs (ethtool -c)"]


def test_a_driver_that_supports_nothing_says_what_ethtool_said():
    problems = unsupported(COALESCE, {"rx-usecs": 100}, parse_show(COALESCE, E1000_COALESCE), "e1000")
    assert problems == [
        "the e1000 driver does not support coalesce rx-usecs; it supports no coalesce setting "
        "(ethtool -c: netlink error: Operation not supported)"
    ]
    all_na = parse_show(QUEUES, VIRTIO_QUEUES.replace("Combined:\t4", "Combined:\tn/a"))
    assert unsupported(QUEUES, {"combined": 2}, all_na, "virtio_net") == [
        "the virtio_net driver does not support queues combined; it supports no queues setting (ethtool -l: all n/a)"
    ]


def test_above_the_drivers_maximum():
    problems = unsupported(RINGS, {"rx": 8192, "tx": 4096}, parse_show(RINGS, E1000_RINGS), "e1000")
    assert problems == ["rings rx 8192 is above the e1000 driver's maximum, 4096 (ethtool -g)"]
    problems = unsupported(QUEUES, {"combined": 5}, parse_show(QUEUES, VIRTIO_QUEUES), "virtio_net")
    assert problems == ["queues combined 5 is above the virtio_net driver's maximum, 4 (ethtool -l)"]


def test_every_problem_is_listed():
    problems = unsupported(RINGS, {"rx": 9000, "rx-mini": 1, "tx": 9000}, parse_show(RINGS, E1000_RINGS), "e1000")
    assert [p.split()[:3] for p in problems] == [
        ["rings", "rx", "9000"],
        ["the", "e1000", "driver"],
        ["rings", "tx", "9000"],
    ]


# mismatches: read back after setting


def test_values_read_back_as_set_are_no_mismatch():
    shown = Shown(current={"rx-usecs": "100", "adaptive-rx": "on", "adaptive-tx": "off"}, maximum={})
    assert mismatches(COALESCE, {"rx-usecs": 100, "adaptive-rx": True, "adaptive-tx": False}, shown) == []


def test_a_drivers_rounding_within_2_percent_is_no_mismatch_beyond_it_is():
    # e1000 keeps rx-usecs as an interrupt rate: 100 us comes back as 98 or 102.
    assert mismatches(COALESCE, {"rx-usecs": 100}, Shown({"rx-usecs": "98"}, {})) == []
    assert mismatches(COALESCE, {"rx-usecs": 100}, Shown({"rx-usecs": "102"}, {})) == []
    assert mismatches(COALESCE, {"rx-usecs": 100}, Shown({"rx-usecs": "97"}, {})) == [
        "coalesce rx-usecs is 97, asked 100"
    ]
    assert mismatches(COALESCE, {"rx-usecs": 0}, Shown({"rx-usecs": "1"}, {})) == ["coalesce rx-usecs is 1, asked 0"]


def test_mismatches_of_switches_missing_values_and_rings():
    assert mismatches(COALESCE, {"adaptive-rx": True}, Shown({"adaptive-rx": "off"}, {})) == [
        "coalesce adaptive-rx is off, asked on"
    ]
    assert mismatches(COALESCE, {"rx-usecs": 50}, parse_show(COALESCE, E1000_COALESCE)) == [
        "coalesce rx-usecs is n/a, asked 50"
    ]
    assert mismatches(RINGS, {"rx": 512, "tx": 256}, parse_show(RINGS, E1000_RINGS)) == ["rings rx is 256, asked 512"]


# set_args and check_setting: what goes on ethtool's command line, what a scenario may write


def test_set_args_are_ethtool_words_in_order():
    assert set_args({"rx-usecs": 100, "adaptive-rx": True, "adaptive-tx": False}) == [
        "rx-usecs",
        "100",
        "adaptive-rx",
        "on",
        "adaptive-tx",
        "off",
    ]
    assert set_args({}) == []


def test_known_settings_pass_with_their_values():
    assert check_setting(COALESCE, "rx-usecs", 100) == (100, None, "")
    assert check_setting(COALESCE, "rx-frames-high", 0) == (0, None, "")
    assert check_setting(COALESCE, "adaptive-rx", True) == (True, None, "")
    assert check_setting(COALESCE, "cqe-mode-tx", False) == (False, None, "")
    assert check_setting(RINGS, "rx", knobs.MAX_VALUE) == (knobs.MAX_VALUE, None, "")
    assert check_setting(QUEUES, "combined", 2) == (2, None, "")


def test_an_unknown_name_suggests_the_close_one_and_says_whose_names_these_are():
    assert check_setting(COALESCE, "rx-usec", 100) == (
        None,
        "unknown coalesce setting 'rx-usec'",
        "did you mean 'rx-usecs'? (ethtool -c names)",
    )
    assert check_setting(QUEUES, "combine", 2) == (
        None,
        "unknown queues setting 'combine'",
        "did you mean 'combined'? (ethtool -l names)",
    )
    # A coalesce name is not a ring's (and ring names are lowercase, unlike ethtool -g's labels).
    value, message, _ = check_setting(RINGS, "RX", 256)
    assert value is None and message == "unknown rings setting 'RX'"
    value, message, hint = check_setting(RINGS, "zzzz", 256)
    assert message == "unknown rings setting 'zzzz'" and hint == "ethtool -g names: rx, rx-mini, rx-jumbo, tx"


def test_a_switch_takes_on_or_off_only():
    assert check_setting(COALESCE, "adaptive-rx", 5) == (None, "coalesce adaptive-rx is on or off, not 5", "")
    assert check_setting(COALESCE, "adaptive-tx", 1)[1] == "coalesce adaptive-tx is on or off, not 1"
    # YAML reads on/off as booleans; quoted, they are words, and mean the same
    assert check_setting(COALESCE, "adaptive-rx", "On") == (True, None, "")
    assert check_setting(COALESCE, "adaptive-rx", "off") == (False, None, "")
    assert check_setting(COALESCE, "adaptive-rx", "yes")[1] == "coalesce adaptive-rx is on or off, not 'yes'"


@pytest.mark.parametrize("value", [-1, True, False, 1.5, "100", None, [100], knobs.MAX_VALUE + 1])
def test_a_count_is_a_whole_number_not_negative_bool_or_text(value):
    checked, message, hint = check_setting(RINGS, "rx", value)
    assert checked is None
    assert message == f"rings rx is a whole number from 0 to 4294967295, not {value!r}"
    assert hint == ""


def test_every_kind_is_reachable_by_its_scenario_word():
    assert knobs.KINDS == {"coalesce": COALESCE, "rings": RINGS, "queues": QUEUES}
    assert [(k.set_flag, k.shown()) for k in knobs.KINDS.values()] == [
        ("-C", "ethtool -c"),
        ("-G", "ethtool -g"),
        ("-L", "ethtool -l"),
    ]
    # Every name the scenario takes, ethtool -C takes: 24 of them, no duplicates.
    assert len(COALESCE.names) == len(set(COALESCE.names)) == 24
    assert set(COALESCE.switches) <= set(COALESCE.names)
