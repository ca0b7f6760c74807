"""What a simulation did, as the ``phalanx simulate`` and ``dry-run`` outputs show it (README, "phalanx
simulate"): pods bound and pending, gangs, preemptions, reservations, GPU use over time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler.gangs import GangError, GangSpec

#: States of a gang in a report.
BOUND, PARTIAL, PENDING, INVALID = "Bound", "Partial", "Pending", "Invalid"
#: ... and of a gang whose pods have ended (all succeeded, or not) or are gone.
FINISHED, FAILED, DELETED = "Finished", "Failed", "Deleted"


@dataclass(frozen=True, slots=True)
class GangReport:
    key: str
    state: str
    bound: int
    min: int
    domains: dict[str, str]
    reason: str
    #: Seconds after the start: its first pod created, its minimum bound, its last pod ended.
    arrived: float | None = None
    bound_at: float | None = None
    finished_at: float | None = None

    @property
    def wait(self) -> float | None:
        """Seconds from arrival until its minimum was bound."""
        return None if self.bound_at is None or self.arrived is None else max(0.0, self.bound_at - self.arrived)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "state": self.state,
            "bound": self.bound,
            "min": self.min,
            "domains": self.domains,
            "reason": self.reason,
            "arrived": rounded(self.arrived),
            "bound_at": rounded(self.bound_at),
            "finished_at": rounded(self.finished_at),
            "wait_seconds": rounded(self.wait),
        }


@dataclass(frozen=True, slots=True)
class ReservationReport:
    """A domain held for a gang that waited too long (``starvation`` settings) when the run ended."""

    gang: str
    level: str | None
    domain: str
    nodes: tuple[str, ...]
    #: In words: ``reserves rack b0-r1 for its 32 GPUs; 20 GPUs there are still in use``.
    reserves: str

    def to_json(self) -> dict[str, Any]:
        return {"gang": self.gang, "level": self.level, "domain": self.domain, "nodes": list(self.nodes),
                "reserves": self.reserves}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Report:
    """What a run did: pods it bound (pod -> node), Phalanx's pods left pending (pod -> why), gangs."""

    bound: dict[str, str]
    pending: dict[str, str]
    gangs: list[GangReport]
    nodes: int
    pods_bound: int
    gpu_allocation: float
    seconds: float
    timed_out: bool = False
    #: The node each pod of the cluster runs on after the run (for maps and plots), and GPUs per node.
    placement: dict[str, str] = field(default_factory=dict, repr=False)
    node_gpus: dict[str, int] = field(default_factory=dict, repr=False)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    #: Whole GPUs, or part of one (a MIG partition, a share of a GPU shared by capacity).
    pod_gpus: dict[str, float] = field(default_factory=dict, repr=False)
    #: The gang of each of Phalanx's pods, and each gang's compiled definition (or what is wrong with it).
    gang_of: dict[str, str] = field(default_factory=dict, repr=False)
    results: dict[str, GangSpec | GangError] = field(default_factory=dict, repr=False)
    #: Pods this run preempted, and the gang each made room for; and the gang each belonged to (if any).
    preempted: dict[str, str] = field(default_factory=dict)
    victim_gangs: dict[str, str] = field(default_factory=dict, repr=False)
    #: Domains held for gangs that waited too long, when the run ended.
    reservations: list[ReservationReport] = field(default_factory=list)
    #: One line per workload object that was not simulated, and why.
    refused: list[str] = field(default_factory=list)
    #: Seconds the simulated clock went on; whether anything arrived or ended after the start (then the
    #: report speaks of times); whether it stopped at ``until`` with more still to happen.
    simulated_seconds: float = 0.0
    timeline: bool = False
    until_reached: bool = False
    #: Objects still due to arrive when the run ended (after ``until``).
    not_arrived: int = 0
    #: (seconds, GPUs in use) at every change, and the cluster's GPUs.
    usage: list[tuple[float, float]] = field(default_factory=list, repr=False)
    total_gpus: int = 0

    def gpu_owners(self, pods: Iterable[str] | None = None) -> dict[str, list[str | None]]:
        """Per node, the gang of each of its GPUs in use (None: a pod of no gang), in ``pods`` order (the
        placement's by default): a gang's partitions and shares of GPUs on a node add up to whole GPUs, each
        drawn once it is whole."""
        owners: dict[str, list[str | None]] = {node: [] for node in self.node_gpus}
        parts: dict[tuple[str, str | None], float] = {}
        for pod in pods if pods is not None else self.placement:
            node = self.placement.get(pod)
            if node not in owners:
                continue
            gang = self.gang_of.get(pod)
            before = parts.get((node, gang), 0.0)
            parts[(node, gang)] = after = before + self.pod_gpus.get(pod, 0)
            owners[node] += [gang] * (int(after + 1e-6) - int(before + 1e-6))
        return owners

    @property
    def peak_gpu_allocation(self) -> float:
        return max((gpus for _, gpus in self.usage), default=0) / self.total_gpus if self.total_gpus else 0.0

    @property
    def reserved_nodes(self) -> dict[str, str]:
        """Node -> the gang whose reservation holds it."""
        return {node: held.gang for held in self.reservations for node in held.nodes}

    def to_json(self) -> dict[str, Any]:
        """The documented ``--output json`` shape (README, "phalanx simulate")."""
        return {
            "bound": dict(sorted(self.bound.items())),
            "pending": dict(sorted(self.pending.items())),
            "gangs": [gang.to_json() for gang in self.gangs],
            "preempted": dict(sorted(self.preempted.items())),
            "reservations": [held.to_json() for held in self.reservations],
            "refused": list(self.refused),
            "gpu_allocation_over_time": [
                [round(at, 3), round(gpus / self.total_gpus, 4) if self.total_gpus else 0.0] for at, gpus in self.usage
            ],
            "stats": {
                "nodes": self.nodes,
                "pods_bound": self.pods_bound,
                "gpu_allocation": round(self.gpu_allocation, 4),
                "peak_gpu_allocation": round(self.peak_gpu_allocation, 4),
                "simulated_seconds": round(self.simulated_seconds, 3),
                "until_reached": self.until_reached,
                "timed_out": self.timed_out,
                "not_arrived": self.not_arrived,
                "seconds": round(self.seconds, 3),
            },
        }


def rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
