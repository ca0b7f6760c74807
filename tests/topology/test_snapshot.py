"""The snapshot's arrays stay exact through pod and node churn."""

import numpy as np

from tests.builders import BLOCK, GPU, HOST, LEVELS, RACK, cluster, node
from topology import Snapshot, Topology


def row(snapshot: Snapshot, array: np.ndarray, name: str) -> dict[str, int]:
    index = snapshot.index_of(name)
    assert index is not None
    return {resource: int(value) for resource, value in zip(snapshot.resources, array[index], strict=True) if value}


def test_arrays_are_int64_fortran_ordered_with_core_resources_first() -> None:
    snapshot = Snapshot(cluster(1, 2, 2), topology=LEVELS)
    assert snapshot.resources == ("cpu", "memory", "pods", GPU)
    for array in (snapshot.allocatable, snapshot.requested, snapshot.free):
        assert array.dtype == np.int64
        assert array.shape == (4, 4)
        assert array.flags.f_contiguous
    assert snapshot.level_ids.shape == (3, 4)
    assert snapshot.level_ids.dtype == np.int32


def test_nodes_are_ordered_by_topology_then_name() -> None:
    nodes = [
        node("z", labels={BLOCK: "b0", RACK: "r1"}),
        node("y", labels={BLOCK: "b1", RACK: "r0"}),
        node("x", labels={BLOCK: "b0", RACK: "r0"}),
        node("w", labels={BLOCK: "b0", RACK: "r1"}),
    ]
    assert Snapshot(nodes, topology=LEVELS).names == ("x", "w", "z", "y")


def test_assume_and_forget_change_one_row_exactly() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    before = snapshot.free.copy()
    snapshot.assume("ns/p", "b0-r0-n01", {GPU: 3, "cpu": 1500, "pods": 1})
    assert row(snapshot, snapshot.requested, "b0-r0-n01") == {"cpu": 1500, "pods": 1, GPU: 3}
    assert row(snapshot, snapshot.free, "b0-r0-n01")[GPU] == 5
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {}
    snapshot.assume("ns/p", "b0-r0-n00", {GPU: 1, "pods": 1})  # the same pod again replaces it
    assert row(snapshot, snapshot.requested, "b0-r0-n01") == {}
    assert snapshot.node_of("ns/p") == "b0-r0-n00"
    snapshot.assume("ns/p", "b0-r0-n00", {GPU: 1, "pods": 1})  # seen bound where it was assumed: counted once
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {"pods": 1, GPU: 1}
    snapshot.assume("ns/p", "b0-r0-n00", {GPU: 2, "pods": 1})  # asking more on the same node: the new ask
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {"pods": 1, GPU: 2}
    snapshot.forget("ns/p")
    snapshot.forget("ns/never-seen")
    assert np.array_equal(snapshot.free, before)
    assert snapshot.pod_count == 0


def test_allocatable_change_is_applied_in_place() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    snapshot.assume("ns/p", "b0-r0-n00", {GPU: 2, "pods": 1})
    generation = snapshot.generation
    snapshot.set_node(node("b0-r0-n00", gpus=4, labels={BLOCK: "b0", RACK: "b0-r0"}))
    assert snapshot.generation == generation
    assert row(snapshot, snapshot.free, "b0-r0-n00")[GPU] == 2


def test_node_churn_keeps_every_pod_counted() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    snapshot.assume("ns/a", "b0-r0-n00", {GPU: 2, "pods": 1})
    snapshot.assume("ns/early", "late-node", {GPU: 3, "pods": 1})  # bound before its node is seen
    generation = snapshot.generation

    snapshot.set_node(node("late-node", labels={BLOCK: "b0", RACK: "b0-r0"}))
    assert snapshot.generation > generation
    assert row(snapshot, snapshot.requested, "late-node") == {"pods": 1, GPU: 3}
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {"pods": 1, GPU: 2}

    snapshot.remove_node("b0-r0-n00")
    assert snapshot.index_of("b0-r0-n00") is None
    snapshot.assume("ns/b", "b0-r0-n00", {GPU: 1, "pods": 1})  # still recorded while the node is away
    snapshot.set_node(node("b0-r0-n00", labels={BLOCK: "b0", RACK: "b0-r0"}))
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {"pods": 2, GPU: 3}


def test_assumes_while_stale_are_not_lost_or_doubled() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    snapshot.set_node(node("extra", labels={BLOCK: "b0", RACK: "b0-r0"}))  # marks the arrays stale
    snapshot.assume("ns/a", "b0-r0-n00", {GPU: 2, "pods": 1})
    snapshot.assume("ns/b", "extra", {GPU: 1, "pods": 1})
    snapshot.forget("ns/a")
    snapshot.assume("ns/c", "b0-r0-n00", {GPU: 4, "pods": 1})
    assert row(snapshot, snapshot.requested, "b0-r0-n00") == {"pods": 1, GPU: 4}
    assert row(snapshot, snapshot.requested, "extra") == {"pods": 1, GPU: 1}


def test_a_resource_no_node_offers_gets_a_column() -> None:
    snapshot = Snapshot(cluster(1, 1, 1), topology=LEVELS)
    snapshot.assume("ns/p", "b0-r0-n00", {"example.com/fpga": 1, "pods": 1})
    assert "example.com/fpga" in snapshot.resources
    assert row(snapshot, snapshot.free, "b0-r0-n00")["example.com/fpga"] == -1


def test_nested_domains_tell_apart_a_rack_name_reused_in_two_blocks() -> None:
    nodes = [
        node("a", labels={BLOCK: "b0", RACK: "r0"}),
        node("b", labels={BLOCK: "b1", RACK: "r0"}),
        node("c", labels={BLOCK: "b1", RACK: "r0"}),
        node("d", labels={BLOCK: "b1"}),
    ]
    snapshot = Snapshot(nodes, topology=LEVELS)
    racks = snapshot.domains((RACK,))
    assert racks.n_domains == 1
    nested = snapshot.domains((BLOCK, RACK))
    assert nested.values == (("b0", "r0"), ("b1", "r0"))
    assert nested.parent.tolist() == [0, 1]
    assert [snapshot.names[i] for i in nested.members(1)] == ["b", "c"]
    assert nested.ids[snapshot.index_of("d")] == -1


def test_label_columns_for_other_keys_are_built_on_demand() -> None:
    snapshot = Snapshot([node("a", labels={"pool": "x"}), node("b")], topology=Topology(levels=(HOST,)))
    column = snapshot.label("pool")
    assert column.values == ("x",)
    assert column.ids.tolist() == [0, -1]
    assert snapshot.label("pool") is column
