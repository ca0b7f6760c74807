"""A cluster served over HTTP, Phalanx processes attached to it over HTTP, and helpers
that wait on conditions (never on time)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import socket
import ssl
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import yaml
from aiohttp import web

from scheduler.app import Phalanx
from scheduler.gangs.gang_settings import GangSettings
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.kube.writers import Writers
from scheduler.ports.sim import ClusterShape, Faults, SimServer, Store, load, read_manifest_file
from scheduler.settings import (
    BindingSettings,
    InformerSettings,
    LeaderSettings,
    QueueSettings,
    ReportingSettings,
    ServerSettings,
    Settings,
)
from scheduler.simulation.oracle import InvariantMonitor

FAST = Settings(
    queue=QueueSettings(initial_backoff_seconds=0.05, max_backoff_seconds=0.5),
    reporting=ReportingSettings(event_interval_seconds=0.2, status_interval_seconds=0.05),
    informers=InformerSettings(watch_timeout_seconds=30, initial_backoff_seconds=0.05, max_backoff_seconds=0.5),
    leader_election=LeaderSettings(enabled=False, identity="test"),
    binding=BindingSettings(assume_timeout_seconds=5),
    server=ServerSettings(address="127.0.0.1:0"),
    gangs=GangSettings(default_timeout_seconds=30, timeout_jitter_seconds=0),
)
#: A gang is tried again only when an event wakes it: its backoff (ten minutes) is far beyond any wait of a
#: test, so a test that sees it bound under these settings saw the wake, however slow the machine.
WAKES_ONLY = replace(FAST, queue=QueueSettings(initial_backoff_seconds=600, max_backoff_seconds=600))

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
#: ``PHALANX_TEST_WATCH_LAG=1``: every cluster's pod watch sends each event 0.2-4 ms late, so that Phalanx's cache
#: lags the store as on a loaded host; a test that assumed Phalanx sees what it created at once fails reliably.
LAGGING_WATCH = (0.0002, 0.004) if os.environ.get("PHALANX_TEST_WATCH_LAG") else None


@dataclass
class Tally:
    """What the monitors of every cluster in this test session checked and found (printed at the end of the run)."""

    checks: Counter[str] = field(default_factory=Counter)
    violations: int = 0
    #: Of ``violations``, those found in clusters whose tests provoke them on purpose and assert them.
    provoked: int = 0

    def add(self, monitor: InvariantMonitor, *, provoked: bool = False) -> None:
        self.checks.update(monitor.checks)
        self.checks["clusters monitored"] += 1
        self.violations += len(monitor.violations)
        if provoked:
            self.provoked += len(monitor.violations)

    def line(self) -> str:
        figures = ", ".join(f"{name} {count}" for name, count in sorted(self.checks.items()))
        found = f"violations {self.violations - self.provoked}"
        if self.provoked:
            found += f" (and {self.provoked} provoked on purpose by tests that check the monitor finds them)"
        return f"invariant checks: {figures}; {found}"


TALLY = Tally()


def elected(identity: str, *, lease: float = 1.5, renew: float = 1.0, retry: float = 0.2) -> LeaderSettings:
    """Leader election on the ``kube-system/phalanx`` Lease, with short test timings by default."""
    return LeaderSettings(
        enabled=True,
        namespace="kube-system",
        name="phalanx",
        identity=identity,
        lease_duration_seconds=lease,
        renew_deadline_seconds=renew,
        retry_period_seconds=retry,
    )


@dataclass
class Cluster:
    store: Store
    server: SimServer
    url: str
    monitor: InvariantMonitor

    def delete_pod(self, key: str) -> None:
        """Delete a pod as its user would (its gang may end below its minimum: not Phalanx's doing)."""
        namespace, name = key.split("/")
        self.monitor.user_deleted(key)
        self.store.delete(self.store.resource("v1", "Pod"), namespace, name)

    def finish_termination(self, key: str) -> None:
        """Do what a kubelet does once a Terminating pod's containers have stopped: delete it for good."""
        namespace, name = key.split("/")
        self.store.delete(self.store.resource("v1", "Pod"), namespace, name, grace_period_seconds=0)

    def pods(self) -> dict[str, dict[str, Any]]:
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in self.store.objects(self.store.resource("v1", "Pod"))
        }

    def bound(self) -> dict[str, str]:
        return {key: pod["spec"]["nodeName"] for key, pod in self.pods().items() if pod.get("spec", {}).get("nodeName")}

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        namespace = (obj.get("metadata") or {}).get("namespace")
        resource = self.store.resource(obj["apiVersion"], obj["kind"])
        if namespace:
            self.store.ensure_namespace(namespace)
        return self.store.create(resource, namespace, obj)

    async def create_bound(self, *pods: dict[str, Any], timeout: float = 30.0) -> list[dict[str, Any]]:
        """Create pods that arrive bound (``spec.nodeName`` set, as another scheduler, a kubelet's static pods or
        a test leave them), then wait until every Phalanx on the cluster has seen each one on its node.

        Until a Phalanx has seen such a pod, it may give the pod's room out, as any scheduler deciding from its
        cache may (on a real node, the kubelet refuses the pod that does not fit). The monitor counts every
        pod bound to a node against it, so a test that binds pods itself while Phalanx runs creates them
        here: then whatever Phalanx binds on that node afterwards is its own decision."""
        created = []
        for pod in pods:
            assert pod["spec"].get("nodeName"), f"{pod['metadata']['name']} is not bound: create it with create()"
            created.append(self.create(pod))
        wanted = {f"{pod['metadata']['namespace']}/{pod['metadata']['name']}": pod["spec"]["nodeName"] for pod in pods}

        def unseen() -> list[str]:
            return sorted({pod for app in self.monitor.apps for pod, node in wanted.items()
                           if app.state.bound_node(pod) != node})  # fmt: skip

        await eventually(lambda: not unseen(), timeout=timeout, what=lambda: f"Phalanx to see the pods {unseen()}")
        return created

    def restore(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Put an object in as it is, past the API server's validation: what an older server, or a CRD
        installed without a schema, may hold (and Phalanx must survive)."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace:
            self.store.ensure_namespace(namespace)
        return self.store.restore(self.store.resource(obj["apiVersion"], obj["kind"]), obj)

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        found = list(self.store.objects(self.store.resource("events.k8s.io/v1", "Event")))
        return [event for event in found if reason is None or event["reason"] == reason]

    def condition(self, pod: str) -> dict[str, Any] | None:
        conditions = (self.pods()[pod].get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)


@contextlib.asynccontextmanager
async def cluster(
    shape: str = "blocks=1,racks=2,nodes=4,gpus=8",
    *,
    faults: Faults | None = None,
    nodes: list[dict[str, Any]] | None = None,
    graceful: bool = False,
    provoked: bool = False,
) -> AsyncIterator[Cluster]:
    """``graceful``: deleted pods stay Terminating (their kubelet never finishes) until the test removes them
    with ``finish_termination``. ``provoked``: the test breaks an invariant on purpose and asserts what the
    monitor found itself (counted apart in the summary); otherwise any violation fails the test at exit."""
    store = Store(seed=1, graceful=graceful)
    if LAGGING_WATCH:
        faults = faults or Faults(seed=1)
        faults.watch_lag.setdefault("pods", LAGGING_WATCH)
    load(store, nodes if nodes is not None else ClusterShape.parse(shape).node_manifests())
    monitor = InvariantMonitor(store, gang_settings=GangSettings(levels=LEVELS))
    server = SimServer(store, faults=faults, bookmark_interval=0.2)
    url = await server.start()
    try:
        yield Cluster(store, server, url, monitor)
    finally:
        await server.stop()
        TALLY.add(monitor, provoked=provoked)
    if not provoked:
        monitor.assert_clean()  # what was seen at every bind, whatever the test checked at its end


@contextlib.asynccontextmanager
async def phalanx(
    where: Cluster, settings: Settings = FAST, *, writers: int = 0, **changes: Any
) -> AsyncIterator[Phalanx]:
    """A Phalanx process on the cluster, through KubeCluster over HTTP, its writes made by ``writers`` writer
    processes (none: by itself); stopped (cancelled) on exit."""
    port = Writers(KubeCluster(client_for(where.url), request_timeout=10), writers)
    app = Phalanx(replace(settings, **changes), port)
    where.monitor.apps.append(app)
    try:
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(port.run, at_once=True))  # ready before the test's first pod
            await group.start(app.run)
            yield app
            group.cancel_scope.cancel()
    finally:
        where.monitor.apps.remove(app)  # a stopped process holds no room
        await port.close()


async def eventually(check: Callable[[], Any], *, timeout: float = 30.0, what: str | Callable[[], str] = "") -> Any:
    """Wait until ``check()`` is truthy (returning it), or fail after ``timeout`` seconds saying ``what``
    (a callable is asked only then, so that it can describe the state the wait ended in). The timeout is a
    bound that catches a hang, not a promise of speed: a loaded machine must meet it with room to spare."""
    with anyio.move_on_after(timeout):
        while not (result := check()):
            await anyio.sleep(0.01)
        return result
    raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what or check}")


def gpu_pod(
    name: str,
    namespace: str = "team",
    gpus: int = 8,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    scheduler: str = "phalanx",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            **spec,
        },
    }


def pfn(gang: str, size: int, timeout: int | None = None) -> dict[str, str]:
    prefix = "gang-scheduling.preferred.jp/gang"
    found = {f"{prefix}-name": gang, f"{prefix}-size": str(size)}
    if timeout is not None:
        found[f"{prefix}-schedule-timeout-seconds"] = str(timeout)
    return found


async def create_manifests(where: Cluster, *paths: str | Path) -> list[dict[str, Any]]:
    """Create every object of examples/ manifest files on a fresh cluster (a Namespace may exist already: the
    emulator makes namespaces as objects need them). Not quite in ``kubectl apply -f`` order: what is not a
    pod comes first, then the pods that arrive bound (:meth:`Cluster.create_bound`, so that Phalanx has seen
    the room they take), then the pods to schedule, each in the order of its file."""
    objects = [obj for path in paths for obj in read_manifest_file(str(path))]
    for obj in objects:
        if obj["kind"] == "Namespace":
            where.store.ensure_namespace(obj["metadata"]["name"])
    pods = [obj for obj in objects if obj["kind"] == "Pod"]
    created = [where.create(obj) for obj in objects if obj["kind"] not in ("Namespace", "Pod")]
    created += await where.create_bound(*(pod for pod in pods if (pod.get("spec") or {}).get("nodeName")))
    created += [where.create(pod) for pod in pods if not (pod.get("spec") or {}).get("nodeName")]
    return created


def labels_of(where: Cluster, nodes: Any, key: str) -> set[str]:
    records = {n["metadata"]["name"]: n for n in where.store.objects(where.store.resource("v1", "Node"))}
    return {records[node]["metadata"]["labels"].get(key) for node in nodes}


@contextlib.contextmanager
def refusing_server() -> Iterator[tuple[str, list[str | None]]]:
    """An API server that answers every request 401, as kube-apiserver answers a token it does not accept: its
    URL, and the Authorization header of each request it got."""
    sent: list[str | None] = []

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            sent.append(self.headers.get("Authorization"))
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Unauthorized",
                               "reason": "Unauthorized", "code": 401}).encode()  # fmt: skip
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", sent
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kubeconfig(path: Path, server: str, *, token: str | None = None) -> Path:
    """A kubeconfig with one context, for the cluster at ``server`` (with a bearer ``token`` if given)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": server}}],
                "users": [{"name": "sim", "user": {"token": token} if token else {}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
                "current-context": "sim",
            }
        )
    )
    return path


@contextlib.asynccontextmanager
async def listening(serve: Callable[[Callable[[str], None]], Awaitable[None]]) -> AsyncIterator[str]:
    """Runs ``serve(started)`` (a server that calls ``started`` with its URL once it listens, and serves until
    cancelled) for the block; yields the URL, and stops the server after."""
    urls: list[str] = []
    up = anyio.Event()

    def started(url: str) -> None:
        urls.append(url)
        up.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve, started)
        with anyio.fail_after(10):
            await up.wait()
        yield urls[0]
        group.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def served(app: web.Application, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """``app`` served on a free port of loopback (over TLS with ``tls``): its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
