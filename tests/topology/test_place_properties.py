"""Properties of placement on random clusters and random gang trees (hypothesis, derandomized)."""

from __future__ import annotations

from functools import cache

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import BLOCK, GPU, HOST, LEVELS, RACK, check_placement, node
from topology import (
    GangRequest,
    Infeasible,
    Member,
    NodeConstraints,
    NodeRecord,
    Placement,
    PodShape,
    Snapshot,
    Taint,
    Toleration,
    place,
)

BROKEN = Taint(key="gpu", value="broken", effect="NoSchedule")
TOLERATE_BROKEN = NodeConstraints(tolerations=(Toleration(key="gpu", value="broken", effect="NoSchedule"),))


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 24) -> tuple[list[NodeRecord], list[tuple[str, str, dict[str, int]]]]:
    count = draw(st.integers(1, max_nodes))
    nodes = []
    used = []
    for i in range(count):
        block = draw(st.integers(0, 1))
        rack = draw(st.integers(0, 2))
        labels = {BLOCK: f"b{block}", RACK: f"b{block}-r{rack}"}
        if draw(st.integers(0, 9)) == 0:
            labels = {}  # a node outside every domain
        record = node(
            f"n{i:02d}",
            gpus=draw(st.integers(0, 8)),
            cpu_cores=draw(st.integers(1, 16)),
            memory_gi=draw(st.integers(1, 64)),
            pods=draw(st.integers(1, 8)),
            labels=labels,
            taints=[BROKEN] if draw(st.integers(0, 5)) == 0 else [],
            unschedulable=draw(st.integers(0, 11)) == 0,
        )
        nodes.append(record)
        gpus = record.allocatable.get(GPU, 0)
        if gpus and draw(st.booleans()):
            used.append((f"other/{i}", record.name, {GPU: draw(st.integers(1, gpus)), "pods": 1}))
    return nodes, used


SHAPES = st.builds(
    lambda gpus, cpu, mem, tolerant: PodShape.of(
        {GPU: gpus, "cpu": cpu * 500, "memory": mem << 30}, TOLERATE_BROKEN if tolerant else None
    ),
    st.integers(0, 4),
    st.integers(0, 8),
    st.integers(0, 16),
    st.booleans(),
)
KEYS = st.sampled_from([None, None, BLOCK, RACK, HOST, "example.com/nowhere"])


@st.composite
def trees(draw: st.DrawFn, depth: int = 0, prefix: str = "g") -> GangRequest:
    if depth >= 2 or draw(st.integers(0, 2)) > 0:
        shapes = draw(st.lists(SHAPES, min_size=1, max_size=2))
        count = draw(st.integers(1, 5))
        pods = [Member(key=f"{prefix}/p{i}", shape=shapes[i % len(shapes)]) for i in range(count)]
        return GangRequest.leaf(
            prefix,
            pods,
            min_pods=draw(st.integers(0, count)),
            required=draw(KEYS),
            preferred=draw(KEYS),
        )
    n_children = draw(st.integers(1, 3))
    children = [draw(trees(depth + 1, f"{prefix}.{i}")) for i in range(n_children)]
    return GangRequest.group(
        prefix,
        children,
        min_children=draw(st.integers(0, n_children)),
        min_pods=draw(st.integers(0, 4)),
        required=draw(KEYS),
        preferred=draw(KEYS),
    )


@given(clusters(), trees())
def test_placement_respects_capacity_minimums_domains_and_eligibility(
    cluster: tuple[list[NodeRecord], list[tuple[str, str, dict[str, int]]]], request: GangRequest
) -> None:
    nodes, used = cluster
    snapshot = Snapshot(nodes, topology=LEVELS, pods=used)
    free, requested = snapshot.free.copy(), snapshot.requested.copy()
    result = place(snapshot, request)
    assert np.array_equal(snapshot.free, free) and np.array_equal(snapshot.requested, requested)
    if isinstance(result, Placement):
        check_placement(snapshot, request, result)
        placed = {assignment.pod for assignment in result.assignments}
        assert placed.isdisjoint(result.unplaced)
        assert placed | set(result.unplaced) == {member.key for member in request.members()}
        snapshot.assume_placement(result)
        assert (snapshot.free[:, snapshot.resources.index("pods")] >= np.minimum(free[:, 2], 0)).all()
    else:
        assert isinstance(result, Infeasible)
        assert result.message.startswith(f"{result.available}/{len(nodes)} nodes are available")
        assert request.key in result.reason


def brute_force_feasible(
    nodes: list[NodeRecord], used: list[tuple[str, str, dict[str, int]]], request: GangRequest
) -> bool:
    """Is there any choice of >= min_pods pods and nodes that fits? Independent of the engine."""
    resources = ("cpu", "memory", "pods", GPU)
    free = []
    for record in nodes:
        row = [record.allocatable.get(name, 0) for name in resources]
        for _, where, requests in used:
            if where == record.name:
                row = [value - requests.get(name, 0) for value, name in zip(row, resources, strict=True)]
        free.append(tuple(row))

    def allowed(shape: PodShape, record: NodeRecord) -> bool:
        if record.unschedulable or not record.ready:
            return False
        tolerated = {(t.key, t.value) for t in shape.constraints.tolerations}
        return all((taint.key, taint.value) in tolerated for taint in record.taints)

    pods = [member.shape for member in request.pods]
    demands = [tuple(dict(shape.requests).get(name, 0) for name in resources) for shape in pods]

    def feasible_in(candidates: list[int]) -> bool:
        @cache
        def search(i: int, placed: int, state: tuple[tuple[int, ...], ...]) -> bool:
            if placed >= request.min_pods:
                return True
            if i == len(pods) or len(pods) - i < request.min_pods - placed:
                return False
            for j, node_index in enumerate(candidates):
                if allowed(pods[i], nodes[node_index]) and all(
                    d <= f for d, f in zip(demands[i], state[j], strict=True)
                ):
                    after = tuple(f - d for d, f in zip(demands[i], state[j], strict=True))
                    if search(i + 1, placed + 1, (*state[:j], after, *state[j + 1 :])):
                        return True
            return search(i + 1, placed, state)

        return search(0, 0, tuple(free[j] for j in candidates))

    if request.required is None:
        return feasible_in(list(range(len(nodes))))
    values = {record.labels.get(request.required) for record in nodes} - {None}
    return any(
        feasible_in([j for j, record in enumerate(nodes) if record.labels.get(request.required) == value])
        for value in sorted(values)
    )


@given(clusters(max_nodes=6), st.lists(SHAPES, min_size=1, max_size=3), st.integers(1, 6), st.data())
def test_when_brute_force_finds_a_placement_for_a_flat_gang_place_finds_one(
    cluster: tuple[list[NodeRecord], list[tuple[str, str, dict[str, int]]]],
    shapes: list[PodShape],
    count: int,
    data: st.DataObject,
) -> None:
    nodes, used = cluster
    request = GangRequest.leaf(
        "flat",
        [Member(key=f"flat/p{i}", shape=shapes[i % len(shapes)]) for i in range(count)],
        min_pods=data.draw(st.integers(1, count)),
        required=data.draw(st.sampled_from([None, RACK, BLOCK])),
    )
    snapshot = Snapshot(nodes, topology=LEVELS, pods=used)
    result = place(snapshot, request)
    if brute_force_feasible(nodes, used, request):
        assert isinstance(result, Placement), result.message  # type: ignore[union-attr]
        check_placement(snapshot, request, result)
    else:
        assert isinstance(result, Infeasible)
