"""The end-of-scenario check: the cluster's monitor (``scheduler.simulation.oracle``) saw nothing wrong at any
bind, and no gang is bound below its minimum now (gangs whose members the test deleted excepted)."""

from __future__ import annotations

from tests.scheduler.support import Cluster


def check_invariants(where: Cluster) -> None:
    where.monitor.check_gangs()
    where.monitor.check_nodes()
    where.monitor.assert_clean()
