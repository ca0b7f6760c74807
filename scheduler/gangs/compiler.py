"""The gang compiler: what a gang's objects and pods say, as a :class:`GangSpec` or a :class:`GangError`.

It reads the membership index (who belongs to which gang, the hierarchy of group objects) and turns
one gang at a time into its request tree, through the compilers each source registers in
``sources.py``. Compilation never raises: every problem is a :class:`GangError` value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from scheduler.gangs.common import Context, Part, earliest, member_topology, topology
from scheduler.gangs.fields import SpecProblem
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.groups import GroupObject, Role
from scheduler.gangs.membership import SIMPLE, MembershipIndex
from scheduler.gangs.model import GangError, GangKey, GangResult, GangSpec, ObjectRef, Problem, Source
from scheduler.gangs.pfn import compile_pfn
from scheduler.gangs.pods import PodInfo
from scheduler.gangs.sources import ROOT_SOURCE, compiler
from scheduler.gangs.upstream import compile_workload_gang, composite_minimum, composite_topology
from topology import HOSTNAME, GangRequest

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


@dataclass(frozen=True, slots=True)
class _Built:
    part: Part
    objects: tuple[GroupObject, ...]


class GangCompiler:
    """Compiles gangs from what a :class:`MembershipIndex` knows; keeps nothing of its own."""

    def __init__(self, index: MembershipIndex, settings: GangSettings, context: Context) -> None:
        self.index = index
        self.settings = settings
        self.context = context

    def compile(self, key: GangKey) -> GangResult | None:
        """The gang ``key`` as its objects and pods say now; None when it has no member to schedule."""
        source_name, _, rest = key.partition(":")
        namespace, _, name = rest.partition("/")
        source = Source(source_name)
        if source in SIMPLE or self.index.is_simple(key):
            pods = self.index.simple_pods(key)
            if not pods:
                return None  # nothing to schedule yet (its pods may all be gated: the API server says so)
            held = self.index.held([key])
            return self._guarded(key, pods, lambda: self._compile_simple(key, source, namespace, name, pods), held)
        group, kind = _ROOT_KIND[source]
        root = ObjectRef(group, kind, namespace, name)
        if self.index.root(root) != root:
            return None  # the object has a parent now: its pods belong to the gang above it
        below = list(self.index.below(root))
        pods = [pod for ref in below for pod in self.index.member_pods(ref)]
        if not pods:
            return None
        held = self.index.held(list(below))
        return self._guarded(key, pods, lambda: self._compile_tree(key, source, root, pods), held)

    def _waiting_minimum(self, build: Any) -> int | None:
        """The minimum of a gang whose members wait (a claim not made, a class not there): compiled once more
        with those members standing in, so that what it needs can be said while it waits."""
        self.context.stand_in_waiting = True
        try:
            result = build()
        except Exception:  # (a bug here must not stop every other gang: the minimum is only said, not used)
            return None
        finally:
            self.context.stand_in_waiting = False
        return result.request.minimum_pods() if isinstance(result, GangSpec) else None

    def _guarded(
        self, key: GangKey, pods: list[PodInfo], build: Any, held: tuple[int, tuple[str, ...]] = (0, ())
    ) -> GangResult:
        keys = tuple(pod.key for pod in pods)
        try:
            result: GangResult = build()
            if isinstance(result, GangSpec):
                together = self._together(result.request, pods)
                if together is not result.request:
                    result = replace(result, request=together)
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
                minimum=self._waiting_minimum(build) if problem.problem is Problem.WAITING else None,
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

    def _together(self, part: GangRequest, pods: list[PodInfo]) -> GangRequest:
        """Keep on one node the pods of a leaf that must share one (a claim of devices they share and nobody
        has allocated: ``ResourceKind.together``). Pods that share one with pods outside their leaf cannot
        be kept together by placement: an error that says so."""
        if not any((pod.raw.get("spec") or {}).get("resourceClaims") for pod in pods):
            return part  # most gangs: nothing to share
        return self._kept_together(part, {pod.key: pod for pod in pods})

    def _kept_together(self, part: GangRequest, pods: dict[str, PodInfo]) -> GangRequest:
        if not part.is_leaf:
            children = tuple(self._kept_together(child, pods) for child in part.children)
            same = all(new is old for new, old in zip(children, part.children, strict=True))
            return part if same else replace(part, children=children)
        shared: dict[str, tuple[int, list[PodInfo]]] = {}
        for member in part.pods:
            pod = pods.get(member.key)
            if pod is None or member.node is not None:
                continue
            for kind in self.context.kinds:
                for what, sharing in kind.together(pod.raw):
                    shared.setdefault(what, (sharing, []))[1].append(pod)
        for what, (sharing, here) in shared.items():
            if len(here) < sharing:
                raise SpecProblem(
                    here[0].ref,
                    "spec.resourceClaims",
                    what,
                    f"{what} is shared with {sharing - len(here)} pod(s) outside this part of the gang; Phalanx "
                    "places the pods of a claim nobody has allocated yet together only when they are one part "
                    "of one gang: put them in one, or leave this pod to another scheduler",
                )
        return replace(part, required=HOSTNAME) if shared else part

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
            spec = compile_pfn(key, namespace, name, pods, self.context)
            return replace(spec, warnings=self._warnings(key, pods))
        if source is Source.WORKLOAD:
            workload_ref = pods[0].membership.group
            assert workload_ref is not None
            workload = self.index.group(workload_ref)
            if workload is None:
                raise SpecProblem(
                    pods[0].ref,
                    "spec.workloadRef.name",
                    workload_ref.name,
                    f"{workload_ref} does not exist yet; the pods wait for it",
                    problem=Problem.WAITING,
                )
            pod_group = name.split("/")[1]
            part = compile_workload_gang(name, workload, pods, self.context, pod_group)
            return self._spec(key, source, part, pods, (workload,))
        pod = pods[0]
        on_pod_required, on_pod_preferred = member_topology(pods)
        required, preferred = topology(pod.ref, required=on_pod_required, preferred=on_pod_preferred)
        request = GangRequest.leaf(
            f"{namespace}/{name}", self.context.members(pods), min_pods=1, required=required, preferred=preferred
        )
        part = Part(request=request, priority=pod.priority, timeout=self.context.timeout())
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
        group = self.index.group(ref)
        if group is None:
            referrer = self.index.referrer(ref)
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
        pods = self.index.member_pods(ref)
        return _Built(self._compile_leaf(group, pods), (group,))

    def _build_composite(self, group: GroupObject, *, depth: int, path: tuple[ObjectRef, ...]) -> _Built:
        children = [self._build(ref, depth=depth + 1, path=path) for ref in self.index.children(group.ref)]
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
        member_pods = [pod for ref in self.index.below(group.ref) for pod in self.index.member_pods(ref)]
        has_priority = group.spec.get("priority") is not None or group.spec.get("priorityClassName")
        priority = (
            self.context.priority(group.ref, group.spec, member_pods)
            if has_priority
            else max((child.part.priority for child in children), default=0)
        )
        timeouts = [child.part.timeout for child in children]
        part = Part(
            request=request,
            priority=priority,
            timeout=min(timeouts, key=lambda timeout: timeout.seconds) if timeouts else self.context.timeout(),
        )
        objects = (group, *(item for child in children for item in child.objects))
        return _Built(part, objects)

    def _compile_leaf(self, group: GroupObject, pods: list[PodInfo]) -> Part:
        assert group.kind.source is not None
        return compiler(group.kind.source)(group, pods, self.context, self.index.groups)


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
