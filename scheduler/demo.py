"""A first look at the placement engine: a mixed workload on a small embedded cluster.

Shown by ``scripts/demo`` (``phalanx demo``). It uses the same engine the scheduler uses, on a
cluster of 2 blocks x 4 racks x 8 nodes with 8 GPUs each, and prints where each gang went or why
it could not go, then a map of the racks with each node's GPUs labelled by gang.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass

from topology import (
    GangRequest,
    Infeasible,
    Member,
    NodeRecord,
    Placement,
    PodShape,
    Snapshot,
    Topology,
    place,
)

BLOCK = "example.com/block"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def demo_cluster(blocks: int = 2, racks: int = 4, nodes: int = 8, gpus: int = 8) -> Snapshot:
    records = [
        NodeRecord(
            name=f"b{b}-r{r}-n{n}",
            labels={BLOCK: f"b{b}", RACK: f"b{b}-r{r}", HOSTNAME: f"b{b}-r{r}-n{n}"},
            allocatable={"cpu": 64_000, "memory": 512 << 30, "pods": 110, GPU: gpus},
        )
        for b in range(blocks)
        for r in range(racks)
        for n in range(nodes)
    ]
    return Snapshot(records, topology=Topology(levels=(BLOCK, RACK, HOSTNAME)))


def _pods(key: str, count: int, gpus: int) -> list[Member]:
    shape = PodShape.of({GPU: gpus, "cpu": 4_000 * gpus, "memory": (32 << 30) * gpus})
    return [Member(key=f"{key}-{i}", shape=shape) for i in range(count)]


def demo_workload() -> Iterator[GangRequest]:
    """Gangs in arrival order: training, fine-tuning, a disaggregated service, sweeps, and one too big."""
    yield GangRequest.leaf("team-a/pretrain", _pods("team-a/pretrain", 12, 8), required=BLOCK)
    yield GangRequest.leaf("team-b/finetune", _pods("team-b/finetune", 6, 8), required=RACK)

    def role(name: str, replicas: int, size: int) -> GangRequest:
        return GangRequest.group(
            f"svc/{name}",
            [
                GangRequest.leaf(f"svc/{name}-{i}", _pods(f"svc/{name}-{i}", size, 8), required=RACK)
                for i in range(replicas)
            ],
            min_children=1,
        )

    yield GangRequest.group("svc/llm", [role("prefill", 3, 2), role("decode", 2, 4)], required=BLOCK)
    for i in range(6):
        yield GangRequest.leaf(f"team-c/sweep-{i}", _pods(f"team-c/sweep-{i}", 2, 2), preferred=RACK)
    yield GangRequest.leaf("team-d/elastic", _pods("team-d/elastic", 10, 4), min_pods=6, preferred=RACK)
    yield GangRequest.leaf("team-e/huge", _pods("team-e/huge", 40, 8), required=BLOCK)


@dataclass(frozen=True, slots=True)
class Outcome:
    gang: str
    result: Placement | Infeasible


def run(snapshot: Snapshot, workload: Iterator[GangRequest]) -> list[Outcome]:
    outcomes = []
    for request in workload:
        result = place(snapshot, request)
        if isinstance(result, Placement):
            snapshot.assume_placement(result)
        outcomes.append(Outcome(request.key, result))
    return outcomes


def render(snapshot: Snapshot, outcomes: list[Outcome]) -> str:
    lines = [f"{'gang':<18} {'result':<10} {'pods':>4}  where", "-" * 78]
    letters: dict[str, str] = {}
    symbols = iter(string.ascii_uppercase + string.ascii_lowercase)
    for outcome in outcomes:
        result = outcome.result
        if isinstance(result, Placement):
            letter = letters[outcome.gang] = next(symbols)
            own = result.domain_of(outcome.gang)
            where = ", ".join(f"{key.rsplit('/', 1)[-1]} {value}" for key, value in own.items()) or "anywhere"
            used = {snapshot.node(a.node).labels.get(RACK) for a in result.assignments}  # type: ignore[union-attr]
            where += f" ({len(used)} rack{'s' if len(used) != 1 else ''})"
            status = "placed" if not result.unplaced else f"+{len(result.unplaced)} wait"
            lines.append(f"{outcome.gang:<18} {status:<10} {len(result.assignments):>4}  [{letter}] {where}")
        else:
            lines.append(f"{outcome.gang:<18} {'pending':<10} {0:>4}  {result.message}")
    lines += ["", "GPU map (one cell per node; letters are gangs, '.' is a free GPU):"]
    gpu_of: dict[str, list[str]] = {name: [] for name in snapshot.names}
    for outcome in outcomes:
        if isinstance(outcome.result, Placement):
            for assignment in outcome.result.assignments:
                gpus = dict(assignment.shape.requests).get(GPU, 0)
                gpu_of[assignment.node].extend(letters[outcome.gang] * gpus)
    racks: dict[str, list[str]] = {}
    for record in snapshot.records:
        cells = gpu_of[record.name]
        total = record.allocatable.get(GPU, 0)
        racks.setdefault(record.labels.get(RACK, "?"), []).append("".join(cells).ljust(total, "."))
    for rack, cells in racks.items():
        lines.append(f"  {rack:<7} " + " ".join(cells))
    return "\n".join(lines)


def main() -> int:
    snapshot = demo_cluster()
    outcomes = run(snapshot, demo_workload())
    print(f"Phalanx placement demo: {snapshot.n_nodes} nodes in 2 blocks x 4 racks, 8 GPUs each\n")
    print(render(snapshot, outcomes))
    return 0
