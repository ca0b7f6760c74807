"""Informers: list, then watch from the list's resource version, forever (docs/architecture.md).

Each informer keeps one resource's objects current in :class:`ClusterState`:

- it lists everything (a relist also deletes what disappeared meanwhile) and reports itself synced
  the first time; readiness waits for every informer's first list;
- it watches from the last resource version it saw (bookmarks included), resuming after each watch
  ends, so every change arrives once and in order;
- a 410 Expired means the version is compacted away: list again;
- any other failure backs off, doubling with jitter up to a maximum, then resumes (by watching when
  it still has a version, by listing when it does not).

Events are applied synchronously as they arrive and the scheduler is poked after each burst. Each object's
``metadata.managedFields`` is dropped first, as kube-scheduler's informers drop it: nothing here reads it,
and a real server's pods carry a kilobyte or more of it each (the emulator's carry none).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.ports.errors import Expired, PortError, Throttled
from scheduler.ports.port import OPENED, ApiResource, Change, ClusterPort, Listing
from scheduler.settings import InformerSettings
from scheduler.state import ClusterState

log = structlog.get_logger("phalanx.informers")

#: Objects per list page.
PAGE = 500
_CHUNK = 50  # items applied between two turns of the event loop while the next page is on its way


def _trimmed(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields`` (a copy when it has them: the port's objects are its own)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        return {**obj, "metadata": {key: value for key, value in metadata.items() if key != "managedFields"}}
    return obj


class Informer:
    def __init__(
        self,
        *,
        port: ClusterPort,
        resource: ApiResource,
        state: ClusterState,
        settings: InformerSettings,
        poke: Callable[[], None],
        rng: random.Random | None = None,
    ) -> None:
        self.port = port
        self.resource = resource
        self.state = state
        self.settings = settings
        self.poke = poke
        self.rng = rng or random.Random(hash(str(resource)))
        self.synced = False
        self.healthy = False
        self.relists = 0
        self.failures = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """List and watch forever; ``task_status.started()`` fires after the first successful list."""
        version: str | None = None
        backoff = self.settings.initial_backoff_seconds
        while True:
            try:
                if version is None:
                    version = await self._list()
                    self.relists += 1
                    self.healthy = True
                    if not self.synced:
                        self.synced = True
                        task_status.started()
                    self.poke()
                version = await self._watch(version)
                backoff = self.settings.initial_backoff_seconds
            except Expired:
                log.info("watch version expired; listing again", resource=str(self.resource))
                version = None
            except PortError as error:
                self.failures += 1
                self.healthy = False
                wait = backoff * self.rng.uniform(0.5, 1.5)
                # A 429 is the server asking to come back later (a new CRD's watch cache answers "storage is
                # (re)initializing" for its first seconds): client-go's reflector logs it at debug level too.
                report = log.info if isinstance(error, Throttled) else log.warning
                report(
                    "list/watch failed; retrying",
                    resource=str(self.resource),
                    error=str(error)[:200],
                    retry_in_s=round(wait, 2),
                )
                await anyio.sleep(wait)
                backoff = min(backoff * 2, self.settings.max_backoff_seconds)

    async def _list(self) -> str:
        """A full list, a page at a time (memory stays bounded by two pages, where client-go's reflector
        holds one: the next is asked for while one is applied, so that the server makes it meanwhile);
        returns the resource version to watch from."""
        listed: set[tuple[str, str]] = set()
        page = await self.port.list(self.resource, limit=PAGE)
        while True:
            token = page.continue_token
            following: list[Listing | PortError] = []
            async with anyio.create_task_group() as group:
                if token is not None:  # asked for now, so that the server makes it while this one is applied
                    group.start_soon(self._page, token, following)
                for start in range(0, len(page.items), _CHUNK):
                    chunk = [_trimmed(item) for item in page.items[start : start + _CHUNK]]
                    listed |= self.state.apply_listed(self.resource, chunk)
                    await anyio.sleep(0)  # the request for the next page goes out between chunks
            if not following:
                break
            if isinstance(following[0], PortError):
                raise following[0]  # as if asked after this page: the list starts again (an expired token)
            page = following[0]
        self.state.prune(self.resource, listed)
        return page.resource_version

    async def _page(self, token: str, into: list[Listing | PortError]) -> None:
        try:
            into.append(await self.port.list(self.resource, limit=PAGE, continue_token=token))
        except PortError as error:  # raised by _list itself, not out of its task group
            into.append(error)

    async def _watch(self, version: str) -> str:
        """One watch request; returns the last resource version seen when the server ends it."""
        applied = 0
        # Closed as soon as the loop ends, however it ends: the connection is kept or dropped then, not when
        # the collector finds the generator.
        watching = self.port.watch(self.resource, version, timeout=self.settings.watch_timeout_seconds)
        async with contextlib.aclosing(watching) as stream:
            async for change in stream:
                self.healthy = True  # the server accepted the watch (OPENED comes first), or sent something
                if change.type == OPENED:
                    continue
                metadata = change.object.get("metadata") or {}
                version = str(metadata.get("resourceVersion") or version)
                if change.type != "BOOKMARK":
                    kept = _trimmed(change.object)  # a new Change only when there was something to drop
                    self.state.apply(self.resource, change if kept is change.object else Change(change.type, kept))
                    self.poke()  # cheap: the scheduling loop coalesces pokes
                    applied += 1
                    if applied % 256 == 0:
                        await anyio.sleep(0)  # a burst of events must not starve the scheduling loop
        return version
