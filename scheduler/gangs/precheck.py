"""Pre-checks that fail a gang fast, as pure functions, before any placement search.

- ``minResources`` of scheduler-plugins and Volcano groups beyond what the whole cluster has free (a
  search cannot succeed, though preemption or a reservation may make room), or beyond what its nodes
  have at all (only more nodes help);
- a minimum beyond what the whole cluster could hold even when empty (``gang-size: "1000000000"``):
  decided per leaf and per shape, never per pod, so a size costs nothing however large it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from topology import GangRequest, Infeasible, PodShape, Snapshot
from topology.fit import shape_fit
from topology.reasons import devices_wanted, node_limit, node_reasons


def min_resources_problem(
    gang: str, min_resources: Mapping[str, int], snapshot: Snapshot, *, at_all: bool = False
) -> str | None:
    """Why the cluster's total free capacity cannot cover ``min_resources``, or None when it can. With
    ``at_all``, against what the nodes have allocatable: a group beyond that waits for more nodes, and no
    preemption or reservation can help it."""
    if not min_resources:
        return None
    capacity = snapshot.allocatable if at_all else snapshot.free
    columns = {name: i for i, name in enumerate(snapshot.resources)}
    short = []
    for name, wanted in sorted(min_resources.items()):
        column = columns.get(name)
        available = int(capacity[:, column].clip(min=0).sum()) if column is not None else 0
        if wanted > available:
            word = "allocatable" if at_all else "free"
            short.append(f"{name} {_amount(name, wanted)} ({word}: {_amount(name, available)})")
    if not short:
        return None
    if at_all:
        needs = ", ".join(short)
        return (
            f"Gang {gang} declares minResources more than the cluster's nodes have: {needs}; it waits for more nodes."
        )
    return f"Gang {gang} declares minResources the cluster does not have free in total: {', '.join(short)}."


def _amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value}m"
    if resource == "memory" or resource.startswith(("hugepages-", "ephemeral-storage")):
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
    return str(value)


def beyond_cluster(request: GangRequest, snapshot: Snapshot) -> Infeasible | None:
    """Why ``request``'s minimum could not fit even on the empty cluster, or None when it might.

    A necessary condition only, per leaf: the pods its minimum still needs (members already bound or
    assumed count as placed) against the copies of its shapes that fit on every node when it is empty.
    Placeholders are counted by their requests alone: the node constraints copied from a sibling are a
    guess about pods that do not exist yet, and must not make a gang look impossible."""

    def impossible(part: GangRequest) -> Infeasible | None:
        """The first reason ``part``'s minimum is beyond the empty cluster: a leaf that cannot fit, or a
        group of which fewer than ``min_children`` parts could (an optional part that cannot is no reason)."""
        if part.is_leaf:
            return leaf_beyond(part)
        reasons = [impossible(child) for child in part.children]
        possible = sum(1 for reason in reasons if reason is None)
        if possible >= part.min_children:
            return None
        return next(reason for reason in reasons if reason is not None)

    def leaf_beyond(leaf: GangRequest) -> Infeasible | None:
        if not leaf.min_pods:
            return None
        need = leaf.min_pods - sum(1 for member in leaf.pods if member.node is not None)
        shapes: set[PodShape] = {member.shape for member in leaf.pods if member.node is None}
        if leaf.placeholder_shape is not None:
            shapes.add(PodShape(requests=leaf.placeholder_shape.requests))
        if need <= 0 or not shapes:
            return None
        ordered = sorted(shapes, key=repr) if len(shapes) > 1 else list(shapes)  # repr is slow: a shape is usual
        room = sum(shape_fit(snapshot, shape).empty_total for shape in ordered)
        if need <= room:
            return None
        part = f"Gang {request.key}" if leaf is request else f"Part {leaf.key} of gang {request.key}"
        what = "of this shape" if len(ordered) == 1 else f"of its {len(ordered)} shapes"
        roomiest = max(
            (shape_fit(snapshot, shape) for shape in ordered), key=lambda fit: int(fit.empty_fit.max(initial=0))
        )
        limit = node_limit(snapshot, roomiest)
        reasons, available = node_reasons(snapshot, roomiest)
        more = " more" if need < leaf.min_pods else ""
        devices = devices_wanted(ordered[0], need) if len(ordered) == 1 else ""
        return Infeasible(
            gang=request.key,
            reason=(
                f"{part} needs {need}{more} pod{'' if need == 1 else 's'}{devices}; the cluster could hold at most "
                f"{room} {what} even if it were empty{': ' + limit if limit else ''}."
            ),
            node_reasons=reasons,
            available=available,
            total=snapshot.n_nodes,
            unresolvable=True,
        )

    return impossible(request)
