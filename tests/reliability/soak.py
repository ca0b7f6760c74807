"""The soak (``scripts/soak``): minutes of churn over HTTP with faults at random, every invariant checked.

Two Phalanx replicas with leader election run against SimCluster. Gangs arrive at random and finish
after a while (their pods deleted, as a job controller would). Between quiet spells, one fault at a time
is switched on for a few seconds: API errors on every verb, slow answers, dropped and expired watches,
bind failures, pods deleted while their gang binds, a node deleted or cordoned, a group's spec changed,
the leader killed without releasing its lease (a replacement replica starts), or the API server gone.
When the fault ends, arrivals pause and the run waits for every gang that fits to be bound: that wait is
the fault's recovery time. The invariant monitor checks every bind as it lands and every gang minimum at
every settle. The summary prints faults injected, gangs scheduled, checks done and violations (must be 0).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from scheduler.app import Phalanx
from scheduler.logs import configure
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.kube.writers import Writers
from scheduler.ports.sim import Faults
from tests.reliability.chaos import Gangs, api_errors, cordon, create, priority_classes, settle, watch_trouble
from tests.scheduler.support import FAST, Cluster, cluster, elected

SLOW_RECOVERY_SECONDS = 2.0  # recoveries slower than this are reported with what they waited for
LIVENESS_SECONDS = 120.0  # the bound on recovery: longer is reported as a violation, and the run goes on

FAULTS = (
    "api-errors",
    "slow-api",
    "watch-drops",
    "bind-failures",
    "pods-deleted-mid-bind",
    "node-deleted",
    "node-cordoned",
    "group-changed",
    "leader-killed",
    "api-unreachable",
)


@dataclass
class Replica:
    app: Phalanx
    scope: anyio.CancelScope


PRIORITY_VALUES = (("batch", 10), ("standard", 100), ("production", 1000))
#: How often each priority arrives: mostly batch, some production.
PRIORITIES = ("batch", "batch", "batch", "standard", "production")


@dataclass
class Soak:
    where: Cluster
    faults: Faults
    seed: int
    fault_seconds: float
    outage_seconds: float
    writers: int = 0  # writer processes per replica (0: each replica writes itself)
    replicas: list[Replica] = field(default_factory=list)
    started_replicas: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    gangs_created: int = 0
    gangs_finished: int = 0
    slow: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.gangs = Gangs(self.seed)
        self.running: dict[str, tuple[list[str], float]] = {}  # gang -> (pod keys, finish after bound for)
        self.bound_since: dict[str, float] = {}

    # -- replicas ------------------------------------------------------------------------------------

    async def start_replica(self, group: anyio.abc.TaskGroup) -> None:
        self.started_replicas += 1
        identity = f"replica-{self.started_replicas}"
        port = Writers(KubeCluster(client_for(self.where.url), request_timeout=10), self.writers)
        app = Phalanx(replace(FAST, leader_election=elected(identity, lease=3.0, renew=2.0, retry=0.3)), port)
        scope = anyio.CancelScope()
        self.where.monitor.apps.append(app)

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                with scope:
                    async with anyio.create_task_group() as replica:
                        replica.start_soon(port.run)
                        await replica.start(app.run)
                        task_status.started()
            finally:
                with anyio.CancelScope(shield=True):
                    await port.close()

        await group.start(run)
        self.replicas.append(Replica(app, scope))

    def kill(self, replica: Replica) -> None:
        """As SIGKILL would: no lease released, binds in flight cut off."""

        async def no_release() -> None:
            return None

        replica.app.elector._release = no_release  # type: ignore[method-assign]
        replica.scope.cancel()
        self.replicas.remove(replica)
        self.where.monitor.apps.remove(replica.app)

    async def leader(self, timeout: float = 30.0) -> Phalanx:
        with anyio.fail_after(timeout):
            while True:
                for replica in self.replicas:
                    if replica.app.elector.leading:
                        return replica.app
                await anyio.sleep(0.05)

    # -- churn ---------------------------------------------------------------------------------------

    def arrive(self) -> None:
        # Priorities are mixed, so that production gangs preempt batch ones while everything else goes on.
        self.gangs.priority_class = self.random.choice(PRIORITIES)
        name, objects = self.gangs.next()
        create(self.where, objects)
        pods = [f"team/{obj['metadata']['name']}" for obj in objects if obj["kind"] == "Pod"]
        self.running[name] = (pods, self.random.uniform(2.0, 12.0))
        self.gangs_created += 1

    def finish(self) -> None:
        """Gangs that have run their time end: their pods (and group) are deleted."""
        now = time.monotonic()
        bound = self.where.bound()
        for name, (pods, runtime) in list(self.running.items()):
            if pods and all(pod in bound for pod in pods):
                since = self.bound_since.setdefault(name, now)
                if now - since >= runtime:
                    for pod in pods:
                        if pod in self.where.pods():
                            self.where.delete_pod(pod)
                    groups = self.where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
                    if any(g["metadata"]["name"] == name for g in self.where.store.objects(groups)):
                        self.where.store.delete(groups, "team", name)
                    del self.running[name]
                    self.gangs_finished += 1

    async def churn(self, seconds: float, arrivals_per_second: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.random.random() < arrivals_per_second * 0.1:
                self.arrive()
            self.finish()
            await anyio.sleep(0.1)

    # -- faults --------------------------------------------------------------------------------------

    async def fault(self, kind: str, group: anyio.abc.TaskGroup) -> None:
        """Inject one fault while gangs keep arriving, then end it."""
        self.injected[kind] += 1
        draw = self.random
        where = self.where
        duration = self.outage_seconds if kind == "api-unreachable" else self.fault_seconds
        if kind == "api-errors":
            self.faults.rules.extend(api_errors(0.2))
        elif kind == "slow-api":
            self.faults.rules.extend(api_errors(0.0)[1:] * 4)
        elif kind == "watch-drops":
            watch_trouble(self.faults)
        elif kind == "bind-failures":
            pending = [key for key, pod in where.pods().items() if not pod["spec"].get("nodeName")]
            for key in draw.sample(pending, min(len(pending), 5)):
                self.faults.bind_failures[key] = draw.choice((500, 429, 409, 403))
        elif kind == "api-unreachable":
            self.faults.unavailable = True
        elif kind == "leader-killed":
            leader = await self.leader()
            self.kill(next(r for r in self.replicas if r.app is leader))
            await self.start_replica(group)
        for _ in range(3):
            self.arrive()
        if kind == "pods-deleted-mid-bind":
            await self.disrupt_binding(lambda: self.delete_binding_pods(draw))
        elif kind in ("node-deleted", "node-cordoned"):
            await self.disrupt_binding(lambda: self.take_node(kind, draw))
        elif kind == "group-changed":
            self.change_group(draw)
        await self.churn(duration, arrivals_per_second=1.0)
        self.faults.clear()

    async def disrupt_binding(self, disruption: Callable[[], None]) -> None:
        """Run ``disruption`` as soon as the leader has a bind in flight (or after 5 s)."""
        with anyio.move_on_after(5):
            while True:
                leader = await self.leader()
                if any(pod not in self.where.bound() for pod in leader.state.assumed):
                    break
                await anyio.sleep(0.01)
        disruption()

    def delete_binding_pods(self, draw: random.Random) -> None:
        candidates = [key for key, pod in self.where.pods().items() if pod["spec"].get("schedulerName") == "phalanx"]
        for key in draw.sample(candidates, min(len(candidates), 4)):
            self.where.delete_pod(key)

    def take_node(self, kind: str, draw: random.Random) -> None:
        nodes = self.where.store.resource("v1", "Node")
        names = sorted(n["metadata"]["name"] for n in self.where.store.objects(nodes))
        name = draw.choice(names)
        if kind == "node-cordoned":
            cordon(self.where, name)
            return
        saved = self.where.store.get(nodes, None, name)
        self.where.store.delete(nodes, None, name)
        # The machine comes back later as a new node object (its old pods were bound to the old one).
        for pod in [key for key, node in self.where.bound().items() if node == name]:
            self.where.delete_pod(pod)  # the pod garbage collector removes pods of a deleted node
        metadata = {k: v for k, v in saved["metadata"].items() if k in ("name", "labels", "annotations")}
        self.where.store.create(nodes, None, {**saved, "metadata": metadata})

    def change_group(self, draw: random.Random) -> None:
        groups = self.where.store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
        found = sorted(self.where.store.objects(groups), key=lambda g: g["metadata"]["name"])
        if not found:
            return
        group = draw.choice(found)
        name = group["metadata"]["name"]
        if draw.random() < 0.5:
            self.where.store.delete(groups, "team", name)
        else:
            spec = {**group["spec"], "minMember": int(group["spec"].get("minMember", 1)) + 1}
            self.where.store.update(groups, "team", name, {**group, "spec": spec})

    async def recover(self, kind: str) -> None:
        """Wait for every feasible gang to be bound; a wait past ``LIVENESS_SECONDS`` is a violation."""
        leader = await self.leader(timeout=60)
        started = time.monotonic()
        seen: list[str] = []
        try:
            await settle(self.where, leader, timeout=LIVENESS_SECONDS, poll=0.2, seen=seen)
        except AssertionError as stuck:
            self.where.monitor.violations.append(f"liveness after {kind}: {stuck}")
        else:
            took = time.monotonic() - started
            self.recovery.setdefault(kind, []).append(took)
            if took > SLOW_RECOVERY_SECONDS:
                self.slow.append({"fault": kind, "seconds": round(took, 2), "waited_for": seen[:10]})
        self.where.monitor.check_gangs()
        self.where.monitor.check_nodes()
        uncordon(self.where)


def uncordon(where: Cluster) -> None:
    nodes = where.store.resource("v1", "Node")
    for node in list(where.store.objects(nodes)):
        if (node.get("spec") or {}).get("unschedulable"):
            where.store.update(
                nodes, None, node["metadata"]["name"], {**node, "spec": {**node["spec"], "unschedulable": False}}
            )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@asynccontextmanager
async def soaking(args: argparse.Namespace) -> AsyncIterator[Soak]:
    faults = Faults(seed=args.seed)
    async with cluster(args.cluster, faults=faults) as where:
        where.store.ensure_namespace("kube-system")
        priority_classes(where, **dict(PRIORITY_VALUES))
        yield Soak(where, faults, args.seed, args.fault_seconds, args.outage_seconds, writers=args.writers)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    report: dict[str, Any] = {}
    async with soaking(args) as soak:
        async with anyio.create_task_group() as group:
            for _ in range(2):
                await soak.start_replica(group)
            await soak.churn(2.0, arrivals_per_second=2.0)
            await soak.recover("none")
            kinds = list(FAULTS)
            round_number = 0
            while time.monotonic() - started < args.minutes * 60 or round_number < len(kinds):
                # Every kind once (the outage at most once a run, as it is long), then at random.
                if round_number < len(kinds):
                    kind = kinds[round_number]
                else:
                    kind = soak.random.choice([k for k in kinds if k != "api-unreachable"])
                round_number += 1
                await soak.fault(kind, group)
                await soak.recover(kind)
                await soak.churn(soak.random.uniform(1.0, 3.0), arrivals_per_second=1.5)
            group.cancel_scope.cancel()
        where = soak.where
        monitor = where.monitor
        violations = list(monitor.violations)
        report = {
            "command": "scripts/soak " + " ".join(args.argv),
            "seconds": round(time.monotonic() - started, 1),
            "cluster": args.cluster,
            "seed": args.seed,
            "faults_injected": dict(sorted(soak.injected.items())),
            "api_faults_injected": sum(soak.faults.injected.values()),
            "api_faults_by_kind": dict(sorted(soak.faults.injected.items())),
            "replicas_started": soak.started_replicas,
            "gangs_created": soak.gangs_created,
            "gangs_finished": soak.gangs_finished,
            "pods_bound": monitor.checks["bind"],
            "invariant_checks": dict(sorted(monitor.checks.items())),
            "violations": violations,
            "slow_recoveries": soak.slow,
            "recovery_seconds": {
                kind: {
                    "runs": len(values),
                    "p50": round(statistics.median(values), 2),
                    "p95": round(percentile(values, 0.95), 2),
                    "max": round(max(values), 2),
                }
                for kind, values in sorted(soak.recovery.items())
            },
        }
        monitor.violations.clear()  # reported above; the cluster's own exit check would raise instead
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="how long to churn (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster", default="blocks=2,racks=4,nodes=8,gpus=8", help="SimCluster shape (64 nodes)")
    parser.add_argument("--fault-seconds", type=float, default=8.0, help="how long each fault lasts (default 8)")
    parser.add_argument("--outage-seconds", type=float, default=60.0, help="how long the API server is gone (60)")
    parser.add_argument("--writers", type=int, default=0, help="writer processes per replica (default 0: none)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--log-level", default="error", help="the scheduler's log level (default error)")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    configure(args.log_level)
    report = anyio.run(run, args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if report["violations"] else 0


def print_report(report: dict[str, Any]) -> None:
    print(f"command: {report['command']}")
    print(f"cluster: {report['cluster']}, seed {report['seed']}, {report['seconds']} s")
    print(f"faults injected: {report['faults_injected']} ({report['api_faults_injected']} failed or cut API calls)")
    print(f"replicas started: {report['replicas_started']}")
    print(
        f"gangs: {report['gangs_created']} created, {report['gangs_finished']} ran and finished; "
        f"{report['pods_bound']} pods bound"
    )
    print(f"invariant checks: {report['invariant_checks']}")
    print(f"violations: {len(report['violations'])}")
    for violation in report["violations"][:20]:
        print(f"  {violation}")
    for slow in report["slow_recoveries"]:
        print(f"slow recovery after {slow['fault']}: {slow['seconds']} s, waiting for {slow['waited_for']}")
    print("recovery (fault end to every feasible gang bound), seconds:")
    for kind, figures in report["recovery_seconds"].items():
        print(
            f"  {kind:<22} runs {figures['runs']:>3}  p50 {figures['p50']:>6}  p95 {figures['p95']:>6}"
            f"  max {figures['max']:>6}"
        )


if __name__ == "__main__":
    sys.exit(main())
