"""Where the API server is and how to reach it: its address, TLS, proxy and credentials.

Read from a kubeconfig (kubectl's rules: the current or named context, paths relative to the file, data
fields in base64) or from the pod's service account. kubernetes_asyncio is not imported for it: the
import cost a fifth of the process's CPU from exec to its first bind (issue 40). Only a kubeconfig whose
user runs an ``exec`` plugin or names an ``auth-provider`` is read by kubernetes_asyncio, which refreshes
those tokens; the import is then paid by those who need it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import structlog
import yaml

from scheduler.ports.errors import Unavailable

#: The service account's files in every pod (kubelet mounts them; the token is rotated while the pod runs).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: How long a token read from a file is used before the file is read again. client-go re-reads after a
#: minute; kubelet rotates a projected token well before it expires (at 80% of its life).
TOKEN_FILE_REREAD_SECONDS = 60.0


class KubeConfigError(ValueError):
    """No usable cluster configuration; the message says which file or context, and what is wrong."""


class Credentials(Protocol):
    """What a request carries to say who sends it."""

    async def authorization(self) -> str | None:
        """The ``Authorization`` header's value, or None to send none."""
        ...


@dataclass(frozen=True, slots=True)
class Anonymous:
    async def authorization(self) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Header:
    """A header that does not change: a kubeconfig's token, or its user name and password."""

    value: str

    async def authorization(self) -> str | None:
        return self.value


@dataclass(slots=True)
class TokenFile:
    """A token read again from its file once a minute, so that a rotated token is picked up."""

    path: Path
    clock: Callable[[], float] = time.monotonic
    _token: str = ""
    _read_at: float = field(default=-float("inf"))

    async def authorization(self) -> str | None:
        now = self.clock()
        if now - self._read_at >= TOKEN_FILE_REREAD_SECONDS:
            try:
                token = self.path.read_text().strip()
            except OSError:
                token = ""
            if not token:
                if not self._token:
                    raise Unavailable(f"token file {self.path}: missing or empty")
                # A token file being replaced can be missing or empty for a moment (client-go keeps the last
                # token then too): the token read before still holds, and the file is tried at the next request.
                return f"Bearer {self._token}"
            self._token, self._read_at = token, now
        return f"Bearer {self._token}" if self._token else None


@dataclass(frozen=True, slots=True)
class Refreshed:
    """A token that kubernetes_asyncio keeps current (exec plugins, OIDC): asked for at every request."""

    token: Callable[[], Awaitable[str | None]]

    async def authorization(self) -> str | None:
        return await self.token()


@dataclass(frozen=True, slots=True)
class Connection:
    """Everything a request to the API server needs besides its method, path and body."""

    host: str  # scheme, host and port, without a trailing slash
    credentials: Credentials = field(default_factory=Anonymous)
    tls: ssl.SSLContext | None = None  # None: plain HTTP
    server_name: str | None = None  # the name checked against the server's certificate, if not the host's
    proxy: str | None = None  # an explicit proxy (kubeconfig proxy-url); else the environment's is used
    read_only: bool = False  # every request that is not a read is refused before it is sent
    #: How another process makes the same connection: the arguments of ``python -m
    #: scheduler.ports.kube.writer`` (a writer process, ``writers.py``); empty where none can.
    origin: tuple[str, ...] = field(default=(), compare=False)

    def reading_only(self) -> Connection:
        return replace(self, read_only=True)


def plain(url: str) -> Connection:
    """An API server that asks for no credentials (the sandbox's and the emulator's, on loopback)."""
    return Connection(host=url.rstrip("/"), tls=_tls() if url.startswith("https:") else None, origin=("--url", url))


def in_cluster(folder: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] = os.environ) -> Connection:
    """The API server of the cluster this process runs in, as the pod's service account."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("in-cluster configuration: KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    token = folder / "token"
    if not token.is_file():
        raise KubeConfigError(f"in-cluster configuration: no service account token at {token}")
    ca = folder / "ca.crt"
    try:
        tls = _tls(ca_file=str(ca))
    except (OSError, ssl.SSLError) as error:
        raise KubeConfigError(f"in-cluster configuration: certificate authority {ca}: {_reason(error)}") from None
    origin = ("--in-cluster",) if folder == SERVICE_ACCOUNT else ()
    return Connection(host=f"https://{host}:{port}", credentials=TokenFile(token), tls=tls, origin=origin)


def default_kubeconfig() -> str:
    """The first file of ``KUBECONFIG``, or ``~/.kube/config``, as kubectl looks for it."""
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


async def from_kubeconfig(path: str, context: str | None = None) -> Connection:
    """The connection of ``context`` (or the current one) of the kubeconfig at ``path``."""
    if not os.path.exists(path):
        raise KubeConfigError(f"kubeconfig {path}: no such file")
    document = _document(path)
    where = f"kubeconfig {path}" + (f", context {context!r}" if context else "")
    named = context or document.get("current-context")
    if not named:
        raise KubeConfigError(f"kubeconfig {path}: no current-context, and no --context given")
    entry = _named(document, "contexts", str(named), where)
    cluster = _named(document, "clusters", str(entry.get("cluster")), where)
    user = _named(document, "users", str(entry.get("user")), where) if entry.get("user") else {}
    # The context as resolved now: a writer started later must reach this cluster, whatever the kubeconfig's
    # current-context has become since.
    origin = ("--kubeconfig", os.path.abspath(path), "--context", str(named))
    if user.get("exec") or user.get("auth-provider"):
        plugin = user.get("exec")
        command = str(plugin.get("command", "")) if isinstance(plugin, Mapping) else ""
        return replace(await _through_client_library(path, context, command), origin=origin)
    server = str(cluster.get("server") or "")
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeConfigError(f"kubeconfig {path}: server {server!r} is not an http(s) URL")
    folder = Path(path).parent
    tls = _kubeconfig_tls(cluster, user, folder, where) if parts.scheme == "https" else None
    return Connection(
        host=server.rstrip("/"),
        credentials=_credentials(user, folder, where),
        tls=tls,
        server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        proxy=str(cluster["proxy-url"]) if cluster.get("proxy-url") else None,
        origin=origin,
    )


def _document(path: str) -> dict[str, Any]:
    """The kubeconfig as a mapping; refused with the parser's own words for where it broke."""
    try:
        with open(path, "rb") as stream:
            document = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as error:
        raise KubeConfigError(f"kubeconfig {path}: not readable YAML: {_reason(error)}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: expected a mapping with clusters, contexts and users")
    return document


def _named(document: Mapping[str, Any], section: str, name: str, where: str) -> dict[str, Any]:
    """The body of the entry ``name`` of a kubeconfig's ``section`` (contexts, clusters or users)."""
    entries = document.get(section) or []
    if not isinstance(entries, list):
        raise KubeConfigError(f"{where}: {section} must be a list of named entries")
    for item in entries:
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(section.removesuffix("s"))
            return dict(body) if isinstance(body, Mapping) else {}
    raise KubeConfigError(f"{where}: no {section.removesuffix('s')} named {name!r} in its {section}")


def _kubeconfig_tls(cluster: Mapping[str, Any], user: Mapping[str, Any], folder: Path, where: str) -> ssl.SSLContext:
    """The TLS of a kubeconfig's cluster and user, refused where kubectl refuses it."""
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        raise KubeConfigError(f"{where}: insecure-skip-tls-verify must be true or false, got {insecure!r}")
    has_ca = bool(cluster.get("certificate-authority") or cluster.get("certificate-authority-data"))
    if insecure and has_ca:
        raise KubeConfigError(
            f"{where}: insecure-skip-tls-verify and a certificate authority are given together; kubectl refuses "
            "that too: remove one"
        )
    has_cert = bool(user.get("client-certificate") or user.get("client-certificate-data"))
    has_key = bool(user.get("client-key") or user.get("client-key-data"))
    if has_cert != has_key:
        given = "client-certificate" if has_cert else "client-key"
        raise KubeConfigError(f"{where}: {given} is given without its pair; a client certificate needs both")
    try:
        ca_data = _data(cluster, "certificate-authority-data", where)
        return _tls(
            # The data wins over the file, as in client-go: never both trusted.
            ca_file=None if ca_data is not None else _file(cluster, "certificate-authority", folder),
            ca_data=ca_data,
            cert=_pem(user, "client-certificate", folder, where),
            key=_pem(user, "client-key", folder, where),
            verify=not insecure,
        )
    except FileNotFoundError as error:
        raise KubeConfigError(f"{where}: no such file: {error.filename}") from None
    except KubeConfigError:
        raise
    except (OSError, ssl.SSLError, ValueError) as error:
        raise KubeConfigError(f"{where}: {_reason(error)}") from None


def _credentials(user: Mapping[str, Any], folder: Path, where: str) -> Credentials:
    if user.get("tokenFile"):  # it wins over a token, as in client-go: the file is the one kept current
        path = folder / str(user["tokenFile"])
        if not path.is_file():
            raise KubeConfigError(f"{where}: no such file: {path}")
        return TokenFile(path)
    if user.get("token"):
        return Header(f"Bearer {user['token']}")
    if user.get("username") and user.get("password") is not None:
        pair = f"{user['username']}:{user['password']}".encode()
        return Header(f"Basic {base64.b64encode(pair).decode()}")
    return Anonymous()


def _file(entry: Mapping[str, Any], key: str, folder: Path) -> str | None:
    """The path a kubeconfig gives for ``key``, relative to the kubeconfig's folder; refused if not there."""
    if not entry.get(key):
        return None
    path = folder / str(entry[key])
    if not path.is_file():
        raise FileNotFoundError(2, "no such file", str(path))
    return str(path)


def _data(entry: Mapping[str, Any], key: str, where: str) -> bytes | None:
    if not entry.get(key):
        return None
    try:
        # Line breaks are allowed (wrapped output of base64), as Go's decoder allows them.
        return base64.b64decode("".join(str(entry[key]).split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeConfigError(f"{where}: {key} is not base64") from None


def _pem(entry: Mapping[str, Any], key: str, folder: Path, where: str) -> bytes | None:
    """A certificate or key given as ``key`` (a file) or ``key-data`` (its content in base64)."""
    data = _data(entry, f"{key}-data", where)
    if data is not None:
        return data
    path = _file(entry, key, folder)
    return Path(path).read_bytes() if path else None


def _tls(
    *,
    ca_file: str | None = None,
    ca_data: bytes | None = None,
    cert: bytes | None = None,
    key: bytes | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """As kubernetes_asyncio built it: the cluster's own authority if it names one (else the system's), the
    client's certificate if it has one."""
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data.decode() if ca_data else None)
    if cert is not None:
        # Python loads a client certificate only from files: they live for the call and no longer.
        with tempfile.TemporaryDirectory(prefix="phalanx-tls-") as folder:
            cert_path, key_path = Path(folder, "cert.pem"), Path(folder, "key.pem")
            cert_path.write_bytes(cert)
            if key is not None:
                key_path.touch(mode=0o600)
                key_path.write_bytes(key)
            context.load_cert_chain(str(cert_path), str(key_path) if key is not None else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def _through_client_library(path: str, context: str | None, command: str) -> Connection:
    """A kubeconfig whose tokens come from an exec plugin (``command``) or an auth provider (``command`` empty),
    read by kubernetes_asyncio."""
    # Imported here: most processes never need it, and it costs a fifth of a start.
    from kubernetes_asyncio.client import Configuration  # noqa: PLC0415
    from kubernetes_asyncio.config import load_kube_config  # noqa: PLC0415

    configuration = Configuration()
    # The library logs a failure of the plugin as well as raising it: told once, in the error below.
    library = logging.getLogger("kubernetes_asyncio.config.kube_config")
    told = _Kept()
    library.addHandler(told)
    propagated, library.propagate = library.propagate, False
    try:
        await load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except Exception as error:
        where = f"kubeconfig {path}" + (f", context {context!r}" if context else "")
        # The library logs a failure of the plugin before raising it; the cluster's files are read after it.
        if command and told.messages:
            raise KubeConfigError(f"{where}: its exec plugin {command!r} failed: {_reason(error)}") from None
        raise KubeConfigError(f"{where}: {_reason(error)}") from None
    finally:
        library.removeHandler(told)
        library.propagate = propagated
    for message in told.messages:  # logged without failing (a plugin's answer with no token): still worth a line
        structlog.get_logger("phalanx.kube").warning("the kubeconfig's credentials", kubeconfig=path, detail=message)
    host = str(configuration.host or "")
    scheme = urlsplit(host).scheme

    async def token() -> str | None:
        if "BearerToken" not in configuration.api_key:
            return None
        # As kubernetes_asyncio's own calls authenticate: its refresh hook keeps the token current.
        value: str | None = await configuration.get_api_key_with_prefix("BearerToken")
        return value or None

    tls = None
    if scheme == "https":
        cert = Path(configuration.cert_file).read_bytes() if configuration.cert_file else None
        key = Path(configuration.key_file).read_bytes() if configuration.key_file else None
        tls = _tls(ca_file=configuration.ssl_ca_cert, cert=cert, key=key, verify=bool(configuration.verify_ssl))
    return Connection(
        host=host.rstrip("/"),
        credentials=Refreshed(token),
        tls=tls,
        server_name=configuration.tls_server_name,
        proxy=configuration.proxy,
    )


class _Kept(logging.Handler):
    """The messages a library logged, kept instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _reason(error: BaseException) -> str:
    """An error's first line, in words a user can act on."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, OSError) and not isinstance(error, ssl.SSLError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    if isinstance(error, ssl.SSLError):
        return f"not a usable certificate or key ({text})"
    # kubernetes_asyncio's words for a certificate or key file that is not there.
    return re.sub(r"^File does not exists?: ?", "no such file: ", text)
