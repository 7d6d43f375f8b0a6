import subprocess
import sys

import pytest

from niclab.ui.cli.main import build_parser, main

VERBS = [
    ["run"],
    ["accel"],
    ["image"],
    ["image", "build"],
    ["image", "info"],
    ["image", "ls"],
    ["up"],
    ["status"],
    ["exec"],
    ["console"],
    ["down"],
    ["nics"],
    ["validate"],
    ["plan"],
    ["metrics"],
    ["report"],
    ["compare"],
    ["export"],
]


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v))
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args([*verb, "--help"])
    assert caught.value.code == 0
    assert "usage: niclab" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main(["run"])
    assert caught.value.code == 2


def test_missing_scenario_is_a_usage_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path)]) == 2
    assert "no such scenario file" in capsys.readouterr().err


def test_validate_exit_codes(tmp_path, repo, capsys):
    assert main(["validate", str(repo / "scenarios" / "two-node.yaml")]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1001\n")
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:5:10: links[0].nic: unknown NIC model 'e1001'" in err
    assert "Traceback" not in err


def test_nics_lists_the_catalog(capsys):
    assert main(["nics"]) == 0
    out = capsys.readouterr().out
    assert "e1000" in out and "8139cp" in out and "Intel PRO/1000 MT Desktop (82540EM)" in out
    assert "virtio: EVENT_IDX is off" in out and "(QEMU: event_idx=off)" in out


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "niclab", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("niclab ")


def test_plan_lists_cells_with_estimates(repo, capsys):
    assert main(["plan", str(repo / "scenarios" / "mtu-sweep.yaml")]) == 0
    out = capsys.readouterr().out
    assert "nic=e1000,mtu=1500" in out and "nic=rtl8139,mtu=4000" in out
    assert "nic=rtl8139,mtu=9000" not in out  # excluded
    assert "scenario mtu-sweep: 23 cells, about" in out


def test_every_shipped_scenario_validates(repo, capsys):
    files = sorted(str(p) for p in (repo / "scenarios").rglob("*.yaml"))
    assert {"two-node", "nic-shootout", "mtu-sweep", "bonding", "wan", "three-node-switch"} <= {
        p.rsplit("/", 1)[1][:-5] for p in files
    }
    assert len([p for p in files if "/studies/" in p]) == 5  # one per study in ../shared/studies
    assert main(["validate", *files]) == 0, capsys.readouterr().err


def test_run_shard_with_no_cell_of_its_own_runs_nothing(repo, tmp_path, capsys):
    # two-node has one cell; of two shards, one holds it and the other has nothing to do
    from niclab.model.shard import shard_of

    empty = 3 - shard_of("two-node", "nic=e1000", 2)
    assert (
        main(["run", str(repo / "scenarios" / "two-node.yaml"), "--shard", f"{empty}/2", "--out", str(tmp_path)]) == 0
    )
    assert "holds no cell; nothing to run" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_run_bad_shard_is_a_usage_error(repo, tmp_path, capsys):
    assert main(["run", str(repo / "scenarios" / "two-node.yaml"), "--shard", "3/2", "--out", str(tmp_path)]) == 2
    assert "write i/n" in capsys.readouterr().err


def test_backends_are_plugins_found_by_module_and_an_unknown_one_lists_them():
    import pytest

    from niclab.base.errors import UsageError
    from niclab.plumbing.backends import BackendOptions, get_backend, registry

    assert set(registry()) == {"qemu", "libvirt"}
    assert get_backend().name == "qemu"
    with pytest.raises(UsageError, match=r"^unknown backend 'vbox'; choose one of: libvirt \(libvirt domains"):
        get_backend("vbox")
    with pytest.raises(UsageError, match="--libvirt-uri is an option of --backend libvirt"):
        get_backend("qemu", BackendOptions(libvirt_uri="qemu:///system"))


def test_a_bad_scenario_exits_1_under_validate_plan_and_run_alike(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1001\n")
    for argv in (["validate", str(bad)], ["plan", str(bad)], ["run", str(bad), "--out", str(tmp_path / "r")]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith(f"{bad}:5:10: links[0].nic: unknown NIC model 'e1001'"), (argv, err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_repeat_below_1_is_a_usage_error(repo, value, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["run", str(repo / "scenarios" / "two-node.yaml"), "--repeat", value])
    assert caught.value.code == 2
    assert "--repeat" in capsys.readouterr().err


def test_an_out_directory_that_cannot_be_made_is_one_line(repo, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "empty-cache"))  # said before any image is built
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    assert main(["run", str(repo / "scenarios" / "two-node.yaml"), "--out", str(blocker / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"niclab: cannot create a run directory in --out {blocker / 'runs'}: Not a directory")
    assert "Traceback" not in err


def test_an_unexpected_exception_is_one_line_and_a_saved_traceback(monkeypatch, tmp_path, capsys):
    import niclab.ui.cli.nics

    def broken(args):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(niclab.ui.cli.nics, "cmd_nics", broken)
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    assert main(["nics"]) == 3  # niclab failed: not the cards, not the user
    err = capsys.readouterr().err
    assert err.startswith("niclab: internal error: RuntimeError: something nobody foresaw; this is a bug")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    [saved] = (tmp_path / "crashes").iterdir()
    assert "Traceback" in saved.read_text() and "something nobody foresaw" in saved.read_text()
    assert str(saved) in err


def test_a_closed_stdout_ends_quietly():
    # `niclab metrics | head -1`: the reader is gone before niclab writes; no traceback, no complaint.
    proc = subprocess.Popen(
        [sys.executable, "-m", "niclab", "metrics"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1
    assert err == ""
