"""Claimed devices as a kind of resource (``topology.kinds``): what a pod asks of a node, in counts.

Each request of a claim is a column of its own, named after its DeviceClass (and its own selectors, when
it has some): ``devices/gpu.nvidia.com``. A node offers in that column every device there that satisfies
the request (``Devices.supply``), and a pod that claims some asks its request's count, whether its claim
is allocated yet or not, as every pod counts its GPUs. Placement then compares devices as it compares
GPUs; which devices a pod gets is chosen when its gang binds (``allocation.py``).

A claim several pods name (shared, a PodGroup's among them) asks its devices once: while it is not allocated,
of the first of its pods, and the pods that share it go to one node (``together``: the gang compiler keeps
them on one); once allocated, of no pod (ClusterState counts it on its node) and each pod that names it goes
there (``node``). A claim allocated and reserved for no pod is joined the same way.

A claim's ``constraints`` (``matchAttribute``, ``distinctAttribute``) are kept when its devices are chosen;
placement counts devices without them, so a node whose devices cannot keep them is found out then, and
the gang backs off. Of a ``firstAvailable`` request, a pod asks the first alternative some node offers
enough of (``alternative``). ``allocationMode: All`` asks one whole set (``<column>#all``), which the nodes
with the most matching devices offer, and counts that many of the column's devices. What cannot be placed
this way is refused by name (an allocation on no single node), and what a pod
waits for (its template's claim, which kube-controller-manager's resourceclaim controller makes; a
claim or a DeviceClass that does not exist yet) makes its gang wait, with nothing to fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.devices.claims import ALL, EXACT_COUNT, Claim, ClaimRequest, Request, column, pod_claims
from scheduler.devices.extended import asked, asks_any
from scheduler.devices.inventory import Devices
from topology.quantities import WHOLE_NODE

#: How many consumers a claim's ``status.reservedFor`` may list (``ResourceClaimReservedForMaxSize``).
MAX_RESERVED = 256


class DeviceDemand:
    """The ``ResourceKind`` of the devices a pod claims, read from the devices ClusterState keeps."""

    def __init__(self, devices: Devices) -> None:
        self.devices = devices

    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        self._offer_extended(pod)
        found: dict[str, int] = {}
        claims = self._claims(pod)
        if not claims:
            return found  # most pods
        key, uid = _pod_key(pod), _uid(pod)
        for claim in claims:
            if claim is None or not self.counts(claim, key, uid):
                continue
            for request in claim.requests:
                wanted = self.alternative(claim, request)
                name = column(wanted)
                if wanted.mode == ALL:  # every matching device of its node: a whole set, and what it holds
                    whole = name + WHOLE_NODE
                    self.devices.register(whole, wanted)
                    found[whole] = found.get(whole, 0) + 1
                    given = sum(1 for given in claim.allocated_requests if given == wanted.name)
                    found[name] = found.get(name, 0) + (given if claim.allocated else self.devices.most.get(whole, 0))
                    continue
                found[name] = found.get(name, 0) + wanted.count - self._networked(claim, wanted)
        return found

    def _networked(self, claim: Claim, wanted: Request) -> int:
        """Of an allocated claim's devices for ``wanted``, those on no one node: no node offers them any more
        (``Devices.supply``), so its pod does not count them on its own node."""
        if not claim.allocated:
            return 0
        given = (device for device, request in zip(claim.allocated, claim.allocated_requests, strict=False)
                 if request == wanted.name)  # fmt: skip
        return self.devices.networked(given)

    def _offer_extended(self, pod: Mapping[str, Any]) -> None:
        """An extended resource the pod asks that a class serves (KEP-5004): nodes without it of their own offer
        it from then on, counting their devices of the class. (The pod's count of it is the extended resource
        kind's, as on any node.)"""
        served = self.devices.served()
        if not served or not asks_any(pod, served):
            return  # most pods: a look at the names, no quantity read
        for name, device_class in asked(pod, served).items():
            self.devices.register(name, Request(name, device_class.name, (), EXACT_COUNT, 1))

    def alternative(self, claim: Claim, request: ClaimRequest) -> Request:
        """The way ``request`` is counted: the alternative its allocation used; else, of ``firstAvailable``,
        the first that some node offers enough of (as kube-scheduler tries them in order on each node, a
        node where only a later one fits is not used: placement counts one way per pod), else the first."""
        for wanted in request.alternatives:
            self.devices.register(column(wanted), wanted)  # every node offers each, so each can be chosen
            if wanted.mode == ALL:
                self.devices.register(column(wanted) + WHOLE_NODE, wanted)
        if len(request.alternatives) == 1:
            return request.alternatives[0]
        if claim.allocated:
            given = set(claim.allocated_requests)
            return next((wanted for wanted in request.alternatives if wanted.name in given), request.alternatives[0])
        most = self.devices.most
        return next(
            (
                wanted
                for wanted in request.alternatives
                if (most.get(column(wanted) + WHOLE_NODE, 0) > 0 if wanted.mode == ALL else
                    most.get(column(wanted), 0) >= wanted.count)
            ),
            request.alternatives[0],
        )  # fmt: skip

    def chooses(self, pod: Mapping[str, Any]) -> bool:
        """Whether what the pod asks depends on what nodes offer (a ``firstAvailable`` or ``All`` request not
        allocated yet): it is read again whenever that changes."""
        return any(
            claim is not None
            and not claim.allocated
            and any(len(r.alternatives) > 1 or r.alternatives[0].mode == ALL for r in claim.requests)
            for claim in self._claims(pod)
        )

    def counts(self, claim: Claim, pod: str, uid: str) -> bool:
        """Whether ``pod`` counts ``claim``'s devices as its own. An allocated claim reserved for it alone
        is; one allocated otherwise (shared, or reserved for no pod) is counted on its own by ClusterState.
        A claim not allocated yet is counted by the first (by key) of the pods waiting to be placed with it,
        so that pods sharing it ask its devices once."""
        if claim.allocated:  # the pod may be read before it is counted among those that name it
            return claim.reserved_for == (uid,) and self.devices.named_by.get(claim.key, set()) | {pod} == {pod}
        return min(self.devices.waiting_by.get(claim.key, set()) | {pod}) == pod

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        return {}  # from ResourceSlices, not from the Node: ClusterState merges Devices.supply in

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        namespace = _namespace(pod)
        for i, (named, claim) in enumerate(zip(pod_claims(pod), self._claims(pod), strict=True)):
            where = f"spec.resourceClaims[{i}]"
            problem = self.devices.problems.get(("ResourceClaim", f"{namespace}/{named.claim}"))
            if problem is not None:
                found.append((where, f"a ResourceClaim that cannot be read ({problem})"))
            if claim is None:
                continue
            if claim.allocated and claim.node is None and not claim.anywhere:
                found.append((where, f"ResourceClaim {claim.key} allocated on no single node"))
            for request in claim.requests:
                found.extend(self._request_problems(where, claim, request.alternatives))
        return tuple(found)

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        named_claims = pod_claims(pod)
        if not named_claims:
            return ()  # most pods
        namespace = _namespace(pod)
        for i, named in enumerate(named_claims):
            where = f"spec.resourceClaims[{i}]"
            group = self.devices.group_of(pod, named)
            if named.claim is None:
                of = f" for PodGroup {group.key}" if group is not None else ""
                found.append((where, f"its ResourceClaim from template {named.template}{of}, which the resourceclaim "
                                     "controller makes"))  # fmt: skip
                continue
            claim = self.devices.claims.get(f"{namespace}/{named.claim}")
            if claim is None and ("ResourceClaim", f"{namespace}/{named.claim}") not in self.devices.problems:
                found.append((where, f"ResourceClaim {namespace}/{named.claim} to exist"))
                continue
            for request in claim.requests if claim is not None else ():
                for wanted in request.alternatives:
                    if wanted.device_class not in self.devices.classes:
                        found.append((where, f"DeviceClass {wanted.device_class} to exist"))
            uid = group.uid if group is not None else _uid(pod)  # a group's claim is reserved for the group
            if claim is not None and len(claim.reserved_for) >= MAX_RESERVED and uid not in claim.reserved_for:
                found.append((where, f"a place in ResourceClaim {claim.key}, reserved for {MAX_RESERVED} pods"))
        return tuple(found)

    def node(self, pod: Mapping[str, Any]) -> str | None:
        """Where a claim of the pod is allocated already (shared with pods that run there, or for it by an
        earlier attempt whose allocation could not be taken back): the pod goes there, with its devices."""
        return next((claim.node for claim in self._claims(pod) if claim is not None and claim.node), None)

    def together(self, pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
        """The claims not allocated yet that other pods name too: the pods that share one go to one node,
        where its devices are (node-local devices serve only their node)."""
        found = []
        for claim in self._claims(pod):
            sharing = len(self.devices.waiting_by.get(claim.key, ())) if claim is not None else 0
            if claim is not None and not claim.allocated and sharing > 1:
                found.append((f"ResourceClaim {claim.key}", sharing))
        return tuple(found)

    def _request_problems(self, where: str, claim: Claim, alternatives: tuple[Request, ...]) -> list[tuple[str, str]]:
        found = []
        for wanted in alternatives:
            device_class = self.devices.classes.get(wanted.device_class)
            expressions = (*(device_class.selectors if device_class else ()), *wanted.selectors)
            problems = [self.devices.selectors.check(expression) for expression in expressions]
            found += [(where, f"a device selector that cannot be used: {problem}") for problem in problems if problem]
        return found

    def _claims(self, pod: Mapping[str, Any]) -> list[Claim | None]:
        named_claims = pod_claims(pod)
        if not named_claims:
            return []
        namespace = _namespace(pod)
        return [
            self.devices.claims.get(f"{namespace}/{named.claim}") if named.claim else None for named in named_claims
        ]


def _pod_key(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace", ""))
