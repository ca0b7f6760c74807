"""A bind the real API server refuses (here: RBAC, for a Phalanx whose ClusterRole lacks pods/binding)
backs the gang off with a FailedBinding Event: nothing of the gang is bound, and it is not retried in a loop."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from scripts.controlplane import ControlPlane
from tests.integration.conftest import FAST
from tests.integration.support import (
    MANIFESTS,
    PhalanxProcess,
    bound,
    described_events,
    documents,
    ensure_namespace,
    eventually,
    pods,
    requests_by,
    service_account_token,
)
from tests.scheduler.support import gpu_pod, pfn

NAME = "phalanx-nobind"
USER = f"system:serviceaccount:phalanx-system:{NAME}"


def without_binding(plane: ControlPlane) -> str:
    """A ServiceAccount bound to manifests/rbac.yaml's ClusterRole and Role, less the pods/binding rule."""
    plane.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": "phalanx-system"}}
    )
    for obj in documents(MANIFESTS / "rbac.yaml"):  # each document is a fresh parse: changed in place
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-nobind"
        if obj["kind"] == "ClusterRole":
            obj["rules"] = [rule for rule in obj["rules"] if "pods/binding" not in rule["resources"]]
        if "roleRef" in obj:
            obj["roleRef"]["name"] += "-nobind"
            obj["subjects"] = [{**subject, "name": NAME} for subject in obj["subjects"]]
        plane.apply(obj)
    return service_account_token(plane, name=NAME)


def stamp(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")).timestamp()


def test_a_refused_bind_backs_the_gang_off_and_binds_nothing(plane: ControlPlane, workdir: Path) -> None:
    kubeconfig = plane.kubeconfig(workdir / "nobind.kubeconfig", token=without_binding(plane), user=NAME)
    overrides = (*FAST, f"leaderElection.name={NAME}", f"schedulerNames=[{NAME}]")
    scheduler = PhalanxProcess(workdir, kubeconfig, name=NAME, overrides=overrides)
    try:
        scheduler.wait_ready()
        ensure_namespace(plane, "refused")
        audit_from = plane.audit_offset()
        for i in range(2):
            plane.apply(gpu_pod(f"w{i}", "refused", scheduler=NAME, annotations=pfn("w", 2)))

        def binds() -> list[dict[str, object]]:
            return [e for e in requests_by(plane, USER, audit_from) if e["objectRef"].get("subresource") == "binding"]

        refused = eventually(lambda: len(binds()) >= 3 and binds(), timeout=30, what="three refused bind attempts")
        assert {e["responseStatus"]["code"] for e in refused} == {403}  # type: ignore[index]
        # Backoff between attempts: at least 0.75 x (0.2 s, then 0.4 s), with queue.initialBackoffSeconds 0.2.
        assert stamp(refused[2]) - stamp(refused[0]) >= 0.75 * (0.2 + 0.4)
        assert {e["objectRef"]["name"] for e in refused} == {"w0"}  # type: ignore[index]  # only a first pod
        pod = pods(plane, "refused")["refused/w0"]
        said = eventually(
            lambda: [e for e in described_events(plane, pod) if e["reason"] == "FailedBinding"], what="FailedBinding"
        )
        assert said[0]["type"] == "Warning" and "forbidden" in said[0]["message"]
        assert bound(plane, "refused") == {}
    finally:
        scheduler.stop()
