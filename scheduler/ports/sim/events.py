"""core/v1 Events as a view of events.k8s.io/v1 ones, as the API server converts between the two.

Both APIs serve one store. Phalanx writes ``events.k8s.io/v1`` Events; ``kubectl describe`` and
``kubectl get events`` read ``core/v1`` ones (``involvedObject``, ``message``, ``reportingComponent``).
SimCluster keeps the events.k8s.io form and converts on the way in and out of the core API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (core/v1 field, events.k8s.io/v1 field) for the fields the two versions name differently.
_RENAMED = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)
_TO_CORE = {modern: core for core, modern in _RENAMED}
_TO_MODERN = {core: modern for core, modern in _RENAMED}


def to_core(event: Mapping[str, Any]) -> dict[str, Any]:
    """The core/v1 view of a stored Event (with the zero values the server shows for unset fields)."""
    view = {_TO_CORE.get(key, key): value for key, value in event.items()}
    view["apiVersion"] = "v1"
    view.setdefault("source", {})
    view.setdefault("firstTimestamp", None)
    view.setdefault("lastTimestamp", None)
    return view


def to_modern(event: Mapping[str, Any]) -> dict[str, Any]:
    """A core/v1 Event in the stored (events.k8s.io/v1) form."""
    stored = {_TO_MODERN.get(key, key): value for key, value in event.items()}
    stored["apiVersion"] = "events.k8s.io/v1"
    return stored
