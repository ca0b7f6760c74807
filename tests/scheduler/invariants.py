"""The invariants every scenario ends with, checked from the API objects alone.

- no node's bound pods request more than its allocatable, for any resource;
- no gang is bound below its minimum, unless the test says a user deleted members;
- Phalanx bound no pod of another scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.gangs import GangIndex, GangSettings, GangSpec
from tests.scheduler.support import Cluster
from topology import node_record, pod_requests


def check_invariants(where: Cluster, *, foreign_bound: Iterable[str] = (), user_deleted: bool = False) -> None:
    store = where.store
    nodes = {n["metadata"]["name"]: node_record(n) for n in store.objects(store.resource("v1", "Node"))}
    used: dict[str, dict[str, int]] = {}
    pods = where.pods()
    for pod in pods.values():
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for name, amount in pod_requests(pod).items():
            used.setdefault(node, {})[name] = used.setdefault(node, {}).get(name, 0) + amount
    for node, requests in used.items():
        record = nodes.get(node)
        assert record is not None, f"pods bound to unknown node {node}"
        for name, amount in requests.items():
            assert amount <= record.allocatable.get(name, 0), (
                f"node {node} over-committed: {name} {amount} > {record.allocatable.get(name, 0)}"
            )
    allowed_foreign = set(foreign_bound)
    for key, pod in pods.items():
        spec = pod.get("spec") or {}
        if spec.get("schedulerName") != "phalanx" and spec.get("nodeName"):
            assert key in allowed_foreign, f"pod {key} of scheduler {spec.get('schedulerName')} was bound"
    if user_deleted:
        return
    index = GangIndex(GangSettings(levels=("example.com/block", "example.com/rack", "kubernetes.io/hostname")))
    for pod in pods.values():
        index.upsert_pod(pod)
    for resource in store.catalog.resources:
        if resource.kind in ("PodGroup", "CompositePodGroup", "Workload"):
            for obj in store.objects(resource):
                index.upsert_group(obj)
    index.take_changed()
    for key, result in index.results().items():
        if not isinstance(result, GangSpec):
            continue
        for part in result.request.walk():
            bound = sum(1 for member in part.members() if member.node)
            if part.is_leaf and bound and bound < part.min_pods:
                raise AssertionError(
                    f"gang {key}: part {part.key} has {bound} bound, below its minimum {part.min_pods}"
                )
