"""The chaos harness shared by the fast reliability tests and ``scripts/soak``: seeded gangs, fault plans,
disruptions a cluster goes through, and the wait for everything feasible to be bound."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import anyio

from scheduler.app import Phalanx
from scheduler.permit.holds import is_placeholder
from scheduler.ports.sim import MERGE_PATCH, FaultRule, Faults
from scheduler.ports.sim.faults import VERBS
from tests.scheduler.support import Cluster, gpu_pod, pfn

RACK = "example.com/rack"
EVERY_VERB = VERBS


@dataclass
class Gangs:
    """Seeded gangs of one to four pods of 2-8 GPUs; some require one rack, some are scheduler-plugins
    PodGroups (so that group objects can be changed under them)."""

    seed: int
    namespace: str = "team"
    #: The pods' priorityClassName (preemption chaos mixes priorities).
    priority_class: str | None = None

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.made = 0

    def next(self) -> tuple[str, list[dict[str, Any]]]:
        """The name of a new gang and its objects, in creation order."""
        name, objects = self._next()
        if self.priority_class is not None:
            for obj in objects:
                if obj["kind"] == "Pod":
                    obj["spec"]["priorityClassName"] = self.priority_class
        return name, objects

    def _next(self) -> tuple[str, list[dict[str, Any]]]:
        draw = self.random
        name = f"g{self.made}"
        self.made += 1
        size = draw.choice((1, 2, 2, 3, 4))
        gpus = draw.choice((2, 4, 8, 8))
        if draw.random() < 0.3:
            group = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"minMember": size},
            }
            labels = {"scheduling.x-k8s.io/pod-group": name}
            pods = [gpu_pod(f"{name}-{i}", self.namespace, gpus, labels=labels) for i in range(size)]
            return name, [group, *pods]
        annotations = pfn(name, size)
        if draw.random() < 0.4:
            annotations["scheduling.phalanx.dev/topology-required"] = RACK
        return name, [gpu_pod(f"{name}-{i}", self.namespace, gpus, annotations=annotations) for i in range(size)]


def priority_classes(where: Cluster, **values: int) -> None:
    for name, value in values.items():
        where.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                      "value": value})  # fmt: skip


def preemptions(app: Phalanx) -> float:
    return app.metrics.registry.value("phalanx_preemption_attempts_total", {"result": "preempted"}) or 0.0


def api_errors(rate: float = 0.15) -> list[FaultRule]:
    """Every verb fails now and then: 500, 429 with Retry-After, 409; and answers arrive late."""
    return [
        FaultRule(verbs=EVERY_VERB, error_rate=rate, codes=(500, 429, 409), retry_after=1),
        FaultRule(verbs=EVERY_VERB, latency=0.005, jitter=0.05),
    ]


def watch_trouble(faults: Faults) -> None:
    faults.drop_watch_after = 3
    faults.expire_next_watches = 4


def create(where: Cluster, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        where.create(obj)


async def settle(
    where: Cluster, app: Phalanx, *, timeout: float = 60.0, poll: float = 0.05, seen: list[str] | None = None
) -> float:
    """Wait until every pending gang that fits is bound, nothing is still being bound or evicted, and every
    pending pod shows the latest decision; returns the seconds it took. Fails with what is still wrong. Each
    distinct problem met on the way is appended to ``seen``, for whoever wants to know why it took long."""
    started = time.monotonic()
    problems: list[str] = ["not checked yet"]
    with anyio.move_on_after(timeout):
        while True:
            problems = await what_is_unsettled(where, app)
            if seen is not None:
                seen.extend(problem for problem in problems if problem not in seen)
            if not problems:
                return time.monotonic() - started
            await anyio.sleep(poll)
    raise AssertionError(f"not settled after {timeout}s: " + "; ".join(problems))


async def what_is_unsettled(where: Cluster, app: Phalanx) -> list[str]:
    before = _placement(where)
    problems = _writing(where, app)
    if problems:
        return problems
    feasible = await where.monitor.feasible_pending(app.settings)
    # The liveness pass is a whole scheduler run in this event loop: meanwhile Phalanx may have placed, bound or
    # preempted. Its answer and the checks above hold together only if nothing moved while it ran.
    problems = _writing(where, app)
    if _placement(where) != before:
        problems.append("pods were bound or deleted while liveness was checked")
    if feasible:
        problems.append(f"pending pods that fit: {sorted(feasible)[:5]}")
    stale = where.monitor.conditions_stale(app)
    if stale:
        problems.append(f"pending pods without their latest condition: {sorted(stale)[:5]}")
    return problems


def _writing(where: Cluster, app: Phalanx) -> list[str]:
    """What Phalanx has yet to write before its gangs are whole: binds and preemptions under way."""
    problems = []
    if not app.ready()[0]:
        problems.append(f"not ready: {app.ready()[1]}")
    bound = where.bound()
    binding = [
        pod
        for pod, held in app.state.assumed.items()
        # Room a gang holds while it waits for members (placeholders, and members reserved beside them)
        # is not a bind in flight: it is released when the gang's timeout runs out.
        if not is_placeholder(pod) and held.gang not in app.permit.waiting and pod not in bound
    ]
    if binding:
        problems.append(f"{len(binding)} pods still being bound: {sorted(binding)[:5]}")
    if app.binder.in_flight:  # a member whose bind was refused is retried until it lands
        problems.append(f"{app.binder.in_flight} gangs still being bound")
    if not app.evictor.idle:  # a unit is half deleted until its evictions are done
        problems.append("preemption writes still under way")
    return problems


def _placement(where: Cluster) -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    """Where every pod is bound, and which pods are being deleted."""
    pods = where.pods()
    deleting = frozenset(key for key, pod in pods.items() if pod["metadata"].get("deletionTimestamp"))
    return frozenset(where.bound().items()), deleting


def delete_some_pods(where: Cluster, draw: random.Random, share: float) -> list[str]:
    """Delete a share of the pods of ours, bound or not, as users and controllers do."""
    ours = sorted(key for key, pod in where.pods().items() if pod["spec"].get("schedulerName") == "phalanx")
    gone = draw.sample(ours, int(len(ours) * share))
    for key in gone:
        where.delete_pod(key)
    return gone


def cordon(where: Cluster, node: str) -> None:
    nodes = where.store.resource("v1", "Node")
    where.store.patch(nodes, None, node, {"spec": {"unschedulable": True}}, MERGE_PATCH)
