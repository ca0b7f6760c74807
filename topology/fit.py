"""How many copies of a pod shape fit: per node in one vectorized expression, per domain by reduction.

``fit[n] = min over requested resources r of free[n, r] // request[r]``, zero on nodes the shape may
not use. Everything placement decides starts from this number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.domains import IdArray, IntArray
from topology.eligibility import Eligibility, eligibility
from topology.request import PodShape
from topology.snapshot import Snapshot

#: Fit values are clipped here before they enter sort keys (a node never holds a million pods).
FIT_CAP = (1 << 29) - 1


@dataclass(frozen=True, slots=True)
class ShapeFit:
    """One pod shape laid out on one snapshot.

    columns, quotas : ndarray of shape (n_requested,), dtype=int64
        The resource columns the shape requests and the amounts, in base units.
    empty_fit : ndarray of shape (n_nodes,), dtype=int64
        Copies that would fit on each node if it were empty; a node fitting fewer now is "partly
        used" for this shape, and placement fills such nodes first.
    empty_total : int
        ``empty_fit.sum()``: copies the whole cluster could hold empty (the pre-check's bound).
    size : float
        The shape's largest share of the biggest node's allocatable, over resources: bigger shapes
        are placed first, because small pods fit into what big ones leave.
    """

    shape: PodShape
    columns: IntArray
    quotas: IntArray
    missing: tuple[str, ...]
    eligibility: Eligibility
    empty_fit: IntArray
    empty_total: int
    size: float


def shape_fit(snapshot: Snapshot, shape: PodShape) -> ShapeFit:
    """The cached :class:`ShapeFit` of ``shape`` (per generation and allocatable change)."""
    return snapshot.cached_capacity(("shape", shape), lambda: _build(snapshot, shape))


def _build(snapshot: Snapshot, shape: PodShape) -> ShapeFit:
    request = snapshot.request_vector(shape.requests)
    quotas = request.vector[request.columns]
    allowed = eligibility(snapshot, shape.constraints)
    empty_fit = _fit_rows(snapshot.allocatable, request.columns, quotas, None)
    if request.missing:
        empty_fit[:] = 0
    empty_fit[allowed.blocked] = 0
    biggest = snapshot.allocatable[:, request.columns].max(axis=0) if snapshot.n_nodes else quotas * 0
    shares = quotas / np.maximum(biggest, 1)
    size = float(shares.max()) if len(shares) else 0.0
    if request.missing:
        size = float("inf")
    return ShapeFit(
        shape=shape,
        columns=request.columns,
        quotas=quotas,
        missing=request.missing,
        eligibility=allowed,
        empty_fit=empty_fit,
        empty_total=int(empty_fit.sum()),
        size=size,
    )


def _fit_rows(capacity: IntArray, columns: IntArray, quotas: IntArray, rows: IntArray | None) -> IntArray:
    n_rows = capacity.shape[0] if rows is None else len(rows)
    if not len(columns):
        return np.full(n_rows, FIT_CAP, dtype=np.int64)
    fit: IntArray | None = None
    for column, quota in zip(columns.tolist(), quotas.tolist(), strict=True):
        values = capacity[:, column] if rows is None else capacity[rows, column]
        if quota == 1 and fit is not None:  # one GPU, one pod slot: no division (272 -> 204 us a call on
            np.minimum(fit, values, out=fit)  # 65,536 nodes); ``values`` is only read
            continue
        copies = values // quota
        fit = copies if fit is None else np.minimum(fit, copies, out=fit)
    assert fit is not None
    np.clip(fit, 0, FIT_CAP, out=fit)
    return fit


def pods_per_node(free: IntArray, fit: ShapeFit, rows: IntArray | None = None) -> IntArray:
    """Copies of the shape that fit on each node (or on ``rows`` only), zero where it may not go.

    free : ndarray of shape (n_nodes, n_resources), dtype=int64
    Returns an ndarray of shape (n_nodes,) or (len(rows),), dtype=int64.
    """
    if fit.missing:
        return np.zeros(free.shape[0] if rows is None else len(rows), dtype=np.int64)
    counts = _fit_rows(free, fit.columns, fit.quotas, rows)
    if rows is None:
        counts[fit.eligibility.blocked] = 0
    else:
        counts[~fit.eligibility.mask[rows]] = 0
    return counts


def domain_totals(ids: IdArray, values: IntArray, n_domains: int) -> IntArray:
    """Sum ``values`` per domain id, ignoring nodes outside every domain (id -1)."""
    valid = ids >= 0
    if valid.all():
        sums = np.bincount(ids, weights=values, minlength=n_domains)
    else:
        sums = np.bincount(ids[valid], weights=values[valid], minlength=n_domains)
    return sums.astype(np.int64)


def cumsum_by_group(values: IntArray, starts: IntArray, ids: IntArray) -> IntArray:
    """Running sums that restart at each group (rows sorted by group; ``starts[g]`` is group g's first row)."""
    running = np.cumsum(values)
    before = np.where(starts > 0, running[np.maximum(starts - 1, 0)], 0)
    result: IntArray = running - before[ids]
    return result
