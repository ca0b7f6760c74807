"""What the real-server suite needs around a :class:`ControlPlane`: the cluster a test finds (nodes, CRDs,
Phalanx's ServiceAccount bound by ``manifests/rbac.yaml``), Phalanx itself as a ``phalanx run`` process,
waiting on conditions, reading what ``kubectl describe`` shows, and the invariants after every test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import yaml

from scheduler.gangs import GangSettings
from scheduler.ports.sim import ClusterShape, Store, load
from scheduler.ports.sim.schema import crd_documents
from scheduler.simulation.oracle import InvariantMonitor
from scripts.controlplane import ControlPlane, ControlPlaneError, dying_with_parent, free_port
from tests.scheduler.support import gpu_pod

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
#: The simulate default: 2 blocks x 4 racks x 8 nodes of 8 GPUs, so that examples land where their test says.
SHAPE = "blocks=2,racks=4,nodes=8,gpus=8"
LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
PHALANX_USER = "system:serviceaccount:phalanx-system:phalanx"
#: The scheduler names the suite's Phalanx processes own (the leader-election and starvation tests run their
#: own).
SCHEDULER_NAMES = ("phalanx", "phalanx-handover", "phalanx-starving", "phalanx-evicting")
GROUP_PATHS = (
    "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
    "/apis/scheduling.volcano.sh/v1beta1/podgroups",
    "/apis/scheduling.phalanx.dev/v1alpha1/compositepodgroups",
    "/apis/scheduling.k8s.io/v1alpha2/podgroups",
    "/apis/scheduling.k8s.io/v1alpha2/workloads",
    "/apis/resource.k8s.io/v1/resourceclaims",  # the oracle checks a bound pod's claims are allocated for it
)

T = TypeVar("T")


def eventually(check: Callable[[], T], *, timeout: float = 30.0, what: str = "") -> T:
    """Poll ``check()`` until it is truthy and return it; fail after ``timeout`` seconds with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}")
        time.sleep(0.05)


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


# -- the cluster every test finds ------------------------------------------------------------------


def install(plane: ControlPlane) -> None:
    """Namespaces, Phalanx's ServiceAccount and RBAC exactly as deployed, the three CRDs, and the nodes."""
    for name in ("phalanx-system",):
        plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    plane.apply(documents(MANIFESTS / "serviceaccount.yaml")[0])
    for obj in documents(MANIFESTS / "rbac.yaml"):
        plane.apply(obj)
    crds = list(crd_documents())  # the ones the emulator serves: both servers have the same custom resources
    for crd in crds:
        plane.apply(crd)
    for crd in crds:
        name = crd["metadata"]["name"]
        eventually(
            lambda name=name: established(plane, name),
            timeout=30,
            what=f"CustomResourceDefinition {name} established",
        )
    for node in ClusterShape.parse(SHAPE).node_manifests():
        create_node(plane, node)


def established(plane: ControlPlane, name: str) -> bool:
    crd = plane.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def create_node(plane: ControlPlane, node: dict[str, Any]) -> None:
    """A Node as a kubelet would leave it: created, then its status written through ``nodes/status``."""
    status = node.get("status") or {}
    created = plane.apply({key: value for key, value in node.items() if key != "status"})
    name = created["metadata"]["name"]
    plane.call(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": status},
        content_type="application/strategic-merge-patch+json",
    )


def ensure_namespace(plane: ControlPlane, name: str) -> None:
    status, body = plane.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    if status not in (201, 409):
        raise ControlPlaneError(f"namespace {name}: {status} {body[:200]!r}")


def service_account_token(plane: ControlPlane, namespace: str = "phalanx-system", name: str = "phalanx") -> str:
    """A token of the ServiceAccount, from the TokenRequest API (what the kubelet mounts into its pods)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}}
    answer = plane.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
    return str(answer["status"]["token"])


# -- reading what a user reads ----------------------------------------------------------------------


def listed(plane: ControlPlane, path: str) -> list[dict[str, Any]]:
    """The items of a list, each with its apiVersion and kind (a list leaves them out of its items)."""
    listing = plane.call("GET", path)
    api_version, kind = listing["apiVersion"], listing["kind"].removesuffix("List")
    return [{**item, "apiVersion": api_version, "kind": kind} for item in listing["items"]]


def pods(plane: ControlPlane, namespace: str | None = None) -> dict[str, dict[str, Any]]:
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in listed(plane, path)}


def bound(plane: ControlPlane, namespace: str | None = None) -> dict[str, str]:
    return {key: p["spec"]["nodeName"] for key, p in pods(plane, namespace).items() if p["spec"].get("nodeName")}


def pod_scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


def described_events(plane: ControlPlane, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Events ``kubectl describe`` lists under an object: core/v1 Events selected by involvedObject."""
    metadata = obj["metadata"]
    selector = ",".join(
        f"involvedObject.{field}={value}"
        for field, value in (
            ("name", metadata["name"]),
            ("namespace", metadata.get("namespace", "")),
            ("kind", obj["kind"]),
            ("uid", metadata["uid"]),
        )
    )
    namespace = metadata.get("namespace") or "default"
    return list(plane.call("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={quote(selector)}")["items"])


def get(plane: ControlPlane, path: str) -> dict[str, Any]:
    return plane.call("GET", path)


# -- Phalanx as an operator runs it ---------------------------------------------------------------


class PhalanxProcess:
    """``phalanx run --config manifests/phalanx.yaml`` with a kubeconfig, as a child process (stopped by PID)."""

    def __init__(self, workdir: Path, kubeconfig: Path, *, name: str, overrides: Iterable[str] = ()) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = workdir / f"{name}.log"
        argv = [
            sys.executable, "-m", "scheduler.frontends.cli", "run",
            "--kubeconfig", str(kubeconfig),
            "--config", str(MANIFESTS / "phalanx.yaml"),
            "--metrics-address", f"127.0.0.1:{self.port}",
            "--set", f"leaderElection.identity={name}",
            *(item for override in overrides for item in ("--set", override)),
        ]  # fmt: skip
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            dying_with_parent(argv), stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"phalanx {self.name} exited with {self.process.returncode}:\n{self.log()[-3000:]}"
                )
            return self.get("/readyz")[0] == 200

        eventually(ready, timeout=timeout, what=f"phalanx {self.name} ready")

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of ``/metrics`` (0 when absent), e.g. ``metric("phalanx_api_writes_total", 'kind="bind"')``."""
        _, text = self.get("/metrics")
        wanted = f"{name}{{{labels}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def metric_total(self, name: str) -> float:
        """The sum of every sample of ``name`` (all label values)."""
        _, text = self.get("/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def log_lines(self, offset: int = 0) -> list[dict[str, Any]]:
        """The JSON log lines from byte ``offset`` on (anything else it printed is kept as ``{"raw": line}``)."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        found = []
        for line in text.splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                found.append({"raw": line, "level": "error"})
        return found

    def problems(self, offset: int = 0) -> list[dict[str, Any]]:
        """Warnings and errors it logged from byte ``offset`` on: each is something an operator must act on."""
        return [line for line in self.log_lines(offset) if line.get("level") in ("warning", "error", "critical")]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


# -- after every test ---------------------------------------------------------------------------


#: Controllers' objects a test may create: deleted first, so that their controllers make no new pods.
WORKLOAD_PATHS = ("/apis/batch/v1/jobs", "/apis/apps/v1/deployments", "/apis/apps/v1/statefulsets",
                  "/apis/apps/v1/replicasets")  # fmt: skip


def delete_workloads(plane: ControlPlane) -> None:
    """Delete every workload, pod and group object outside the system namespaces at once (grace 0: no
    kubelet), the controllers' objects first and without waiting for the garbage collector."""
    immediately = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
    }
    for path in WORKLOAD_PATHS:
        for obj in plane.call("GET", path)["items"]:
            namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
            base, plural = path.rsplit("/", 1)
            if namespace not in ("kube-system", "phalanx-system"):
                plane.request("DELETE", f"{base}/namespaces/{namespace}/{plural}/{name}", immediately)
    immediately = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    for key in pods(plane):
        namespace, name = key.split("/", 1)
        if namespace not in ("kube-system", "phalanx-system"):
            plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", immediately)
    for path in GROUP_PATHS:
        for obj in plane.call("GET", path)["items"]:
            namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
            base, plural = path.rsplit("/", 1)
            plane.request("DELETE", f"{base}/namespaces/{namespace}/{plural}/{name}", immediately)
    eventually(lambda: not pods_outside_system(plane), timeout=30, what="every test pod deleted")


def pods_outside_system(plane: ControlPlane) -> list[str]:
    return [key for key in pods(plane) if key.split("/", 1)[0] not in ("kube-system", "phalanx-system")]


def invariant_violations(plane: ControlPlane) -> list[str]:
    """No node holds more than its allocatable and no gang is bound below its minimum, on the server's
    own objects: they are loaded into a store watched by the invariant monitor, each pod unbound first
    and then bound, so that the monitor checks every bind as it checks on the emulator."""
    store = Store()
    load(store, listed(plane, "/api/v1/nodes"))
    objects = [obj for path in GROUP_PATHS for obj in listed(plane, path)]
    current = list(pods(plane).values())
    for pod in current:
        store.ensure_namespace(pod["metadata"]["namespace"])
    for obj in objects:
        store.ensure_namespace(obj["metadata"]["namespace"])
        store.restore(store.resource(obj["apiVersion"], obj["kind"]), obj)
    monitor = InvariantMonitor(
        store,
        scheduler_names=SCHEDULER_NAMES,
        gang_settings=GangSettings(levels=LEVELS, scheduler_names=frozenset(SCHEDULER_NAMES)),
    )
    pod_resource = store.resource("v1", "Pod")
    ours = [pod for pod in current if pod["spec"].get("schedulerName") in SCHEDULER_NAMES]
    for pod in current:  # another scheduler's pods run where they run: room taken, not binds to check
        unbound = {**pod, "spec": {key: value for key, value in pod["spec"].items() if key != "nodeName"}}
        store.restore(pod_resource, unbound if pod in ours else pod)
    for pod in ours:
        if pod["spec"].get("nodeName"):
            store.restore(pod_resource, pod)
    monitor.check_gangs()
    return monitor.violations


def requests_by(plane: ControlPlane, user: str, offset: int = 0) -> list[dict[str, Any]]:
    """Completed requests of ``user`` in the audit log from byte ``offset`` on."""
    return [
        event
        for event in plane.audit(offset)
        if event.get("user", {}).get("username") == user and event.get("stage") == "ResponseComplete"
    ]


def refused_requests(plane: ControlPlane, user: str, offset: int = 0) -> list[str]:
    """Requests of ``user`` the server refused with 401 or 403, from the audit log."""
    return [
        f"{event['verb']} {event['requestURI']}: {event['responseStatus']['code']}"
        for event in requests_by(plane, user, offset)
        if (event.get("responseStatus") or {}).get("code") in (401, 403)
    ]


def priority_class(plane: ControlPlane, name: str, value: int) -> None:
    status, _ = plane.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value},
    )
    assert status in (201, 409)
    # Admission reads PriorityClasses from its informer: wait until a pod naming this one is admitted.
    probe = gpu_pod("probe", "default", scheduler="nobody", priorityClassName=name)
    eventually(lambda: plane.request("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)[0] == 201,
               what=f"PriorityClass {name} known to admission")  # fmt: skip
