"""Each kind people deploy expands as its controller would (names, labels, counts, group objects), and its
pods bind exactly as the equivalent bare pods and group objects do."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

import pytest

from scheduler.ports.sim import ManifestError
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from tests.sim.workloads import (
    LEVELS,
    RUN_SECONDS,
    Manifest,
    bare_pod,
    gang,
    job,
    lws,
    pod_spec,
    pods,
    simulate,
    template,
)

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
RACK = "scheduling.phalanx.dev/topology-required"


def controller_of(pod: Manifest) -> dict[str, Any]:
    (reference,) = pod["metadata"]["ownerReferences"]
    assert reference["controller"] is True and reference["blockOwnerDeletion"] is True
    return dict(reference)


def nodes_of(bound: dict[str, str]) -> list[str]:
    return sorted(bound.values())


# -- batch/v1 Job -------------------------------------------------------------------------------------


def test_a_job_makes_parallelism_pods_named_and_labelled_as_the_job_controller_does() -> None:
    simulation, report = simulate(([job("train", 3, 8)], None))
    made = pods(simulation.store)
    assert len(made) == 3 and all(re.fullmatch(f"ml/train-{SUFFIX}", key) for key in made)
    for pod in made.values():
        owner = controller_of(pod)
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == ("batch/v1", "Job", "train")
        assert pod["metadata"]["labels"] == {
            "batch.kubernetes.io/controller-uid": owner["uid"],
            "batch.kubernetes.io/job-name": "train",
            "controller-uid": owner["uid"],
            "job-name": "train",
        }
        assert pod["spec"]["schedulerName"] == "phalanx" and pod["spec"]["restartPolicy"] == "Never"
    assert len(report.bound) == 3


def test_an_indexed_job_names_each_pod_after_its_index_and_sets_its_hostname() -> None:
    simulation, _ = simulate(([job("train", 2, 8, completionMode="Indexed")], None))
    by_index = {pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: pod
                for pod in pods(simulation.store).values()}  # fmt: skip
    assert sorted(by_index) == ["0", "1"]
    for index, pod in by_index.items():
        assert re.fullmatch(f"train-{index}-{SUFFIX}", pod["metadata"]["name"])
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"train-{index}"


def test_a_job_runs_its_completions_parallelism_at_a_time_as_pods_succeed() -> None:
    work = job("sweep", 2, 8, completions=5, completionMode="Indexed")
    work["spec"]["template"]["metadata"]["annotations"][RUN_SECONDS] = "600"
    simulation, report = simulate(([work], None), shape="blocks=1,racks=1,nodes=8,gpus=8")
    history = simulation.history.pods
    assert len(history) == 5 and len(report.bound) == 5
    assert all(pod["status"]["phase"] == "Succeeded" for pod in pods(simulation.store).values())
    starts = sorted(round(record.bound or 0) for record in history.values())
    assert starts == [1, 1, 601, 601, 1201]  # never more than 2 at once: each waits for one to succeed
    assert max(gpus for _, gpus in report.usage) == 16


def test_a_job_whose_pods_fail_is_retried_up_to_its_backoff_limit() -> None:
    work = job("flaky", 1, 8, backoffLimit=2)
    work["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 60
    simulation, report = simulate(([work], None))
    made = pods(simulation.store).values()
    assert len(made) == 3  # the first and two replacements; a third failure is more than the limit
    assert {pod["status"]["phase"] for pod in made} == {"Failed"}
    assert {pod["status"]["reason"] for pod in made} == {"DeadlineExceeded"}
    assert report.simulated_seconds == pytest.approx(180, abs=2)


def test_a_suspended_job_creates_nothing() -> None:
    simulation, report = simulate(([job("later", 2, 8, suspend=True)], None))
    assert pods(simulation.store) == {} and report.gangs == []


def test_a_job_the_api_server_would_refuse_is_one_line_naming_it() -> None:
    broken = job("train", 2, 8)
    broken["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    simulation = Simulation(Settings(levels=LEVELS))
    with pytest.raises(ManifestError) as refused:
        simulation.add_objects([broken], source="train.yaml")
    assert str(refused.value) == (
        "train.yaml: Job 'train': spec.template.spec.restartPolicy must be Never or OnFailure, "
        "as the API server requires"
    )


# -- JobSet -------------------------------------------------------------------------------------------


def jobset() -> Manifest:
    def replicated(name: str, replicas: int, pods: int, gpus: int) -> Manifest:
        spec = {"parallelism": pods, "completions": pods, "template": template(gpus, annotations=gang("pretrain", 6))}
        return {"name": name, "replicas": replicas, "template": {"spec": spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pretrain", "namespace": "ml"},
        "spec": {"replicatedJobs": [replicated("driver", 1, 2, 4), replicated("workers", 2, 2, 8)]},
    }


def test_a_jobset_makes_indexed_jobs_per_replicated_job_with_jobsets_labels_and_hostnames() -> None:
    simulation, report = simulate(([jobset()], None))
    made = pods(simulation.store)
    assert sorted(re.sub(f"-{SUFFIX}$", "", key) for key in made) == [
        "ml/pretrain-driver-0-0",
        "ml/pretrain-driver-0-1",
        "ml/pretrain-workers-0-0",
        "ml/pretrain-workers-0-1",
        "ml/pretrain-workers-1-0",
        "ml/pretrain-workers-1-1",
    ]
    worker = next(pod for key, pod in made.items() if key.startswith("ml/pretrain-workers-1-0-"))
    labels = worker["metadata"]["labels"]
    assert {key: labels[key] for key in labels if key.startswith("jobset.sigs.k8s.io/")} == {
        "jobset.sigs.k8s.io/jobset-name": "pretrain",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/global-replicas": "3",
        "jobset.sigs.k8s.io/job-index": "1",
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(b"ml/pretrain-workers-1").hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": "2",
        "jobset.sigs.k8s.io/jobset-uid": labels["jobset.sigs.k8s.io/jobset-uid"],
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "3",
        "jobset.sigs.k8s.io/job-group-index": "2",
    }
    assert worker["metadata"]["annotations"]["jobset.sigs.k8s.io/job-index"] == "1"  # also as annotations
    assert (worker["spec"]["hostname"], worker["spec"]["subdomain"]) == ("pretrain-workers-1-0", "pretrain")
    assert worker["spec"]["restartPolicy"] == "OnFailure"  # JobSet's webhook default
    assert controller_of(worker)["name"] == "pretrain-workers-1"
    (whole,) = report.gangs
    assert (whole.key, whole.state, whole.bound) == ("pfn:ml/pretrain", "Bound", 6)


def test_an_in_order_jobset_starts_a_replicated_job_once_the_one_before_is_ready() -> None:
    ordered = jobset()
    ordered["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    for replicated in ordered["spec"]["replicatedJobs"]:
        replicated["template"]["spec"]["template"]["metadata"]["annotations"] = {}  # gangs of one
    simulation, _ = simulate(([ordered], None))
    created = {key: record.created for key, record in simulation.history.pods.items()}
    drivers = [at for key, at in created.items() if "-driver-" in key]
    workers = [at for key, at in created.items() if "-workers-" in key]
    bound = [simulation.history.pods[key].bound for key in created if "-driver-" in key]
    assert len(drivers) == 2 and len(workers) == 4
    assert min(workers) >= max(at for at in bound if at is not None)


# -- LeaderWorkerSet ----------------------------------------------------------------------------------


def test_a_leaderworkerset_makes_a_leader_and_its_workers_per_group_with_lws_labels() -> None:
    simulation, report = simulate(([lws("llm", 2, 3, 8)], None), shape="blocks=1,racks=2,nodes=4,gpus=8")
    made = pods(simulation.store)
    assert sorted(made) == ["serving/llm-0", "serving/llm-0-1", "serving/llm-0-2", "serving/llm-1", "serving/llm-1-1",
                            "serving/llm-1-2"]  # fmt: skip
    leader, worker = made["serving/llm-1"], made["serving/llm-1-2"]
    group_key = hashlib.sha1(b"serving/llm-1").hexdigest()
    revision = leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"]
    assert leader["metadata"]["labels"] == {
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
        "leaderworkerset.sigs.k8s.io/name": "llm",
        "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
        "leaderworkerset.sigs.k8s.io/group-index": "1",
        "leaderworkerset.sigs.k8s.io/group-key": group_key,
        "controller-revision-hash": leader["metadata"]["labels"]["controller-revision-hash"],
        "statefulset.kubernetes.io/pod-name": "llm-1",
        "apps.kubernetes.io/pod-index": "1",
    }
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "2"
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"] == group_key
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == "llm-1"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "3"
    assert (controller_of(leader)["kind"], controller_of(leader)["name"]) == ("StatefulSet", "llm")
    assert (controller_of(worker)["kind"], controller_of(worker)["name"]) == ("StatefulSet", "llm-1")
    assert (worker["spec"]["hostname"], worker["spec"]["subdomain"]) == ("llm-1-2", "llm")
    env = {variable["name"]: variable["value"] for variable in worker["spec"]["containers"][0]["env"]}
    assert env == {"LWS_LEADER_ADDRESS": "llm-1.llm.serving", "LWS_GROUP_SIZE": "3", "LWS_WORKER_INDEX": "2"}
    # Gang scheduling (LWS's volcano provider): a Volcano PodGroup per group, every pod pointing at it.
    groups = {obj["metadata"]["name"]: obj for obj in simulation.store.objects(
        simulation.store.resource("scheduling.volcano.sh/v1beta1", "PodGroup"))}  # fmt: skip
    assert sorted(groups) == [f"llm-0-{revision}", f"llm-1-{revision}"]
    assert groups[f"llm-1-{revision}"]["spec"]["minMember"] == 3
    assert groups[f"llm-1-{revision}"]["spec"]["minResources"] == {"nvidia.com/gpu": "24"}
    assert controller_of(groups[f"llm-1-{revision}"])["name"] == "llm-1"
    assert worker["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == f"llm-1-{revision}"
    assert {(gang.key, gang.state, gang.bound) for gang in report.gangs} == {
        (f"volcano:serving/llm-0-{revision}", "Bound", 3),
        (f"volcano:serving/llm-1-{revision}", "Bound", 3),
    }


def test_without_controller_gangs_a_leaderworkerset_group_is_pods_placed_one_by_one() -> None:
    simulation, report = simulate(([lws("llm", 1, 3, 8)], None), controller_gangs=False)
    assert "scheduling.k8s.io/group-name" not in pods(simulation.store)["serving/llm-0-1"]["metadata"]["annotations"]
    assert {gang.key for gang in report.gangs} == {"pod:serving/llm-0", "pod:serving/llm-0-1", "pod:serving/llm-0-2"}


def test_a_leader_ready_leaderworkerset_makes_workers_only_once_its_leader_runs() -> None:
    simulation, _ = simulate(([lws("llm", 1, 3, 8, startupPolicy="LeaderReady")], None))
    history = simulation.history.pods
    assert history["serving/llm-0-1"].created >= (history["serving/llm-0"].bound or 0)
    (group,) = simulation.store.objects(simulation.store.resource("scheduling.volcano.sh/v1beta1", "PodGroup"))
    assert group["spec"]["minMember"] == 1  # as LWS writes it for LeaderReady


# -- Kubeflow -----------------------------------------------------------------------------------------


def pytorch_job(workers: int) -> Manifest:
    replica = {"restartPolicy": "OnFailure", "template": {"spec": pod_spec(8)}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {**replica, "replicas": 1}, "Worker": {**replica, "replicas": workers}}
        },
    }


def test_a_pytorchjob_makes_a_master_and_workers_and_the_operators_podgroup() -> None:
    simulation, report = simulate(([pytorch_job(3)], None))
    made = pods(simulation.store)
    assert sorted(made) == ["ml/bert-master-0", "ml/bert-worker-0", "ml/bert-worker-1", "ml/bert-worker-2"]
    assert made["ml/bert-master-0"]["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "bert",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
        "scheduling.x-k8s.io/pod-group": "bert",
    }
    assert "training.kubeflow.org/job-role" not in made["ml/bert-worker-0"]["metadata"]["labels"]
    assert controller_of(made["ml/bert-worker-2"])["kind"] == "PyTorchJob"
    (group,) = simulation.store.objects(simulation.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup"))
    assert (group["metadata"]["name"], group["spec"]["minMember"]) == ("bert", 4)
    assert [(gang.key, gang.state, gang.bound) for gang in report.gangs] == [("scheduler-plugins:ml/bert", "Bound", 4)]


def training_runtime() -> Manifest:
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.7",
                                                            "resources": {"limits": {"cpu": "4"}}}]}}},
        },
    }  # fmt: skip
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            "template": {"spec": {"replicatedJobs": [node]}},
        },
    }


def train_job(nodes: int) -> Manifest:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
        },
    }


def test_a_trainjob_becomes_its_runtimes_jobset_with_numnodes_pods_and_a_coscheduling_podgroup() -> None:
    simulation, report = simulate(([training_runtime(), train_job(3)], None))
    made = pods(simulation.store)
    assert sorted(re.sub(f"-{SUFFIX}$", "", key) for key in made) == [
        "ml/llama-node-0-0", "ml/llama-node-0-1", "ml/llama-node-0-2"]  # fmt: skip
    pod = next(iter(made.values()))
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "4", "nvidia.com/gpu": "8"}
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llama"
    assert pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "llama"
    (group,) = simulation.store.objects(simulation.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup"))
    assert (group["spec"]["minMember"], group["spec"]["scheduleTimeoutSeconds"]) == (3, 120)
    assert [(gang.key, gang.state, gang.bound) for gang in report.gangs] == [("scheduler-plugins:ml/llama", "Bound", 3)]


def test_a_trainjob_whose_runtime_is_not_given_says_to_add_it() -> None:
    with pytest.raises(ManifestError) as refused:
        Simulation(Settings(levels=LEVELS)).add_objects([train_job(2)], source="llama.yaml")
    assert str(refused.value).startswith(
        "llama.yaml: TrainJob 'llama': its runtime ClusterTrainingRuntime 'torch-distributed' is not in the workload"
    )


# -- Deployment and StatefulSet -----------------------------------------------------------------------


def apps(kind: str, replicas: int, **spec: Any) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "web", "namespace": "serving"},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec(2)},
            **spec,
        },
    }


def test_a_deployment_makes_its_replicaset_and_its_replicas() -> None:
    simulation, report = simulate(([apps("Deployment", 3)], None))
    made = pods(simulation.store)
    hashes = {pod["metadata"]["labels"]["pod-template-hash"] for pod in made.values()}
    (pod_hash,) = hashes
    assert re.fullmatch("[bcdfghjklmnpqrstvwxz2456789]{10}", pod_hash)
    assert all(re.fullmatch(f"serving/web-{pod_hash}-{SUFFIX}", key) for key in made) and len(made) == 3
    assert {controller_of(pod)["name"] for pod in made.values()} == {f"web-{pod_hash}"}
    assert {controller_of(pod)["kind"] for pod in made.values()} == {"ReplicaSet"}
    assert len(report.bound) == 3


def test_a_statefulset_creates_ordinals_in_order_once_each_is_ready() -> None:
    simulation, _ = simulate(([apps("StatefulSet", 3, serviceName="web")], None))
    history = simulation.history.pods
    assert sorted(history) == ["serving/web-0", "serving/web-1", "serving/web-2"]
    assert history["serving/web-1"].created >= (history["serving/web-0"].bound or 0)
    web1 = pods(simulation.store)["serving/web-1"]
    assert web1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "web-1"
    assert web1["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    assert web1["metadata"]["labels"]["controller-revision-hash"].startswith("web-")
    assert (web1["spec"]["hostname"], web1["spec"]["subdomain"]) == ("web-1", "web")


def test_an_ordered_statefulset_as_one_gang_waits_for_ever_and_a_parallel_one_binds() -> None:
    """The trap a simulation should show before a cluster does: OrderedReady makes ordinal 1 only once 0
    runs, and a gang of 3 never lets 0 run alone."""
    ordered = apps("StatefulSet", 3)
    ordered["spec"]["template"]["metadata"]["annotations"] = gang("web", 3)
    _, report = simulate(([ordered], None))
    (stuck,) = report.gangs
    assert (stuck.state, stuck.bound) == ("Pending", 0)
    assert "member(s) that do not exist yet" in report.pending["serving/web-0"]
    parallel = copy.deepcopy(ordered)
    parallel["spec"]["podManagementPolicy"] = "Parallel"
    _, report = simulate(([parallel], None))
    assert [(gang.state, gang.bound) for gang in report.gangs] == [("Bound", 3)]


# -- the same as bare pods ----------------------------------------------------------------------------


def bare_equivalents(kind: str) -> tuple[list[Manifest], list[Manifest]]:
    """A workload of ``kind`` and the bare pods and group objects its controller makes, by hand."""
    if kind == "Job":
        annotations = gang("train", 4, **{RACK: "example.com/rack"})
        return [job("train", 4, 8, namespace="ml", annotations=annotations)], [
            bare_pod("ml", f"train-{i}", 8, annotations=annotations, restartPolicy="Never") for i in range(4)
        ]
    if kind == "JobSet":
        annotations = gang("pretrain", 6)
        shapes = [("driver-0", 4)] * 2 + [("workers-0", 8)] * 2 + [("workers-1", 8)] * 2
        return [jobset()], [
            bare_pod("ml", f"pretrain-{job}-{i}", gpus, annotations=annotations, restartPolicy="OnFailure")
            for i, (job, gpus) in enumerate(shapes)
        ]
    if kind == "TrainJob":
        coscheduling = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": "llama", "namespace": "ml"}, "spec": {"minMember": 3}}  # fmt: skip
        labels = {"scheduling.x-k8s.io/pod-group": "llama"}
        trainer = pod_spec(8, restartPolicy="OnFailure")
        trainer["containers"][0]["resources"]["limits"]["cpu"] = "4"
        return [training_runtime(), train_job(3)], [
            coscheduling,
            *({**bare_pod("ml", f"llama-{i}", 8, labels=labels), "spec": trainer} for i in range(3)),
        ]
    if kind == "Deployment":
        return [apps("Deployment", 3)], [bare_pod("serving", f"web-{i}", 2) for i in range(3)]
    if kind == "LeaderWorkerSet":
        groups: list[Manifest] = []
        for group in range(2):
            metadata = {"name": f"llm-{group}", "namespace": "serving"}
            groups.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": metadata,
                           "spec": {"minMember": 3}})  # fmt: skip
            annotations = {"scheduling.k8s.io/group-name": f"llm-{group}"}
            groups += [bare_pod("serving", f"llm-{group}-{i}", 8, annotations=annotations) for i in range(3)]
        return [lws("llm", 2, 3, 8)], groups
    assert kind == "PyTorchJob"
    plugins_group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                     "metadata": {"name": "bert", "namespace": "ml"}, "spec": {"minMember": 4}}  # fmt: skip
    labels = {"scheduling.x-k8s.io/pod-group": "bert"}
    return [pytorch_job(3)], [plugins_group, *(bare_pod("ml", f"bert-{i}", 8, labels=labels) for i in range(4))]


@pytest.mark.parametrize("kind", ["Job", "JobSet", "LeaderWorkerSet", "PyTorchJob", "TrainJob", "Deployment"])
def test_pods_a_controller_makes_bind_where_the_equivalent_bare_pods_bind(kind: str) -> None:
    busy = [bare_pod("other", f"busy-{i}", 8, nodeName=f"b0-r0-n{i}") for i in range(3)]  # rack b0-r0 is mostly full
    workload, equivalent = bare_equivalents(kind)
    _, expanded = simulate((busy, None), (workload, 0.0))
    _, by_hand = simulate((busy, None), (equivalent, 0.0))
    assert nodes_of(expanded.bound) == nodes_of(by_hand.bound) and len(expanded.bound) > 0
    assert [(gang.state, gang.bound, gang.min) for gang in expanded.gangs] == [
        (gang.state, gang.bound, gang.min) for gang in by_hand.gangs
    ]


def test_a_leaderworkerset_of_single_pod_groups_gets_its_podgroups_and_binds() -> None:
    simulation, report = simulate(([lws("llm", 2, 1, 8)], None))
    groups = list(simulation.store.objects(simulation.store.resource("scheduling.volcano.sh/v1beta1", "PodGroup")))
    assert len(groups) == 2 and {group["spec"]["minMember"] for group in groups} == {1}
    assert sorted(report.bound) == ["serving/llm-0", "serving/llm-1"]


def test_leaderworkerset_subgroups_follow_lws_numbering() -> None:
    grouped = lws("llm", 1, 3, 8)
    grouped["spec"]["leaderWorkerTemplate"]["subGroupPolicy"] = {"subGroupSize": 1}
    simulation, _ = simulate(([grouped], None))
    index = {key: pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/subgroup-index"]
             for key, pod in pods(simulation.store).items()}  # fmt: skip
    assert index == {"serving/llm-0": "0", "serving/llm-0-1": "1", "serving/llm-0-2": "2"}


def test_a_parallel_statefulset_binds_where_its_bare_pods_bind() -> None:
    parallel = apps("StatefulSet", 3, podManagementPolicy="Parallel")
    _, expanded = simulate(([parallel], 0.0))
    _, by_hand = simulate(([bare_pod("serving", f"web-{i}", 2) for i in range(3)], 0.0))
    assert nodes_of(expanded.bound) == nodes_of(by_hand.bound) and len(expanded.bound) == 3


def broken(path: str, value: object) -> Manifest:
    """A well-formed workload with one field of the wrong shape."""
    objects: dict[str, Manifest] = {"job": job("train", 2, 8), "jobset": jobset(), "lws": lws("llm", 1, 2, 8)}
    kind, *fields = path.split(".")
    obj = copy.deepcopy(objects[kind])
    target: Any = obj
    for field in fields[:-1]:
        target = target[int(field)] if field.isdigit() else target[field]
    target[fields[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("jobset.spec.replicatedJobs.0.template.spec", "x",
         "replicated job 'driver': template.spec.template is required"),
        ("job.spec.template.metadata", "oops", "Job 'train': spec.template.metadata must be an object"),
        ("job.spec.template.metadata.labels", ["a"], "spec.template.metadata.labels must map names to strings"),
        ("lws.spec.leaderWorkerTemplate.workerTemplate.metadata", {"annotations": 5},
         "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations must map names to strings"),
        ("job.spec.template.spec.containers", "main", "spec.template.spec.containers is required (a list"),
        ("lws.spec.replicas", "two", "LeaderWorkerSet 'llm': replicas must be a whole number of at least 0, got 'two'"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_shape_is_one_line_naming_it(path: str, value: object, message: str) -> None:
    with pytest.raises(ManifestError) as refused:
        Simulation(Settings(levels=LEVELS)).add_objects([broken(path, value)], at=60, source="w.yaml")
    assert str(refused.value).startswith("w.yaml: ") and message in str(refused.value)


# -- the group objects controllers make count as any other ------------------------------------------


def test_a_pytorchjob_that_waited_too_long_reserves_its_room_despite_its_min_resources() -> None:
    """The operator's PodGroup declares minResources; more than is free must not stop the reservation
    of a gang that has waited too long (it used to fail fast, for ever, and small jobs went ahead)."""
    running = job("small", 1, 2, annotations={RUN_SECONDS: "3600"})
    later = [bare_pod("team", "notebook", 2)]
    _, report = simulate(([running], None), ([pytorch_job(1)], 60.0), (later, 900.0),
                         shape="blocks=1,racks=1,nodes=2,gpus=8")  # fmt: skip
    gangs = {gang.key: gang for gang in report.gangs}
    assert gangs["scheduler-plugins:ml/bert"].bound_at == pytest.approx(3601, abs=2)  # when the small Job ended
    # Held back from the reserved nodes when it came, and no room left once the gang bound.
    assert (gangs["pod:team/notebook"].state, gangs["pod:team/notebook"].bound_at) == ("Pending", None)


def test_a_pytorchjob_of_higher_priority_preempts_despite_its_min_resources() -> None:
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("low", 1), ("high", 1000))]  # fmt: skip
    squatters = [bare_pod("team", f"squat-{i}", 8, priorityClassName="low") for i in range(2)]
    urgent = pytorch_job(1)
    for replica in urgent["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["priorityClassName"] = "high"
    _, report = simulate((classes + squatters, None), ([urgent], 60.0), shape="blocks=1,racks=1,nodes=2,gpus=8")
    assert sorted(report.preempted) == ["team/squat-0", "team/squat-1"]
    assert {gang.key: gang.state for gang in report.gangs}["scheduler-plugins:ml/bert"] == "Bound"


def test_a_replicated_job_that_depends_on_another_starts_once_that_one_is_complete() -> None:
    staged = jobset()
    driver, workers = staged["spec"]["replicatedJobs"]
    driver["template"]["spec"]["template"]["metadata"]["annotations"] = {RUN_SECONDS: "600"}  # no gang
    driver["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    workers["template"]["spec"]["template"]["metadata"]["annotations"] = {}
    workers["dependsOn"] = [{"name": "driver", "status": "Complete"}]
    simulation, _ = simulate(([staged], None))
    created = {key: record.created for key, record in simulation.history.pods.items()}
    assert max(at for key, at in created.items() if "-driver-" in key) < 10
    assert min(at for key, at in created.items() if "-workers-" in key) == pytest.approx(601, abs=1)
    with pytest.raises(ManifestError, match="dependsOn entries need the name of an earlier replicated job"):
        workers["dependsOn"] = [{"name": "nobody", "status": "Complete"}]
        Simulation(Settings(levels=LEVELS)).add_objects([staged])


def test_a_group_declaring_more_than_the_cluster_has_preempts_nothing_and_waits_for_nodes() -> None:
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("low", 1), ("high", 1000))]  # fmt: skip
    squatters = [bare_pod("team", f"squat-{i}", 8, priorityClassName="low") for i in range(2)]
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "greedy", "namespace": "ml"},
             "spec": {"minMember": 2, "minResources": {"nvidia.com/gpu": "64"}}}  # fmt: skip
    members = [bare_pod("ml", f"greedy-{i}", 8, labels={"scheduling.x-k8s.io/pod-group": "greedy"},
                        priorityClassName="high") for i in range(2)]  # fmt: skip
    _, report = simulate(
        (classes + squatters, None), ([group, *members], 60.0), shape="blocks=1,racks=1,nodes=2,gpus=8"
    )
    assert report.preempted == {}
    assert report.pending["ml/greedy-0"].endswith(
        "declares minResources more than the cluster's nodes have: nvidia.com/gpu 64 (allocatable: 16); "
        "it waits for more nodes."
    )


@pytest.mark.parametrize("ignored", [False, True])
def test_a_preempted_job_fails_by_its_backoff_limit_unless_its_pod_failure_policy_ignores_disruption(
    ignored: bool,
) -> None:
    """Issue 25: preempting a Job's pods counted against its backoffLimit and failed the Job for good.
    Kubernetes' answer is podFailurePolicy's Ignore on the DisruptionTarget condition Phalanx sets."""
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("low", 1), ("high", 1000))]  # fmt: skip
    batch = job("batch", 2, 8, backoffLimit=0)
    batch["spec"]["template"]["spec"]["priorityClassName"] = "low"
    if ignored:
        rule = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
        batch["spec"]["podFailurePolicy"] = {"rules": [rule]}
    urgent = job("urgent", 2, 8, annotations=gang("urgent", 2))
    urgent["spec"]["template"]["spec"]["priorityClassName"] = "high"
    urgent["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 600
    simulation, report = simulate(([*classes, batch], None), ([urgent], 60.0), shape="blocks=1,racks=1,nodes=2,gpus=8")
    assert len(report.preempted) == 2
    left = [pod for key, pod in pods(simulation.store).items() if key.startswith("ml/batch-")]
    # Ignored: the Job replaced both pods, which ran once the urgent Job was done; counted: it failed, and
    # nothing replaced them.
    assert [pod["status"].get("phase") for pod in left] == (["Running", "Running"] if ignored else [])
