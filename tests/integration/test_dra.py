"""Dynamic Resource Allocation on kube-apiserver 1.36: the objects the device tests use are what the server
accepts, strictly, and Phalanx watches them with exactly the rights its manifests give it."""

from __future__ import annotations

from typing import Any

from scripts.controlplane import ControlPlane
from tests.devices.support import claim, device_class, networked_slice, node_slice
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    bound,
    ensure_namespace,
    eventually,
    pods,
    priority_class,
    requests_by,
)
from tests.scheduler.support import gpu_pod, pfn

DRA = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")


def test_the_device_objects_are_valid_and_phalanx_watches_them_with_its_own_rights(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    ensure_namespace(plane, "ml")
    ensure_gpu_class(plane)
    plane.apply(node_slice("dra-n0"))
    created = plane.apply(claim("gpus", 2, "device.attributes['gpu.nvidia.com'].type == 'gpu'"))
    assert created["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"
    allocated = claim("gpus", 2, allocated=[("dra-n0", "gpu-0"), ("dra-n0", "gpu-1")])["status"]
    written = plane.call(
        "PUT",
        "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/gpus/status?fieldValidation=Strict",
        {**created, "status": allocated},
    )
    assert [result["device"] for result in written["status"]["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]

    def watched() -> set[str]:
        return {
            resource
            for event in requests_by(plane, PHALANX_USER)
            if event["verb"] in ("list", "watch") and (event.get("responseStatus") or {}).get("code") == 200
            for resource in DRA
            if f"/apis/resource.k8s.io/v1/{resource}" in event["requestURI"]
        }

    eventually(lambda: watched() == set(DRA), what=f"Phalanx's list and watch of each of {DRA}")


def ensure_gpu_class(plane: ControlPlane) -> None:
    """NVIDIA's DeviceClass, made by the first test that needs it (the suite's cluster is shared)."""
    classes = plane.call("GET", "/apis/resource.k8s.io/v1/deviceclasses")["items"]
    if "gpu.nvidia.com" not in {item["metadata"]["name"] for item in classes}:
        plane.apply(device_class())


def claim_template(name: str, count: int) -> dict[str, Any]:
    body = claim("unused", count)["spec"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "dra"}, "spec": {"spec": body}}  # fmt: skip


def test_a_gang_of_four_with_claim_templates_binds_whole_with_each_claim_allocated_for_its_pod(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """kube-controller-manager's resourceclaim controller makes each pod's claim from the template and names
    it in the pod's status; Phalanx places the gang where the devices are, writes every claim's allocation
    and reservation (PreBind), then binds."""
    ensure_namespace(plane, "dra")
    ensure_gpu_class(plane)
    nodes = [f"b1-r3-n{i}" for i in range(4, 8)]  # of the suite's cluster (SHAPE): these publish devices
    for node in nodes:
        plane.apply(node_slice(node, 8))
    plane.apply(claim_template("four-gpus", 4))
    for i in range(4):
        plane.apply(gpu_pod(f"train-{i}", "dra", gpus=0, annotations=pfn("train", 4),
                            resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}]))  # fmt: skip
    placed = eventually(
        lambda: len(bound(plane, "dra")) == 4 and bound(plane, "dra"), what="the gang bound", timeout=60
    )
    assert set(placed.values()) <= set(nodes)
    running = pods(plane, "dra")
    made = plane.call("GET", "/apis/resource.k8s.io/v1/namespaces/dra/resourceclaims")["items"]
    assert len(made) == 4
    taken: set[tuple[str, str]] = set()
    for item in made:
        (owner,) = item["status"]["reservedFor"]
        pod = running[f"dra/{owner['name']}"]
        assert owner["uid"] == pod["metadata"]["uid"]
        results = item["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4 and {result["pool"] for result in results} == {pod["spec"]["nodeName"]}
        taken |= {(result["pool"], result["device"]) for result in results}
    assert len(taken) == 16  # no device given twice


def test_a_claim_phalanx_allocated_is_protected_and_released_by_the_controller_once_its_pod_is_gone(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """As kube-scheduler, Phalanx puts the delete-protection finalizer on a claim it allocates; when the pod
    is gone, kube-controller-manager's resourceclaim controller takes the allocation and the finalizer off,
    so that a claim named directly (not made from a template) is free for the next pod."""
    ensure_namespace(plane, "dra-direct")
    ensure_gpu_class(plane)
    if not any(item["metadata"]["name"] == "b1-r2-n7-gpu" for item in
               plane.call("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]):  # fmt: skip
        plane.apply(node_slice("b1-r2-n7"))
    plane.apply({**claim("shared-gpus", 2), "metadata": {"name": "shared-gpus", "namespace": "dra-direct"}})
    plane.apply(gpu_pod("solo", "dra-direct", gpus=0, annotations=pfn("solo", 1),
                        resourceClaims=[{"name": "gpus", "resourceClaimName": "shared-gpus"}]))  # fmt: skip
    path = "/apis/resource.k8s.io/v1/namespaces/dra-direct/resourceclaims/shared-gpus"
    eventually(lambda: bound(plane, "dra-direct"), what="the pod bound", timeout=60)
    given = plane.call("GET", path)
    assert given["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert given["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "b1-r2-n7"
    ]
    plane.request("DELETE", "/api/v1/namespaces/dra-direct/pods/solo",
                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})  # fmt: skip

    def released() -> bool:
        claim_now = plane.call("GET", path)
        return not claim_now.get("status", {}).get("allocation") and not claim_now["metadata"].get("finalizers")

    eventually(released, what="the claim deallocated and unprotected by the resourceclaim controller", timeout=60)


def test_a_gang_that_requires_one_clique_binds_on_the_nodes_whose_devices_share_it(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """The clique is a device attribute, not a node label: two nodes of b0-r1 publish GPUs of clique x, three
    GPUs of clique y; a gang of three that requires one clique goes to y."""
    ensure_namespace(plane, "dra-clique")
    ensure_gpu_class(plane)
    cliques = {"b0-r1-n0": "x", "b0-r1-n1": "x", "b0-r1-n2": "y", "b0-r1-n3": "y", "b0-r1-n4": "y"}
    for node, clique in cliques.items():
        plane.apply(node_slice(node, 8, clique=clique))
    for i in range(3):
        mine = "device.attributes['gpu.nvidia.com'].cliqueId in ['x', 'y']"  # not the other tests' devices
        plane.apply(claim(f"w-{i}-gpus", 8, mine, namespace="dra-clique"))
        annotations = {**pfn("w", 3), "scheduling.phalanx.dev/topology-required": "gpu.nvidia.com/cliqueId"}
        plane.apply(gpu_pod(f"w-{i}", "dra-clique", gpus=0, annotations=annotations,
                            resourceClaims=[{"name": "gpus", "resourceClaimName": f"w-{i}-gpus"}]))  # fmt: skip
    placed = eventually(
        lambda: len(bound(plane, "dra-clique")) == 3 and bound(plane, "dra-clique"), what="the gang bound", timeout=60
    )
    assert {cliques[node] for node in placed.values()} == {"y"}


def test_a_gang_whose_claims_cannot_be_kept_together_binds_nothing_and_allocates_nothing(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """Placement counts devices; a claim's matchAttribute is kept only when the devices are chosen. b0-r2-n0's
    two GPUs are of two products, so the pair's claim cannot be allocated there: neither pod of the gang is
    bound (the solo pod's claim could have been), no claim is allocated, and the pods say why."""
    ensure_namespace(plane, "dra-mixed")
    ensure_gpu_class(plane)
    mixed = node_slice("b0-r2-n0", 2, clique="lot")
    mixed["spec"]["devices"][1]["attributes"]["productName"] = {"string": "NVIDIA A100-SXM4-80GB"}
    plane.apply(mixed)
    plane.apply(node_slice("b0-r2-n1", 1, clique="lot"))
    mine = "device.attributes['gpu.nvidia.com'].cliqueId == 'lot'"  # not the other tests' devices
    pair = claim("pair-gpus", 2, mine, namespace="dra-mixed")
    pair["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/productName"}]
    plane.apply(pair)
    plane.apply(claim("solo-gpus", 1, mine, namespace="dra-mixed"))
    for name in ("pair", "solo"):
        plane.apply(gpu_pod(name, "dra-mixed", gpus=0, annotations=pfn("mixed", 2),
                            resourceClaims=[{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]))  # fmt: skip

    def told() -> str:
        conditions = pods(plane, "dra-mixed")["dra-mixed/pair"].get("status", {}).get("conditions") or []
        return next((c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"), "")

    message = eventually(lambda: "binding refused" in told() and told(), what="the pod told why", timeout=60)
    assert "ResourceClaim dra-mixed/pair-gpus needs 2 of class gpu.nvidia.com on b0-r2-n0" in message
    assert "that satisfy its constraints" in message
    assert not bound(plane, "dra-mixed")
    claims = plane.call("GET", "/apis/resource.k8s.io/v1/namespaces/dra-mixed/resourceclaims")["items"]
    assert not [item["metadata"]["name"] for item in claims if (item.get("status") or {}).get("allocation")]


def test_two_pods_of_a_gang_that_share_a_claim_bind_on_one_node_with_the_claim_reserved_for_both(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """One claim named directly by both pods of a gang: allocated once, on the one node both go to, and
    reserved for each (kube-apiserver 1.36 checks the reservations when each pod binds)."""
    ensure_namespace(plane, "dra-shared")
    ensure_gpu_class(plane)
    plane.apply(node_slice("b0-r2-n4", 4, clique="shared-lot"))
    plane.apply(node_slice("b0-r2-n5", 4, clique="shared-lot"))
    mine = "device.attributes['gpu.nvidia.com'].cliqueId == 'shared-lot'"  # not the other tests' devices
    plane.apply(claim("pair-gpus", 4, mine, namespace="dra-shared"))
    for name in ("left", "right"):
        plane.apply(gpu_pod(name, "dra-shared", gpus=0, annotations=pfn("pair", 2),
                            resourceClaims=[{"name": "gpus", "resourceClaimName": "pair-gpus"}]))  # fmt: skip
    placed = eventually(
        lambda: len(bound(plane, "dra-shared")) == 2 and bound(plane, "dra-shared"), what="both bound", timeout=60
    )
    (node,) = set(placed.values())
    given = plane.call("GET", "/apis/resource.k8s.io/v1/namespaces/dra-shared/resourceclaims/pair-gpus")["status"]
    assert {result["pool"] for result in given["allocation"]["devices"]["results"]} == {node}
    assert len(given["allocation"]["devices"]["results"]) == 4
    running = pods(plane, "dra-shared")
    assert sorted(ref["uid"] for ref in given["reservedFor"]) == sorted(
        running[f"dra-shared/{name}"]["metadata"]["uid"] for name in ("left", "right")
    )


def test_a_high_priority_gang_preempts_the_pod_holding_the_devices_and_binds_once_its_claim_is_released(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """A low-priority pod holds all eight devices of b1-r1-n0 through its claim; a high-priority gang asks
    for them. Phalanx evicts the holder; kube-controller-manager's resourceclaim controller deallocates the
    holder's claim once it is gone; then the gang's claim gets the devices and the gang binds."""
    ensure_namespace(plane, "dra-preempt")
    priority_class(plane, "itest-batch", 10)
    priority_class(plane, "itest-production", 100000)
    ensure_gpu_class(plane)
    plane.apply(node_slice("b1-r1-n0", 8, clique="preempt-lot"))
    mine = "device.attributes['gpu.nvidia.com'].cliqueId == 'preempt-lot'"  # not the other tests' devices
    for name in ("holder", "vip"):
        plane.apply(claim(f"{name}-gpus", 8, mine, namespace="dra-preempt"))
    plane.apply(gpu_pod("holder", "dra-preempt", gpus=0, annotations=pfn("holder", 1), priorityClassName="itest-batch",
                        terminationGracePeriodSeconds=0,
                        resourceClaims=[{"name": "gpus", "resourceClaimName": "holder-gpus"}]))  # fmt: skip
    eventually(lambda: bound(plane, "dra-preempt").get("dra-preempt/holder"), what="the holder bound", timeout=60)
    plane.apply(gpu_pod("vip", "dra-preempt", gpus=0, annotations=pfn("vip", 1), priorityClassName="itest-production",
                        resourceClaims=[{"name": "gpus", "resourceClaimName": "vip-gpus"}]))  # fmt: skip
    placed = eventually(lambda: bound(plane, "dra-preempt").get("dra-preempt/vip"), what="the vip bound", timeout=90)
    assert placed == "b1-r1-n0"
    assert "dra-preempt/holder" not in pods(plane, "dra-preempt")
    path = "/apis/resource.k8s.io/v1/namespaces/dra-preempt/resourceclaims"
    given = {item["metadata"]["name"]: item.get("status") or {} for item in plane.call("GET", path)["items"]}
    assert not given["holder-gpus"].get("allocation")
    assert len(given["vip-gpus"]["allocation"]["devices"]["results"]) == 8


def test_a_podgroup_s_claim_from_a_template_is_made_once_and_reserved_for_the_group_whose_pods_bind_on_its_node(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """KEP-5729 (DRAWorkloadResourceClaims): both pods repeat their PodGroup's claim entry;
    kube-controller-manager's resourceclaim controller makes one claim for the group and names it in the
    group's status and in each pod's; Phalanx places both on the node of its devices, allocates it once and
    reserves it for the PodGroup (kube-apiserver 1.36 checks the reservation when each pod binds)."""
    ensure_namespace(plane, "dra-group")
    ensure_gpu_class(plane)
    plane.apply(node_slice("b1-r0-n6", 4, clique="group-lot"))
    plane.apply(node_slice("b1-r0-n7", 2, clique="group-lot"))
    mine = "device.attributes['gpu.nvidia.com'].cliqueId == 'group-lot'"  # not the other tests' devices
    template = claim_template("group-gpus", 4)
    template["metadata"]["namespace"] = "dra-group"
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": mine}}]
    plane.apply(template)
    entry = {"name": "gpus", "resourceClaimTemplateName": "group-gpus"}
    plane.apply({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                 "metadata": {"name": "replica", "namespace": "dra-group"},
                 "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [entry]}})  # fmt: skip
    for name in ("prefill", "decode"):
        plane.apply(gpu_pod(name, "dra-group", gpus=0, schedulingGroup={"podGroupName": "replica"},
                            resourceClaims=[entry]))  # fmt: skip
    placed = eventually(
        lambda: len(bound(plane, "dra-group")) == 2 and bound(plane, "dra-group"), what="both bound", timeout=60
    )
    assert set(placed.values()) == {"b1-r0-n6"}  # the only node with the claim's 4 devices
    group = plane.call("GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/dra-group/podgroups/replica")
    (made,) = plane.call("GET", "/apis/resource.k8s.io/v1/namespaces/dra-group/resourceclaims")["items"]
    assert group["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": made["metadata"]["name"]}]
    assert made["status"]["reservedFor"] == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                              "name": "replica", "uid": group["metadata"]["uid"]}]  # fmt: skip
    results = made["status"]["allocation"]["devices"]["results"]
    assert len(results) == 4 and {result["pool"] for result in results} == {"b1-r0-n6"}


def test_pods_asking_an_extended_resource_a_class_serves_get_claims_made_allocated_and_named_before_they_bind(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """KEP-5004 (DRAExtendedResource, on in 1.36): no node reports example.com/dra-gpu, a DeviceClass serves it
    with the GPUs of b1-r0-n5. Phalanx makes each pod's claim as kube-scheduler does (owned by the pod,
    annotated, a request per container and resource), allocates and reserves it, names it in the pod's
    status (kube-apiserver validates the mapping against the pod's containers), then binds."""
    ensure_namespace(plane, "dra-extended")
    plane.apply(node_slice("b1-r0-n5", 8, clique="ext-lot"))
    served = device_class("dra-gpu", "device.attributes['gpu.nvidia.com'].cliqueId == 'ext-lot'")
    served["spec"]["extendedResourceName"] = "example.com/dra-gpu"
    plane.apply(served)
    for name in ("left", "right"):
        pod = gpu_pod(name, "dra-extended", gpus=0, annotations=pfn("pair", 2))
        pod["spec"]["containers"][0]["resources"]["limits"]["example.com/dra-gpu"] = "4"
        plane.apply(pod)
    placed = eventually(
        lambda: len(bound(plane, "dra-extended")) == 2 and bound(plane, "dra-extended"), what="both bound", timeout=60
    )
    assert set(placed.values()) == {"b1-r0-n5"}
    running = pods(plane, "dra-extended")
    path = "/apis/resource.k8s.io/v1/namespaces/dra-extended/resourceclaims"
    claims = {item["metadata"]["name"]: item for item in plane.call("GET", path)["items"]}
    taken: set[str] = set()
    for name in ("left", "right"):
        pod = running[f"dra-extended/{name}"]
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": "example.com/dra-gpu", "requestName": "container-0-request-0"}
        ]
        made = claims[status["resourceClaimName"]]
        assert made["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert made["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        assert made["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]
        results = made["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4 and {result["pool"] for result in results} == {"b1-r0-n5"}
        taken |= {result["device"] for result in results}
    assert len(taken) == 8  # no device given twice


def test_a_claim_of_every_device_gets_all_of_its_node_s(plane: ControlPlane, scheduler: PhalanxProcess) -> None:
    """allocationMode All: the pod goes to the node with its class's devices and its claim is allocated every
    one of them (kube-apiserver 1.36 accepts the request without a count)."""
    ensure_namespace(plane, "dra-all")
    ensure_gpu_class(plane)
    plane.apply(node_slice("b1-r0-n4", 3, clique="all-lot"))
    whole = claim("whole-gpus", 1, "device.attributes['gpu.nvidia.com'].cliqueId == 'all-lot'", namespace="dra-all")
    exactly = whole["spec"]["devices"]["requests"][0]["exactly"]
    del exactly["count"]
    exactly["allocationMode"] = "All"
    plane.apply(whole)
    plane.apply(gpu_pod("whole", "dra-all", gpus=0, annotations=pfn("whole", 1),
                        resourceClaims=[{"name": "gpus", "resourceClaimName": "whole-gpus"}]))  # fmt: skip
    placed = eventually(lambda: bound(plane, "dra-all"), what="the pod bound", timeout=60)
    assert placed == {"dra-all/whole": "b1-r0-n4"}
    given = plane.call("GET", "/apis/resource.k8s.io/v1/namespaces/dra-all/resourceclaims/whole-gpus")["status"]
    assert sorted(result["device"] for result in given["allocation"]["devices"]["results"]) == [
        "gpu-0", "gpu-1", "gpu-2"
    ]


def test_networked_devices_every_node_reaches_are_allocated_without_a_node_and_never_twice(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    """A slice for allNodes (network-attached GPUs): three pods claiming 2 each from a fabric of 4. Two bind,
    their claims allocated with no node selector (kube-apiserver 1.36 accepts it so); the third waits for
    devices and none of its claim is allocated."""
    ensure_namespace(plane, "dra-fabric")
    ensure_gpu_class(plane)
    plane.apply(networked_slice("fabric", 4))
    mine = "device.attributes['gpu.nvidia.com'].cliqueId == 'fabric-fabric'"  # not the other tests' devices
    for name in ("a", "b", "c"):
        plane.apply(claim(f"{name}-gpus", 2, mine, namespace="dra-fabric"))
        plane.apply(gpu_pod(name, "dra-fabric", gpus=0, annotations=pfn(name, 1),
                            resourceClaims=[{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]))  # fmt: skip
        if name == "b":  # the first two take the fabric, whichever node they go to
            eventually(lambda: len(bound(plane, "dra-fabric")) == 2, what="two bound", timeout=60)
    path = "/apis/resource.k8s.io/v1/namespaces/dra-fabric/resourceclaims"

    def told() -> str:
        conditions = pods(plane, "dra-fabric")["dra-fabric/c"].get("status", {}).get("conditions") or []
        return next((c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"), "")

    assert "Insufficient devices of class gpu.nvidia.com" in eventually(told, what="c told why", timeout=60)
    given = {item["metadata"]["name"]: item.get("status") or {} for item in plane.call("GET", path)["items"]}
    assert not given["c-gpus"].get("allocation")
    devices = [result["device"] for name in ("a-gpus", "b-gpus")
               for result in given[name]["allocation"]["devices"]["results"]]  # fmt: skip
    assert sorted(devices) == [f"gpu-{i}" for i in range(4)]
    assert all("nodeSelector" not in given[name]["allocation"] for name in ("a-gpus", "b-gpus"))
    plane.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices/fabric-gpu")
