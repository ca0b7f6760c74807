"""The kubelets of a simulated cluster, as far as a scheduler can tell them apart from real ones.

A pod bound to a node is admitted as a kubelet admits it: one that asks more of a resource than the node has
left beside the pods it runs (a pod created with ``nodeName``, which no scheduler checked) is rejected,
``Failed`` with reason ``OutOf<resource>``. An admitted pod starts at once (``phase: Running``,
``startTime``, ``Ready``), and it ends:

- when its ``activeDeadlineSeconds`` have passed since it started: ``Failed``, reason ``DeadlineExceeded``,
  as a kubelet ends it whatever its restart policy;
- when its containers exit after the seconds its ``simulate.phalanx.dev/run-seconds`` annotation gives
  (an annotation for simulation only: how long the work takes): ``Succeeded``. A pod whose
  ``restartPolicy`` is ``Always`` (the default, and what Deployments, StatefulSets and LeaderWorkerSets
  use) never ends this way: its kubelet would start the containers again.

An ended pod stays, as on a cluster, until its controller or a person deletes it; it holds no room.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler.gangs.pods import FINISHED_PHASES
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import MERGE_PATCH, Obj, Store
from topology.quantities import QuantityError, pod_requests, resource_list

#: How long a pod's work takes, in seconds, for ``phalanx simulate`` (the README documents it).
RUN_SECONDS = "simulate.phalanx.dev/run-seconds"

Key = tuple[str, str]


class AnnotationError(ValueError):
    """A ``run-seconds`` annotation that is not a number of seconds; the message names the pod."""


def run_seconds(pod: Mapping[str, Any]) -> float | None:
    """The pod's ``simulate.phalanx.dev/run-seconds``, or None; :class:`AnnotationError` when not a number."""
    metadata = pod.get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(RUN_SECONDS)
    if value is None:
        return None
    try:
        seconds = float(str(value))
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise AnnotationError(
            f"pod {metadata.get('name', '?')!r}: {RUN_SECONDS} must be a number of seconds, got {value!r}"
        )
    return seconds


class Kubelets:
    """Starts the pods bound since the last call and ends those whose time has come; see the module docstring.

    ``store`` must be the one the scheduler writes to; ``now`` is the store's wall clock.
    """

    def __init__(self, store: Store, now: Callable[[], float]) -> None:
        self.store = store
        self.now = now
        self._pods = store.resource("v1", "Pod")
        self._nodes = store.resource("v1", "Node")
        self._bound: list[Key] = []
        self._ends: list[tuple[float, Key, str, str]] = []  # (when, pod, uid, phase it ends in)
        #: What the pods each node runs take (those this kubelet started and that have not ended).
        self._running: dict[str, dict[Key, Mapping[str, int]]] = {}
        store.observe(self._observe)

    def _observe(self, storage: tuple[str, str], kind: str, obj: Obj, previous: Obj | None) -> None:
        if storage != self._pods.storage:
            return
        metadata = obj.get("metadata") or {}
        key = (metadata.get("namespace", ""), metadata.get("name", ""))
        if kind == "DELETED" or (obj.get("status") or {}).get("phase") in FINISHED_PHASES:
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                self._running.get(node, {}).pop(key, None)
            if kind == "DELETED":
                return
        if (obj.get("spec") or {}).get("nodeName") and not ((previous or {}).get("spec") or {}).get("nodeName"):
            metadata = obj["metadata"]
            self._bound.append((metadata.get("namespace", ""), metadata["name"]))

    def start(self) -> int:
        """Start every pod bound since the last call that has not started; returns how many."""
        started = 0
        bound, self._bound = self._bound, []
        for key in bound:
            pod = self._current(key)
            if pod is None or (pod.get("status") or {}).get("startTime") or pod["metadata"].get("deletionTimestamp"):
                continue
            now = self.now()
            if self._rejected(key, pod, now):
                continue
            conditions = [
                condition
                for condition in (pod.get("status") or {}).get("conditions") or []
                if condition.get("type") not in ("Initialized", "ContainersReady", "Ready")
            ]
            conditions += [
                {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": rfc3339(now)}
                for kind in ("Initialized", "ContainersReady", "Ready")
            ]
            self._write(key, {"status": {"phase": "Running", "startTime": rfc3339(now), "conditions": conditions}})
            started += 1
            end = _end(pod)
            if end is not None:
                seconds, phase = end
                heapq.heappush(self._ends, (now + seconds, key, pod["metadata"].get("uid", ""), phase))
        return started

    def _rejected(self, key: Key, pod: Obj, now: float) -> bool:
        """Admit the pod on its node, or reject it as a kubelet does when the node lacks room for it."""
        node = str(pod["spec"]["nodeName"])
        try:
            asks = pod_requests(pod)
            found = self.store.get(self._nodes, None, node)
            allocatable = resource_list((found.get("status") or {}).get("allocatable") or {}, field="allocatable")
        except (ApiError, QuantityError):
            return False  # no such node, or amounts a kubelet would not read either: not this check's to refuse
        running = self._running.setdefault(node, {})
        for resource, amount in sorted(asks.items()):
            if resource not in allocatable or not amount:
                continue
            used = sum(other.get(resource, 0) for other in running.values())
            if used + amount > allocatable[resource]:
                message = (
                    f"Pod was rejected: Node didn't have enough resource: {resource}, requested: {amount}, used: "
                    f"{used}, capacity: {allocatable[resource]}"
                )
                self._write(key, {"status": {"phase": "Failed", "reason": f"OutOf{resource}", "message": message}})
                return True
        running[key] = asks
        return False

    def next_end(self) -> float | None:
        """When (wall seconds) the next started pod ends, if one will."""
        return self._ends[0][0] if self._ends else None

    def end_due(self) -> int:
        """End every started pod whose time has come; returns how many."""
        ended = 0
        now = self.now()
        while self._ends and self._ends[0][0] <= now:
            _, key, uid, phase = heapq.heappop(self._ends)
            pod = self._current(key)
            if (
                pod is None
                or pod["metadata"].get("uid") != uid
                or (pod.get("status") or {}).get("phase") in FINISHED_PHASES
            ):
                continue
            status: dict[str, Any] = {"phase": phase}
            if phase == "Failed":
                status["reason"] = "DeadlineExceeded"
                status["message"] = "Pod was active on the node longer than the specified deadline"
            conditions = [
                {**condition, "status": "False", "lastTransitionTime": rfc3339(now)}
                if condition.get("type") in ("ContainersReady", "Ready")
                else condition
                for condition in (pod.get("status") or {}).get("conditions") or []
            ]
            self._write(key, {"status": {**status, "conditions": conditions}})
            ended += 1
        return ended

    def _current(self, key: Key) -> Obj | None:
        try:
            return self.store.get(self._pods, key[0], key[1])
        except ApiError:
            return None

    def _write(self, key: Key, patch: Mapping[str, Any]) -> None:
        with contextlib.suppress(ApiError):  # deleted meanwhile: nothing runs there any more
            self.store.patch(self._pods, key[0], key[1], patch, MERGE_PATCH, subresource="status")


def _end(pod: Mapping[str, Any]) -> tuple[float, str] | None:
    """How long after it starts the pod ends, and in which phase; None if it runs until deleted."""
    spec = pod.get("spec") or {}
    candidates: list[tuple[float, str]] = []
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and deadline > 0:
        candidates.append((float(deadline), "Failed"))
    seconds = run_seconds(pod)
    if seconds is not None and spec.get("restartPolicy", "Always") != "Always":
        candidates.append((seconds, "Succeeded"))
    return min(candidates, key=lambda candidate: candidate[0]) if candidates else None


def rfc3339(seconds: float) -> str:
    """A kubelet's timestamps (``startTime``, conditions) are whole seconds."""
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
