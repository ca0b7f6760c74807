"""The numbers behind an explanation: room per domain, and what a gang needs at least."""

from tests.builders import GPU, LEVELS, RACK, fill, gpu_shape, members, rack_nodes
from topology import GangRequest, Snapshot, Taint, capacity_by_domain


def test_room_per_rack_counts_only_nodes_the_shape_may_use() -> None:
    tainted = Taint(key="dedicated", value="infer", effect="NoSchedule")
    nodes = rack_nodes("b0", "r0", 2) + rack_nodes("b0", "r1", 2) + rack_nodes("b0", "r2", 1, taints=[tainted])
    snapshot = Snapshot(nodes, topology=LEVELS)
    fill(snapshot, "r0-n00", 6)  # r0 keeps 2 + 8 GPUs
    rooms = capacity_by_domain(snapshot, gpu_shape(4), RACK)
    assert [(room.value, room.pods, room.nodes, dict(room.free)[GPU]) for room in rooms] == [
        ("r1", 4, 2, 16),
        ("r0", 2, 2, 10),
        ("r2", 0, 0, 0),  # tainted: its 8 free GPUs are not room for this pod
    ]


def test_a_label_no_node_carries_has_no_domains() -> None:
    snapshot = Snapshot(rack_nodes("b0", "r0", 2), topology=LEVELS)
    assert capacity_by_domain(snapshot, gpu_shape(1), "example.com/pod") == []


def test_the_minimum_of_a_tree_is_its_cheapest_required_children() -> None:
    shape = gpu_shape(8)
    prefill = [GangRequest.leaf(f"prefill-{i}", members(f"p{i}", 2 + i, shape)) for i in range(3)]
    decode = GangRequest.leaf("decode", members("d", 6, shape), min_pods=4)
    service = GangRequest.group("svc", [GangRequest.group("prefill", prefill, min_children=2), decode], min_pods=0)
    assert service.minimum_pods() == 2 + 3 + 4
    placed = {"p0-0", "p0-1", "p2-0", "p2-1", "p2-2"} | {f"d-{i}" for i in range(4)}
    assert not service.satisfied_by(placed)  # only one prefill replica is whole (p2 has 3 of its 4)
    assert service.satisfied_by(placed | {"p2-3"})
    assert not service.satisfied_by((placed | {"p2-3"}) - {"d-3"})  # decode below its minimum of 4
