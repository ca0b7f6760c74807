"""Small builders for clusters, pods and gangs, so that tests read like an operator's story."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

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
    Topology,
)
from topology.eligibility import eligibility

ZONE = "topology.kubernetes.io/zone"
BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GI = 1 << 30
LEVELS = Topology(levels=(BLOCK, RACK, HOST))


def node(
    name: str,
    *,
    gpus: int = 8,
    cpu_cores: int = 64,
    memory_gi: int = 512,
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: Iterable[Taint] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> NodeRecord:
    allocatable = {"cpu": cpu_cores * 1000, "memory": memory_gi * GI, "pods": pods}
    if gpus:
        allocatable[GPU] = gpus
    return NodeRecord(
        name=name,
        labels={HOST: name, **(labels or {})},
        allocatable=allocatable,
        taints=tuple(taints),
        unschedulable=unschedulable,
        ready=ready,
    )


def rack_nodes(block: str, rack: str, count: int, **kwargs: object) -> list[NodeRecord]:
    """``count`` nodes named ``<rack>-n<i>`` in one rack of one block."""
    return [
        node(f"{rack}-n{i:02d}", labels={BLOCK: block, RACK: rack}, **kwargs)  # type: ignore[arg-type]
        for i in range(count)
    ]


def cluster(blocks: int, racks: int, nodes: int, **kwargs: object) -> list[NodeRecord]:
    """``blocks x racks x nodes`` nodes; racks are named ``b<i>-r<j>`` so they are unique."""
    return [
        record
        for b in range(blocks)
        for r in range(racks)
        for record in rack_nodes(f"b{b}", f"b{b}-r{r}", nodes, **kwargs)
    ]


def gpu_shape(gpus: int = 1, *, cpu_m: int = 0, constraints: NodeConstraints | None = None) -> PodShape:
    requests = {GPU: gpus}
    if cpu_m:
        requests["cpu"] = cpu_m
    return PodShape.of(requests, constraints)


def members(prefix: str, count: int, shape: PodShape) -> list[Member]:
    return [Member(key=f"{prefix}-{i}", shape=shape) for i in range(count)]


def gang(
    key: str,
    count: int,
    gpus: int = 1,
    *,
    min_pods: int | None = None,
    required: str | None = None,
    preferred: str | None = None,
    shape: PodShape | None = None,
) -> GangRequest:
    return GangRequest.leaf(
        key,
        members(key, count, shape or gpu_shape(gpus)),
        min_pods=min_pods,
        required=required,
        preferred=preferred,
    )


def fill(snapshot: Snapshot, node_name: str, gpus: int, pod: str | None = None) -> None:
    """Put a pod that uses ``gpus`` GPUs on a node (as if another scheduler had bound it)."""
    snapshot.assume(pod or f"other/{node_name}-{gpus}", node_name, {GPU: gpus, "pods": 1})


def placed_nodes(result: Placement | Infeasible) -> dict[str, str]:
    assert isinstance(result, Placement), result.message if isinstance(result, Infeasible) else result
    return result.nodes()


def labels_of(snapshot: Snapshot, nodes: Iterable[str], key: str) -> set[str | None]:
    return {snapshot.node(name).labels.get(key) for name in nodes}  # type: ignore[union-attr]


def check_placement(snapshot: Snapshot, request: GangRequest, placement: Placement) -> None:
    """The invariants every placement must meet, checked from first principles.

    - no node gets more than its free capacity, for any resource;
    - every node used is eligible for the pod's shape;
    - every part that has any pod placed meets its minimums, and the root always does;
    - all pods of a part with a required key share one value of that label (extras included).
    """
    used = np.zeros_like(snapshot.free)
    columns = {name: i for i, name in enumerate(snapshot.resources)}
    for assignment in placement.assignments:
        row = snapshot.index_of(assignment.node)
        assert row is not None, f"{assignment.pod} placed on unknown node {assignment.node}"
        assert eligibility(snapshot, assignment.shape.constraints).mask[row], (
            f"{assignment.pod} placed on ineligible node {assignment.node}"
        )
        for name, amount in assignment.shape.requests:
            used[row, columns[name]] += amount
    for room in placement.held:  # room for members not created yet counts like the pods it stands for
        row = snapshot.index_of(room.node)
        assert row is not None and eligibility(snapshot, room.shape.constraints).mask[row], room
        for name, amount in room.shape.requests:
            used[row, columns[name]] += amount * room.count
    over = np.argwhere(used > np.maximum(snapshot.free, 0))
    assert not len(over), f"over-committed: {[(snapshot.names[r], snapshot.resources[c]) for r, c in over]}"

    node_of = placement.nodes()
    placed_pods = set(node_of)

    def nodes_under(part: GangRequest) -> list[str]:
        found = [
            room.node
            for leaf in part.walk()
            for room in placement.held
            if room.part == leaf.key
            for _ in range(room.count)
        ]
        for member in part.members():
            if member.key in node_of:
                found.append(node_of[member.key])
            elif member.node is not None and snapshot.index_of(member.node) is not None:
                found.append(member.node)
        return found

    def satisfied(part: GangRequest) -> bool:
        if part.is_leaf:
            return len(nodes_under(part)) >= part.min_pods
        ok_children = sum(1 for child in part.children if satisfied(child))
        return ok_children >= part.min_children and len(nodes_under(part)) >= part.min_pods

    assert satisfied(request), f"gang {request.key} placed below its minimum"
    for part in request.walk():
        has_new = any(member.key in placed_pods for member in part.members())
        if has_new:
            assert satisfied(part), f"part {part.key} got pods but is below its minimum"
            if part.required is not None:
                values = labels_of(snapshot, nodes_under(part), part.required)
                assert len(values) == 1 and None not in values, (
                    f"part {part.key} requires one {part.required} but uses {values}"
                )
