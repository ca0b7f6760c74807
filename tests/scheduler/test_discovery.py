"""Discovery over HTTP: what the server serves, read with every group version asked at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from scheduler.ports.errors import Forbidden
from scheduler.ports.kube.client import client_for
from scheduler.ports.kube.cluster import KubeCluster
from scheduler.ports.kube.writers import Writers
from scheduler.ports.port import PODS, ApiResource, Listing
from tests.scheduler.support import cluster, eventually, gpu_pod, pfn, phalanx, served

GROUPS = [("scheduling.x-k8s.io", "v1alpha1", "podgroups"), ("metrics.example.com", "v1", "things")]
GROUPS += [(f"group{i}.example.com", "v1", f"kind{i}s") for i in range(20)]


@asynccontextmanager
async def server(
    status: dict[str, int], together: int = len(GROUPS) + 1
) -> AsyncIterator[tuple[str, list[str], list[int]]]:
    """A server of discovery documents that notes the paths asked and how many requests were open at each;
    ``status``: paths that answer with that status; ``together``: the versions' documents a client asks for."""
    asked: list[str] = []
    open_at_once = [0, 0]  # now, most
    all_open = anyio.Event()

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
        open_at_once[0] += 1
        open_at_once[1] = max(open_at_once)
        if open_at_once[0] == together:
            all_open.set()
        try:
            if request.path not in ("/api", "/apis"):
                # A version's document is answered once every one was asked for; a client that asks one at a
                # time waits out this bound on each and is found out by the count of requests open at once.
                with anyio.move_on_after(0.2):
                    await all_open.wait()
        finally:
            open_at_once[0] -= 1
        if request.path in status:
            return web.json_response({"kind": "Status", "code": status[request.path]}, status=status[request.path])
        if request.path == "/api":
            return web.json_response({"versions": ["v1"]})
        if request.path == "/api/v1":
            return web.json_response({"resources": [{"name": "pods"}, {"name": "pods/binding"}, {"name": "nodes"}]})
        if request.path == "/apis":
            return web.json_response({"groups": [{"name": g, "versions": [{"version": v}]} for g, v, _ in GROUPS]})
        for group, version, plural in GROUPS:
            if request.path == f"/apis/{group}/{version}":
                return web.json_response({"resources": [{"name": plural}]})
        return web.json_response({}, status=404)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with served(app) as url:
        yield url, asked, open_at_once


async def test_every_group_version_is_read_at_once_and_one_that_is_down_stops_nothing() -> None:
    async with server({"/apis/metrics.example.com/v1": 503}) as (url, asked, open_at_once):
        port = KubeCluster(client_for(url))
        try:
            served = await port.served()
        finally:
            await port.close()
    assert ("", "v1", "pods/binding") in served and ("scheduling.x-k8s.io", "v1alpha1", "podgroups") in served
    assert ("group19.example.com", "v1", "kind19s") in served
    assert not any(group == "metrics.example.com" for group, _, _ in served)  # its API is down: left out
    assert len(asked) == 2 + 1 + len(GROUPS)
    # Read one after another, one request is ever open (and a real server's thirty documents add up).
    assert open_at_once[1] == len(GROUPS) + 1


async def test_a_core_api_that_refuses_fails_discovery_with_the_port_error_itself() -> None:
    async with server({"/api/v1": 403}) as (url, _, _):
        port = KubeCluster(client_for(url))
        try:
            with pytest.raises(Forbidden):  # as itself, not in an exception group: the caller retries it
                await port.served()
        finally:
            await port.close()


async def test_pods_and_nodes_are_listed_while_discovery_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every API server serves pods and nodes: a start lists them without waiting for discovery, and the rest
    as soon as discovery ends."""
    during: list[str] = []
    discovering = [False]
    pods_asked = anyio.Event()
    served, listing = Writers.served, Writers.list

    async def slow_discovery(self: Writers, groups: Collection[str] | None = None) -> set[tuple[str, str, str]]:
        discovering[0] = True
        with anyio.move_on_after(5):  # a start that waits for discovery first never asks for pods meanwhile
            await pods_asked.wait()
        try:
            return await served(self, groups)
        finally:
            discovering[0] = False

    async def noted(self: Writers, resource: ApiResource, **options: Any) -> Listing:
        if discovering[0]:
            during.append(resource.plural)
        if resource == PODS:
            pods_asked.set()
        return await listing(self, resource, **options)

    monkeypatch.setattr(Writers, "served", slow_discovery)
    monkeypatch.setattr(Writers, "list", noted)
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where:
        where.create(gpu_pod("w0", annotations=pfn("g", 1)))
        async with phalanx(where) as app:
            assert sorted(set(during)) == ["nodes", "pods"]
            assert len(app.informers) == len(app.watched) and all(informer.synced for informer in app.informers)
            await eventually(lambda: "team/w0" in where.bound(), what="the pod bound")


async def test_discovery_for_some_groups_reads_only_their_documents_and_the_core_api() -> None:
    async with server({}, together=2) as (url, asked, _):
        port = KubeCluster(client_for(url))
        try:
            served = await port.served({"scheduling.x-k8s.io", "nothing.example.com"})
        finally:
            await port.close()
    assert sorted(asked) == ["/api", "/api/v1", "/apis", "/apis/scheduling.x-k8s.io/v1alpha1"]
    assert {group for group, _, _ in served} == {"", "scheduling.x-k8s.io"}
