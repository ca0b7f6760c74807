"""Scenarios a scheduling engineer would write, each asserting the exact outcome."""

from dataclasses import replace

import numpy as np
import pytest

from tests.builders import (
    BLOCK,
    GPU,
    HOST,
    LEVELS,
    RACK,
    ZONE,
    check_placement,
    cluster,
    fill,
    gang,
    gpu_shape,
    labels_of,
    members,
    node,
    placed_nodes,
    rack_nodes,
)
from topology import (
    GangRequest,
    Infeasible,
    Member,
    NodeConstraints,
    Placement,
    PodShape,
    Snapshot,
    Taint,
    Topology,
    place,
)


def placed(snapshot: Snapshot, request: GangRequest) -> Placement:
    result = place(snapshot, request)
    assert isinstance(result, Placement), result.message if isinstance(result, Infeasible) else result
    check_placement(snapshot, request, result)
    return result


def infeasible(snapshot: Snapshot, request: GangRequest) -> Infeasible:
    before = snapshot.free.copy()
    result = place(snapshot, request)
    assert isinstance(result, Infeasible), f"expected no placement, got {result}"
    assert np.array_equal(snapshot.free, before), "a failed placement changed the snapshot"
    return result


def test_gang_of_four_where_three_fit_places_nothing() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    fill(snapshot, "b0-r0-n00", 8)
    fill(snapshot, "b0-r0-n01", 2)  # room for three 2-GPU pods
    result = infeasible(snapshot, gang("team-a/train", 4, gpus=2))
    assert result.message == (
        "1/2 nodes are available: 1 Insufficient nvidia.com/gpu. Gang team-a/train needs 4 pods; the cluster fits 3: "
        "each node holds at most 4 (nvidia.com/gpu 8 of 8)."
    )


def test_a_gang_that_fits_lands_whole_and_can_be_committed() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    request = gang("team-a/train", 4, gpus=4)
    result = placed(snapshot, request)
    assert sorted(result.nodes().values()) == ["b0-r0-n00"] * 2 + ["b0-r0-n01"] * 2
    snapshot.assume_placement(result)
    assert int(snapshot.free[:, snapshot.resources.index(GPU)].sum()) == 0
    assert isinstance(place(snapshot, gang("team-b/next", 1)), Infeasible)


def service(prefill: int, decode: int, *, pods_per_replica: int = 1, gpus: int = 8, block: bool = False) -> GangRequest:
    """A disaggregated inference service: at least one prefill and one decode replica, or nothing."""

    def role(name: str, replicas: int) -> GangRequest:
        return GangRequest.group(
            f"svc/{name}",
            [
                GangRequest.leaf(
                    f"svc/{name}-{i}",
                    members(f"svc/{name}-{i}", pods_per_replica, gpu_shape(gpus)),
                    required=RACK if pods_per_replica > 1 else None,
                )
                for i in range(replicas)
            ],
            min_children=1,
        )

    return GangRequest.group(
        "svc/llm", [role("prefill", prefill), role("decode", decode)], required=BLOCK if block else None
    )


def count_replicas(result: Placement, role: str) -> int:
    return len({pod.rsplit("-", 1)[0] for pod in result.nodes() if pod.startswith(f"svc/{role}-")})


def test_minimums_first_a_service_that_fits_only_as_one_plus_one_gets_one_plus_one() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)  # two 8-GPU nodes: room for two replicas
    result = placed(snapshot, service(prefill=4, decode=2))
    assert count_replicas(result, "prefill") == 1
    assert count_replicas(result, "decode") == 1
    assert len(result.unplaced) == 4


def test_extras_are_placed_once_every_minimum_holds() -> None:
    snapshot = Snapshot(cluster(1, 1, 5), topology=LEVELS)
    result = placed(snapshot, service(prefill=4, decode=2))
    assert count_replicas(result, "prefill") + count_replicas(result, "decode") == 5
    assert count_replicas(result, "decode") >= 1 and count_replicas(result, "prefill") >= 1


def test_service_with_a_missing_role_places_nothing() -> None:
    snapshot = Snapshot(cluster(1, 1, 3), topology=LEVELS)
    request = service(prefill=2, decode=1, gpus=8)
    snapshot_free = Snapshot(cluster(1, 1, 3), topology=LEVELS)
    for name in snapshot_free.names:
        fill(snapshot, name, 1)  # every node keeps 7 GPUs: no 8-GPU replica fits anywhere
    result = infeasible(snapshot, request)
    assert result.reason == (
        "Gang svc/llm needs 2 of its 2 parts placed together; 0 fit: "
        "part svc/prefill needs 1 of its 2 parts placed together; 0 fit: "
        "part svc/prefill-0 needs 1 pod; the cluster fits 0."
    )


def two_racks(free_a: int, free_b: int, per_rack: int = 8) -> Snapshot:
    snapshot = Snapshot(rack_nodes("b0", "rack-a", per_rack) + rack_nodes("b0", "rack-b", per_rack), topology=LEVELS)
    for i in range(per_rack - free_a):
        fill(snapshot, f"rack-a-n{i:02d}", 8)
    for i in range(per_rack - free_b):
        fill(snapshot, f"rack-b-n{i:02d}", 8)
    return snapshot


def test_required_rack_fails_with_the_gang_level_reason_when_no_rack_is_big_enough() -> None:
    snapshot = two_racks(free_a=6, free_b=6)
    result = infeasible(snapshot, gang("team-a/train", 8, gpus=8, required=RACK))
    assert result.message == (
        "12/16 nodes are available: 4 Insufficient nvidia.com/gpu. "
        "Gang team-a/train needs 8 pods in one example.com/rack; the largest rack fits 6."
    )


def test_required_rack_lands_entirely_in_the_one_rack_that_fits() -> None:
    snapshot = two_racks(free_a=6, free_b=8)
    result = placed(snapshot, gang("team-a/train", 8, gpus=8, required=RACK))
    assert labels_of(snapshot, result.nodes().values(), RACK) == {"rack-b"}
    assert result.domain_of("team-a/train") == {RACK: "rack-b"}


def test_best_fit_keeps_a_whole_rack_free_for_a_later_big_gang() -> None:
    snapshot = two_racks(free_a=32, free_b=20, per_rack=32)
    first = placed(snapshot, gang("team-a/small", 16, gpus=8, required=RACK))
    assert labels_of(snapshot, first.nodes().values(), RACK) == {"rack-b"}
    snapshot.assume_placement(first)
    second = placed(snapshot, gang("team-b/big", 32, gpus=8, required=RACK))
    assert labels_of(snapshot, second.nodes().values(), RACK) == {"rack-a"}

    # First-fit would have put the small gang into the first rack, and the big one could not run.
    first_fit = two_racks(free_a=32, free_b=20, per_rack=32)
    pinned = gpu_shape(8, constraints=NodeConstraints(node_selector=((RACK, "rack-a"),)))
    first_fit.assume_placement(placed(first_fit, gang("team-a/small", 16, shape=pinned, required=RACK)))
    assert "the largest rack fits 20" in infeasible(first_fit, gang("team-b/big", 32, gpus=8, required=RACK)).message


@pytest.mark.parametrize(
    ("pods", "expected_domain", "racks_used", "blocks_used"),
    [
        pytest.param(4, {RACK: "b1-r0"}, 1, 1, id="fits a rack: one rack"),
        pytest.param(6, {BLOCK: "b1"}, 2, 1, id="no rack fits: one block"),
        pytest.param(12, {}, 4, 2, id="no block fits: the cluster"),
    ],
)
def test_preferred_rack_falls_back_to_block_then_cluster(
    pods: int, expected_domain: dict[str, str], racks_used: int, blocks_used: int
) -> None:
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    fill(snapshot, "b0-r0-n00", 8)  # block b0 has 7 free nodes, block b1 has 8
    fill(snapshot, "b0-r1-n00", 8)
    fill(snapshot, "b0-r1-n01", 8)
    result = placed(snapshot, gang("team-a/job", pods, gpus=8, preferred=RACK))
    assert result.domain_of("team-a/job") == expected_domain
    used = result.nodes().values()
    assert len(labels_of(snapshot, used, RACK)) == racks_used
    assert len(labels_of(snapshot, used, BLOCK)) == blocks_used


def test_preferred_rack_takes_the_tightest_rack_that_fits() -> None:
    snapshot = two_racks(free_a=8, free_b=5)
    result = placed(snapshot, gang("team-a/job", 4, gpus=8, preferred=RACK))
    assert result.domain_of("team-a/job") == {RACK: "rack-b"}


def test_taints_selectors_and_affinity_exclude_nodes_with_the_right_counts() -> None:
    nodes = [
        *rack_nodes("b0", "r0", 4, taints=[Taint(key="gpu", value="broken")]),
        *rack_nodes("b0", "r1", 4),
        *(node(f"r2-n{i}", labels={BLOCK: "b0", RACK: "r2", "pool": "spot"}) for i in range(2)),
    ]
    snapshot = Snapshot(nodes, topology=LEVELS)
    shape = gpu_shape(8, constraints=NodeConstraints(node_selector=(("pool", "spot"),)))
    result = infeasible(snapshot, gang("team-a/spot", 3, shape=shape, required=RACK))
    assert result.message == (
        "2/10 nodes are available: 4 node(s) didn't match Pod's node affinity/selector, "
        "4 node(s) had untolerated taint {gpu: broken}. "
        "Gang team-a/spot needs 3 pods in one example.com/rack; the largest rack fits 2. "
        "No rack could hold it even if it were empty (the largest holds 2)."
    )
    assert result.unresolvable  # only new nodes help: pods ending would not


def test_a_rack_that_would_hold_the_gang_once_its_pods_end_is_not_unresolvable() -> None:
    result = infeasible(two_racks(free_a=6, free_b=6), gang("team-a/train", 8, gpus=8, required=RACK))
    assert "even if it were empty" not in result.message and not result.unresolvable


def test_a_key_no_node_carries_leaves_the_gang_pending_with_that_reason() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    result = infeasible(snapshot, gang("team-a/job", 2, required="example.com/superpod"))
    assert result.reason == (
        "Gang team-a/job needs 2 pods in one example.com/superpod, but no node has the label example.com/superpod."
    )
    assert result.unresolvable


def test_a_gang_waiting_for_members_says_how_many_exist() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    request = GangRequest.leaf("team-a/job", members("team-a/job", 3, gpu_shape(1)), min_pods=4)
    assert infeasible(snapshot, request).reason == "Gang team-a/job needs 4 pods but only 3 exist."


def test_an_elastic_gang_goes_to_the_tightest_rack_that_holds_all_of_it() -> None:
    snapshot = two_racks(free_a=8, free_b=5)
    request = GangRequest.leaf("team-a/elastic", members("team-a/elastic", 8, gpu_shape(8)), min_pods=4, required=RACK)
    result = placed(snapshot, request)
    assert labels_of(snapshot, result.nodes().values(), RACK) == {"rack-a"}  # not rack-b, tighter for the 4
    assert len(result.assignments) == 8 and result.unplaced == ()


def test_extras_beyond_the_minimum_stay_in_the_required_rack_when_no_rack_holds_them_all() -> None:
    snapshot = two_racks(free_a=6, free_b=5)
    request = GangRequest.leaf("team-a/elastic", members("team-a/elastic", 8, gpu_shape(8)), min_pods=4, required=RACK)
    result = placed(snapshot, request)
    assert labels_of(snapshot, result.nodes().values(), RACK) == {"rack-b"}  # the tightest for the minimum
    assert len(result.assignments) == 5
    assert len(result.unplaced) == 3


def test_partly_used_nodes_are_filled_first_and_each_node_before_the_next() -> None:
    snapshot = Snapshot(cluster(1, 1, 4), topology=LEVELS)
    fill(snapshot, "b0-r0-n02", 5)  # 3 GPUs left here
    fill(snapshot, "b0-r0-n03", 6)  # 2 GPUs left here: the tightest
    result = placed(snapshot, gang("team-a/small", 7, gpus=1))
    counts: dict[str, int] = {}
    for name in result.nodes().values():
        counts[name] = counts.get(name, 0) + 1
    assert counts == {"b0-r0-n03": 2, "b0-r0-n02": 3, "b0-r0-n00": 2}


def test_a_replacement_member_joins_its_running_gang_in_the_same_rack() -> None:
    snapshot = two_racks(free_a=8, free_b=4)
    shape = gpu_shape(8)
    running = [Member(key=f"team-a/job-{i}", shape=shape, node=f"rack-b-n{4 + i:02d}") for i in range(3)]
    for member in running:
        snapshot.assume(member.key, member.node or "", dict(shape.requests))
    request = GangRequest.leaf("team-a/job", [*running, Member(key="team-a/job-3", shape=shape)], required=RACK)
    result = placed(snapshot, request)
    assert result.nodes() == {"team-a/job-3": "rack-b-n07"}


def test_a_running_gang_whose_rack_is_full_names_that_rack_not_the_roomiest_one() -> None:
    snapshot = two_racks(free_a=8, free_b=2)  # rack-b's two free nodes hold two of the three members
    shape = gpu_shape(8)
    running = [Member(key=f"team-a/job-{i}", shape=shape, node=f"rack-b-n{6 + i:02d}") for i in range(2)]
    for member in running:
        snapshot.assume(member.key, member.node or "", dict(shape.requests))
    request = GangRequest.leaf("team-a/job", [*running, Member(key="team-a/job-2", shape=shape)], required=RACK)
    assert infeasible(snapshot, request).reason == (
        "Gang team-a/job needs 1 more pod in example.com/rack rack-b, where its members run; it fits 0 more."
    )


def test_a_running_gang_that_spans_two_racks_cannot_meet_a_rack_requirement() -> None:
    snapshot = two_racks(free_a=8, free_b=8)
    shape = gpu_shape(8)
    running = [
        Member(key="team-a/job-0", shape=shape, node="rack-a-n00"),
        Member(key="team-a/job-1", shape=shape, node="rack-b-n00"),
    ]
    request = GangRequest.leaf("team-a/job", [*running, Member(key="team-a/job-2", shape=shape)], required=RACK)
    assert "already runs in 2 racks" in infeasible(snapshot, request).reason


def composite_service(snapshot_levels: Topology = LEVELS) -> GangRequest:
    """The composite of the gang-sources issue: one block, each 4-pod replica in one rack, >= 1 of each role."""

    def replicas(role: str, count: int) -> GangRequest:
        return GangRequest.group(
            f"svc/{role}",
            [
                GangRequest.leaf(f"svc/{role}-{i}", members(f"svc/{role}-{i}", 4, gpu_shape(8)), required=RACK)
                for i in range(count)
            ],
            min_children=1,
        )

    return GangRequest.group("svc/llm", [replicas("prefill", 2), replicas("decode", 2)], required=BLOCK)


def test_composite_lands_in_one_block_with_each_replica_in_one_rack() -> None:
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    for i in range(4):
        fill(snapshot, f"b0-r0-n{i:02d}", 8)  # block b0 has one free rack, block b1 two
    request = composite_service()
    result = placed(snapshot, request)
    assert result.domain_of("svc/llm") == {BLOCK: "b1"}
    assert labels_of(snapshot, result.nodes().values(), BLOCK) == {"b1"}
    for replica in ("svc/prefill-0", "svc/decode-0"):
        pods = [name for pod, name in result.nodes().items() if pod.startswith(replica + "-")]
        assert len(pods) == 4 and len(labels_of(snapshot, pods, RACK)) == 1
    assert len(result.assignments) == 8  # the block has two racks: one replica of each role


def test_composite_reports_why_no_block_holds_it() -> None:
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    for block in ("b0", "b1"):
        for i in range(4):
            fill(snapshot, f"{block}-r0-n{i:02d}", 8)  # each block keeps a single free rack
    result = infeasible(snapshot, composite_service())
    # Each block alone has a free rack for either role, so both are tried; in each, the second role finds none.
    assert result.reason == (
        "Gang svc/llm needs 2 of its 2 parts in one example.com/block; none of the 2 blocks with room holds them "
        "together (in block b0, only 1 of its 2 parts fit together: part svc/decode needs 1 of its 2 parts placed "
        "together; 0 fit: part svc/decode-0 needs 4 pods in one example.com/rack; the largest rack fits 0.)"
    )
    assert result.tries == 4  # two blocks, and inside each the rack of the first role


def test_composite_with_no_block_big_enough_is_pruned_without_trying() -> None:
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    for name in snapshot.names:
        if not name.endswith("-n00"):
            fill(snapshot, name, 8)
    result = infeasible(snapshot, composite_service())
    assert result.tries == 0
    assert result.reason == (
        "Gang svc/llm needs 2 of its 2 parts in one example.com/block; "
        "no block has room for them together (they need at least 8 pods; the largest block fits 2)."
    )


def test_group_minimum_pods_across_children_like_volcano_min_member() -> None:
    snapshot = Snapshot(cluster(1, 1, 6), topology=LEVELS)
    tasks = [
        GangRequest.leaf(f"job/{task}", members(f"job/{task}", 4, gpu_shape(8)), min_pods=1)
        for task in ("ps", "worker")
    ]
    request = GangRequest.group("job/tf", tasks, min_pods=5)
    result = placed(snapshot, request)
    assert len(result.assignments) == 6  # 5 as the minimum, then the 6th node as an extra
    fill_all = Snapshot(cluster(1, 1, 4), topology=LEVELS)
    assert infeasible(fill_all, request).reason == "Gang job/tf needs 5 pods across its parts; 4 fit."


def test_mixed_shapes_pack_big_pods_first() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    big = gpu_shape(6)
    small = gpu_shape(2)
    request = GangRequest.leaf(
        "team-a/mixed",
        [*members("team-a/mixed-small", 2, small), *members("team-a/mixed-big", 2, big)],
    )
    result = placed(snapshot, request)
    per_node: dict[str, int] = {}
    for assignment in result.assignments:
        per_node[assignment.node] = per_node.get(assignment.node, 0) + dict(assignment.shape.requests)[GPU]
    assert per_node == {"b0-r0-n00": 8, "b0-r0-n01": 8}


def test_exact_search_settles_a_mixed_leaf_that_greedy_packing_misses() -> None:
    # Two nodes: n0 has 4 cpu / 6 GiB, n1 has 6 cpu / 4 GiB. Pods: two of (3 cpu, 3 GiB), one of (3 cpu, 1 GiB)
    # and one of (1 cpu, 3 GiB). Greedy puts the two square pods on separate nodes; only pairing them with the
    # thin pods on each side fits all four.
    gib = 1 << 30
    nodes = [
        node("n0", gpus=0, cpu_cores=4, memory_gi=6, labels={RACK: "r"}),
        node("n1", gpus=0, cpu_cores=6, memory_gi=4, labels={RACK: "r"}),
    ]
    snapshot = Snapshot(nodes, topology=LEVELS)
    square = PodShape.of({"cpu": 3000, "memory": 3 * gib})
    wide = PodShape.of({"cpu": 3000, "memory": 1 * gib})
    tall = PodShape.of({"cpu": 1000, "memory": 3 * gib})
    request = GangRequest.leaf(
        "team-a/odd",
        [*members("sq", 2, square), Member(key="wide", shape=wide), Member(key="tall", shape=tall)],
    )
    result = placed(snapshot, request)
    assert len(result.assignments) == 4


def test_placement_is_deterministic() -> None:
    def run() -> dict[str, str]:
        snapshot = Snapshot(cluster(2, 4, 8), topology=Topology(levels=(ZONE, BLOCK, RACK, HOST)))
        for i in range(0, 64, 3):
            fill(snapshot, snapshot.names[i], 1 + i % 7)
        return placed_nodes(place(snapshot, composite_service()))

    assert run() == run()


def test_an_empty_cluster_explains_itself() -> None:
    result = infeasible(Snapshot([], topology=LEVELS), gang("team-a/job", 2, required=RACK))
    assert result.message == (
        "0/0 nodes are available. Gang team-a/job needs 2 pods in one example.com/rack, "
        "but no node has the label example.com/rack."
    )
    assert infeasible(Snapshot([], topology=LEVELS), gang("team-a/job", 2)).reason == (
        "Gang team-a/job needs 2 pods; the cluster fits 0."
    )


def test_preferred_keys_widen_through_the_configured_levels_only() -> None:
    levels = Topology(levels=(ZONE, BLOCK, RACK, HOST))
    assert levels.widening(RACK) == (RACK, BLOCK, ZONE)
    assert levels.widening("example.com/superpod") == ("example.com/superpod",)
    with pytest.raises(ValueError, match="distinct"):
        Topology(levels=(RACK, RACK))


def test_room_for_members_not_created_yet_is_a_count_placed_beside_the_members() -> None:
    snapshot = Snapshot(cluster(1, 2, 4), topology=LEVELS)
    fill(snapshot, "b0-r0-n00", 8)
    shape = gpu_shape(8)
    request = GangRequest(
        key="team/train",
        pods=members("train", 2, shape),
        min_pods=4,
        required=RACK,
        placeholders=2,
        placeholder_shape=shape,
    )
    result = placed(snapshot, request)
    assert len(result.assignments) == 2 and result.unplaced == ()
    assert sum(room.count for room in result.held) == 2 and {room.part for room in result.held} == {"team/train"}
    nodes = [a.node for a in result.assignments] + [room.node for room in result.held]
    assert len(set(nodes)) == 4 and labels_of(snapshot, nodes, RACK) == {"b0-r1"}  # the only rack with room for 4


def test_a_billion_placeholders_cost_no_more_than_two() -> None:
    snapshot = Snapshot(cluster(1, 2, 4), topology=LEVELS)
    shape = gpu_shape(8)
    request = GangRequest(
        key="team/huge", pods=members("huge", 1, shape), min_pods=10**9 + 1, placeholders=10**9, placeholder_shape=shape
    )
    result = infeasible(snapshot, request)
    assert result.reason == (
        "Gang team/huge needs 1000000001 pods; the cluster fits 8: each node holds at most 1 (nvidia.com/gpu 8 of 8)."
    )


def test_an_elastic_service_goes_to_the_block_that_holds_every_replica_not_the_half_full_one() -> None:
    """Prefill and decode, each one replica at least and two wanted; each replica four pods in one rack;
    the whole service in one block. Block b0 is half full: it holds the minimum, b1 holds everything."""
    snapshot = Snapshot(cluster(2, 4, 4), topology=LEVELS)
    for rack in ("b0-r0", "b0-r1"):
        for i in range(4):
            fill(snapshot, f"{rack}-n{i:02d}", 8)
    shape = gpu_shape(8)

    def role(name: str) -> GangRequest:
        replicas = [
            GangRequest.leaf(f"svc/{name}-{r}", members(f"svc/{name}-{r}", 4, shape), required=RACK) for r in range(2)
        ]
        return GangRequest.group(f"svc/{name}", replicas, min_children=1)

    request = GangRequest.group("svc", [role("prefill"), role("decode")], required=BLOCK)
    result = placed(snapshot, request)
    assert len(result.assignments) == 16 and result.unplaced == ()
    assert labels_of(snapshot, result.nodes().values(), BLOCK) == {"b1"}


def test_a_composite_is_unresolvable_only_when_too_few_parts_could_ever_fit() -> None:
    """Two of three parts are needed; one asks for a label no node has. The cluster is full now: room
    freed by finishing pods would let the other two fit, so waiting for room is not hopeless."""
    snapshot = Snapshot(cluster(1, 1, 2), topology=LEVELS)
    fill(snapshot, "b0-r0-n00", 8)
    fill(snapshot, "b0-r0-n01", 8)
    shape = gpu_shape(4)
    nowhere = GangRequest.leaf("ns/a", members("a", 3, shape), required="example.com/no-such-label")
    request = GangRequest.group(
        "ns/root",
        [nowhere, GangRequest.leaf("ns/b", members("b", 2, shape)), GangRequest.leaf("ns/c", members("c", 2, shape))],
        min_children=2,
    )
    assert infeasible(snapshot, request).unresolvable is False
    both_nowhere = GangRequest.group(
        "ns/root",
        [nowhere, replace(nowhere, key="ns/a2"), GangRequest.leaf("ns/b", members("b", 2, shape))],
        min_children=2,
    )
    assert infeasible(snapshot, both_nowhere).unresolvable is True


def test_between_racks_with_as_much_room_the_more_allocated_one_is_chosen() -> None:
    """Issue 25, from upstream's topology tests: an empty rack of four nodes and a rack of eight with four in
    use have room for the same four 8-GPU pods; kube-scheduler (MostAllocated) takes the busier rack and keeps
    the empty one whole for the next big gang. So does Phalanx now (it took the empty rack, first by name)."""
    snapshot = Snapshot(rack_nodes("b0", "rack-a", 4) + rack_nodes("b0", "rack-b", 8), topology=LEVELS)
    for i in range(4):
        fill(snapshot, f"rack-b-n{i:02d}", 8)
    result = placed(snapshot, gang("team-a/train", 4, gpus=8, required=RACK))
    assert labels_of(snapshot, result.nodes().values(), RACK) == {"rack-b"}
