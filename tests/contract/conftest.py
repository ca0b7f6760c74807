"""One contract, two servers: every test here runs against the emulator and, when KUBEBUILDER_ASSETS is set,
against the real kube-apiserver, with the same assertions. Where they differ, the emulator is wrong.

Every contract was first asserted against a real kube-apiserver 1.36 (codes and messages are its own). CI has
none, so there these tests hold the emulator to what that server was seen to do; a test whose contract the
emulator once got wrong says so in its docstring."""

from __future__ import annotations

import itertools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import yaml

from scheduler.ports.sim import ClusterShape, SimServer, Store, load
from scripts.controlplane import ControlPlane
from tests.conftest import ASSETS, REAL
from tests.integration.support import SHAPE

SERVERS = ["emulator", REAL] if ASSETS else ["emulator"]
_namespaces = itertools.count()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    #: The answer's ``Warning`` headers (a write's dropped fields, a deprecated version).
    warnings: tuple[str, ...] = ()

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        """The ``reason`` of a Status answer ("" when the body is not one)."""
        try:
            return str(self.json.get("reason", ""))
        except ValueError:
            return ""


@dataclass
class Api:
    """Raw HTTP to one API server, as a client library sends it; ``namespace`` is the test's own."""

    server: str
    url: str
    session: aiohttp.ClientSession
    namespace: str
    headers: Mapping[str, str]
    ssl: ssl.SSLContext | bool

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Answer:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {**self.headers, "Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(method, self.url + path, data=data, headers=headers, ssl=self.ssl) as answer:
            warnings = tuple(answer.headers.getall("Warning", ()))
            return Answer(answer.status, answer.headers.get("Content-Type", ""), await answer.read(), warnings)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        answer = await self.request(method, path, body, **kwargs)
        assert 200 <= answer.status < 300, (method, path, answer.status, answer.body[:400])
        return answer.json

    def path(self, resource: str, name: str = "", *, group: str = "", version: str = "v1") -> str:
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        return f"{base}/namespaces/{self.namespace}/{resource}" + (f"/{name}" if name else "")

    async def watch(self, path: str, version: str, **query: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Watch events (type, object) from ``version`` on; stops when the caller stops iterating."""
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "30", **query}
        async with self.session.get(self.url + path, params=params, headers=self.headers, ssl=self.ssl) as answer:
            assert answer.status == 200, await answer.text()
            async for line in answer.content:
                if line.strip():
                    event = json.loads(line)
                    yield event["type"], event["object"]


def pod(name: str, **spec: Any) -> dict[str, Any]:
    """A pod no scheduler owns: it stays as the test leaves it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "pause"}], **spec},
    }


@pytest.fixture(params=SERVERS)
async def api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    namespace = f"contract-{next(_namespaces)}"
    async with aiohttp.ClientSession() as session:
        if request.param == "emulator":
            store = Store()
            load(store, ClusterShape.parse(SHAPE).node_manifests())
            server = SimServer(store)
            url = await server.start()
            try:
                api = Api("emulator", url, session, namespace, {}, False)
                await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
                yield api
            finally:
                await server.stop()
        else:
            plane: ControlPlane = request.getfixturevalue("control_plane")
            headers = {"Authorization": f"Bearer {plane.admin_token}"}
            api = Api(REAL, plane.url, session, namespace, headers, plane.ssl_context())
            await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
            try:
                yield api
            finally:  # the session's other tests expect empty nodes: what this test bound goes
                listing = await api.ok("GET", api.path("pods"))
                for item in listing["items"]:
                    await api.request("DELETE", api.path("pods", item["metadata"]["name"]), {"gracePeriodSeconds": 0})


def from_yaml(answer: Answer) -> Any:
    return yaml.safe_load(answer.body)
