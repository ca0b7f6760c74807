"""Phalanx's placement engine: pure, deterministic, numpy-vectorized (docs/architecture.md).

Build a :class:`Snapshot` from node records and the pods on them, describe a gang as a
:class:`GangRequest` tree, and call :func:`place`. Nothing here talks to Kubernetes or awaits.
"""

from topology.kinds import KINDS, ResourceKind, node_supply, pod_demand
from topology.nodes import HOSTNAME, NodeRecord, Taint, Topology
from topology.objects import node_constraints, node_record, pod_shape, unsupported_constraints
from topology.outcome import Assignment, DomainChoice, HeldRoom, Infeasible, Placement
from topology.place import DEFAULT_MAX_TRIES, Placer, place
from topology.quantities import QuantityError, parse_quantity, pod_requests
from topology.reasons import DomainCapacity, capacity_by_domain
from topology.request import (
    ConstraintError,
    GangRequest,
    Member,
    NodeConstraints,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodShape,
    Toleration,
)
from topology.snapshot import Snapshot
from topology.spec_error import SpecError

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
#: This ``__init__`` is the package's face: it may import any of them, and none of them imports it.
ORDER = (
    # what a pod asks and a node has
    "spec_error",
    "quantities",
    "kinds",
    "nodes",
    "request",
    "objects",
    # the answer, the domains, the arrays
    "outcome",
    "domains",
    "exact",
    "snapshot",
    # which nodes may take a pod, how many fit, why not
    "eligibility",
    "fit",
    "reasons",
    "trial",
    # placing a gang, and what builds on it
    "place",
    "drain",
    "preemption",
    "running",
)

__all__ = [
    "DEFAULT_MAX_TRIES",
    "HOSTNAME",
    "KINDS",
    "Assignment",
    "ConstraintError",
    "DomainCapacity",
    "DomainChoice",
    "GangRequest",
    "HeldRoom",
    "Infeasible",
    "Member",
    "NodeConstraints",
    "NodeRecord",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Placement",
    "Placer",
    "PodShape",
    "QuantityError",
    "ResourceKind",
    "Snapshot",
    "SpecError",
    "Taint",
    "Toleration",
    "Topology",
    "capacity_by_domain",
    "node_constraints",
    "node_record",
    "node_supply",
    "parse_quantity",
    "place",
    "pod_demand",
    "pod_requests",
    "pod_shape",
    "unsupported_constraints",
]
