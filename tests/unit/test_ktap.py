"""KTAP results as the kernel's selftests print them: results, reasons, subtests at any depth, odd text kept."""

from __future__ import annotations

from niclab.model.bench import ktap
from niclab.model.bench.ktap import parse

RUNNER = """\
TAP version 13
1..2
# timeout set to 45
# selftests: drivers/net: ping.py
# KTAP version 1
# 1..3
# ok 1 ping.test_v4
# ok 2 ping.test_v6 # SKIP no IPv6 on the link
# not ok 3 ping.test_tcp
# # Totals: pass:1 fail:1 xfail:0 xpass:0 skip:1 error:0
not ok 1 selftests: drivers/net: ping.py # exit=1
# selftests: drivers/net: stats.py
# KTAP version 1
# 1..1
# ok 1 stats.check_pause # XFAIL pause frames not counted by this driver
not ok 2 selftests: drivers/net: stats.py # TIMEOUT 45 seconds
"""


def test_the_runners_output_gives_each_program_and_its_tests_with_their_reasons():
    ping, stats = parse(RUNNER)
    assert (ping.number, ping.name, ping.result, ping.reason) == (
        1,
        "selftests: drivers/net: ping.py",
        "fail",
        "exit=1",
    )
    assert [(t.name, t.result, t.reason) for t in ping.subtests] == [
        ("ping.test_v4", "pass", ""),
        ("ping.test_v6", "skip", "no IPv6 on the link"),
        ("ping.test_tcp", "fail", ""),
    ]
    assert "timeout set to 45" in ping.output and "# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:1 error:0" not in [
        line for sub in ping.subtests for line in sub.output
    ]
    assert (stats.result, stats.reason) == ("fail", "timeout 45 seconds")
    assert [(t.result, t.reason) for t in stats.subtests] == [("xfail", "pause frames not counted by this driver")]
    assert [path for path, _ in stats.walk()] == [
        "selftests: drivers/net: stats.py",
        "selftests: drivers/net: stats.py/stats.check_pause",
    ]


def test_ktap_nests_by_two_spaces_to_any_depth():
    text = """\
KTAP version 1
1..1
  KTAP version 1
  1..2
    KTAP version 1
    1..1
    ok 1 leaf
  ok 1 inner
  ok 2 other # SKIP
ok 1 outer
"""
    (outer,) = parse(text)
    assert [t.name for t in outer.subtests] == ["inner", "other"]
    assert outer.subtests[0].subtests[0].name == "leaf"
    assert (outer.subtests[1].result, outer.subtests[1].reason) == ("skip", "")


def test_text_that_is_no_ktap_is_output_and_never_a_result():
    (test, dashed) = parse("okay then\nok\nnot ok\n# ok then\nok 1 real - named # todo later\nok 2 - dashed\n")
    assert (test.name, test.result, test.reason) == ("real - named", "xfail", "later")
    assert (dashed.number, dashed.name, dashed.result) == (2, "dashed", "pass")
    assert "okay then" in test.output and "ok" in test.output and "not ok" in test.output
    assert parse("") == [] and parse("garbage\n\x00\n") == []


def test_a_guests_deep_nesting_does_not_recurse_without_end():
    deep = "".join("# " * level + "ok 1 x\n" for level in range(200, 0, -1)) + "ok 1 top\n"
    (top,) = parse(deep)
    depth, node = 0, top
    while node.subtests:
        node, depth = node.subtests[0], depth + 1
    assert depth <= 16


def test_a_test_number_beyond_reason_is_kept_as_output():
    [top] = parse("# ok " + "9" * 5000 + " huge\nok 1 sane\n")
    assert top.name == "sane" and top.output and top.output[0].startswith("ok 999")


def test_16_mib_of_results_are_read_to_a_bound_in_bounded_memory():
    """16 MiB of `ok N x` lines made 2.4 million test records (856 MiB resident): a program's results stop at
    MAX_RESULTS, its lines at MAX_LINES, and the count of those left out is said."""
    import time
    import tracemalloc

    line = "ok 1 x\n"
    text = line * ((16 << 20) // len(line))
    tracemalloc.start()
    started = time.process_time()
    results, left_out = ktap.parse_bounded(text)
    seconds = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(results) == ktap.MAX_RESULTS and left_out == ktap.MAX_LINES - ktap.MAX_RESULTS
    assert peak < 100 << 20 and seconds < 5  # about 30 MB and 0.6 s here
