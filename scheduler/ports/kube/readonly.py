"""Reading a cluster without any possibility of writing to it, for ``phalanx dry-run`` and ``explain``.

:func:`read_only` makes an ``ApiClient`` refuse every request whose HTTP method is not a read (GET,
HEAD, OPTIONS) before it leaves the process, whatever code asks for it: a dry-run is safe because it
cannot write, not because it happens not to. The guard is on the client's connection pool, which every
request of every session on it asks for a connection, whether it comes through the generated API or
straight from ``KubeCluster`` (which reopens the session on the same pool).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ReadOnlyViolation(RuntimeError):
    """Something tried to write through a read-only client."""


def read_only(api: ApiClient) -> ApiClient:
    """Make ``api`` refuse every non-read request (returns ``api`` itself, guarded)."""
    connector = api.rest_client.pool_manager.connector
    assert isinstance(connector, aiohttp.BaseConnector)  # kubernetes_asyncio opens its session on one
    connect = connector.connect

    async def guarded(request: aiohttp.ClientRequest, *args: Any, **kwargs: Any) -> Any:
        method = request.method.upper()
        if method not in READ_METHODS:
            raise ReadOnlyViolation(f"refused {method} {request.url}: this client only reads the cluster")
        return await connect(request, *args, **kwargs)

    connector.connect = guarded  # type: ignore[method-assign,assignment]
    return api
