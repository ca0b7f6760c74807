"""Every example a 1.36 API server can hold binds on it exactly where its simulate test says."""

from __future__ import annotations

import pytest

from scheduler.ports.sim import read_manifest_file
from scripts.controlplane import ControlPlane
from tests.integration.support import PhalanxProcess, bound, ensure_namespace, eventually, pods
from tests.test_examples_simulate import EXAMPLES, PLACEMENT, PREEMPTED

#: Examples whose APIs a 1.36 server does not serve: scheduling.k8s.io/v1alpha3 and v1beta1 arrive in 1.37,
#: and v1alpha1 (the 1.35 Workload) is no longer served. The simulate suite covers them on the emulator.
NOT_SERVED_BY_1_36 = {"composite-1.37": "v1alpha3", "podgroup-1.37": "v1beta1", "workload-1.35": "v1alpha1"}
SERVED = sorted(set(PLACEMENT) - set(NOT_SERVED_BY_1_36))


def manifests(example: str) -> list[dict[str, object]]:
    return [obj for path in sorted((EXAMPLES / example).glob("*.yaml")) for obj in read_manifest_file(str(path))]


def test_the_examples_left_out_are_exactly_those_of_apis_the_server_does_not_serve(plane: ControlPlane) -> None:
    served = {version["version"] for version in plane.call("GET", "/apis/scheduling.k8s.io")["versions"]}
    for example, version in NOT_SERVED_BY_1_36.items():
        used = {str(obj["apiVersion"]) for obj in manifests(example)}
        assert f"scheduling.k8s.io/{version}" in used and version not in served, example
    for example in SERVED:
        upstream = {
            str(obj["apiVersion"]).split("/")[1]
            for obj in manifests(example)
            if "scheduling.k8s.io/" in str(obj["apiVersion"])
        }
        assert upstream <= served, example


@pytest.mark.parametrize("example", SERVED)
def test_example_binds_where_its_simulate_test_says(
    plane: ControlPlane, scheduler: PhalanxProcess, example: str
) -> None:
    # As `kubectl apply -f examples/<example>/` on a fresh cluster: each file creates its namespace first.
    for obj in manifests(example):
        if obj["kind"] == "Namespace":
            ensure_namespace(plane, str(obj["metadata"]["name"]))  # type: ignore[index]  # an earlier file's
        else:
            plane.apply(obj)
    wanted = {pod: node for node, names in PLACEMENT[example].items() for pod in names}
    running = {f"{obj['metadata']['namespace']}/{obj['metadata']['name']}" for obj in manifests(example)  # type: ignore[index]
               if obj["kind"] == "Pod" and obj["spec"].get("nodeName")}  # type: ignore[index,union-attr]  # fmt: skip

    def placed_by_phalanx() -> dict[str, str]:
        kubelet(plane)
        return {pod: node for pod, node in bound(plane).items() if pod not in running}

    eventually(lambda: placed_by_phalanx() == wanted, timeout=30, what=f"{example}: {wanted}, got {bound(plane)}")
    marked = {pod for pod in running if pod not in pods(plane)}
    assert marked == set(PREEMPTED.get(example, {})), "exactly the simulated victims were preempted"


def kubelet(plane: ControlPlane) -> None:
    """There is no kubelet: finish what one would, deleting Terminating pods for good."""
    for key, pod in pods(plane).items():
        if pod["metadata"].get("deletionTimestamp"):
            namespace, name = key.split("/", 1)
            plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                          {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})  # fmt: skip
