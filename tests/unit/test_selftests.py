"""The selftests model: kselftest-list.txt and `settings`, the tests a scenario names, kernels without them."""

from pathlib import Path

import pytest

from niclab.model.kernel_choice import KernelChoice
from niclab.model.selftests import SelftestBundle, kernel_problem, parse_list, parse_settings

TARGETS = ("drivers/net", "drivers/net/hw")
LISTING = "drivers/net:ping.py\ndrivers/net:stats.py\n\ndrivers/net/hw:csum.py\nnet:other.sh\n"


def bundle() -> SelftestBundle:
    return SelftestBundle(Path("b.tar.gz"), "test", "6.12.107", parse_list(LISTING), {"drivers/net/hw": 0})


def test_the_list_is_parsed_in_its_order():
    assert parse_list(LISTING) == (
        ("drivers/net", "ping.py"),
        ("drivers/net", "stats.py"),
        ("drivers/net/hw", "csum.py"),
        ("net", "other.sh"),
    )


@pytest.mark.parametrize("line", ["ping.py", "drivers/net:", ":ping.py", "drivers/net:lib/py/x.py", "../x:y.py"])
def test_a_line_that_is_no_test_is_named(line):
    with pytest.raises(ValueError, match=r"list.txt:2: .* is not `target:program`"):
        parse_list(f"drivers/net:ping.py\n{line}\n", "list.txt")


def test_settings_give_the_timeout():
    assert parse_settings("timeout=0\n") == 0
    assert parse_settings("# per test\ntimeout = 120\n") == 120
    assert parse_settings("other=1\n") is None
    assert bundle().timeout("drivers/net/hw") == 0
    assert bundle().timeout("drivers/net") == 45


def test_a_scenarios_tests_are_selected_by_program_or_by_target_and_program():
    assert bundle().select(TARGETS) == bundle().of(TARGETS)
    assert len(bundle().of(TARGETS)) == 3
    assert bundle().select(TARGETS, ["stats.py", "drivers/net/hw:csum.py"]) == (
        ("drivers/net", "stats.py"),
        ("drivers/net/hw", "csum.py"),
    )


def test_tests_the_bundle_lacks_are_named_with_a_suggestion():
    assert bundle().missing_tests(TARGETS, ["ping.py", "stat.py", "shaper.py", "other.sh"]) == [
        ("stat.py", "did you mean 'stats.py'?"),
        ("shaper.py", ""),
        ("other.sh", ""),  # a test of a target the scenario did not ask for
    ]


def test_the_suites_with_the_tests_pass():
    for suite in ("trixie", "bookworm-backports", "sid"):
        assert kernel_problem(KernelChoice(suite=suite), TARGETS) is None


def test_bookworms_kernel_is_refused_naming_the_suites_that_have_them():
    message = kernel_problem(KernelChoice(suite="bookworm"), TARGETS)
    assert message == (
        "kernel bookworm (Debian 12's kernel 6.1) has no drivers/net or drivers/net/hw selftests: they are newer "
        "than that Linux; use kernel: trixie (or bookworm-backports, sid), or {build: DIR} of a newer tree"
    )
    own = kernel_problem(None, ("drivers/net",))
    assert own is not None and own.startswith("kernel bookworm (Debian 12's kernel 6.1), the image's own kernel,")


def test_a_build_tree_needs_the_targets_makefiles(tmp_path):
    (tmp_path / "tools/testing/selftests/drivers/net").mkdir(parents=True)
    (tmp_path / "tools/testing/selftests/drivers/net/Makefile").write_text("")
    assert kernel_problem(KernelChoice(build=str(tmp_path)), ("drivers/net",)) is None
    assert kernel_problem(KernelChoice(build=str(tmp_path)), TARGETS) == (
        f"kernel build:{tmp_path} has no drivers/net/hw selftests (no tools/testing/selftests/drivers/net/hw/"
        "Makefile in the tree): use {build: DIR} of a newer tree, or kernel: trixie (or bookworm-backports, sid)"
    )


def test_a_settings_timeout_is_capped_and_an_absurd_one_ignored():
    assert parse_settings("timeout=999999\n") == 3600
    assert parse_settings("timeout=" + "9" * 5000 + "\n") is None
