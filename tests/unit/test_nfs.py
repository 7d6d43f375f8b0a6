"""The nfs benchmark: fio's JSON (captured in a guest, tests/data/fio/), its commands, its clean-up.

The expected figures are worked out by hand from the jobs' `io_bytes`,
`total_ios` and `runtime` (ms) in the JSON files; 1 MB = 10^6 bytes.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from niclab.base.node import GuestCommandError
from niclab.base.problems import Problems
from niclab.model.bench import nfs
from niclab.model.bench.base import BenchmarkError
from niclab.model.scenario.model import benchmark_spec
from tests.helpers import FakeNode, answer, bench_context, nfs_client


def by_metric(found):
    return {m.metric: m for m in found}


def fio(data_dir, name: str) -> str:
    return (data_dir / "fio" / name).read_text()


# -- parsing real output ---------------------------------------------------------


def test_seqread_two_jobs(data_dir):
    found = by_metric(nfs.parse("seqread", fio(data_dir, "seqread_2jobs.json")))
    # jobs: 90177536 bytes in 8015 ms and 90177536 bytes in 8023 ms, 86 I/Os each
    assert found["bandwidth_mb_s"].value == pytest.approx(180355072 / 8.023 / 1e6)  # 22.4797 MB/s
    assert found["bandwidth_mb_s"].value == pytest.approx(22.4798, abs=1e-4)
    assert found["iops"].value == pytest.approx(172 / 8.023)  # 21.44 /s
    # per job: fio's bw_bytes (bytes/s), 11251096 and 11239877
    assert found["bandwidth_max_mb_s"].value == pytest.approx(11.251096)
    assert found["bandwidth_min_mb_s"].value == pytest.approx(11.239877)
    assert found["bandwidth_mb_s"].unit == found["bandwidth_min_mb_s"].unit == "MB/s"
    assert found["iops"].unit == "/s"
    assert found["bandwidth_mb_s"].extra == {"jobs": 2, "runtime_s": 8.023, "bytes": 180355072}
    assert not found["bandwidth_min_mb_s"].headline and found["bandwidth_mb_s"].headline
    assert {m.name for m in nfs.parse("seqread", fio(data_dir, "seqread_2jobs.json"))} == {
        "nfs.seqread.bandwidth_mb_s",
        "nfs.seqread.iops",
        "nfs.seqread.bandwidth_min_mb_s",
        "nfs.seqread.bandwidth_max_mb_s",
    }


def test_megabytes_are_decimal_not_fio_mebibytes(data_dir):
    """fio's `bw` is KiB/s (2^10 bytes): 10987 KiB/s is 11.25 MB/s, not 10.73 (MiB/s)."""
    import json

    job = json.loads(fio(data_dir, "seqread_2jobs.json"))["jobs"][0]
    assert job["read"]["bw"] == 10987
    found = by_metric(nfs.parse("seqread", fio(data_dir, "seqread_2jobs.json")))
    assert found["bandwidth_max_mb_s"].value == pytest.approx(10987 * 1024 / 1e6, rel=1e-4)


def test_randread_two_jobs(data_dir):
    found = by_metric(nfs.parse("randread", fio(data_dir, "randread_2jobs.json")))
    # 10665984 + 10797056 bytes, 2604 + 2636 I/Os of 4 KiB, longest job 8003 ms
    assert found["bandwidth_mb_s"].value == pytest.approx(21463040 / 8.003 / 1e6)  # 2.6819 MB/s
    assert found["iops"].value == pytest.approx(5240 / 8.003)  # 654.75 /s
    assert found["bandwidth_min_mb_s"].value == pytest.approx(1.332748)
    assert found["bandwidth_max_mb_s"].value == pytest.approx(1.349294)


def test_randrw_reports_reads_and_writes_apart(data_dir):
    found = by_metric(nfs.parse("randrw", fio(data_dir, "randrw_2jobs.json")))
    assert found["read_bandwidth_mb_s"].value == pytest.approx((4116480 + 4132864) / 8.004 / 1e6)  # 1.0307
    assert found["write_bandwidth_mb_s"].value == pytest.approx((4341760 + 4419584) / 8.004 / 1e6)  # 1.0946
    assert found["read_iops"].value == pytest.approx((1005 + 1009) / 8.004)  # 251.6 /s
    assert found["write_iops"].value == pytest.approx((1060 + 1079) / 8.004)  # 267.2 /s
    assert found["write_bandwidth_min_mb_s"].value == pytest.approx(0.542448)
    assert found["write_bandwidth_max_mb_s"].value == pytest.approx(0.552171)
    assert "bandwidth_mb_s" not in found and "iops" not in found


def test_one_job_has_no_min_max(data_dir):
    found = by_metric(nfs.parse("randrw", fio(data_dir, "randrw_1job.json")))
    assert set(found) == {"read_bandwidth_mb_s", "read_iops", "write_bandwidth_mb_s", "write_iops"}
    assert found["read_bandwidth_mb_s"].value == pytest.approx(6340608 / 3.001 / 1e6)  # 2.1128 MB/s
    assert found["write_iops"].value == pytest.approx(1619 / 3.001)
    seq = by_metric(nfs.parse("seqread", fio(data_dir, "seqread_1job.json")))
    assert seq["bandwidth_mb_s"].value == pytest.approx(31.4193, abs=1e-4)  # 95420416 bytes in 3037 ms
    assert set(seq) == {"bandwidth_mb_s", "iops"}


def test_a_job_error_is_a_failure_with_fios_message(data_dir):
    """fio on a read-only mount: messages on stdout before the JSON, error 30 in each job, exit 2."""
    with pytest.raises(
        BenchmarkError,
        match=r"job error 30 \(Read-only file system\).*"
        r"func=open\(/mnt/niclab-nfs/niclab.0.0\)",
    ):
        nfs.parse("randrw", fio(data_dir, "readonly_randrw.txt"))


def test_no_json_is_a_failure_with_fios_message(data_dir):
    with pytest.raises(
        BenchmarkError,
        match=r"printed no JSON: fio: file:options.c.*"
        r"/mnt/nosuchdir is not a directory",
    ):
        nfs.parse("seqread", fio(data_dir, "no_directory.stdout.txt"), fio(data_dir, "no_directory.stderr.txt"))
    with pytest.raises(BenchmarkError, match=r"printed no JSON: \(nothing\)"):
        nfs.parse("seqread", "")


def test_every_parsed_metric_is_declared_with_its_unit(data_dir):
    declared = {m.name: m for m in nfs.PLUGIN.metrics()}
    for pattern, name in (
        ("seqread", "seqread_2jobs.json"),
        ("randread", "randread_2jobs.json"),
        ("randrw", "randrw_2jobs.json"),
    ):
        for m in nfs.parse(pattern, fio(data_dir, name)):
            assert declared[m.name].unit == m.unit
            assert declared[m.name].better == "higher"
    assert all("10^6 bytes" in m.description for m in declared.values() if m.unit == "MB/s")


# -- options and commands ---------------------------------------------------------


def test_defaults_and_fio_command_lines():
    options = nfs.NfsOptions()
    assert (options.nfs_version, options.numjobs, options.seconds, options.file_size) == ("4.2", 2, 10, "32m")
    common = [
        "--size=32m",
        "--numjobs=2",
        "--runtime=10",
        "--time_based",
        "--direct=1",
        "--ioengine=psync",
        "--output-format=json",
    ]
    head = ["fio", "--name=niclab", "--directory=/mnt/niclab-nfs"]
    assert nfs.fio_argv(options, "seqread") == head + ["--rw=read", "--bs=1m"] + common
    assert nfs.fio_argv(options, "randread") == head + ["--rw=randread", "--bs=4k"] + common
    assert nfs.fio_argv(options, "randrw") == head + ["--rw=randrw", "--bs=4k"] + common
    custom = nfs.NfsOptions(block_size="256k", file_size="8M", numjobs=1, seconds=3, direct=False)
    assert nfs.fio_argv(custom, "seqread")[3:9] == [
        "--rw=read",
        "--bs=256k",
        "--size=8M",
        "--numjobs=1",
        "--runtime=3",
        "--time_based",
    ]
    assert "--direct=0" in nfs.fio_argv(custom, "randrw")


def test_server_exports_a_sized_tmpfs_to_the_client_only_over_nfsv4_tcp():
    setup = dict(nfs.server_setup(nfs.NfsOptions(export_size="64m", file_size="16m"), "198.18.0.2", "198.18.0.1"))
    assert setup["load the nfsd module"] == "modprobe nfsd"
    assert "mount -t tmpfs -o size=64m,mode=0755 niclab-nfs /srv/niclab-nfs" in setup["mount the export tmpfs"]
    assert "/var/lib/nfs/v4recovery" in setup["mount the export tmpfs"]
    assert setup["export the tmpfs"] == (
        "exportfs -i -o rw,fsid=0,no_subtree_check,no_root_squash 198.18.0.1:/srv/niclab-nfs"
    )
    assert nfs.MOUNTD == "rpc.mountd -F -N 2 -N 3 -u"
    start = dict(nfs.server_start("198.18.0.2"))
    assert start["start nfsd"] == "rpc.nfsd -N 3 -U -H 198.18.0.2 8"
    assert start["end the NFSv4 grace period"] == "printf Y > /proc/fs/nfsd/v4_end_grace"


def test_client_mounts_the_v4_root_with_the_version_asked():
    mount = dict(nfs.client_mount(nfs.NfsOptions(nfs_version="4.0"), "198.18.0.2"))
    assert mount["mount the export"] == "mkdir -p /mnt/niclab-nfs && mount.nfs 198.18.0.2:/ /mnt/niclab-nfs -o vers=4.0"


def test_options_are_checked_as_a_scenario_file_would_be():
    assert benchmark_spec({"nfs": {"numjobs": 4, "file_size": "16m"}}).options.numjobs == 4
    with pytest.raises(Problems):
        benchmark_spec({"nfs": {"numjobs": 2, "threads": 4}})  # unknown option
    with pytest.raises(Problems):
        benchmark_spec({"nfs": {"nfs_version": "3"}})  # NFSv3 would need rpcbind and statd
    with pytest.raises(ValidationError, match="does not fit in export_size"):
        nfs.NfsOptions(numjobs=4, file_size="32m", export_size="128m")
    with pytest.raises(ValidationError, match="block sizes"):
        nfs.NfsOptions(block_size="64m", file_size="32m")
    with pytest.raises(ValidationError):
        nfs.NfsOptions(file_size="32MB")
    with pytest.raises(ValidationError):  # digits other than ASCII: int() reads them, fio and mount do not
        nfs.NfsOptions(export_size="1\u0663\u0662m")
    assert nfs.size_bytes("4k") == 4096 and nfs.size_bytes("32M") == 32 * 2**20 and nfs.size_bytes("1g") == 2**30


def test_estimate_is_about_a_minute_by_default():
    assert 30 <= nfs.PLUGIN.estimate_seconds(nfs.NfsOptions()) <= 70


# -- the run, with fake guests --------------------------------------------------------


def fio_outputs(data_dir):
    return {
        "--rw=read ": answer(fio(data_dir, "seqread_2jobs.json")),
        "--rw=randread": answer(fio(data_dir, "randread_2jobs.json")),
        "--rw=randrw": answer(fio(data_dir, "randrw_2jobs.json")),
    }


def test_run_sets_up_measures_and_cleans_up_in_order(data_dir):
    client, server, raw = nfs_client(fio_outputs(data_dir)), FakeNode("b"), []
    found = nfs.PLUGIN.run(bench_context(client, server, raw), nfs.NfsOptions())
    assert {m.test for m in found} == {"seqread", "randread", "randrw"}
    assert all(m.extra["mount"] == {"vers": "4.2", "rsize": "32768", "wsize": "32768", "proto": "tcp"} for m in found)
    assert [name for name, _ in raw] == ["nfs-seqread", "nfs-randread", "nfs-randrw"]
    assert raw[0][1].startswith("$ fio --name=niclab") and '"jobs"' in raw[0][1]
    server_steps = [c.split()[0] for c in server.commands if not c.startswith("command -v")]
    assert server_steps == [
        "modprobe",
        "grep",
        "mkdir",
        "exportfs",
        "rpc.mountd",
        "rpc.nfsd",
        "printf",
        "!",
        "[",
        "!",
        "!",
    ]  # set-up, then exportfs -ua, rpc.nfsd 0, tmpfs, nfsd fs
    assert server.spawned[0].stopped
    assert client.commands[-1].startswith("if grep -q ' /mnt/niclab-nfs ' /proc/mounts; then umount")


def test_a_failed_step_is_named_and_everything_is_still_undone():
    client = nfs_client({"-o vers=4.2": answer(stderr="mount.nfs: Connection refused", returncode=1)})
    server = FakeNode("b")
    with pytest.raises(
        BenchmarkError,
        match=r"nfs: mount the export on a failed \(exit 1\): "
        "mount.nfs: Connection refused",
    ):
        nfs.PLUGIN.run(bench_context(client, server, []), nfs.NfsOptions())
    assert any("umount" in c for c in client.commands)
    assert any("rpc.nfsd 0" in c for c in server.commands)
    assert any("umount /srv/niclab-nfs" in c for c in server.commands)
    assert server.spawned[0].stopped


def test_a_missing_program_says_so():
    server = FakeNode("b", {"command -v rpc.nfsd": answer(stderr="rpc.nfsd is not in the guest image", returncode=1)})
    with pytest.raises(BenchmarkError, match=r"find the NFS server programs on b failed.*rpc.nfsd is not in the guest"):
        nfs.PLUGIN.run(bench_context(nfs_client(), server, []), nfs.NfsOptions())


def test_a_fio_time_out_is_a_benchmark_error_naming_the_pattern():
    client = nfs_client({"--rw=read ": GuestCommandError("a: `fio …` did not finish in 60 s; killed it")})
    with pytest.raises(BenchmarkError, match=r"nfs: fio seqread on a failed: .*did not finish"):
        nfs.PLUGIN.run(bench_context(client, FakeNode("b"), []), nfs.NfsOptions())
    assert any("umount" in c for c in client.commands)


def test_a_failed_clean_up_after_a_good_run_is_reported(data_dir):
    server = FakeNode("b", {"rpc.nfsd 0": answer(stderr="rpc.nfsd: unable to set threads", returncode=1)})
    with pytest.raises(BenchmarkError, match="clean-up failed: nfs: stop nfsd on b failed"):
        nfs.PLUGIN.run(bench_context(nfs_client(fio_outputs(data_dir)), server, []), nfs.NfsOptions())
    assert any("umount /proc/fs/nfsd" in c for c in server.commands)  # the later steps still ran
