"""Reading fields of raw API objects, where every wrong value becomes a :class:`SpecProblem`.

Gang sources read plain JSON dicts as the API returns them, and users write some of those by hand.
Each reader here checks the type and range of one field and, when it is wrong, raises a
:class:`SpecProblem` naming the object, the field, the value found and what would be valid. The
problem never leaves ``scheduler.gangs``: the index turns it into a :class:`GangError` value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.gangs.model import ObjectRef, Problem

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


class SpecProblem(Exception):
    """Something wrong with (or missing for) a gang, raised while compiling it."""

    def __init__(
        self,
        subject: ObjectRef,
        field: str,
        value: object,
        what: str,
        *,
        problem: Problem = Problem.INVALID,
        whole: bool = False,
    ) -> None:
        """``what`` says what is wrong with ``field``'s ``value``; ``whole``: it says everything (several fields
        are concerned, and it names them), and ``field`` is only where the condition points."""
        self.subject = subject
        self.field = field
        self.value = value
        self.problem = problem
        shown = _show(value)
        # A member pod's field is named with its pod ("pod ns/x metadata..."); when that pod is the
        # subject itself, saying so twice only makes the message harder to read.
        own = f"pod {subject.namespace}/{subject.name} "
        if subject.kind == "Pod" and field.startswith(own):
            field = field[len(own) :]
        self.message = f"{subject}: {field} {shown}{what}" if field and not whole else f"{subject}: {what}"
        super().__init__(self.message)


def _show(value: object) -> str:
    if value is _MISSING:
        return "is missing; "
    if value is _UNSHOWN:
        return "is set; "
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"is {text}; "


_MISSING = object()
_UNSHOWN = object()


def missing() -> object:
    """The value to report for a field that is absent."""
    return _MISSING


def present() -> object:
    """The value to report for a field whose presence, not its value, is the problem."""
    return _UNSHOWN


def child(value: object, key: str) -> object:
    """``value[key]`` when ``value`` is a mapping, else None (malformed parents read as absent)."""
    # ``type is dict`` first: a JSON parser makes only dicts, and the ABC's check costs ten times more.
    return value.get(key) if type(value) is dict or isinstance(value, Mapping) else None


def path(obj: object, dotted: str) -> object:
    for part in dotted.split("."):
        obj = child(obj, part)
    return obj


def mapping(subject: ObjectRef, obj: object, dotted: str) -> Mapping[str, Any]:
    value = path(obj, dotted)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecProblem(subject, dotted, value, "it must be an object")
    return value


def items(subject: ObjectRef, obj: object, dotted: str, *, shown: str | None = None) -> list[Any]:
    value = path(obj, dotted)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecProblem(subject, shown or dotted, value, "it must be a list")
    return value


def string(subject: ObjectRef, obj: object, dotted: str, *, required: bool = False) -> str | None:
    value = path(obj, dotted)
    if value is None or value == "":
        if required:
            raise SpecProblem(subject, dotted, missing(), "it must name an object")
        return None
    if not isinstance(value, str):
        raise SpecProblem(subject, dotted, value, "it must be a string")
    return value


def integer(
    subject: ObjectRef,
    obj: object,
    dotted: str,
    *,
    minimum: int | None = None,
    required: bool = False,
    shown: str | None = None,
) -> int | None:
    """An integer field (JSON number, as the API sends int32 fields), at least ``minimum``.

    ``shown`` is the field's full path for messages when ``obj`` is a part of the object.
    """
    value = path(obj, dotted)
    where = shown or dotted
    if value is None:
        if required:
            raise SpecProblem(subject, where, missing(), f"it must be an integer{_at_least(minimum)}")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecProblem(subject, where, value, f"it must be an integer{_at_least(minimum)}")
    if minimum is not None and value < minimum:
        raise SpecProblem(subject, where, value, f"it must be an integer{_at_least(minimum)}")
    return value


def _at_least(minimum: int | None) -> str:
    return "" if minimum is None else f" of at least {minimum}"


def integer_text(text: str) -> int | None:
    """An annotation value as an integer, or None when it is not written as one."""
    stripped = text.strip()
    return int(stripped) if _INTEGER.match(stripped) else None


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid node label key, or None. (``prefix/name``, as the API validates.)"""
    if not isinstance(key, str) or not key:
        return "a topology key must be a node label key such as example.com/rack"
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"the prefix {prefix!r} of a label key must be a DNS subdomain such as example.com"
    if not _LABEL_NAME.match(name):
        return (
            "a label key's name must be 63 characters or fewer, start and end with a letter or digit, "
            "and contain only letters, digits, '-', '_' and '.'"
        )
    return None


def topology_key(subject: ObjectRef, value: object, field: str) -> str:
    problem = label_key_problem(value)
    if problem is not None:
        raise SpecProblem(subject, field, value, problem)
    assert isinstance(value, str)
    return value


def timestamp(value: object) -> float | None:
    """An RFC 3339 timestamp (``metadata.creationTimestamp``) as seconds since the epoch."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        return (self.key in labels) == (self.operator == "Exists")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``: every requirement must hold. An empty selector matches all."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


def label_selector(subject: ObjectRef, raw: object, field: str) -> LabelSelector:
    """Parse ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists, DoesNotExist)."""
    if raw is None:
        return LabelSelector(())
    if not isinstance(raw, Mapping):
        raise SpecProblem(subject, field, raw, "it must be a label selector with matchLabels or matchExpressions")
    requirements: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SpecProblem(subject, f"{field}.matchLabels", match_labels, "it must map label keys to values")
    for key, value in match_labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SpecProblem(subject, f"{field}.matchLabels", {key: value}, "keys and values must be strings")
        requirements.append(Requirement(key, "In", frozenset({value})))
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SpecProblem(subject, f"{field}.matchExpressions", expressions, "it must be a list")
    for i, expression in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        key, operator, values = child(expression, "key"), child(expression, "operator"), child(expression, "values")
        values = [] if values is None else values
        if not isinstance(key, str) or not key:
            raise SpecProblem(subject, f"{where}.key", key, "it must be a label key")
        if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
            raise SpecProblem(subject, f"{where}.values", values, "it must be a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise SpecProblem(subject, f"{where}.values", values, f"operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SpecProblem(subject, f"{where}.values", values, f"operator {operator} takes no values")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise SpecProblem(subject, f"{where}.operator", operator, "it must be In, NotIn, Exists or DoesNotExist")
        requirements.append(Requirement(key, str(operator), frozenset(values)))
    return LabelSelector(tuple(requirements))
