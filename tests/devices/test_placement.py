"""Gangs whose pods claim devices, decided on the simulated clock (``tests/scheduler/loop.py``): placed by
the devices the nodes offer, told why not, and waiting for what another controller makes."""

from __future__ import annotations

from scheduler.decision import Code
from scheduler.ports.port import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Change
from tests.devices.support import claim, device_class, node_slice
from tests.scheduler.loop import Loop


def dra_loop(device_nodes: tuple[str, ...] = ("b0-r0-n0", "b0-r0-n1"), *, preemption: bool = False) -> Loop:
    """Two racks of four nodes; the ones named publish 8 GPUs each through NVIDIA's DRA driver."""
    loop = Loop(racks=2, nodes=4, preemption=preemption)
    loop.state.apply(DEVICE_CLASSES, Change("ADDED", device_class()))
    for node in device_nodes:
        loop.state.apply(RESOURCE_SLICES, Change("ADDED", node_slice(node)))
    return loop


def claiming(
    loop: Loop, name: str, gang: tuple[str, int], count: int = 8, annotations: dict[str, str] | None = None
) -> str:
    """A pod of ``gang`` that asks no extended GPUs, only its own claim of ``count`` devices."""
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim(f"{name}-gpus", count)))
    claims = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    return loop.submit(name, 0, gang=gang, annotations=annotations, resourceClaims=claims)


def test_a_gang_that_claims_devices_goes_to_the_nodes_that_have_them() -> None:
    loop = dra_loop()
    pods = [claiming(loop, f"w-{i}", ("w", 2)) for i in range(2)]
    loop.settle()
    (outcome, *_) = loop.outcomes("pfn:ml/w")
    assert outcome.code is Code.SCHEDULED
    assert {loop.bound()[pod] for pod in pods} == {"b0-r0-n0", "b0-r0-n1"}


def test_a_gang_that_claims_more_devices_than_the_nodes_have_is_told_which_devices() -> None:
    loop = dra_loop()
    for i in range(3):
        claiming(loop, f"w-{i}", ("w", 3))
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/w")
    assert outcome.code is Code.UNRESOLVABLE  # 24 devices asked, 16 in the whole cluster
    assert outcome.message == (
        "2/8 nodes are available: 6 Insufficient devices of class gpu.nvidia.com. Gang ml/w needs 3 pods (24 "
        "devices of class gpu.nvidia.com); the cluster could hold at most 2 of this shape even if it were empty: "
        "each node holds at most 1 (8 of its 8 devices of class gpu.nvidia.com)."
    )
    assert not loop.bound()


def test_a_pod_whose_template_claim_is_not_made_yet_waits_and_binds_once_it_is() -> None:
    loop = dra_loop()
    pod = loop.submit("t-0", 0, gang=("t", 1), resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "eight"}])
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/t")
    assert outcome.code is Code.WAIT
    assert (
        "waits for its ResourceClaim from template eight, which the resourceclaim controller makes" in outcome.message
    )
    # The controller makes the claim and names it in the pod's status: the gang is placed.
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("t-0-gpus-x7k2p", 8)))
    made = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "t-0-gpus-x7k2p"}]}
    loop.pods[pod] = {**loop.pods[pod], "status": made}  # a new object, as every watch event is
    loop.state.apply(PODS, Change("MODIFIED", loop.pods[pod]))
    loop.settle()
    assert loop.bound()[pod] in ("b0-r0-n0", "b0-r0-n1")


def test_a_claim_this_placement_cannot_honour_is_refused_by_name() -> None:
    loop = dra_loop()
    obj = claim("c-0-gpus", 2)
    obj["spec"]["devices"]["requests"][0] = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                         "allocationMode": "All"}}  # fmt: skip
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", obj))
    loop.submit("c-0", 0, gang=("c", 1), resourceClaims=[{"name": "gpus", "resourceClaimName": "c-0-gpus"}])
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/c")
    assert outcome.code is Code.INVALID
    assert "Phalanx does not implement allocationMode All in ResourceClaim ml/c-0-gpus" in outcome.message


def test_a_gang_short_of_devices_preempts_the_pod_that_holds_them_and_no_other() -> None:
    loop = dra_loop(device_nodes=("b0-r0-n0",), preemption=True)
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("low-gpus", 8)))
    holder = loop.submit("low", 0, node="b0-r0-n0", resourceClaims=[{"name": "gpus", "resourceClaimName": "low-gpus"}])
    bystander = loop.submit("plain", 8, node="b0-r0-n1")  # GPUs but no devices: evicting it would not help
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("hi-0-gpus", 8)))
    loop.submit("hi-0", 0, gang=("hi", 1), priority=100,
                resourceClaims=[{"name": "gpus", "resourceClaimName": "hi-0-gpus"}])  # fmt: skip
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/hi")
    assert outcome.code is Code.PREEMPTING and outcome.victims is not None
    assert [victim.key for victim in outcome.victims.pods] == [holder]  # the devices' holder, not the bystander
    assert bystander in loop.bound()


def test_a_pod_whose_claim_is_allocated_already_goes_where_its_devices_are() -> None:
    """An earlier attempt gave its claim devices on b0-r0-n1 and could not take them back (the API was down):
    the pod is placed there, not wherever else has room."""
    loop = dra_loop()
    given = claim("p-0-gpus", 8, allocated=[("b0-r0-n1", f"gpu-{i}") for i in range(8)])
    given["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0-r0-n1"]}]}]}  # fmt: skip
    given["status"]["reservedFor"] = [{"resource": "pods", "name": "p-0", "uid": "p-0"}]
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", given))
    pod = loop.submit("p-0", 0, gang=("p", 1), resourceClaims=[{"name": "gpus", "resourceClaimName": "p-0-gpus"}])
    loop.settle()
    assert loop.bound()[pod] == "b0-r0-n1"


def test_devices_of_a_claim_no_pod_uses_are_not_given_until_it_is_deallocated() -> None:
    """A claim stays allocated after its pod is gone until the resourceclaim controller deallocates it: no pod
    counts its devices, yet they are not free."""
    loop = dra_loop(device_nodes=("b0-r0-n0",))
    left = claim("done-gpus", 8, allocated=[("b0-r0-n0", f"gpu-{i}") for i in range(8)])
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", left))
    pod = claiming(loop, "w-0", ("w", 1))
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/w")
    assert outcome.code is Code.UNSCHEDULABLE and "Insufficient devices of class gpu.nvidia.com" in outcome.message
    assert not loop.bound()
    del left["status"]  # the controller deallocates it: the devices are free, and the gang is woken at once
    loop.state.apply(RESOURCE_CLAIMS, Change("MODIFIED", {**left, "metadata": {**left["metadata"]}}))
    loop.settle()
    assert loop.bound() == {pod: "b0-r0-n0"}


def test_devices_of_a_finished_pod_stay_taken_while_its_claim_is_allocated() -> None:
    loop = dra_loop(device_nodes=("b0-r0-n0",))
    given = claim("old-gpus", 8, allocated=[("b0-r0-n0", f"gpu-{i}") for i in range(8)])
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", given))
    old = loop.submit("old", 0, node="b0-r0-n0", resourceClaims=[{"name": "gpus", "resourceClaimName": "old-gpus"}])
    loop.pods[old] = {**loop.pods[old], "status": {**loop.pods[old].get("status", {}), "phase": "Succeeded"}}
    loop.state.apply(PODS, Change("MODIFIED", loop.pods[old]))
    claiming(loop, "w-0", ("w", 1))
    loop.settle()
    assert set(loop.bound()) == {old}  # the finished pod's devices are still allocated to its claim
