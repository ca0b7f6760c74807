"""The gang index: which pods form which gang, kept current one event at a time.

Feed it every pod event and every group-object event (raw JSON, as watches deliver them); ask it for
the gangs whose definition changed. One event marks at most the gangs it touches as dirty (the gang a
pod left, the gang it joined, the hierarchy an object is in), and only those are compiled again, so a
cluster with thousands of gangs does not re-read all of them when one pod changes.

How a pod finds its gang:

- PFN annotations, a 1.35 ``workloadRef`` and plain pods form gangs of their own (no hierarchy);
- a pod that names a group object (scheduler-plugins, Volcano, ``scheduling.k8s.io`` PodGroup) is a
  member of that object; the object may have a parent composite, which may have a parent, and so on.
  The gang is the whole tree, keyed by its root object. A missing object is the root of what hangs
  below it, and that gang waits for it.

Members are Phalanx's pods (``spec.schedulerName``) that have not finished and are not being deleted.
Compilation never raises: every problem is a :class:`GangError` value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.gangs.common import Context, Part, earliest, member_topology, topology
from scheduler.gangs.fields import SpecProblem
from scheduler.gangs.groups import GroupObject, Role
from scheduler.gangs.model import (
    GangError,
    GangKey,
    GangResult,
    GangSpec,
    ObjectRef,
    PodKey,
    Problem,
    Source,
    gang_key,
)
from scheduler.gangs.pfn import compile_pfn
from scheduler.gangs.pods import PodInfo, read_pod
from scheduler.gangs.settings import GangSettings
from scheduler.gangs.sources import ROOT_SOURCE, compiler, read_group
from scheduler.gangs.upstream import compile_workload_gang, composite_minimum, composite_topology
from topology import GangRequest

#: Deepest hierarchy accepted, counting the group that holds the pods (upstream's WorkloadMaxTreeDepth).
MAX_DEPTH = 4

_ROOT_KIND = {source: kind for kind, source in ROOT_SOURCE.items()}
#: Where each source states the size a gang needs (for the error of a gang over gangs.maxGangSize).
_SIZE_FIELDS = {
    Source.SCHEDULER_PLUGINS: "spec.minMember",
    Source.VOLCANO: "spec.minMember",
    Source.PODGROUP: "spec.schedulingPolicy.gang.minCount",
    Source.WORKLOAD: "spec.podGroups[].policy.gang.minCount",
    Source.COMPOSITE: "spec.schedulingPolicy.gang.minGroupCount",
    Source.PHALANX: "spec.schedulingPolicy.gang.minGroupCount",
}
_SIMPLE = (Source.PFN, Source.POD, Source.WORKLOAD)


@dataclass(frozen=True, slots=True)
class _Built:
    part: Part
    objects: tuple[GroupObject, ...]


class GangIndex:
    """Pods and group objects in; compiled gangs out. Not thread-safe: one owner applies events."""

    def __init__(self, settings: GangSettings | None = None) -> None:
        self.settings = settings or GangSettings()
        self._context = Context(self.settings)
        self._pods: dict[PodKey, PodInfo] = {}
        self._groups: dict[ObjectRef, GroupObject] = {}
        self._members: dict[ObjectRef, set[PodKey]] = {}  # group object -> member pods
        self._simple: dict[GangKey, set[PodKey]] = {}  # gangs without group objects -> member pods
        self._children: dict[ObjectRef, set[ObjectRef]] = {}  # parent composite -> child objects
        self._workload_gangs: dict[ObjectRef, set[GangKey]] = {}  # 1.35 Workload -> its gangs
        self._workload_users: dict[ObjectRef, set[ObjectRef]] = {}  # Workload -> objects made from it
        # Pods held by scheduling gates: not members, but counted (and named) by the gang they will join.
        self._gated: dict[GangKey | ObjectRef, dict[PodKey, tuple[str, ...]]] = {}
        self._gated_at: dict[PodKey, GangKey | ObjectRef] = {}
        self._results: dict[GangKey, GangResult] = {}
        self._gang_of: dict[PodKey, GangKey] = {}
        self._dirty: set[GangKey] = set()

    # -- events --------------------------------------------------------------------------------

    def upsert_pod(self, raw: Mapping[str, Any]) -> None:
        """Apply a pod's ADDED or MODIFIED event. O(1) unless its gang must be compiled again."""
        info = read_pod(raw, self.settings)
        if info is None:
            return
        old = self._pods.get(info.key)
        if old is not None and _same_for_gangs(old, info):
            self._pods[info.key] = info  # e.g. a status update: nothing a gang depends on changed
            return
        self._detach(info.key)
        if self._is_member(info):
            self._ungate(info.key)
            self._pods[info.key] = info
            self._attach(info)
        else:
            # Other schedulers' pods and finished ones belong to no gang: keep nothing of them (a large
            # cluster has far more of those than gang members).
            self._pods.pop(info.key, None)
            self._context.forget(info.key)
            if info.held_by_gates and info.scheduler in self.settings.scheduler_names:
                self._gate(info)
            else:
                self._ungate(info.key)

    def delete_pod(self, namespace: str, name: str) -> None:
        key = PodKey(f"{namespace}/{name}")
        self._detach(key)
        self._ungate(key)
        self._pods.pop(key, None)
        self._context.forget(key)

    def upsert_group(self, raw: Mapping[str, Any]) -> bool:
        """Apply an event of any group object; False when the object is no gang source's."""
        group = read_group(raw)
        if group is None:
            return False
        if group.kind.role is Role.PRIORITY_CLASS:
            value = group.raw.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                self._context.priority_classes[group.ref.name] = value
            self._dirty |= set(self._results)  # rare, and any gang may name the class
            return True
        self._dirty.add(self._root_key(group.ref))
        self._unlink(self._groups.get(group.ref))
        self._groups[group.ref] = group
        self._link(group)
        self._dirty.add(self._root_key(group.ref))
        return True

    def delete_group(self, raw: Mapping[str, Any]) -> bool:
        group = read_group(raw)
        if group is None:
            return False
        if group.kind.role is Role.PRIORITY_CLASS:
            self._context.priority_classes.pop(group.ref.name, None)
            self._dirty |= set(self._results)
            return True
        self._dirty.add(self._root_key(group.ref))
        self._unlink(self._groups.pop(group.ref, None))
        self._dirty.add(self._root_key(group.ref))
        return True

    # -- results -------------------------------------------------------------------------------

    def take_changed(self) -> set[GangKey]:
        """Compile the gangs that events touched; return the keys whose result changed or vanished."""
        changed: set[GangKey] = set()
        while self._dirty:
            key = self._dirty.pop()
            result = self._compile(key)
            old = self._results.get(key)
            if result is None:
                if self._results.pop(key, None) is not None:
                    changed.add(key)
                continue
            if result != old:
                self._results[key] = result
                changed.add(key)
            for pod in result.pods:
                self._gang_of[pod] = key
        return changed

    def get(self, key: GangKey) -> GangResult | None:
        return self._results.get(key)

    def results(self) -> Mapping[GangKey, GangResult]:
        """The current gangs (call :meth:`take_changed` first to include the latest events)."""
        return self._results

    def gang_of(self, pod: str) -> GangKey | None:
        return self._gang_of.get(PodKey(pod))

    def pod(self, key: str) -> PodInfo | None:
        return self._pods.get(PodKey(key))

    def group(self, ref: ObjectRef) -> GroupObject | None:
        """A group object as last seen (read-only)."""
        return self._groups.get(ref)

    # -- membership ----------------------------------------------------------------------------

    def _is_member(self, pod: PodInfo) -> bool:
        return pod.counts and pod.scheduler in self.settings.scheduler_names

    def _simple_key(self, pod: PodInfo) -> GangKey:
        membership = pod.membership
        if membership.source is Source.POD or membership.problem is not None:
            return gang_key(Source.POD, pod.namespace, pod.name)  # a malformed marker is the pod's own problem
        return gang_key(membership.source, pod.namespace, membership.leaf)

    def _key_of(self, pod: PodInfo) -> GangKey:
        membership = pod.membership
        if membership.source in _SIMPLE or membership.problem is not None or membership.group is None:
            return self._simple_key(pod)
        return self._root_key(membership.group)

    def _attach(self, pod: PodInfo) -> None:
        membership = pod.membership
        key = self._key_of(pod)
        if membership.source in _SIMPLE or membership.problem is not None or membership.group is None:
            self._simple.setdefault(key, set()).add(pod.key)
            if membership.source is Source.WORKLOAD and membership.group is not None:
                self._workload_gangs.setdefault(membership.group, set()).add(key)
        else:
            self._members.setdefault(membership.group, set()).add(pod.key)
        self._dirty.add(key)

    def _detach(self, key: PodKey) -> None:
        pod = self._pods.get(key)
        previous = self._gang_of.pop(key, None)
        if previous is not None:
            self._dirty.add(previous)
        if pod is None or not self._is_member(pod):
            return
        gang = self._key_of(pod)
        self._dirty.add(gang)
        membership = pod.membership
        if gang in self._simple:
            self._simple[gang].discard(key)
            if not self._simple[gang]:
                del self._simple[gang]
                if membership.source is Source.WORKLOAD and membership.group is not None:
                    self._workload_gangs.get(membership.group, set()).discard(gang)
        elif membership.group is not None and membership.group in self._members:
            self._members[membership.group].discard(key)
            if not self._members[membership.group]:
                del self._members[membership.group]

    def _gate(self, pod: PodInfo) -> None:
        """Count a gated pod for the gang it will join; a change of its gates or gang marks that gang."""
        membership = pod.membership
        simple = membership.source in _SIMPLE or membership.problem is not None or membership.group is None
        where: GangKey | ObjectRef = self._simple_key(pod) if simple else membership.group  # type: ignore[assignment]
        if self._gated_at.get(pod.key) == where and self._gated[where].get(pod.key) == pod.gates:
            return  # e.g. a status update of a pod that stays gated
        self._ungate(pod.key)
        self._gated.setdefault(where, {})[pod.key] = pod.gates
        self._gated_at[pod.key] = where
        self._dirty.add(where if isinstance(where, str) else self._root_key(where))

    def _ungate(self, key: PodKey) -> None:
        where = self._gated_at.pop(key, None)
        if where is None:
            return
        held = self._gated[where]
        del held[key]
        if not held:
            del self._gated[where]
        self._dirty.add(where if isinstance(where, str) else self._root_key(where))

    def _held(self, places: list[GangKey | ObjectRef]) -> tuple[int, tuple[str, ...]]:
        """Gated pods waiting to join these places (a gang key, or group objects), and their gates."""
        held = [gates for place in places for gates in self._gated.get(place, {}).values()]
        return len(held), tuple(sorted({gate for gates in held for gate in gates}))

    # -- hierarchy -----------------------------------------------------------------------------

    def _link(self, group: GroupObject) -> None:
        if group.parent is not None:
            self._children.setdefault(group.parent, set()).add(group.ref)
        if group.workload is not None:
            workload = ObjectRef(group.ref.group, "Workload", group.ref.namespace, group.workload)
            self._workload_users.setdefault(workload, set()).add(group.ref)
        if group.kind.role is Role.WORKLOAD:
            self._dirty |= self._workload_gangs.get(group.ref, set())
            self._dirty |= {self._root_key(user) for user in self._workload_users.get(group.ref, ())}

    def _unlink(self, group: GroupObject | None) -> None:
        if group is None:
            return
        if group.parent is not None and group.parent in self._children:
            self._children[group.parent].discard(group.ref)
            if not self._children[group.parent]:
                del self._children[group.parent]
        if group.workload is not None:
            workload = ObjectRef(group.ref.group, "Workload", group.ref.namespace, group.workload)
            self._workload_users.get(workload, set()).discard(group.ref)
        if group.kind.role is Role.WORKLOAD:
            self._dirty |= self._workload_gangs.get(group.ref, set())
            self._dirty |= {self._root_key(user) for user in self._workload_users.get(group.ref, ())}

    def _root(self, ref: ObjectRef) -> ObjectRef:
        """The top of ``ref``'s hierarchy; a cycle is represented by its smallest member."""
        path = [ref]
        while True:
            group = self._groups.get(path[-1])
            if group is None or group.parent is None:
                return path[-1]
            if group.parent in path:
                return min(path[path.index(group.parent) :])
            path.append(group.parent)

    def _root_key(self, ref: ObjectRef) -> GangKey:
        root = self._root(ref)
        source = ROOT_SOURCE.get((root.group, root.kind), Source.COMPOSITE)
        return gang_key(source, root.namespace, root.name)

    def _below(self, ref: ObjectRef) -> Iterator[ObjectRef]:
        """``ref`` and every object under it, each once (cycles included)."""
        seen = {ref}
        stack = [ref]
        while stack:
            current = stack.pop()
            yield current
            for child_ref in sorted(self._children.get(current, ()), reverse=True):
                if child_ref not in seen:
                    seen.add(child_ref)
                    stack.append(child_ref)

    # -- compilation ---------------------------------------------------------------------------

    def _compile(self, key: GangKey) -> GangResult | None:
        source_name, _, rest = key.partition(":")
        namespace, _, name = rest.partition("/")
        source = Source(source_name)
        if source in _SIMPLE or key in self._simple:
            pods = [self._pods[pod] for pod in sorted(self._simple.get(key, ()))]
            if not pods:
                return None  # nothing to schedule yet (its pods may all be gated: the API server says so)
            held = self._held([key])
            return self._guarded(key, pods, lambda: self._compile_simple(key, source, namespace, name, pods), held)
        group, kind = _ROOT_KIND[source]
        root = ObjectRef(group, kind, namespace, name)
        if self._root(root) != root:
            return None  # the object has a parent now: its pods belong to the gang above it
        below = list(self._below(root))
        pods = [self._pods[pod] for ref in below for pod in sorted(self._members.get(ref, ()))]
        if not pods:
            return None
        held = self._held(list(below))
        return self._guarded(key, pods, lambda: self._compile_tree(key, source, root, pods), held)

    def _guarded(
        self, key: GangKey, pods: list[PodInfo], build: Any, held: tuple[int, tuple[str, ...]] = (0, ())
    ) -> GangResult:
        keys = tuple(pod.key for pod in pods)
        try:
            result: GangResult = build()
            if isinstance(result, GangSpec):
                self._check_size(result, pods)
                if held[0]:
                    result = replace(result, gated=held[0], gates=held[1])
            return result
        except SpecProblem as problem:
            return GangError(
                key=key,
                problem=problem.problem,
                pods=keys,
                subject=problem.subject,
                field=problem.field,
                value=problem.value,
                message=problem.message,
            )
        except Exception as error:  # a bug must not stop every other gang: report it on this one
            return GangError(
                key=key,
                problem=Problem.INVALID,
                pods=keys,
                subject=pods[0].ref,
                field="",
                value=None,
                message=f"Phalanx could not read this gang ({type(error).__name__}: {error}); this is a bug in Phalanx",
            )

    def _check_size(self, spec: GangSpec, pods: list[PodInfo]) -> None:
        """A gang needing more pods together than ``gangs.maxGangSize`` is invalid: it names the field."""
        limit = self.settings.max_gang_size
        needed = max((part.min_pods for part in spec.request.walk()), default=0)
        needed = max(needed, spec.request.minimum_pods())
        if needed <= limit:
            return
        if spec.source is Source.PFN:
            subject, field = pods[0].ref, f"metadata.annotations[{self.settings.annotation_prefix}-size]"
        else:
            subject, field = (spec.objects[0] if spec.objects else pods[0].ref), _SIZE_FIELDS.get(spec.source, "")
        raise SpecProblem(
            subject,
            field,
            needed,
            f"the gang needs {needed} pods together, more than gangs.maxGangSize ({limit}) allows; "
            "lower it, or raise gangs.maxGangSize in Phalanx's configuration",
        )

    def _warnings(self, key: GangKey, pods: list[PodInfo]) -> tuple[str, ...]:
        return tuple(
            f"pod {pod.key} also carries {marker}; it is ignored, the pod belongs to {key}"
            for pod in pods
            for marker in pod.ignored_markers
        )

    def _compile_simple(
        self, key: GangKey, source: Source, namespace: str, name: str, pods: list[PodInfo]
    ) -> GangResult:
        problem = pods[0].membership.problem
        if problem is not None:
            raise problem
        if source is Source.PFN:
            spec = compile_pfn(key, namespace, name, pods, self._context)
            return replace(spec, warnings=self._warnings(key, pods))
        if source is Source.WORKLOAD:
            workload_ref = pods[0].membership.group
            assert workload_ref is not None
            workload = self._groups.get(workload_ref)
            if workload is None:
                raise SpecProblem(
                    pods[0].ref,
                    "spec.workloadRef.name",
                    workload_ref.name,
                    f"{workload_ref} does not exist yet; the pods wait for it",
                    problem=Problem.WAITING,
                )
            pod_group = name.split("/")[1]
            part = compile_workload_gang(name, workload, pods, self._context, pod_group)
            return self._spec(key, source, part, pods, (workload,))
        pod = pods[0]
        on_pod_required, on_pod_preferred = member_topology(pods)
        required, preferred = topology(pod.ref, required=on_pod_required, preferred=on_pod_preferred)
        request = GangRequest.leaf(
            f"{namespace}/{name}", self._context.members(pods), min_pods=1, required=required, preferred=preferred
        )
        part = Part(request=request, priority=pod.priority, timeout=self._context.timeout())
        return self._spec(key, source, part, pods, ())

    def _compile_tree(self, key: GangKey, source: Source, root: ObjectRef, pods: list[PodInfo]) -> GangResult:
        built = self._build(root, depth=1, path=())
        workloads = sorted({group.workload for group in built.objects if group.workload is not None})
        if len(workloads) > 1:
            offender = next(group for group in built.objects if group.workload == workloads[1])
            raise SpecProblem(
                offender.ref,
                "spec.workloadRef.workloadName",
                workloads[1],
                f"the hierarchy under {root} also uses Workload {workloads[0]!r}; "
                "one hierarchy belongs to one Workload",
            )
        return self._spec(key, source, built.part, pods, built.objects)

    def _spec(
        self, key: GangKey, source: Source, part: Part, pods: list[PodInfo], objects: tuple[GroupObject, ...]
    ) -> GangSpec:
        return GangSpec(
            key=key,
            source=source,
            request=part.request,
            priority=part.priority,
            created=earliest(*(pod.created for pod in pods), *(group.created for group in objects)),
            timeout=part.timeout,
            objects=tuple(group.ref for group in objects),
            min_resources=part.min_resources,
            warnings=self._warnings(key, pods),
        )

    def _build(self, ref: ObjectRef, *, depth: int, path: tuple[ObjectRef, ...]) -> _Built:
        if ref in path:
            cycle = " -> ".join(str(item) for item in (*path[path.index(ref) :], ref))
            raise SpecProblem(
                ref, "spec.parentCompositePodGroupName", path[-1].name, f"the parents form a cycle: {cycle}"
            )
        group = self._groups.get(ref)
        if group is None:
            referrer = self._referrer(ref)
            raise SpecProblem(
                referrer, "", None, f"{ref} does not exist yet; this gang waits for it", problem=Problem.WAITING
            )
        if group.problem is not None:
            raise group.problem
        if depth > MAX_DEPTH:
            raise SpecProblem(
                ref,
                "spec.parentCompositePodGroupName",
                group.parent.name if group.parent else None,
                f"the hierarchy is deeper than {MAX_DEPTH} levels ({' > '.join(str(item) for item in (*path, ref))})",
            )
        if group.kind.role is Role.COMPOSITE:
            return self._build_composite(group, depth=depth, path=(*path, ref))
        pods = [self._pods[pod] for pod in sorted(self._members.get(ref, ()))]
        return _Built(self._compile_leaf(group, pods), (group,))

    def _build_composite(self, group: GroupObject, *, depth: int, path: tuple[ObjectRef, ...]) -> _Built:
        children = [self._build(ref, depth=depth + 1, path=path) for ref in sorted(self._children.get(group.ref, ()))]
        minimum = composite_minimum(group)
        if minimum > self.settings.max_gang_size:  # each child group holds at least one pod
            raise SpecProblem(
                group.ref,
                "spec.schedulingPolicy.gang.minGroupCount",
                minimum,
                f"the gang needs at least {minimum} pods together, more than gangs.maxGangSize "
                f"({self.settings.max_gang_size}) allows; lower it, or raise gangs.maxGangSize in Phalanx's "
                "configuration",
            )
        if minimum > len(children):
            raise SpecProblem(
                group.ref,
                "spec.schedulingPolicy.gang.minGroupCount",
                minimum,
                f"only {len(children)} child group(s) exist yet; the gang waits for the others",
                problem=Problem.WAITING,
            )
        required, preferred = composite_topology(group)
        requests = _distinct_keys([child.part.request for child in children], [child.objects[0] for child in children])
        request = GangRequest.group(
            f"{group.ref.namespace}/{group.ref.name}",
            requests,
            min_children=minimum,
            required=required,
            preferred=preferred,
        )
        member_pods = [self._pods[pod] for ref in self._below(group.ref) for pod in sorted(self._members.get(ref, ()))]
        has_priority = group.spec.get("priority") is not None or group.spec.get("priorityClassName")
        priority = (
            self._context.priority(group.ref, group.spec, member_pods)
            if has_priority
            else max((child.part.priority for child in children), default=0)
        )
        timeouts = [child.part.timeout for child in children]
        part = Part(
            request=request,
            priority=priority,
            timeout=min(timeouts, key=lambda timeout: timeout.seconds) if timeouts else self._context.timeout(),
        )
        objects = (group, *(item for child in children for item in child.objects))
        return _Built(part, objects)

    def _compile_leaf(self, group: GroupObject, pods: list[PodInfo]) -> Part:
        assert group.kind.source is not None
        return compiler(group.kind.source)(group, pods, self._context, self._groups)

    def _referrer(self, missing_ref: ObjectRef) -> ObjectRef:
        """Who points at a missing object: a member pod or a child object (for the Event's subject)."""
        members = sorted(self._members.get(missing_ref, ()))
        if members:
            return self._pods[members[0]].ref
        children = sorted(self._children.get(missing_ref, ()))
        return children[0] if children else missing_ref


def _same_for_gangs(old: PodInfo, new: PodInfo) -> bool:
    """Whether a pod update leaves everything a gang is compiled from unchanged."""
    return (
        old.scheduler == new.scheduler
        and old.counts == new.counts
        and old.membership == new.membership
        and old.node == new.node
        and old.priority == new.priority
        and old.labels == new.labels
        and old.annotations == new.annotations
        and old.raw.get("spec") == new.raw.get("spec")
    )


def _distinct_keys(requests: list[GangRequest], objects: list[GroupObject]) -> list[GangRequest]:
    """Children of one composite may be objects of different kinds with the same name; tell them apart."""
    counts: dict[str, int] = {}
    for request in requests:
        counts[request.key] = counts.get(request.key, 0) + 1
    return [
        replace(request, key=f"{request.key} ({group.ref.kind}.{group.ref.group})")
        if counts[request.key] > 1
        else request
        for request, group in zip(requests, objects, strict=True)
    ]
