"""Raw Kubernetes JSON (Node and Pod dicts, as the API returns them) into the engine's values.

This is the only place in `topology` that knows Kubernetes field names. It is pure (no client): the
scheduler's informers, the simulator and the tests all hand it the same dicts. Every malformed field
becomes a :class:`SpecError` naming the field; nothing else escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topology.kinds import KINDS, ResourceKind, node_supply, pod_demand, unsupported_by_kinds
from topology.nodes import NodeRecord, Taint
from topology.request import (
    ConstraintError,
    NodeConstraints,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodShape,
    Toleration,
)
from topology.spec_error import SpecError

_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_EFFECTS = ("", *_TAINT_EFFECTS)


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):  # dict first: what a JSON parser makes
        raise SpecError(field, value, "must be an object")
    return value


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field, value, "must be a list")
    return value


def _string(value: object, field: str, *, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise SpecError(field, value, "must be a string")
    return value


def _string_map(value: object, field: str) -> dict[str, str]:
    mapping = _mapping(value, field)
    for key, item in mapping.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise SpecError(f"{field}.{key}", item, "keys and values must be strings")
    return dict(mapping)


def node_record(node: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS) -> NodeRecord:
    """A Node object as a :class:`NodeRecord`.

    Allocatable falls back to capacity when a node reports none. A node is Ready only when its
    ``Ready`` condition says ``True``, as the node lifecycle controller decides.
    """
    metadata = _mapping(node.get("metadata"), "metadata")
    name = _string(metadata.get("name"), "metadata.name")
    if not name:
        raise SpecError("metadata.name", metadata.get("name"), "a node needs a name")
    spec = _mapping(node.get("spec"), "spec")
    status = _mapping(node.get("status"), "status")
    taints = []
    for i, raw in enumerate(_list(spec.get("taints"), "spec.taints")):
        where = f"spec.taints[{i}]"
        taint = _mapping(raw, where)
        effect = _string(taint.get("effect"), f"{where}.effect")
        if effect not in _TAINT_EFFECTS:
            raise SpecError(f"{where}.effect", effect, f"must be one of {', '.join(_TAINT_EFFECTS)}")
        taints.append(
            Taint(
                key=_string(taint.get("key"), f"{where}.key"),
                value=_string(taint.get("value"), f"{where}.value"),
                effect=effect,  # type: ignore[arg-type]  # checked against _TAINT_EFFECTS above
            )
        )
    ready = any(
        isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in _list(status.get("conditions"), "status.conditions")
    )
    return NodeRecord(
        name=name,
        labels=_string_map(metadata.get("labels"), "metadata.labels"),
        allocatable=node_supply(node, kinds),
        taints=tuple(taints),
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
    )


def _requirement(raw: object, field: str) -> NodeSelectorRequirement:
    requirement = _mapping(raw, field)
    values = _list(requirement.get("values"), f"{field}.values")
    if not all(isinstance(value, str) for value in values):
        raise SpecError(f"{field}.values", values, "values must be strings")
    try:
        return NodeSelectorRequirement(
            key=_string(requirement.get("key"), f"{field}.key"),
            operator=requirement.get("operator"),  # type: ignore[arg-type]  # validated by the constructor
            values=tuple(values),
        )
    except ConstraintError as error:
        raise SpecError(field, dict(requirement), str(error)) from None


def _affinity_terms(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return node_selector_terms(required, base)


def node_selector_terms(selector: object, base: str) -> tuple[NodeSelectorTerm, ...]:
    """A ``NodeSelector`` (``nodeSelectorTerms``, ORed) as placement evaluates it; ``base`` names it in errors."""
    terms = []
    for i, raw in enumerate(_list(_mapping(selector, base).get("nodeSelectorTerms"), f"{base}.nodeSelectorTerms")):
        where = f"{base}.nodeSelectorTerms[{i}]"
        term = _mapping(raw, where)
        expressions = tuple(
            _requirement(item, f"{where}.matchExpressions[{j}]")
            for j, item in enumerate(_list(term.get("matchExpressions"), f"{where}.matchExpressions"))
        )
        fields = tuple(
            _requirement(item, f"{where}.matchFields[{j}]")
            for j, item in enumerate(_list(term.get("matchFields"), f"{where}.matchFields"))
        )
        try:
            terms.append(NodeSelectorTerm(match_expressions=expressions, match_fields=fields))
        except ConstraintError as error:
            raise SpecError(f"{where}.matchFields", term.get("matchFields"), str(error)) from None
    if not terms:
        raise SpecError(f"{base}.nodeSelectorTerms", [], "must hold at least one term")
    return tuple(terms)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    tolerations = []
    for i, raw in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        where = f"spec.tolerations[{i}]"
        toleration = _mapping(raw, where)
        operator = _string(toleration.get("operator"), f"{where}.operator", default="Equal") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise SpecError(f"{where}.operator", operator, "must be Equal or Exists")
        key = _string(toleration.get("key"), f"{where}.key")
        value = _string(toleration.get("value"), f"{where}.value")
        effect = _string(toleration.get("effect"), f"{where}.effect")
        if effect not in _TOLERATION_EFFECTS:
            raise SpecError(f"{where}.effect", effect, f"must be empty or one of {', '.join(_TAINT_EFFECTS)}")
        if not key and operator != "Exists":
            raise SpecError(f"{where}.operator", operator, "must be Exists when the key is empty")
        if operator == "Exists" and value:
            raise SpecError(f"{where}.value", value, "must be empty when the operator is Exists")
        tolerations.append(Toleration(key=key, operator=operator, value=value, effect=effect))  # type: ignore[arg-type]
    return tuple(tolerations)


def node_constraints(pod: Mapping[str, Any]) -> NodeConstraints:
    """The node constraints of a pod that placement honours (see docs/architecture.md)."""
    spec = _mapping(pod.get("spec"), "spec")
    node_name = _string(spec.get("nodeName"), "spec.nodeName") or None
    return NodeConstraints(
        node_name=node_name,
        node_selector=tuple(sorted(_string_map(spec.get("nodeSelector"), "spec.nodeSelector").items())),
        affinity=_affinity_terms(spec),
        tolerations=_tolerations(spec),
    )


def pod_shape(pod: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS) -> PodShape:
    """A pod's effective request and node constraints: what placement needs of it."""
    return PodShape.of(pod_demand(pod, kinds), node_constraints(pod))


def unsupported_constraints(
    pod: Mapping[str, Any], kinds: tuple[ResourceKind, ...] = KINDS
) -> tuple[tuple[str, str], ...]:
    """Hard constraints of the pod that Phalanx does not implement, as ``(field, what it asks)`` pairs.

    The scheduler refuses such pods with an Event rather than placing them as if the constraint were
    not there: a silently ignored anti-affinity is worse than a pending pod.
    """
    spec = _mapping(pod.get("spec"), "spec")
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    found = []
    for kind, words in (
        ("podAffinity", "required inter-pod affinity"),
        ("podAntiAffinity", "required inter-pod anti-affinity"),
    ):
        rules = _mapping(affinity.get(kind), f"spec.affinity.{kind}")
        if rules.get("requiredDuringSchedulingIgnoredDuringExecution"):
            found.append((f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution", words))
    for i, constraint in enumerate(_list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")):
        if isinstance(constraint, Mapping) and constraint.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            found.append(
                (
                    f"spec.topologySpreadConstraints[{i}]",
                    "topology spread constraints with whenUnsatisfiable: DoNotSchedule",
                )
            )
    found.extend(unsupported_by_kinds(pod, kinds))  # what a kind of resource cannot place yet (topology/kinds.py)
    for key in ("containers", "initContainers"):
        for i, container in enumerate(_list(spec.get(key), f"spec.{key}")):
            ports = _list(_mapping(container, f"spec.{key}[{i}]").get("ports"), f"spec.{key}[{i}].ports")
            for j, port in enumerate(ports):
                if isinstance(port, Mapping) and port.get("hostPort"):
                    found.append((f"spec.{key}[{i}].ports[{j}].hostPort", "host ports (conflicts are not checked)"))
    return tuple(found)
