"""Reasons a person can act on: kube-scheduler's per-node counts and the words of gang-level reasons."""

from __future__ import annotations

import numpy as np

from topology.fit import ShapeFit
from topology.model import HOSTNAME
from topology.resources import PODS
from topology.snapshot import Snapshot

TOO_MANY_PODS = "Too many pods"


def short_name(key: str) -> str:
    """What to call one domain of a label key in a sentence: ``example.com/rack`` -> ``rack``."""
    if key == HOSTNAME:
        return "node"
    return key.rsplit("/", 1)[-1] or key


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


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
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


def _ordered(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
