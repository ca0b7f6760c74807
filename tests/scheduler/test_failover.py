"""Leader election and restarts: never two binders, and a gang interrupted mid-bind ends fully bound."""

import contextlib
from dataclasses import replace

from scheduler.app import Phalanx
from scheduler.ports.sim import FaultRule, Faults
from scheduler.settings import BindingSettings
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import FAST, cluster, elected, eventually, gpu_pod, pfn, phalanx


def binds(app: Phalanx) -> float:
    return app.metrics.registry.value("phalanx_api_writes_total", {"kind": "bind"}) or 0.0


async def test_two_replicas_never_both_bind_and_the_follower_takes_over() -> None:
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8") as where, contextlib.AsyncExitStack() as stack:
        where.store.ensure_namespace("kube-system")
        first = await stack.enter_async_context(phalanx(where, leader_election=elected("replica-a")))
        second = await stack.enter_async_context(phalanx(where, leader_election=elected("replica-b")))
        leader = await eventually(
            lambda: first if first.elector.leading else second if second.elector.leading else None, what="a leader"
        )
        follower = second if leader is first else first
        for i in range(2):
            where.create(gpu_pod(f"a{i}", annotations=pfn("a", 2)))
        await eventually(lambda: len(where.bound()) == 2, what="the first gang bound")
        # The store shows a bind before its answer reaches the binder, which counts it then.
        await eventually(lambda: binds(leader) + binds(follower) == 2, what="both binds answered")
        assert not follower.elector.leading and binds(follower) == 0 and binds(leader) == 2

        await stack.aclose()  # stop both, leader first released its lease on the way out
        async with phalanx(where, leader_election=elected("replica-b")) as survivor:
            await eventually(lambda: survivor.elector.leading, what="the follower leading")
            for i in range(2):
                where.create(gpu_pod(f"b{i}", annotations=pfn("b", 2)))
            await eventually(lambda: len(where.bound()) == 4, what="the second gang bound by the new leader")
            await eventually(lambda: binds(survivor) == 2, what="both binds answered to the new leader")
        lease = where.store.get(where.store.resource("coordination.k8s.io/v1", "Lease"), "kube-system", "phalanx")
        assert lease["spec"]["leaseTransitions"] >= 1
        await check_invariants(where)


async def test_a_follower_takes_over_when_the_leader_stops_renewing() -> None:
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where:
        where.store.ensure_namespace("kube-system")
        async with phalanx(where, leader_election=elected("replica-a")) as gone:
            await eventually(lambda: gone.elector.leading, what="the first replica leading")
        # The first replica released the lease on the way out; simulate a crash instead by taking it back.
        leases = where.store.resource("coordination.k8s.io/v1", "Lease")
        lease = where.store.get(leases, "kube-system", "phalanx")
        where.store.update(
            leases,
            "kube-system",
            "phalanx",
            {**lease, "spec": {**lease["spec"], "holderIdentity": "crashed", "leaseDurationSeconds": 1}},
        )
        async with phalanx(where, leader_election=elected("replica-b")) as survivor:
            await eventually(lambda: survivor.elector.leading, what="taking over an unrenewed lease")
            where.create(gpu_pod("p0", annotations=pfn("p", 1)))
            await eventually(lambda: "team/p0" in where.bound(), what="scheduling after the takeover")


async def test_a_restart_in_the_middle_of_binding_a_gang_ends_fully_bound_without_overcommit() -> None:
    slow_binds = Faults(seed=3, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.15)])
    settings = replace(FAST, binding=BindingSettings(concurrency=2, assume_timeout_seconds=5))
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8", faults=slow_binds) as where:
        async with phalanx(where, settings):
            for i in range(8):
                where.create(gpu_pod(f"w{i}", annotations=pfn("big", 8)))
            await eventually(lambda: len(where.bound()) >= 2, what="binding under way")
        interrupted = len(where.bound())
        assert 2 <= interrupted < 8, f"expected a gang caught mid-bind, found {interrupted} of 8 bound"
        where.create(gpu_pod("late", annotations=pfn("late", 1)))  # competes for the nodes left
        async with phalanx(where, settings):
            await eventually(
                lambda: {f"team/w{i}" for i in range(8)} <= set(where.bound()),
                what="the rest of the gang bound by the restarted scheduler",
            )
        await check_invariants(where)
        assert "team/late" not in where.bound()  # the cluster is full: the gang's members took what it needed
