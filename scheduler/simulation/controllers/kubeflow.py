"""Kubeflow's training jobs: ``kubeflow.org/v1`` PyTorchJob (training-operator 1.9) and
``trainer.kubeflow.org/v1alpha1`` TrainJob (Trainer v2).

PyTorchJob: pods ``<job>-master-0`` and ``<job>-worker-<i>`` (``replicas`` of each, 1 by default) with the
operator's ``training.kubeflow.org/*`` labels. With gang scheduling on (the operator's
``--gang-scheduler-name`` set to a scheduler other than volcano, as for Phalanx; ``phalanx simulate``
assumes it unless told ``--controller-gangs off``) it first creates a scheduler-plugins PodGroup named
after the job, ``minMember`` every replica (or ``runPolicy.schedulingPolicy.minAvailable``), and labels
every pod ``scheduling.x-k8s.io/pod-group``. Pods are not made again when they fail.

TrainJob: its runtime (a ClusterTrainingRuntime or TrainingRuntime, which must be in a workload file
given no later than the TrainJob) holds a JobSet template; the TrainJob becomes that JobSet, named after
it, with the trainer's replicated job (labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``,
else the one named ``node``) running ``trainer.numNodes`` pods whose ``node`` container gets
``trainer.resourcesPerNode``. The runtime's ``podGroupPolicy`` decides the gang: ``coscheduling`` is a
scheduler-plugins PodGroup named after the TrainJob with every pod as ``minMember``; ``volcano`` the same
as a Volcano PodGroup.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.gangs.pods import SCHEDULER_PLUGINS_LABEL, VOLCANO_GROUP_ANNOTATION
from scheduler.simulation.controllers.base import (
    Api,
    Controller,
    Manifest,
    WorkloadError,
    count,
    describe,
    mapping,
    min_resources,
    name_of,
    owner,
    pod_from,
    template_of,
)
from scheduler.simulation.controllers.jobset import JobSetController

OPERATOR = "training.kubeflow.org/"
TRAINER = "trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


class PyTorchJobController(Controller):
    kind = "PyTorchJob"

    def __init__(self, job: Manifest, *, api: Api, gangs: bool) -> None:
        self.where = describe(job)
        self.namespace, self.name = name_of(job)
        self.uid = api.uid()
        self.gangs = gangs
        self.annotations = dict((job.get("metadata") or {}).get("annotations") or {})
        spec = mapping(job, "spec", where=self.where, required=True)
        given = mapping(spec, "pytorchReplicaSpecs", where=self.where, required=True)
        self.replicas: dict[str, tuple[int, Manifest]] = {}
        for key, replica in given.items():
            kind = str(key).capitalize()  # the operator's defaulting accepts "worker", "WORKER"
            if kind not in ("Master", "Worker") or not isinstance(replica, Mapping):
                raise WorkloadError(
                    f"{self.where}: spec.pytorchReplicaSpecs has {key!r}; a PyTorchJob has Master and Worker"
                )
            inside = f"{self.where} {kind}"
            template = template_of(
                replica, "template", where=self.where, field=f"spec.pytorchReplicaSpecs.{key}.template"
            )
            policy = str(replica.get("restartPolicy", "OnFailure"))
            template["spec"] = {**template["spec"], "restartPolicy": "Never" if policy == "ExitCode" else policy}
            self.replicas[kind] = (count(replica, "replicas", where=inside, default=1) or 0, template)
        if not self.replicas:
            raise WorkloadError(f"{self.where}: spec.pytorchReplicaSpecs names no Master or Worker")
        scheduling = mapping(mapping(spec, "runPolicy", where=self.where), "schedulingPolicy", where=self.where)
        total = sum(replicas for replicas, _ in self.replicas.values())
        self.min_member = count(scheduling, "minAvailable", where=self.where, default=total) or total
        self.timeout = count(scheduling, "scheduleTimeoutSeconds", where=self.where, default=None)

    def start(self, api: Api) -> None:
        if self.gangs:
            self._pod_group(api)
        for kind in ("Master", "Worker"):
            replicas, template = self.replicas.get(kind, (0, {}))
            for index in range(replicas):
                labels = {
                    f"{OPERATOR}operator-name": "pytorchjob-controller",
                    f"{OPERATOR}job-name": self.name.replace("/", "-"),
                    f"{OPERATOR}replica-type": kind.lower(),
                    f"{OPERATOR}replica-index": str(index),
                }
                if kind == "Master":
                    labels[f"{OPERATOR}job-role"] = "master"
                if self.gangs:
                    labels[SCHEDULER_PLUGINS_LABEL] = self.name
                name = f"{self.name}-{kind.lower()}-{index}"
                api.create(
                    pod_from(
                        api,
                        template,
                        namespace=self.namespace,
                        name=name,
                        labels=labels,
                        owned_by=owner("kubeflow.org/v1", "PyTorchJob", self.name, self.uid),
                    )
                )

    def _pod_group(self, api: Api) -> None:
        """The scheduler-plugins PodGroup the operator creates before the pods."""
        pods, left = [], self.min_member
        for kind in ("Master", "Worker"):
            replicas, template = self.replicas.get(kind, (0, {}))
            pods.append((template, min(replicas, left)))
            left -= min(replicas, left)
        spec: dict[str, Any] = {"minMember": self.min_member, "minResources": min_resources(pods)}
        if self.timeout is not None:
            spec["scheduleTimeoutSeconds"] = self.timeout
        api.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "annotations": self.annotations,
                    "ownerReferences": [owner("kubeflow.org/v1", "PyTorchJob", self.name, self.uid)],
                },
                "spec": spec,
            }
        )


class Runtimes:
    """The training runtimes the workload declared, for the TrainJobs that name them."""

    def __init__(self) -> None:
        self._runtimes: dict[tuple[str, str | None, str], Manifest] = {}

    def add(self, runtime: Manifest) -> None:
        metadata = runtime.get("metadata") or {}
        namespace = None if runtime["kind"] == "ClusterTrainingRuntime" else str(metadata.get("namespace") or "default")
        self._runtimes[(str(runtime["kind"]), namespace, str(metadata.get("name", "")))] = runtime

    def find(self, kind: str, namespace: str, name: str) -> Manifest | None:
        return self._runtimes.get((kind, None if kind == "ClusterTrainingRuntime" else namespace, name))


class TrainJobController(Controller):
    kind = "TrainJob"

    def __init__(self, train_job: Manifest, *, api: Api, runtimes: Runtimes) -> None:
        where = describe(train_job)
        self.namespace, self.name = name_of(train_job)
        self.uid = api.uid()
        spec = mapping(train_job, "spec", where=where, required=True)
        reference = mapping(spec, "runtimeRef", where=where, required=True)
        kind = str(reference.get("kind") or "ClusterTrainingRuntime")
        runtime = runtimes.find(kind, self.namespace, str(reference.get("name", "")))
        if kind not in RUNTIME_KINDS or runtime is None:
            raise WorkloadError(
                f"{where}: its runtime {kind} {reference.get('name')!r} is not in the workload; add the runtime's "
                "manifest to a --workload file given before this one (or to the same file), so its pods can be known"
            )
        runtime_spec = mapping(runtime, "spec", where=describe(runtime), required=True)
        template = mapping(runtime_spec, "template", where=describe(runtime), required=True)
        jobset_spec = copy.deepcopy(dict(mapping(template, "spec", where=describe(runtime), required=True)))
        trainer = mapping(spec, "trainer", where=where)
        policy = mapping(runtime_spec, "mlPolicy", where=describe(runtime))
        nodes = count(trainer, "numNodes", where=where, default=None) or count(
            policy, "numNodes", where=describe(runtime), default=1
        )
        _shape_trainer(jobset_spec, nodes or 1, trainer, where)
        group_policy = mapping(runtime_spec, "podGroupPolicy", where=describe(runtime))
        self.group_kind = (
            "coscheduling" if "coscheduling" in group_policy else "volcano" if "volcano" in group_policy else None
        )
        self.timeout = count(
            mapping(group_policy, "coscheduling", where=describe(runtime)),
            "scheduleTimeoutSeconds",
            where=where,
            default=60,
        )
        if self.group_kind is not None:
            for replicated in jobset_spec.get("replicatedJobs") or []:
                pod = _pod_template(replicated)
                key = "labels" if self.group_kind == "coscheduling" else "annotations"
                group_key = SCHEDULER_PLUGINS_LABEL if self.group_kind == "coscheduling" else VOLCANO_GROUP_ANNOTATION
                pod["metadata"] = {
                    **pod.get("metadata", {}),
                    key: {**(pod.get("metadata", {}).get(key) or {}), group_key: self.name},
                }
        if spec.get("suspend"):
            jobset_spec["suspend"] = True
        self.jobset = JobSetController(
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {**dict(template.get("metadata") or {}), "name": self.name, "namespace": self.namespace},
                "spec": jobset_spec,
            },
            api=api,
        )

    def children(self) -> Iterable[Controller]:
        return (self.jobset,)

    def start(self, api: Api) -> None:
        if self.group_kind is not None:
            self._pod_group(api)
        self.jobset.start(api)

    def _pod_group(self, api: Api) -> None:
        jobs = self.jobset.jobs()
        members = sum(job.parallelism for job in jobs)
        spec: dict[str, Any] = {
            "minMember": members,
            "minResources": min_resources((job.template, job.parallelism) for job in jobs),
        }
        if self.group_kind == "coscheduling":
            api_version = "scheduling.x-k8s.io/v1alpha1"
            spec["scheduleTimeoutSeconds"] = self.timeout
        else:
            api_version = "scheduling.volcano.sh/v1beta1"
        api.create(
            {
                "apiVersion": api_version,
                "kind": "PodGroup",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "ownerReferences": [owner(TRAINER, "TrainJob", self.name, self.uid)],
                },
                "spec": spec,
            }
        )


def _pod_template(replicated: dict[str, Any]) -> dict[str, Any]:
    job = replicated.setdefault("template", {})
    job_spec = job.setdefault("spec", {})
    return job_spec.setdefault("template", {})  # type: ignore[no-any-return]


def _shape_trainer(jobset_spec: dict[str, Any], nodes: int, trainer: Mapping[str, Any], where: str) -> None:
    """The trainer's replicated job runs ``nodes`` pods; its ``node`` container takes the TrainJob's
    resources (merged over the runtime's, as Trainer 2.3 does), image, command and arguments."""
    replicated = [entry for entry in jobset_spec.get("replicatedJobs") or [] if isinstance(entry, dict)]
    step = next(
        (
            entry
            for entry in replicated
            if ((entry.get("template") or {}).get("metadata") or {}).get("labels", {}).get(ANCESTOR) == "trainer"
        ),
        next((entry for entry in replicated if entry.get("name") == "node"), None),
    )
    if step is None:
        raise WorkloadError(
            f"{where}: its runtime has no trainer step (a replicated job labelled {ANCESTOR}: trainer, or named node)"
        )
    step["replicas"] = 1
    job_spec = step.setdefault("template", {}).setdefault("spec", {})
    job_spec["parallelism"] = job_spec["completions"] = nodes
    pod_spec = _pod_template(step).setdefault("spec", {})
    resources = mapping(trainer, "resourcesPerNode", where=where)
    overrides = {key: trainer[key] for key in ("image", "command", "args") if key in trainer}
    containers = []
    for container in pod_spec.get("containers") or []:
        if not isinstance(container, Mapping) or container.get("name") != "node":
            containers.append(container)
            continue
        merged = dict(container.get("resources") or {})
        for part in ("requests", "limits"):
            if isinstance(resources.get(part), Mapping):
                merged[part] = {**(merged.get(part) or {}), **resources[part]}
        containers.append({**container, **overrides, "resources": merged})
    pod_spec["containers"] = containers
