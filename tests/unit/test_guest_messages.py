from niclab.plumbing.guest import shorten


def test_a_short_command_is_shown_whole_without_the_shell():
    assert shorten(("/bin/sh", "-c", "netperf -H 198.18.0.2")) == "netperf -H 198.18.0.2"
    assert shorten(("ethtool", "-i", "link0")) == "ethtool -i link0"


def test_a_long_command_keeps_its_program_and_its_end():
    command = "netperf -H 198.18.0.2 -t UDP_STREAM -- -k " + ",".join(f"SELECTOR_{i}" for i in range(40))
    shown = shorten(("/bin/sh", "-c", command))
    assert len(shown) <= 200
    assert shown.startswith("netperf -H 198.18.0.2 -t UDP_STREAM")
    assert shown.endswith("SELECTOR_39") and " … " in shown
