from types import SimpleNamespace

import pytest

from niclab.model.expect import ExpectationError, evaluate, parse


def summary(name, mean, n=3, link=0, client="a", server="b", peer=None, family=4):
    return SimpleNamespace(name=name, mean=mean, n=n, link=link, client=client, server=server, peer=peer, family=family)


def test_parse_with_units_and_selectors():
    e = parse("netperf.TCP_STREAM.throughput_mbps[link=1, from=a] > 0.5 Gbit/s")
    assert (e.name, e.op, e.value, e.unit) == ("netperf.TCP_STREAM.throughput_mbps", ">", 500.0, "Mbit/s")
    assert e.selector == (("link", "1"), ("client", "a"))
    assert parse("netperf.TCP_RR.latency_p99_us <= 2 ms").value == 2000.0
    assert parse("netperf.UDP_STREAM.loss_pct < 1 %").value == 1.0


@pytest.mark.parametrize(
    "text,message",
    [
        ("netperf.TCP_RR.transaction_rte > 1", "unknown metric 'netperf.TCP_RR.transaction_rte'"),
        ("netperf.TCP_RR.transaction_rate >= 5 Mbit/s", "is in /s, not Mbit/s"),
        ("netperf.TCP_RR.transaction_rate => 5", "is not an expectation"),
        ("netperf.TCP_RR.transaction_rate[lnk=1] > 5", "selector 'lnk=1' is not understood"),
    ],
)
def test_refused(text, message):
    with pytest.raises(ExpectationError, match=message.replace("[", r"\[")):
        parse(text)


def test_every_matching_group_must_pass_and_missing_is_a_miss():
    e = parse("netperf.TCP_STREAM.throughput_mbps >= 100")
    verdicts = evaluate(
        e,
        [
            summary("netperf.TCP_STREAM.throughput_mbps", 150, link=0),
            summary("netperf.TCP_STREAM.throughput_mbps", 80, link=1),
            summary("netperf.TCP_RR.transaction_rate", 1),
        ],
    )
    assert [(v.passed, v.measured) for v in verdicts] == [(True, 150), (False, 80)]
    assert verdicts[1].describe() == (
        "netperf.TCP_STREAM.throughput_mbps >= 100: measured 80 Mbit/s (mean of 3) a->b on link 1"
    )
    only_link_0 = parse("netperf.TCP_STREAM.throughput_mbps[link=0] >= 100")
    both_links = [
        summary("netperf.TCP_STREAM.throughput_mbps", 150),
        summary("netperf.TCP_STREAM.throughput_mbps", 80, link=1),
    ]
    assert [v.passed for v in evaluate(only_link_0, both_links)] == [True]
    missing = evaluate(parse("ping.rtt_avg_ms < 5"), [])
    assert [(v.passed, v.describe()) for v in missing] == [(False, "ping.rtt_avg_ms < 5: not measured")]
