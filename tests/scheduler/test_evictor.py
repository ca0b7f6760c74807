"""The evictor's writes when the API answers badly: a unit of eviction never goes half."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from scheduler.clock import SystemClock
from scheduler.gangs import GangKey
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, Forbidden, Unavailable
from scheduler.ports.port import ApiResource
from scheduler.preemption import evictor as module
from scheduler.preemption.evictor import EvictJob, Evictor, Victim
from scheduler.ratelimit import TokenBucket


class Answers:
    """A port whose pods/status patches and DELETEs fail as told, once each, then succeed."""

    def __init__(self, *, patch: list[Exception], delete: list[Exception], uid_now: str = "uid-1") -> None:
        self.patch_failures, self.delete_failures, self.uid_now = patch, delete, uid_now
        self.deleted: list[str] = []
        self.patched: list[dict[str, Any]] = []

    async def patch_status(self, resource: ApiResource, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        if self.patch_failures:
            raise self.patch_failures.pop(0)
        self.patched.append(patch)
        return {}

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        if self.delete_failures:
            raise self.delete_failures.pop(0)
        self.deleted.append(f"{namespace}/{name}")

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"uid": self.uid_now}}


class Silent:
    """A reporter that keeps the Events it is asked for."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, str, str]] = []

    def event(self, subject: Any, reason: str, note: str, **kwargs: Any) -> None:
        self.events.append((subject, str(reason), note))

    def pod_subject(self, pod: str) -> None: ...

    def group_subject(self, ref: Any) -> None: ...


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "_FIRST_RETRY", 0.001)  # the retries' pace is not what is tested


async def evict(port: Answers) -> Silent:
    clock = SystemClock()
    reporter = Silent()
    evictor = Evictor(
        port=port,  # type: ignore[arg-type]
        clock=clock,
        limiter=TokenBucket(1e6, 1_000_000, clock),
        reporter=reporter,  # type: ignore[arg-type]
        metrics=Metrics(),
        scheduler_name="phalanx",
    )
    async with anyio.create_task_group() as group:
        await group.start(evictor.run)
        victims = (Victim("team/a", "uid-1", None),)
        job = EvictJob(GangKey("pfn:prod/llm"), victims, (("prod/llm-0", "n1"),), "rack r0", subject="the gang")  # type: ignore[arg-type]
        await evictor._evict(job)
        group.cancel_scope.cancel()
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


async def test_a_victim_the_server_refuses_to_delete_is_told_on_the_preemptor() -> None:
    port = Answers(patch=[], delete=[Forbidden('pods "a" is forbidden: cannot delete')])
    reporter = await evict(port)
    assert port.deleted == []
    (warning,) = [event for event in reporter.events if event[1] == "FailedPreemption"]
    assert warning[0] == "the gang"
    assert warning[2].startswith("Could not delete team/a to make room in rack r0 (403: ")
