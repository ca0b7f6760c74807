"""The invariants every chaos test, the soak and the benchmarks check: one monitor on a SimCluster store.

It sees every change as the store makes it (``Store.observe``), so it checks each moment the API could
show, not only the end of a run:

- at every bind, the node's bound requests plus what the schedulers still assume there (pods reserved
  but not yet bound) stay within its allocatable, for every resource. Pods bound by others count too: a
  scenario that binds pods itself while Phalanx runs must let Phalanx see them before it may use that
  room (a scheduler deciding from its cache cannot know of a bind it has not been shown), and a violation
  names the pods bound by others that the Phalanx which bound had not seen when its bind landed;
- no pod is bound twice or moved to a second node, and no pod of another scheduler is bound;
- whenever asked (:meth:`check_gangs`, at quiet moments): no gang is bound below its minimum, except
  gangs whose members the test deleted itself (:meth:`user_deleted`) or that had members on a node
  that was deleted, or bound to it after its deletion (a bind that raced it);
- at every preemption (a victim's ``DisruptionTarget`` condition): the victim's priority (its gang's, if
  it is in one) is strictly below its preemptor's; a gang left partly running by a preemption is caught by
  the gang check below (pods being deleted are no members);
- at every bind of ours: room nominated for a pending pod of a higher-priority gang on that node (its
  ``status.nominatedNodeName``) is still there, counting pods already terminating (or marked
  ``DisruptionTarget`` by a preemption) as gone, unless that pod's scheduler has placed it already;
- :meth:`conditions_stale`: every pending pod of ours carries a ``PodScheduled=False`` condition whose
  message is the scheduler's latest decision for it;
- :meth:`feasible_pending`: liveness, the pending pods one fresh scheduling pass over the same objects
  would bind; once faults stop this must become empty.

Violations are collected, not raised, so that a soak can count them; :meth:`assert_clean` raises.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.app import Phalanx
from scheduler.devices.claims import PodClaim, pod_claims, pod_group, read_claim
from scheduler.gangs import GangIndex, GangKey, GangSettings, GangSpec
from scheduler.gangs.groups import Role
from scheduler.gangs.model import PodKey
from scheduler.gangs.pods import FINISHED_PHASES
from scheduler.gangs.sources import SOURCES
from scheduler.ports.sim.store import Obj, Store
from scheduler.settings import Settings
from scheduler.simulation.device_checks import DeviceChecks, unattached
from scheduler.simulation.driver import Simulation
from topology import node_record, pod_demand
from topology.quantities import DEVICES

PODS = ("", "pods")
NODES = ("", "nodes")
SLICES = ("resource.k8s.io", "resourceslices")
#: Kinds of the gang sources' group objects (from the sources' table).
GROUP_KINDS = frozenset(api.kind for api in SOURCES if api.role is not Role.PRIORITY_CLASS)


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _node_of(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    node = (obj.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) and node else None


def _disruption(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's ``DisruptionTarget`` condition set by a scheduler's preemption, or an empty dict."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("reason") == "PreemptionByScheduler":
            return dict(condition)
    return {}


def _counts(obj: Mapping[str, Any]) -> bool:
    """Whether a bound pod still takes room on its node."""
    return (obj.get("status") or {}).get("phase") not in FINISHED_PHASES


@dataclass
class InvariantMonitor:
    """Attach to a store before anything schedules on it; see the module docstring."""

    store: Store
    scheduler_names: tuple[str, ...] = ("phalanx",)
    gang_settings: GangSettings = field(default_factory=GangSettings)
    apps: list[Phalanx] = field(default_factory=list)  # whose assumptions count as taken room
    violations: list[str] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._allocatable: dict[str, dict[str, int]] = {}
        self._used: dict[str, Counter[str]] = {}
        self._bound: dict[str, tuple[str, str, dict[str, int]]] = {}  # pod -> (uid, node, requests)
        self._ever_bound: dict[str, str] = {}  # uid -> node
        self._ours_on: Counter[str] = Counter()  # node -> pods we bound there that still take room
        self._theirs: set[str] = set()  # bound pods, taking room, that no scheduler of ours bound
        self._exempt: set[GangKey] = set()
        self._others_may_bind: set[str] = set()
        self._seen: set[str] = set()
        self._nominated: dict[str, dict[str, dict[str, int]]] = {}  # node -> pending pod -> its requests
        self._terminating: set[str] = set()
        self._priority: dict[str, int] = {}  # pod -> spec.priority
        self.index = GangIndex(self.gang_settings)
        self.devices = DeviceChecks()
        for resource in self.store.catalog.resources:
            if resource.storage == SLICES:
                for obj in self.store.objects(resource):
                    self.devices.slice_changed("ADDED", obj)
        for node in self.store.objects(self.store.resource("v1", "Node")):
            self._node(node, deleted=False)
        for pod in self.store.objects(self.store.resource("v1", "Pod")):
            self._pod(pod, None, deleted=False)
        for resource in self.store.catalog.resources:
            if resource.kind in GROUP_KINDS:
                for obj in self.store.objects(resource):
                    self.index.upsert_group(obj)
        self.store.observe(self._observe)

    # -- what tests tell the monitor ------------------------------------------------------------

    def user_deleted(self, pod: str) -> None:
        """The test is about to delete this pod itself: its gang may end below its minimum."""
        self.index.take_changed()
        gang = self.index.gang_of(PodKey(pod))
        if gang is not None:
            self._exempt.add(gang)

    def others_may_bind(self, pod: str) -> None:
        """Another scheduler will bind this pod (it is not Phalanx's doing)."""
        self._others_may_bind.add(pod)

    # -- the checks ------------------------------------------------------------------------------

    def check_gangs(self) -> list[str]:
        """Gangs bound below their minimum right now (call at quiet moments: a gang is bound one call at
        a time, so mid-bind it is legitimately partial). Found ones are also recorded as violations."""
        self.index.take_changed()
        found = []
        self.checks["gang minimum"] += 1
        for key, result in self.index.results().items():
            if not isinstance(result, GangSpec) or key in self._exempt:
                continue
            for part in result.request.walk():
                bound = sum(1 for member in part.members() if member.node)
                if part.is_leaf and bound and bound < part.min_pods:
                    found.append(f"gang {key}: part {part.key} has {bound} bound, below its minimum {part.min_pods}")
        for what in found:
            self._violate(what)
        return found

    def conditions_stale(self, app: Phalanx) -> list[str]:
        """Pending pods of ours whose ``PodScheduled`` condition is missing or not ``app``'s latest word."""
        stale = []
        for pod in self.store.objects(self.store.resource("v1", "Pod")):
            if not self._ours_pending(pod):
                continue
            key = _key(pod)
            why = app.reporter.why_pending(key)
            conditions = (pod.get("status") or {}).get("conditions") or []
            shown = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
            if why is None or shown is None or shown.get("status") != "False" or shown.get("message") != why[1]:
                stale.append(key)
        return stale

    async def feasible_pending(self, settings: Settings) -> set[str]:
        """Pending pods of ours that one fresh pass of the scheduler over the same objects would bind."""
        simulation = Simulation(settings, kubelets=False)
        simulation.add_nodes(self.store.objects(self.store.resource("v1", "Node")))
        objects: list[Obj] = [
            obj
            for resource in self.store.catalog.resources
            if resource.kind == "Pod" or resource.kind in GROUP_KINDS
            for obj in self.store.objects(resource)
            if not obj["metadata"].get("deletionTimestamp")
        ]
        objects.sort(
            key=lambda obj: (obj["metadata"].get("creationTimestamp") or "", int(obj["metadata"]["resourceVersion"]))
        )
        pending = {_key(obj) for obj in objects if obj.get("kind") == "Pod" and self._ours_pending(obj)}
        simulation.add_objects(objects, default_scheduler=False)
        report = await simulation.run(advance_time=False)
        self.checks["liveness"] += 1
        return pending & set(report.bound)

    def _violate(self, what: str) -> None:
        if what not in self._seen:
            self._seen.add(what)
            self.violations.append(what)

    def assert_clean(self) -> None:
        assert not self.violations, "invariants violated:\n" + "\n".join(self.violations[:20])

    # -- watching every change -------------------------------------------------------------------

    def _ours_pending(self, pod: Mapping[str, Any]) -> bool:
        return (
            (pod.get("spec") or {}).get("schedulerName") in self.scheduler_names
            and _node_of(pod) is None
            and _counts(pod)
            and not pod["metadata"].get("deletionTimestamp")
        )

    def _observe(self, storage: tuple[str, str], kind: str, obj: Obj, previous: Obj | None) -> None:
        deleted = kind == "DELETED"
        if storage == PODS:
            self._pod(obj, previous, deleted=deleted)
        elif storage == NODES:
            self._node(obj, deleted=deleted)
        elif storage == SLICES:
            self.devices.slice_changed(kind, obj)
        elif obj.get("kind") in GROUP_KINDS:
            self._group(obj, previous, deleted=deleted)

    def _group(self, group: Obj, previous: Obj | None, *, deleted: bool) -> None:
        """A user who changes a group's spec (say, raises its minimum) or deletes it under running pods
        changes what "whole" means; that gang's minimum is theirs to answer for, not Phalanx's."""
        by_user = deleted or (previous is not None and group.get("spec") != previous.get("spec"))
        if by_user:
            self.index.take_changed()  # settle earlier changes, so that what changes next is this group's
        if deleted:
            self.index.delete_group(group)
        else:
            self.index.upsert_group(group)
        if by_user:
            self._exempt |= self.index.take_changed()

    def _node(self, node: Mapping[str, Any], *, deleted: bool) -> None:
        name = node["metadata"]["name"]
        if deleted:
            # Losing a node is never Phalanx's doing: gangs with members bound or being bound there may
            # end below their minimum (as they would if the machine died an hour later).
            self._allocatable.pop(name, None)
            there = {pod for pod, (_, bound_to, _) in self._bound.items() if bound_to == name}
            there |= {pod for app in self.apps for pod, held in app.state.assumed.items() if held.node == name}
            for pod in there:
                self.user_deleted(pod)
        else:
            self._allocatable[name] = dict(node_record(node).allocatable)

    def _pod(self, pod: Obj, previous: Obj | None, *, deleted: bool) -> None:
        key = _key(pod)
        if not deleted and _disruption(pod) and not (previous is not None and _disruption(previous)):
            self._preempted(key, pod)
        if deleted:
            self.index.delete_pod(pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        else:
            self.index.upsert_pod(pod)
        self._track_nomination(key, pod, deleted=deleted)
        was_theirs = key in self._theirs
        self._release(key)
        node = _node_of(pod)
        if node is None or deleted:
            return
        uid = str(pod["metadata"].get("uid", key))
        newly_bound = previous is not None and _node_of(previous) is None
        ours = (pod.get("spec") or {}).get("schedulerName") in self.scheduler_names
        if newly_bound:
            self.checks["bind"] += 1
            if ours and node not in self._allocatable:
                # A bind that raced the node's deletion: placed before the scheduler's watch showed the node
                # gone (the API server binds to a node that is not there, as a real one does), so that the
                # rest of its gang stays unbound. Losing the node is not the scheduler's doing: its gang may
                # end below its minimum, as when the node is lost just after (``_node``).
                self.user_deleted(key)
            if uid in self._ever_bound:
                self._violate(f"pod {key} bound twice: to {self._ever_bound[uid]} and to {node}")
            if not ours and key not in self._others_may_bind:
                self._violate(f"pod {key} of scheduler {(pod.get('spec') or {}).get('schedulerName')} was bound")
        elif previous is not None and _node_of(previous) not in (None, node):
            self._violate(f"pod {key} moved from {_node_of(previous)} to {node}")
        self._ever_bound.setdefault(uid, node)
        if not _counts(pod):
            return
        requests = pod_demand(pod)
        extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
        if extended:  # KEP-5004: devices serve these, counted by the claim (``_check_claims``), not the node
            served = {str(mapping.get("resourceName")) for mapping in extended.get("requestMappings") or []}
            requests = {name: amount for name, amount in requests.items() if name not in served}
        self._bound[key] = (uid, node, requests)
        self._used.setdefault(node, Counter()).update(requests)
        if ours:
            self._ours_on[node] += 1
        if (newly_bound and not ours) or previous is None or was_theirs:  # bound by another scheduler, or created bound
            self._theirs.add(key)
        if newly_bound and ours:
            self._check_node(node, requests, bound=key)
            self._check_nominated(key, node, requests)
            if (pod.get("spec") or {}).get("resourceClaims") or extended:
                self._check_claims(key, pod, node)

    def _gang_priority(self, pod: str) -> int:
        self.index.take_changed()
        gang = self.index.gang_of(PodKey(pod))
        result = self.index.get(gang) if gang is not None else None
        return result.priority if isinstance(result, GangSpec) else self._priority.get(pod, 0)

    def _preempted(self, victim: str, pod: Obj) -> None:
        self.checks["preemption"] += 1
        message = str(_disruption(pod).get("message", ""))
        found = re.search(r"preempted by gang (\S+)", message)
        if found is None:
            self._violate(f"pod {victim}: DisruptionTarget names no preemptor: {message!r}")
            return
        self.index.take_changed()
        preemptor = self.index.get(GangKey(found.group(1)))
        if not isinstance(preemptor, GangSpec):
            return  # the preemptor is gone or invalid already; nothing to compare with
        mine = self._gang_priority(victim)
        if mine >= preemptor.priority:
            self._violate(
                f"pod {victim} (priority {mine}) preempted by gang {preemptor.key} of priority {preemptor.priority}"
            )

    def _track_nomination(self, key: str, pod: Obj, *, deleted: bool) -> None:
        self._priority[key] = int((pod.get("spec") or {}).get("priority") or 0)
        if (pod["metadata"].get("deletionTimestamp") or _disruption(pod)) and not deleted:
            self._terminating.add(key)  # going: terminating, or marked by a preemption that deletes it next
        else:
            self._terminating.discard(key)
        for waiting in self._nominated.values():
            waiting.pop(key, None)
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if not deleted and node and _node_of(pod) is None and _counts(pod):
            self._nominated.setdefault(str(node), {})[key] = pod_demand(pod)
        if deleted:
            self._priority.pop(key, None)

    def _check_nominated(self, pod: str, node: str, requests: Mapping[str, int]) -> None:
        """A bind on ``node`` leaves room for the pods nominated there by gangs of higher priority."""
        waiting = self._nominated.get(node)
        if not waiting:
            return
        self.checks["nominated room"] += 1
        mine = self._gang_priority(pod)
        gang = self.index.gang_of(PodKey(pod))
        # A nominated pod its scheduler has placed (it is being bound, perhaps elsewhere) needs that room
        # no more: where it goes is counted by the capacity check.
        placing = {other for app in self.apps for other in app.state.assumed}
        higher = {
            other: wanted
            for other, wanted in waiting.items()
            if other not in placing and self._gang_priority(other) > mine and self.index.gang_of(PodKey(other)) != gang
        }
        if not higher:
            return
        used: Counter[str] = Counter()
        for other, (_, where, taken) in self._bound.items():
            if where == node and other not in self._terminating:
                used.update(taken)
        for wanted in higher.values():
            used.update(wanted)
        allocatable = self._allocatable.get(node, {})
        # Only what the pod itself asks for can it have taken (a victim not gone yet overfills the node anyway).
        over = [name for name, amount in used.items() if amount > allocatable.get(name, 0) and requests.get(name, 0)]
        if over:
            self._violate(
                f"pod {pod} (priority {mine}) bound to {node} in room nominated for {', '.join(sorted(higher))}"
            )

    def _release(self, key: str) -> None:
        held = self._bound.pop(key, None)
        if held is None:
            return
        _, node, requests = held
        self._theirs.discard(key)
        self._used[node].subtract(requests)
        if self._ours_on[node]:
            self._ours_on[node] -= 1

    def _check_node(self, node: str, asked: Mapping[str, int] | None = None, *, bound: str | None = None) -> None:
        """At a bind of ours (of the pod ``bound``): bound plus still-assumed requests against allocatable, in
        what the bound pod asks for (``asked``; every resource when None): a pod that asks nothing of a resource
        another scheduler over-committed has not taken that room."""
        self.checks["node capacity"] += 1
        allocatable = self._allocatable.get(node)
        if allocatable is None:
            return  # bound to a node that is gone: the API would not run it, and holds no room for it
        taken = Counter(self._used.get(node, Counter()))
        for app in self.apps:
            for pod, assumption in app.state.assumed.items():
                if assumption.node == node and pod not in self._bound:
                    taken.update(assumption.requests)
        # Devices are counted by the claims themselves (``_check_claims``), not against the node object.
        over = {
            name: amount
            for name, amount in taken.items()
            if amount > allocatable.get(name, 0)
            and not name.startswith(DEVICES)
            and (asked is None or asked.get(name, 0) > 0)
        }
        if over:
            detail = ", ".join(f"{name} {amount} > {allocatable.get(name, 0)}" for name, amount in sorted(over.items()))
            unseen = self._unseen_there(node, over, bound)
            if unseen:
                detail += f" (with pods bound by others that Phalanx had not seen when this bind landed: {unseen})"
            self._violate(f"node {node} over-committed: {detail}")

    def _unseen_there(self, node: str, over: Mapping[str, int], bound: str | None) -> str:
        """Pods bound by others on ``node``, taking some of what is over-committed, that the Phalanx which bound
        ``bound`` (every one attached, when not known) had not seen there: a scheduler deciding from its cache
        cannot know of them, so the test that bound them is to be mended, not the scheduler."""
        binders = [app for app in self.apps if bound in app.state.assumed] or self.apps
        return ", ".join(
            sorted(
                pod
                for pod in self._theirs
                if self._bound[pod][1] == node
                and any(self._bound[pod][2].get(name, 0) for name in over)
                and any(app.state.bound_node(pod) != node for app in binders)
            )
        )

    def _check_claims(self, key: str, pod: Obj, node: str) -> None:
        """At a bind of ours of a pod that claims devices: each claim is allocated, on this node, and reserved
        for this pod or its PodGroup (as the kubelet accepts); and no device is allocated to two claims."""
        self.checks["devices"] += 1
        namespace, uid = key.split("/", 1)[0], (pod.get("metadata") or {}).get("uid")
        group = (pod_group(pod) or "/").split("/", 1)[1]
        resource = self.store.resource("resource.k8s.io/v1", "ResourceClaim")
        claims = {
            obj["metadata"]["name"]: obj
            for obj in self.store.objects(resource)
            if obj["metadata"].get("namespace") == namespace
        }
        extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        for named in (*pod_claims(pod), *((PodClaim("extended resources", str(extended), None),) if extended else ())):
            claim = claims.get(named.claim or "")
            status = (claim or {}).get("status") or {}
            if not status.get("allocation"):
                self._violate(f"pod {key} bound to {node} with its claim {named.name} not allocated")
                continue
            if not any(_consumes(owner, uid, group) for owner in status.get("reservedFor") or []):
                self._violate(f"pod {key} bound with claim {named.claim} not reserved for it")
            allocated_on = read_claim(claim or {}).node
            if allocated_on not in (None, node):
                self._violate(f"pod {key} bound to {node}, its claim {named.claim} allocated on {allocated_on}")
            for device in unattached(claim or {}):
                self._violate(f"pod {key} bound before device {device} of its claim {named.claim} reported its "
                              "binding conditions True")  # fmt: skip
        for problem in self.devices.allocations(self.store.objects(resource)):
            self._violate(problem)

    def check_nodes(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Nodes where we bound pods whose bound plus assumed requests now exceed allocatable."""
        before = len(self.violations)
        for node in list(nodes if nodes is not None else self._ours_on):
            if self._ours_on.get(node):
                self._check_node(node)
        return self.violations[before:]


def _consumes(owner: Mapping[str, Any], uid: object, group: str) -> bool:
    """Whether a ``reservedFor`` entry lets the pod (``uid``, in PodGroup ``group``) use the claim."""
    if owner.get("resource") == "podgroups":
        return bool(group) and owner.get("name") == group
    return owner.get("uid") == uid
