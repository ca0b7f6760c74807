"""Chaos, fast set: each fault real clusters produce, injected while gangs are scheduled over HTTP. The
cluster's invariant monitor checks every bind as it lands; every test ends with the gang minimums
checked and every gang that fits bound once the faults stop (liveness)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduler.gangs.gang_settings import GangSettings
from scheduler.ports.sim import FaultRule, Faults
from scheduler.settings import BindingSettings
from tests.reliability.chaos import (
    Gangs,
    api_errors,
    cordon,
    create,
    delete_some_pods,
    preemptions,
    priority_classes,
    settle,
    watch_trouble,
)
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import FAST, cluster, eventually, phalanx

SHAPE = "blocks=1,racks=2,nodes=4,gpus=8"  # 64 GPUs: the gangs below ask for more, so some must wait
#: Each seed once: the first with the deciding process writing itself, the second with two writer processes.
RUNS = pytest.mark.parametrize(("seed", "writers"), [(1, 0), (2, 2)], ids=["seed1-in-process", "seed2-writers"])
#: A gang whose members were deleted holds its room for them until its timeout; the liveness check, a fresh
#: scheduler, does not know of that room and waits for it to be let go. Five seconds keeps that wait short.
CHAOS = replace(FAST, gangs=GangSettings(default_timeout_seconds=5, timeout_jitter_seconds=0))


@RUNS
async def test_api_errors_on_every_verb_never_break_a_gang_and_all_that_fits_binds_once_they_stop(
    seed: int, writers: int
) -> None:
    faults = Faults(seed=seed)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where, CHAOS, writers=writers) as app:
        faults.rules.extend(api_errors())
        gangs = Gangs(seed)
        for _ in range(12):
            create(where, gangs.next()[1])
        # A dozen faults, each code among them (after a failed write, Events and status pause for a second:
        # forty faults, as this waited for before, took 15 s, most of it those pauses).
        await eventually(
            lambda: injected_codes(faults) == {"500", "429", "409"} and sum(faults.injected.values()) >= 12,
            what=lambda: f"a dozen faults, 500, 429 and 409 among them: {dict(faults.injected)}",
        )
        await eventually(lambda: len(where.bound()) >= 1, what="binding despite the faults")
        faults.clear()
        await settle(where, app)
        await check_invariants(where)


def injected_codes(faults: Faults) -> set[str]:
    return {code for key in faults.injected for code in ("500", "429", "409") if key.endswith(code)}


@RUNS
async def test_dropped_watches_and_expired_resource_versions_are_recovered_by_relisting(
    seed: int, writers: int
) -> None:
    faults = Faults(seed=seed)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where, CHAOS, writers=writers) as app:
        watch_trouble(faults)
        gangs = Gangs(seed)
        for _ in range(10):
            create(where, gangs.next()[1])
        await eventually(lambda: faults.injected["watch 410"] >= 1, what="an expired watch")
        await settle(where, app)
        faults.clear()
        for _ in range(3):
            create(where, gangs.next()[1])
        await settle(where, app)
        await check_invariants(where)


@RUNS
async def test_pods_deleted_while_their_gang_binds_leave_no_node_over_committed(seed: int, writers: int) -> None:
    slow = Faults(seed=seed, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.05, jitter=0.1)])
    settings = replace(CHAOS, binding=BindingSettings(concurrency=2, assume_timeout_seconds=5))
    async with cluster(SHAPE, faults=slow) as where, phalanx(where, settings, writers=writers) as app:
        gangs = Gangs(seed)
        for _ in range(10):
            create(where, gangs.next()[1])
        await eventually(lambda: app.state.assumed, what="gangs being bound")
        delete_some_pods(where, random.Random(seed), 0.3)
        for _ in range(3):
            create(where, gangs.next()[1])
        slow.clear()
        await settle(where, app)
        await check_invariants(where)


@RUNS
async def test_nodes_deleted_or_cordoned_during_a_cycle_get_no_new_pods(seed: int, writers: int) -> None:
    slow = Faults(seed=seed, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.05, jitter=0.1)])
    async with cluster(SHAPE, faults=slow) as where, phalanx(where, CHAOS, writers=writers) as app:
        gangs = Gangs(seed)
        for _ in range(10):
            create(where, gangs.next()[1])
        await eventually(lambda: app.state.assumed, what="gangs being bound")
        draw = random.Random(seed)
        nodes = sorted(n["metadata"]["name"] for n in where.store.objects(where.store.resource("v1", "Node")))
        deleted, cordoned = draw.sample(nodes, 2)
        where.store.delete(where.store.resource("v1", "Node"), None, deleted)
        cordon(where, cordoned)

        # What Phalanx placed before its watch showed the change may still land there (as with any scheduler:
        # the kubelet of a cordoned node still runs what was bound to it); what it places afterwards may not.
        def seen() -> bool:
            known = app.state.snapshot
            return known.node(deleted) is None and getattr(known.node(cordoned), "unschedulable", False)

        await eventually(seen, what="Phalanx to see the node deleted and the node cordoned")
        settled_before = set(where.bound()) | set(app.state.assumed)  # binds in flight may still land
        for _ in range(4):
            create(where, gangs.next()[1])
        slow.clear()
        await settle(where, app)
        await check_invariants(where)
        for pod, node in where.bound().items():
            if pod not in settled_before:
                assert node not in (deleted, cordoned), f"{pod} went to {node}, deleted or cordoned"
            assert node != deleted or pod in settled_before, f"{pod} was bound to the deleted node {node}"


@RUNS
async def test_group_objects_changed_or_deleted_mid_flight(seed: int, writers: int) -> None:
    slow = Faults(seed=seed, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.05, jitter=0.1)])
    async with cluster(SHAPE, faults=slow) as where, phalanx(where, CHAOS, writers=writers) as app:
        gangs = Gangs(seed)
        groups = []
        while len(groups) < 4:
            name, objects = gangs.next()
            create(where, objects)
            if objects[0]["kind"] == "PodGroup":
                groups.append(name)
        await eventually(lambda: app.state.assumed, what="gangs being bound")
        resource = where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
        grown, gone, *_ = groups
        group = where.store.get(resource, "team", grown)
        where.store.update(resource, "team", grown, {**group, "spec": {**group["spec"], "minMember": 9}})
        where.store.delete(resource, "team", gone)
        slow.clear()
        await settle(where, app)
        await check_invariants(where)
        members = [key for key in where.pods() if key.startswith(f"team/{grown}-")]
        orphans = [key for key in where.pods() if key.startswith(f"team/{gone}-")]
        for key in members:  # bound members stay bound; the rest wait, told that members are missing
            assert key in where.bound() or "do not exist yet" in where.condition(key)["message"]
        for key in orphans:
            assert key in where.bound() or "does not exist yet" in where.condition(key)["message"]


@RUNS
async def test_preemptions_under_api_errors_evict_whole_units_of_lower_priority_only(seed: int, writers: int) -> None:
    faults = Faults(seed=seed)
    async with cluster(SHAPE, faults=faults) as where, phalanx(where, CHAOS, writers=writers) as app:
        priority_classes(where, batch=10, production=1000)
        batch = Gangs(seed, priority_class="batch")
        for _ in range(10):
            create(where, batch.next()[1])
        await settle(where, app)
        faults.rules.extend(api_errors())
        production = Gangs(seed + 100, namespace="prod", priority_class="production")
        where.store.ensure_namespace("prod")
        for _ in range(4):
            create(where, production.next()[1])
        await eventually(lambda: preemptions(app) >= 1, what="a preemption under faults")
        faults.clear()
        await settle(where, app)
        await check_invariants(where)  # victims strictly below their preemptor, no gang left partly running
        assert where.monitor.checks["preemption"] >= 1
