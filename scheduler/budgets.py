"""PodDisruptionBudgets as preemption reads them: which pods each selects and how many may still go.

Like kube-scheduler, Phalanx does not refuse to preempt a pod a budget protects; it prefers victims whose
eviction violates no budget, and counts violations when it must (``topology.preemption`` ranks by them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.gangs.fields import LabelSelector, SpecProblem, label_selector
from scheduler.gangs.model import ObjectRef
from scheduler.ports.port import Change

log = structlog.get_logger("phalanx.preemption")


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    #: None when the budget has no selector, which selects no pod (policy/v1); an empty one selects all.
    selector: LabelSelector | None
    #: ``status.disruptionsAllowed``: how many of its pods may go now (the disruption controller keeps it).
    allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and namespace == self.namespace and self.selector.matches(labels)


def read_budget(obj: Mapping[str, Any]) -> Budget | None:
    metadata = obj.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    raw = (obj.get("spec") or {}).get("selector")
    allowed = (obj.get("status") or {}).get("disruptionsAllowed")
    selector = None
    if raw is not None:
        try:
            selector = label_selector(ObjectRef("policy", "PodDisruptionBudget", namespace, name), raw, "spec.selector")
        except SpecProblem as problem:  # the API server validates selectors: only a hand-made object gets here
            log.warning("PodDisruptionBudget ignored: its selector cannot be read", budget=f"{namespace}/{name}",
                        problem=str(problem))  # fmt: skip
    return Budget(
        namespace=namespace,
        name=name,
        selector=selector,
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
