"""``phalanx simulate`` with devices: a cluster shape that publishes them (``dra=<driver>:<count>``), and
the resourceclaim controller that makes each pod's claim from its template, as kube-controller-manager's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from scheduler.frontends.dryrun import dry_run, read_real_cluster
from scheduler.frontends.explain import explain
from scheduler.gangs import GangSettings
from scheduler.ports.sim import ClusterShape, ManifestError, read_manifest_file
from scheduler.ports.sim.store import MERGE_PATCH
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.oracle import InvariantMonitor
from tests.devices.support import claim, device_class, networked_slice, node_slice, partitioned_node, profile_claim
from tests.scheduler.support import Cluster, cluster, gpu_pod, kubeconfig, pfn

JOB = Path(__file__).resolve().parents[2] / "examples" / "dra" / "job.yaml"
JOBSET = JOB.with_name("computedomain-jobset.yaml")
GROUP_CLAIM = JOB.with_name("podgroup-claim.yaml")
LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")


def dra_simulation(shape: str) -> tuple[Simulation, InvariantMonitor]:
    """``phalanx simulate --cluster SHAPE`` as the tests drive it, with the invariant monitor watching."""
    simulation = Simulation(Settings(levels=LEVELS))
    objects = ClusterShape.parse(shape).manifests()
    simulation.add_nodes([obj for obj in objects if obj["kind"] == "Node"])
    simulation.add_objects([obj for obj in objects if obj["kind"] != "Node"], source="cluster")
    return simulation, InvariantMonitor(simulation.store, gang_settings=GangSettings(levels=LEVELS))


def test_a_shape_with_dra_publishes_a_class_and_each_node_s_devices() -> None:
    objects = ClusterShape.parse("blocks=1,racks=2,nodes=2,gpus=0,dra=gpu.nvidia.com:4").manifests()
    kinds = [obj["kind"] for obj in objects]
    assert kinds == ["Node"] * 4 + ["DeviceClass"] + ["ResourceSlice"] * 4
    node_slice = objects[-1]["spec"]
    assert node_slice["nodeName"] == "b0-r1-n1" and len(node_slice["devices"]) == 4
    assert node_slice["devices"][0]["attributes"]["cliqueId"] == {"string": "b0-r1"}
    with pytest.raises(ManifestError, match="dra must be <driver>:<devices per node>"):
        ClusterShape.parse("dra=gpu.nvidia.com")


def test_a_job_whose_pods_claim_devices_through_a_template_binds_whole_in_one_rack() -> None:
    simulation, monitor = dra_simulation("blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:8")
    simulation.add_objects(read_manifest_file(str(JOB)), source=str(JOB))
    report = anyio.run(lambda: simulation.run(timeout=60))
    assert len(report.bound) == 4 and len({node.rsplit("-", 1)[0] for node in report.bound.values()}) == 1
    claims = list(simulation.store.objects(simulation.store.resource("resource.k8s.io/v1", "ResourceClaim")))
    assert len(claims) == 4
    for made in claims:
        (owner,) = made["metadata"]["ownerReferences"]
        assert owner["kind"] == "Pod" and made["metadata"]["name"].startswith(f"{owner['name']}-gpus-")
        assert len(made["status"]["allocation"]["devices"]["results"]) == 8
    monitor.check_gangs()
    monitor.assert_clean()
    assert monitor.checks["devices"] == 4


def test_a_compute_domain_jobset_gets_a_channel_and_four_gpus_per_worker_in_one_clique() -> None:
    """NVIDIA's ComputeDomain pattern: each worker claims its node's four GPUs and one IMEX channel; one clique
    of four nodes is busy (a GPU of one node is taken), so the JobSet goes whole to the other."""
    simulation = Simulation(Settings(levels=LEVELS))
    shape = "blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:4+compute-domain.nvidia.com:1"
    objects = ClusterShape.parse(shape).manifests()
    simulation.add_nodes([obj for obj in objects if obj["kind"] == "Node"])
    taken = claim("other-gpu", 1, allocated=[("b0-r0-n2", "gpu-3")])
    simulation.add_objects([obj for obj in objects if obj["kind"] != "Node"] + [taken], source="cluster")
    monitor = InvariantMonitor(simulation.store, gang_settings=GangSettings(levels=LEVELS))
    simulation.add_objects(read_manifest_file(str(JOBSET)), source=str(JOBSET))
    report = anyio.run(lambda: simulation.run(timeout=60))
    assert sorted(report.bound.values()) == [f"b0-r1-n{i}" for i in range(4)]
    claims = list(simulation.store.objects(simulation.store.resource("resource.k8s.io/v1", "ResourceClaim")))
    made = [obj for obj in claims if obj["metadata"]["name"] != "other-gpu"]
    assert len(made) == 8
    for obj in made:
        (owner,) = obj["metadata"]["ownerReferences"]
        results = obj["status"]["allocation"]["devices"]["results"]
        drivers = {result["driver"] for result in results}
        assert (len(results), drivers) in ((4, {"gpu.nvidia.com"}), (1, {"compute-domain.nvidia.com"}))
        assert {result["pool"] for result in results} == {report.bound[f"ml/{owner['name']}"]}
    channel = next(obj for obj in made if obj["metadata"]["name"].split("-channel-")[0] != obj["metadata"]["name"])
    (config,) = channel["status"]["allocation"]["devices"]["config"]
    assert config["source"] == "FromClaim" and config["opaque"]["parameters"]["kind"] == "ComputeDomainChannelConfig"
    monitor.check_gangs()
    monitor.assert_clean()


def test_a_podgroup_s_claim_is_made_once_allocated_once_and_reserved_for_the_group() -> None:
    """KEP-5729: both pods repeat their PodGroup's claim entry, so they share one claim made for the group; its
    eight GPUs are on one node, so both go there, and the claim is reserved for the PodGroup, not per pod."""
    simulation, monitor = dra_simulation("blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:8")
    simulation.add_objects(read_manifest_file(str(GROUP_CLAIM)), source=str(GROUP_CLAIM))
    report = anyio.run(lambda: simulation.run(timeout=60))
    assert len(report.bound) == 2 and len(set(report.bound.values())) == 1
    store = simulation.store
    (made,) = store.objects(store.resource("resource.k8s.io/v1", "ResourceClaim"))
    group = store.get(store.resource("scheduling.k8s.io/v1alpha2", "PodGroup"), "serve", "replica-0")
    (owner,) = made["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("PodGroup", "replica-0")
    assert group["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": made["metadata"]["name"]}]
    assert made["status"]["reservedFor"] == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                              "name": "replica-0", "uid": group["metadata"]["uid"]}]  # fmt: skip
    results = made["status"]["allocation"]["devices"]["results"]
    assert len(results) == 8 and {result["pool"] for result in results} == set(report.bound.values())
    monitor.check_gangs()
    monitor.assert_clean()
    assert monitor.checks["devices"] == 2


def test_devices_a_finished_pod_held_are_given_to_the_next_wave_of_its_job() -> None:
    """Eight completions, two at a time, on two nodes of 8 devices: each wave's claims are released by the
    simulated resourceclaim controller once its pods succeed, and the next wave gets their devices."""
    simulation = Simulation(Settings(levels=LEVELS))
    objects = ClusterShape.parse("blocks=1,racks=1,nodes=2,gpus=0,dra=gpu.nvidia.com:8").manifests()
    simulation.add_nodes([obj for obj in objects if obj["kind"] == "Node"])
    simulation.add_objects([obj for obj in objects if obj["kind"] != "Node"], source="cluster")
    workload = read_manifest_file(str(JOB))
    job = next(obj for obj in workload if obj["kind"] == "Job")
    job["spec"].update(parallelism=2, completions=8)
    template = job["spec"]["template"]
    template["metadata"]["annotations"] = {"simulate.phalanx.dev/run-seconds": "600"}  # no gang: one at a time
    simulation.add_objects(workload, source=str(JOB))
    report = anyio.run(lambda: simulation.run(timeout=60))
    assert len(report.bound) == 8  # four waves: only possible if each wave's devices came back
    claims = simulation.store.resource("resource.k8s.io/v1", "ResourceClaim")
    finished = [claim for claim in simulation.store.objects(claims) if not claim.get("status", {}).get("allocation")]
    assert len(finished) >= 6  # every claim whose pod succeeded is free (the last wave's may still run)


def publish_gpus(where: Cluster) -> None:
    """NVIDIA's DeviceClass, and 8 GPUs on each of the two nodes."""
    where.create(device_class())
    for node in ("b0-r0-n0", "b0-r0-n1"):
        where.create(node_slice(node))


async def test_dry_run_reads_the_devices_and_claims_and_places_a_gang_that_claims_devices(tmp_path: Path) -> None:
    """`phalanx dry-run` copies the DRA objects with the rest: a running pod's claim keeps its devices, and
    a pending gang is placed where devices are still free."""
    async with cluster("blocks=1,racks=1,nodes=2,gpus=0") as where:
        publish_gpus(where)
        running = {**claim("run-gpus", 8, allocated=[("b0-r0-n0", f"gpu-{i}") for i in range(8)]),
                   "metadata": {"name": "run-gpus", "namespace": "team"}}  # fmt: skip
        where.restore(running)
        where.create(gpu_pod("run", gpus=0, scheduler="default-scheduler", nodeName="b0-r0-n0",
                             resourceClaims=[{"name": "gpus", "resourceClaimName": "run-gpus"}]))  # fmt: skip
        where.create({**claim("new-gpus", 8), "metadata": {"name": "new-gpus", "namespace": "team"}})
        where.create(gpu_pod("new", gpus=0, annotations=pfn("new", 1),
                             resourceClaims=[{"name": "gpus", "resourceClaimName": "new-gpus"}]))  # fmt: skip
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    report = await dry_run(copy, Settings(levels=LEVELS))
    assert report.bound == {"team/new": "b0-r0-n1"}  # the node whose devices are not the running pod's


async def test_explain_names_the_devices_a_gang_waits_for_by_class_and_count(tmp_path: Path) -> None:
    """`phalanx explain` of a gang whose claims the nodes cannot hold: what each pod asks, and the devices
    the gang needs in the words of its Unschedulable condition."""
    async with cluster("blocks=1,racks=1,nodes=2,gpus=0") as where:
        publish_gpus(where)
        for i in range(3):
            where.create({**claim(f"w-{i}-gpus", 8), "metadata": {"name": f"w-{i}-gpus", "namespace": "team"}})
            where.create(gpu_pod(f"w-{i}", gpus=0, annotations=pfn("w", 3),
                                 resourceClaims=[{"name": "gpus", "resourceClaimName": f"w-{i}-gpus"}]))  # fmt: skip
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    text = await explain(copy, Settings(levels=LEVELS), "team/w-0")
    assert text.splitlines()[0].endswith("at least 3 together; {8 devices of class gpu.nvidia.com}.")
    assert "Gang team/w needs 3 pods (24 devices of class gpu.nvidia.com)" in text


async def test_explain_says_which_partitions_and_which_taints_keep_devices_from_a_gang(tmp_path: Path) -> None:
    """`phalanx explain` of a gang that cannot fit because a whole-GPU partition holds the only GPU's counters
    and the other node's devices are tainted: both are named, with the counter and the taint."""
    async with cluster("blocks=1,racks=1,nodes=2,gpus=0") as where:
        where.create(device_class())
        for obj in partitioned_node("b0-r0-n0"):
            where.create(obj)
        tainted = partitioned_node("b0-r0-n1", taint={"key": "example.com/unhealthy", "value": "true",
                                                      "effect": "NoSchedule"})  # fmt: skip
        for obj in tainted:
            where.create(obj)
        whole = profile_claim("whole", "7g.80gb")
        whole["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "b0-r0-n0", "device": "gpu-0-7g-0"}]}}}  # fmt: skip
        where.create(whole)
        where.store.patch(where.store.resource("resource.k8s.io/v1", "ResourceClaim"), "team", "whole",
                          {"status": whole["status"]}, MERGE_PATCH, subresource="status")  # fmt: skip
        where.create(profile_claim("small", "1g.10gb", 2))
        where.create(gpu_pod("small", gpus=0, annotations=pfn("small", 1),
                             resourceClaims=[{"name": "gpus", "resourceClaimName": "small"}]))  # fmt: skip
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    text = await explain(copy, Settings(levels=LEVELS), "team/small")
    assert "7 partitions whose GPU's counters other partitions use (on b0-r0-n0, counter set gpu-0" in text, text
    assert "tainted example.com/unhealthy=true:NoSchedule, which the request does not tolerate" in text, text


def test_networked_devices_serve_pods_on_any_node_once_each_and_a_gang_they_cannot_all_serve_binds_nothing() -> None:
    """A fabric of 4 GPUs every node reaches (a slice for allNodes) and nodes with none of their own. A gang of
    three claiming 2 each cannot all be served: placement counts the fabric on every node, PreBind finds it
    short, and nothing of the gang binds nor stays allocated. A gang of two claiming 2 each then binds, its
    claims usable anywhere (no node selector); the fabric is then offered by no node."""
    simulation = Simulation(Settings(levels=LEVELS))
    simulation.add_nodes(ClusterShape.parse("blocks=1,racks=1,nodes=4,gpus=0").manifests())
    simulation.add_objects([device_class(), networked_slice("fabric", 4)], source="cluster")
    monitor = InvariantMonitor(simulation.store, gang_settings=GangSettings(levels=LEVELS))

    def gang(name: str, size: int) -> list[dict[str, Any]]:
        found = []
        for i in range(size):
            metadata = {"name": f"{name}-{i}-gpus", "namespace": "ml"}
            found.append({**claim(metadata["name"], 2), "metadata": metadata})
            named = [{"name": "gpus", "resourceClaimName": metadata["name"]}]
            found.append(gpu_pod(f"{name}-{i}", "ml", gpus=0, annotations=pfn(name, size), resourceClaims=named))
        return found

    store = simulation.store
    claims = store.resource("resource.k8s.io/v1", "ResourceClaim")
    simulation.add_objects(gang("trio", 3), source="trio")
    report = anyio.run(lambda: simulation.run(timeout=30))
    assert not report.bound
    assert not any(obj.get("status", {}).get("allocation") for obj in store.objects(claims))
    events = store.objects(store.resource("v1", "Event"))
    refused = [e.get("message") or e.get("note", "") for e in events if e.get("reason") == "FailedBinding"]
    assert any("needs 2 of class gpu.nvidia.com" in message for message in refused)
    simulation.add_objects(gang("pair", 2), source="pair")
    report = anyio.run(lambda: simulation.run(timeout=30))
    assert sorted(report.bound) == ["ml/pair-0", "ml/pair-1"]
    for i in range(2):
        allocation = store.get(claims, "ml", f"pair-{i}-gpus")["status"]["allocation"]
        assert "nodeSelector" not in allocation
        assert {result["pool"] for result in allocation["devices"]["results"]} == {"fabric"}
    monitor.check_gangs()
    monitor.assert_clean()


def test_devices_a_pod_holds_through_one_request_are_not_offered_to_another_that_also_matches_them() -> None:
    """Two requests match the same GPUs (any device, and any of type gpu): a pod holding 4 of n0's 8 through the
    first leaves n0 only 4 for the second, so a pod asking 6 GPUs goes to n1 at once, not to n0 (the busier
    node, which placement prefers) to be refused when its devices are chosen."""
    simulation, monitor = dra_simulation("blocks=1,racks=1,nodes=2,gpus=0,dra=gpu.nvidia.com:8")
    typed = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    workload: list[dict[str, Any]] = []
    for name, count, selectors in (("any", 4, ()), ("h100", 6, (typed,))):
        workload.append({**claim(f"{name}-gpus", count, *selectors), "metadata": {"name": f"{name}-gpus",
                                                                                 "namespace": "ml"}})  # fmt: skip
        workload.append(gpu_pod(name, "ml", gpus=0, annotations=pfn(name, 1),
                                resourceClaims=[{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]))  # fmt: skip
    simulation.add_objects(workload[:2], source="any")
    assert anyio.run(lambda: simulation.run(timeout=30)).bound == {"ml/any": "b0-r0-n0"}
    simulation.add_objects(workload[2:], source="h100")
    report = anyio.run(lambda: simulation.run(timeout=30))
    assert report.bound["ml/h100"] == "b0-r0-n1"
    events = simulation.store.objects(simulation.store.resource("v1", "Event"))
    assert not [event for event in events if event.get("reason") == "FailedBinding"]
    monitor.check_gangs()
    monitor.assert_clean()


def test_devices_that_must_be_attached_are_attached_by_the_simulated_driver_and_released_when_the_pod_ends() -> None:
    """Devices with binding conditions: the simulated driver reports them attached as a healthy one does, and a
    pod binds only then (the oracle checks). Two pods want the node's two devices: the second binds once the
    first has ended and its claim is released, reports and all."""
    simulation, monitor = dra_simulation("blocks=1,racks=1,nodes=2,gpus=0")
    fabric = node_slice("b0-r0-n0", 2, driver="fabric.example.com")
    for device in fabric["spec"]["devices"]:
        device.update(bindingConditions=["fabric.example.com/attached"],
                      bindingFailureConditions=["fabric.example.com/failed"])  # fmt: skip
    objects: list[dict[str, Any]] = [
        device_class("fabric.example.com", "device.driver == 'fabric.example.com'"),
        fabric,
    ]
    for name in ("first", "second"):
        objects.append(claim(name, 2, namespace="ml", device_class_name="fabric.example.com"))
        annotations = {**pfn(name, 1), "simulate.phalanx.dev/run-seconds": "60"}
        named = [{"name": "fabric", "resourceClaimName": name}]
        pod = gpu_pod(name, "ml", gpus=0, annotations=annotations, resourceClaims=named, restartPolicy="Never")
        objects.append(pod)
    simulation.add_objects(objects, source="test")
    report = anyio.run(lambda: simulation.run(timeout=60))
    assert report.bound == {"ml/first": "b0-r0-n0", "ml/second": "b0-r0-n0"}
    claims = simulation.store.resource("resource.k8s.io/v1", "ResourceClaim")
    for name in ("first", "second"):  # both ended: released, the driver's reports with the allocation
        status = simulation.store.get(claims, "ml", name).get("status") or {}
        assert not status.get("allocation") and not status.get("devices")
    # At each bind the oracle found every device's binding condition reported True (a violation otherwise).
    monitor.check_gangs()
    monitor.assert_clean()
    assert monitor.checks["devices"] == 2
