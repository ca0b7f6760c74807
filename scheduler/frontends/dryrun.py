"""``phalanx dry-run``: what Phalanx would do on a real cluster now, without writing to it.

The cluster's nodes, pods and group objects are read through a connection that refuses every write
before it is sent (:meth:`Connection.reading_only`), copied into a SimCluster, and one pass of the real
scheduler runs there: every pending gang is tried once, in queue order, each seeing the room the ones before it took.
No virtual time passes, so held room does not time out. The report covers the gangs that had a
pending member when the cluster was read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.app import WATCHABLE_GROUPS, choose_resources
from scheduler.ports.kube import KubeCluster, connect
from scheduler.ports.port import ClusterPort
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.report import Report

_FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class ClusterCopy:
    """What was read: the server's address, the objects, and the optional APIs it does not serve."""

    server: str
    nodes: list[dict[str, Any]]
    objects: list[dict[str, Any]]
    missing: list[str]


async def read_real_cluster(kubeconfig: str | None, context: str | None) -> ClusterCopy:
    connection = (await connect(kubeconfig, context)).reading_only()
    port = KubeCluster(connection)
    try:
        nodes, objects, missing = await read_cluster(port)
    finally:
        await port.close()
    return ClusterCopy(connection.host, nodes, objects, missing)


def _pending(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") not in _FINISHED


def claim_pending(objects: list[dict[str, Any]], scheduler_name: str) -> list[dict[str, Any]]:
    """``--all-schedulers``: every pending pod, whatever scheduler it names, as if it were Phalanx's."""
    return [
        {**obj, "spec": {**(obj.get("spec") or {}), "schedulerName": scheduler_name}}
        if obj.get("kind") == "Pod" and _pending(obj)
        else obj
        for obj in objects
    ]


async def dry_run(
    copy: ClusterCopy, settings: Settings, *, namespace: str | None = None, all_schedulers: bool = False
) -> Report:
    objects = claim_pending(copy.objects, settings.scheduler_names[0]) if all_schedulers else copy.objects
    pending_before = {
        _pod_key(obj) for obj in objects if (obj.get("apiVersion"), obj.get("kind")) == ("v1", "Pod") and _pending(obj)
    }
    simulation = Simulation(settings, kubelets=False)
    simulation.add_nodes(copy.nodes)
    simulation.add_objects(objects, default_scheduler=False)
    report = await simulation.run(advance_time=False)
    return only_pending_gangs(report, pending_before, namespace)


def _pod_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def _namespace_of(key: str) -> str:
    """``source:ns/name`` (a gang) or ``ns/name`` (a pod) -> ``ns``."""
    return key.split(":", 1)[-1].split("/", 1)[0]


def only_pending_gangs(report: Report, pending_before: set[str], namespace: str | None) -> Report:
    """The report narrowed to gangs that had a pending member when the cluster was read (and to one
    namespace, if given): a dry-run is about what is waiting, not about what already runs."""
    members: dict[str, list[str]] = {}
    for pod, gang in report.gang_of.items():
        members.setdefault(gang, []).append(pod)
    wanted = {
        gang.key
        for gang in report.gangs
        if any(pod in pending_before for pod in members.get(gang.key, ()))
        and (namespace is None or _namespace_of(gang.key) == namespace)
    }

    def in_scope(pod: str) -> bool:
        return report.gang_of.get(pod) in wanted

    return replace(
        report,
        bound={pod: node for pod, node in report.bound.items() if in_scope(pod)},
        pending={pod: why for pod, why in report.pending.items() if in_scope(pod)},
        gangs=[gang for gang in report.gangs if gang.key in wanted],
        pods_bound=sum(1 for pod in report.bound if in_scope(pod)),
        preempted={pod: gang for pod, gang in report.preempted.items() if gang in wanted},
    )


#: Objects per list request.
PAGE = 500


async def read_cluster(port: ClusterPort) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Nodes, then every other object placement reads (pods, group objects, priority classes), and
    the optional APIs the cluster does not serve."""
    resources, missing = choose_resources(await port.served(WATCHABLE_GROUPS))
    nodes: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for resource in resources:
        token: str | None = None
        while True:
            page = await port.list(resource, limit=PAGE, continue_token=token)
            (nodes if resource.kind == "Node" and not resource.group else objects).extend(page.items)
            token = page.continue_token
            if token is None:
                break
    return nodes, objects, missing
