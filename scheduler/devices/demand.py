"""Claimed devices as a kind of resource (``topology.kinds``): what a pod asks of a node, in counts.

Each request of a claim is a column of its own, named after its DeviceClass (and its own selectors, when
it has some): ``devices/gpu.nvidia.com``. A node offers in that column every device there that satisfies
the request (``Devices.supply``), and every pod that claims some asks its request's count, whether its
claim is allocated yet or not, as every pod counts its GPUs. Placement then compares devices as it
compares GPUs; which devices a pod gets is chosen when its gang binds (``allocation.py``).

A claim's ``constraints`` (``matchAttribute``, ``distinctAttribute``) are kept when its devices are chosen;
placement counts devices without them, so a node whose devices cannot keep them is found out then, and
the gang backs off. What cannot be placed this way yet is refused by name (firstAvailable with several
alternatives, ``All``, a claim shared by several pods or allocated for none), and what a pod
waits for (its template's claim, which kube-controller-manager's resourceclaim controller makes; a
claim or a DeviceClass that does not exist yet) makes its gang wait, with nothing to fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from scheduler.devices.claims import EXACT_COUNT, Claim, Request, pod_claims
from scheduler.devices.inventory import Devices
from topology.quantities import DEVICES


def column(request: Request) -> str:
    """``devices/<class>``, with a digest of the request's own selectors when it has some."""
    name = f"{DEVICES}{request.device_class}"
    if request.selectors:
        name += "/" + hashlib.sha256("\n".join(request.selectors).encode()).hexdigest()[:8]
    return name


class DeviceDemand:
    """The ``ResourceKind`` of the devices a pod claims, read from the devices ClusterState keeps."""

    def __init__(self, devices: Devices) -> None:
        self.devices = devices

    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        found: dict[str, int] = {}
        for claim in self._claims(pod):
            if claim is None:
                continue
            for request in claim.requests:
                wanted = request.alternatives[0]
                if wanted.mode != EXACT_COUNT:
                    continue
                name = column(wanted)
                self.devices.register(name, wanted)
                found[name] = found.get(name, 0) + wanted.count
        return found

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        return {}  # from ResourceSlices, not from the Node: ClusterState merges Devices.supply in

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        namespace = _namespace(pod)
        for i, (named, claim) in enumerate(zip(pod_claims(pod), self._claims(pod), strict=True)):
            where = f"spec.resourceClaims[{i}]"
            problem = self.devices.problems.get(("ResourceClaim", f"{namespace}/{named.claim}"))
            if problem is not None:
                found.append((where, f"a ResourceClaim that cannot be read ({problem})"))
            if claim is None:
                continue
            if [owner for owner in claim.reserved_for if owner != uid]:
                found.append((where, f"ResourceClaim {claim.key} shared with other pods"))
            elif claim.allocated and uid not in claim.reserved_for:
                found.append((where, f"ResourceClaim {claim.key} allocated for no pod of its own"))
            for request in claim.requests:
                found.extend(self._request_problems(where, claim, request.alternatives))
        return tuple(found)

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        namespace = _namespace(pod)
        for i, named in enumerate(pod_claims(pod)):
            where = f"spec.resourceClaims[{i}]"
            if named.claim is None:
                found.append((where, f"its ResourceClaim from template {named.template}, which the resourceclaim "
                                     "controller makes"))  # fmt: skip
                continue
            claim = self.devices.claims.get(f"{namespace}/{named.claim}")
            if claim is None and ("ResourceClaim", f"{namespace}/{named.claim}") not in self.devices.problems:
                found.append((where, f"ResourceClaim {namespace}/{named.claim} to exist"))
                continue
            for request in claim.requests if claim is not None else ():
                wanted = request.alternatives[0].device_class
                if wanted not in self.devices.classes:
                    found.append((where, f"DeviceClass {wanted} to exist"))
        return tuple(found)

    def node(self, pod: Mapping[str, Any]) -> str | None:
        """Where a claim of the pod is allocated already (for it, by an earlier attempt whose allocation
        could not be taken back): the pod goes there, with its devices."""
        return next((claim.node for claim in self._claims(pod) if claim is not None and claim.node), None)

    def _request_problems(self, where: str, claim: Claim, alternatives: tuple[Request, ...]) -> list[tuple[str, str]]:
        if len(alternatives) > 1:
            return [(where, f"firstAvailable with several alternatives in ResourceClaim {claim.key}")]
        wanted = alternatives[0]
        if wanted.mode != EXACT_COUNT:
            return [(where, f"allocationMode {wanted.mode} in ResourceClaim {claim.key}")]
        device_class = self.devices.classes.get(wanted.device_class)
        expressions = (*(device_class.selectors if device_class else ()), *wanted.selectors)
        problems = [self.devices.selectors.check(expression) for expression in expressions]
        return [(where, f"a device selector that cannot be used: {problem}") for problem in problems if problem]

    def _claims(self, pod: Mapping[str, Any]) -> list[Claim | None]:
        namespace = _namespace(pod)
        return [
            self.devices.claims.get(f"{namespace}/{named.claim}") if named.claim else None for named in pod_claims(pod)
        ]


def _namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace", ""))
