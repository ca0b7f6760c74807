"""What every simulated controller shares: the API it writes through, and the way pods are made.

A controller here is a small in-memory object per workload object (a Job, a StatefulSet, ...): it is
started when its object arrives, creates pods (and group objects) in the store through the same writes a
real controller makes (so names and fields are validated as the API server validates them), and is asked
again whenever pods changed, with the pods it owns, to do what the real one would next: replace a pod
that failed, create the next ordinal of a StatefulSet once the previous is ready, the workers of a
LeaderWorkerSet group once its leader exists.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.gangs.pods import FINISHED_PHASES
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import Obj, Store
from topology import SpecError, pod_demand

Manifest = dict[str, Any]
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


class WorkloadError(ValueError):
    """A workload object that cannot be expanded as given; the message names it and the field to fix."""


@dataclass
class Api:
    """The store as a controller sees it, with the simulation's seeded randomness and clock."""

    store: Store
    now: Callable[[], float]
    random: random.Random
    #: The schedulerName a pod template that names none gets (simulate's promise), or None to leave it.
    scheduler_name: str | None = None
    #: One line per object a controller could not create (the run goes on without it), each said once:
    #: a controller tries again as its real one does, and the reason does not change.
    refused: list[str] = field(default_factory=list)
    #: Pods deleted since the controllers last looked, as they were last (a controller's watch sees the
    #: final object of a DELETED event: the Job controller reads its conditions for podFailurePolicy).
    gone: dict[str, Obj] = field(default_factory=dict, repr=False)
    _said: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.store.observe(self._observe)

    def _observe(self, resource: tuple[str, str], change: str, obj: Obj, previous: Obj | None) -> None:
        if resource == ("", "pods") and change == "DELETED":
            self.gone[str(obj["metadata"].get("uid"))] = obj

    def refuse(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.refused.append(line)

    def uid(self) -> str:
        return str(uuid.UUID(int=self.random.getrandbits(128), version=4))

    def create(self, obj: Mapping[str, Any]) -> Obj | None:
        """Create ``obj`` (its namespace first), as its controller would; None, and a line in ``refused``,
        when the API server refuses it."""
        metadata = obj.get("metadata") or {}
        resource = self.store.resource(str(obj["apiVersion"]), str(obj["kind"]))
        namespace = metadata.get("namespace") if resource.namespaced else None
        if namespace:
            self.store.ensure_namespace(namespace)
        try:
            return self.store.create(resource, namespace, obj)
        except ApiError as error:
            name = metadata.get("name") or f"{metadata.get('generateName', '')}*"
            owners = metadata.get("ownerReferences") or [{}]
            made_by = f"{owners[0]['kind']} {owners[0]['name']!r} made " if owners[0] else ""
            self.refuse(f"{made_by}{obj['kind']} {name!r}, which the API server refuses: {error.message}")
            return None

    def delete_pod(self, pod: Obj, *, grace_seconds: int | None = None) -> None:
        metadata = pod["metadata"]
        pods = self.store.resource("v1", "Pod")
        with contextlib.suppress(ApiError):  # already gone
            self.store.delete(pods, metadata.get("namespace"), metadata["name"], grace_period_seconds=grace_seconds)


class Controller(abc.ABC):
    """One workload object's controller: :meth:`start` once, :meth:`reconcile` whenever pods changed."""

    uid: str
    kind: str
    name: str

    @abc.abstractmethod
    def start(self, api: Api) -> None:
        """Create what the controller creates as soon as its object exists."""

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        """``owned``: every pod in the store by the uid of its controlling owner."""
        for child in self.children():
            child.reconcile(api, owned)

    def children(self) -> Iterable[Controller]:
        return ()

    def next_due(self) -> float | None:
        """When (wall seconds) this controller must act without any pod changing (a deadline), if ever."""
        return min((due for child in self.children() if (due := child.next_due()) is not None), default=None)


# -- reading fields ----------------------------------------------------------------------------------


def describe(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind', '?')} {str((obj.get('metadata') or {}).get('name', '?'))!r}"


def mapping(obj: Mapping[str, Any], path: str, *, where: str, required: bool = False) -> Mapping[str, Any]:
    """The object at dotted ``path`` (empty when absent and not ``required``)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise WorkloadError(f"{where}: {path} must be an object")
    return value


def count(obj: Mapping[str, Any], key: str, *, where: str, default: int | None, least: int = 0) -> int | None:
    """A whole-number field such as ``replicas``: ``default`` when absent, an error when not a number."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise WorkloadError(f"{where}: {key} must be a whole number of at least {least}, got {value!r}")
    return value


def name_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a workload object; its namespace defaults to ``default`` as kubectl's does."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"{obj.get('kind', '?')} without metadata.name: give each object a name")
    return str(metadata.get("namespace") or "default"), name


def template_of(obj: Mapping[str, Any], path: str, *, where: str, field: str | None = None) -> Manifest:
    """A pod template at ``path`` of ``obj``, checked for the shape a pod needs; ``field`` is its full name
    in the object the user wrote (for messages), ``spec.<path>`` unless given."""
    field = field or f"spec.{path}"
    template = mapping(obj, path, where=where, required=True)
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise WorkloadError(f"{where}: {field}.metadata must be an object")
    for part in ("labels", "annotations"):
        values = (metadata or {}).get(part)
        if values is not None and (
            not isinstance(values, Mapping) or not all(isinstance(value, str) for value in values.values())
        ):
            raise WorkloadError(f"{where}: {field}.metadata.{part} must map names to strings")
    spec = template.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("containers"), list) or not spec["containers"]:
        raise WorkloadError(f"{where}: {field}.spec.containers is required (a list of containers)")
    return dict(template)


# -- making pods -------------------------------------------------------------------------------------


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReference a controller sets on what it creates."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: Mapping[str, Any], length: int = 10) -> str:
    """A stable hash of a pod template in the API's safe alphabet (``pod-template-hash``,
    ``controller-revision-hash``): the same shape as the controllers', though not the same value (they
    hash Go's rendering of the struct)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, default=str).encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    text = ""
    while len(text) < length:
        number, rest = divmod(number, len(_SAFE))
        text += _SAFE[rest]
    return text


def pod_from(
    api: Api,
    template: Mapping[str, Any],
    *,
    namespace: str,
    name: str | None = None,
    generate_name: str | None = None,
    labels: Mapping[str, str] = {},
    annotations: Mapping[str, str] = {},
    owned_by: Mapping[str, Any],
    spec: Mapping[str, Any] = {},
) -> Manifest:
    """A pod from ``template`` as a controller builds it: the template's metadata with the controller's
    labels and annotations over it, its owner, and ``spec`` fields set over the template's."""
    metadata = template.get("metadata") or {}
    pod_spec = {**(template.get("spec") or {}), **spec}
    if api.scheduler_name and not pod_spec.get("schedulerName"):
        pod_spec["schedulerName"] = api.scheduler_name
    built: dict[str, Any] = {
        "namespace": namespace,
        "labels": {**(metadata.get("labels") or {}), **labels},
        "annotations": {**(metadata.get("annotations") or {}), **annotations},
        "ownerReferences": [dict(owned_by)],
    }
    if name is not None:
        built["name"] = name
    else:
        built["generateName"] = generate_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": built, "spec": pod_spec}


def ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def active(pod: Mapping[str, Any]) -> bool:
    """Not ended and not being deleted: a pod its controller counts as running (or about to)."""
    return not ended(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def ready(pod: Mapping[str, Any]) -> bool:
    """Running with its Ready condition True (a StatefulSet's OrderedReady waits for this)."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


def min_resources(templates: Iterable[tuple[Mapping[str, Any], int]]) -> dict[str, str]:
    """``minResources`` of a group object: the requests of ``count`` pods of each template, summed, as
    quantities (what the controllers that create group objects write)."""
    total: dict[str, int] = {}
    for template, pods in templates:
        try:
            requests = pod_demand(template)
        except SpecError:
            continue
        for resource, amount in requests.items():
            if resource != "pods":
                total[resource] = total.get(resource, 0) + amount * pods
    return {resource: f"{amount}m" if resource == "cpu" else str(amount) for resource, amount in sorted(total.items())}
