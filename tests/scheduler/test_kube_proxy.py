"""The proxy settings an operator gives Phalanx (HTTPS_PROXY, NO_PROXY, kubeconfig proxy-url) are honoured."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.ports.errors import Unavailable
from scheduler.ports.kube import KubeCluster, client_for, connect
from scheduler.ports.port import NODES
from tests.scheduler.support import cluster
from tests.scheduler.test_kube_connection import TLS, data, https_server, write_kubeconfig

PROXY_USER = ("squid", "p@ss word")


@asynccontextmanager
async def tunnelling_proxy(tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """A forward proxy that opens CONNECT tunnels for a client showing :data:`PROXY_USER`, and refuses every
    other request with 407; spoken to over TLS with ``tls``. Yields its address and each request's (request
    line, Proxy-Authorization)."""
    asked: list[tuple[str, str]] = []
    expected = "Basic " + base64.b64encode(":".join(PROXY_USER).encode()).decode()

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *lines = head.split("\r\n")
        fields = dict(line.split(": ", 1) for line in lines if line)
        asked.append((request_line, fields.get("Proxy-Authorization", "")))
        method, target, _ = request_line.split()
        if method != "CONNECT" or fields.get("Proxy-Authorization") != expected:
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, port = target.rsplit(":", 1)
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe(reader, server_writer), pipe(server_reader, writer))

    proxy = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    try:
        yield f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}", asked
    finally:
        proxy.close()


async def listed_and_bound(folder: Path, cluster: dict[str, str]) -> None:
    """A read and a write through the kubeconfig's cluster, with a token."""
    port = KubeCluster(await connect(str(write_kubeconfig(folder, cluster, {"token": "t"}))), request_timeout=10)
    try:
        assert (await port.list(NODES)).items == []
        await port.bind("team", "a", "uid-a", "node-1")
    finally:
        await port.close()


async def test_requests_go_through_the_proxy_named_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where:
        # The API server's name does not resolve: only the proxy (the emulator, which serves absolute-form
        # requests as a forwarding proxy would pass them on) can reach it.
        monkeypatch.setenv("HTTP_PROXY", where.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        port = KubeCluster(client_for("http://kubernetes.invalid:6443"), request_timeout=5)
        try:
            listing = await port.list(NODES)
        finally:
            await port.close()
        assert sorted(node["metadata"]["name"] for node in listing.items) == ["b0-r0-n0", "b0-r0-n1"]


async def test_no_proxy_and_an_explicit_proxy_url_take_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    bypassed = KubeCluster(client_for("https://10.0.0.1:6443"))
    proxied = KubeCluster(client_for("https://api.example:6443"))
    # What a kubeconfig's proxy-url gives.
    explicit = KubeCluster(replace(client_for("https://api.example:6443"), proxy="http://chosen.example:8080"))
    assert bypassed.proxy is None
    assert proxied.proxy == "http://proxy.example:3128"
    assert proxied.proxy_headers is not None and proxied.proxy_headers["Proxy-Authorization"].startswith("Basic ")
    assert explicit.proxy == "http://chosen.example:8080"


def test_no_proxy_may_name_the_service_network_as_a_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Go's proxy rules read NO_PROXY (kubectl, client-go): a CIDR bypasses the proxy for the addresses in it."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "example.internal, 10.0.0.0/8,fd00::/8")
    assert KubeCluster(client_for("https://10.96.0.1:443")).proxy is None
    assert KubeCluster(client_for("https://[fd00::1]:443")).proxy is None
    assert KubeCluster(client_for("https://11.0.0.1:443")).proxy == "http://proxy.example:3128"
    assert KubeCluster(client_for("https://api.example:6443")).proxy == "http://proxy.example:3128"


async def test_an_https_server_is_reached_through_a_connect_tunnel_with_the_proxy_s_credentials(
    tmp_path: Path,
) -> None:
    """The kubeconfig's proxy-url names a proxy, with credentials: reads and writes to the HTTPS API server
    go through a CONNECT tunnel, TLS to the server inside it (its certificate checked as without a proxy).
    A proxy that refuses the tunnel is a transient failure that says so."""
    async with https_server() as (url, callers), tunnelling_proxy() as (proxy, asked):
        user, password = PROXY_USER
        server = {"server": url, "certificate-authority-data": data("ca.crt")}
        server["tls-server-name"] = "kubernetes.default.svc"
        given = {**server, "proxy-url": f"http://{user}:{password.replace(' ', '%20').replace('@', '%40')}@{proxy}"}
        await listed_and_bound(tmp_path, given)
        wrong = {**server, "proxy-url": f"http://{user}:guess@{proxy}"}
        refused = KubeCluster(await connect(str(write_kubeconfig(tmp_path, wrong, {"token": "t"}))), request_timeout=10)
        try:
            with pytest.raises(Unavailable, match=r"refused a tunnel to 127\.0\.0\.1: HTTP 407"):
                await refused.list(NODES)
        finally:
            await refused.close()
    authority = url.removeprefix("https://")
    assert {line for line, _ in asked} == {f"CONNECT {authority} HTTP/1.1"}
    assert callers == [{"certificate": None, "authorization": "Bearer t"}] * 2  # the server saw no proxy


async def test_an_https_proxy_is_checked_against_the_cluster_s_authority_and_tunnels_tls_inside_tls(
    tmp_path: Path,
) -> None:
    """``proxy-url: https://...``: the proxy's own certificate is checked as client-go checks it, against the
    authority the kubeconfig gives for the cluster and the proxy's address; the server's TLS runs inside the
    proxy's. A proxy whose certificate that authority did not sign is never sent the credentials."""
    proxied = TLS / "proxied"  # one authority signed both the server's certificate and the proxy's (127.0.0.1)
    proxy_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    proxy_tls.load_cert_chain(str(proxied / "proxy.crt"), str(proxied / "proxy.key"))
    async with https_server(proxied) as (url, callers), tunnelling_proxy(proxy_tls) as (proxy, asked):
        user, password = PROXY_USER
        credentials = f"{user}:{password.replace(' ', '%20').replace('@', '%40')}"
        server = {
            "server": url,
            "tls-server-name": "kubernetes.default.svc",
            "proxy-url": f"https://{credentials}@{proxy}",
        }
        given = {**server, "certificate-authority-data": base64.b64encode((proxied / "ca.crt").read_bytes()).decode()}
        await listed_and_bound(tmp_path, given)
        assert callers == [{"certificate": None, "authorization": "Bearer t"}] * 2
        assert {line for line, _ in asked} == {f"CONNECT {url.removeprefix('https://')} HTTP/1.1"}

        tunnels = len(asked)
        untrusted = {**server, "certificate-authority-data": data("ca.crt")}  # signed neither certificate
        refused = KubeCluster(
            await connect(str(write_kubeconfig(tmp_path, untrusted, {"token": "t"}))), request_timeout=10
        )
        try:
            with pytest.raises(Unavailable, match="CERTIFICATE_VERIFY_FAILED"):
                await refused.list(NODES)
        finally:
            await refused.close()
        assert len(asked) == tunnels, "the proxy that could not be verified was asked nothing"


@pytest.mark.parametrize(
    ("server", "no_proxy", "proxied"),
    [
        ("https://127.0.0.1:6443", "", False),  # loopback is never proxied (kind, minikube behind a proxy)
        ("https://localhost:6443", "", False),
        ("https://[::1]:6443", "", False),
        ("https://api.example.com:6443", "example.com", False),  # a name and every name under it
        ("https://example.com:6443", "example.com", False),
        ("https://example.com:6443", ".example.com", True),  # a leading dot: only the names under it
        ("https://api.example.com:6443", "*.example.com", False),
        ("https://notexample.com:6443", "example.com", True),
        ("https://api.example.com:6443", "api.example.com:6443", False),  # a port: that port only
        ("https://api.example.com:6443", "api.example.com:443", True),
        ("https://10.0.0.1:6443", "10.0.0.1:6443", False),
        ("https://[fd00::1]:6443", "fd00::1", False),
        ("https://api.example.com:6443", "*", False),
    ],
)
def test_no_proxy_is_read_as_kubectl_reads_it(
    monkeypatch: pytest.MonkeyPatch, server: str, no_proxy: str, proxied: bool
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert (KubeCluster(client_for(server)).proxy is not None) == proxied


def test_the_upper_case_variable_wins_and_an_http_server_takes_http_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://upper.example:3128")
    monkeypatch.setenv("https_proxy", "http://lower.example:3128")
    monkeypatch.setenv("http_proxy", "plain.example:8080")  # no scheme: http, as Go reads it
    assert KubeCluster(client_for("https://api.example:6443")).proxy == "http://upper.example:3128"
    assert KubeCluster(client_for("http://api.example:8080")).proxy == "http://plain.example:8080"
