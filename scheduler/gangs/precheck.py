"""The ``minResources`` pre-check of scheduler-plugins and Volcano groups, as a pure function.

A group that declares minimum resources beyond what the whole cluster has free cannot fit however it
is packed, so it fails fast with that reason instead of paying for a placement search.
"""

from __future__ import annotations

from collections.abc import Mapping

from topology import Snapshot


def min_resources_problem(gang: str, min_resources: Mapping[str, int], snapshot: Snapshot) -> str | None:
    """Why the cluster's total free capacity cannot cover ``min_resources``, or None when it can."""
    if not min_resources:
        return None
    free = snapshot.free
    columns = {name: i for i, name in enumerate(snapshot.resources)}
    short = []
    for name, wanted in sorted(min_resources.items()):
        column = columns.get(name)
        available = int(free[:, column].clip(min=0).sum()) if column is not None else 0
        if wanted > available:
            short.append(f"{name} {_amount(name, wanted)} (free: {_amount(name, available)})")
    if not short:
        return None
    return f"Gang {gang} declares minResources the cluster does not have free in total: {', '.join(short)}."


def _amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value}m"
    if resource == "memory" or resource.startswith(("hugepages-", "ephemeral-storage")):
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
    return str(value)
