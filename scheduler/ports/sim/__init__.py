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

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
#: This ``__init__`` is the package's face: it may import any of them, and none of them imports it.
ORDER = (
    # what the server answers and keeps
    "status",
    "dra",
    "events",
    "patch",
    "validation",
    "schema",
    "resources",
    "selectors",
    "store",
    # building a cluster in it, and faults to inject
    "builders",
    "faults",
    # serving it over HTTP, as kube-apiserver does
    "protobuf",
    "media",
    "openapi",
    "tables",
    "http",
    "apiserver",
    # the engine's port onto the store itself, without HTTP
    "adapter",
)

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
