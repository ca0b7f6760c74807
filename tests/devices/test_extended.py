"""Extended resources served by devices (KEP-5004): a pod that asks ``nvidia.com/gpu`` is served by a device
plugin where the node has some of its own, and elsewhere by devices of the class that names the resource,
through a claim made for the pod as kube-scheduler makes it."""

from __future__ import annotations

import copy
from typing import Any

import anyio

from scheduler.clock import ManualClock
from scheduler.devices.claims import read_class
from scheduler.devices.extended import ANNOTATION, IMPLICIT_PREFIX, extended_requests, served_by
from scheduler.gangs import GangSettings
from scheduler.ports.port import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Change
from scheduler.ports.sim import ClusterShape
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.oracle import InvariantMonitor
from scheduler.state import ClusterState
from tests.devices.support import GPU_DRIVER, claim, device_class, node_slice
from tests.scheduler.support import gpu_pod, pfn

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")


def gpu_class(name: str = "gpu-extended", created: str = "2026-11-01T00:00:00Z") -> dict[str, Any]:
    """NVIDIA's GPUs, serving pods that ask ``nvidia.com/gpu``."""
    found = device_class(name, f"device.driver == '{GPU_DRIVER}'")
    found["metadata"]["creationTimestamp"] = created
    found["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return found


def test_the_newest_class_serves_a_name_two_classes_give_and_every_class_serves_its_implicit_name() -> None:
    older, newer, twin = (
        read_class(gpu_class("b-old", "2026-01-01T00:00:00Z")),
        read_class(gpu_class("c-new", "2026-06-01T00:00:00Z")),
        read_class(gpu_class("a-new", "2026-06-01T00:00:00Z")),
    )
    assert served_by({"b-old": older, "c-new": newer})["nvidia.com/gpu"].name == "c-new"
    served = served_by({"b-old": older, "c-new": newer, "a-new": twin})
    assert served["nvidia.com/gpu"].name == "a-new"  # as new as c-new: the first name
    assert served[IMPLICIT_PREFIX + "b-old"].name == "b-old"


def test_the_claim_has_a_request_per_container_and_resource_named_by_their_places() -> None:
    """``container-<i>-request-<j>``: i counts init containers first, j is the resource's place among all the
    container's request names, sorted (cpu, memory, nvidia.com/gpu: 2)."""
    served = served_by({"gpu-extended": read_class(gpu_class())})
    pod = gpu_pod("p", gpus=4)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"},
                                                 "limits": {"nvidia.com/gpu": "4"}}  # fmt: skip
    pod["spec"]["initContainers"] = [{"name": "warm", "image": "pause"}]
    (request,) = extended_requests(pod, served, {"cpu": 64000})
    assert (request.name, request.container, request.resource, request.device_class, request.count) == (
        "container-1-request-2", "main", "nvidia.com/gpu", "gpu-extended", 4
    )
    assert extended_requests(pod, served, {"nvidia.com/gpu": 8}) == ()  # a device plugin's node: no claim


def simulation(*, classic_nodes: int = 0) -> tuple[Simulation, InvariantMonitor]:
    """Two nodes whose GPUs NVIDIA's DRA driver publishes, with the class that serves ``nvidia.com/gpu``;
    ``classic_nodes`` more whose device plugin reports 8 ``nvidia.com/gpu`` and that publish no devices."""
    sim = Simulation(Settings(levels=LEVELS))
    objects = ClusterShape.parse("blocks=1,racks=1,nodes=2,gpus=0,dra=gpu.nvidia.com:8").manifests()
    nodes = [obj for obj in objects if obj["kind"] == "Node"]
    for i in range(classic_nodes):
        classic = copy.deepcopy(nodes[0])
        classic["metadata"]["name"] = classic["metadata"]["labels"]["kubernetes.io/hostname"] = f"plugin-n{i}"
        for field in ("capacity", "allocatable"):
            classic["status"][field]["nvidia.com/gpu"] = "8"
        nodes.append(classic)
    sim.add_nodes(nodes)
    sim.add_objects([obj for obj in objects if obj["kind"] != "Node"] + [gpu_class()], source="cluster")
    return sim, InvariantMonitor(sim.store, gang_settings=GangSettings(levels=LEVELS))


def test_a_gang_asking_nvidia_gpu_on_dra_nodes_gets_a_claim_per_pod_allocated_before_it_binds() -> None:
    sim, monitor = simulation()
    sim.add_objects([gpu_pod(f"w-{i}", "ml", gpus=8, annotations=pfn("w", 2)) for i in range(2)], source="test")
    report = anyio.run(lambda: sim.run(timeout=60))
    assert sorted(report.bound.values()) == ["b0-r0-n0", "b0-r0-n1"]
    store = sim.store
    pods = {pod["metadata"]["name"]: pod for pod in store.objects(store.resource("v1", "Pod"))}
    made = store.objects(store.resource("resource.k8s.io/v1", "ResourceClaim"))
    claims = {claim["metadata"]["name"]: claim for claim in made}
    assert len(claims) == 2
    for name, pod in pods.items():
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-0"}
        ]
        claim = claims[status["resourceClaimName"]]
        assert claim["metadata"]["name"].startswith(f"{name}-extended-resources-")
        assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu-extended"
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 8 and {result["pool"] for result in results} == {pod["spec"]["nodeName"]}
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]
    monitor.check_gangs()
    monitor.assert_clean()
    assert monitor.checks["devices"] == 2


def test_a_node_whose_device_plugin_has_the_resource_serves_it_without_a_claim() -> None:
    """Three nodes can hold an 8-GPU pod: two through DRA, one through its device plugin. A gang of three
    takes all three; only the pods on DRA nodes get claims, and a fourth pod finds no room anywhere."""
    sim, monitor = simulation(classic_nodes=1)
    sim.add_objects([gpu_pod(f"w-{i}", "ml", gpus=8, annotations=pfn("w", 3)) for i in range(3)], source="test")
    sim.add_objects([gpu_pod("late", "ml", gpus=8, annotations=pfn("late", 1))], source="test")
    report = anyio.run(lambda: sim.run(timeout=60))
    assert sorted(report.bound.values()) == ["b0-r0-n0", "b0-r0-n1", "plugin-n0"]
    assert "ml/late" not in report.bound
    store = sim.store
    claims = list(store.objects(store.resource("resource.k8s.io/v1", "ResourceClaim")))
    pods = {pod["spec"].get("nodeName"): pod for pod in store.objects(store.resource("v1", "Pod"))}
    assert len(claims) == 2 and "extendedResourceClaimStatus" not in pods["plugin-n0"]["status"]
    monitor.check_gangs()
    monitor.assert_clean()


def test_an_init_container_reuses_a_long_lived_container_s_request_or_shares_one_more() -> None:
    """An init container that runs to completion reuses a long-lived container's request when one is large
    enough; what the largest needs beyond all long-lived requests is one more request, shared by those no
    single request covers: 2 + 4 devices, the pod's effective request (6) as placement counts it."""
    served = served_by({"gpu-extended": read_class(gpu_class())})
    pod = gpu_pod("p", gpus=2)
    pod["spec"]["initContainers"] = [
        {"name": "fits", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "big", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "bigger", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "6"}}},
    ]
    found = {(r.container, r.name, r.count) for r in extended_requests(pod, served, {})}
    assert found == {
        ("main", "container-3-request-0", 2),
        ("fits", "container-3-request-0", 0),  # reuses main's
        ("big", "container-2-request-0", 0),  # shares bigger's
        ("bigger", "container-2-request-0", 4),
    }
    pod["spec"]["initContainers"] = pod["spec"]["initContainers"][:1]
    assert sum(r.count for r in extended_requests(pod, served, {})) == 2  # main's request serves both


def test_pods_pending_before_the_class_that_serves_their_resource_is_made_bind_once_it_is() -> None:
    sim, monitor = simulation()
    store = sim.store
    store.delete(store.resource("resource.k8s.io/v1", "DeviceClass"), None, "gpu-extended")
    sim.add_objects([gpu_pod("early", "ml", gpus=8, annotations=pfn("early", 1))], source="test")
    report = anyio.run(lambda: sim.run(timeout=30))
    assert not report.bound
    sim.add_objects([gpu_class()], source="the driver")
    report = anyio.run(lambda: sim.run(timeout=30))
    assert report.bound == {"ml/early": "b0-r0-n0"}
    monitor.check_gangs()
    monitor.assert_clean()


def test_status_updates_of_a_running_pod_served_by_devices_free_no_room() -> None:
    """A running pod whose claim was made for its extended resources: its kubelet's status updates change
    nothing it holds, so no node is said to have room freed (which would wake every waiting gang)."""
    state = ClusterState(Settings(), ManualClock())
    state.apply(DEVICE_CLASSES, Change("ADDED", gpu_class()))
    state.apply(RESOURCE_SLICES, Change("ADDED", node_slice("n0", 8)))
    made = claim("w-extended-resources-x", 8, allocated=[("n0", f"gpu-{i}") for i in range(8)])
    owner = {"kind": "Pod", "name": "w", "uid": "uid-w", "controller": True}
    made["metadata"].update(annotations={ANNOTATION: "true"}, ownerReferences=[owner])
    pod = gpu_pod("w", "ml", gpus=8, nodeName="n0")
    pod["metadata"]["uid"] = "uid-w"
    pod["status"] = {"phase": "Running", "extendedResourceClaimStatus": {"resourceClaimName": made["metadata"]["name"]}}
    state.apply(PODS, Change("ADDED", pod))
    state.apply(RESOURCE_CLAIMS, Change("ADDED", made))
    state.take_signals()
    for restarts in range(3):
        pod["status"]["containerStatuses"] = [{"name": "main", "restartCount": restarts}]
        state.apply(PODS, Change("MODIFIED", pod))
        assert state.take_signals() == (set(), False)
