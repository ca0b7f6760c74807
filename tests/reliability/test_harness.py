"""The checks of the chaos tests, checked: they look when Phalanx has finished what it started, not before.

Each test makes Phalanx start a gang's binds at the worst moment for the check (between its looks, or just
before it), with the binds answered late, so that a check that looks too early fails every time."""

from __future__ import annotations

from scheduler.ports.sim import FaultRule, Faults
from scheduler.settings import Settings
from tests.reliability.chaos import create, settle, what_is_unsettled
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

SHAPE = "blocks=1,racks=1,nodes=2,gpus=8"
#: Each bind is answered a second late, so the gang's second member lands a second after its first: a check
#: that looks in between sees it partly bound.
SLOW_BINDS = FaultRule(verbs=frozenset({"bind"}), latency=1.0)


async def fill_then_wait(where: Cluster) -> None:
    """The two nodes full of plain pods, then a gang of two 8-GPU pods told it does not fit."""
    create(where, [gpu_pod(f"fill-{i}") for i in range(2)])
    await eventually(lambda: len(where.bound()) == 2, what="the nodes filled")
    create(where, [gpu_pod(f"late-{i}", annotations=pfn("late", 2)) for i in range(2)])
    await eventually(lambda: all(where.condition(f"team/late-{i}") for i in range(2)), what="the gang told why")


def free_the_nodes(where: Cluster) -> None:
    for i in range(2):
        where.delete_pod(f"team/fill-{i}")


async def test_settle_looks_again_when_a_gang_starts_binding_while_liveness_is_checked() -> None:
    faults = Faults(seed=1)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where) as app:
        await fill_then_wait(where)
        faults.rules.append(SLOW_BINDS)
        check_liveness = where.monitor.feasible_pending

        async def while_the_gang_starts_binding(settings: Settings) -> set[str]:
            feasible = await check_liveness(settings)  # before the room is freed: nothing pending fits
            free_the_nodes(where)
            await eventually(lambda: any(f"team/late-{i}" in where.bound() for i in range(2)), what="a first bind")
            return feasible

        where.monitor.feasible_pending = while_the_gang_starts_binding  # type: ignore[method-assign]
        problems = await what_is_unsettled(where, app)
        assert any("being bound" in problem for problem in problems), problems
        assert "pods were bound or deleted while liveness was checked" in problems
        where.monitor.feasible_pending = check_liveness  # type: ignore[method-assign]
        await settle(where, app)
        assert {"team/late-0", "team/late-1"} <= set(where.bound())
        await check_invariants(where)


async def test_the_gang_check_waits_for_binds_in_flight() -> None:
    faults = Faults(seed=1)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where) as app:
        await fill_then_wait(where)
        faults.rules.append(SLOW_BINDS)
        free_the_nodes(where)
        await eventually(lambda: any(f"team/late-{i}" in where.bound() for i in range(2)), what="a first bind")
        assert app.binder.in_flight == 1  # the gang is partly bound now: the check must not look yet
        await check_invariants(where)
        assert {"team/late-0", "team/late-1"} <= set(where.bound())
