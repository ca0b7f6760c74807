"""What the state keeps of each pod, each assumption and each departure, and how a pod's fields are read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.gangs import GangKey
from scheduler.gangs.fields import timestamp
from topology import PodShape

FINISHED = frozenset({"Succeeded", "Failed"})
#: The condition a preemption puts on each victim before deleting it, and its reason (kube-scheduler's words).
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


@dataclass(slots=True)
class Assumption:
    """Capacity taken for a pod (or a placeholder) before the watch confirms it bound."""

    node: str
    requests: dict[str, int]
    gang: GangKey
    shape: PodShape
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class Departure:
    """A bound pod that failed or was deleted while it ran (not preempted): its room may be kept for its
    replacement (``vacancies.py``)."""

    pod: str
    node: str
    requests: tuple[tuple[str, int], ...]
    gang: GangKey
    at: float  # monotonic


@dataclass(slots=True)
class RunningPod:
    """What the scheduler keeps of every pod, its own or another scheduler's."""

    uid: str
    node: str | None
    finished: bool
    requests: dict[str, int]
    priority: int = 0
    #: ``status.startTime`` (else the creation time) as written, parsed only when preemption asks.
    start: object = None
    deleting: bool = False
    labels: Mapping[str, str] | None = None
    #: Seconds it may take to terminate (``terminationGracePeriodSeconds``, 30 when unset).
    grace: float = 30.0
    #: ``spec.activeDeadlineSeconds``: the kubelet stops the pod this long after it starts.
    runtime_limit: float | None = None
    #: When it will have ended at the latest, in wall seconds, if that is known: its start plus its
    #: ``activeDeadlineSeconds``, or when its deletion's grace period ends.
    ends_at: float | None = None
    #: A scheduler's preemption marked it (its room was made for the preemptor, not left for a replacement).
    preempted: bool = False
    #: The gang it belonged to when its deletion began: a terminating pod no longer counts as a member, but its
    #: removal is still that gang's departure (its room is kept for a replacement).
    gang: GangKey | None = None

    @property
    def started(self) -> float:
        """When it started, in wall seconds: preemption spares the longest-running first."""
        return timestamp(self.start) or 0.0

    def ends_by(self, now: float) -> float:
        """The latest it will have ended (wall seconds): a pod bound but not started yet may start now;
        one with no ``activeDeadlineSeconds`` may run forever."""
        if self.ends_at is not None:
            return self.ends_at
        return now + self.runtime_limit if self.runtime_limit is not None else float("inf")


def key_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """An object's (namespace, name)."""
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def preempted_by(status: Mapping[str, Any]) -> str | None:
    """The message of a scheduler's preemption condition on the pod (kube-scheduler's convention: it starts
    with the scheduler's name), or None."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == DISRUPTION_TARGET
            and condition.get("status") == "True"
            and condition.get("reason") == PREEMPTION_BY_SCHEDULER
        ):
            message = condition.get("message")
            return message if isinstance(message, str) else ""
    return None


def finished_at(status: Mapping[str, Any]) -> float | None:
    """When a finished pod's last container finished (``containerStatuses[].state.terminated.finishedAt``)."""
    latest = None
    for container in status.get("containerStatuses") or ():
        terminated = ((container or {}).get("state") or {}).get("terminated") or {}
        finished = timestamp(terminated.get("finishedAt"))
        if finished is not None and (latest is None or finished > latest):
            latest = finished
    return latest


def grace(pod: Mapping[str, Any]) -> float:
    """A pod's grace period: the one its deletion set, else its spec's, else Kubernetes' default 30 s."""
    for value in ((pod.get("metadata") or {}).get("deletionGracePeriodSeconds"),
                  (pod.get("spec") or {}).get("terminationGracePeriodSeconds")):  # fmt: skip
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return 30.0


def lifetime(
    spec: Mapping[str, Any], status: Mapping[str, Any], metadata: Mapping[str, Any]
) -> tuple[float | None, float | None]:
    """A pod's ``runtime_limit`` and ``ends_at`` (see :class:`RunningPod`), timestamps parsed only when the
    pod has a deadline or is being deleted."""
    raw = spec.get("activeDeadlineSeconds")
    limit = float(raw) if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None
    deleting = metadata.get("deletionTimestamp")
    if deleting is not None:
        return limit, timestamp(deleting)
    if limit is None:
        return None, None
    started = timestamp(status.get("startTime"))
    return limit, None if started is None else started + limit
