"""Reaching an API server as a kubeconfig or the service account says: TLS, credentials, contexts, errors.

The server here is a small HTTPS server that answers a node list and says who called (the client
certificate's name and the Authorization header). Its certificates (``tests/data/tls``) were made once for
these tests by a throwaway authority valid for a century: the server's names only
``kubernetes.default.svc``, the client's is ``alice``; ``other-ca.crt`` is another authority, which signed
neither. ``proxied/`` was made the same way for the HTTPS proxy's test: one authority signed a server's
certificate (``kubernetes.default.svc``) and a proxy's (``127.0.0.1``, ``localhost``).
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from scheduler.ports.errors import Unavailable
from scheduler.ports.kube import KubeCluster, KubeConfigError, connect
from scheduler.ports.kube.connection import TOKEN_FILE_REREAD_SECONDS, TokenFile, in_cluster
from scheduler.ports.port import NODES
from tests.scheduler.support import served

TLS = Path(__file__).resolve().parents[1] / "data" / "tls"


@asynccontextmanager
async def https_server(certificates: Path = TLS) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTPS server on loopback that asks for (and does not require) a client certificate; its own
    certificate and authority from ``certificates``."""
    callers: list[dict[str, Any]] = []

    async def nodes(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in peer["subject"]) if peer else {}
        callers.append(
            {"certificate": subject.get("commonName"), "authorization": request.headers.get("Authorization")}
        )
        return web.json_response({"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": []})

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates / "ca.crt"))
    context.load_cert_chain(str(certificates / "server.crt"), str(certificates / "server.key"))
    context.verify_mode = ssl.CERT_OPTIONAL

    async def binding(request: web.Request) -> web.Response:
        await nodes(request)
        return web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)

    app = web.Application()
    app.router.add_get("/api/v1/nodes", nodes)
    app.router.add_post("/api/v1/namespaces/team/pods/a/binding", binding)
    async with served(app, tls=context) as url:
        yield url, callers


def write_kubeconfig(folder: Path, cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> Path:
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "main",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}, *extra.get("contexts", [])],
    }))  # fmt: skip
    return path


def data(name: str) -> str:
    return base64.b64encode((TLS / name).read_bytes()).decode()


async def nodes_listed(path: Path, context: str | None = None) -> None:
    port = KubeCluster(await connect(str(path), context), request_timeout=10)
    try:
        assert (await port.list(NODES)).items == []
    finally:
        await port.close()


async def test_a_client_certificate_and_the_cluster_s_authority_given_as_data(tmp_path: Path) -> None:
    async with https_server() as (url, callers):
        cluster = {
            "server": url,
            "certificate-authority-data": data("ca.crt"),
            "tls-server-name": "kubernetes.default.svc",
        }
        user = {"client-certificate-data": data("client.crt"), "client-key-data": data("client.key")}
        await nodes_listed(write_kubeconfig(tmp_path, cluster, user))
    assert callers == [{"certificate": "alice", "authorization": None}]


async def test_writes_go_over_the_same_tls_with_the_same_certificate_and_name(tmp_path: Path) -> None:
    """A binding (made by the port's own HTTP/1.1, not aiohttp) checks the server's certificate against the
    kubeconfig's authority and ``tls-server-name`` (a trailing dot as good as none), and shows the user's
    certificate, as the reads do."""
    async with https_server() as (url, callers):
        cluster = {"server": url, "certificate-authority-data": data("ca.crt")}
        user = {"client-certificate-data": data("client.crt"), "client-key-data": data("client.key")}
        for name in (None, "kubernetes.default.svc", "kubernetes.default.svc."):
            given = {**cluster, "tls-server-name": name} if name else cluster
            port = KubeCluster(await connect(str(write_kubeconfig(tmp_path, given, user))), request_timeout=10)
            try:
                if name:
                    await port.bind("team", "a", "uid-a", "node-1")
                else:
                    with pytest.raises(Unavailable, match="certificate"):  # the certificate names another host
                        await port.bind("team", "a", "uid-a", "node-1")
            finally:
                await port.close()
    assert callers == [{"certificate": "alice", "authorization": None}] * 2


async def test_files_relative_to_the_kubeconfig_and_a_token_file(tmp_path: Path) -> None:
    for name in ("ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_bytes((TLS / name).read_bytes())
    (tmp_path / "token").write_text("from-a-file\n")
    async with https_server() as (url, callers):
        cluster = {"server": url, "certificate-authority": "ca.crt", "tls-server-name": "kubernetes.default.svc"}
        await nodes_listed(write_kubeconfig(tmp_path, cluster, {"tokenFile": "token"}))
    assert callers == [{"certificate": None, "authorization": "Bearer from-a-file"}]


async def test_a_server_whose_certificate_does_not_match_is_refused(tmp_path: Path) -> None:
    """The certificate names kubernetes.default.svc, not 127.0.0.1; a server the system's authorities do not
    know is refused too. Skipping verification, as the kubeconfig may say, reaches both."""
    async with https_server() as (url, callers):
        for cluster in ({"server": url, "certificate-authority-data": data("ca.crt")}, {"server": url}):
            with pytest.raises(Unavailable, match="certificate"):
                await nodes_listed(write_kubeconfig(tmp_path, cluster, {"token": "t"}))
        await nodes_listed(
            write_kubeconfig(tmp_path, {"server": url, "insecure-skip-tls-verify": True}, {"token": "t"})
        )
    assert callers == [{"certificate": None, "authorization": "Bearer t"}]


async def test_the_named_context_and_basic_credentials(tmp_path: Path) -> None:
    async with https_server() as (url, callers):
        other = {"name": "other", "context": {"cluster": "c", "user": "u"}}
        cluster = {"server": url, "insecure-skip-tls-verify": True}
        path = write_kubeconfig(tmp_path, cluster, {"username": "bob", "password": "pw"}, contexts=[other])
        await nodes_listed(path, "other")
    assert callers == [{"certificate": None, "authorization": "Basic " + base64.b64encode(b"bob:pw").decode()}]


async def test_an_exec_plugin_s_token_is_asked_for_and_sent(tmp_path: Path) -> None:
    """A kubeconfig whose user runs an exec plugin (as EKS's and GKE's do) is read by kubernetes_asyncio."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": "from-exec"}}  # fmt: skip
    plugin = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
              "args": ["-c", f"print({json.dumps(json.dumps(credential))})"]}  # fmt: skip
    async with https_server() as (url, callers):
        await nodes_listed(
            write_kubeconfig(tmp_path, {"server": url, "insecure-skip-tls-verify": True}, {"exec": plugin})
        )
    assert callers == [{"certificate": None, "authorization": "Bearer from-exec"}]


async def test_the_authority_s_data_wins_over_its_file_and_may_be_wrapped(tmp_path: Path) -> None:
    """As client-go reads them: never both authorities trusted; base64 broken over lines, as `base64` writes it."""
    (tmp_path / "ca.crt").write_bytes((TLS / "ca.crt").read_bytes())
    wrapped = "\n".join(data("ca.crt")[i : i + 76] for i in range(0, len(data("ca.crt")), 76))
    async with https_server() as (url, callers):
        name = {"server": url, "tls-server-name": "kubernetes.default.svc"}
        other = {**name, "certificate-authority": "ca.crt", "certificate-authority-data": data("other-ca.crt")}
        with pytest.raises(Unavailable, match="certificate"):
            await nodes_listed(write_kubeconfig(tmp_path, other, {"token": "t"}))
        await nodes_listed(write_kubeconfig(tmp_path, {**name, "certificate-authority-data": wrapped}, {"token": "t"}))
    assert callers == [{"certificate": None, "authorization": "Bearer t"}]


async def test_a_token_file_wins_over_a_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-the-file")
    async with https_server() as (url, callers):
        cluster = {"server": url, "insecure-skip-tls-verify": True}
        await nodes_listed(write_kubeconfig(tmp_path, cluster, {"token": "stale", "tokenFile": "token"}))
    assert callers == [{"certificate": None, "authorization": "Bearer from-the-file"}]


@pytest.mark.parametrize(
    ("cluster", "user", "context", "said"),
    [
        ({"server": "https://x"}, {}, "nope", "context 'nope': no context named 'nope' in its contexts"),
        ({"server": "ftp://x"}, {}, None, "server 'ftp://x' is not an http(s) URL"),
        (
            {"server": "https://x", "certificate-authority-data": "%%%"},
            {},
            None,
            "certificate-authority-data is not base64",
        ),
        ({"server": "https://x", "certificate-authority": "missing.crt"}, {}, None, "no such file: "),
        ({"server": "https://x"}, {"tokenFile": "missing-token"}, None, "no such file: "),
        (
            {"server": "https://x", "certificate-authority-data": data("client.key")},
            {},
            None,
            "not a usable certificate",
        ),
        (
            {"server": "https://x", "insecure-skip-tls-verify": True, "certificate-authority-data": data("ca.crt")},
            {},
            None,
            "insecure-skip-tls-verify and a certificate authority are given together",
        ),
        ({"server": "https://x", "insecure-skip-tls-verify": "false"}, {}, None, "must be true or false, got 'false'"),
        (
            {"server": "https://x"},
            {"client-key-data": data("client.key")},
            None,
            "client-key is given without its pair",
        ),
    ],
)
async def test_a_kubeconfig_that_cannot_be_used_says_what_is_wrong(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], context: str | None, said: str
) -> None:
    path = write_kubeconfig(tmp_path, cluster, user)
    with pytest.raises(KubeConfigError, match=r"^kubeconfig ") as raised:
        await connect(str(path), context)
    message = str(raised.value)
    assert said in message and "\n" not in message and message.count("kubeconfig ") == 1, message


async def test_a_token_file_is_read_again_once_a_minute(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("first")
    token = TokenFile(path, clock=lambda: now[0])
    assert await token.authorization() == "Bearer first"
    path.write_text("rotated")
    now[0] = TOKEN_FILE_REREAD_SECONDS - 1
    assert await token.authorization() == "Bearer first"
    now[0] = TOKEN_FILE_REREAD_SECONDS
    assert await token.authorization() == "Bearer rotated"
    path.unlink()  # replaced by kubelet: the token read before serves until the file is back
    now[0] = 2 * TOKEN_FILE_REREAD_SECONDS
    assert await token.authorization() == "Bearer rotated"
    path.write_text("")  # rewritten in place, caught half way: not a token
    now[0] = 3 * TOKEN_FILE_REREAD_SECONDS
    assert await token.authorization() == "Bearer rotated"
    path.write_text("third")
    assert await token.authorization() == "Bearer third"  # read again at the next request, not a minute later


async def test_in_cluster_the_service_account_s_files_and_the_service_s_address(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeConfigError, match="no service account token at"):
        in_cluster(tmp_path, environ)
    (tmp_path / "token").write_text("sa-token")
    with pytest.raises(KubeConfigError, match=r"certificate authority .*ca\.crt"):
        in_cluster(tmp_path, environ)
    (tmp_path / "ca.crt").write_bytes((TLS / "ca.crt").read_bytes())
    connection = in_cluster(tmp_path, environ)
    assert connection.host == "https://[fd00::1]:443" and connection.tls is not None
    assert await connection.credentials.authorization() == "Bearer sa-token"
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster(tmp_path, {})


async def test_a_writer_process_reaches_the_context_resolved_now(tmp_path: Path) -> None:
    """The current context pinned: a writer started after ``kubectl config use-context`` writes where the
    deciding process reads."""
    other = {"name": "other", "context": {"cluster": "c", "user": "u"}}
    path = write_kubeconfig(tmp_path, {"server": "http://127.0.0.1:1"}, {}, contexts=[other])
    assert (await connect(str(path))).origin == ("--kubeconfig", str(path), "--context", "main")
    assert (await connect(str(path), "other")).origin[-2:] == ("--context", "other")
