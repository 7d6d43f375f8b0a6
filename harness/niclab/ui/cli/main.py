"""The `niclab` command. Exit codes: 0 ok, 1 failed, 2 usage error, 3 niclab failed (a bug; niclab.ui.console)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from niclab import __version__
from niclab.base.errors import NiclabError, UsageError, describe_exception
from niclab.base.node import Progress
from niclab.ui.cli.lab import add_allow_uri_params
from niclab.ui.console import EXIT_BUG, EXIT_FAILED, EXIT_OK, STARTED, FileCheck, ProgressLines, terminal_streams

if TYPE_CHECKING:
    from niclab.plumbing.backends import Backend, BackendOption
    from niclab.run.results import RunDir

# -- verbs ----------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from niclab.run.realizable import backend_from_args

    with backend_from_args(args) as backend:
        return _run(args, backend)


def _run(args: argparse.Namespace, backend: Backend) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.model.shard import parse_shard
    from niclab.run.realizable import describe
    from niclab.run.start import RunRequest, check_parallel, plan, start
    from niclab.ui.table import cell_table

    progress = ProgressLines(args.quiet)
    scenario_file = load_scenario(Path(args.scenario))
    cells = scenario_file.select(args.cell)
    if args.shard:
        shard = parse_shard(args.shard)
        cells = [cell for cell in cells if shard.holds(scenario_file.name, cell.id)]
        progress(f"shard {shard}: {len(cells)} of {len(scenario_file.cells)} cells")
        if not cells:
            print(f"niclab: shard {shard} of {scenario_file.name} holds no cell; nothing to run", file=sys.stderr)
            return EXIT_OK
    kernel = None
    if args.kernel_build:
        from niclab.model.kernel_choice import parse_kernel

        try:
            kernel = parse_kernel({"build": args.kernel_build})
        except ValueError as exc:
            raise UsageError(f"--kernel-build: {exc}") from None
    request = RunRequest(
        scenario=scenario_file,
        cells=cells,
        out=Path(args.out),
        kernel=kernel,
        repeat=args.repeat,
        lab_file=Path(args.lab) if args.lab else None,
        started=STARTED,
        parallel=args.parallel,
    )
    check_parallel(request, backend)
    planned = plan(request, backend)
    if args.dry_run:
        where = request.out / f"dry-run-{scenario_file.name}"
        print(f"{scenario_file.name} on the {backend.name} backend (boots nothing):")
        print(describe(backend, planned.verdicts, where))
        if where.is_dir():
            print(f"what it would start is in {where}")
        return EXIT_OK if any(v.ok for v in planned.verdicts) else EXIT_FAILED
    started = start(planned, progress)
    run_dir = started.run_dir
    try:
        with progress.showing_run():  # the whole run's progress: a line of its own in a terminal
            outcome = started.run(watch=progress.watch)
    except KeyboardInterrupt:
        print(f"niclab: interrupted; the guests were stopped; partial results in {run_dir.results}", file=sys.stderr)
        write_run_report(run_dir.path, progress)
        write_run_nipa(run_dir.path, progress)
        return EXIT_FAILED
    for cell in outcome.cells:
        print(cell_table(scenario_file.name, cell))
        print()
    for warning in started.info.warnings:
        print(f"warning: {warning}")
    print(f"results: {run_dir.results}")
    print(f"report:  {write_run_report(run_dir.path, progress)}")
    if (nipa := write_run_nipa(run_dir.path, progress)) is not None:
        print(f"nipa:    {nipa}")
    if started.info.internal_errors:
        sys.stdout.flush()
        print(internal_errors_line(started.info.internal_errors, run_dir), file=sys.stderr)
        return EXIT_BUG
    return EXIT_OK if outcome.ok else EXIT_FAILED


def internal_errors_line(errors: list[dict], run_dir: RunDir) -> str:
    """The last line of a run in which niclab itself failed: a bug, whatever the cards did, and where to look."""
    cells = list(dict.fromkeys(str(error.get("cell")) for error in errors))
    logs = ", ".join(str(run_dir.cell_dir(cell) / "cell.log") for cell in cells)
    count = f"{len(errors)} internal error{'s' if len(errors) > 1 else ''}"
    return f"niclab failed, not the card: {count} (a bug in niclab); see the traceback in {logs}, and please report it"


def write_run_report(run_dir: Path, progress: Progress) -> Path | str:
    from niclab.ui.report.page import report_runs

    try:
        return report_runs([run_dir], run_dir / "report.html")
    except Exception as exc:  # a report problem must not hide the results already written
        progress(f"the report could not be written: {exc!r}")
        return "(not written; see the message above)"


def write_run_nipa(run_dir: Path, progress: Progress) -> Path | None:
    """The run's selftest results as NIPA reads them (nipa.json), when it ran any; None otherwise."""
    from niclab.ui.nipa import write_nipa

    try:
        return write_nipa(run_dir)
    except Exception as exc:  # an export problem must not hide the results already written
        progress(f"nipa.json could not be written: {exc!r}")
        return None


def _recipe_name(name: str) -> str:
    from niclab.base.paths import images_dir

    known = sorted(p.parent.name for p in images_dir().glob("*/recipe.toml"))
    if name not in known:
        raise UsageError(f"no image recipe {name!r}; recipes are: {', '.join(known)} (in {images_dir()})")
    return name


def cmd_image_build(args: argparse.Namespace) -> int:
    from niclab.plumbing.image.addon import build_addon
    from niclab.plumbing.image.store import build_image, recipe

    name = _recipe_name(args.recipe)
    build = build_addon if recipe(name).addon else build_image
    print(build(name, force=args.force, progress=ProgressLines()).directory)
    return EXIT_OK


def _addon_info(name: str, as_json: bool) -> int:
    from niclab.plumbing.image.addon import addon_recipe, find_addon

    addon = find_addon(name)
    if addon is None:
        wanted = addon_recipe(name)
        print(f"add-on {name}-{wanted.input_hash()} is not built; run `niclab image build {name}`", file=sys.stderr)
        return EXIT_FAILED
    m = addon.manifest
    if as_json:
        print(json.dumps(m, indent=2))
        return EXIT_OK
    print(
        f"add-on     {addon.id}\ndirectory  {addon.directory}\nbuilt      {m['built_at']} in {m['build_seconds']} s\n"
        f"suite      {m['suite']}\narchive    {m['archive_bytes'] / 2**20:.1f} MiB, "
        f"{m['unpacked_bytes'] / 2**20:.0f} MiB unpacked\nmemory     {m['memory_mib']} MiB more per guest"
    )
    print("packages   " + "\n           ".join(f"{p} {v}" for p, v in m["addon_packages"].items()))
    return EXIT_OK


def cmd_image_info(args: argparse.Namespace) -> int:
    from niclab.model import bench
    from niclab.plumbing.image.store import find_image, recipe

    name = _recipe_name(args.recipe)
    if recipe(name).addon:
        return _addon_info(name, args.json)
    image = find_image(name)
    if image is None:
        wanted = recipe(name)
        build = "niclab image build" + ("" if name == "micro" else f" {name}")
        print(f"image {wanted.name}-{wanted.input_hash()} is not built; run `{build}`", file=sys.stderr)
        return EXIT_FAILED
    m = image.manifest
    if args.json:
        print(json.dumps(m, indent=2))
        return EXIT_OK
    print(
        f"image      {image.id}\ndirectory  {image.directory}\nbuilt      {m['built_at']} "
        f"in {m['build_seconds']} s\nsuite      {m['suite']}\nkernel     {m['kernel_version']}\n"
        f"initramfs  {m['initrd_bytes'] / 2**20:.1f} MiB\nmodules    {', '.join(m['modules'])}"
    )
    if image.disk is not None:
        qcow2_mib = m["disk"]["qcow2_bytes"] / 2**20
        print(f"disk       {image.disk} ({m['disk']['size_mib']} MiB ext4, {qcow2_mib:.0f} MiB qcow2)")
    base = ("linux-image-amd64", "iproute2", "ethtool", "qemu-guest-agent", "busybox-static", "firmware-misc-nonfree")
    tools = (*base, "systemd", "openssh-server", *bench.guest_packages())  # then what the benchmarks declare
    shown = [p for p in dict.fromkeys(tools) if p in m["packages"]]
    print("packages   " + "\n           ".join(f"{p} {m['packages'][p]}" for p in shown))
    for source, directory in m.get("built_from_source", {}).items():
        print(f"built      {source} from Debian source ({directory})")
    print(f"           ({len(m['packages'])} packages in all: niclab image info --json)")
    return EXIT_OK


def cmd_accel(args: argparse.Namespace) -> int:
    from niclab.plumbing.accel import choose_accel
    from niclab.plumbing.image import ensure_image

    progress = ProgressLines()
    if args.lab:
        return _lab_accel(args, progress)
    choice = choose_accel(ensure_image(progress=progress), refresh=args.probe, progress=progress)
    how = "set by NICLAB_ACCEL" if choice.forced else f"decided {choice.probed_at}"
    print(f"{choice.accel} ({how}): {choice.reason}")
    return EXIT_OK


def _lab_accel(args: argparse.Namespace, progress: ProgressLines) -> int:
    """`niclab accel --lab`: each host's verdict, probed there through its libvirt where none is cached."""
    from niclab.model.lab.inventory import load_inventory
    from niclab.plumbing.backends.libvirt_accel import hosts_accel
    from niclab.plumbing.image import ensure_image

    lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    image = ensure_image(progress=progress)
    verdicts = hosts_accel({name: host.libvirt for name, host in lab.hosts.items()}, image, progress, args.probe)
    status = EXIT_OK
    for name, verdict in verdicts.items():
        where = f"host {name} ({lab.hosts[name].libvirt})"
        if isinstance(verdict, str):
            print(f"{where}: not probed: {verdict}")
            status = 1
            continue
        how = "set by NICLAB_ACCEL" if verdict.forced else f"decided {verdict.probed_at}"
        print(f"{where}: {verdict.accel} ({how}): {verdict.reason}")
    return status


def cmd_down(args: argparse.Namespace) -> int:
    from niclab.plumbing.backends import DownRequest, down_options, leftovers

    lab = None
    if args.lab:
        from niclab.model.lab.inventory import load_inventory

        lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    request = DownRequest(args.all, lab, {option.dest: getattr(args, option.dest) for option in down_options()})
    ended = []
    for kind in leftovers():
        ended += kind.end(request, print, lambda line: print(line, file=sys.stderr))
    if not ended:
        print("nothing to stop")
    return EXIT_OK


def cmd_nics(args: argparse.Namespace) -> int:
    from niclab.model import nics
    from niclab.plumbing.backends.qemu_nics import qemu_nic

    print(f"{'model':<34}{'driver':<12}{'max MTU':>8}  {'PCI ID':<11}card")
    for model in nics.CATALOG:
        print(f"{model.name:<34}{model.driver:<12}{model.max_mtu:>8}  {model.pci_id:<11}{model.card}")
    notes = [model for model in nics.CATALOG if model.notes]
    if notes:
        print()
        for model in notes:
            properties = qemu_nic(model.name).properties
            qemu = f" (QEMU: {properties})" if properties else ""
            print(f"{model.name}: {model.notes}{qemu}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    import yaml

    from niclab.ui.report.page import report_runs

    prices = None
    if args.prices:
        try:
            prices = yaml.safe_load(Path(args.prices).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"{args.prices}: cannot read prices ({exc})") from None
        if not isinstance(prices, dict):
            raise UsageError(f"{args.prices}: prices are a mapping of NIC model to price, e.g. {{e1000: 35}}")
        for model, price in prices.items():
            if isinstance(price, bool) or not isinstance(price, int | float):
                raise UsageError(f"{args.prices}: {model}: {price!r} is not a price; give a number, e.g. 35")
    runs = [Path(p) for p in args.runs]
    out = Path(args.out) if args.out else (runs[0] / "report.html" if len(runs) == 1 else Path("report.html"))
    print(report_runs(runs, out, prices))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from niclab.ui import compare
    from niclab.ui.report.data import for_compare, for_comparing_runs, load_run
    from niclab.ui.testchanges import compare_tests

    base = Path(args.base)
    new = Path(args.new) if args.new else base
    if args.cells:
        if args.new:  # two runs: nothing pairs their repeats
            a = load_run(base, for_comparing_runs).cell(args.cells[0])
            b = load_run(new, for_comparing_runs).cell(args.cells[1])
            changes = compare.compare_pair(a, b, args.threshold, args.alpha, args.all, paired=False)
        else:
            run = load_run(base, for_compare)
            a, b = run.cell(args.cells[0]), run.cell(args.cells[1])
            changes = compare.compare_cells(run, a.id, b.id, args.threshold, args.alpha, args.all)
        tests = compare_tests([(a, b)])
    elif not args.new:
        raise UsageError("compare needs two runs, or one run and --cells BASE_CELL NEW_CELL")
    else:
        base_run, new_run = load_run(base, for_comparing_runs), load_run(new, for_comparing_runs)
        changes = compare.compare(base_run, new_run, args.threshold, args.alpha, every_metric=args.all)
        tests = compare.selftest_changes(base_run, new_run)
    render = {"text": compare.as_text, "json": compare.as_json, "html": compare.as_html}[args.format]
    text = render(changes, base, new, args.threshold, args.alpha, tests)
    if args.out:
        from niclab.base.atomic import write_text

        write_text(Path(args.out), text + ("" if text.endswith("\n") else "\n"))
        print(args.out)
    else:
        print(text)
    worse = [c for c in changes if c.verdict == "worse"]
    if not changes and tests is None:
        print("niclab: the runs share no cell and metric to compare", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if worse or (tests is not None and tests.broke) else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from niclab.ui.export import export

    run_dir = Path(args.run)
    if args.format == "nipa":
        from niclab.ui.nipa import write_nipa

        if args.out:
            raise UsageError("--format nipa writes nipa.json and nipa/ in the run directory; drop --out")
        written = write_nipa(run_dir, args.branch, args.url)
        if written is None:
            raise UsageError(f"{run_dir} has no kernel selftest results (test records) to export for NIPA")
        print(written)
        return EXIT_OK
    out = Path(args.out) if args.out else run_dir / f"{args.what}.{args.format}"
    count = export(run_dir, args.format, out, args.what)
    print(f"{out} ({count} rows)")
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from niclab.model.bench import all_metrics

    metrics = all_metrics()
    width = max(len(m.name) for m in metrics) + 2
    print(f"{'metric':<{width}}{'unit':<10}{'better':<8}meaning")
    for m in metrics:
        print(f"{m.name:<{width}}{m.unit:<10}{m.better or '':<8}{m.description}")
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.plan import plan_table
    from niclab.run.realizable import backend_from_args, verdicts

    with backend_from_args(args) as backend:
        scenario_file = load_scenario(Path(args.scenario))
        cells = scenario_file.select(args.cell)
        print(plan_table(scenario_file.name, cells))
        if args.lab or args.backend:
            for verdict in verdicts(backend, cells):
                if not verdict.ok:
                    print(f"cannot realize {verdict.cell.id} on {backend.name}: {verdict.reason}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.realizable import backend_from_args, verdicts

    files = FileCheck()
    with backend_from_args(args) as backend:
        for name, scenario_file in files.each(args.files, load_scenario):
            count = len(scenario_file.cells)
            print(f"{name}: ok ({count} cell{'s' if count != 1 else ''})")
            if args.lab or args.backend:
                for verdict in verdicts(backend, scenario_file.cells):
                    if not verdict.ok:
                        print(f"{name}: cell {verdict.cell.id}: {backend.name} cannot realize it: {verdict.reason}")
    return files.status


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """--backend, --lab and the options the backends declare that matter before anything starts."""
    from niclab.plumbing.backends import declared_options, defaults, registry

    plain, with_lab = defaults()
    parser.add_argument(
        "--backend",
        choices=tuple(registry()),
        help="how nodes are realized: "
        + "; ".join(f"{p.name}: {p.summary}" for p in registry().values())
        + f" (default: {plain}, or {with_lab} with --lab)",
    )
    parser.add_argument("--lab", metavar="LAB_YAML", help="a lab inventory: run on its real cards and cables")
    add_allow_uri_params(parser)
    add_declared(parser, declared_options(starts_nodes=False))


def add_start_options(parser: argparse.ArgumentParser) -> None:
    """The options the backends declare for a run that starts nodes."""
    from niclab.plumbing.backends import declared_options

    add_declared(parser, [option for option in declared_options() if option.starts_nodes])


def add_declared(parser: argparse.ArgumentParser, options: list[BackendOption]) -> None:
    for option in options:
        if option.flag:
            parser.add_argument(f"--{option.name}", action="store_true", help=option.help)
        else:
            parser.add_argument(f"--{option.name}", metavar=option.metavar, default=option.default, help=option.help)


# -- parser ---------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1; give 1 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="niclab", description="Reproducible benchmarks of network cards and drivers.")
    parser.add_argument("--version", action="version", version=f"niclab {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = verbs.add_parser(
        "run",
        help="run a scenario's benchmarks",
        description="Boot the scenario's nodes, configure the links, run the benchmarks and write a run directory.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="scenario file (YAML)")
    run.add_argument("--out", default="runs", metavar="DIR", help="where run directories go (default: runs)")
    run.add_argument(
        "--cell", action="append", metavar="ID", help="run only this matrix cell (e.g. nic=e1000); repeat for several"
    )
    add_backend_options(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="boot nothing: say how each cell maps onto the backend (a lab's cards and cables) and write "
        "the domain XML",
    )
    add_start_options(run)
    run.add_argument(
        "--repeat", type=positive_int, metavar="N", help="run every benchmark N times (overrides the scenario)"
    )
    run.add_argument(
        "--parallel",
        action="store_true",
        help="with --lab: run cells at once wherever their cards (or, with --emulated, a host's capacity) are free; "
        "the run directory is as a sequential run writes it",
    )
    run.add_argument("--shard", metavar="I/N", help="run only the cells of shard I of N (stable across machines)")
    run.add_argument(
        "--kernel-build",
        metavar="DIR",
        help="boot every node on the kernel built in DIR (its bzImage and modules), whatever the scenario names",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.set_defaults(func=cmd_run)

    image = verbs.add_parser(
        "image",
        help="build or describe the guest image",
        description="The guest image is built from Debian packages and cached per recipe hash.",
    )
    image_verbs = image.add_subparsers(dest="image_verb", metavar="ACTION", required=True)
    build = image_verbs.add_parser(
        "build",
        help="build the image (if its recipe changed, or with --force)",
        description="Build a guest image for the current recipe: micro (a kernel and an initramfs, what "
        "`niclab run` boots), lab, debian (a full Debian disk, the Vagrant box), or an add-on such as kselftest "
        "(an archive added to the initramfs of the nodes whose benchmarks need it).",
    )
    build.add_argument("recipe", nargs="?", default="micro", metavar="RECIPE", help="micro (default) or debian")
    build.add_argument("--force", action="store_true", help="build even if the cache has it")
    build.set_defaults(func=cmd_image_build)
    info = image_verbs.add_parser(
        "info",
        help="show the image's versions",
        description="Show the built image: kernel, packages and their versions.",
    )
    info.add_argument("recipe", nargs="?", default="micro", metavar="RECIPE", help="micro (default) or debian")
    info.add_argument("--json", action="store_true", help="the whole manifest as JSON")
    info.set_defaults(func=cmd_image_info)

    accel = verbs.add_parser(
        "accel",
        help="say whether guests run under KVM or TCG here, and why",
        description="KVM is used only where the guest image's kernel reaches userspace "
        "under it; the verdict is cached per host and image.",
    )
    accel.add_argument("--probe", action="store_true", help="probe KVM again instead of using the cached verdict")
    accel.add_argument(
        "--lab",
        metavar="LAB_YAML",
        help="each host of this lab: a remote host's probe boots there, through its libvirt (cached per host URI "
        "and image)",
    )
    add_allow_uri_params(accel)
    accel.set_defaults(func=cmd_accel)

    down = verbs.add_parser(
        "down",
        help="stop what a killed run left behind",
        description="Stop the QEMU processes recorded by harnesses that are no longer "
        "running (by recorded PID and start time), and destroy the libvirt domains such runs left.",
    )
    down.add_argument("--all", action="store_true", help="also stop those of runs still in progress")
    from niclab.plumbing.backends import down_options

    add_declared(down, down_options())
    down.add_argument("--lab", metavar="LAB_YAML", help="destroy leftover niclab domains on every host of this lab")
    add_allow_uri_params(down)
    down.set_defaults(func=cmd_down)

    nics = verbs.add_parser(
        "nics",
        help="list the emulated NIC models",
        description="The NIC models a scenario can name, their drivers and limits.",
    )
    nics.set_defaults(func=cmd_nics)

    report = verbs.add_parser(
        "report",
        help="write an HTML report of one or more runs",
        description="One self-contained HTML page (plots embedded) from run directories: "
        "summary tables, NetPIPE curves, bars, MTU and bonding plots, fio, "
        "costs, findings and provenance.",
    )
    report.add_argument("runs", nargs="+", metavar="RUN_DIR")
    report.add_argument("--out", metavar="FILE", help="default: RUN_DIR/report.html for one run, else report.html")
    report.add_argument("--prices", metavar="FILE", help="YAML: NIC model -> price, for cost per Mbit/s")
    report.set_defaults(func=cmd_report)

    compare = verbs.add_parser(
        "compare",
        help="what changed between two runs, and whether it is real",
        description="Per metric and cell: the change in %% and a verdict from Welch's "
        "t-test on the samples (a paired t-test for two cells of one run whose repeats alternated); "
        "and the kernel selftests whose result changed. Exit 1 if a metric got worse or a selftest that passed "
        "fails or crashes now.",
    )
    compare.add_argument("base", metavar="BASE_RUN")
    compare.add_argument("new", metavar="NEW_RUN", nargs="?", help="omitted: compare two cells of BASE_RUN (--cells)")
    compare.add_argument(
        "--cells",
        nargs=2,
        metavar=("BASE_CELL", "NEW_CELL"),
        help="A/B: this cell of BASE_RUN against that one (of NEW_RUN, or of BASE_RUN itself); "
        "cells whose repeats alternated on one boot are compared repeat by repeat (a paired t-test)",
    )
    compare.add_argument("--format", choices=("text", "json", "html"), default="text")
    compare.add_argument("--out", metavar="FILE", help="write there instead of to stdout")
    compare.add_argument(
        "--threshold",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest change that counts, in %% of the base mean (default 5)",
    )
    compare.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    compare.add_argument(
        "--all",
        action="store_true",
        help="judge every metric, not only the headline ones (retransmits, percentiles, ...)",
    )
    compare.set_defaults(func=cmd_compare)

    export = verbs.add_parser(
        "export",
        help="a run's results as CSV or Parquet, or its selftests for NIPA",
        description="One flat table for pandas: measurements (default) or summaries. --format nipa: the kernel "
        "selftests' results in NIPA's format (RUN_DIR/nipa.json, the manifest, and nipa/<cell>.json).",
    )
    export.add_argument("run", metavar="RUN_DIR")
    export.add_argument("--format", choices=("csv", "parquet", "nipa"), default="csv")
    export.add_argument("--what", choices=("measurements", "summaries"), default="measurements")
    export.add_argument("--out", metavar="FILE", help="default: RUN_DIR/<what>.<format>")
    export.add_argument("--branch", help="nipa: the branch the run tested (default: the run directory's name)")
    export.add_argument("--url", metavar="BASE_URL", help="nipa: where the run directory is published (links)")
    export.set_defaults(func=cmd_export)

    metrics = verbs.add_parser(
        "metrics",
        help="list every metric, with its unit",
        description="The metrics benchmarks report, by the names expectations use.",
    )
    metrics.set_defaults(func=cmd_metrics)

    plan = verbs.add_parser(
        "plan",
        help="list a scenario's cells and estimate the run's wall time",
        description="List the matrix cells a run would realize, with an estimate of "
        "each one's wall time; boots nothing.",
    )
    plan.add_argument("scenario", metavar="SCENARIO")
    plan.add_argument("--cell", action="append", metavar="ID", help="only these cells")
    add_backend_options(plan)
    plan.set_defaults(func=cmd_plan)

    validate = verbs.add_parser(
        "validate",
        help="check scenario files without booting anything",
        description="Check scenario files; exit 1 if any has a problem.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    add_backend_options(validate)
    validate.set_defaults(func=cmd_validate)

    from niclab.ui.cli.lab import add_parser as add_lab_parser
    from niclab.ui.cli.vagrant import add_parser as add_vagrant_parser

    add_lab_parser(verbs)
    add_vagrant_parser(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    with terminal_streams():  # what guests, hosts and files say reaches the terminal with its controls escaped
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from niclab.base.procs import raise_interrupt

    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        return args.func(args)
    except NiclabError as exc:  # a scenario that does not validate exits 1 under validate, plan and run alike
        text = str(exc)
        print(text if "\n" in text or exc.shown_as_is else f"niclab: {text}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("niclab: interrupted", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # Only a closed stdout gets here (`niclab metrics | head`): a guest's socket raises AgentError.
        # Point stdout at /dev/null so the interpreter's final flush does not complain, and stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:
        print(f"niclab: {describe_exception(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        saved = save_crash(exc)
        print(
            f"niclab: {describe_exception(exc)}; this is a bug in niclab: the traceback is in {saved}", file=sys.stderr
        )
        return EXIT_BUG


def save_crash(exc: Exception) -> str:
    """Write the traceback of an unexpected exception to the cache, for a bug report."""
    import traceback

    from niclab.base.paths import cache_dir

    text = "".join(traceback.format_exception(exc))
    try:
        path = cache_dir() / "crashes" / f"{time.strftime('%Y-%m-%dT%H-%M-%S')}-{os.getpid()}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"niclab {__version__}: {' '.join(sys.argv)}\n{text}")
        return str(path)
    except OSError:
        sys.stderr.write(text)
        return "the lines above"
