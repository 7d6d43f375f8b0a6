"""Selftest bundles: a Debian suite's linux-source from a signed mirror (a fake one in a folder), a build tree's
own selftests, an installed tree a scenario names; each built once and cached."""

import hashlib
import lzma
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model.kernel_choice import KernelChoice
from niclab.plumbing.kselftest import debian, install
from niclab.plumbing.kselftest.bundle import bundle_for, bundle_from_dir
from niclab.plumbing.kselftest.debian import Package, choose_source, compare_versions

TARGETS = ("drivers/net", "drivers/net/hw")

# The selftests' Makefile of a fake kernel tree: `install` writes what the kernel's would, for the targets given.
SELFTESTS_MAKEFILE = """\
install:
\tmkdir -p $(INSTALL_PATH)/kselftest $(INSTALL_PATH)/drivers/net/hw $(INSTALL_PATH)/net/lib/py
\tprintf '#!/bin/sh\\n' > $(INSTALL_PATH)/run_kselftest.sh
\tfor t in $(TARGETS); do echo "$$t" >> $(INSTALL_PATH)/targets; done
\tprintf 'drivers/net:ping.py\\ndrivers/net:stats.py\\ndrivers/net/hw:csum.py\\n' > $(INSTALL_PATH)/kselftest-list.txt
\techo timeout=0 > $(INSTALL_PATH)/drivers/net/hw/settings
\ttouch $(INSTALL_PATH)/drivers/net/ping.py $(INSTALL_PATH)/drivers/net/stats.py $(INSTALL_PATH)/drivers/net/hw/csum.py
\tln -s ../../../net/lib/py $(INSTALL_PATH)/drivers/net/hw/py
"""


def fake_tree(root: Path) -> Path:
    for folder in ("tools/testing/selftests/drivers/net/hw", "scripts", "include/uapi/linux", "Documentation/netlink"):
        (root / folder).mkdir(parents=True)
    (root / "Makefile").write_text("VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 107\nEXTRAVERSION =\n")
    (root / "tools/testing/selftests/Makefile").write_text(SELFTESTS_MAKEFILE)
    for target in TARGETS:
        (root / "tools/testing/selftests" / target / "Makefile").write_text("")
    return root


def stanza(name: str, version: str, filename: str = "", data: bytes = b"") -> str:
    filename = filename or f"pool/main/l/linux/{name}_{version}_all.deb"
    return (
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nFilename: {filename}\n"
        f"Size: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n\n"
    )


@pytest.fixture(scope="module")
def signed_mirror(tmp_path_factory):
    """A trixie mirror: its InRelease signed by a key made here, an amd64 and an all index, linux-source-6.12."""
    top = tmp_path_factory.mktemp("mirror")
    tree = fake_tree(top / "build" / "linux-source-6.12")
    subprocess.run(["tar", "-cJf", str(top / "src.tar.xz"), "-C", str(top / "build"), "linux-source-6.12"], check=True)
    package = top / "deb"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "usr/src").mkdir(parents=True)
    shutil.copy(top / "src.tar.xz", package / "usr/src/linux-source-6.12.tar.xz")
    (package / "DEBIAN/control").write_text(
        "Package: linux-source-6.12\nVersion: 6.12.107-1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n"
    )
    mirror = top / "debian"
    pool = mirror / "pool/main/l/linux"
    pool.mkdir(parents=True)
    deb = pool / "linux-source-6.12_6.12.107-1_all.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "--build", str(package), str(deb)], check=True, capture_output=True)
    data = deb.read_bytes()
    indexes = {
        # the suite's kernel is 6.12.117-1, whose source the index lacks: the newest 6.12 source is taken
        "main/binary-amd64/Packages.xz": "Package: linux-image-amd64\nVersion: 6.12.117-1\nArchitecture: amd64\n"
        "Filename: pool/x.deb\nSize: 1\nSHA256: 00\n\n",
        "main/binary-all/Packages.xz": stanza("linux-source-6.12", "6.12.94-1", data=b"older")
        + stanza("linux-source-6.12", "6.12.107-1", data=data)
        + stanza("linux-source-6.1", "6.1.176-1", data=b"other"),
    }
    release = "Origin: Debian\nCodename: trixie\nAcquire-By-Hash: yes\nSHA256:\n"
    for path, text in indexes.items():
        packed = lzma.compress(text.encode())
        (mirror / "dists/trixie" / path).parent.mkdir(parents=True, exist_ok=True)
        (mirror / "dists/trixie" / path).write_bytes(packed)
        release += f" {hashlib.sha256(packed).hexdigest()} {len(packed)} {path}\n"
    home = Path(tempfile.mkdtemp(prefix="gpg", dir="/tmp"))  # short: gpg-agent's socket lives there
    gpg = ["gpg", "--batch", "--homedir", str(home), "--passphrase", "", "--pinentry-mode", "loopback"]
    try:
        subprocess.run([*gpg, "--quick-gen-key", "niclab test <t@t>", "ed25519", "sign", "never"], check=True)
        (mirror / "dists/trixie/Release").write_text(release)
        subprocess.run(
            [*gpg, "--clearsign", "-o", str(mirror / "dists/trixie/InRelease"), str(mirror / "dists/trixie/Release")],
            check=True,
        )
        keyring = top / "keyring.gpg"
        keyring.write_bytes(subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout)
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    return mirror, keyring, tree


@pytest.fixture
def suite_mirror(signed_mirror, tmp_path, monkeypatch):
    """A copy of the mirror (a test may spoil or remove it) as the Debian mirror, its key as Debian's."""
    mirror, keyring, _ = signed_mirror
    copy = tmp_path / "debian"
    shutil.copytree(mirror, copy)
    monkeypatch.setenv("NICLAB_DEBIAN_MIRROR", copy.as_uri())
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(debian, "KEYRING", keyring)
    return copy


def members(archive: Path) -> set[str]:
    with tarfile.open(archive) as packed:
        return {member.name for member in packed.getmembers()}


def test_a_suites_bundle_is_its_linux_source_installed_and_is_fetched_once(suite_mirror):
    said: list[str] = []
    bundle = bundle_for(KernelChoice(suite="trixie"), TARGETS, said.append)
    assert bundle.source == (
        "Debian trixie linux-source-6.12 6.12.107-1 (the newest linux-source-6.12: the index has no source of the "
        "suite's kernel 6.12.117-1)"
    )
    assert bundle.version == "6.12.107"
    assert bundle.tests == (("drivers/net", "ping.py"), ("drivers/net", "stats.py"), ("drivers/net/hw", "csum.py"))
    assert bundle.timeouts == {"drivers/net/hw": 0}
    assert {"run_kselftest.sh", "kselftest-list.txt", "drivers/net/ping.py", "drivers/net/hw/py"} <= members(
        bundle.archive
    )
    with tarfile.open(bundle.archive) as packed:
        assert packed.extractfile("targets").read() == b"drivers/net\ndrivers/net/hw\n"  # type: ignore[union-attr]
    assert any("fetching linux-source-6.12 6.12.107-1" in line for line in said)
    shutil.rmtree(suite_mirror)  # no mirror now: the second call must not need it
    again = bundle_for(KernelChoice(suite="trixie"), TARGETS, said.append)
    assert again == bundle


def test_a_package_that_is_not_the_indexs_is_refused(suite_mirror):
    deb = suite_mirror / "pool/main/l/linux/linux-source-6.12_6.12.107-1_all.deb"
    data = bytearray(deb.read_bytes())
    data[-1] ^= 1
    deb.write_bytes(bytes(data))
    with pytest.raises(NiclabError, match=r"linux-source-6.12_6.12.107-1_all.deb: SHA256 \w+ is not the index's"):
        bundle_for(KernelChoice(suite="trixie"), TARGETS, lambda line: None)


def test_an_index_not_signed_by_debians_key_is_refused(suite_mirror, tmp_path, monkeypatch):
    other = tmp_path / "other.gpg"
    other.write_bytes(b"")
    monkeypatch.setattr(debian, "KEYRING", other)
    with pytest.raises(NiclabError, match=r"Debian trixie's InRelease is not signed by a key of .*other.gpg"):
        bundle_for(KernelChoice(suite="trixie"), TARGETS, lambda line: None)


def test_an_index_that_does_not_match_inrelease_is_left_out(suite_mirror):
    index = suite_mirror / "dists/trixie/main/binary-all/Packages.xz"
    index.write_bytes(lzma.compress(b"Package: linux-source-6.12\n"))
    said: list[str] = []
    with pytest.raises(NiclabError, match=r"has no linux-source-6\.12 for its kernel 6\.12\.117-1"):
        bundle_for(KernelChoice(suite="trixie"), TARGETS, said.append)
    assert any(line.startswith("left out Debian trixie's main/binary-all/Packages.xz") for line in said)


def test_the_images_own_kernel_is_refused_before_anything_is_fetched(monkeypatch):
    monkeypatch.setattr(debian, "download", None)  # any fetch would fail differently
    with pytest.raises(NiclabError, match=r"kernel bookworm \(Debian 12's kernel 6.1\), the image's own kernel,"):
        bundle_for(None, TARGETS, lambda line: None)


def test_the_source_is_the_kernels_version_when_listed():
    def pkg(name: str, version: str) -> Package:
        return Package(name, version, "f", 1, "0")

    listed = [pkg("linux-image-amd64", "6.12.117-1"), pkg("linux-source-6.12", "6.12.107-1")]
    assert choose_source([*listed, pkg("linux-source-6.12", "6.12.117-1")]).exact
    chosen = choose_source([*listed, pkg("linux-source-6.12", "6.12.94-1"), pkg("linux-source-6.1", "6.1.200-1")])
    assert (chosen.package.version, chosen.exact, chosen.upstream) == ("6.12.107-1", False, "6.12.107")
    assert compare_versions("6.12.107-1", "6.12.94-1") == 1
    assert compare_versions("1.0~rc1-1", "1.0-1") == -1
    assert compare_versions("1:1.0", "2.0") == 1


def test_a_build_trees_bundle_is_installed_from_a_copy_and_rebuilt_when_its_selftests_change(
    signed_mirror, tmp_path, monkeypatch
):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "linux"
    shutil.copytree(signed_mirror[2], tree)
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    bundle = bundle_for(KernelChoice(build=str(tree)), TARGETS, lambda line: None)
    assert (bundle.source, bundle.version) == (f"build tree {tree}", "6.12.107")
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before  # nothing written into the tree
    assert bundle_for(KernelChoice(build=str(tree)), TARGETS, lambda line: None) == bundle
    (tree / "tools/testing/selftests/drivers/net/ping.py").write_text("# changed\n")
    rebuilt = bundle_for(KernelChoice(build=str(tree)), TARGETS, lambda line: None)
    assert rebuilt.archive != bundle.archive and rebuilt.archive.is_file()


def installed(root: Path) -> Path:
    (root / "drivers/net/hw").mkdir(parents=True)
    (root / "net/lib/py").mkdir(parents=True)
    (root / "kselftest-list.txt").write_text("drivers/net:ping.py\ndrivers/net/hw:csum.py\n")
    (root / "drivers/net/ping.py").write_text("print()\n")
    (root / "drivers/net/hw/settings").write_text("timeout=90\n")
    (root / "drivers/net/hw/py").symlink_to("../../../net/lib/py")
    return root


def test_an_installed_tree_is_packed_with_its_links_inside(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    root = installed(tmp_path / "ks")
    bundle = bundle_from_dir(root, TARGETS, lambda line: None)
    assert bundle.tests == (("drivers/net", "ping.py"), ("drivers/net/hw", "csum.py"))
    assert bundle.timeouts == {"drivers/net/hw": 90}
    assert bundle.source == f"installed selftests {root}"
    assert {"kselftest-list.txt", "drivers/net/ping.py", "drivers/net/hw/py"} <= members(bundle.archive)
    assert bundle_from_dir(root, TARGETS, lambda line: None) == bundle


@pytest.mark.parametrize(
    "spoil, message",
    [
        (
            lambda root: (root / "drivers/net/leak").symlink_to("/etc/shadow"),
            "drivers/net/leak is a symbolic link to /",
        ),
        (lambda root: (root / "up").symlink_to("../.."), "up is a symbolic link to ../.., outside the directory"),
        (lambda root: os.mkfifo(root / "drivers/net/pipe"), "drivers/net/pipe is not a file, directory or link"),
        (lambda root: (root / "big").write_bytes(b"x" * 5000), "more than 0 MB"),
        (lambda root: (root / "kselftest-list.txt").unlink(), "has no kselftest-list.txt"),
        (lambda root: (root / "kselftest-list.txt").write_text("drivers/net:ping.py\n"), "has no drivers/net/hw tests"),
        (lambda root: (root / "kselftest-list.txt").write_text("ping.py\n"), "kselftest-list.txt:1: 'ping.py' is not"),
    ],
)
def test_an_installed_tree_a_scenario_names_is_untrusted(tmp_path, monkeypatch, spoil, message):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(install, "MAX_BYTES", 4096)
    root = installed(tmp_path / "ks")
    spoil(root)
    with pytest.raises(NiclabError, match=rf"selftests directory {root}.*{message}") as raised:
        bundle_from_dir(root, TARGETS, lambda line: None)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "cache/kselftest").exists() or not list((tmp_path / "cache/kselftest").glob("dir-*"))


def test_a_file_name_that_is_no_text_is_packed_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    root = installed(tmp_path / "ks")
    (root / os.fsdecode(b"drivers/net/odd-\xff.txt")).write_bytes(b"x")
    bundle = bundle_from_dir(root, TARGETS, lambda line: None)
    assert bundle.tests == (("drivers/net", "ping.py"), ("drivers/net/hw", "csum.py"))


HOSTILE_MAKEFILE = (
    SELFTESTS_MAKEFILE
    + """\
\tid -u > $(INSTALL_PATH)/built-by
\tsetsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $$! > $(INSTALL_PATH)/left-behind
"""
)


def test_a_build_trees_selftests_install_as_nobody_and_leave_nothing_running(tmp_path, monkeypatch):
    """A build tree's tools/testing/selftests/Makefile is a scenario's code: as root it ran as uid 0 and what it
    started outlived it (`setsid sleep 300 &`). It runs as nobody now, under a reaper that ends the rest."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    tree = fake_tree(tmp_path / "linux")
    (tree / "tools/testing/selftests/Makefile").write_text(HOSTILE_MAKEFILE)
    with tempfile.TemporaryDirectory(prefix="niclab-selftests-test-") as scratch:
        copy = Path(scratch) / "src"
        install.copy_tree_parts(tree, copy)
        installed = Path(scratch) / "installed"
        from niclab.plumbing.confined import give_to_nobody

        give_to_nobody(Path(scratch), whole=False)
        install.make_install(copy, TARGETS, installed, tmp_path / "make.log")
        built_by = int((installed / "built-by").read_text())
        leftover = int((installed / "left-behind").read_text())
    assert built_by == (65534 if os.geteuid() == 0 else os.geteuid())
    with pytest.raises(ProcessLookupError):  # ended (and reaped) before make_install returned
        os.kill(leftover, 0)


def test_a_leftover_of_the_install_is_ended_when_it_times_out_too(tmp_path, monkeypatch):
    monkeypatch.setattr(install, "MAKE_TIMEOUT", 2)
    with tempfile.TemporaryDirectory(prefix="niclab-selftests-test-") as scratch:
        tree = fake_tree(Path(scratch) / "linux")
        (tree / "tools/testing/selftests/Makefile").write_text(
            "install:\n\tsetsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $$! > $(INSTALL_PATH)/left-behind\n"
            "\tsleep 30\n"
        )
        from niclab.plumbing.confined import give_to_nobody

        give_to_nobody(Path(scratch), whole=False)
        out = Path(scratch) / "installed"
        with pytest.raises(NiclabError, match="took more than 2 s and was ended"):
            install.make_install(tree, TARGETS, out, tmp_path / "make.log")
        leftover = int((out / "left-behind").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(leftover, 0)
