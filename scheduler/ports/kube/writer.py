"""A writer process: ``python -m scheduler.ports.kube.writer --kubeconfig FILE [--context NAME]`` (or
``--in-cluster``, or ``--url URL``).

It makes the API writes the deciding process hands it (``writers.py``), on a connection of its own to
the same server with the same credentials, so that the HTTP client's CPU is spent on another core.
It reads one JSON call per line on stdin, ``{"id": 7, "call": "bind", "args": [...], "kwargs": {...}}``,
answers each on stdout as soon as the server answered it, ``{"id": 7, "result": ...}`` or ``{"id": 7,
"error": {"code": 409, "message": "...", "retryAfter": null}}``, in any order (``bind_all``, a gang's
binds in one line, answers with a list holding ``null`` or such an error for each), and says ``{"ready":
true}`` first, once its connection is made (or ``{"failed": "..."}``, and exits). It decides nothing,
keeps nothing, and ends when its stdin does: the deciding process has ended or let it go.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from typing import Any, BinaryIO

import orjson

from scheduler.ports.errors import PortError, Throttled, Unavailable, from_status
from scheduler.ports.kube.cluster import KubeCluster
from scheduler.ports.kube.connection import Connection, KubeConfigError, from_kubeconfig, in_cluster, plain
from scheduler.ports.port import ApiResource, Binding

#: The writes a writer makes: the port's methods that change the cluster.
CALLS = frozenset({"bind", "bind_all", "create", "patch_status", "update", "patch", "delete"})
#: A call's line may carry a whole object (a claim with its devices): generous, and still bounded.
MAX_LINE = 64 * 2**20


def resource_of(fields: dict[str, Any]) -> ApiResource:
    return ApiResource(
        group=fields["group"],
        version=fields["version"],
        plural=fields["plural"],
        kind=fields["kind"],
        namespaced=fields["namespaced"],
        status_subresource=fields["status_subresource"],
    )


def fields_of(resource: ApiResource) -> dict[str, Any]:
    return {
        "group": resource.group,
        "version": resource.version,
        "plural": resource.plural,
        "kind": resource.kind,
        "namespaced": resource.namespaced,
        "status_subresource": resource.status_subresource,
    }


async def _connection(args: argparse.Namespace) -> Connection:
    if args.url:
        return plain(args.url)
    if args.in_cluster:
        return in_cluster()
    return await from_kubeconfig(args.kubeconfig, args.context)


async def _answer(port: KubeCluster, message: dict[str, Any]) -> dict[str, Any]:
    call = message.get("call")
    if call not in CALLS:
        return {"id": message.get("id"), "error": {"code": 0, "message": f"a writer makes no call {call!r}"}}
    args = list(message.get("args") or [])
    if call == "bind_all":
        outcomes = await port.bind_all([Binding(*binding) for binding in args[0]])
        return {"id": message["id"], "result": [None if error is None else error_fields(error) for error in outcomes]}
    if call != "bind":
        args[0] = resource_of(args[0])
    try:
        result = await getattr(port, call)(*args, **(message.get("kwargs") or {}))
    except PortError as error:
        return {"id": message["id"], "error": error_fields(error)}
    return {"id": message["id"], "result": result}


def error_fields(error: PortError) -> dict[str, Any]:
    """A refusal as it travels back: the status code, the server's message, and a 429's ``Retry-After``."""
    retry_after = error.retry_after if isinstance(error, Throttled) else None
    return {"code": error.code, "message": str(error), "retryAfter": retry_after}


def error_from(fields: dict[str, Any]) -> PortError:
    """The refusal :func:`error_fields` sent, as the port raised it (code 0, a failure of no status: 503)."""
    code = int(fields.get("code") or 0) or Unavailable.code
    return from_status(code, str(fields.get("message")), retry_after=fields.get("retryAfter"))


def _protocol_pipes() -> tuple[int, int]:
    """The pipes to the deciding process, moved off fds 0 and 1: an exec credential plugin inherits stdin,
    and a library may print; neither may read or write a line of the protocol. Fd 0 reads nothing and fd 1
    goes to stderr."""
    calls, answers = os.dup(0), os.dup(1)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    return calls, answers


class _Answers:
    """The pipe the answers go back on. Once the deciding process is gone (it crashed, or was killed), the
    pipe is broken: the writer still carries out what it was handed, and its answers go nowhere, quietly."""

    def __init__(self, fd: int) -> None:
        self._out: BinaryIO | None = os.fdopen(fd, "wb")

    def send(self, data: bytes) -> None:
        if self._out is None:
            return
        try:
            self._out.write(data)
            self._out.flush()
        except BrokenPipeError:
            out, self._out = self._out, None
            with contextlib.suppress(OSError):
                out.close()  # the buffer cannot be flushed: closing says so again, and still closes the pipe


async def serve(args: argparse.Namespace) -> None:
    calls_fd, answers_fd = _protocol_pipes()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(calls_fd, "rb", 0))
    out = _Answers(answers_fd)

    answers: list[bytes] = []

    def say(message: dict[str, Any]) -> None:
        out.send(orjson.dumps(message) + b"\n")

    def send_answers() -> None:
        out.send(b"".join(answers))
        answers.clear()

    def answer(message: dict[str, Any]) -> None:
        # The answers of one turn of the event loop (a burst of Events created) leave in one write.
        if not answers:
            loop.call_soon(send_answers)
        answers.append(orjson.dumps(message) + b"\n")

    try:
        port = KubeCluster(await _connection(args))
    except KubeConfigError as error:
        say({"failed": str(error)})
        return
    say({"ready": True})
    calls: set[asyncio.Task[None]] = set()

    async def one(line: bytes) -> None:
        number = None
        try:
            message = orjson.loads(line)
            number = message.get("id")
            said = await _answer(port, message)
        except Exception as error:  # a bug here must not end the writer: the caller hears of it and retries
            said = {"id": number, "error": {"code": 0, "message": f"{type(error).__name__}: {error}"}}
        answer(said)

    try:
        while line := await reader.readline():
            task = asyncio.create_task(one(line))
            calls.add(task)
            task.add_done_callback(calls.discard)
        if calls:
            await asyncio.wait(calls)  # what was handed over is still carried out; nobody hears the answers
        await asyncio.sleep(0)  # the last answers leave
    finally:
        await port.close()


def main(argv: list[str] | None = None) -> None:
    # Ctrl-C in a terminal, or a SIGTERM sent to the whole process group, is for the deciding process: the
    # writer ends when its stdin does, once that process has ended, not half way through what it was handed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="python -m scheduler.ports.kube.writer", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kubeconfig")
    where.add_argument("--in-cluster", action="store_true")
    where.add_argument("--url")
    parser.add_argument("--context")
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
