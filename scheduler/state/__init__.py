"""The cluster as Phalanx knows it: ``ClusterState`` and its parts (``cluster_state.py`` says how they fit).

Modules in :data:`ORDER`: each imports only modules before it (``tests/test_layers.py``).
"""

from scheduler.state.cluster_state import ClusterState
from scheduler.state.records import (
    DISRUPTION_TARGET,
    FINISHED,
    PREEMPTION_BY_SCHEDULER,
    Assumption,
    Departure,
    RunningPod,
)
from scheduler.state.view import ClusterView

ORDER = (
    "records",
    "changes",
    "assumptions",
    "device_applier",
    "node_applier",
    "pod_applier",
    "group_applier",
    "view",
    "cluster_state",
)

__all__ = [
    "DISRUPTION_TARGET",
    "FINISHED",
    "ORDER",
    "PREEMPTION_BY_SCHEDULER",
    "Assumption",
    "ClusterState",
    "ClusterView",
    "Departure",
    "RunningPod",
]
