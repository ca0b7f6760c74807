"""The emulator as an API server process of its own (``python -m scheduler.ports.sim.apiserver``), over HTTPS
as every real server speaks, and its errors in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scheduler.ports.kube import KubeCluster, connect
from scheduler.ports.port import NODES
from tests.scheduler.test_kube_connection import TLS, data, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "scheduler.ports.sim.apiserver", "--shape", "blocks=1,racks=1,nodes=2,gpus=8"]
CERTIFICATE = ["--tls-cert-file", str(TLS / "server.crt"), "--tls-private-key-file", str(TLS / "server.key")]


async def test_the_server_speaks_https_with_the_certificate_it_is_given(tmp_path: Path) -> None:
    with subprocess.Popen([*SERVER, *CERTIFICATE], stdout=subprocess.PIPE, text=True, cwd=ROOT) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            assert line.startswith("serving https://127.0.0.1:"), line
            names = await nodes_listed(line.split()[1], tmp_path)
        finally:
            server.terminate()
    assert names == ["b0-r0-n0", "b0-r0-n1"]


async def nodes_listed(url: str, folder: Path) -> list[str]:
    """The nodes' names, listed over HTTPS with the server's certificate checked against the tests' authority."""
    cluster = {"server": url, "certificate-authority-data": data("ca.crt"), "tls-server-name": "kubernetes.default.svc"}
    port = KubeCluster(await connect(str(write_kubeconfig(folder, cluster, {"token": "t"}))), request_timeout=10)
    try:
        listing = await port.list(NODES)
    finally:
        await port.close()
    return sorted(node["metadata"]["name"] for node in listing.items)


def test_a_certificate_that_cannot_be_read_or_a_key_without_it_is_one_line() -> None:
    missing = [*SERVER, "--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"]
    done = subprocess.run(missing, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.startswith("serve: ") and len(done.stderr.splitlines()) == 1
    alone = [*SERVER, "--tls-cert-file", str(TLS / "server.crt")]
    done = subprocess.run(alone, capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 2 and "--tls-cert-file and --tls-private-key-file go together" in done.stderr
