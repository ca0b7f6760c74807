"""The end-of-scenario check: the cluster's monitor (``scheduler.simulation.oracle``) saw nothing wrong at any
bind, and, once every Phalanx on the cluster is idle, no gang is bound below its minimum (gangs whose members
the test deleted excepted)."""

from __future__ import annotations

from tests.scheduler.support import Cluster, eventually


def busy(where: Cluster) -> list[str]:
    """What the Phalanx processes on the cluster are still writing: a gang is bound one request at a time (a
    member whose bind was refused is retried until it lands), and a preempted unit is deleted one pod at a
    time, so until both are done a gang may be seen partly bound or partly evicted."""
    found = []
    for app in where.monitor.apps:
        if app.binder.in_flight:
            found.append(f"{app.binder.in_flight} gangs being bound")
        if not app.evictor.idle:
            found.append("preemption writes under way")
    return found


async def check_invariants(where: Cluster, *, timeout: float = 60.0) -> None:
    await eventually(lambda: not busy(where), timeout=timeout, what=lambda: f"Phalanx idle: {busy(where)}")
    where.monitor.check_gangs()
    where.monitor.check_nodes()
    where.monitor.assert_clean()
