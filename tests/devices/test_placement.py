"""Gangs whose pods claim devices, decided on the simulated clock (``tests/scheduler/loop.py``): placed by
the devices the nodes offer, told why not, and waiting for what another controller makes."""

from __future__ import annotations

from typing import Any

from scheduler.decision import Code
from scheduler.gangs import GangSpec
from scheduler.ports.port import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Change
from tests.devices.support import claim, device_class, first_available, node_slice
from tests.scheduler.loop import Loop
from topology import HOSTNAME


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


def every_device(name: str) -> dict[str, Any]:
    """A claim of every GPU of its pod's node (``allocationMode: All``)."""
    obj = claim(name, 1)
    obj["spec"]["devices"]["requests"][0] = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                         "allocationMode": "All"}}  # fmt: skip
    return obj


def test_a_pod_claiming_every_device_goes_where_none_is_taken_and_keeps_the_others_out() -> None:
    """allocationMode All: n0 has one of its 8 GPUs taken, so the pod goes to n1, and counts all eight there: a
    pod claiming one more GPU goes to n0, and one claiming every device finds no node."""
    loop = dra_loop()
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("one-gpus", 1)))
    sharing(loop, "one", "one-gpus", None, node="b0-r0-n0")
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", every_device("whole-gpus")))
    whole = sharing(loop, "whole", "whole-gpus", ("whole", 1))
    loop.settle()
    assert loop.bound()[whole] == "b0-r0-n1"
    extra = claiming(loop, "extra", ("extra", 1), 1)
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", every_device("again-gpus")))
    again = sharing(loop, "again", "again-gpus", ("again", 1))
    loop.settle()
    assert loop.bound()[extra] == "b0-r0-n0"
    assert again not in loop.bound()
    (outcome,) = loop.outcomes("pfn:ml/again")
    wanted = "Insufficient nodes with all their devices of class gpu.nvidia.com free (allocationMode All)"
    assert wanted in outcome.message


def test_a_claim_this_placement_cannot_honour_is_refused_by_name() -> None:
    """Another scheduler allocated the claim with a node selector that names no single node (a rack)."""
    loop = dra_loop()
    obj = claim("c-0-gpus", 1, allocated=[("b0-r0-n0", "gpu-0")])
    obj["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "example.com/rack", "operator": "In", "values": ["b0-r0"]}]}]}  # fmt: skip
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", obj))
    loop.submit("c-0", 0, gang=("c", 1), resourceClaims=[{"name": "gpus", "resourceClaimName": "c-0-gpus"}])
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/c")
    assert outcome.code is Code.INVALID
    assert "Phalanx does not implement ResourceClaim ml/c-0-gpus allocated on no single node" in outcome.message


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


def sharing(loop: Loop, name: str, claim_name: str, gang: tuple[str, int] | None, **submit: Any) -> str:
    claims = [{"name": "gpus", "resourceClaimName": claim_name}]
    return loop.submit(name, 0, gang=gang, resourceClaims=claims, **submit)


def test_pods_of_a_gang_that_share_a_claim_go_to_one_node_and_ask_its_devices_once() -> None:
    """Each device node has 8 GPUs: asked once, the claim's 8 fit on one node with both pods; asked by each
    pod, they would not. A busy node would draw the second pod (the most allocated first), if it could go
    anywhere."""
    loop = dra_loop()
    loop.submit("busy", 4, node="b0-r0-n2")
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("pair-gpus", 8)))
    pods = [sharing(loop, f"s-{i}", "pair-gpus", ("s", 2)) for i in range(2)]
    for key in loop.state.index.take_changed():  # compiled now, to look at; then queued, as sync would
        loop.loop.cycle.requeue(key)
    spec = loop.state.index.get("pfn:ml/s")  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec) and spec.request.required == HOSTNAME  # kept on one node, not by luck
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/s")
    assert outcome.code is Code.SCHEDULED
    assert len({loop.bound()[pod] for pod in pods}) == 1


def test_a_pod_joins_an_allocated_shared_claim_on_its_node_without_asking_its_devices_again() -> None:
    loop = dra_loop()
    given = claim("pair-gpus", 8, allocated=[("b0-r0-n1", f"gpu-{i}") for i in range(8)])
    given["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0-r0-n1"]}]}]}  # fmt: skip
    given["status"]["reservedFor"] = [{"resource": "pods", "name": "first", "uid": "first"}]
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", given))
    sharing(loop, "first", "pair-gpus", None, node="b0-r0-n1")
    second = sharing(loop, "second", "pair-gpus", ("second", 1))
    loop.settle()
    assert loop.bound()[second] == "b0-r0-n1"  # its 8 devices are taken, by the claim it shares
    # The node's devices are counted once, on their own: a third pod claiming 8 of its own goes elsewhere.
    third = claiming(loop, "third", ("third", 1))
    loop.settle()
    assert loop.bound()[third] == "b0-r0-n0"


def test_pods_of_two_gangs_that_share_a_claim_nobody_allocated_are_told_they_cannot_be_kept_together() -> None:
    loop = dra_loop()
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("pair-gpus", 8)))
    sharing(loop, "a-0", "pair-gpus", ("a", 1))
    sharing(loop, "b-0", "pair-gpus", ("b", 1))
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/a")
    assert outcome.code is Code.INVALID
    assert "ResourceClaim ml/pair-gpus is shared with 1 pod(s) outside this part of the gang" in outcome.message
    assert not loop.bound()


B200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
H100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"


def test_a_first_available_request_is_placed_by_the_first_alternative_some_node_offers() -> None:
    """Eight B200s if a node has them, else four H100s: no node has B200s, so the pod asks four H100s (and
    two such pods share a node of eight)."""
    loop = dra_loop(device_nodes=("b0-r0-n0",))
    pods = []
    for i in range(2):
        loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", first_available(f"f-{i}-gpus", ("b200", B200, 8),
                                                                         ("h100", H100, 4))))  # fmt: skip
        pods.append(sharing(loop, f"f-{i}", f"f-{i}-gpus", ("f", 2)))
    loop.settle()
    assert [loop.bound().get(pod) for pod in pods] == ["b0-r0-n0", "b0-r0-n0"]


def test_a_shared_claim_allocated_before_its_pods_bind_is_not_counted_twice() -> None:
    """PreBind writes the shared claim's allocation, and the watch shows it before either bind: the devices
    the first pod's placement carries are not counted again on their own, so the node is not crowded
    (which made the bind give the gang back, over and over)."""
    loop = dra_loop(device_nodes=("b0-r0-n0",))
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("pair-gpus", 8)))
    for i in range(2):
        sharing(loop, f"s-{i}", "pair-gpus", ("s", 2))
    loop.loop.sync()
    assert loop.loop.step()
    (job,) = loop.binder.jobs
    allocated = claim("pair-gpus", 8, allocated=[("b0-r0-n0", f"gpu-{i}") for i in range(8)])
    allocated["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0-r0-n0"]}]}]}  # fmt: skip
    allocated["status"]["reservedFor"] = [{"resource": "pods", "name": f"s-{i}", "uid": f"s-{i}"} for i in range(2)]
    loop.state.apply(RESOURCE_CLAIMS, Change("MODIFIED", allocated))
    assert not loop.state.overcommitted(["b0-r0-n0"])
    loop.binder.jobs.clear()
    for pod, node in job.pods:  # the binds are seen: the devices are now the claim's, counted once
        loop.bind(pod, node)
    assert not loop.state.overcommitted(["b0-r0-n0"])
    used = loop.state.snapshot.requested[loop.state.snapshot.index_of("b0-r0-n0")]
    assert int(used[loop.state.snapshot.resources.index("devices/gpu.nvidia.com")]) == 8


def test_a_gang_that_claims_devices_and_waited_too_long_holds_the_rack_whose_devices_free_up_first() -> None:
    """Starvation with devices: a reservation holds devices as it holds GPUs. Every node publishes 8 GPUs
    through DRA and runs another scheduler's pod holding some; a 4-pod gang claiming 8 each (one rack
    required) waits, then reserves the rack with fewest devices in use, and a small pod claiming devices
    finds room only where the gang does not need it."""
    nodes = tuple(f"b0-r{rack}-n{i}" for rack in range(2) for i in range(4))
    loop = dra_loop(nodes)
    for node, used in zip(nodes, [8, 8, 8, 4, 4, 4, 6, 6], strict=True):
        loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim(f"busy-{node}-gpus", used)))
        sharing(loop, f"busy-{node}", f"busy-{node}-gpus", None, node=node)
    rack = {"scheduling.phalanx.dev/topology-required": "example.com/rack"}
    big = [claiming(loop, f"big-{i}", ("big", 4), annotations=rack) for i in range(4)]
    loop.run_until(301)
    held = loop.loop.starvation.get("pfn:ml/big")  # type: ignore[arg-type]
    assert held is not None and held.where == "rack b0-r1"
    assert "reserves rack b0-r1 for its 32 devices of class gpu.nvidia.com; 20 devices of class gpu.nvidia.com there " \
        "are still in use" in loop.told.pending[big[0]]
    first, second = claiming(loop, "four-a", ("four-a", 1), 4), claiming(loop, "four-b", ("four-b", 1), 4)
    loop.settle()
    assert loop.bound().get(first) == "b0-r0-n3"
    assert second not in loop.bound()
    assert "reserved for gang pfn:ml/big" in loop.told.pending[second].lower()
