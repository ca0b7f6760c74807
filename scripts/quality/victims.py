"""Victim selection on small random instances: the exact optimum, and two baselines to compare with.

An instance is a small cluster (racks of 8-GPU nodes) full of running *units* (whole gangs, surplus pods
of elastic gangs, plain pods) at low priorities, and one preemptor gang of ``k`` pods of ``g`` GPUs, some
required to fit in one rack. Every instance here has one pod shape and one resource, so "the preemptor
fits" is exact arithmetic: within one domain, the sum over nodes of ``floor(free / g)`` reaches ``k``.

- :func:`optimum`: the best victim set under the issue's order (fewest budget violations, lowest highest
  victim priority, smallest priority sum, fewest pods, most recent start), lexicographically, as five
  integer programs solved in turn with ``scipy.optimize.milp`` (each fixes the previous criterion's best).
- :func:`per_pod_preemption`: kube-scheduler's way, one preemptor pod at a time: for each, the node whose
  lowest-priority pods (single pods, whatever their gang) make room, chosen by the same node order,
  then reprieved; topology is not considered.
- :func:`per_node_victims`: Volcano's preempt action as its users describe it: for each preemptor pod, the
  first node where evicting its lowest-priority pods one by one makes room; no reprieve.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, milp

from quality.optimum import linear_constraints

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Pod:
    key: str
    node: int
    gpus: int
    priority: int
    started: float
    gang: str
    budget: str | None = None


@dataclass(frozen=True)
class Running:
    """A gang (or plain pod) as it runs: its pods, its minimum, whether its surplus may go pod by pod."""

    key: str
    pods: tuple[Pod, ...]
    min_pods: int
    priority: int


@dataclass
class Instance:
    seed: int
    racks: int
    nodes_per_rack: int
    running: list[Running]
    budgets: dict[str, int]
    pods: int  # preemptor pods
    gpus: int  # per preemptor pod
    rack_required: bool
    priority: int = 100
    rack_of: list[int] = field(default_factory=list)

    @property
    def n_nodes(self) -> int:
        return self.racks * self.nodes_per_rack

    def used(self) -> np.ndarray:
        used = np.zeros(self.n_nodes, dtype=np.int64)
        for gang in self.running:
            for pod in gang.pods:
                used[pod.node] += pod.gpus
        return used


def instance(seed: int) -> Instance | None:
    """A random full cluster and a preemptor that does not fit now but would if everything below it went."""
    draw = random.Random(seed)
    racks, per_rack = draw.choice((2, 3, 4)), draw.choice((2, 3, 4))
    n_nodes = racks * per_rack
    free = [GPUS_PER_NODE] * n_nodes
    running: list[Running] = []
    budgets: dict[str, int] = {}
    clock = 0.0
    for number in range(200):
        if sum(free) <= draw.choice((0, 2, 4)):
            break
        size = draw.choice((1, 1, 2, 2, 3, 4))
        gpus = draw.choice((1, 2, 2, 4, 8))
        priority = draw.choice((1, 2, 3))
        rack = draw.randrange(racks)
        nodes = [rack * per_rack + i for i in range(per_rack)]
        if draw.random() < 0.3:
            nodes = list(range(n_nodes))  # some gangs span racks
        placed: list[int] = []
        room = free[:]
        for _ in range(size):
            open_nodes = [n for n in nodes if room[n] >= gpus]
            if not open_nodes:
                break
            node = draw.choice(open_nodes)
            room[node] -= gpus
            placed.append(node)
        if len(placed) < size:
            continue
        free = room
        key = f"g{number}"
        budget = None
        if draw.random() < 0.15:
            budget = f"pdb-{key}"
            budgets[budget] = draw.choice((0, 1))
        pods = []
        for i, node in enumerate(placed):
            clock += draw.uniform(1, 100)
            pods.append(Pod(f"{key}-{i}", node, gpus, priority, clock, key, budget))
        elastic = size > 1 and draw.random() < 0.3
        min_pods = draw.randrange(1, size) if elastic else size
        running.append(Running(key, tuple(pods), min_pods, priority))
    gpus = draw.choice((1, 2, 4, 8))
    pods = draw.choice((1, 2, 3, 4))
    found = Instance(seed, racks, per_rack, running, budgets, pods, gpus, draw.random() < 0.6)
    found.rack_of = [n // per_rack for n in range(n_nodes)]
    if fits(found, np.zeros(n_nodes, dtype=np.int64)) or not fits(found, found.used()):
        return None
    return found


def fits(inst: Instance, freed: np.ndarray) -> bool:
    """Whether the preemptor fits with ``freed`` GPUs given back per node."""
    room = GPUS_PER_NODE - inst.used() + freed
    copies = np.maximum(room, 0) // inst.gpus
    if inst.rack_required:
        per_rack = np.bincount(np.array(inst.rack_of), weights=copies, minlength=inst.racks)
        return bool(per_rack.max() >= inst.pods)
    return bool(copies.sum() >= inst.pods)


def rank(inst: Instance, victims: set[str]) -> tuple[int, int, int, int, float]:
    """The issue's order, for any set of victim pods (lower is better)."""
    pods = [pod for gang in inst.running for pod in gang.pods if pod.key in victims]
    covered = Counter(pod.budget for pod in pods if pod.budget is not None)
    violations = sum(max(0, count - inst.budgets[name]) for name, count in covered.items())
    return (
        violations,
        max((pod.priority for pod in pods), default=0),
        sum(pod.priority for pod in pods),
        len(pods),
        -max((pod.started for pod in pods), default=0.0),
    )


def units(inst: Instance) -> list[tuple[str, tuple[Pod, ...], bool]]:
    """(key, pods, surplus) of every unit: each gang whole, and each pod beyond an elastic gang's minimum."""
    found = []
    for gang in inst.running:
        found.append((gang.key, gang.pods, False))
        newest = sorted(gang.pods, key=lambda pod: -pod.started)[: len(gang.pods) - gang.min_pods]
        found += [(pod.key, (pod,), True) for pod in newest]
    return found


def optimum(inst: Instance) -> set[str]:
    """The lexicographically best victim set, by five integer programs in turn."""
    unit_list = units(inst)
    pods = [pod for gang in inst.running for pod in gang.pods]
    index = {pod.key: i for i, pod in enumerate(pods)}
    n_u, n_p, n_n = len(unit_list), len(pods), inst.n_nodes
    domains = inst.racks if inst.rack_required else 1
    budgets = sorted(inst.budgets)
    # Variables: x (units), z (pods evicted), c (preemptor pods per node), y (domain), v (violations per
    # budget), m (highest victim priority), w (which unit is the most recent), s (its start).
    x0, z0 = 0, n_u
    c0 = z0 + n_p
    y0 = c0 + n_n
    v0 = y0 + domains
    m = v0 + len(budgets)
    w0 = m + 1
    s = w0 + n_u
    n_vars = s + 1
    latest_start = max((pod.started for pod in pods), default=0.0) + 1.0
    big = 2.0  # starts are scaled into [0, 1) so that the solver's tolerances mean the same at any scale
    rows: list[tuple[dict[int, float], float, float]] = []
    for u, (_, unit_pods, _) in enumerate(unit_list):
        for pod in unit_pods:
            rows.append(({z0 + index[pod.key]: 1.0, x0 + u: -1.0}, 0.0, np.inf))  # z >= x
    for pod in pods:  # z <= sum of the units that hold it
        holders = {x0 + u: -1.0 for u, (_, unit_pods, _) in enumerate(unit_list) if pod in unit_pods}
        rows.append(({z0 + index[pod.key]: 1.0, **holders}, -np.inf, 0.0))
    used = inst.used()
    for n in range(n_n):  # the preemptor's pods fit in what is free plus what is freed
        row = {c0 + n: float(inst.gpus)}
        for pod in pods:
            if pod.node == n:
                row[z0 + index[pod.key]] = -float(pod.gpus)
        rows.append((row, -np.inf, float(GPUS_PER_NODE - used[n])))
        domain = inst.rack_of[n] if inst.rack_required else 0
        rows.append(({c0 + n: 1.0, y0 + domain: -float(inst.pods)}, -np.inf, 0.0))  # only in the chosen domain
    rows.append(({c0 + n: 1.0 for n in range(n_n)}, float(inst.pods), np.inf))
    rows.append(({y0 + d: 1.0 for d in range(domains)}, 1.0, 1.0))
    for b, name in enumerate(budgets):  # v_b >= covered - allowed
        row = {v0 + b: 1.0, **{z0 + index[pod.key]: -1.0 for pod in pods if pod.budget == name}}
        rows.append((row, -float(inst.budgets[name]), np.inf))
    for pod in pods:
        rows.append(({m: 1.0, z0 + index[pod.key]: -float(pod.priority)}, 0.0, np.inf))
    rows.append(({w0 + u: 1.0 for u in range(n_u)}, 0.0, 1.0))
    for u, (_, unit_pods, _) in enumerate(unit_list):
        rows.append(({w0 + u: 1.0, x0 + u: -1.0}, -np.inf, 0.0))  # w <= x
        latest = max(pod.started for pod in unit_pods) / latest_start
        rows.append(({s: 1.0, w0 + u: big - latest}, -np.inf, big))  # s <= latest(u) if w(u), else <= big - ...
    rows.append(({s: 1.0, **{w0 + u: -big for u in range(n_u)}}, -np.inf, 0.0))  # s = 0 unless some w is set
    objectives = [
        {v0 + b: 1.0 for b in range(len(budgets))},
        {m: 1.0},
        {z0 + index[pod.key]: float(pod.priority) for pod in pods},
        {z0 + i: 1.0 for i in range(n_p)},
        {s: -1.0},
    ]
    integrality = np.ones(n_vars)
    integrality[s] = 0
    high = np.ones(n_vars)
    high[c0 : c0 + n_n] = GPUS_PER_NODE // inst.gpus
    high[v0 : v0 + len(budgets)] = n_p
    high[m] = 1000
    high[s] = big
    fixed: list[tuple[dict[int, float], float, float]] = []
    solution = None
    for objective in objectives:
        solution = _solve(rows + fixed, objective, n_vars, integrality, high)
        value = sum(coefficient * solution[var] for var, coefficient in objective.items())
        fixed.append((objective, -np.inf, value + 1e-6))
    assert solution is not None
    return {pod.key for pod in pods if solution[z0 + index[pod.key]] > 0.5}


def _solve(
    rows: list[tuple[dict[int, float], float, float]],
    objective: dict[int, float],
    n_vars: int,
    integrality: np.ndarray,
    high: np.ndarray,
) -> np.ndarray:
    cost = np.zeros(n_vars)
    for variable, value in objective.items():
        cost[variable] = value
    result = milp(
        cost,
        constraints=linear_constraints(rows, n_vars),
        integrality=integrality,
        bounds=Bounds(np.zeros(n_vars), high),
        options={"time_limit": 30, "disp": False},
    )
    if result.x is None:
        raise RuntimeError(f"the solver found no solution: {result.message}")
    return np.asarray(result.x)


def _node_order(inst: Instance, node: int, victims: list[Pod]) -> tuple[int, int, int, float, int]:
    return (
        max((pod.priority for pod in victims), default=0),
        sum(pod.priority for pod in victims),
        len(victims),
        -max((pod.started for pod in victims), default=0.0),
        node,
    )


def per_pod_preemption(inst: Instance) -> set[str]:
    """kube-scheduler: per preemptor pod, the best node by its order, lowest priorities first, reprieved."""
    room = GPUS_PER_NODE - inst.used()
    alive = {pod.key: pod for gang in inst.running for pod in gang.pods}
    victims: set[str] = set()
    for _ in range(inst.pods):
        best: tuple[tuple[int, int, int, float, int], int, list[Pod]] | None = None
        for node in range(inst.n_nodes):
            here = sorted((p for p in alive.values() if p.node == node), key=lambda p: (p.priority, -p.started))
            if room[node] + sum(p.gpus for p in here) < inst.gpus:
                continue
            chosen = list(here)
            for pod in sorted(chosen, key=lambda p: (-p.priority, p.started)):  # reprieve, most important first
                if room[node] + sum(p.gpus for p in chosen) - pod.gpus >= inst.gpus:
                    chosen.remove(pod)
            order = _node_order(inst, node, chosen)
            if best is None or order < best[0]:
                best = (order, node, chosen)
        if best is None:
            break
        _, node, chosen = best
        for pod in chosen:
            victims.add(pod.key)
            del alive[pod.key]
            room[node] += pod.gpus
        room[node] -= inst.gpus
    return victims


def per_node_victims(inst: Instance) -> set[str]:
    """Volcano-like: per preemptor pod, the first node where evicting its lowest-priority pods makes room."""
    room = GPUS_PER_NODE - inst.used()
    alive = {pod.key: pod for gang in inst.running for pod in gang.pods}
    victims: set[str] = set()
    for _ in range(inst.pods):
        for node in range(inst.n_nodes):
            here = sorted((p for p in alive.values() if p.node == node), key=lambda p: p.priority)
            if room[node] + sum(p.gpus for p in here) < inst.gpus:
                continue
            while room[node] < inst.gpus:
                pod = here.pop(0)
                victims.add(pod.key)
                del alive[pod.key]
                room[node] += pod.gpus
            room[node] -= inst.gpus
            break
    return victims


def broken(inst: Instance, victims: set[str]) -> int:
    """Gangs left running below their minimum."""
    return sum(1 for gang in inst.running if 0 < sum(1 for pod in gang.pods if pod.key not in victims) < gang.min_pods)


def freed(inst: Instance, victims: set[str]) -> np.ndarray:
    per_node = np.zeros(inst.n_nodes, dtype=np.int64)
    for gang in inst.running:
        for pod in gang.pods:
            if pod.key in victims:
                per_node[pod.node] += pod.gpus
    return per_node
