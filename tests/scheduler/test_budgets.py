"""PodDisruptionBudgets as preemption reads them (scheduler.preemption.budgets)."""

from __future__ import annotations

from typing import Any

from scheduler.budgets import Budgets
from scheduler.ports.port import Change


def pdb(name: str, selector: dict[str, Any] | None, allowed: int | None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "namespace": "team"}, "spec": {}, "status": {}}
    if selector is not None:
        obj["spec"]["selector"] = selector
    if allowed is not None:
        obj["status"]["disruptionsAllowed"] = allowed
    return obj


def test_budgets_select_pods_as_label_selectors_do_and_count_what_they_allow() -> None:
    budgets = Budgets()
    budgets.apply(Change("ADDED", pdb("web", {"matchLabels": {"app": "web"}}, 1)))
    budgets.apply(Change("ADDED", pdb("tier", {"matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["db", "cache"]},
        {"key": "canary", "operator": "DoesNotExist"},
    ]}, 0)))  # fmt: skip
    budgets.apply(Change("ADDED", pdb("everything", {}, 3)))  # an empty selector selects every pod
    budgets.apply(Change("ADDED", pdb("nothing", None, 5)))  # no selector selects none
    budgets.apply(Change("ADDED", pdb("uncounted", {"matchLabels": {"app": "new"}}, None)))
    assert budgets.covering("team", {"app": "web"}) == ("team/web", "team/everything")
    assert budgets.covering("team", {"tier": "db"}) == ("team/tier", "team/everything")
    assert budgets.covering("team", {"tier": "db", "canary": "1"}) == ("team/everything",)
    assert budgets.covering("other", {"app": "web"}) == ()  # a budget is namespaced
    assert budgets.allowed()["team/uncounted"] == 0  # not counted by the controller yet: allows nothing
    budgets.apply(Change("DELETED", pdb("web", None, None)))
    assert budgets.covering("team", {"app": "web"}) == ("team/everything",)
    assert len(budgets) == 4
