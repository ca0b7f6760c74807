"""Kinds of resource: how what a pod asks for and what a node offers become the counts placement compares.

Placement compares integers per named resource: a shape's requests and the snapshot's columns are counts
by name, whatever they count. Each kind of resource turns what it reads into such counts:

- :class:`Requests`: ``resources.requests`` of the containers (``topology.quantities.pod_requests``)
  against a node's ``status.allocatable``: cpu in millicores, memory, pods, extended resources such as
  ``nvidia.com/gpu``;
- :class:`Claims`: Dynamic Resource Allocation (``spec.resourceClaims``) where nothing reads the devices:
  a pod that claims devices is refused with what it asks, rather than placed as if it asked for nothing.
  The scheduler, which watches the devices, puts its own kind in its place (:func:`replacing`,
  ``scheduler/devices/demand.py``).

A new kind is a class here and an entry in :data:`KINDS`: the columns it adds (a node's supply, a pod's
demand), what of a pod it cannot place, and what the pod waits for. ``pod_shape``, ``node_record``,
``unsupported_constraints`` and the scheduler's state read every pod and node through :func:`pod_demand`
and :func:`node_supply`, so nothing else changes: placement, eligibility, preemption and reporting see
counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from topology.quantities import MAX_AMOUNT, pod_requests, resource_list
from topology.spec_error import SpecError


class ResourceKind(Protocol):
    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        """What the pod asks of the node it runs on, in this kind's columns (raises SpecError on bad input)."""
        ...

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        """What the node offers, in this kind's columns (raises SpecError on bad input)."""
        ...

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """What the pod asks of this kind that cannot be placed yet, as ``(field, what it asks)``."""
        ...

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """What the pod waits for before it can be placed (an object another controller makes), as
        ``(field, what it waits for)``; it is placed once that changes, with nothing to fix."""
        ...

    def node(self, pod: Mapping[str, Any]) -> str | None:
        """The node the pod must go to because of what this kind gave it already (devices allocated there),
        or None."""
        ...

    def together(self, pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
        """What the pod shares with other pods and must share a node for (a claim of devices not allocated
        yet, named by several pods): each as ``(what, how many pods name it)``. Every pod that names it
        goes to one node."""
        ...


class Requests:
    """The counted resources of ``resources.requests`` and ``status.allocatable``."""

    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        return pod_requests(pod)

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        """Allocatable, falling back to capacity when a node reports none (as kube-scheduler reads it)."""
        status = node.get("status") or {}
        if not isinstance(status, Mapping):
            raise SpecError("status", status, "must be an object")
        name = "allocatable" if status.get("allocatable") is not None else "capacity"
        return resource_list(status.get(name), field=f"status.{name}")

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return ()

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return ()

    def node(self, pod: Mapping[str, Any]) -> str | None:
        return None

    def together(self, pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
        return ()


class Claims:
    """Devices claimed through Dynamic Resource Allocation (``resource.k8s.io``): refused until placed."""

    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        return {}

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        return {}

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        spec = pod.get("spec") or {}
        if isinstance(spec, Mapping) and spec.get("resourceClaims"):
            return (("spec.resourceClaims", "dynamic resource allocation (resource claims)"),)
        return ()

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return ()

    def node(self, pod: Mapping[str, Any]) -> str | None:
        return None

    def together(self, pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
        return ()


#: Every kind of resource placement counts, in the order their columns are merged.
KINDS: tuple[ResourceKind, ...] = (Requests(), Claims())


def replacing(kind: type, by: ResourceKind, kinds: tuple[ResourceKind, ...] = KINDS) -> tuple[ResourceKind, ...]:
    """``kinds`` with the one of class ``kind`` replaced by ``by``, in its place: how a caller that knows more
    of a kind (the scheduler, which watches the devices, for :class:`Claims`) plugs it in, every other kind as
    :data:`KINDS` has it."""
    if not any(isinstance(entry, kind) for entry in kinds):
        raise ValueError(f"no kind of class {kind.__name__} to replace")
    return tuple(by if isinstance(entry, kind) else entry for entry in kinds)


def pod_demand(pod: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS) -> dict[str, int]:
    """What the pod asks of a node, every kind's columns together (``pods: 1`` among them)."""
    return _merged(kind.demand(pod) for kind in kinds)


def node_supply(node: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS) -> dict[str, int]:
    """What the node offers, every kind's columns together."""
    return _merged(kind.supply(node) for kind in kinds)


def unsupported_by_kinds(
    pod: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS
) -> tuple[tuple[str, str], ...]:
    """What the pod asks that no kind can place yet, as ``(field, what it asks)``."""
    return tuple(found for kind in kinds for found in kind.unsupported(pod))


def waits_of_kinds(pod: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS) -> tuple[tuple[str, str], ...]:
    """What the pod waits for before any kind can place it, as ``(field, what it waits for)``."""
    return tuple(found for kind in kinds for found in kind.waits(pod))


def _merged(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    found = [part for part in parts if part]
    if len(found) == 1 and isinstance(found[0], dict):
        return found[0]  # one kind has columns (the common case): its fresh dict, not a copy
    total: dict[str, int] = {}
    for part in found:
        for name, amount in part.items():
            total[name] = min(MAX_AMOUNT, total.get(name, 0) + amount)
    return total
