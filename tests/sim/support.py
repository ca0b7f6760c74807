"""Builders for SimCluster tests: a store with a fixed clock, and small objects."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.resources import ALL_GROUP_VERSIONS, Catalog
from scheduler.ports.sim.store import Store

NOW = 1_790_000_000.0  # a fixed clock: 2026-09-21T...Z


def store(**kwargs: Any) -> Store:
    created = Store(clock=lambda: NOW, seed=7, **kwargs)
    created.ensure_namespace("ns")
    return created


def pod(name: str, labels: dict[str, str] | None = None, scheduler: str = "phalanx", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}], **spec},
    }


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def without(catalog_groups: set[str]) -> Catalog:
    return Catalog({gv for gv in ALL_GROUP_VERSIONS if gv[0] not in catalog_groups})


@contextlib.asynccontextmanager
async def served(sim: Store, **server_options: Any) -> AsyncIterator[tuple[SimServer, ApiClient]]:
    """Serve ``sim`` over HTTP on a free local port and yield the server and a kubernetes_asyncio client."""
    server = SimServer(sim, **server_options)
    url = await server.start()
    try:
        async with ApiClient(Configuration(host=url)) as api:
            yield server, api
    finally:
        await server.stop()
