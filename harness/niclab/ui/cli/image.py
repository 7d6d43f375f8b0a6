"""`niclab image build|info [RECIPE]`, `niclab image ls`: build a guest image (or an add-on), say what a built one
holds, list the built ones with their saved guest states."""

from __future__ import annotations

import argparse
import json
import sys

from niclab.base.errors import UsageError
from niclab.ui.console import EXIT_FAILED, EXIT_OK, ProgressLines


def _recipe_name(name: str) -> str:
    from niclab.base.paths import images_dir

    known = sorted(p.parent.name for p in images_dir().glob("*/recipe.toml"))
    if name not in known:
        raise UsageError(f"no image recipe {name!r}; recipes are: {', '.join(known)} (in {images_dir()})")
    return name


def cmd_build(args: argparse.Namespace) -> int:
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


def cmd_info(args: argparse.Namespace) -> int:
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


def cmd_ls(args: argparse.Namespace) -> int:
    from niclab.plumbing.backends.saved_state import states_of
    from niclab.plumbing.image.store import load_image, store_dir

    found = []
    for directory in sorted(store_dir().glob("*")) if store_dir().is_dir() else []:
        image = load_image(directory)
        if image is not None:
            found.append((image, states_of(directory)))
    if args.json:
        listed = [
            {
                "image": image.id,
                "directory": str(image.directory),
                "built_at": image.manifest.get("built_at"),
                "states": [
                    {
                        "key": s.key,
                        "directory": str(s.directory),
                        "bytes": s.bytes,
                        "made_at": s.made_at,
                        "cpus": s.cpus,
                        "memory_mib": s.memory_mib,
                        "accel": s.accel,
                        "qemu": s.qemu,
                    }
                    for s in states
                ],
            }
            for image, states in found
        ]
        print(json.dumps(listed, indent=2))
        return EXIT_OK
    if not found:
        print(f"no image is built in {store_dir()}; `niclab image build` builds one", file=sys.stderr)
        return EXIT_OK
    for image, states in found:
        print(f"{image.id}  built {image.manifest.get('built_at', '?')}  {image.directory}")
        for state in states:
            print(
                f"  saved state {state.key}  {state.cpus} vCPU, {state.memory_mib} MiB, {state.accel}  "
                f"{state.bytes / 2**20:.0f} MiB  made {state.made_at}"
            )
    print("a saved state goes with its image; remove one with `rm -r` of its directory (`--json` says where)")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    build.set_defaults(func=cmd_build)
    info = image_verbs.add_parser(
        "info",
        help="show the image's versions",
        description="Show the built image: kernel, packages and their versions.",
    )
    info.add_argument("recipe", nargs="?", default="micro", metavar="RECIPE", help="micro (default) or debian")
    info.add_argument("--json", action="store_true", help="the whole manifest as JSON")
    info.set_defaults(func=cmd_info)
    listing = image_verbs.add_parser(
        "ls",
        help="list the built images and their saved guest states",
        description="List the images in the cache, each with the guest states saved from it (a guest of each "
        "kind boots once; later ones are restored from its saved state).",
    )
    listing.add_argument("--json", action="store_true", help="as JSON")
    listing.set_defaults(func=cmd_ls)
