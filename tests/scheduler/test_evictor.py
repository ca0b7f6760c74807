"""The evictor's writes when the API answers badly: once begun, a unit of eviction goes whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from scheduler.clock import SystemClock
from scheduler.gangs import GangKey, ObjectRef
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, Forbidden, Invalid, Throttled, Unavailable
from scheduler.ports.port import ApiResource
from scheduler.preemption import evictor as module
from scheduler.preemption.evictions import EvictJob, Victim
from scheduler.preemption.evictor import Evictor
from scheduler.ratelimit import TokenBucket

GROUP = ObjectRef("scheduling.x-k8s.io", "PodGroup", "team", "sweep")


class Answers:
    """A port whose pods/status patches and DELETEs fail as told (one failure per call, in order), then
    succeed; it keeps every write in the order the server saw it."""

    def __init__(
        self,
        *,
        patch: list[Exception],
        delete: list[Exception],
        uid_now: str = "uid-1",
        refused: dict[str, list[Exception]] | None = None,
    ) -> None:
        self.patch_failures, self.delete_failures, self.uid_now = patch, delete, uid_now
        self.refused = refused or {}  # failures of one pod's DELETE
        self.deleted: list[str] = []
        self.patched: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []

    async def patch_status(self, resource: ApiResource, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        await anyio.sleep(0)  # another victim's write may come first, as over HTTP
        if self.patch_failures:
            raise self.patch_failures.pop(0)
        self.patched.append(patch)
        self.writes.append(("patch", f"{namespace}/{name}"))
        return {}

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        await anyio.sleep(0)
        if self.delete_failures:
            raise self.delete_failures.pop(0)
        if self.refused.get(f"{namespace}/{name}"):
            raise self.refused[f"{namespace}/{name}"].pop(0)
        self.deleted.append(f"{namespace}/{name}")
        self.writes.append(("delete", f"{namespace}/{name}"))

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"uid": self.uid_now}}


class Silent:
    """A reporter that keeps the Events it is asked for; subjects are the pod's key or the group object."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, str, str]] = []

    def event(self, subject: Any, reason: str, note: str, **kwargs: Any) -> None:
        self.events.append((subject, str(reason), note))

    def pod_subject(self, pod: str) -> str:
        return pod

    def group_subject(self, ref: ObjectRef) -> ObjectRef:
        return ref


@pytest.fixture(autouse=True)
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The evictor's waits between attempts, recorded instead of slept: the pace is asserted, not timed."""
    slept: list[float] = []
    real_sleep = anyio.sleep

    async def sleep(seconds: float) -> None:
        if seconds:
            slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(module.anyio, "sleep", sleep)
    yield slept


async def evict(port: Answers, victims: tuple[Victim, ...] = (Victim("team/a", "uid-1", None),)) -> Silent:
    clock = SystemClock()
    reporter = Silent()
    metrics = Metrics()
    evictor = Evictor(
        port=port,  # type: ignore[arg-type]
        clock=clock,
        limiter=TokenBucket(1e6, 1_000_000, clock),
        reporter=reporter,  # type: ignore[arg-type]
        metrics=metrics,
        scheduler_name="phalanx",
        refused_retry_seconds=60,
    )
    async with anyio.create_task_group() as group:
        await group.start(evictor.run)
        job = EvictJob(GangKey("pfn:prod/llm"), victims, (("prod/llm-0", "n1"),), "rack r0", subject="the gang")  # type: ignore[arg-type]
        evictor.submit(job)
        assert not evictor.idle
        with anyio.fail_after(30):  # simulated waits: a hang fails, a slow machine does not
            while not evictor.idle:
                await anyio.sleep(0)
        group.cancel_scope.cancel()
    reporter.refused = metrics.registry.value("phalanx_preemption_victims_refused_total")  # type: ignore[attr-defined]
    return reporter


async def test_a_conflict_on_the_condition_patch_is_a_race_tried_again_and_the_victim_is_deleted() -> None:
    port = Answers(patch=[Conflict("the object has been modified")], delete=[])
    await evict(port)
    assert port.deleted == ["team/a"]
    assert port.patched[0]["status"]["conditions"][0]["reason"] == "PreemptionByScheduler"


async def test_a_conflict_on_delete_is_retried_while_the_same_pod_is_there_and_not_when_it_was_replaced() -> None:
    same = Answers(patch=[], delete=[Conflict("injected"), Unavailable("etcd is slow")])
    await evict(same)
    assert same.deleted == ["team/a"]
    replaced = Answers(patch=[], delete=[Conflict("Precondition failed: UID")], uid_now="uid-2")
    await evict(replaced)
    assert replaced.deleted == []  # another pod under that name now: not ours to delete


async def test_a_victim_is_deleted_even_when_its_condition_cannot_be_written() -> None:
    port = Answers(patch=[Forbidden("pods/status patch is forbidden")], delete=[])
    await evict(port)
    assert port.deleted == ["team/a"]


async def test_every_victim_is_marked_before_any_is_deleted_so_that_a_new_leader_sees_the_whole_unit_going() -> None:
    port = Answers(patch=[Unavailable("slow"), Unavailable("slow")], delete=[])
    victims = tuple(Victim(f"team/sweep-{i}", "uid-1", GROUP) for i in range(3))
    await evict(port, victims)
    kinds = [kind for kind, pod in port.writes if pod.startswith("team/")]
    assert kinds == ["patch"] * 3 + ["delete"] * 3
    assert port.writes[-1] == ("patch", "prod/llm-0")  # the preemptor's nominatedNodeName, once they go


async def test_failures_that_may_pass_are_retried_for_as_long_as_they_last_with_backoff_and_retry_after(
    waits: list[float],
) -> None:
    port = Answers(patch=[], delete=[Unavailable("etcd is down")] * 40 + [Throttled("slow down", retry_after=15)])
    await evict(port)
    assert port.deleted == ["team/a"]  # 41 failures, over far more than the two minutes once allowed
    assert waits[:3] == [0.2, 0.4, 0.8] and max(waits[:40]) == 10.0
    assert waits[40] == 15  # the server's Retry-After, above the backoff's cap
    assert sum(waits) > 120


async def test_a_delete_refused_for_good_is_told_on_both_gangs_counted_and_tried_again_until_accepted(
    waits: list[float],
) -> None:
    refusal = Forbidden('pods "sweep-1" is forbidden: ValidatingAdmissionPolicy denied the request')
    port = Answers(patch=[], delete=[], refused={"team/sweep-1": [refusal, refusal, refusal]})
    victims = tuple(Victim(f"team/sweep-{i}", "uid-1", GROUP) for i in range(2))
    reporter = await evict(port, victims)
    assert sorted(port.deleted) == ["team/sweep-0", "team/sweep-1"]  # accepted once the refusal was lifted
    assert waits.count(60) == 3  # preemption.refusedRetrySeconds after each refusal
    warnings = [event for event in reporter.events if event[1] == "FailedPreemption"]
    assert len(warnings) == 2  # once, not at every retry: on the preemptor and on the victim's gang
    on_preemptor, on_victim = warnings
    assert on_preemptor[0] == "the gang"
    assert on_preemptor[2].startswith("Could not delete team/sweep-1 to make room in rack r0 (403: ")
    assert "(403: " in on_preemptor[2] and "tried again every 60 s (preemption.refusedRetrySeconds)" in on_preemptor[2]
    assert on_victim[0] == GROUP
    assert on_victim[2].startswith("Preempted by gang pfn:prod/llm, but the API server refused to delete team/sweep-1")
    assert "runs below its minimum until this pod goes too" in on_victim[2]
    assert reporter.refused == 1  # type: ignore[attr-defined]
    preempted = [event for event in reporter.events if event[1] == "Preempted"]
    assert [event[0] for event in preempted].count(GROUP) == 1  # "2 of its pods preempted", once


async def test_a_victim_replaced_by_a_pod_of_the_same_name_is_neither_marked_nor_deleted() -> None:
    port = Answers(patch=[Invalid('Pod "a" is invalid: metadata.uid: Invalid value: "uid-1": field is immutable')],
                   delete=[], uid_now="uid-2")  # fmt: skip
    await evict(port)
    assert port.deleted == [] and not [patch for patch in port.patched if "conditions" in patch["status"]]
