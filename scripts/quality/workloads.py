"""Clusters and gang streams for the quality benchmark, all seeded.

A cluster is uniform: blocks of racks of nodes with 8 GPUs, 64 cores and 512Gi each. A gang of n GPUs
is a leaf of ceil(n/8) pods of min(n, 8) GPUs (4 cores and 32Gi per GPU), as the Philly trace is read;
its constraint is none, a preferred rack, a required rack or a required block.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from topology import GangRequest, Member, NodeRecord, PodShape, Snapshot, Topology

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
GI = 1 << 30
CONSTRAINTS = ("none", "preferred-rack", "required-rack", "required-block")


@dataclass(frozen=True, slots=True)
class ClusterSize:
    blocks: int
    racks: int  # per block
    nodes: int  # per rack

    @property
    def n_nodes(self) -> int:
        return self.blocks * self.racks * self.nodes

    @property
    def name(self) -> str:
        return f"{self.n_nodes}_nodes"


#: The benchmark's clusters: 32 nodes per rack, 8 racks per block, as in the placement benchmark.
SIZES = {1024: ClusterSize(4, 8, 32), 5120: ClusterSize(20, 8, 32)}


def cluster(size: ClusterSize) -> Snapshot:
    records = []
    for b in range(size.blocks):
        for r in range(size.racks):
            for n in range(size.nodes):
                name = f"b{b:02d}-r{r}-n{n:02d}"
                records.append(
                    NodeRecord(
                        name=name,
                        labels={BLOCK: f"b{b:02d}", RACK: f"b{b:02d}-r{r}", HOST: name},
                        allocatable={"cpu": 64_000, "memory": 512 * GI, "pods": 110, GPU: GPUS_PER_NODE},
                    )
                )
    return Snapshot(records, topology=Topology(levels=LEVELS))


def pod_shape(gpus: int) -> PodShape:
    return PodShape.of({GPU: gpus, "cpu": 4_000 * gpus, "memory": 32 * GI * gpus})


@dataclass(frozen=True, slots=True)
class Gang:
    """``gpus`` in all; an elastic gang (``min_pods`` set) runs with that many pods and wants the rest."""

    key: str
    gpus: int
    constraint: str
    min_pods: int | None = None

    @property
    def pods(self) -> int:
        return math.ceil(self.gpus / GPUS_PER_NODE)

    def request(self) -> GangRequest:
        """The gang as a leaf; the last pod takes what remains when n is not a multiple of 8."""
        members = []
        left = self.gpus
        for i in range(self.pods):
            share = min(GPUS_PER_NODE, left)
            left -= share
            members.append(Member(key=f"{self.key}-{i}", shape=pod_shape(share)))
        required = {"required-rack": RACK, "required-block": BLOCK}.get(self.constraint)
        preferred = RACK if self.constraint == "preferred-rack" else None
        return GangRequest.leaf(self.key, members, min_pods=self.min_pods, required=required, preferred=preferred)


#: Sizes (GPUs) of the saturation mix and how often each is drawn: many small jobs, a few large ones.
MIX = {1: 30, 2: 10, 4: 10, 8: 14, 16: 10, 32: 8, 64: 7, 128: 5, 256: 3, 512: 2, 1024: 1}


def constraint_for(gpus: int, rng: random.Random, size: ClusterSize) -> str:
    """A seeded constraint that can be met: a required rack only for gangs a rack can hold."""
    rack_gpus = size.nodes * GPUS_PER_NODE
    choices = ["none", "preferred-rack", "required-block"]
    if gpus <= rack_gpus:
        choices.append("required-rack")
    if gpus > size.racks * rack_gpus:
        choices = ["none", "preferred-rack"]
    return rng.choice(choices)


def saturation_stream(size: ClusterSize, seed: int, *, demand: float = 1.0) -> list[Gang]:
    """Gangs drawn from :data:`MIX` until their GPUs reach ``demand`` times the cluster's."""
    rng = random.Random(seed)
    capacity = size.n_nodes * GPUS_PER_NODE
    sizes, weights = list(MIX), list(MIX.values())
    gangs: list[Gang] = []
    total = 0
    while total < demand * capacity:
        gpus = rng.choices(sizes, weights)[0]
        gangs.append(Gang(f"sat/g{len(gangs):05d}", gpus, constraint_for(gpus, rng, size)))
        total += gpus
    return gangs


def adversarial_stream(size: ClusterSize) -> list[Gang]:
    """Single-GPU jobs alternating with gangs of one whole rack (32 nodes) that must share a rack: a
    spreading placer puts each small job on a different empty rack, and no rack stays whole."""
    rack_gpus = size.nodes * GPUS_PER_NODE
    gangs = []
    for i in range(size.blocks * size.racks):
        gangs.append(Gang(f"adv/small-{i:03d}", 1, "none"))
        gangs.append(Gang(f"adv/rack-{i:03d}", rack_gpus, "required-rack"))
    return gangs


@dataclass(frozen=True, slots=True)
class Instance:
    """A small cluster already partly used by other pods, and the gangs offered to it, in order."""

    size: ClusterSize
    gangs: list[Gang]
    others: list[tuple[str, int]]  # (node, GPUs used there by pods of another scheduler)

    def snapshot(self) -> Snapshot:
        snapshot = cluster(self.size)
        for node, gpus in self.others:
            snapshot.assume(f"other/{node}", node, dict(pod_shape(gpus).requests))
        return snapshot


def small_instance(seed: int, *, order: str = "largest-first") -> Instance:
    """An instance the exact solver proves optimal in about a second: 64 nodes (2 blocks x 4 racks x 8),
    half of them already partly used (1-6 GPUs) by other pods, and up to 30 gangs asking for 90-100%
    of the GPUs left. ``order`` is how every algorithm sees them: "largest-first" (a queue ordered by
    size) or "arrival" (as drawn)."""
    rng = random.Random(seed)
    size = ClusterSize(2, 4, 8)
    others = []
    for block in range(size.blocks):
        for rack in range(size.racks):
            for node in range(size.nodes):
                if rng.random() < 0.5:
                    others.append((f"b{block:02d}-r{rack}-n{node:02d}", rng.choice([1, 2, 3, 4, 6])))
    left = size.n_nodes * GPUS_PER_NODE - sum(gpus for _, gpus in others)
    target = rng.uniform(0.9, 1.0) * left
    mix = {1: 6, 2: 4, 4: 5, 8: 6, 16: 5, 24: 4, 32: 4, 40: 3, 48: 3, 56: 2, 64: 2}
    gangs: list[Gang] = []
    total = 0
    while len(gangs) < 30:
        gpus = rng.choices(list(mix), list(mix.values()))[0]
        if total + gpus > target:
            break
        gangs.append(Gang(f"opt/g{len(gangs):02d}", gpus, constraint_for(gpus, rng, size)))
        total += gpus
    if order == "largest-first":
        gangs = sorted(gangs, key=lambda gang: -gang.gpus)
    return Instance(size, gangs, others)


def elastic_instance(seed: int) -> Instance:
    """Elastic gangs on a cluster whose racks are partly taken: 64 nodes (2 blocks x 4 racks x 8), each rack
    with 0-6 whole nodes used by other pods; 6 gangs of whole-node pods, each in one rack, running with
    2-4 pods and wanting 2-4 more. A placer that puts each minimum in the tightest rack leaves the extras
    nowhere to go; the optimum places every gang where it can grow."""
    rng = random.Random(seed)
    size = ClusterSize(2, 4, 8)
    others = []
    for block in range(size.blocks):
        for rack in range(size.racks):
            for node in range(rng.choice([0, 2, 4, 5, 6])):
                others.append((f"b{block:02d}-r{rack}-n{node:02d}", GPUS_PER_NODE))
    gangs = []
    for i in range(6):
        minimum = rng.randint(2, 4)
        wanted = minimum + rng.randint(2, 4)
        gangs.append(Gang(f"ela/g{i:02d}", wanted * GPUS_PER_NODE, "required-rack", min_pods=minimum))
    return Instance(size, gangs, others)
