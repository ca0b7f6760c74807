"""Server-side tables: what ``kubectl get`` asks for (``Accept: application/json;as=Table;g=meta.k8s.io;v=v1``)
and prints, with the columns a 1.36 API server defines for each kind (``-o wide`` adds the priority-1 ones).

Custom resources get their CRD's ``additionalPrinterColumns``; kinds without a printer get Name and Age.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scheduler.ports.sim.events import to_modern
from scheduler.ports.sim.resources import Resource

Obj = Mapping[str, Any]
Cell = Any
_NONE = "<none>"


def human_duration(seconds: float) -> str:
    """The API server's short duration (k8s.io/apimachinery ``duration.HumanDuration``)."""
    if seconds < -1:
        return "<invalid>"
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole}s"
    minutes, hours = whole // 60, whole // 3600
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // (24 * 365), (hours // 24) % 365
    if hours < 24 * 365 * 8:
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{years}y"


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        return None


class _Row:
    """Helpers a printer uses to render one object's cells at ``now``."""

    def __init__(self, obj: Obj, now: float) -> None:
        self.obj = obj
        self.now = now
        self.metadata: Obj = obj.get("metadata") or {}
        self.spec: Obj = obj.get("spec") or {}
        self.status: Obj = obj.get("status") or {}

    def age(self, stamp: Any = None) -> str:
        when = _epoch(stamp if stamp is not None else self.metadata.get("creationTimestamp"))
        return "<unknown>" if when is None else human_duration(self.now - when)


def _pod(row: _Row) -> list[Cell]:
    containers = row.spec.get("containers") or []
    statuses = row.status.get("containerStatuses") or []
    ready = sum(1 for status in statuses if status.get("ready"))
    reason = row.status.get("reason") or row.status.get("phase") or "Unknown"
    scheduled: Obj = next((c for c in row.status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    if scheduled.get("reason") == "SchedulingGated":
        reason = "SchedulingGated"
    if row.metadata.get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(int(status.get("restartCount") or 0) for status in statuses)
    gates = row.spec.get("readinessGates") or []
    return [
        row.metadata.get("name"),
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        row.age(),
        row.status.get("podIP") or _NONE,
        row.spec.get("nodeName") or _NONE,
        row.status.get("nominatedNodeName") or _NONE,
        f"0/{len(gates)}" if gates else _NONE,
    ]


def _node(row: _Row) -> list[Cell]:
    ready = next((c for c in row.status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"
    if row.spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = row.metadata.get("labels") or {}
    roles = sorted(key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/"))
    addresses = {a.get("type"): a.get("address") for a in row.status.get("addresses") or []}
    info = row.status.get("nodeInfo") or {}
    return [
        row.metadata.get("name"),
        state,
        ",".join(roles) or _NONE,
        row.age(),
        info.get("kubeletVersion") or "",
        addresses.get("InternalIP") or _NONE,
        addresses.get("ExternalIP") or _NONE,
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event(row: _Row) -> list[Cell]:
    """Both Event APIs print the same columns (read here in the events.k8s.io form)."""
    event = to_modern(row.obj) if "involvedObject" in row.obj else row.obj
    regarding = event.get("regarding") or {}
    series = event.get("series") or {}
    source = event.get("deprecatedSource") or {}
    if event.get("reportingController"):
        reporter = ", ".join(
            part for part in (event.get("reportingController"), event.get("reportingInstance")) if part
        )
    else:
        reporter = ", ".join(part for part in (source.get("component"), source.get("host")) if part)
    first = event.get("deprecatedFirstTimestamp") or event.get("eventTime")
    last = series.get("lastObservedTime") or event.get("deprecatedLastTimestamp") or first
    return [
        row.age(last),
        event.get("type"),
        event.get("reason"),
        f"{str(regarding.get('kind', '')).lower()}/{regarding.get('name', '')}",
        regarding.get("fieldPath") or "",
        reporter,
        event.get("note") or "",
        row.age(first),
        int(series.get("count") or event.get("deprecatedCount") or 1),
        row.metadata.get("name"),
    ]


def _upstream_podgroup(row: _Row) -> list[Cell]:
    policy = row.spec.get("schedulingPolicy") or {}
    workload = ((row.spec.get("podGroupTemplateRef") or {}).get("workload") or {}).get("workloadName")
    # The API server shows "Pending" until a condition other than PodGroupInitiallyScheduled holds.
    other = [
        c
        for c in row.status.get("conditions") or []
        if c.get("type") != "PodGroupInitiallyScheduled" and c.get("status") == "True"
    ]
    return [
        row.metadata.get("name"),
        "Gang" if "gang" in policy else "Basic" if "basic" in policy else _NONE,
        workload or _NONE,
        other[-1].get("reason") if other else "Pending",
        row.age(),
    ]


def _column(name: str, kind: str = "string", priority: int = 0, *, key: bool = False) -> dict[str, Any]:
    return {"name": name, "type": kind, "format": "name" if key else "", "description": "", "priority": priority}


_PRINTERS: dict[tuple[str, str], tuple[Sequence[dict[str, Any]], Callable[[_Row], list[Cell]]]] = {
    ("", "Pod"): (
        [_column("Name", key=True), _column("Ready"), _column("Status"), _column("Restarts"), _column("Age"),
         _column("IP", priority=1), _column("Node", priority=1), _column("Nominated Node", priority=1),
         _column("Readiness Gates", priority=1)],
        _pod,
    ),
    ("", "Node"): (
        [_column("Name", key=True), _column("Status"), _column("Roles"), _column("Age"), _column("Version"),
         _column("Internal-IP", priority=1), _column("External-IP", priority=1), _column("OS-Image", priority=1),
         _column("Kernel-Version", priority=1), _column("Container-Runtime", priority=1)],
        _node,
    ),
    ("", "Namespace"): (
        [_column("Name", key=True), _column("Status"), _column("Age")],
        lambda row: [row.metadata.get("name"), row.status.get("phase") or "Active", row.age()],
    ),
    ("", "Event"): (
        [_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"),
         _column("Subobject", priority=1), _column("Source", priority=1), _column("Message"),
         _column("First Seen", priority=1), _column("Count", priority=1), _column("Name", priority=1, key=True)],
        _event,
    ),
    ("coordination.k8s.io", "Lease"): (
        [_column("Name", key=True), _column("Holder"), _column("Age")],
        lambda row: [row.metadata.get("name"), row.spec.get("holderIdentity") or _NONE, row.age()],
    ),
    ("scheduling.k8s.io", "PriorityClass"): (
        [_column("Name", key=True), _column("Value", "integer"), _column("Global-Default", "boolean"),
         _column("Age"), _column("PreemptionPolicy")],
        lambda row: [row.metadata.get("name"), row.obj.get("value"), bool(row.obj.get("globalDefault")), row.age(),
                     row.obj.get("preemptionPolicy") or "PreemptLowerPriority"],
    ),
    ("scheduling.k8s.io", "PodGroup"): (
        [_column("Name", key=True), _column("Policy"), _column("Workload"), _column("Status"), _column("Age")],
        _upstream_podgroup,
    ),
}  # fmt: skip
_PRINTERS["events.k8s.io", "Event"] = _PRINTERS["", "Event"]
_DEFAULT = ([_column("Name", key=True), _column("Age")], lambda row: [row.metadata.get("name"), row.age()])


def _json_path(obj: Obj, path: str) -> Any:
    """The value at a printer column's simple JSONPath (``.status.phase``); None when absent."""
    current: Any = obj
    for part in path.strip().lstrip(".").split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
    return current


def table(
    resource: Resource, objects: Iterable[Obj], *, now: float, version: str, full: bool = False
) -> dict[str, Any]:
    """The ``meta.k8s.io/v1`` Table of ``objects`` (stored form), with each row's object as partial metadata
    (``full``: the whole object, as ``includeObject=Object`` asks)."""
    if resource.columns:
        definitions = [_column("Name", key=True)] + [
            _column(c["name"], c.get("type", "string"), int(c.get("priority", 0))) for c in resource.columns
        ]

        def cells(row: _Row) -> list[Cell]:
            values = [_json_path(row.obj, c["jsonPath"]) for c in resource.columns]
            shown = [  # a date column is shown as an age, as the API server's CRD table convertor does
                row.age(value) if c.get("type") == "date" and value is not None else value
                for c, value in zip(resource.columns, values, strict=True)
            ]
            return [row.metadata.get("name"), *shown]

    else:
        definitions, cells = _PRINTERS.get((resource.group, resource.kind), _DEFAULT)
    rows = []
    for obj in objects:
        shown = (
            obj
            if full
            else {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        )
        rows.append({"cells": cells(_Row(obj, now)), "object": shown})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version},
        "columnDefinitions": [dict(definition) for definition in definitions],
        "rows": rows,
    }
