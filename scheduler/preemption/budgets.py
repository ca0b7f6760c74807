"""PodDisruptionBudgets as preemption reads them: which pods each selects and how many may still go.

Like kube-scheduler, Phalanx does not refuse to preempt a pod a budget protects; it prefers victims whose
eviction violates no budget, and counts violations when it must (``topology.preemption`` ranks by them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.ports.port import Change

log = structlog.get_logger("phalanx.preemption")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        return False  # an operator the API would have refused: select nothing rather than everything


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    match_labels: tuple[tuple[str, str], ...]
    requirements: tuple[Requirement, ...]
    #: ``status.disruptionsAllowed``: how many of its pods may go now (the disruption controller keeps it).
    allowed: int
    #: A budget without a selector selects no pod (policy/v1); an empty selector selects every pod.
    selects_nothing: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selects_nothing or namespace != self.namespace:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            requirement.matches(labels) for requirement in self.requirements
        )


def read_budget(obj: Mapping[str, Any]) -> Budget | None:
    metadata = obj.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    allowed = (obj.get("status") or {}).get("disruptionsAllowed")
    if not isinstance(selector, Mapping):
        return Budget(namespace, name, (), (), 0, selects_nothing=True)
    labels = selector.get("matchLabels") or {}
    requirements = tuple(
        Requirement(
            str(item.get("key", "")), str(item.get("operator", "")), frozenset(map(str, item.get("values") or ()))
        )
        for item in selector.get("matchExpressions") or ()
        if isinstance(item, Mapping)
    )
    return Budget(
        namespace=namespace,
        name=name,
        match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())) if isinstance(labels, Mapping) else (),
        requirements=requirements,
        # A budget the disruption controller has not counted yet allows nothing, as the eviction API says.
        allowed=allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
    )


class Budgets:
    """The PodDisruptionBudgets of the cluster, by namespace."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, Budget]] = {}

    def __len__(self) -> int:
        return sum(len(budgets) for budgets in self._by_namespace.values())

    def apply(self, change: Change) -> None:
        metadata = change.object.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        if change.type == "DELETED":
            self._by_namespace.get(namespace, {}).pop(name, None)
            return
        budget = read_budget(change.object)
        if budget is not None:
            self._by_namespace.setdefault(namespace, {})[name] = budget

    def known(self) -> set[tuple[str, str]]:
        return {(namespace, name) for namespace, budgets in self._by_namespace.items() for name in budgets}

    def covering(self, namespace: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The budgets that select a pod, by ``namespace/name``."""
        budgets = self._by_namespace.get(namespace)
        if not budgets:
            return ()
        return tuple(budget.key for budget in budgets.values() if budget.selects(namespace, labels))

    def allowed(self) -> dict[str, int]:
        return {budget.key: budget.allowed for budgets in self._by_namespace.values() for budget in budgets.values()}
