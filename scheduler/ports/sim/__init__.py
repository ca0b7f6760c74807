"""SimCluster: an in-memory Kubernetes API with real semantics (docs/architecture.md).

It is the embedded cluster of ``phalanx simulate`` and ``phalanx dry-run``, the store behind the
benchmarks, and, served over HTTP by :class:`SimServer`, the API server the real adapter (``kube/``)
is tested against, with injected faults.
"""

from scheduler.ports.sim.builders import ClusterShape, ManifestError, load, read_manifest_file, read_manifests
from scheduler.ports.sim.faults import FaultRule, Faults
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.resources import Catalog, Resource
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import MERGE_PATCH, STRATEGIC_MERGE_PATCH, Store, Watch, WatchEvent

__all__ = [
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "Catalog",
    "ClusterShape",
    "FaultRule",
    "Faults",
    "ManifestError",
    "Resource",
    "SimServer",
    "Store",
    "Watch",
    "WatchEvent",
    "load",
    "read_manifest_file",
    "read_manifests",
]
