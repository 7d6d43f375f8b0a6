"""`niclab compare` on real runs: a run against a rerun of the same scenario changes nothing
significant; a netem cap of 100 Mbit/s against the same link without it is "worse" and fails.

The capped scenario is the stable one (throughput pinned near 95 Mbit/s), so
"no significant change" tests compare's logic, not this shared machine's
noise, which can move an uncapped TCG figure by tens of percent between runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import niclab

HERE = Path(__file__).parent


def run(scenario: str, out: Path) -> Path:
    proc = niclab("run", str(HERE / scenario), "--out", str(out), "-q")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return next(out.iterdir())


@pytest.fixture(scope="module")
def capped(image, tmp_path_factory) -> Path:
    return run("rate-capped.yaml", tmp_path_factory.mktemp("capped"))


def compare(base: Path, new: Path, *extra: str):
    proc = niclab("compare", str(base), str(new), *extra)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def throughput_line(out: str) -> str:
    return next(line for line in out.splitlines() if "netperf.TCP_STREAM.throughput_mbps" in line)


def test_a_rerun_of_the_same_scenario_is_no_significant_change(capped, tmp_path):
    rerun = run("rate-capped.yaml", tmp_path)
    code, out, err = compare(capped, rerun)
    assert code == 0, out + err
    assert throughput_line(out).endswith("no significant change")
    assert "0 worse" in out and "Welch's t-test" in out


def test_a_rate_cap_is_worse_and_fails(capped, tmp_path):
    open_link = run("rate-open.yaml", tmp_path)
    code, out, err = compare(open_link, capped)
    assert code == 1, out + err
    line = throughput_line(out)
    assert line.endswith("worse"), line
    # the other formats carry the same verdict
    code, json_out, _ = compare(open_link, capped, "--format", "json")
    assert code == 1 and '"verdict": "worse"' in json_out
    html = tmp_path / "compare.html"
    code, _, _ = compare(open_link, capped, "--format", "html", "--out", str(html))
    assert code == 1 and 'class="worse">worse<' in html.read_text()
