"""niclab as a pytest plugin: scenarios are tests, and hand-written tests get a `niclab_session`.

Registered through the `pytest11` entry point: every `*.yaml` below a `scenarios` directory is collected, one
item per matrix cell, run through niclab.run.start as `niclab run` runs it. Its options, markers, fixture and
JUnit properties: docs/pytest.md.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from niclab.base.errors import NiclabError, UsageError
from niclab.base.text import one_line
from niclab.ui.console import shown_lines

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle

    from niclab.model.lab.inventory import Inventory
    from niclab.model.scenario import Cell
    from niclab.model.scenario import ScenarioFile as ScenarioFileModel
    from niclab.plumbing.backends import Backend, BackendOptions
    from niclab.run.rigs import BootKeeper
    from niclab.run.session import Session

SLOW_S = 120.0
_LAB: pytest.StashKey[Inventory] = pytest.StashKey()  # --niclab-lab
_LAB_MODELS = pytest.StashKey[ExitStack]()  # keeps the lab's NIC models known until the session ends


def pytest_addoption(parser: pytest.Parser) -> None:
    from niclab.plumbing.backends import declared_options, defaults, registry

    group = parser.getgroup("niclab", "niclab scenarios and rigs")
    plain, with_lab = defaults()
    group.addoption(
        "--niclab-backend",
        metavar="NAME",
        help=f"how nodes are realized: {' or '.join(registry())} (default: {plain}, or {with_lab} with --niclab-lab)",
    )
    group.addoption("--niclab-lab", metavar="LAB_YAML", help="a lab inventory; cells it has no cards for are skipped")
    group.addoption(
        "--niclab-allow-uri-params",
        action="store_true",
        help="accept libvirt URI parameters such as command= in the --niclab-lab inventory (only one you trust)",
    )
    group.addoption("--niclab-out", metavar="DIR", help="keep the run directories here (e.g. CI artifacts)")
    group.addoption("--niclab-repeat", type=int, metavar="N", help="run every benchmark N times")
    group.addoption("--niclab-shard", metavar="I/N", help="run only the cells of shard I of N")
    group.addoption(
        "--niclab-kernel-build", metavar="DIR", help="boot every node on the kernel built in DIR (a driver under test)"
    )
    for option in declared_options():  # each backend's own
        if option.flag:
            group.addoption(f"--niclab-{option.name}", action="store_true", help=option.help)
        else:
            group.addoption(f"--niclab-{option.name}", metavar=option.metavar, default=option.default, help=option.help)


def _backend_options(config: pytest.Config) -> BackendOptions:
    """The backend options pytest's command line gives: a lab inventory (--niclab-lab), and the options the
    backends declare (--niclab-libvirt-uri, ...)."""
    from niclab.plumbing.backends import BackendOptions, declared_options

    given = {option.dest: config.getoption(f"niclab_{option.dest}", option.default) for option in declared_options()}
    return BackendOptions(config.stash.get(_LAB, None), **given)


def _lab_models(config: pytest.Config) -> None:
    """With --niclab-lab, scenarios may name the lab's own NIC models, from collection on."""
    lab_file = config.getoption("niclab_lab", None)
    if not lab_file:
        return
    from niclab.model.lab.inventory import load_inventory

    lab = load_inventory(Path(lab_file), allow_uri_params=config.getoption("niclab_allow_uri_params"))
    config.stash[_LAB] = lab
    config.stash[_LAB_MODELS] = ExitStack()
    config.stash[_LAB_MODELS].enter_context(lab.models_known())


def pytest_unconfigure(config: pytest.Config) -> None:
    if (models := config.stash.get(_LAB_MODELS, None)) is not None:
        models.close()


def pytest_configure(config: pytest.Config) -> None:
    _sigterm_interrupts()
    for name, text in (
        ("niclab_slow", f"a scenario cell estimated to take over {SLOW_S:.0f} s"),
        ("niclab_lab", "needs real cards from a lab inventory"),
        ("niclab_kvm", "needs a working KVM; skipped where the probe finds none"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")
    _lab_models(config)


def _sigterm_interrupts() -> None:
    """SIGTERM stops a session as Ctrl-C does: guests stopped, pytest's interrupted summary, no test after.

    Only where nobody else chose what SIGTERM does (its default), and only in the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        from niclab.base.procs import raise_interrupt

        signal.signal(signal.SIGTERM, raise_interrupt)


# -- collection -----------------------------------------------------------


def _named_on_command_line(path: Path, config: pytest.Config) -> bool:
    for arg in config.args:
        candidate = Path(str(arg).split("::", 1)[0])
        if not candidate.is_absolute():
            candidate = Path(config.invocation_params.dir) / candidate
        if candidate.resolve() == path.resolve():
            return True
    return False


def _shown(path: Path, config: pytest.Config) -> Path:
    """The path as the user would write it: relative to where pytest was started, if inside it."""
    try:
        return path.relative_to(Path(config.invocation_params.dir).resolve())
    except ValueError:
        return path


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> ScenarioFile | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    if "scenarios" in file_path.parent.parts or _named_on_command_line(file_path, parent.config):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from niclab.model.scenario import ScenarioError, parse
        from niclab.model.shard import parse_shard
        from niclab.run.plan import estimate

        try:
            scenario_file = parse(self.path.read_text(), str(_shown(self.path, self.config)), self.path)
        except (ScenarioError, UsageError) as exc:
            yield InvalidScenario.from_parent(self, name="validate", error=exc)
            return
        shard_text = self.config.getoption("niclab_shard")
        shard = parse_shard(shard_text) if shard_text else None
        for cell in scenario_file.cells:
            item = ScenarioCell.from_parent(self, name=cell.id, cell=cell, scenario_file=scenario_file)
            if shard and not shard.holds(scenario_file.name, cell.id):
                item.add_marker(pytest.mark.niclab_other_shard)
            if estimate(cell).total_s > SLOW_S:
                item.add_marker(pytest.mark.niclab_slow)
            if self.config.getoption("niclab_lab"):
                item.add_marker(pytest.mark.niclab_lab)
            yield item


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Cells of other shards are deselected, so each runner reports only its own."""
    if not config.getoption("niclab_shard"):
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if item.get_closest_marker("niclab_other_shard") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


class ScenarioInvalid(Exception):
    pass


class InvalidScenario(pytest.Item):
    def __init__(self, *, error: NiclabError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise ScenarioInvalid(str(self.error))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioInvalid):
            return shown_lines(f"{self.path.name} does not validate:\n{excinfo.value}")
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"{self.path.name}::validate"


class CellFailed(Exception):
    pass


class ScenarioCell(pytest.Item):
    def __init__(self, *, cell: Cell, scenario_file: ScenarioFileModel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cell = cell
        self.scenario_file = scenario_file
        self.scenario_name = scenario_file.name

    def runtest(self) -> None:
        from niclab.model.kernel_choice import parse_kernel
        from niclab.run.start import RunRequest, plan, start

        config = self.config
        kernel = None
        if tree := config.getoption("niclab_kernel_build"):
            try:
                kernel = parse_kernel({"build": tree})
            except ValueError as exc:
                raise NiclabError(f"--niclab-kernel-build: {exc}") from None
        shared = config.stash.setdefault(_SHARED, SharedRigs(config))
        backend = shared.backend()
        lab_file = config.getoption("niclab_lab")
        request = RunRequest(
            scenario=self.scenario_file,
            cells=[self.cell],
            out=_out_dir(config),
            kernel=kernel,
            repeat=config.getoption("niclab_repeat"),
            lab_file=Path(lab_file) if lab_file else None,
        )
        planned = plan(request, backend)
        if lab_file and (reason := planned.verdicts[0].reason) is not None:
            pytest.skip(reason)
        started = start(planned, _progress)  # a kernel that lacks a driver fails here, before anything boots
        run_dir = started.run_dir
        self.user_properties.append(("niclab_run_dir", str(run_dir.path)))
        outcome = started.run(shared.rigs()).cells[0]  # Ctrl-C propagates: pytest stops with its own summary
        for s in outcome.summaries:
            if s.headline:
                selectors = [f"link={s.link}"] if s.link else []
                selectors += [f"peer={s.peer}"] if s.peer else []
                selectors += [f"family={s.family}"] if s.family != 4 else []
                where = f"[{','.join(selectors)}]" if selectors else ""
                self.user_properties.append((f"{s.name}{where}", f"{s.mean:.6g} {s.unit}"))
        if not outcome.ok:
            lines = [
                f"{len(outcome.missed)} expectation(s) missed, {len(outcome.errors)} failure(s) "
                f"in cell {self.cell.id} of {self.path.name}:"
            ]
            lines += [f"  missed: {v.describe()}" for v in outcome.missed]
            lines += ["  failed: " + e.replace("\n", "\n          ") for e in outcome.errors]
            lines.append(f"run directory: {run_dir.path}")
            raise CellFailed("\n".join(lines))

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, (CellFailed, NiclabError)):
            return shown_lines(str(excinfo.value))  # what guests said, with their control characters escaped
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"{self.path.name}::{self.cell.id}"


class SharedRigs:
    """The session's backend, and its rig keeper: scenario items of one topology boot once, as `niclab run`'s
    cells do (niclab.run.rigs). Each item still has its own run directory; the rig the last item left up stops
    when an item needs another topology, when a cell fails on it, and at the end of the session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._backend: Backend | None = None
        self._rigs: BootKeeper | None = None

    def backend(self) -> Backend:
        if self._backend is None:
            from niclab.plumbing.backends import get_backend

            self._backend = get_backend(self.config.getoption("niclab_backend"), _backend_options(self.config))
        return self._backend

    def rigs(self) -> BootKeeper:
        if self._rigs is None:
            from niclab.run.rigs import BootKeeper

            self._rigs = BootKeeper(self.backend(), _progress)
        return self._rigs

    def close(self) -> None:
        if self._rigs is not None:
            self._rigs.drop()


_SHARED = pytest.StashKey[SharedRigs]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The rig the last scenario item left up stops with the session (also after Ctrl-C)."""
    if (shared := session.config.stash.get(_SHARED, None)) is not None:
        shared.close()


def _progress(message: str) -> None:
    print(f"[niclab {time.strftime('%H:%M:%S')}] {one_line(message)}", file=sys.stderr, flush=True)


def _out_dir(config: pytest.Config) -> Path:
    if out := config.getoption("niclab_out"):
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        return path
    factory = getattr(config, "_tmp_path_factory", None)
    return factory.mktemp("niclab-runs", numbered=True) if factory else Path(tempfile.mkdtemp(prefix="niclab-runs-"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("niclab_kvm") is not None:
        from niclab.plumbing.accel import choose_accel, forced_choice
        from niclab.plumbing.image import ensure_image

        choice = forced_choice() or choose_accel(ensure_image(progress=_progress), progress=_progress)
        if choice.accel != "kvm":
            pytest.skip(f"needs KVM, and it does not work here: {choice.reason}")


# -- the niclab_session fixture ---------------------------------------------


def choose_cell(scenario_file: ScenarioFileModel, cell: Mapping[str, object] | str | None) -> Cell:
    """A cell by id ("nic=e1000"), by parameters ({"nic": "e1000"}), or the only one."""
    cells = scenario_file.cells
    if cell is None:
        if len(cells) != 1:
            raise UsageError(
                f"{scenario_file.display} has {len(cells)} cells; name one: {', '.join(c.id for c in cells)}"
            )
        return cells[0]
    if isinstance(cell, str):
        return scenario_file.select([cell])[0]
    wanted = {k: str(v) for k, v in cell.items()}
    matching = [c for c in cells if all(str(c.params.get(k)) == v for k, v in wanted.items())]
    if len(matching) != 1:
        raise UsageError(
            f"{scenario_file.display}: {len(matching)} cells match {cell}; cells are: {', '.join(c.id for c in cells)}"
        )
    return matching[0]


@pytest.fixture
def niclab_session(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., AbstractContextManager[Session]]:
    """A Session on a scenario cell: `with niclab_session("scenarios/two-node.yaml", cell={"nic": "e1000"}) as s:`.

    s.node("a").run(...), s.bench("netperf", test="TCP_RR"), s.iface("a", link=0).
    Leaving the `with` stops every guest, also when the test fails.
    """
    from niclab.model.scenario import load_scenario
    from niclab.plumbing.backends import get_backend
    from niclab.run.session import Session

    backend_name = request.config.getoption("niclab_backend")

    @contextmanager
    def open_session(scenario: str | Path, cell: Mapping[str, object] | str | None = None) -> Iterator[Session]:
        path = Path(scenario)
        if not path.is_absolute():
            path = Path(request.config.rootpath) / path if not path.exists() else path
        chosen = choose_cell(load_scenario(path), cell)
        workdir = tmp_path / f"session-{chosen.scenario.name}-{len(list(tmp_path.glob('session-*')))}"
        with Session(
            chosen, get_backend(backend_name, _backend_options(request.config)), workdir, _progress
        ) as session:
            yield session

    return open_session
