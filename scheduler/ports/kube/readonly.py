"""Reading a cluster without any possibility of writing to it, for ``phalanx dry-run`` and ``explain``.

:func:`read_only` makes an ``ApiClient`` refuse every request whose HTTP method is not a read (GET,
HEAD, OPTIONS) before it leaves the process, whatever code asks for it: a dry-run is safe because it
cannot write, not because it happens not to.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ReadOnlyViolation(RuntimeError):
    """Something tried to write through a read-only client."""


def read_only(api: ApiClient) -> ApiClient:
    """Make ``api`` refuse every non-read request (returns ``api`` itself, guarded)."""
    rest = api.rest_client
    send = rest.request

    async def guarded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in READ_METHODS:
            raise ReadOnlyViolation(f"refused {method.upper()} {url}: this client only reads the cluster")
        return await send(method, url, *args, **kwargs)

    rest.request = guarded  # type: ignore[method-assign]
    return api
