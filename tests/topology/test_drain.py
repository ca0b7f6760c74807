"""Where a starving gang's reservation goes: the domain that would hold it soonest, and the nodes to drain."""

from __future__ import annotations

from collections import Counter

import numpy as np

from tests.builders import BLOCK, GPU, LEVELS, RACK, cluster, fill, gang, gpu_shape
from topology import GangRequest, Member, Snapshot
from topology.drain import choose_drain, choose_parts_drain, minimum_shapes


def _snapshot(used: dict[str, int]) -> Snapshot:
    """One block of three racks of four 8-GPU nodes; ``used`` puts that many GPUs of other pods on nodes."""
    snapshot = Snapshot(cluster(1, 3, 4), topology=LEVELS)
    for name, gpus in used.items():
        fill(snapshot, name, gpus)
    return snapshot


def _idle(snapshot: Snapshot) -> np.ndarray:
    return np.full(snapshot.n_nodes, -1, dtype=np.int64)


def _names(snapshot: Snapshot, rows: np.ndarray) -> list[str]:
    return [snapshot.names[row] for row in rows.tolist()]


def test_the_rack_with_least_in_use_on_the_nodes_the_gang_needs_is_drained_there() -> None:
    # A 16-GPU gang (two whole nodes, one rack). Rack 0 has 3 GPUs in use on its two emptiest nodes, rack 1
    # has 2 (its other nodes are full), rack 2 has 9.
    used = {"b0-r0-n00": 1, "b0-r0-n01": 2, "b0-r0-n02": 8, "b0-r0-n03": 8}
    used |= {"b0-r1-n00": 8, "b0-r1-n01": 1, "b0-r1-n02": 8, "b0-r1-n03": 1}
    used |= {f"b0-r2-n0{i}": gpus for i, gpus in enumerate((4, 5, 8, 8))}
    snapshot = _snapshot(used)
    shapes = minimum_shapes(gang("ml/big", 2, 8, required=RACK))

    plan = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot))

    assert plan is not None
    assert (plan.level, plan.domain) == (RACK, "b0-r1")
    assert _names(snapshot, plan.rows) == ["b0-r1-n01", "b0-r1-n03"]
    assert (plan.resource, plan.wanted, plan.in_use) == (GPU, 16, 2)
    assert plan.demand[:, snapshot.resources.index(GPU)].tolist() == [8, 8]


def test_the_narrowest_level_that_could_ever_hold_the_gang_is_chosen() -> None:
    snapshot = _snapshot({name: 8 for name in snapshot_names()})
    node_sized = minimum_shapes(gang("ml/one", 1, 8))
    rack_sized = minimum_shapes(gang("ml/four", 4, 8))
    bigger = minimum_shapes(gang("ml/twelve", 12, 8))
    narrowest_first = ("kubernetes.io/hostname", RACK, "example.com/block", None)

    one = choose_drain(snapshot, node_sized, narrowest_first, node_priority=_idle(snapshot))
    four = choose_drain(snapshot, rack_sized, narrowest_first, node_priority=_idle(snapshot))
    twelve = choose_drain(snapshot, bigger, narrowest_first, node_priority=_idle(snapshot))
    too_big = minimum_shapes(gang("ml/x", 13, 8))
    nowhere = choose_drain(snapshot, too_big, narrowest_first, node_priority=_idle(snapshot))

    assert one is not None and one.level == "kubernetes.io/hostname" and len(one.rows) == 1
    assert four is not None and four.level == RACK and len(four.rows) == 4
    assert twelve is not None and twelve.level == "example.com/block" and len(twelve.rows) == 12
    assert nowhere is None


def snapshot_names() -> list[str]:
    return [f"b0-r{r}-n0{n}" for r in range(3) for n in range(4)]


def test_known_end_times_beat_fewer_gpus_in_use() -> None:
    # Rack 1 has fewer GPUs in use, but its pods say (activeDeadlineSeconds) they run for an hour; rack 0's
    # end in ten minutes.
    used = {name: 8 for name in snapshot_names()}
    used |= {"b0-r1-n00": 1, "b0-r1-n01": 1}
    snapshot = _snapshot(used)
    ready = np.full(snapshot.n_nodes, np.inf)
    ready[[snapshot.index_of("b0-r1-n00"), snapshot.index_of("b0-r1-n01")]] = 3600.0
    ready[[snapshot.index_of("b0-r0-n02"), snapshot.index_of("b0-r0-n03")]] = 600.0
    shapes = minimum_shapes(gang("ml/big", 2, 8, required=RACK))

    unknown = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot))
    known = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot), node_ready=ready)

    assert unknown is not None and unknown.domain == "b0-r1"
    assert known is not None and known.domain == "b0-r0"
    assert _names(snapshot, known.rows) == ["b0-r0-n02", "b0-r0-n03"]


def test_lower_priorities_running_break_ties_and_skipped_domains_are_passed_over() -> None:
    snapshot = _snapshot({name: 4 for name in snapshot_names()})
    priority = np.zeros(snapshot.n_nodes, dtype=np.int64)
    priority[[snapshot.index_of(f"b0-r0-n0{i}") for i in range(4)]] = 1000
    shapes = minimum_shapes(gang("ml/big", 2, 8, required=RACK))

    plan = choose_drain(snapshot, shapes, (RACK,), node_priority=priority)
    second = choose_drain(snapshot, shapes, (RACK,), node_priority=priority, skip={(RACK, "b0-r1")})
    none_left = choose_drain(
        snapshot, shapes, (RACK,), node_priority=priority, skip={(RACK, f"b0-r{r}") for r in range(3)}
    )

    assert plan is not None and plan.domain == "b0-r1"
    assert plan.highest_priority == 0
    assert second is not None and second.domain == "b0-r2"
    assert none_left is None


def test_room_another_plan_keeps_is_not_counted_twice() -> None:
    snapshot = _snapshot({})
    shapes = minimum_shapes(gang("ml/big", 4, 8, required=RACK))
    first = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot))
    assert first is not None
    taken = np.zeros_like(snapshot.allocatable)
    taken[first.rows] = first.demand

    second = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot), taken=taken)

    assert second is not None and second.domain != first.domain


def test_small_pods_share_nodes_and_mixed_shapes_are_laid_out_together() -> None:
    snapshot = _snapshot({name: 8 for name in snapshot_names() if not name.startswith("b0-r2")})
    shapes = Counter({gpu_shape(4): 3, gpu_shape(2): 2})

    plan = choose_drain(snapshot, shapes, (RACK,), node_priority=_idle(snapshot))

    assert plan is not None and plan.domain == "b0-r2"
    gpus = plan.demand[:, snapshot.resources.index(GPU)]
    assert gpus.sum() == 16 and (gpus <= 8).all()
    assert len(plan.rows) == 2  # 4+4 on one node, 4+2+2 on the other


def test_the_minimum_counts_unplaced_members_and_the_cheapest_children() -> None:
    elastic = gang("ml/elastic", 6, 8, min_pods=4)
    running = GangRequest.leaf(
        "ml/grown",
        [Member(key="ml/grown-0", shape=gpu_shape(8), node="b0-r0-n00"), *gang("ml/g", 3, 8).pods],
        min_pods=3,
    )
    service = GangRequest.group(
        "ml/service", [gang("ml/prefill", 4, 8), gang("ml/decode", 2, 2), gang("ml/router", 1, 1)], min_children=2
    )

    assert minimum_shapes(elastic) == Counter({gpu_shape(8): 4})
    assert minimum_shapes(running) == Counter({gpu_shape(8): 2})
    assert minimum_shapes(service) == Counter({gpu_shape(1): 1, gpu_shape(2): 2})


def test_a_composite_passes_over_a_block_whose_racks_cannot_each_hold_a_part() -> None:
    """Two parts of two whole nodes, each in a rack of one block. Block b0 comes first (as little in use, and
    its name) and has four nodes for the composite's four pods, but other reservations hold the rest: one
    rack offers one node, the other three, and no two racks there hold a part each. Block b1 does."""
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    for name in ("b1-r0-n00", "b1-r0-n01", "b1-r1-n00", "b1-r1-n01"):
        fill(snapshot, name, 4)
    taken = np.zeros_like(snapshot.allocatable)
    for name in ("b0-r0-n00", "b0-r0-n01", "b0-r0-n02", "b0-r1-n00"):
        row = snapshot.index_of(name)
        taken[row] = snapshot.allocatable[row]
    service = GangRequest.group(
        "ml/svc", [gang("ml/a", 2, 8, required=RACK), gang("ml/b", 2, 8, required=RACK)], required=BLOCK
    )

    plan = choose_parts_drain(snapshot, service, BLOCK, node_priority=_idle(snapshot), taken=taken)

    assert plan is not None and plan.domain == "b1"
    assert _names(snapshot, plan.rows) == [f"b1-r{r}-n0{n}" for r in range(2) for n in (2, 3)]
    assert plan.wanted == 32 and plan.in_use == 0
