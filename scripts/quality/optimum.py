"""The exact optimum of a small instance: most GPUs placed, all-or-nothing, required domains honoured.

An integer program solved with ``scipy.optimize.milp`` (HiGHS):

- ``x[g]`` in {0, 1}: gang g is placed; ``y[g, n]`` in 0..k: pods of gang g on node n;
  ``z[g, d]`` in {0, 1}: gang g (with a required key) is in domain d of that key;
- maximise the GPUs of the pods placed, sum of gpus_per_pod[g] * y[g, n];
- sum over n of y[g, n] = pods[g] * x[g] (all or nothing), or for an elastic gang between its minimum
  and all its pods: min_pods[g] * x[g] <= sum over n of y[g, n] <= pods[g] * x[g];
- sum over g of gpus_per_pod[g] * y[g, n] <= GPUs of node n (cpu and memory never bind here: a pod
  asks 4 cores and 32Gi per GPU of nodes with 64 cores and 512Gi per 8 GPUs);
- sum over d of z[g, d] = x[g], and y[g, n] <= pods[g] * z[g, domain of n] for a required key.

Preferred keys are preferences, not constraints, so the optimum ignores them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from topology import Snapshot

from .workloads import GPU, GPUS_PER_NODE, Gang


@dataclass(frozen=True, slots=True)
class Optimum:
    gpus: int
    proven: bool
    extras: int = 0  # pods beyond the minimums of elastic gangs, in the solution found


def optimum(snapshot: Snapshot, gangs: list[Gang], *, time_limit: float = 60.0) -> Optimum:
    n_gangs, n_nodes = len(gangs), snapshot.n_nodes
    node_gpus = snapshot.free[:, snapshot.resources.index(GPU)]
    per_pod = [min(gang.gpus, GPUS_PER_NODE) for gang in gangs]
    for gang, share in zip(gangs, per_pod, strict=True):
        if gang.gpus % share:
            raise ValueError(f"{gang.key}: the exact model needs pods of one size")
    domains: list[tuple[int, np.ndarray]] = []  # (gang, domain id of each node) for required keys
    for g, gang in enumerate(gangs):
        key = gang.request().required
        if key is not None:
            domains.append((g, snapshot.label(key).ids))
    z_offset = n_gangs + n_gangs * n_nodes
    z_index: list[tuple[int, int, int]] = []  # (gang, domain, variable)
    for g, ids in domains:
        for d in np.unique(ids[ids >= 0]):
            z_index.append((g, int(d), z_offset + len(z_index)))
    n_vars = z_offset + len(z_index)

    def y(g: int, n: int) -> int:
        return n_gangs + g * n_nodes + n

    rows: list[tuple[dict[int, float], float, float]] = []
    for g, gang in enumerate(gangs):  # all or nothing; an elastic gang at least its minimum
        coefficients = {y(g, n): 1.0 for n in range(n_nodes)}
        coefficients[g] = -float(gang.pods)
        rows.append((coefficients, -np.inf if gang.min_pods is not None else 0.0, 0.0))
        if gang.min_pods is not None:
            rows.append(({**coefficients, g: -float(gang.min_pods)}, 0.0, np.inf))
    for n in range(n_nodes):  # GPUs per node
        rows.append(({y(g, n): float(per_pod[g]) for g in range(n_gangs)}, -np.inf, float(node_gpus[n])))
    by_gang: dict[int, list[tuple[int, int]]] = {}
    for g, d, variable in z_index:
        by_gang.setdefault(g, []).append((d, variable))
    for g, ids in domains:  # one domain if placed, and every pod inside it
        choices = by_gang[g]
        coefficients = {variable: 1.0 for _, variable in choices}
        coefficients[g] = -1.0
        rows.append((coefficients, 0.0, 0.0))
        variable_of = dict(choices)
        for n in range(n_nodes):
            domain = int(ids[n])
            if domain < 0:
                rows.append(({y(g, n): 1.0}, 0.0, 0.0))
            else:
                rows.append(({y(g, n): 1.0, variable_of[domain]: -float(gangs[g].pods)}, -np.inf, 0.0))
    constraints = linear_constraints(rows, n_vars)
    cost = np.zeros(n_vars)
    for g in range(n_gangs):
        cost[y(g, 0) : y(g, 0) + n_nodes] = -float(per_pod[g])
    high = np.ones(n_vars)
    for g in range(n_gangs):
        per_node = min(gangs[g].pods, GPUS_PER_NODE // per_pod[g])
        high[y(g, 0) : y(g, 0) + n_nodes] = per_node
    result = milp(
        cost,
        constraints=constraints,
        integrality=np.ones(n_vars),
        bounds=Bounds(np.zeros(n_vars), high),
        options={"time_limit": time_limit, "disp": False},
    )
    if result.x is None:
        raise RuntimeError(f"the solver found no solution: {result.message}")
    chosen = np.round(result.x).astype(np.int64)
    extras = sum(
        int(chosen[y(g, 0) : y(g, 0) + n_nodes].sum()) - gang.min_pods * int(chosen[g])
        for g, gang in enumerate(gangs)
        if gang.min_pods is not None
    )
    return Optimum(gpus=round(-result.fun), proven=result.status == 0, extras=extras)


def linear_constraints(rows: list[tuple[dict[int, float], float, float]], n_vars: int) -> LinearConstraint:
    """``low <= sum(coefficient * x[variable]) <= high`` for each (coefficients, low, high) row."""
    matrix = lil_matrix((len(rows), n_vars))
    lower, upper = np.empty(len(rows)), np.empty(len(rows))
    for i, (coefficients, low, high) in enumerate(rows):
        for variable, value in coefficients.items():
            matrix[i, variable] = value
        lower[i], upper[i] = low, high
    return LinearConstraint(matrix.tocsr(), lower, upper)
