"""The embedded default of ``phalanx simulate``: a small GPU cluster and a workload in every input format.

The cluster is 2 blocks x 4 racks x 8 nodes of 8 GPUs. The workload, in arrival order:

- ``team-a/pretrain``: PFN annotations, 12 pods of 8 GPUs that must share one block;
- ``team-b/etl``: a scheduler-plugins PodGroup, minMember 3 of 5 pods of 4 GPUs;
- ``serving/llm``: a Volcano PodGroup as Kthena builds it for prefill/decode: prefill and decode
  replicas of 2 pods, each replica in one rack, at least 2 prefill and 1 decode replica;
- ``ml/finetune``: a ``scheduling.k8s.io/v1beta1`` Workload and PodGroup, 4 pods in one rack;
- ``serving/chat``: Phalanx's CompositePodGroup, one block, prefill and decode replicas of 4 pods per
  rack, at least one of each;
- ``team-g/sweep``: a ``batch/v1`` Job, Indexed, 4 pods of 8 GPUs in one rack (PFN annotations on its
  template), whose pods run for 30 minutes and then succeed;
- ``serving/assistant``: a LeaderWorkerSet of 2 groups (a leader and 3 workers of 4 GPUs each); LWS's
  gang scheduling makes a PodGroup per group;
- ``team-d``: two plain pods (gangs of one);
- ``team-e/broken``: a PFN gang whose size is not a number (stays pending, says what to fix);
- ``team-f/huge``: 40 pods of 8 GPUs in one block of 32 nodes (stays pending, says why).

Built in code rather than read from ``examples/`` so that the installed package carries it.
"""

from __future__ import annotations

from typing import Any

from scheduler.ports.sim.builders import ClusterShape

Manifest = dict[str, Any]

BLOCK = "example.com/block"
RACK = "example.com/rack"
PFN = "gang-scheduling.preferred.jp/gang"
REQUIRED = "scheduling.phalanx.dev/topology-required"


def default_cluster() -> list[Manifest]:
    return ClusterShape(blocks=2, racks=4, nodes=8, gpus=8).node_manifests()


def pod(
    namespace: str,
    name: str,
    gpus: int,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **spec: Any,
) -> Manifest:
    """A pod of Phalanx's; its limits default to ``gpus`` GPUs with 2 cores and 16Gi per GPU."""
    if limits is None:
        limits = {"nvidia.com/gpu": str(gpus), "cpu": str(2 * gpus), "memory": f"{16 * gpus}Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {
            "schedulerName": "phalanx",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": {"limits": limits}}],
            **spec,
        },
    }


def pfn_gang(
    namespace: str, name: str, count: int, gpus: int, *, size: str | None = None, **extra: str
) -> list[Manifest]:
    annotations = {f"{PFN}-name": name, f"{PFN}-size": size or str(count), **extra}
    return [pod(namespace, f"{name}-{i}", gpus, annotations=annotations) for i in range(count)]


def plugins_group(namespace: str, name: str, min_member: int, count: int, gpus: int) -> list[Manifest]:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }
    label = {"scheduling.x-k8s.io/pod-group": name}
    return [group] + [pod(namespace, f"{name}-{i}", gpus, labels=label) for i in range(count)]


def volcano_prefill_decode(namespace: str, name: str) -> list[Manifest]:
    """Kthena's ModelServing as a Volcano PodGroup: a subgroup policy per role, a subgroup per replica."""

    def policy(role: str, minimum: int) -> Manifest:
        return {
            "name": role,
            "labelSelector": {
                "matchLabels": {"modelserving.volcano.sh/name": name, "modelserving.volcano.sh/role": role}
            },
            "matchLabelKeys": ["modelserving.volcano.sh/role-id"],
            "minSubGroups": minimum,
            "subGroupSize": 2,
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        }

    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 6, "queue": "default", "subGroupPolicy": [policy("prefill", 2), policy("decode", 1)]},
    }
    pods = []
    for role, replicas, gpus in (("prefill", 3, 4), ("decode", 2, 8)):
        for replica in range(replicas):
            labels = {
                "modelserving.volcano.sh/name": name,
                "modelserving.volcano.sh/role": role,
                "modelserving.volcano.sh/role-id": f"{role}-{replica}",
            }
            annotations = {"scheduling.k8s.io/group-name": name}
            pods += [
                pod(namespace, f"{name}-{role}-{replica}-{i}", gpus, labels=labels, annotations=annotations)
                for i in range(2)
            ]
    return [group, *pods]


def kubernetes_podgroup(namespace: str, name: str, count: int, gpus: int) -> list[Manifest]:
    """A Kubernetes 1.37 Workload and the PodGroup made from its template, with a rack constraint."""
    policy = {"gang": {"minCount": count}}
    constraints = {"topology": [{"key": RACK}]}
    workload = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy, "schedulingConstraints": constraints}]
        },
    }
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": f"{name}-workers-0", "namespace": namespace},
        "spec": {
            "workloadRef": {"workloadName": name, "templateName": "workers"},
            "schedulingPolicy": policy,
            "schedulingConstraints": constraints,
        },
    }
    member = {"schedulingGroup": {"podGroupName": f"{name}-workers-0"}}
    return [workload, group] + [pod(namespace, f"{name}-{i}", gpus, **member) for i in range(count)]


def composite_service(namespace: str, name: str) -> list[Manifest]:
    """Phalanx's CompositePodGroup: one block; prefill and decode roles of rack-local 4-pod replicas."""

    def composite(composite_name: str, minimum: int, parent: str | None = None, **spec: Any) -> Manifest:
        body: dict[str, Any] = {"schedulingPolicy": {"gang": {"minGroupCount": minimum}}, **spec}
        if parent:
            body["parentCompositePodGroupName"] = parent
        return {
            "apiVersion": "scheduling.phalanx.dev/v1alpha1",
            "kind": "CompositePodGroup",
            "metadata": {"name": composite_name, "namespace": namespace},
            "spec": body,
        }

    objects = [composite(name, 2, schedulingConstraints={"topology": [{"key": BLOCK}]})]
    for role, replicas in (("prefill", 2), ("decode", 1)):
        objects.append(composite(f"{name}-{role}", 1, parent=name))
        for replica in range(replicas):
            group_name = f"{name}-{role}-{replica}"
            objects.append(
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": group_name,
                        "namespace": namespace,
                        "annotations": {"scheduling.phalanx.dev/parent": f"{name}-{role}", REQUIRED: RACK},
                    },
                    "spec": {"minMember": 4},
                }
            )
            label = {"scheduling.x-k8s.io/pod-group": group_name}
            objects += [pod(namespace, f"{group_name}-{i}", 8, labels=label) for i in range(4)]
    return objects


def indexed_job(namespace: str, name: str, pods: int, gpus: int, run_seconds: int) -> Manifest:
    """A Job whose pods form one PFN gang in one rack, each running ``run_seconds`` and succeeding."""
    annotations = {
        f"{PFN}-name": name,
        f"{PFN}-size": str(pods),
        REQUIRED: RACK,
        "simulate.phalanx.dev/run-seconds": str(run_seconds),
    }
    template = pod(namespace, name, gpus, annotations=annotations, restartPolicy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": {"metadata": {"annotations": annotations}, "spec": template["spec"]},
        },
    }


def leader_worker_set(namespace: str, name: str, groups: int, size: int, gpus: int) -> Manifest:
    template = pod(namespace, name, gpus)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": template["spec"]}},
        },
    }


def default_workload() -> list[Manifest]:
    """Every input format, one invalid gang and one that cannot fit (see the module docstring)."""
    return [
        *pfn_gang("team-a", "pretrain", 12, 8, **{REQUIRED: BLOCK}),
        *plugins_group("team-b", "etl", 3, 5, 4),
        *volcano_prefill_decode("serving", "llm"),
        *kubernetes_podgroup("ml", "finetune", 4, 8),
        *composite_service("serving", "chat"),
        indexed_job("team-g", "sweep", 4, 8, 1800),
        leader_worker_set("serving", "assistant", 2, 4, 4),
        pod("team-d", "notebook", 1),
        pod("team-d", "profiler", 2),
        *pfn_gang("team-e", "broken", 2, 1, size="two"),
        *pfn_gang("team-f", "huge", 40, 8, **{REQUIRED: BLOCK}),
    ]
