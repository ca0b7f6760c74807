"""Gang sources: every way people describe gangs, compiled to one tree (docs/architecture.md).

Feed a :class:`GangIndex` pod and group-object events; it answers with :class:`GangSpec` values
(a ``topology.GangRequest`` plus priority, timeout and origin) or :class:`GangError` values that say
exactly what to fix.
"""

from scheduler.gangs.gang_settings import GangSettings, SettingsError
from scheduler.gangs.index import GangIndex
from scheduler.gangs.model import (
    GangError,
    GangKey,
    GangResult,
    GangSpec,
    ObjectRef,
    PodKey,
    Problem,
    Source,
    Timeout,
    gang_key,
)
from scheduler.gangs.precheck import beyond_cluster, min_resources_problem

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
#: This ``__init__`` is the package's face: it may import any of them, and none of them imports it.
ORDER = (
    # the words: settings, keys and results, reading an object's fields, a pod
    "gang_settings",
    "model",
    "fields",
    "pods",
    "precheck",
    # what every source shares, the group objects, and each source
    "common",
    "groups",
    "coscheduling",
    "upstream",
    "volcano",
    "sources",
    "pfn",
    # which pods belong to which gang, compiling a gang, the index that keeps both current
    "membership",
    "compiler",
    "index",
)

__all__ = [
    "GangError",
    "GangIndex",
    "GangKey",
    "GangResult",
    "GangSettings",
    "GangSpec",
    "ObjectRef",
    "PodKey",
    "Problem",
    "SettingsError",
    "Source",
    "Timeout",
    "beyond_cluster",
    "gang_key",
    "min_resources_problem",
]
