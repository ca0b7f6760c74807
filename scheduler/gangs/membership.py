"""The membership index: which pods and group objects form which gang, kept current one event at a time.

Feed it every pod event and every group-object event (raw JSON, as watches deliver them). One event
marks at most the gangs it touches as dirty (the gang a pod left, the gang it joined, the hierarchy an
object is in); the gang index compiles only those again, so a cluster with thousands of gangs does not
re-read all of them when one pod changes.

How a pod finds its gang:

- PFN annotations, a 1.35 ``workloadRef`` and plain pods form gangs of their own (no hierarchy);
- a pod that names a group object (scheduler-plugins, Volcano, ``scheduling.k8s.io`` PodGroup) is a
  member of that object; the object may have a parent composite, which may have a parent, and so on.
  The gang is the whole tree, keyed by its root object. A missing object is the root of what hangs
  below it, and that gang waits for it.

Members are Phalanx's pods (``spec.schedulerName``) that have not finished, are not being deleted and
are not held by scheduling gates; gated pods are counted for the gang they will join.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from scheduler.gangs.common import Context
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.groups import GroupObject, Role
from scheduler.gangs.model import GangKey, ObjectRef, PodKey, Source, gang_key, pod_key
from scheduler.gangs.pods import DEFAULT_SCHEDULER, PodInfo, read_bound, read_pod
from scheduler.gangs.sources import ROOT_SOURCE, read_group

#: Sources whose gangs have no group object: a gang per PFN name, per 1.35 workload replica, per plain pod.
SIMPLE = (Source.PFN, Source.POD, Source.WORKLOAD)


class MembershipIndex:
    """Pods and group objects in; which gang each belongs to, and which gangs changed, out. Not
    thread-safe: one owner applies events."""

    def __init__(self, settings: GangSettings, context: Context) -> None:
        self.settings = settings
        self._context = context
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
        self._gang_of: dict[PodKey, GangKey] = {}
        self._dirty: set[GangKey] = set()
        self._bound: dict[GangKey, dict[str, str]] = {}  # gang -> members bound since it was compiled -> node

    # -- events --------------------------------------------------------------------------------

    def upsert_pod(self, raw: Mapping[str, Any], demand: Mapping[str, int] | None = None) -> None:
        """Apply a pod's ADDED or MODIFIED event. O(1) unless its gang must be compiled again. ``demand``:
        what the pod asks of a node, if the caller read it already (with the index's kinds)."""
        if not self._may_be_ours(raw):
            return  # another scheduler's pod never seen as a member: most of a large cluster's pods
        key = _key_of(raw)
        known = self._pods.get(key) if key is not None else None
        bound = read_bound(raw, known, demand) if known is not None else None
        gang = self._gang_of.get(bound.key) if bound is not None else None
        if known is not None and bound is not None and gang is not None and _only_bound(known, bound):
            # Bound, and nothing else a gang is compiled from changed: its compiled gang gets the member's node
            # (GangIndex.take_changed), not a compile; a gang of 8 comes back in several batches of binds.
            self._pods[bound.key] = bound
            self._bound.setdefault(gang, {})[bound.key] = str(bound.node)
            return
        info = bound or read_pod(raw, self.settings, demand)
        if info is None:
            return
        old = self._pods.get(info.key)
        if old is not None and _same_for_gangs(old, info):
            self._pods[info.key] = info  # e.g. a status update: nothing a gang depends on changed
            return
        gang = self._gang_of.get(info.key)
        if old is not None and gang is not None and _bound_since(old, info):
            # Bound, and nothing else a gang is compiled from changed: its compiled gang gets the member's node
            # (GangIndex.take_changed), not a compile; a gang of 8 comes back in several batches of binds.
            self._pods[info.key] = info
            self._bound.setdefault(gang, {})[info.key] = str(info.node)
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
            self._context.drop(info.key)
            if info.held_by_gates and info.scheduler in self.settings.scheduler_names:
                self._gate(info)
            else:
                self._ungate(info.key)

    def _may_be_ours(self, raw: Mapping[str, Any]) -> bool:
        """False for a pod of another scheduler that nothing here holds (read_pod would be thrown away)."""
        spec = raw.get("spec")
        scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        named = scheduler if isinstance(scheduler, str) and scheduler else DEFAULT_SCHEDULER
        if named in self.settings.scheduler_names:
            return True
        metadata = raw.get("metadata")
        if not isinstance(metadata, Mapping):
            return True  # read_pod says what is wrong
        key = pod_key(str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        return key in self._pods or key in self._gated_at or self._context.knows(key)

    def delete_pod(self, namespace: str, name: str) -> None:
        key = PodKey(f"{namespace}/{name}")
        self._detach(key)
        self._ungate(key)
        self._pods.pop(key, None)
        self._context.drop(key)

    def upsert_group(self, raw: Mapping[str, Any]) -> bool:
        """Apply an event of any group object; False when the object is no gang source's."""
        group = read_group(raw)
        if group is None:
            return False
        if group.kind.role is Role.PRIORITY_CLASS:
            value = group.raw.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                self._context.priority_classes[group.ref.name] = value
            if group.raw.get("preemptionPolicy") == "Never":
                self._context.never_preempting.add(group.ref.name)
            else:
                self._context.never_preempting.discard(group.ref.name)
            self._dirty |= set(self._gang_of.values())  # rare, and any gang may name the class
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
            self._context.never_preempting.discard(group.ref.name)
            self._dirty |= set(self._gang_of.values())
            return True
        self._dirty.add(self._root_key(group.ref))
        self._unlink(self._groups.pop(group.ref, None))
        self._dirty.add(self._root_key(group.ref))
        return True

    # -- reading -------------------------------------------------------------------------------

    def take_dirty(self) -> set[GangKey]:
        """The gangs events touched since the last call."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def take_bound(self) -> dict[GangKey, dict[str, str]]:
        """The members that were bound, and nothing else about them changed, since the last call, by gang:
        their compiled gang needs their node, not a compile."""
        bound, self._bound = self._bound, {}
        return bound

    def compiled(self, key: GangKey, pods: tuple[PodKey, ...]) -> None:
        """Record which gang ``pods`` were compiled into (a later event on one of them marks that gang)."""
        for pod in pods:
            self._gang_of[pod] = key

    def is_simple(self, key: GangKey) -> bool:
        """Whether ``key`` is a gang without group objects (its members are listed by key)."""
        return key in self._simple

    def simple_pods(self, key: GangKey) -> list[PodInfo]:
        return [self._pods[pod] for pod in sorted(self._simple.get(key, ()))]

    def member_pods(self, ref: ObjectRef) -> list[PodInfo]:
        """The member pods of one group object, by key."""
        return [self._pods[pod] for pod in sorted(self._members.get(ref, ()))]

    def children(self, ref: ObjectRef) -> list[ObjectRef]:
        """The child objects of a composite, by reference."""
        return sorted(self._children.get(ref, ()))

    @property
    def groups(self) -> Mapping[ObjectRef, GroupObject]:
        """Every group object as last seen (read-only)."""
        return self._groups

    def never_preempts(self, priority_class: str) -> bool:
        """Whether the PriorityClass says ``preemptionPolicy: Never``."""
        return priority_class in self._context.never_preempting

    def gang_of(self, pod: str) -> GangKey | None:
        return self._gang_of.get(PodKey(pod))

    def touch(self, pods: Iterable[str]) -> None:
        """The gangs of ``pods`` must be compiled again (their members are read afresh)."""
        for pod in pods:
            gang = self._gang_of.get(PodKey(pod))
            if gang is not None:
                self._dirty.add(gang)

    def pods(self) -> Iterable[PodInfo]:
        """Every pod that is a gang member (pending or running), read-only."""
        return self._pods.values()

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
        if membership.source in SIMPLE or membership.problem is not None or membership.group is None:
            return self._simple_key(pod)
        return self._root_key(membership.group)

    def _attach(self, pod: PodInfo) -> None:
        membership = pod.membership
        key = self._key_of(pod)
        if membership.source in SIMPLE or membership.problem is not None or membership.group is None:
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
        simple = membership.source in SIMPLE or membership.problem is not None or membership.group is None
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

    def held(self, places: list[GangKey | ObjectRef]) -> tuple[int, tuple[str, ...]]:
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

    def root(self, ref: ObjectRef) -> ObjectRef:
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
        root = self.root(ref)
        source = ROOT_SOURCE.get((root.group, root.kind), Source.COMPOSITE)
        return gang_key(source, root.namespace, root.name)

    def below(self, ref: ObjectRef) -> Iterator[ObjectRef]:
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

    def referrer(self, missing_ref: ObjectRef) -> ObjectRef:
        """Who points at a missing object: a member pod or a child object (for the Event's subject)."""
        members = sorted(self._members.get(missing_ref, ()))
        if members:
            return self._pods[members[0]].ref
        children = sorted(self._children.get(missing_ref, ()))
        return children[0] if children else missing_ref


def _key_of(raw: Mapping[str, Any]) -> PodKey | None:
    metadata = raw.get("metadata")
    return pod_key(str(metadata.get("namespace")), str(metadata.get("name"))) if type(metadata) is dict else None


def _same_for_gangs(old: PodInfo, new: PodInfo) -> bool:
    """Whether a pod update leaves everything a gang is compiled from unchanged."""
    return old.node == new.node and old.raw.get("spec") == new.raw.get("spec") and _same_but_spec(old, new)


def _bound_since(old: PodInfo, new: PodInfo) -> bool:
    """Whether the pod was bound and nothing else its gang is compiled from changed: its spec is the one it
    had but for ``nodeName`` (what a bind writes), and it claims no devices (what those ask is read afresh)."""
    if old.node is not None or new.node is None:
        return False
    spec, before = new.raw.get("spec"), old.raw.get("spec")
    if not isinstance(spec, dict) or not isinstance(before, dict) or spec.get("resourceClaims"):
        return False
    return {**before, "nodeName": new.node} == spec and _same_but_spec(old, new)


def _only_bound(old: PodInfo, new: PodInfo) -> bool:
    """For ``new`` read from ``old`` by ``read_bound`` (same spec but its node, same metadata): whether what its
    gang reads of it changed in nothing but its node (not finished with the same event, no claims made
    meanwhile, no claims, whose demand is read afresh)."""
    spec = new.raw.get("spec")
    return (
        old.counts == new.counts
        and _claims_made(old) == _claims_made(new)
        and not (isinstance(spec, Mapping) and spec.get("resourceClaims"))
    )


def _same_but_spec(old: PodInfo, new: PodInfo) -> bool:
    """Whether what a gang reads of a pod besides its spec and node is unchanged."""
    return (
        old.scheduler == new.scheduler
        and old.counts == new.counts
        and old.membership == new.membership
        and old.priority == new.priority
        and old.labels == new.labels
        and old.annotations == new.annotations
        and _claims_made(old) == _claims_made(new)
    )


def _claims_made(pod: PodInfo) -> object:
    """The claims made for a pod from its templates (``status.resourceClaimStatuses``): its shape reads them."""
    status = pod.raw.get("status")
    return status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
