"""``labelSelector`` and ``fieldSelector`` query strings, parsed as the API server parses them.

Labels: comma-separated requirements, each ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k>n`` or ``k<n``. Fields: ``path=value``, ``path==value`` or
``path!=value`` over exactly the field labels the API server supports for each resource
(:data:`FIELD_LABELS`; ``metadata.name``, and ``metadata.namespace`` where the resource is namespaced,
everywhere else). Booleans read ``true``/``false`` and an unset one is ``false``, as the server
renders them. An unknown field label or a malformed selector is a 400, worded as on a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.ports.sim.status import ApiError

_META = ("metadata.name", "metadata.namespace")
_OBJECT_REFERENCE = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
#: Field labels by (API group, kind), as a 1.36 API server answers them (other kinds: the metadata ones).
FIELD_LABELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (
        *_META,
        "spec.nodeName",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.restartPolicy",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "Node"): ("metadata.name", "spec.unschedulable"),
    ("", "Namespace"): ("metadata.name", "status.phase"),
    ("", "Event"): (
        *_META,
        *(f"involvedObject.{field}" for field in _OBJECT_REFERENCE),
        "reason",
        "reportingComponent",
        "type",
        "source",
    ),
    ("events.k8s.io", "Event"): (
        *_META,
        *(f"regarding.{field}" for field in _OBJECT_REFERENCE),
        "reason",
        "reportingController",
        "type",
    ),
}
_PATHS = {"source": "source.component"}
_BOOLEANS = frozenset({"spec.unschedulable", "spec.hostNetwork"})
_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=<>()]+)\s+(in|notin)\s*\((.*)\)\s*$")
_COMPARE = re.compile(r"^\s*([^\s!=<>()]+)\s*(==|!=|=|>|<)\s*([^\s]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement on labels: operators ``in``, ``notin``, ``=``, ``!=``, ``exists``, ``!``, ``>``, ``<``."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def __call__(self, labels: Mapping[str, Any]) -> bool:
        value = labels.get(self.key)
        if self.operator in ("in", "="):
            return value in self.values
        if self.operator in ("notin", "!="):
            return value not in self.values
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!":
            return self.key not in labels
        try:
            number, bound = int(value), int(next(iter(self.values)))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return number > bound if self.operator == ">" else number < bound


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: str
    value: str
    equal: bool

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        current: Any = obj
        for part in _PATHS.get(self.path, self.path).split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
        if self.path in _BOOLEANS:
            found = "true" if current is True else "false"
        else:
            found = "" if current is None else str(current)
        return (found == self.value) == self.equal


@dataclass(frozen=True, slots=True)
class Selector:
    """Label and field requirements; an empty selector matches everything."""

    label: tuple[LabelRequirement, ...] = ()
    field: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.label:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not all(requirement(labels) for requirement in self.label):
                return False
        return all(requirement(obj) for requirement in self.field)

    @property
    def empty(self) -> bool:
        return not self.label and not self.field


def _split(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def parse_labels(text: str | None) -> tuple[LabelRequirement, ...]:
    if not text:
        return ()
    requirements: list[LabelRequirement] = []
    for part in _split(text):
        if found := _SET_REQUIREMENT.match(part):
            key, operator, values = found.group(1), found.group(2), found.group(3)
            chosen = frozenset(value.strip() for value in values.split(",") if value.strip())
            if not chosen:
                raise ApiError(400, f"unable to parse requirement: {part.strip()!r}: values must not be empty")
            requirements.append(LabelRequirement(key, operator, chosen))
        elif found := _COMPARE.match(part):
            key, operator, value = found.groups()
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(value):
                raise ApiError(400, f"unable to parse requirement: {part.strip()!r}: not a label key and value")
            if operator in (">", "<"):
                try:
                    int(value)
                except ValueError:
                    raise ApiError(
                        400, f"unable to parse requirement: {part.strip()!r}: {value!r} is not an integer"
                    ) from None
            requirements.append(LabelRequirement(key, "=" if operator == "==" else operator, frozenset({value})))
        elif found := _EXISTS.match(part):
            negated, key = found.groups()
            requirements.append(LabelRequirement(key, "!" if negated else "exists"))
        else:
            raise ApiError(400, f"unable to parse requirement: {part.strip()!r}")
    return tuple(requirements)


def field_labels(group: str, kind: str, *, namespaced: bool = True) -> tuple[str, ...]:
    return FIELD_LABELS.get((group, kind)) or (_META if namespaced else _META[:1])


def parse_fields(text: str | None, allowed: tuple[str, ...]) -> tuple[FieldRequirement, ...]:
    if not text:
        return ()
    requirements: list[FieldRequirement] = []
    for part in _split(text):
        found = _COMPARE.match(part)
        if not found or found.group(2) in (">", "<"):
            raise ApiError(400, f"invalid field selector: {part.strip()!r}")
        path, operator, value = found.groups()
        if path not in allowed:
            raise ApiError(400, f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, operator != "!="))
    return tuple(requirements)


def selector(
    label_selector: str | None = None,
    field_selector: str | None = None,
    *,
    group: str = "",
    kind: str = "",
    namespaced: bool = True,
) -> Selector:
    """The selector a list or watch asks for, on a resource of ``group`` and ``kind``."""
    allowed = field_labels(group, kind, namespaced=namespaced)
    return Selector(parse_labels(label_selector), parse_fields(field_selector, allowed))
