"""PreBind over HTTP (the emulator): a gang that claims devices binds whole with every claim allocated on
its pod's node and reserved for it; a claim write refused leaves no pod bound and no claim allocated."""

from __future__ import annotations

from typing import Any

from scheduler.ports.sim import FaultRule, Faults
from tests.devices.support import claim, device_class, node_slice
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

SHAPE = "blocks=1,racks=1,nodes=3,gpus=8"
SEED = 6


def claims(where: Cluster) -> dict[str, dict[str, Any]]:
    resource = where.store.resource("resource.k8s.io/v1", "ResourceClaim")
    return {obj["metadata"]["name"]: obj for obj in where.store.objects(resource)}


def gang_with_claims(where: Cluster, size: int) -> None:
    where.create(device_class())
    for node in ("b0-r0-n0", "b0-r0-n1"):
        where.create(node_slice(node))
    for i in range(size):
        where.create({**claim(f"w-{i}-gpus", 8), "metadata": {"name": f"w-{i}-gpus", "namespace": "team"}})
        resource_claims = [{"name": "gpus", "resourceClaimName": f"w-{i}-gpus"}]
        where.create(gpu_pod(f"w-{i}", gpus=0, annotations=pfn("w", size), resourceClaims=resource_claims))


async def test_a_gang_that_claims_devices_binds_whole_with_its_claims_allocated_on_its_nodes() -> None:
    async with cluster(SHAPE) as where, phalanx(where):
        gang_with_claims(where, 2)
        bound = await eventually(lambda: len(where.bound()) == 2 and where.bound(), what="the gang bound")
        assert set(bound.values()) == {"b0-r0-n0", "b0-r0-n1"}  # the nodes that publish devices
        pods = where.pods()
        for i in range(2):
            status = claims(where)[f"w-{i}-gpus"]["status"]
            node = bound[f"team/w-{i}"]
            results = status["allocation"]["devices"]["results"]
            assert sorted(result["device"] for result in results) == [f"gpu-{n}" for n in range(8)]
            assert {result["pool"] for result in results} == {node}
            assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
            pod = pods[f"team/w-{i}"]["metadata"]
            assert status["reservedFor"] == [{"resource": "pods", "name": pod["name"], "uid": pod["uid"]}]
            finalizers = claims(where)[f"w-{i}-gpus"]["metadata"]["finalizers"]
            assert finalizers == ["resource.kubernetes.io/delete-protection"]
        await check_invariants(where)


async def test_a_refused_claim_write_binds_nothing_and_leaves_no_claim_allocated() -> None:
    faults = Faults(seed=1, rules=[FaultRule(verbs=frozenset({"patch"}), resources=frozenset({"resourceclaims"}),
                                             error_rate=1.0, codes=(403,))])  # fmt: skip
    async with cluster(SHAPE, faults=faults) as where, phalanx(where):
        gang_with_claims(where, 2)
        await eventually(lambda: where.events("FailedBinding"), what="the refusal told")
        assert not where.bound()
        assert not any(obj.get("status", {}).get("allocation") for obj in claims(where).values())
        assert not any(obj["metadata"].get("finalizers") for obj in claims(where).values())  # taken off too
        faults.rules.clear()  # the refusal is lifted: the gang binds at its next attempt
        await eventually(lambda: len(where.bound()) == 2, what="the gang bound once the writes pass", timeout=60)
        await check_invariants(where)


async def test_a_claim_taken_back_after_a_lost_bind_is_allocated_afresh_before_its_pods_bind() -> None:
    """Both pods of a gang share one claim, and binds find their pod gone half the time (a 404) after PreBind
    allocated the claim, whose writes are slow: in the end both pods are bound on the claim's node with the
    claim reserved for both, and at each bind the claim was allocated for the pod (the invariant monitor)."""
    lost = FaultRule(verbs=frozenset({"bind"}), error_rate=0.5, codes=(404,))
    slow = FaultRule(verbs=frozenset({"patch"}), resources=frozenset({"resourceclaims"}), latency=0.05)
    faults = Faults(seed=SEED, rules=[lost, slow])
    async with cluster(SHAPE, faults=faults) as where, phalanx(where):
        where.create(device_class())
        where.create(node_slice("b0-r0-n0"))
        where.create({**claim("pair-gpus", 8), "metadata": {"name": "pair-gpus", "namespace": "team"}})
        for name in ("left", "right"):
            where.create(gpu_pod(name, gpus=0, annotations=pfn("pair", 2),
                                 resourceClaims=[{"name": "gpus", "resourceClaimName": "pair-gpus"}]))  # fmt: skip
        bound = await eventually(lambda: len(where.bound()) == 2 and where.bound(), what="both bound", timeout=60)
        assert set(bound.values()) == {"b0-r0-n0"}
        status = claims(where)["pair-gpus"]["status"]
        pods = where.pods()
        assert sorted(ref["uid"] for ref in status["reservedFor"]) == sorted(
            pods[f"team/{name}"]["metadata"]["uid"] for name in ("left", "right")
        )
        await check_invariants(where)


async def test_a_claim_made_for_extended_resources_is_deleted_when_its_pod_cannot_bind_and_made_again() -> None:
    """KEP-5004 over HTTP: the pod's first binds are refused (a 403 for good), so the claim PreBind made for
    its ``example.com/dra-gpu`` is deleted, finalizer and all; once binds pass, a claim is made again, and
    the pod binds with it named in its status."""
    refused = FaultRule(verbs=frozenset({"bind"}), error_rate=1.0, codes=(403,))
    faults = Faults(seed=SEED, rules=[refused])
    async with cluster(SHAPE, faults=faults) as where, phalanx(where):
        served = device_class("dra-gpu")
        served["spec"]["extendedResourceName"] = "example.com/dra-gpu"
        where.create(served)
        where.create(node_slice("b0-r0-n0"))
        pod = gpu_pod("solo", gpus=0, annotations=pfn("solo", 1))
        pod["spec"]["containers"][0]["resources"]["limits"]["example.com/dra-gpu"] = "2"
        where.create(pod)
        await eventually(lambda: where.events("FailedBinding"), what="the refusal told")
        await eventually(lambda: not claims(where), what="the claim made for it deleted")
        faults.rules.clear()
        bound = await eventually(where.bound, what="the pod bound once binds pass", timeout=60)
        assert bound == {"team/solo": "b0-r0-n0"}
        (made,) = claims(where).values()
        assert where.pods()["team/solo"]["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == (
            made["metadata"]["name"]
        )
        assert len(made["status"]["allocation"]["devices"]["results"]) == 2
        await check_invariants(where)


async def test_a_binder_stopped_while_a_member_retries_keeps_the_claims_of_the_members_it_bound() -> None:
    """Three of a gang's four members bind; the fourth is refused and retried. The scheduler stops then (a lost
    lead, a shutdown): the claims of the members bound stay allocated and reserved for them; only the refused
    member's claim is taken back."""
    faults = Faults(seed=1)
    async with cluster("blocks=1,racks=1,nodes=4,gpus=8", faults=faults) as where:
        where.create(device_class())
        for node in ("b0-r0-n0", "b0-r0-n1", "b0-r0-n2", "b0-r0-n3"):
            where.create(node_slice(node))
        faults.bind_failures["team/w-3"] = 403
        async with phalanx(where):
            for i in range(4):
                where.create({**claim(f"w-{i}-gpus", 8), "metadata": {"name": f"w-{i}-gpus", "namespace": "team"}})
                resource_claims = [{"name": "gpus", "resourceClaimName": f"w-{i}-gpus"}]
                where.create(gpu_pod(f"w-{i}", gpus=0, annotations=pfn("w", 4), resourceClaims=resource_claims))
            await eventually(lambda: len(where.bound()) == 3, what="three members bound")
            await eventually(lambda: faults.injected["bind 403"] >= 2, what="the fourth retried")
        allocated = {name for name, obj in claims(where).items() if obj.get("status", {}).get("allocation")}
        assert allocated == {"w-0-gpus", "w-1-gpus", "w-2-gpus"}
