"""The gang index: pods and group objects in, compiled gangs out, kept current one event at a time.

Two parts: the membership index (``membership.py``: which pods and objects belong to which gang, and
which gangs an event touched) and the compiler (``compiler.py``: what a gang's objects and pods say).
Feed the index every pod and group-object event; :meth:`GangIndex.take_changed` compiles the gangs
the events touched and says which results changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.gangs.common import Context
from scheduler.gangs.compiler import GangCompiler
from scheduler.gangs.gang_settings import GangSettings
from scheduler.gangs.groups import GroupObject
from scheduler.gangs.membership import MembershipIndex
from scheduler.gangs.model import GangKey, GangResult, GangSpec, ObjectRef
from scheduler.gangs.pods import PodInfo
from topology import KINDS, ResourceKind


class GangIndex:
    """Pods and group objects in; compiled gangs out. Not thread-safe: one owner applies events."""

    def __init__(self, settings: GangSettings | None = None, kinds: tuple[ResourceKind, ...] = KINDS) -> None:
        self.settings = settings or GangSettings()
        context = Context(self.settings, kinds)
        self.membership = MembershipIndex(self.settings, context)
        self.compiler = GangCompiler(self.membership, self.settings, context)
        self._results: dict[GangKey, GangResult] = {}

    # -- events --------------------------------------------------------------------------------

    def upsert_pod(self, raw: Mapping[str, Any], demand: Mapping[str, int] | None = None) -> None:
        """Apply a pod's ADDED or MODIFIED event. O(1) unless its gang must be compiled again. ``demand``:
        what the pod asks of a node, if the caller read it already (with the index's kinds)."""
        self.membership.upsert_pod(raw, demand)

    def delete_pod(self, namespace: str, name: str) -> None:
        self.membership.delete_pod(namespace, name)

    def upsert_group(self, raw: Mapping[str, Any]) -> bool:
        """Apply an event of any group object; False when the object is no gang source's."""
        return self.membership.upsert_group(raw)

    def delete_group(self, raw: Mapping[str, Any]) -> bool:
        return self.membership.delete_group(raw)

    def touch(self, pods: Iterable[str]) -> None:
        """Something the pods' shapes are read from changed (a claim they name): their gangs compile again."""
        self.membership.touch(pods)

    # -- results -------------------------------------------------------------------------------

    def take_changed(self) -> set[GangKey]:
        """Compile the gangs that events touched; return the keys whose result changed or vanished.

        A gang whose members were only bound since its compile takes their nodes without a compile: what a
        compile reads of a member that did not change but for its ``spec.nodeName`` is its node alone."""
        changed: set[GangKey] = set()
        compiled: set[GangKey] = set()
        while dirty := self.membership.take_dirty():
            for key in dirty:
                self._compile(key, changed)
            compiled |= dirty
        for key, nodes in self.membership.take_bound().items():
            if key in compiled:
                continue  # compiled with its members as they are now
            result = self._results.get(key)
            if not isinstance(result, GangSpec):
                self._compile(key, changed)  # an error says what it says of all members: compiled again
                continue
            request, found = result.request.bound(nodes)
            if found != len(nodes):
                self._compile(key, changed)  # not compiled as the membership has it: compiled now
                continue
            self._results[key] = replace(result, request=request)
            changed.add(key)
        return changed

    def _compile(self, key: GangKey, changed: set[GangKey]) -> None:
        result = self.compiler.compile(key)
        if result is None:
            if self._results.pop(key, None) is not None:
                changed.add(key)
            return
        if result != self._results.get(key):
            self._results[key] = result
            changed.add(key)
        self.membership.compiled(key, result.pods)

    def get(self, key: GangKey) -> GangResult | None:
        return self._results.get(key)

    def results(self) -> Mapping[GangKey, GangResult]:
        """The current gangs (call :meth:`take_changed` first to include the latest events)."""
        return self._results

    def gang_of(self, pod: str) -> GangKey | None:
        return self.membership.gang_of(pod)

    def never_preempts(self, priority_class: str) -> bool:
        """Whether the PriorityClass says ``preemptionPolicy: Never``."""
        return self.membership.never_preempts(priority_class)

    def pod(self, key: str) -> PodInfo | None:
        return self.membership.pod(key)

    def pods(self) -> Iterable[PodInfo]:
        """Every gang member, pending or running (read-only)."""
        return self.membership.pods()

    def group(self, ref: ObjectRef) -> GroupObject | None:
        """A group object as last seen (read-only)."""
        return self.membership.group(ref)
