"""What the binding cycle does when the API or the cluster does not cooperate."""

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import anyio
import pytest
import structlog

from scheduler import binding
from scheduler.binding import PLACE_AGAIN_IN_A_ROW
from scheduler.logs import configure
from scheduler.ports.kube.writers import Writers
from scheduler.ports.sim import FaultRule, Faults
from scheduler.settings import BindingSettings, PermitSettings
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import FAST, WAKES_ONLY, cluster, eventually, gpu_pod, pfn, phalanx


async def test_transient_bind_failures_are_retried_and_never_bind_half_a_gang() -> None:
    faults = Faults(seed=1, rules=[FaultRule(verbs=frozenset({"bind"}), error_rate=1.0, codes=(500, 429))])
    async with cluster("blocks=1,racks=1,nodes=3,gpus=8", faults=faults) as where, phalanx(where):
        for i in range(3):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 3)))
        await eventually(lambda: sum(faults.injected.values()) >= 3, what="bind failures injected")
        assert where.bound() == {}  # the first bind of the gang failed: nothing else was sent
        faults.rules.clear()
        await eventually(lambda: len(where.bound()) == 3, what="the gang bound once the API recovers")
        await check_invariants(where)


async def test_a_refused_first_bind_binds_nothing_and_says_why() -> None:
    faults = Faults(seed=1)
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8", faults=faults) as where, phalanx(where):
        faults.bind_failures.update({"team/w0": 403, "team/w1": 403})
        for i in range(2):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
        event = await eventually(lambda: where.events("FailedBinding"), what="FailedBinding Event")
        assert "was refused" in event[0]["note"]
        assert where.bound() == {}
        faults.bind_failures.clear()
        await eventually(lambda: len(where.bound()) == 2, what="bound after the refusal is lifted")
        await check_invariants(where)


@pytest.mark.parametrize("writers", [0, 1])
async def test_a_member_refused_among_the_rest_of_its_gang_is_told_and_tried_alone_until_the_gang_is_whole(
    writers: int,
) -> None:
    """The members after the first are bound together; one the API refuses keeps its room (half the gang is
    bound), gets a FailedBinding Event, and is tried again alone with backoff until the refusal is lifted."""
    faults = Faults(seed=1)
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8", faults=faults) as where, phalanx(where, writers=writers):
        faults.bind_failures["team/w3"] = 403
        for i in range(4):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 4)))
        event = await eventually(lambda: where.events("FailedBinding"), what="the refusal told")
        assert event[0]["regarding"]["name"] == "w3" and "was refused" in event[0]["note"]
        await eventually(lambda: len(where.bound()) == 3, what="the rest of the gang bound")
        await eventually(lambda: faults.injected["bind 403"] >= 2, what="the refused member tried again")
        faults.bind_failures.clear()
        await eventually(lambda: len(where.bound()) == 4, what="the gang whole once the refusal is lifted")
        await check_invariants(where)


async def test_the_lines_logged_while_a_gang_binds_name_the_gang_and_a_pod_retried_alone_names_the_pod(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator follows a gang through the log by its key: lines that do not say it themselves carry it."""
    before = structlog.get_config()
    configure("info", "json")
    try:
        faults = Faults(seed=1)
        async with cluster("blocks=1,racks=1,nodes=4,gpus=8", faults=faults) as where, phalanx(where):
            faults.bind_failures["team/w3"] = 403
            for i in range(4):
                where.create(gpu_pod(f"w{i}", annotations=pfn("train", 4)))
            await eventually(lambda: where.events("FailedBinding"), what="the refusal told")
    finally:
        structlog.configure(**before)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    refused = [line for line in lines if line["event"] == "bind refused"]
    assert refused and all(line["gang"] == "pfn:team/train" and line["pod"] == "team/w3" for line in refused)


async def test_a_member_deleted_while_its_gang_binds_is_dropped_and_the_rest_bound() -> None:
    slow = Faults(seed=2, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.3)])
    settings = replace(FAST, binding=BindingSettings(concurrency=1, assume_timeout_seconds=5))
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8", faults=slow) as where, phalanx(where, settings):
        for i in range(3):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 3)))
        await eventually(lambda: len(where.bound()) == 1, what="the first member bound")
        unbound = next(pod for pod in ("team/w1", "team/w2") if pod not in where.bound())
        where.delete_pod(unbound)
        await eventually(lambda: len(where.bound()) == 2, what="the remaining member bound")
        where.create(gpu_pod("w3", annotations=pfn("train", 3)))  # the replacement joins the running gang
        await eventually(lambda: "team/w3" in where.bound(), what="the replacement bound")
        await check_invariants(where)


async def test_a_gang_is_placed_again_when_another_scheduler_takes_its_node_before_its_bind() -> None:
    slow = Faults(seed=4, rules=[FaultRule(verbs=frozenset({"bind"}), latency=0.5)])
    settings = replace(FAST, binding=BindingSettings(concurrency=1, assume_timeout_seconds=5))
    async with cluster("blocks=1,racks=1,nodes=3,gpus=8", faults=slow) as where, phalanx(where, settings) as app:
        where.create(gpu_pod("first", annotations=pfn("first", 1)))  # its slow bind holds the only slot
        await eventually(lambda: "team/first" in app.state.assumed, what="the first pod assumed")
        where.create(gpu_pod("second", annotations=pfn("second", 1)))
        await eventually(lambda: "team/second" in app.state.assumed, what="the second pod assumed, waiting to bind")
        planned = app.state.assumed["team/second"].node
        where.create(gpu_pod("intruder", scheduler="other", nodeName=planned))
        await eventually(lambda: "team/second" in where.bound(), what="the second pod bound")
        assert where.bound()["team/second"] != planned
        await check_invariants(where)


async def test_repeated_failures_are_one_event_per_object_with_a_series_count() -> None:
    async with cluster("blocks=1,racks=1,nodes=1,gpus=8") as where, phalanx(where):
        for i in range(2):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))

        def counted() -> set[str]:
            failed = where.events("FailedScheduling")
            return {e["regarding"]["name"] for e in failed if (e.get("series") or {}).get("count", 1) >= 3}

        await eventually(lambda: counted() == {"w0", "w1"}, what="a series count of at least 3 on each pod")
        # One Event per pod and message: a pod seen before its sibling was told another message first.
        told = Counter((e["regarding"]["name"], e["note"]) for e in where.events("FailedScheduling"))
        assert set(told.values()) == {1}, told


async def test_waiting_gangs_cannot_hold_more_than_their_share_of_the_cluster() -> None:
    settings = replace(FAST, permit=PermitSettings(max_reserved_share=0.5))
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8") as where, phalanx(where, settings) as app:
        where.create(gpu_pod("a0", annotations=pfn("a", 2)))  # holds 1 node for its missing member: 25%
        await eventually(lambda: app.permit.waiting, what="the first reservation")
        where.create(gpu_pod("b0", annotations=pfn("b", 3)))  # would hold 2 more nodes: 75% in all
        condition = await eventually(lambda: where.condition("team/b0"), what="the second gang refused a reservation")
        assert "room held for waiting gangs is at its limit (50% of the cluster)" in condition["message"]
        assert list(app.permit.waiting) == ["pfn:team/a"]
        with anyio.fail_after(60):
            where.create(gpu_pod("a1", annotations=pfn("a", 2)))
            await eventually(lambda: {"team/a0", "team/a1"} <= set(where.bound()), what="the first gang bound")
        await check_invariants(where)


async def test_a_first_bind_refused_with_a_conflict_backs_off_and_is_never_placed_again_at_once() -> None:
    """The real API server answers 409 to binding a pod it will not bind yet (scheduling gates): that is a
    refusal, and the gang backs off like any failed attempt; it once looped hundreds of times a second."""
    faults = Faults(seed=1)
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8", faults=faults) as where, phalanx(where):
        faults.bind_failures.update({"team/w0": 409, "team/w1": 409})
        for i in range(2):
            where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
        await eventually(lambda: faults.injected["bind 409"] >= 1, what="the first refusal")
        started = anyio.current_time()
        await eventually(lambda: faults.injected["bind 409"] >= 4, what="three more attempts")
        # Three backoffs of at least 0.75 x (0.05, 0.1, 0.2) s lie between them; without backoff, milliseconds.
        assert anyio.current_time() - started >= 0.75 * (0.05 + 0.1 + 0.2)
        assert where.bound() == {} and where.events("FailedBinding")
        faults.bind_failures.clear()
        await eventually(lambda: len(where.bound()) == 2, what="bound once the server accepts")
        await check_invariants(where)


async def test_a_gang_found_crowded_at_every_bind_backs_off_after_a_few_tries_instead_of_looping() -> None:
    """Were what Phalanx counts and what it checks at the last moment to disagree (its node always looks
    crowded), the gang is placed again at once only a few times in a row, then backs off and says why."""
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where, phalanx(where, WAKES_ONLY) as app:
        checked: list[str] = []

        def always_crowded(nodes: Any, resources: Any = None) -> list[str]:
            checked.extend(nodes)
            return sorted(nodes)

        app.state.overcommitted = always_crowded  # type: ignore[method-assign]
        where.create(gpu_pod("w0", annotations=pfn("train", 1)))
        told = await eventually(
            lambda: "times in a row" in ((where.condition("team/w0") or {}).get("message") or "")
            and where.condition("team/w0"),
            what="the gang backing off",
        )
        assert f"({PLACE_AGAIN_IN_A_ROW + 1} times in a row)" in told["message"]
        assert len(checked) == PLACE_AGAIN_IN_A_ROW + 1  # then no more tries: its backoff is ten minutes
        assert where.bound() == {}


async def test_the_first_gang_placed_is_bound_at_once_not_after_a_batch_of_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """80 gangs wait when Phalanx starts: the first one placed goes to the API server while the others are
    still being placed, not once a whole batch of them is decided (a start's first bind, and a leader's)."""
    placed_before: list[int] = []
    bind = Writers.bind
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8") as where:

        async def noted(self: Writers, namespace: str, name: str, uid: str, node: str) -> None:
            placed_before.append(where.monitor.apps[0].scheduler.cycles)
            await bind(self, namespace, name, uid, node)

        monkeypatch.setattr(Writers, "bind", noted)
        for i in range(80):
            where.create(gpu_pod(f"w{i}", gpus=1, annotations=pfn(f"g{i}", 1)))
        async with phalanx(where) as app:
            await eventually(lambda: len(where.bound()) == 32, what="every GPU taken")
            assert not app.binder.starting()  # a gang bound: the loop's batches are whole again
        assert placed_before[0] <= 2, f"the first bind went out after {placed_before[0]} gangs were placed"


async def test_a_lead_with_nothing_to_bind_ends_its_start_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop yields every few milliseconds only while a lead starts: with no gang to bind (none waits, or
    none fits), the start ends after ``STARTING_S``, not never."""
    monkeypatch.setattr(binding, "STARTING_S", 2.0)  # long enough to be seen on a loaded machine
    async with cluster("blocks=1,racks=1,nodes=1,gpus=8") as where, phalanx(where) as app:
        await eventually(app.binder.starting, what="the lead to start")
        await eventually(lambda: not app.binder.starting(), timeout=10, what="the start to end")
