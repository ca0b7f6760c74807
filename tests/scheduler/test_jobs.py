"""Jobs handled off the scheduling cycle: begun at the submitter's next yield, dropped once the lead ends."""

from __future__ import annotations

import anyio
import anyio.abc

from scheduler.jobs import Jobs
from tests.scheduler.support import eventually


async def test_a_job_begins_at_the_next_yield_and_one_submitted_while_the_lead_ends_never_begins() -> None:
    begun: list[str] = []
    let_go = anyio.Event()

    async def handle(job: str) -> None:
        begun.append(job)
        if job == "first":
            with anyio.CancelScope(shield=True):  # as a binder takes back claims when cancelled
                await let_go.wait()

    jobs: Jobs[str] = Jobs("binder", handle)
    lead = anyio.CancelScope()

    async def leading(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with lead:
            await jobs.run(task_status=task_status)

    async with anyio.create_task_group() as process:
        await process.start(leading)
        jobs.submit("first")
        assert begun == [] and not jobs.idle
        await anyio.sleep(0)
        assert begun == ["first"]  # at the next yield: no queue between the cycle and the job
        lead.cancel()  # the lead is lost while the first job cannot be interrupted
        await eventually(lambda: not jobs.accepting, what="the jobs to stop accepting work")
        jobs.submit("late")
        let_go.set()
    assert begun == ["first"]  # the late job was dropped with the lead, never begun


async def test_the_jobs_end_with_their_owner_and_refuse_work_until_it_runs_again() -> None:
    begun: list[str] = []

    async def handle(job: str) -> None:
        begun.append(job)
        await anyio.sleep_forever()

    jobs: Jobs[str] = Jobs("binder", handle)
    async with anyio.create_task_group() as lead:
        await lead.start(jobs.run)
        jobs.submit("a")
        await eventually(lambda: begun == ["a"], what="the job begun")
        lead.cancel_scope.cancel()
    assert jobs.idle
    try:
        jobs.submit("b")
    except RuntimeError as error:
        assert "binder is not running" in str(error)
    else:
        raise AssertionError("a job was accepted with no lead")
