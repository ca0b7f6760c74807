"""``phalanx serve``: the emulated cluster as a sandbox for people with kubectl.

An in-memory API server (SimCluster over HTTP, the same one the test suite pins against a real
kube-apiserver) holds the nodes and any manifests given, a kubeconfig for it is written, and Phalanx
schedules in it exactly as in a cluster: over HTTP, through its informers, queue, placement and
binder. ``kubectl apply``, ``get -o wide``, ``describe`` and ``get events`` work against it.

Workload objects given with ``--workload`` (Jobs, JobSets, LeaderWorkerSets, Kubeflow jobs, Deployments,
StatefulSets) are expanded into the pods and group objects their controllers would create, and those
controllers go on acting (a Job replaces a pod deleted with kubectl).

What it is not: there are no kubelets, so bound pods stay ``Pending`` with their node set (nothing runs,
so a StatefulSet's next ordinal never comes), and only what a scheduler needs is served (pods, nodes,
namespaces, Events, Leases, priority classes and every gang source's group objects): ``kubectl apply`` of
a Job is refused, give it with ``--workload``.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import yaml

from scheduler.app import Phalanx
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.sim.builders import ManifestError, load
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.store import Store
from scheduler.settings import LeaderSettings, Settings
from scheduler.simulation.controllers import Api, Controllers, WorkloadError

#: Namespaces every cluster starts with.
NAMESPACES = ("default", "kube-system", "kube-public")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A running sandbox: where its API server listens and where its kubeconfig is."""

    url: str
    kubeconfig: Path
    nodes: int
    #: Where Phalanx's live view is served, when it was asked for (``--view``).
    view: str | None = None


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig with one context, ``phalanx-sandbox``, for the server at ``url`` (no credentials: the
    sandbox listens on loopback and asks for none)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "phalanx-sandbox", "cluster": {"server": url}}],
        "users": [{"name": "phalanx-sandbox", "user": {}}],
        "contexts": [{"name": "phalanx-sandbox", "context": {"cluster": "phalanx-sandbox", "user": "phalanx-sandbox"}}],
        "current-context": "phalanx-sandbox",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def sandbox_settings(settings: Settings) -> Settings:
    """One instance, so no leader election (the health and metrics server is not started either: see
    :func:`serve`)."""
    return replace(settings, leader_election=LeaderSettings(enabled=False, identity="phalanx-sandbox"))


async def serve(
    settings: Settings,
    nodes: Iterable[Mapping[str, Any]],
    objects: Iterable[Mapping[str, Any]],
    *,
    host: str,
    port: int,
    kubeconfig: Path,
    started: Callable[[Sandbox], None],
    warn: Callable[[str], object] = lambda line: None,
    view: str | None = None,
) -> None:
    """Run the sandbox until SIGINT or SIGTERM; ``started`` is called once kubectl can use it, ``warn`` with
    each object that is not served or expanded. ``view`` (HOST:PORT): Phalanx serves its live view, and its
    /metrics, /healthz and /readyz, there."""
    store = Store()
    for namespace in NAMESPACES:
        store.ensure_namespace(namespace)
    listed_nodes = load(store, nodes, assume_ready=True)
    controllers = Controllers(Api(store, time.time, random.Random(0), settings.scheduler_names[0]))
    given = list(objects)
    for obj in given:
        if Controllers.is_runtime(obj):
            controllers.runtimes.add(dict(obj))
    for obj in given:
        if controllers.expands(obj):
            try:
                controllers.start(controllers.parse(dict(obj)))
            except WorkloadError as error:
                raise ManifestError(str(error)) from None
        elif not Controllers.is_runtime(obj):
            try:
                load(store, [obj], assume_ready=True)
            except ManifestError as error:
                warn(str(error))
    server = SimServer(store, bookmark_interval=5.0)
    url = await server.start(host, port)
    port_client = KubeCluster(client_for(url))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_run_controllers, controllers, warn)
            phalanx_settings = sandbox_settings(settings)
            if view is not None:
                phalanx_settings = replace(phalanx_settings, server=replace(phalanx_settings.server, address=view))
            app = Phalanx(phalanx_settings, port_client, serve=view is not None)
            await group.start(app.run)
            shown = f"{app.health.url}/" if app.health is not None else None
            started(Sandbox(url, write_kubeconfig(kubeconfig, url), len(listed_nodes), shown))
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    group.cancel_scope.cancel()
                    break
    finally:
        with anyio.CancelScope(shield=True):
            await port_client.close()
            await server.stop()


async def _run_controllers(controllers: Controllers, warn: Callable[[str], object]) -> None:
    """Let the controllers act on what changed, a few times a second (the store is in this process)."""
    while True:
        controllers.reconcile()
        for line in controllers.api.refused:
            warn(line)
        controllers.api.refused.clear()
        await anyio.sleep(0.25)
