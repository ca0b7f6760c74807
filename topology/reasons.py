"""Reasons a person can act on: kube-scheduler's per-node counts and the words of gang-level reasons."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.fit import ShapeFit, domain_totals, pods_per_node, shape_fit
from topology.nodes import HOSTNAME
from topology.quantities import DEVICES, PODS, amount_words, counts_devices, resource_words
from topology.request import PodShape
from topology.snapshot import Snapshot

TOO_MANY_PODS = "Too many pods"


def short_name(key: str) -> str:
    """What to call one domain of a label key in a sentence: ``example.com/rack`` -> ``rack``."""
    if key == HOSTNAME:
        return "node"
    return key.rsplit("/", 1)[-1] or key


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def devices_wanted(shape: PodShape, pods: int) -> str:
    """`` (24 devices of class gpu.nvidia.com)``: the devices ``pods`` pods of ``shape`` claim, for the
    sentence that says how many pods a gang needs (empty when they claim none)."""
    found = [amount_words(amount * pods, name) for name, amount in shape.requests if counts_devices(name)]
    return f" ({', '.join(found)})" if found else ""


def node_reasons(snapshot: Snapshot, shape: ShapeFit) -> tuple[tuple[tuple[str, int], ...], int]:
    """Why nodes cannot take even one pod of ``shape``, counted per reason, and how many can.

    Static filters charge each node to the first one that fails (see ``eligibility``); the remaining
    nodes are checked by NodeResourcesFit, which names every resource the node is short of. Reasons
    are ordered by count, largest first.
    """
    allowed = shape.eligibility
    counts: dict[str, int] = {}
    per_reason = np.bincount(allowed.reason_ids, minlength=len(allowed.reasons))
    for reason_id in np.flatnonzero(per_reason[1:]) + 1:
        counts[allowed.reasons[reason_id]] = int(per_reason[reason_id])
    eligible = allowed.mask
    n_eligible = int(eligible.sum())
    if shape.missing:
        if n_eligible:
            for name in shape.missing:
                counts[_insufficient(name)] = n_eligible
        return _ordered(counts), 0
    short_any = np.zeros(snapshot.n_nodes, dtype=np.bool_)
    free = snapshot.free
    resources = snapshot.resources
    for column, quota in zip(shape.columns.tolist(), shape.quotas.tolist(), strict=True):
        short = eligible & (free[:, column] < quota)
        n_short = int(short.sum())
        if n_short:
            counts[_insufficient(resources[column])] = n_short
            short_any |= short
    return _ordered(counts), int((eligible & ~short_any).sum())


def _insufficient(resource: str) -> str:
    """NodeResourcesFit's wording for a node short of ``resource``."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource_words(resource)}"


def _ordered(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True, slots=True)
class DomainCapacity:
    """Room in one domain of a label key: copies of a shape that fit now, and the free amounts of the
    resources the shape requests (over nodes the shape may use)."""

    value: str
    pods: int
    nodes: int
    free: tuple[tuple[str, int], ...]


def capacity_by_domain(snapshot: Snapshot, shape: PodShape, key: str) -> list[DomainCapacity]:
    """Every domain of ``key`` with the room it has for ``shape``, roomiest first.

    One ``pods_per_node`` over the cluster and one bincount per requested resource: what a person
    needs to see why a gang that must share one domain does not fit in any.
    """
    fit = shape_fit(snapshot, shape)
    column = snapshot.label(key)
    n_domains = len(column.values)
    if not n_domains:
        return []
    usable = fit.eligibility.mask & (column.ids >= 0)
    per_node = pods_per_node(snapshot.free, fit)
    pods = domain_totals(column.ids, per_node, n_domains)
    nodes = domain_totals(column.ids, usable.astype(np.int64), n_domains)
    usable_free = np.where(usable[:, None], snapshot.free[:, fit.columns], 0)
    free = [domain_totals(column.ids, usable_free[:, i], n_domains) for i in range(len(fit.columns))]
    names = [snapshot.resources[c] for c in fit.columns.tolist()]
    found = [
        DomainCapacity(
            value=value,
            pods=int(pods[i]),
            nodes=int(nodes[i]),
            free=tuple((name, int(amounts[i])) for name, amounts in zip(names, free, strict=True)),
        )
        for i, value in enumerate(column.values)
    ]
    return sorted(found, key=lambda domain: (-domain.pods, domain.value))


def node_limit(snapshot: Snapshot, shape: ShapeFit) -> str:
    """What bounds the copies of ``shape`` the roomiest node holds when empty, as kube-scheduler names a
    short resource: ``"each node holds at most 1 (nvidia.com/gpu 8 of 8)"``. Empty when no node may
    take the shape at all."""
    if shape.missing or not snapshot.n_nodes or not len(shape.columns):
        return ""
    best = int(np.argmax(shape.empty_fit))
    copies = int(shape.empty_fit[best])
    if not copies:
        return ""
    allocatable = snapshot.allocatable[best, shape.columns]
    limiting = int(np.argmin(allocatable // shape.quotas))
    name = snapshot.resources[int(shape.columns[limiting])]
    used, total = copies * int(shape.quotas[limiting]), int(allocatable[limiting])
    if name == PODS:
        return f"each node holds at most {copies} ({total} pods)"
    if name.startswith(DEVICES):
        return f"each node holds at most {copies} ({used} of its {total} {resource_words(name)})"
    return f"each node holds at most {copies} ({name} {used} of {total})"
