"""The checks of the chaos tests, checked: they look when Phalanx has finished what it started, not before.

Each test leaves a gang half bound at the worst moment for the check (while ``settle``'s liveness pass runs,
or just before the gang check): its first member's bind lands, its second keeps failing (503, retried) until
the test lifts the fault. A check that looks too early sees the gang half bound, every time."""

from __future__ import annotations

import anyio

from scheduler.ports.sim import Faults
from scheduler.settings import Settings
from tests.reliability.chaos import create, settle, what_is_unsettled
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

SHAPE = "blocks=1,racks=1,nodes=2,gpus=8"
GANG = ("team/late-0", "team/late-1")


async def fill_then_wait(where: Cluster) -> None:
    """The two nodes full of plain pods, then a gang of two 8-GPU pods told it does not fit."""
    create(where, [gpu_pod(f"fill-{i}") for i in range(2)])
    await eventually(lambda: len(where.bound()) == 2, what="the nodes filled")
    create(where, [gpu_pod(f"late-{i}", annotations=pfn("late", 2)) for i in range(2)])
    await eventually(lambda: all(where.condition(pod) for pod in GANG), what="the gang told why")


async def bind_half(where: Cluster, faults: Faults) -> str:
    """Free the nodes, and let the gang's first bind land while its second fails until the test lifts it (the
    binder binds a gang's first member alone, then the rest); the member held back."""
    faults.failing[("bind", GANG[1])] = 503
    for i in range(2):
        where.delete_pod(f"team/fill-{i}")
    await eventually(lambda: GANG[0] in where.bound() or faults.injected["bind 503"], what="a first bind")
    held = GANG[1]
    if GANG[0] not in where.bound():  # the other member is bound first: let it, and hold this one back
        held = GANG[0]
        faults.failing = {("bind", held): 503}
    await eventually(lambda: [pod for pod in GANG if pod in where.bound()] == [GANG[1 - GANG.index(held)]],
                     what="the gang half bound")  # fmt: skip
    return held


async def test_settle_looks_again_when_a_gang_starts_binding_while_liveness_is_checked() -> None:
    faults = Faults(seed=1)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where) as app:
        await fill_then_wait(where)
        check_liveness = where.monitor.feasible_pending

        async def while_the_gang_starts_binding(settings: Settings) -> set[str]:
            feasible = await check_liveness(settings)  # before the room is freed: nothing pending fits
            await bind_half(where, faults)
            return feasible

        where.monitor.feasible_pending = while_the_gang_starts_binding  # type: ignore[method-assign]
        problems = await what_is_unsettled(where, app)
        assert "1 gangs still being bound" in problems and any("being bound: [" in p for p in problems), problems
        assert "pods were bound or deleted while liveness was checked" in problems
        where.monitor.feasible_pending = check_liveness  # type: ignore[method-assign]
        faults.failing.clear()
        await settle(where, app)
        assert set(GANG) <= set(where.bound())
        await check_invariants(where)


async def test_the_gang_check_waits_for_binds_in_flight() -> None:
    faults = Faults(seed=1)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where) as app:
        await fill_then_wait(where)
        await bind_half(where, faults)
        async with anyio.create_task_group() as group:
            group.start_soon(check_invariants, where)  # fails if it looks while the gang is half bound
            await eventually(lambda: faults.injected["bind 503"] >= 2, what="the held bind refused again")
            assert app.binder.in_flight == 1
            faults.failing.clear()
        assert set(GANG) <= set(where.bound())
