"""Which selftests a node runs: those of the kernel it boots, or a directory the scenario names."""

from __future__ import annotations

from pathlib import Path

from niclab.base.node import Progress
from niclab.model.scenario import BenchmarkSpec
from niclab.model.scenario.model import Scenario
from niclab.model.selftests import SelftestBundle
from niclab.plumbing.kselftest.bundle import bundle_for, bundle_from_dir


def kselftest_bundle(scenario: Scenario, progress: Progress, node: str, spec: BenchmarkSpec) -> SelftestBundle:
    """The selftests `spec` (a kselftest benchmark) runs on `node`: its `bundle` directory, else its kernel's."""
    targets = tuple(getattr(spec.options, "targets", ()))
    given = getattr(spec.options, "bundle", None)
    if given:
        return bundle_from_dir(Path(given), targets)
    return bundle_for(scenario.kernel_of(node), targets, progress)
