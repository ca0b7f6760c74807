"""What every gang source needs while compiling: member pods with their shapes, topology keys merged
from every place they may be written, priority and the timeout."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.gangs.fields import SpecProblem, present, topology_key
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.model import ObjectRef, Problem, Timeout
from scheduler.gangs.pods import TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED, PodInfo
from topology import (
    KINDS,
    GangRequest,
    Member,
    PodShape,
    ResourceKind,
    SpecError,
    node_constraints,
    pod_shape,
    unsupported_constraints,
)
from topology.kinds import waits_of_kinds


@dataclass(slots=True)
class Context:
    """Shared state of one index: settings, priority classes, and members cached by pod key."""

    settings: GangSettings
    #: The kinds of resource a pod's shape is read with (the scheduler's own includes claimed devices).
    kinds: tuple[ResourceKind, ...] = KINDS
    priority_classes: dict[str, int] = field(default_factory=dict)
    #: PriorityClasses whose ``preemptionPolicy`` is ``Never``: a group naming one never preempts.
    never_preempting: set[str] = field(default_factory=set)
    _members: dict[str, tuple[object, Member | SpecProblem]] = field(default_factory=dict)
    #: While set, a member that waits for something (its claim, a DeviceClass) stands in with no requests
    #: instead of stopping the compile: how the gang's minimum is known while it waits.
    stand_in_waiting: bool = False
    #: The spec and member last read from a spec (not taken from the cache): the next pod read, most often
    #: of the same gang, Job or ReplicaSet, mostly has an equal spec.
    _last_read: tuple[object, Member] | None = None

    def member(self, pod: PodInfo) -> Member:
        """The pod as a gang member (its shape and node), or a SpecProblem naming the pod and field.

        Cached per pod while its spec is equal (shape and node are read from the spec alone): comparing
        two specs is far cheaper than parsing one, and a gang is compiled again whenever any member
        changes. Binding changes only ``nodeName``, so the shape is carried over then.
        """
        spec = pod.raw.get("spec")
        if isinstance(spec, Mapping) and spec.get("resourceClaims"):
            # What it claims lives in other objects (and in its status): read afresh at each compile.
            found = _member_or_problem(pod, self.kinds)
            if isinstance(found, SpecProblem):
                if self.stand_in_waiting and found.problem is Problem.WAITING:
                    return Member(key=pod.key, shape=PodShape.of({}), node=pod.node)
                raise found
            return found
        cached = self._members.get(pod.key)
        if cached is None or (cached[0] is not spec and cached[0] != spec):
            found = _rebound(cached, spec, pod) or self._alike(spec, pod) or _member_or_problem(pod, self.kinds)
            cached = (spec, found)
            self._members[pod.key] = cached
            if isinstance(cached[1], Member):
                self._last_read = (spec, cached[1])
        result = cached[1]
        if isinstance(result, SpecProblem):
            if self.stand_in_waiting and result.problem is Problem.WAITING:
                return Member(key=pod.key, shape=PodShape.of({}), node=pod.node)
            raise result
        return result

    def _alike(self, spec: object, pod: PodInfo) -> Member | None:
        """The last member read, as this pod, when their specs are equal (so are their shapes and nodes; equal
        as the API server sends them, its quantities strings: Python's ``==`` takes ``true`` for ``1``)."""
        last = self._last_read
        if last is None or last[0] != spec:
            return None
        return Member(key=pod.key, shape=last[1].shape, node=pod.node)

    def drop(self, pod: str) -> None:
        self._members.pop(pod, None)

    def knows(self, pod: str) -> bool:
        return pod in self._members

    def members(self, pods: Iterable[PodInfo]) -> tuple[Member, ...]:
        return tuple(self.member(pod) for pod in pods)

    def timeout(self, seconds: float | None = None) -> Timeout:
        """A group's own timeout (or the default), never above the configured limit."""
        chosen = self.settings.default_timeout_seconds if seconds is None else seconds
        return Timeout(
            seconds=float(min(chosen, self.settings.timeout_limit_seconds)),
            jitter_seconds=float(self.settings.timeout_jitter_seconds),
        )

    def priority(self, subject: ObjectRef, spec: Mapping[str, object], pods: Iterable[PodInfo]) -> int:
        """A group's ``spec.priority``, else its ``spec.priorityClassName``, else its pods' highest."""
        value = spec.get("priority")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        class_name = spec.get("priorityClassName")
        if isinstance(class_name, str) and class_name:
            if class_name not in self.priority_classes:
                raise SpecProblem(
                    subject,
                    "spec.priorityClassName",
                    class_name,
                    "no PriorityClass has that name; create it or remove the field",
                )
            return self.priority_classes[class_name]
        return max((pod.priority for pod in pods), default=0)


def _rebound(cached: tuple[object, Member | SpecProblem] | None, spec: object, pod: PodInfo) -> Member | None:
    """The cached member on its new node, when binding the pod is all that changed its spec."""
    if cached is None or not isinstance(cached[1], Member) or not isinstance(spec, dict):
        return None
    old, node = cached[0], spec.get("nodeName")
    if not isinstance(old, dict) or not isinstance(node, str) or {**old, "nodeName": node} != spec:
        return None
    shape = cached[1].shape
    constraints = replace(shape.constraints, node_name=node or None)
    return Member(key=pod.key, shape=PodShape(requests=shape.requests, constraints=constraints), node=pod.node)


def _member_or_problem(pod: PodInfo, kinds: tuple[ResourceKind, ...]) -> Member | SpecProblem:
    try:
        waits = waits_of_kinds(pod.raw, kinds)
        if waits:
            where, what = waits[0]
            return SpecProblem(pod.ref, where, present(), f"it waits for {what}", problem=Problem.WAITING)
        unsupported = unsupported_constraints(pod.raw, kinds)
        if unsupported:
            where, what = unsupported[0]
            return SpecProblem(
                pod.ref,
                where,
                present(),
                f"Phalanx does not implement {what}; remove it, or leave this pod to another scheduler",
            )
        # The demand ClusterState read from this same object with these kinds, when it did: not read twice.
        shape = (
            PodShape.of(pod.demand, node_constraints(pod.raw)) if pod.demand is not None else pod_shape(pod.raw, kinds)
        )
        pinned = next((found for kind in kinds if (found := kind.node(pod.raw))), None)
        if pinned is not None and pod.node is None:  # its devices are allocated there: it can go nowhere else
            shape = PodShape(requests=shape.requests, constraints=replace(shape.constraints, node_name=pinned))
        return Member(key=pod.key, shape=shape, node=pod.node)
    except SpecError as error:
        return SpecProblem(pod.ref, error.field, error.value, error.problem)


@dataclass(frozen=True, slots=True)
class Placement:
    """A topology request found somewhere: which key, and where it was written (for messages)."""

    key: str
    where: str


def topology(
    subject: ObjectRef,
    *,
    required: Sequence[Placement] = (),
    preferred: Sequence[Placement] = (),
) -> tuple[str | None, str | None]:
    """Merge topology keys written in several places (group fields, annotations, member pods).

    Every key must be a valid label key, and all places that state a required (or a preferred) key
    must state the same one.
    """
    chosen: list[str | None] = []
    for kind, found in (("required", required), ("preferred", preferred)):
        keys: dict[str, str] = {}
        for item in found:
            keys.setdefault(topology_key(subject, item.key, item.where), item.where)
        if len(keys) > 1:
            # Both places and both values, each place named once (the subject's own without its name).
            own = f"pod {subject.namespace}/{subject.name} " if subject.kind == "Pod" else ""
            (first, where_first), (second, where_second) = (
                (key, where.removeprefix(own) if own else where) for key, where in list(keys.items())[:2]
            )
            raise SpecProblem(
                subject,
                where_second,
                second,
                f"two {kind} topology keys disagree: {first!r} in {where_first} and {second!r} in {where_second}; "
                f"a gang has one {kind} topology key",
                whole=True,
            )
        chosen.append(next(iter(keys), None))
    return chosen[0], chosen[1]


def annotated(annotations: Mapping[str, str], *, owner: str = "") -> tuple[list[Placement], list[Placement]]:
    """The Phalanx topology annotations of one object; ``owner`` names it when it is not the subject
    of the messages (a member pod of a group)."""
    found: tuple[list[Placement], list[Placement]] = ([], [])
    for place, annotation in zip(found, (TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED), strict=True):
        if annotation in annotations:
            where = f"metadata.annotations[{annotation}]"
            place.append(Placement(annotations[annotation], f"{owner} {where}" if owner else where))
    return found


def member_topology(pods: Iterable[PodInfo]) -> tuple[list[Placement], list[Placement]]:
    """Topology annotations of member pods, each a place that must agree with the others."""
    required: list[Placement] = []
    preferred: list[Placement] = []
    for pod in pods:
        pod_required, pod_preferred = annotated(pod.annotations, owner=f"pod {pod.key}")
        required += pod_required
        preferred += pod_preferred
    return required, preferred


def earliest(*times: float) -> float:
    known = [time for time in times if time]
    return min(known) if known else 0.0


@dataclass(frozen=True, slots=True)
class Part:
    """A compiled group object: its request subtree and what it says about the whole gang."""

    request: GangRequest
    priority: int
    timeout: Timeout
    min_resources: Mapping[str, int] = field(default_factory=dict)
