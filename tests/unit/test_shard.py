import pytest

from niclab.base.errors import UsageError
from niclab.model.scenario import load_scenario
from niclab.model.shard import Shard, parse_shard, shard_of


def test_every_cell_in_exactly_one_shard(repo):
    sweep = load_scenario(repo / "scenarios" / "mtu-sweep.yaml")
    shards = [Shard(i, 4) for i in range(1, 5)]
    held = [[cell.id for cell in sweep.cells if shard.holds(sweep.name, cell.id)] for shard in shards]
    assert sorted(cell for part in held for cell in part) == sorted(cell.id for cell in sweep.cells)
    assert all(part for part in held)  # 23 cells over 4 shards: none empty


def test_pinned_to_sha256_so_every_machine_agrees():
    # 1 + first 8 bytes of SHA-256("mtu-sweep/nic=e1000,mtu=1500") = 0x15d11ac9c04d4fda, mod 4 -> shard 3;
    # Python's hash() would differ between processes, and these would not hold.
    assert shard_of("mtu-sweep", "nic=e1000,mtu=1500", 4) == 1 + 0x15D11AC9C04D4FDA % 4 == 3
    assert shard_of("mtu-sweep", "nic=virtio,mtu=9000", 4) == 2
    assert shard_of("two-node", "nic=e1000", 1) == 1


@pytest.mark.parametrize("text", ["0/4", "5/4", "1-4", "", "a/b"])
def test_bad_shards(text):
    with pytest.raises(UsageError, match="write i/n"):
        parse_shard(text)
