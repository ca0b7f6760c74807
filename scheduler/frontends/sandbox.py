"""``phalanx serve``: the emulated cluster as a sandbox for people with kubectl.

An in-memory API server (SimCluster over HTTP, the same one the test suite pins against a real
kube-apiserver) holds the nodes and any manifests given, a kubeconfig for it is written, and Phalanx
schedules in it exactly as in a cluster: through kubernetes_asyncio, its informers, queue, placement and
binder. ``kubectl apply``, ``get -o wide``, ``describe`` and ``get events`` work against it.

What it is not: there are no kubelets, so bound pods stay ``Pending`` with their node set (nothing runs),
and only what a scheduler needs is served (pods, nodes, namespaces, Events, Leases, priority classes and
every gang source's group objects); Deployments, Jobs and the like are not expanded into pods.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import yaml

from scheduler.app import Phalanx
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.sim.builders import load
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.store import Store
from scheduler.settings import LeaderSettings, Settings

#: Namespaces every cluster starts with.
NAMESPACES = ("default", "kube-system", "kube-public")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A running sandbox: where its API server listens and where its kubeconfig is."""

    url: str
    kubeconfig: Path
    nodes: int


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
) -> None:
    """Run the sandbox until SIGINT or SIGTERM; ``started`` is called once kubectl can use it."""
    store = Store()
    for namespace in NAMESPACES:
        store.ensure_namespace(namespace)
    listed_nodes = load(store, nodes, assume_ready=True)
    load(store, objects, assume_ready=True)
    server = SimServer(store, bookmark_interval=5.0)
    url = await server.start(host, port)
    port_client = KubeCluster(client_for(url))
    try:
        async with anyio.create_task_group() as group:
            await group.start(Phalanx(sandbox_settings(settings), port_client, serve=False).run)
            started(Sandbox(url, write_kubeconfig(kubeconfig, url), len(listed_nodes)))
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    group.cancel_scope.cancel()
                    break
    finally:
        with anyio.CancelScope(shield=True):
            await port_client.close()
            await server.stop()
