"""Running a stream of gangs through one algorithm, and what the result looks like.

Each gang is offered once, in order; a placement is committed at once (every later gang sees it). The
stream stops offering a size of gang after its first rejection ("until the first rejection of each
size"), so the end state is the cluster as full as the algorithm could make it for each size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from topology import Placement, Snapshot
from topology.fit import pods_per_node, shape_fit

from .baselines import Placer
from .workloads import BLOCK, GPU, GPUS_PER_NODE, RACK, Gang, pod_shape


@dataclass(slots=True)
class StreamResult:
    snapshot: Snapshot
    placed: list[tuple[Gang, Placement]] = field(default_factory=list)
    rejected: list[Gang] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def placed_gpus(self) -> int:
        """GPUs of the pods placed (an elastic gang's extras that did not fit are not counted)."""
        return sum(dict(a.shape.requests).get(GPU, 0) for _, placement in self.placed for a in placement.assignments)

    @property
    def extras(self) -> int:
        """Pods placed beyond the minimums of elastic gangs."""
        return sum(
            len(placement.assignments) - gang.min_pods for gang, placement in self.placed if gang.min_pods is not None
        )


def run_stream(snapshot: Snapshot, gangs: list[Gang], placer: Placer, *, close_sizes: bool = True) -> StreamResult:
    result = StreamResult(snapshot)
    closed: set[int] = set()
    started = time.perf_counter()
    for gang in gangs:
        if gang.gpus in closed:
            continue
        outcome = placer(snapshot, gang.request())
        if isinstance(outcome, Placement) and (not outcome.unplaced or gang.min_pods is not None):
            snapshot.assume_placement(outcome)
            result.placed.append((gang, outcome))
        else:
            result.rejected.append(gang)
            if close_sizes:
                closed.add(gang.gpus)
    result.seconds = time.perf_counter() - started
    return result


def _column(snapshot: Snapshot, name: str) -> int:
    return snapshot.resources.index(name)


def gpu_allocation(snapshot: Snapshot) -> float:
    column = _column(snapshot, GPU)
    return float(snapshot.requested[:, column].sum() / snapshot.allocatable[:, column].sum())


def stranded_gpus(snapshot: Snapshot, rejected: list[Gang]) -> int:
    """Free GPUs on nodes where no pod of any rejected gang fits (room nobody waiting can use)."""
    column = _column(snapshot, GPU)
    free = snapshot.free[:, column]
    usable = np.zeros(snapshot.n_nodes, dtype=bool)
    for gpus in sorted({min(gang.gpus, GPUS_PER_NODE) for gang in rejected}):
        usable |= pods_per_node(snapshot.free, shape_fit(snapshot, pod_shape(gpus))) > 0
    return int(free[~usable].sum())


def free_domains(snapshot: Snapshot, key: str) -> int:
    """Domains of ``key`` where no GPU is in use."""
    ids = snapshot.label(key).ids
    used = np.bincount(ids, weights=snapshot.requested[:, _column(snapshot, GPU)], minlength=ids.max() + 1)
    return int((used == 0).sum())


def span_ratio(snapshot: Snapshot, placed: list[tuple[Gang, Placement]], key: str) -> float:
    """Mean over placed multi-pod gangs of the domains of ``key`` they span over the fewest that could
    hold them (1.0 is perfectly compact)."""
    ids = snapshot.label(key).ids
    domain_gpus = int(np.bincount(ids, weights=snapshot.allocatable[:, _column(snapshot, GPU)]).max())
    ratios = []
    for gang, placement in placed:
        if len(placement.assignments) < 2:
            continue
        rows = [snapshot.index_of(assignment.node) for assignment in placement.assignments]
        spanned = len({int(ids[row]) for row in rows if row is not None})
        ratios.append(spanned / math.ceil(gang.gpus / domain_gpus))
    return float(np.mean(ratios)) if ratios else 1.0


def summary(result: StreamResult) -> dict[str, float]:
    snapshot = result.snapshot
    return {
        "gpu_allocation": gpu_allocation(snapshot),
        "stranded_gpus": stranded_gpus(snapshot, result.rejected),
        "free_racks": free_domains(snapshot, RACK),
        "free_blocks": free_domains(snapshot, BLOCK),
        "span_ratio": span_ratio(snapshot, result.placed, RACK),
        "block_span_ratio": span_ratio(snapshot, result.placed, BLOCK),
        "gangs_placed": len(result.placed),
        "placed_gpus": result.placed_gpus,
        "seconds": result.seconds,
    }
