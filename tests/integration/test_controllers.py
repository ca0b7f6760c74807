"""What `phalanx simulate`'s controllers create is what a real API server accepts, and Phalanx places it
there as it does in the simulation: every gang whole, in the domain its simulation found."""

from __future__ import annotations

from typing import Any

from scripts.controlplane import ControlPlane, collection_path
from tests.integration.support import SHAPE, PhalanxProcess, bound, ensure_namespace, eventually, get, pods
from tests.sim.test_controllers import RACK, apps, jobset, pytorch_job, train_job, training_runtime
from tests.sim.workloads import gang, job, lws, simulate

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation")


def workload() -> list[dict[str, Any]]:
    ordered = apps("StatefulSet", 2, serviceName="cache")
    ordered["metadata"]["name"] = "cache"
    sweep = job("sweep", 4, 8, completionMode="Indexed", annotations=gang("sweep", 4, **{RACK: "example.com/rack"}))
    return [sweep, jobset(), lws("llm", 2, 3, 8), pytorch_job(3), training_runtime(), train_job(2),
            apps("Deployment", 2), ordered]  # fmt: skip


def as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as its controller sends it: no server-set metadata, no status, not yet bound, and no
    ``spec.priority`` (the server's admission sets it)."""
    metadata = {key: value for key, value in obj["metadata"].items() if key not in SERVER_FIELDS}
    sent = {key: value for key, value in obj.items() if key not in ("status", "metadata")}
    if obj["kind"] == "Pod":
        sent["spec"] = {key: value for key, value in obj["spec"].items() if key not in ("nodeName", "priority")}
    return {**sent, "metadata": metadata}


def test_the_pods_and_groups_controllers_make_are_accepted_and_placed_whole_by_a_real_server(
    plane: ControlPlane, scheduler: PhalanxProcess
) -> None:
    simulation, report = simulate((workload(), None), shape=SHAPE)
    assert {gang.state for gang in report.gangs} == {"Bound"}
    store = simulation.store
    groups = [obj for version in ("scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1")
              for obj in store.objects(store.resource(version, "PodGroup"))]  # fmt: skip
    made = sorted(store.objects(store.resource("v1", "Pod")), key=lambda pod: int(pod["metadata"]["resourceVersion"]))
    for obj in [*groups, *made]:
        ensure_namespace(plane, obj["metadata"]["namespace"])
        sent = as_sent(obj)
        # Accepted with its ownerReferences (checked by a dry run); created without them, as their owners live
        # in the simulation, not on this server, whose garbage collector would delete the orphans.
        plane.call("POST", collection_path(sent) + "?dryRun=All", sent)
        stored = plane.apply(
            {**sent, "metadata": {k: v for k, v in sent["metadata"].items() if k != "ownerReferences"}}
        )
        # The server kept every name, label and annotation the controllers set.
        assert {key: stored["metadata"].get(key) for key in ("name", "labels", "annotations")} == {
            key: obj["metadata"].get(key) for key in ("name", "labels", "annotations")
        }
    wanted = {f"{pod['metadata']['namespace']}/{pod['metadata']['name']}" for pod in made}
    eventually(lambda: set(bound(plane)) >= wanted, timeout=60, what=f"all {len(wanted)} pods bound")
    on_server = bound(plane)
    labels = {node["metadata"]["name"]: node["metadata"]["labels"] for node in get(plane, "/api/v1/nodes")["items"]}
    for gang_report in report.gangs:
        members = [pod for pod, gang in report.gang_of.items() if gang == gang_report.key]
        assert members and all(pod in on_server for pod in members), gang_report.key
    sweep = [pod for pod, gang in report.gang_of.items() if gang == "pfn:ml/sweep"]
    assert len({labels[on_server[pod]]["example.com/rack"] for pod in sweep}) == 1  # its required rack
    assert len(pods(plane)) == len(wanted)  # nothing more than the controllers made
