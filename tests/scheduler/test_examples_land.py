"""Gangs of every source land where their definition says, end to end."""

from tests.gangs.support import EXAMPLES
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import cluster, create_manifests, eventually, gpu_pod, labels_of, phalanx

RACK, BLOCK = "example.com/rack", "example.com/block"


def replicas(bound: dict[str, str], prefix: str) -> dict[str, list[str]]:
    """Pods grouped by replica: ``<prefix>-<role>-<replica>-<i>`` -> role-replica."""
    found: dict[str, list[str]] = {}
    for pod, node in bound.items():
        name = pod.split("/", 1)[1]
        if name.startswith(prefix):
            found.setdefault(name.rsplit("-", 1)[0], []).append(node)
    return found


async def test_volcano_prefill_decode_subgroups_land_each_replica_in_one_rack() -> None:
    async with cluster("blocks=1,racks=4,nodes=2,gpus=8") as where, phalanx(where):
        await create_manifests(where, str(EXAMPLES / "volcano" / "kthena-prefill-decode.yaml"))
        await eventually(lambda: len(where.bound()) == 8, what="all eight pods bound")
        groups = replicas(where.bound(), "sample-0-")
        assert sorted(groups) == ["sample-0-decode-0", "sample-0-decode-1", "sample-0-prefill-0", "sample-0-prefill-1"]
        for replica, nodes in groups.items():
            assert len(nodes) == 2 and len(labels_of(where, nodes, RACK)) == 1, f"{replica} spans racks"
        groups_api = where.store.resource("scheduling.volcano.sh/v1beta1", "PodGroup")
        await eventually(
            lambda: (where.store.get(groups_api, "serving", "sample-0").get("status") or {}).get("phase") == "Running",
            what="the PodGroup Running",
        )
        await check_invariants(where)


async def test_volcano_group_with_too_few_racks_for_its_minimum_binds_nothing() -> None:
    # Two racks of one 8-GPU node each: two replicas of 2 x 4 GPUs fit, the minimum needs three.
    async with cluster("blocks=1,racks=2,nodes=1,gpus=8") as where, phalanx(where):
        await create_manifests(where, str(EXAMPLES / "volcano" / "kthena-prefill-decode.yaml"))
        await eventually(lambda: where.events("FailedScheduling"), what="FailedScheduling Event")
        assert where.bound() == {}
        await check_invariants(where)


async def test_a_kubernetes_podgroup_with_a_rack_constraint_lands_in_one_rack() -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where):
        where.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "blocker", "namespace": "ml"},
                "spec": {
                    "schedulerName": "other",
                    "nodeName": "b0-r0-n0",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
            }
        )
        await create_manifests(where, str(EXAMPLES / "podgroup-1.37" / "podgroup.yaml"))
        await eventually(lambda: len(where.bound()) == 5, what="the four workers bound")
        workers = [node for pod, node in where.bound().items() if "finetune-worker" in pod]
        assert labels_of(where, workers, RACK) == {"b0-r1"}  # rack b0-r0 has only three free nodes
        groups_api = where.store.resource("scheduling.k8s.io/v1beta1", "PodGroup")

        def initially_scheduled() -> str | None:
            conditions = (where.store.get(groups_api, "ml", "finetune-workers-0").get("status") or {}).get("conditions")
            return next((c["status"] for c in conditions or [] if c["type"] == "PodGroupInitiallyScheduled"), None)

        await eventually(lambda: initially_scheduled() == "True", what="PodGroupInitiallyScheduled=True")
        await check_invariants(where)


async def test_a_composite_service_lands_in_one_block_with_each_replica_in_one_rack() -> None:
    async with cluster("blocks=2,racks=2,nodes=4,gpus=8") as where, phalanx(where):
        for node in ("b0-r0-n0", "b0-r1-n0"):  # block b0 keeps no whole free rack
            where.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"blocker-{node}", "namespace": "x"},
                    "spec": {
                        "schedulerName": "other",
                        "nodeName": node,
                        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                    },
                }
            )
        await create_manifests(where, str(EXAMPLES / "phalanx-composite" / "service.yaml"))
        await eventually(
            lambda: len([p for p in where.bound() if p.startswith("serving/")]) >= 8,
            what="one prefill and one decode replica bound",
        )
        groups = replicas({p: n for p, n in where.bound().items() if p.startswith("serving/")}, "chat-")
        assert any(name.startswith("chat-prefill") for name in groups)
        assert any(name.startswith("chat-decode") for name in groups)
        assert labels_of(where, [n for nodes in groups.values() for n in nodes], BLOCK) == {"b1"}
        for replica, nodes in groups.items():
            assert len(nodes) == 4 and len(labels_of(where, nodes, RACK)) == 1, f"{replica} spans racks"
        await check_invariants(where)


async def test_an_elastic_composite_service_goes_to_the_block_where_every_replica_fits() -> None:
    """Block b0 is half full: it would hold the service's minimum (one prefill and one decode replica, a
    rack each), and nothing more. Block b1 holds all three replicas: the service goes there, whole."""
    async with cluster("blocks=2,racks=4,nodes=4,gpus=8") as where, phalanx(where):
        for rack in ("b0-r0", "b0-r1"):
            for i in range(4):
                where.create(gpu_pod(f"busy-{rack}-{i}", "other", scheduler="other", nodeName=f"{rack}-n{i}"))
        await create_manifests(where, str(EXAMPLES / "phalanx-composite" / "service.yaml"))
        service = await eventually(
            lambda: (
                (found := {p: n for p, n in where.bound().items() if p.startswith("serving/")})
                and len(found) == 12
                and found
            ),
            what="all twelve pods of the service bound",
        )
        assert labels_of(where, service.values(), BLOCK) == {"b1"}
        for replica, nodes in replicas(service, "chat-").items():
            assert len(labels_of(where, nodes, RACK)) == 1, f"{replica} spans racks"
        await check_invariants(where)
