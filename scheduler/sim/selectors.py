"""``labelSelector`` and ``fieldSelector`` query strings, parsed as the API server parses them.

Labels: comma-separated requirements, each ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k>n`` or ``k<n``. Fields: ``path=value``, ``path==value`` or
``path!=value`` over the fields each resource supports (``metadata.name`` and ``metadata.namespace``
everywhere; for pods also ``spec.nodeName``, ``spec.schedulerName`` and ``status.phase``). An
unknown field or a malformed selector is a 400, as on a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.sim.errors import ApiError

_POD_FIELDS = ("spec.nodeName", "spec.schedulerName", "status.phase")
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=<>()]+)\s+(in|notin)\s*\((.*)\)\s*$")
_COMPARE = re.compile(r"^\s*([^\s!=<>()]+)\s*(==|!=|=|>|<)\s*([^\s]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


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
        for part in self.path.split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
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


def parse_fields(text: str | None, kind: str) -> tuple[FieldRequirement, ...]:
    if not text:
        return ()
    allowed = _COMMON_FIELDS + (_POD_FIELDS if kind == "Pod" else ())
    requirements: list[FieldRequirement] = []
    for part in _split(text):
        found = _COMPARE.match(part)
        if not found or found.group(2) in (">", "<"):
            raise ApiError(400, f"invalid field selector: {part.strip()!r}")
        path, operator, value = found.groups()
        if path not in allowed:
            raise ApiError(400, f'"{path}" is not a known field selector: only "{", ".join(allowed)}"')
        requirements.append(FieldRequirement(path, value, operator != "!="))
    return tuple(requirements)


def selector(label_selector: str | None = None, field_selector: str | None = None, *, kind: str = "") -> Selector:
    return Selector(parse_labels(label_selector), parse_fields(field_selector, kind))
