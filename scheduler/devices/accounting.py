"""How the devices pods claim are counted on the nodes, beside the pods ClusterState keeps.

A pod counts the devices its claims ask as its own requests (``demand.py``), placed or bound, as it counts
GPUs. What no pod counts is counted here, under keys of its own in the ledger (the snapshot's used room):

- an allocated claim no pod counts as its own (shared, reserved for no pod, or its pod finished or gone):
  its devices on their nodes (``resourceclaim:<claim>@<node>``), until it is deallocated;
- partitions and shares that allocations counted in no pod of a column keep from it (``Devices.blocked``):
  their node's ``devices-in-use@<node>``.

It also keeps which pods name which claims (``Devices.named_by``, ``Devices.waiting_by``): a claim whose pods
change is shared by more or fewer, and the others are read again (``Ledger.read_again``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from scheduler.devices.claims import pod_claims
from scheduler.devices.inventory import Devices
from topology.quantities import DEVICES, resource_words

#: The key under which a node's devices that allocations elsewhere keep from a column are counted.
BLOCKED_PREFIX = "devices-in-use@"

Counted = dict[str, tuple[str, tuple[tuple[str, int], ...]]]  # key -> (node, columns)


class Ledger(Protocol):
    """What device accounting asks of the state it counts devices in."""

    def count(self, key: str, node: str, columns: Mapping[str, int]) -> None:
        """Count ``columns`` on ``node`` under ``key`` (room in use)."""
        ...

    def uncount(self, key: str, node: str) -> None:
        """Stop counting ``key``: its room on ``node`` is free again."""
        ...

    def uid(self, pod: str) -> str | None:
        """The uid of a known pod (finished or not), None if unknown."""
        ...

    def unfinished(self, pod: str) -> bool:
        """Whether the pod is placed, bound or pending, not finished or gone."""
        ...

    def carries(self, pod: str) -> Collection[str] | None:
        """The columns a pod placed and not yet seen bound asks (None when it is not such a pod)."""
        ...

    def read_again(self, pods: Sequence[str]) -> None:
        """Read these pods again (what they ask depends on what was just counted)."""
        ...


class DeviceAccounting:
    def __init__(self, devices: Devices, ledger: Ledger) -> None:
        self.devices = devices
        self.ledger = ledger
        #: Pods that claim devices: the claims they name (namespace/name), and the pod as last seen.
        self._claiming: dict[str, tuple[tuple[str, ...], Mapping[str, Any]]] = {}
        #: What each pod that claims devices is counted in: the claims it names (``Devices.named_by``) and
        #: those it waits to be placed with (``Devices.waiting_by``).
        self._naming: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        #: Allocated claims no pod counts as its own, and the keys under which their devices are counted on
        #: their nodes (one per node): nobody else may have them until the claim is deallocated.
        self._on_its_own: dict[str, Counted] = {}
        self._blocked: dict[str, tuple[tuple[str, int], ...]] = {}  # node -> ``Devices.blocked`` counted there

    # -- pods ---------------------------------------------------------------------------------------

    def claims_of(self, pod: str) -> tuple[str, ...]:
        """The ResourceClaims (namespace/name) the pod names, as far as they are made."""
        return self._claiming[pod][0] if pod in self._claiming else ()

    def last_seen(self, pod: str) -> Mapping[str, Any] | None:
        """A pod that claims devices, as last seen."""
        return self._claiming[pod][1] if pod in self._claiming else None

    def claiming(self) -> list[str]:
        return list(self._claiming)

    def pod_seen(self, key: str, obj: Mapping[str, Any]) -> None:
        """A pod's event, before it is counted: the claims it names are what it asks."""
        if (obj.get("spec") or {}).get("resourceClaims"):
            namespace = key.split("/", 1)[0]
            self._claiming[key] = (tuple(f"{namespace}/{named.claim}" for named in pod_claims(obj) if named.claim), obj)

    def pod_counted(self, key: str, *, finished: bool, waiting: bool) -> None:
        """A pod's event, once it is counted: which claims it names and waits to be placed with now."""
        if key in self._naming or key in self._claiming:
            named = self._claiming[key][0] if key in self._claiming and not finished else ()
            self._name_claims(key, named, named if waiting else ())
        if key in self.devices.extended_of:  # its extended resources' claim counts as it counts
            self.count_on_its_own(self.devices.extended_of[key])

    def pod_gone(self, key: str) -> None:
        self._claiming.pop(key, None)
        self._name_claims(key, (), ())
        if key in self.devices.extended_of:
            self.count_on_its_own(self.devices.extended_of[key])

    def claim_changed(self, claim: str) -> None:
        """A claim's watch event: its pods ask again (what they ask is read from it), and it is counted again."""
        naming = sorted(self.devices.named_by.get(claim, ()))
        self.ledger.read_again(naming)
        self.count_on_its_own(claim)

    def _name_claims(self, pod: str, named: tuple[str, ...], waiting: tuple[str, ...]) -> None:
        """``pod`` now names the claims ``named`` (none once it finished or is gone), and waits to be placed
        with ``waiting`` of them. A claim whose pods change is shared by more or fewer: the others ask their
        devices again and their gangs are compiled again."""
        before_named, before_waiting = self._naming.pop(pod, ((), ()))
        if named:
            self._naming[pod] = (named, waiting)
        touched = set()
        for table, before, after in (
            (self.devices.named_by, before_named, named),
            (self.devices.waiting_by, before_waiting, waiting),
        ):
            for claim in {*before, *after} - ({*before} & {*after}):
                pods = table.setdefault(claim, set())
                if claim in after:
                    pods.add(pod)
                else:
                    pods.discard(pod)
                touched |= pods - {pod}
                if not pods:
                    del table[claim]
        self.ledger.read_again(sorted(touched))
        for claim in {*before_named, *named}:
            self.count_on_its_own(claim)

    # -- what no pod counts -------------------------------------------------------------------------

    def count_on_its_own(self, claim_key: str) -> None:
        """Count the devices of ``claim_key`` on their nodes while it is allocated and no pod counts them as
        its own (``DeviceDemand.counts``): shared, reserved for no pod, or its pod finished or gone. Asked on
        every event of the pods concerned, it changes nothing (no node is freed) while the count is the same."""
        by_its_pod = self._counted_by_its_pod(claim_key)
        self.devices.counted_by_pod(claim_key, by_its_pod)
        followed = None if by_its_pod else self._counted_on_its_own(claim_key)
        wanted = followed or {}
        before = self._on_its_own.pop(claim_key, {})
        for counted, (node, columns) in before.items():
            if wanted.get(counted) != (node, columns):
                self.ledger.uncount(counted, node)
        for counted, (node, columns) in wanted.items():
            if before.get(counted) != (node, columns):
                self.ledger.count(counted, node, dict(columns))
        if followed is not None:
            self._on_its_own[claim_key] = wanted

    def recount(self, nodes: Collection[str]) -> None:
        """What nodes offer changed (``Devices.supply``): count again what no pod counts, on ``nodes``."""
        for claim in list(self._on_its_own):  # the columns their devices count in may have changed
            self.count_on_its_own(claim)
        self._count_blocked(nodes)

    def _counted_on_its_own(self, claim_key: str) -> Counted | None:
        """What :meth:`count_on_its_own` counts of a claim its one pod does not count: per key, the node and
        the columns there; None when it counts nothing and need not look again until the claim or its pods
        change."""
        claim = self.devices.claims.get(claim_key)
        if claim is None or not claim.allocated:
            return None
        naming = self.devices.named_by.get(claim_key, set())
        held = self.devices.held(claim)
        if claim.extended_for is not None and self.ledger.unfinished(claim.extended_for):
            # Made for the pod's extended resources (KEP-5004): the pod counts what it asks of them on its node,
            # so the devices count here only where claims ask for them.
            held = {node: {c: n for c, n in there.items() if c.startswith(DEVICES)} for node, there in held.items()}
        columns = {column for on_node in held.values() for column in on_node}
        if any(columns & set(self.ledger.carries(pod) or ()) for pod in naming):
            # The pod that asked the devices when its gang was placed still carries them, until its bind is
            # seen: counting them here too would find its node short of them, and the bind crowded.
            return {}
        return {
            f"resourceclaim:{claim_key}@{node}": (node, tuple(sorted(there.items())))
            for node, there in held.items()
            if there
        }

    def _counted_by_its_pod(self, claim_key: str) -> bool:
        """Whether an allocated claim's devices are counted by the one pod that names it (``DeviceDemand.counts``)."""
        claim = self.devices.claims.get(claim_key)
        naming = self.devices.named_by.get(claim_key, set())
        uid = self.ledger.uid(next(iter(naming))) if len(naming) == 1 else None
        return claim is not None and bool(claim.allocated) and uid is not None and claim.reserved_for == (uid,)

    def _count_blocked(self, nodes: Collection[str]) -> None:
        """Count, on each node, the partitions and shares its devices cannot give because allocations counted in
        other columns use their counters or capacity (``Devices.blocked``); room given back is freed room."""
        wanted = {node: tuple(sorted(columns.items())) for node, columns in self.devices.blocked.items()}
        for node, columns in self._blocked.items():
            if wanted.get(node) != columns or node not in nodes:
                self.ledger.uncount(f"{BLOCKED_PREFIX}{node}", node)
        for node, columns in wanted.items():
            if self._blocked.get(node) != columns and node in nodes:
                self.ledger.count(f"{BLOCKED_PREFIX}{node}", node, dict(columns))
        self._blocked = {node: columns for node, columns in wanted.items() if node in nodes}

    def note(self, columns: Collection[str]) -> str:
        """`` Of the devices of class ...: 8 tainted ...``: why devices the gang's requests select cannot serve
        them, for the message of a gang that does not fit (empty when nothing keeps them)."""
        found = [
            f" Of the {resource_words(column)}: {note}."
            for column in sorted(set(columns))
            if (note := self.devices.note(column))
        ]
        return "".join(found)
