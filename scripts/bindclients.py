#!/usr/bin/env python3
"""``scripts/bench_e2e.py --real --clients``: which HTTP client binds fastest, with no scheduler at all.

Each client binds the same 2,000 plain pods on a fresh server (as ``raw binding`` in ``realbench.py``): one
``pods/binding`` POST per pod, 64 in flight, in a process of its own started with a kubeconfig. Figures are
the pods per second a watch sees over the bind window, and the client's own CPU per bind (its process time
from its first request to its last answer, over the pods):

  aiohttp              aiohttp's session straight, HTTP/1.1 (the bare client of ``raw binding``)
  phalanx              Phalanx's own port, ``KubeCluster.bind`` (its own aiohttp session, JSON bodies)
  httpx-h2             httpx over HTTP/2, every request on one connection, as client-go binds; measured only
                       where httpx and h2 are installed (``pip install 'httpx[http2]'``): not a dependency

Run as a client: ``bindclients.py CLIENT KUBECONFIG``; it prints ``cpu_ms_per_bind=X`` when done.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.ports.kube.client import connect  # noqa: E402
from scheduler.ports.kube.cluster import KubeCluster  # noqa: E402
from scheduler.ports.port import PODS  # noqa: E402

CLIENTS = ("aiohttp", "phalanx", "httpx-h2")
IN_FLIGHT = 64
GANG = 8  # pods per node, as the raw binder binds them


def available(client: str) -> bool:
    if client != "httpx-h2":
        return True
    try:
        import h2  # type: ignore[import-not-found]  # noqa: F401, PLC0415
        import httpx  # type: ignore[import-not-found]  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def binding(pod: dict[str, Any], node: str) -> bytes:
    metadata = pod["metadata"]
    return json.dumps({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }).encode()  # fmt: skip


async def poster(client: str, kubeconfig: Path) -> tuple[Callable[[str, bytes], Awaitable[None]], Any]:
    """A function that POSTs a body to a path and fails on an error status, and what to close after."""
    config = yaml.safe_load(kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    context = ssl.create_default_context(cafile=config["clusters"][0]["cluster"]["certificate-authority"])
    headers = {"Authorization": f"Bearer {config['users'][0]['user']['token']}", "Content-Type": "application/json"}
    if client == "httpx-h2":
        import httpx  # noqa: PLC0415

        session = httpx.AsyncClient(http2=True, verify=context)

        async def post_h2(path: str, body: bytes) -> None:
            answer = await session.post(server + path, content=body, headers=headers)
            if answer.status_code >= 300 or answer.http_version != "HTTP/2":
                raise RuntimeError(f"POST {path}: {answer.status_code} over {answer.http_version}")

        return post_h2, session.aclose
    import aiohttp  # noqa: PLC0415

    pool = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100, ssl=context))

    async def post(path: str, body: bytes) -> None:
        async with pool.post(server + path, data=body, headers=headers) as answer:
            await answer.read()
            if answer.status >= 300:
                raise RuntimeError(f"POST {path}: {answer.status}")

    return post, pool.close


async def bind_all(client: str, kubeconfig: Path) -> None:
    cluster = KubeCluster(await connect(str(kubeconfig)))
    pods = sorted((await cluster.list(PODS)).items, key=lambda pod: str(pod["metadata"]["name"]))
    nodes = [f"b0-r{(i // GANG) // 32}-n{(i // GANG) % 32}" for i in range(len(pods))]
    if client == "phalanx":
        close: Any = cluster.close

        async def one(pod: dict[str, Any], node: str) -> None:
            metadata = pod["metadata"]
            await cluster.bind(metadata["namespace"], metadata["name"], metadata["uid"], node)
    else:
        await cluster.close()
        post, close = await poster(client, kubeconfig)

        async def one(pod: dict[str, Any], node: str) -> None:
            await post(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}/binding",
                       binding(pod, node))  # fmt: skip

    slots = asyncio.Semaphore(IN_FLIGHT)

    async def limited(pod: dict[str, Any], node: str) -> None:
        async with slots:
            await one(pod, node)

    began = time.process_time()
    await asyncio.gather(*(limited(pod, node) for pod, node in zip(pods, nodes, strict=True)))
    print(f"cpu_ms_per_bind={(time.process_time() - began) / len(pods) * 1000:.3f}", flush=True)
    await close()


if __name__ == "__main__":
    asyncio.run(bind_all(sys.argv[1], Path(sys.argv[2])))
