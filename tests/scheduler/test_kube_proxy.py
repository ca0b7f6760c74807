"""The proxy settings an operator gives Phalanx (HTTPS_PROXY, NO_PROXY, kubeconfig proxy-url) are honoured."""

from dataclasses import replace

import pytest

from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.port import NODES
from tests.scheduler.support import cluster


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
