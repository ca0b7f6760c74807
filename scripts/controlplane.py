"""A real Kubernetes control plane for tests and benchmarks: etcd and kube-apiserver from
``KUBEBUILDER_ASSETS``, on free loopback ports, stopped by PID.

This is the envtest convention Go controllers use (``setup-envtest use 1.36`` prints such a directory; no
registry reachable here ships one, so CI runs without it). The server runs with RBAC, a static admin token, TLS from a
throwaway self-signed certificate, the service-account token issuer (so a test can ask for a token of
Phalanx's own ServiceAccount), an audit log of every request, and the ``scheduling.k8s.io`` gang APIs
switched on; optionally a kube-controller-manager running chosen controllers (the Job, ReplicaSet, ...
controllers of a real cluster). There is no kubelet and no node controller: Nodes are created with their
status written through ``nodes/status``, and pods never run unless a test says they do.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

#: What the issue and the envtest README name: how to get the binaries on a machine with internet.
HOW_TO_GET = (
    "set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd, as envtest does "
    "(`setup-envtest use 1.36 -p path` on a machine with internet gets them)"
)

FEATURE_GATES = (
    "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true,"
    "DRAWorkloadResourceClaims=true"
)

#: Audit every request's metadata (user, verb, resource, status code): what a ClusterRole must allow.
_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message says which binary and why."""


def assets_dir() -> Path | None:
    """``KUBEBUILDER_ASSETS`` when it names a directory holding both binaries, else None."""
    value = os.environ.get("KUBEBUILDER_ASSETS", "").strip()
    if not value:
        return None
    path = Path(value)
    missing = [name for name in ("kube-apiserver", "etcd") if not os.access(path / name, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"KUBEBUILDER_ASSETS={value} lacks {' and '.join(missing)}; {HOW_TO_GET}")
    return path


def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that it is killed when the process that started it dies, even by SIGKILL (a test run
    stopped by a timeout must not leave servers behind): util-linux's ``setpriv --pdeathsig``, which sets
    Linux's PR_SET_PDEATHSIG and executes the command, where the machine has it."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {result.stderr.strip()[:300]}")


@dataclass
class ControlPlane:
    """A running etcd and kube-apiserver; :meth:`start` makes one, :meth:`stop` ends both."""

    workdir: Path
    url: str
    admin_token: str
    ca_file: Path
    #: Static tokens of the users every server has: ``admin`` and ``reader``, both in ``system:masters`` (a test
    #: that must show a client only reads gives it every right, so that only the client can be why it wrote nothing).
    tokens: dict[str, str]
    audit_log: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        assets: Path,
        workdir: Path,
        *,
        audit: bool = True,
        extra_flags: tuple[str, ...] = (),
        controllers: tuple[str, ...] = (),
    ) -> ControlPlane:
        """Start both and wait until the server is ready. ``audit`` logs every request's metadata as it is
        served (blocking mode: a request is in the log once its answer has been sent); benchmarks turn it off.
        ``controllers`` (e.g. ``("job-controller",)``) are run by a kube-controller-manager beside them.
        A port taken between being chosen and being listened on (it happened: another process's outgoing
        connection got it) is chosen again, up to three times."""
        for attempt in range(3):
            try:
                return cls._start(assets, workdir, audit=audit, extra_flags=extra_flags, controllers=controllers)
            except ControlPlaneError as error:
                if "address already in use" not in str(error) or attempt == 2:
                    raise
                shutil.rmtree(workdir / "etcd", ignore_errors=True)
        raise AssertionError("unreachable")

    @classmethod
    def _start(
        cls,
        assets: Path,
        workdir: Path,
        *,
        audit: bool,
        extra_flags: tuple[str, ...],
        controllers: tuple[str, ...],
    ) -> ControlPlane:
        workdir.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "srv.key", "-out", "srv.crt", "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=workdir,
        )  # fmt: skip
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=workdir)
        tokens = {user: secrets.token_hex(16) for user in ("admin", "reader")}
        (workdir / "tokens.csv").write_text(
            "".join(f'{token},{user},uid-{user},"system:masters"\n' for user, token in tokens.items())
        )
        (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(_AUDIT_POLICY))
        client_port, peer_port, secure_port = free_port(), free_port(), free_port()
        plane = cls(
            workdir=workdir,
            url=f"https://127.0.0.1:{secure_port}",
            admin_token=tokens["admin"],
            ca_file=workdir / "srv.crt",
            tokens=tokens,
            audit_log=workdir / "audit.log",
        )
        etcd_url = f"http://127.0.0.1:{client_port}"
        try:
            plane._spawn(
                "etcd",
                [
                    str(assets / "etcd"),
                    f"--data-dir={workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    "--log-level=warn",
                ],
            )
            plane._spawn(
                "kube-apiserver",
                [
                    str(assets / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={secure_port}",
                    f"--tls-cert-file={workdir / 'srv.crt'}",
                    f"--tls-private-key-file={workdir / 'srv.key'}",
                    f"--token-auth-file={workdir / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={workdir / 'sa.key'}",
                    f"--service-account-signing-key-file={workdir / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                    f"--feature-gates={FEATURE_GATES}",
                    "--runtime-config=scheduling.k8s.io/v1alpha2=true",
                    *(
                        (
                            f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
                            f"--audit-log-path={plane.audit_log}",
                            "--audit-log-mode=blocking",
                        )
                        if audit
                        else ()
                    ),
                    *extra_flags,
                ],
            )
            plane._wait_ready(timeout=60)
            if controllers:
                plane._spawn(
                    "kube-controller-manager",
                    [
                        str(assets / "kube-controller-manager"),
                        f"--kubeconfig={plane.kubeconfig(workdir / 'controllers.kubeconfig')}",
                        f"--controllers={','.join(controllers)}",
                        "--leader-elect=false",
                        "--use-service-account-credentials=false",
                        "--secure-port=0",
                        f"--feature-gates={FEATURE_GATES}",
                    ],
                )
        except BaseException:
            plane.stop()
            raise
        return plane

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self._logs.append(log)
        self.processes[name] = subprocess.Popen(
            dying_with_parent(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _wait_ready(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-1500:]
                    raise ControlPlaneError(f"{name} exited with {process.returncode}:\n{tail}")
            try:
                status, body = self.request("GET", "/readyz")
            except (urllib.error.URLError, OSError) as error:
                last = str(error)
            else:
                if status == 200:
                    return
                last = f"{status} {body[:200]!r}"
            time.sleep(0.1)  # polling a process we started; nothing to wait on but its port
        raise ControlPlaneError(f"kube-apiserver not ready after {timeout:.0f}s: {last}")

    # -- talking to it (synchronously: fixtures and setup, not the code under test) ------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        """One HTTP request as the admin (or ``token``); returns the status and the body, whatever the code."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token or self.admin_token}")
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self.ssl_context(), timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        """Like :meth:`request`, but the answer must be 2xx and is returned as JSON."""
        status, raw = self.request(method, path, body, **kwargs)
        if not 200 <= status < 300:
            raise ControlPlaneError(f"{method} {path}: {status} {raw[:400].decode(errors='replace')}")
        result: dict[str, Any] = json.loads(raw) if raw else {}
        return result

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` at its usual path (no update: tests build fresh objects), with
        ``fieldValidation=Strict`` as kubectl sends it: a misspelt or unknown field is refused, not dropped
        with a warning."""
        return self.call("POST", collection_path(obj) + "?fieldValidation=Strict", dict(obj))

    def kubeconfig(self, path: Path, *, token: str | None = None, user: str = "admin") -> Path:
        """A kubeconfig for this server with a bearer token (the admin's by default)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "envtest", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def audit_offset(self) -> int:
        """Where the audit log ends now: pass it to :meth:`audit` to read only what comes after."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit(self, offset: int = 0) -> Iterator[dict[str, Any]]:
        """Audit events logged from byte ``offset`` on.

        The server appends events as requests complete, a long one in more than one write: a line not
        ended yet is still being written (it is read next time), and a line that began before ``offset``
        (the offset was taken mid-write) belongs to what came before it.
        """
        if not self.audit_log.exists():
            return
        with self.audit_log.open("rb") as log:
            if offset > 0:
                log.seek(offset - 1)
                if log.read(1) != b"\n":
                    log.readline()
            for line in log:
                if line.endswith(b"\n") and line.strip():
                    yield json.loads(line)

    def stop(self) -> None:
        """Stop the controllers, kube-apiserver, then etcd (SIGTERM, then SIGKILL after 10 s). Their logs stay
        in the work directory, which belongs to whoever made it."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        for log in self._logs:
            log.close()
        self._logs.clear()


def collection_path(obj: Mapping[str, Any], plural: str | None = None) -> str:
    """The REST collection an object is created in, from its apiVersion and kind."""
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    namespace = (obj.get("metadata") or {}).get("namespace")
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = plural or _PLURALS.get(kind, kind.lower() + "s")
    if namespace and kind not in _CLUSTER_SCOPED:
        return f"{base}/namespaces/{namespace}/{plural}"
    return f"{base}/{plural}"


_PLURALS = {"PriorityClass": "priorityclasses", "Policy": "policies", "DeviceClass": "deviceclasses"}
_CLUSTER_SCOPED = frozenset(
    {"Namespace", "Node", "PriorityClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
     "DeviceClass", "ResourceSlice"}
)  # fmt: skip
