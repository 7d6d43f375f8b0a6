"""netconf.clock: a guest whose clock runs off the host's rate fails its cell; one that keeps time never does."""

from niclab.plumbing.netconf import clock
from niclab.plumbing.netconf.clock import Reading


def test_a_clock_at_the_hosts_rate_passes_however_slow_the_agent_answered():
    # the guest read its clock anywhere inside each command: early in the first, late in the second, and back
    first = Reading(before=10.0, uptime=4.0, after=10.9)
    assert clock.problem("a", first, Reading(before=11.0, uptime=4.0 + 1.9, after=11.9)) is None
    assert clock.problem("a", first, Reading(before=11.0, uptime=4.0 + 0.1, after=11.9)) is None
    assert clock.problem("a", Reading(10.0, 4.0, 10.05), Reading(10.6, 4.6, 10.65)) is None


def test_a_clock_several_times_too_fast_fails_naming_the_node_and_its_rate():
    # seen under TCG with eight guests on two cores: 5.85x
    why = clock.problem("h", Reading(10.0, 20.0, 10.1), Reading(10.7, 20.0 + 5.85 * 0.65, 10.8))
    assert why is not None and why.startswith("h: the guest's clock ran 5.") and "x the host's" in why
    assert "calibrated its TSC wrongly" in why


def test_a_clock_a_third_too_fast_over_the_set_up_fails():
    # the first reading before the network is configured, the second after it is checked: 2.5 s apart, each
    # command 0.1 s; a clock 1.3x fast advanced 3.25 s where the host allows at most 2.7 s
    assert clock.problem("a", Reading(10.0, 4.0, 10.1), Reading(12.6, 4.0 + 1.3 * 2.55, 12.7)) is not None
    assert clock.problem("a", Reading(10.0, 4.0, 10.1), Reading(12.6, 4.0 + 1.0 * 2.55, 12.7)) is None


def test_a_clock_that_stood_still_fails_too():
    assert clock.problem("b", Reading(10.0, 20.0, 10.1), Reading(12.0, 20.0, 12.1)) is not None


def test_every_node_is_judged_in_node_order_and_one_whose_clock_cannot_be_read_is_a_problem_too():
    good, fast = (Reading(0.0, 1.0, 0.1), Reading(1.0, 2.0, 1.1)), (Reading(0.0, 1.0, 0.1), Reading(1.0, 9.0, 1.1))
    unread = "d: its clock could not be read from /proc/uptime: exit status 1, no output"
    first = {"b": fast[0], "a": fast[0], "c": good[0], "d": unread}
    second = {"b": fast[1], "a": fast[1], "c": good[1], "d": good[1]}
    assert [p.split(":")[0] for p in clock.problems(first, second)] == ["a", "b", "d"]
    assert clock.problems(first, second)[-1] == unread


def test_the_uptime_line_is_read_from_the_scripts_output():
    assert clock.parse_uptime("uptime=12.34\n") == 12.34
    assert clock.parse_uptime("nothing\n") is None
    assert clock.parse_uptime("uptime=soon\n") is None


def test_a_clock_that_keeps_time_in_a_later_window_settles_and_one_that_never_does_is_returned():
    # a's watchdog moves it to the HPET during the first window; b stays 5x fast; c kept time all along
    rates = {"a": [5.0, 1.0, 1.0], "b": [5.0, 5.0, 5.0], "c": [1.0, 1.0, 1.0]}
    host, window = [0.0], [0]
    uptime = dict.fromkeys(rates, 10.0)

    def read_all(nodes):
        return {n: Reading(host[0], uptime[n], host[0] + 0.01) for n in nodes}

    def sleep(seconds):
        host[0] += seconds
        for n in uptime:
            uptime[n] += seconds * rates[n][window[0]]
        window[0] += 1

    off = clock.settle(read_all, ["a", "b"], sleep=sleep)
    assert list(off) == ["b"] and off["b"].startswith("b: the guest's clock ran 5.")
    assert window[0] == 3  # b was watched for all three windows
