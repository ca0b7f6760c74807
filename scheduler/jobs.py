"""A queue of jobs handled off the scheduling cycle, each in its own task, while its owner leads.

The binder and the evictor hand their API writes to one: the cycle submits at once and never awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

Job = TypeVar("Job")


class Jobs(Generic[Job]):
    def __init__(self, owner: str, handle: Callable[[Job], Coroutine[Any, Any, None]]) -> None:
        self.owner = owner
        self.handle = handle
        self._group: TaskGroup | None = None
        self._closing = False
        self._open = 0  # jobs submitted and not yet handled to the end

    @property
    def idle(self) -> bool:
        """No job is queued or under way."""
        return self._open == 0

    @property
    def accepting(self) -> bool:
        """A job submitted now is begun: the owner runs and is not being cancelled."""
        return self._group is not None and not self._closing

    def submit(self, job: Job) -> None:
        """Start a job (only while :meth:`run` runs): its task runs at the caller's next yield."""
        if self._group is None:
            raise RuntimeError(f"the {self.owner} is not running")
        if self._closing:
            return  # the owner's lead is ending: the job is dropped with it, never begun
        self._group.start_soon(self._handle, job)
        self._open += 1

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Handle every job submitted until cancelled (jobs in flight are cancelled with it)."""
        self._closing = False
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    self._closing = True  # cancelled: the jobs under way may still be ending (shielded)
        finally:
            self._group = None
            self._open = 0  # what was under way is cancelled with the owner's lead

    async def _handle(self, job: Job) -> None:
        try:
            await self.handle(job)
        finally:
            self._open -= 1
