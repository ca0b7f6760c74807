"""``Writers``: the cluster port of the deciding process, with its API writes made by writer processes.

One process decides: it alone keeps the cluster's state, assumes and forgets, places. What it decided
still has to be written (a binding and a ``Scheduled`` Event per pod, conditions, group status, claims,
evictions), and each request costs the HTTP client more CPU than the decision did. ``Writers`` hands
those writes to writer processes (``writer.py``), each with a connection of its own, so that they use
other cores; reads, watches and the leader's Lease stay here.

A write travels as one line of JSON to the writer with the fewest calls in flight (the lines of every call
made while the last ones were being sent leave together, in one write to the pipe), and its answer comes
back the same way: the result, or the status the server answered with, raised here as the same
``scheduler.ports.errors`` exception the port would have raised itself. The binder, the reporter and the
evictor therefore do with a refusal exactly what they did before (unassume, back off, retry).

A writer that dies (killed, out of memory) fails every call it had in flight with ``Unavailable``, which
callers retry as any transient failure; it is started again after a backoff. A write it had sent before
dying is found carried out when retried: a binding then conflicts, and the binder reads the pod and
counts it bound where it was bound; a delete finds the pod gone. Nothing is bound twice (the server binds
a pod once) and nothing is lost (every write is retried or told as refused). While no writer is ready
(at the start, or when all died), this process writes itself.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import math
import os
import sys
from collections.abc import AsyncGenerator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
from anyio.streams.buffered import BufferedByteReceiveStream
from structlog import get_logger

from scheduler.ports.errors import PortError, Unavailable, from_status
from scheduler.ports.kube.cluster import KubeCluster
from scheduler.ports.kube.writer import MAX_LINE, error_from, fields_of
from scheduler.ports.port import ApiResource, Binding, Change, Listing, Outcomes

log = get_logger("phalanx.writers")

#: The most writer processes chosen by default: past a few, the API server's write capacity, not the
#: client's CPU, is the limit.
MOST_BY_DEFAULT = 4
FIRST_RESTART_S, LAST_RESTART_S = 1.0, 30.0
#: A writer that has not answered a call this long after the request's own timeout is stuck.
ANSWER_MARGIN_S = 10.0
#: How long a writer may take to make its connection (an exec credential plugin runs then).
READY_TIMEOUT_S = 60.0
#: Leases are renewed here: leadership must not hang on a writer's health.
_STAYS_HERE = frozenset({"coordination.k8s.io"})


def usable_cores(root: Path = Path("/")) -> int:
    """The cores this process may use: its CPU affinity, bounded by the CPU quota of its cgroup or any cgroup
    above it (a container's ``resources.limits.cpu``), cgroup v2 or v1, as Go's runtime bounds GOMAXPROCS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota(root)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def _cgroup_quota(root: Path) -> float | None:
    """The smallest CPU quota (in cores) on the way from this process's cgroup up to the root, if any."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    mounts = root / "sys/fs/cgroup"
    found: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: one hierarchy, quota in cpu.max ("max" or "<quota> <period>")
            for folder in _up(mounts, path):
                words = _read(folder / "cpu.max").split()
                if len(words) == 2 and words[0] != "max":
                    found.append(int(words[0]) / int(words[1]))
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's cfs quota and period
            for base in (mounts / controllers, mounts / "cpu", mounts / "cpu,cpuacct"):
                for folder in _up(base, path):
                    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
                    if quota.lstrip("-").isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
                        found.append(int(quota) / int(period))
    return min(found) if found else None


def _up(base: Path, path: str) -> list[Path]:
    """``base`` joined with ``path`` and each folder above it up to ``base`` (a private cgroup namespace shows
    its own cgroup as ``/``: then ``base`` itself)."""
    parts = [part for part in path.split("/") if part]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return ""


def writer_processes(setting: int | None, cores: int | None = None) -> int:
    """How many writer processes: the setting, or for ``auto`` one per core but the deciding one's, at most
    :data:`MOST_BY_DEFAULT`. With one core there is none: a writer could only share that core (and its CPU
    quota) with the deciding process, adding the pipe's cost to every write. 0: this process writes itself."""
    if setting is not None:
        return setting
    return max(0, min((cores or usable_cores()) - 1, MOST_BY_DEFAULT))


def _outcomes(result: Any) -> Outcomes:
    """``bind_all``'s answer from a writer: each binding's refusal, or null."""
    return [None if fields is None else error_from(fields) for fields in result]


#: The answer of a call its writer never received (the pipe broke first): it is made here instead.
_UNSENT: dict[str, Any] = {"unsent": True}


@dataclass(slots=True)
class _Call:
    sent_at: float
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None


@dataclass(slots=True)
class _Writer:
    number: int
    process: anyio.abc.Process
    calls: dict[int, _Call] = field(default_factory=dict)
    #: Lines not sent yet: every call made while the last lines went out leaves in the next single write.
    outbox: builtins.list[tuple[int, bytes]] = field(default_factory=builtins.list)
    mail: anyio.Event = field(default_factory=anyio.Event)

    def post(self, number: int, line: bytes) -> None:
        self.outbox.append((number, line))
        self.mail.set()


class Writers:
    """The cluster port of the deciding process (see the module docstring). Run :meth:`run` beside the
    scheduler; until a writer is ready, and with ``processes=0``, writes go through ``port`` itself."""

    def __init__(self, port: KubeCluster, processes: int, *, answer_margin_s: float = ANSWER_MARGIN_S) -> None:
        if processes > 0 and not port.connection.origin:
            raise ValueError("writer processes need a connection another process can make again")
        self.port = port
        self.processes = processes
        self.answer_margin_s = answer_margin_s
        self._ready: list[_Writer] = []
        self._ids = itertools.count(1)
        self.restarts = 0
        self.handed = 0  # writes handed to a writer process (the rest were made here)
        self._wanted = anyio.Event()  # set once this replica leads: a follower, which writes nothing, starts none

    @property
    def ready(self) -> tuple[int, ...]:
        """The process ids of the writers ready for calls."""
        return tuple(writer.process.pid for writer in self._ready)

    @property
    def in_flight(self) -> dict[int, int]:
        """Calls handed to each ready writer (by process id) and not answered yet."""
        return {writer.process.pid: len(writer.calls) for writer in self._ready}

    # -- reads and the Lease: here -------------------------------------------------------------

    async def close(self) -> None:
        await self.port.close()

    async def served(self, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        return await self.port.served(groups)

    async def list(
        self, resource: ApiResource, *, limit: int | None = None, continue_token: str | None = None
    ) -> Listing:
        return await self.port.list(resource, limit=limit, continue_token=continue_token)

    def watch(self, resource: ApiResource, resource_version: str, *, timeout: float) -> AsyncGenerator[Change, None]:
        return self.port.watch(resource, resource_version, timeout=timeout)

    async def get(self, resource: ApiResource, namespace: str, name: str) -> dict[str, Any]:
        return await self.port.get(resource, namespace, name)

    # -- writes: by a writer -------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        await self._write("bind", [namespace, name, uid, node])

    async def bind_all(self, bindings: Sequence[Binding]) -> Outcomes:
        if len(bindings) == 1:  # no list to make, nor to read back
            try:
                await self.bind(*bindings[0])
            except PortError as error:
                return [error]
            return [None]
        try:
            outcomes = await self._write(
                "bind_all", [bindings], read=_outcomes, wire=[[builtins.list(binding) for binding in bindings]]
            )
        except PortError as error:  # the writer ended or failed with the batch: each pod is tried again alone
            return [error] * len(bindings)
        return outcomes  # type: ignore[no-any-return]

    async def create(self, resource: ApiResource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._write("create", [resource, namespace, dict(body)])  # type: ignore[no-any-return]

    async def patch_status(
        self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._write("patch_status", [resource, namespace, name, dict(patch)])  # type: ignore[no-any-return]

    async def update(self, resource: ApiResource, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._write("update", [resource, namespace, name, dict(body)])  # type: ignore[no-any-return]

    async def patch(self, resource: ApiResource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self._write("patch", [resource, namespace, name, dict(patch)])  # type: ignore[no-any-return]

    async def delete(self, resource: ApiResource, namespace: str, name: str, *, uid: str | None = None) -> None:
        await self._write("delete", [resource, namespace, name], {"uid": uid})

    async def _write(
        self,
        call: str,
        args: builtins.list[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        read: Callable[[Any], Any] | None = None,
        wire: builtins.list[Any] | None = None,
    ) -> Any:
        """The call made by a writer, or here. ``wire``: its arguments in JSON's types, when ``args`` are not
        (resources are made JSON here); ``read`` turns the writer's JSON result into what the port returns."""
        resource = args[0] if isinstance(args[0], ApiResource) else None
        stays_here = resource is not None and resource.group in _STAYS_HERE
        if not stays_here:
            self._wanted.set()
        if stays_here or not self._ready:
            result = await getattr(self.port, call)(*args, **(kwargs or {}))
            if stays_here:
                # A Lease written is a Lease held (a refused one raised): this replica leads, and its writes
                # follow. Its writers start now, beside its first pass, and are ready by its first binds.
                self._wanted.set()
            return result
        writer = min(self._ready, key=lambda candidate: len(candidate.calls))
        number = next(self._ids)
        if wire is None:
            wire = [fields_of(args[0]), *args[1:]] if resource is not None else args
        # Made into a line before the call is counted in flight: a body that cannot be written is refused here,
        # and leaves no call behind for the watchdog to find unanswered.
        line = orjson.dumps({"id": number, "call": call, "args": wire, "kwargs": kwargs or {}}) + b"\n"
        pending = writer.calls[number] = _Call(anyio.current_time())
        writer.post(number, line)
        self.handed += 1
        try:
            await pending.done.wait()
        finally:
            writer.calls.pop(number, None)
        answer = pending.answer
        if answer is _UNSENT:  # it died before the call reached it: nothing was sent, so it is made here at once
            self.handed -= 1
            return await getattr(self.port, call)(*args, **(kwargs or {}))
        if answer is None:
            raise Unavailable(f"{call}: writer process {writer.number} ended before the server answered")
        error = answer.get("error")
        if error is not None:
            code = int(error.get("code") or 0)
            if not code:  # the writer failed, not the server: told, and retried as a transient failure
                log.error("a writer process failed a call", call=call, error=error.get("message"))
                raise Unavailable(f"{call}: writer process {writer.number}: {error.get('message')}")
            raise from_status(code, str(error.get("message")), retry_after=error.get("retryAfter"))
        return answer.get("result") if read is None else read(answer.get("result"))

    async def _send(self, writer: _Writer) -> None:
        """Send what was posted, all of it in one write each time (a gang's Events leave together)."""
        assert writer.process.stdin is not None
        while True:
            await writer.mail.wait()
            writer.mail = anyio.Event()
            batch, writer.outbox = writer.outbox, []
            try:
                await writer.process.stdin.send(b"".join(line for _, line in batch))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                # Part of the batch may have reached the writer (and been carried out): its calls fail as
                # Unavailable, and their callers retry them, as after any writer's death. What was never
                # handed to the pipe (the outbox) is made here.
                self._gone(writer)
                writer.process.kill()  # its reader ends it and it is started again
                return

    async def _watch(self, writer: _Writer) -> None:
        """Kill the writer once a call has waited past the request's own timeout and a margin: the server's
        answer would have come by now, or the request timed out in the writer, so the writer is stuck (stopped,
        or reading a broken line). Its calls fail as ``Unavailable``; it is started again."""
        limit = self.port.request_timeout + self.answer_margin_s
        while True:
            await anyio.sleep(min(1.0, limit / 4))
            oldest = next(iter(writer.calls.values()), None)  # the calls are kept in the order they were made
            if oldest is not None and anyio.current_time() - oldest.sent_at > limit:
                log.error("a writer process stopped answering; it is started again", writer=writer.number)
                self._gone(writer)
                writer.process.kill()
                return

    def _gone(self, writer: _Writer) -> None:
        """No more calls for ``writer``; those it has are told it ended (its reader restarts it), those it
        never received are made here."""
        if writer in self._ready:
            self._ready.remove(writer)
        for number, _ in writer.outbox:
            if (pending := writer.calls.get(number)) is not None and pending.answer is None:
                pending.answer = _UNSENT
        writer.outbox.clear()
        for pending in writer.calls.values():
            pending.done.set()

    # -- the processes -------------------------------------------------------------------------

    async def run(
        self, *, at_once: bool = False, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """From its Lease written or its first other write on (``at_once``: now), keep :attr:`processes` writers
        running until cancelled (each started again when it dies). Until they are ready, this process writes
        itself; a replica that never leads writes nothing (its Lease is tried here) and starts none."""
        task_status.started()
        if not self.processes:
            return
        if not at_once:
            await self._wanted.wait()
        async with anyio.create_task_group() as group:
            for number in range(self.processes):
                group.start_soon(self._keep, number)

    async def _keep(self, number: int) -> None:
        delay = FIRST_RESTART_S
        while True:
            started = anyio.current_time()
            try:
                why = await self._one(number)
            except Exception as error:  # no process (a pids limit, no memory): this process writes meanwhile
                why = f"{type(error).__name__}: {error}"
            self.restarts += 1
            if anyio.current_time() - started > LAST_RESTART_S:
                delay = FIRST_RESTART_S  # it had run a while: not a crash loop
            log.warning("a writer process ended; it is started again", writer=number, why=why, in_seconds=delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, LAST_RESTART_S)

    async def _one(self, number: int) -> str:
        """Run one writer process until it ends; what ended it, in words."""
        command = [sys.executable, "-m", "scheduler.ports.kube.writer", *self.port.connection.origin]
        with anyio.CancelScope(shield=True):  # a process started is always ended below, never left behind
            process = await anyio.open_process(command, stdin=-1, stdout=-1, stderr=None)
        writer = _Writer(number, process)
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        try:
            try:
                with anyio.fail_after(READY_TIMEOUT_S):  # a kubeconfig's exec plugin may hang
                    first = orjson.loads(await lines.receive_until(b"\n", MAX_LINE))
            except TimeoutError:
                return f"not ready within {READY_TIMEOUT_S:g} s"
            except _ENDED as error:
                return _why(error)
            if not isinstance(first, dict) or not first.get("ready"):
                return str(first.get("failed") if isinstance(first, dict) else first)
            self._ready.append(writer)
            async with anyio.create_task_group() as group:
                group.start_soon(self._send, writer)
                group.start_soon(self._watch, writer)
                why = await _answers(writer, lines)
                group.cancel_scope.cancel()
            return why
        finally:
            self._gone(writer)
            with anyio.CancelScope(shield=True):
                await _end(process)


#: How reading a writer's answers ends: its stdout closed or broken, a line too long, or a line not JSON.
_ENDED = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.DelimiterNotFound, ValueError)


def _why(error: Exception) -> str:
    if isinstance(error, ValueError):
        return f"unreadable answer: {error}"
    return type(error).__name__ + (f": {error}" if str(error) else "")


async def _answers(writer: _Writer, lines: BufferedByteReceiveStream) -> str:
    """Give each call its answer, as the writer sends them, until it ends; what ended it, in words. Every
    answer that came in one read is taken in one go."""
    unread = bytearray()
    try:
        while True:
            unread += await lines.receive(_READ_SIZE)
            end = unread.rfind(b"\n")
            if end < 0:
                if len(unread) > MAX_LINE:
                    return f"unreadable answer: a line longer than {MAX_LINE} bytes"
                continue
            complete = bytes(unread[:end])
            del unread[: end + 1]
            for line in complete.split(b"\n"):
                answer = orjson.loads(line)
                said = answer.get("id") if isinstance(answer, dict) else None
                pending = writer.calls.get(said) if isinstance(said, int) else None
                if pending is not None:
                    pending.answer = answer
                    pending.done.set()
    except _ENDED as error:
        return _why(error)


_READ_SIZE = 2**16


async def _end(process: anyio.abc.Process) -> None:
    """Let a writer go: its stdin closed, it finishes what it was handed; killed if it does not end soon."""
    if process.stdin is not None:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            await process.stdin.aclose()
    with anyio.move_on_after(5):
        await process.wait()
        return
    process.kill()
    await process.wait()
