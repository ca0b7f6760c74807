"""The scheduler process: one task group running everything (docs/architecture.md).

Started in this order, each reporting readiness before the next starts:

1. the health and metrics server;
2. API discovery: which group/versions this cluster serves; an optional API that is missing (a CRD
   not installed) is logged once and not watched;
3. one informer per watched resource, all listing at once; the start goes on once every first list is
   applied;
4. leader election; while leading: the binding cycle, the reporter and the scheduling loop.

Each step's end is logged with the wall and CPU seconds since the process started (``logs.since_start``),
and so is the first bind: where a start's time goes.

Losing the lease cancels the leader's tasks at once and drops everything assumed, held, kept or reserved
(the new leader starts from what the API says); the informers keep running. Cancelling the whole group
(SIGTERM) releases the lease on the way out.
"""

from __future__ import annotations

import gc
import random
from dataclasses import replace

import anyio
import structlog
from anyio.abc import TaskStatus

from scheduler.binding import Binder
from scheduler.clock import Clock, SystemClock
from scheduler.gangs import GangKey
from scheduler.gangs.sources import SOURCES
from scheduler.health import HealthServer
from scheduler.informers import Informer
from scheduler.leader import LeaderElector
from scheduler.logs import since_start
from scheduler.loop import scheduling_loop
from scheduler.metrics import Metrics
from scheduler.picture import Pictures
from scheduler.ports.errors import Forbidden, PortError
from scheduler.ports.port import DISRUPTION_BUDGETS, DRA, NODES, PODS, ApiResource, ClusterPort
from scheduler.preemption.evictor import Evictor
from scheduler.ratelimit import TokenBucket
from scheduler.reporting import Reporter
from scheduler.settings import Settings
from scheduler.state import ClusterState

log = structlog.get_logger("phalanx.app")

#: Group-object resources Phalanx can read, most preferred version first within each (group, plural).
#: The gang sources' APIs, each as its candidate versions in order of preference (from the sources' table).
OPTIONAL: tuple[tuple[ApiResource, ...], ...] = tuple(
    tuple(ApiResource(api.group, version, api.plural, api.kind, namespaced=api.namespaced) for version in api.versions)
    for api in SOURCES
)


#: Resources every API server serves: listed without waiting for discovery.
ALWAYS_SERVED = (PODS, NODES)
#: The API groups Phalanx may watch: discovery reads only theirs (and the core API's).
WATCHABLE_GROUPS = frozenset(r.group for r in (*DRA, DISRUPTION_BUDGETS, *(r for rs in OPTIONAL for r in rs)))


def choose_resources(served: set[tuple[str, str, str]]) -> tuple[list[ApiResource], list[str]]:
    """Resources to watch (pods and nodes always) and the optional APIs that are missing. Each chosen
    resource says whether the server has its status subresource (a CRD may be installed without one)."""
    chosen: list[ApiResource] = []
    missing = []
    # Pods and nodes always (listed from the start, ``ALWAYS_SERVED``). A running pod whose claims are read after
    # it is counted again with its devices when they are (``claim_changed``).
    for extra in (*DRA, PODS, NODES, DISRUPTION_BUDGETS):  # budgets: preemption prefers unprotected victims
        if extra in (PODS, NODES) or (extra.group, extra.version, extra.plural) in served:
            chosen.append(extra)
        else:
            missing.append(f"{extra.plural}.{extra.group}")
    for candidates in OPTIONAL:
        found = next((r for r in candidates if (r.group, r.version, r.plural) in served), None)
        if found is None:
            missing.append(f"{candidates[0].plural}.{candidates[0].group}")
        else:
            status = (found.group, found.version, f"{found.plural}/status") in served
            chosen.append(replace(found, status_subresource=status))
    return chosen, missing


class Phalanx:
    """One scheduler instance on one cluster port."""

    def __init__(
        self,
        settings: Settings,
        port: ClusterPort,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        serve: bool = True,
        freeze_heap: bool = False,
    ) -> None:
        self.settings = settings
        self.freeze_heap = freeze_heap
        self.port = port
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.serve = serve
        self.metrics = Metrics()
        self.state = ClusterState(settings, self.clock)
        self.limiter = TokenBucket(settings.binding.writes_per_second, settings.binding.burst, self.clock)
        self.reporter = Reporter(
            port=port,
            state=self.state,
            settings=settings.reporting,
            clock=self.clock,
            limiter=self.limiter,
            metrics=self.metrics,
            identity=settings.identity,
        )
        self.binder = Binder(
            port=port,
            state=self.state,
            settings=settings.binding,
            clock=self.clock,
            limiter=self.limiter,
            reporter=self.reporter,
            metrics=self.metrics,
            place_again=self._place_again,
            back_off=self._back_off,
        )
        self.evictor = Evictor(
            port=port,
            clock=self.clock,
            limiter=self.limiter,
            reporter=self.reporter,
            metrics=self.metrics,
            scheduler_name=settings.scheduler_names[0],
            refused_retry_seconds=settings.preemption.refused_retry_seconds,
        )
        self.scheduler = scheduling_loop(
            settings=settings,
            state=self.state,
            clock=self.clock,
            queue_rng=random.Random(self.rng.random()),
            permit_rng=random.Random(self.rng.random()),
            binder=self.binder,
            reporter=self.reporter,
            metrics=self.metrics,
            evictor=self.evictor,
        )
        self.queue = self.scheduler.queue
        self.permit = self.scheduler.permit
        self.pictures = Pictures(
            state=self.state,
            queue=self.queue,
            stages=self.scheduler.stages,
            reasons=self.reporter,
            levels=settings.levels,
            clock=self.clock,
            interval_seconds=settings.server.view_interval_seconds,
            leading=lambda: self.leading,
        )
        self.elector = LeaderElector(port, settings.leader_election, settings.identity, self.clock, self.metrics)
        self.informers: list[Informer] = []
        self.health: HealthServer | None = None
        self.watched: list[ApiResource] = []

    def _informer(self, resource: ApiResource) -> Informer:
        return Informer(
            port=self.port,
            resource=resource,
            state=self.state,
            settings=self.settings.informers,
            poke=self.scheduler.poke,
            rng=random.Random(self.rng.random()),
        )

    def _place_again(self, gang: GangKey, why: str) -> None:
        self.scheduler.place_again(gang, why)

    def _back_off(self, gang: GangKey, why: str) -> None:
        self.scheduler.bind_refused(gang, why)

    def ready(self) -> tuple[bool, str]:
        if not self.informers or not all(informer.synced for informer in self.informers):
            return False, "informers have not listed everything yet"
        unhealthy = [str(informer.resource) for informer in self.informers if not informer.healthy]
        if unhealthy:
            return False, f"not in touch with the API server for {', '.join(unhealthy)}"
        return True, "ok"

    @property
    def leading(self) -> bool:
        return self.elector.leading if self.settings.leader_election.enabled else True

    async def _discover(self) -> set[tuple[str, str, str]]:
        delay = self.settings.informers.initial_backoff_seconds
        while True:
            try:
                return await self.port.served(WATCHABLE_GROUPS)
            except Forbidden as error:
                # The server answered: it refused the credentials (a token rotated, RBAC not applied yet), which
                # may change without a restart, as kube-scheduler also waits; /readyz says 503 meanwhile.
                words = "Unauthorized: the credentials are not accepted" if error.code == 401 else "Forbidden"
                log.error("the API server refused Phalanx's credentials; retrying", status=error.code,
                          why=words, error=str(error)[:200], retry_in_s=round(delay, 2))  # fmt: skip
                await anyio.sleep(delay)
                delay = min(delay * 2, self.settings.informers.max_backoff_seconds)
            except PortError as error:
                log.warning("API discovery failed; retrying", error=str(error)[:200], retry_in_s=round(delay, 2))
                await anyio.sleep(delay)
                delay = min(delay * 2, self.settings.informers.max_backoff_seconds)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; ``task_status.started()`` once every informer has listed."""
        async with anyio.create_task_group() as group:
            if self.serve:
                pictures = self.pictures if self.settings.server.view else None
                server = self.settings.server
                self.health = HealthServer(
                    server.address,
                    self.metrics,
                    self.ready,
                    pictures,
                    view_from_anywhere=server.view_from == "anywhere",
                    view_hosts=server.view_hosts,
                )
                await group.start(self.health.run)
            if self.freeze_heap:
                gc.disable()  # until the first lists are in: collections there would only walk what stays
            # Pods and nodes are served by every API server: their first lists begin while discovery runs, and
            # every other first list as soon as it ends. The start waits for the slowest list, not for the sum.
            # (What one informer's events assume of another's, a pod on a node not listed yet, its claims not
            # read yet, the state takes in any order, as watches deliver them.)
            first = [self._informer(resource) for resource in ALWAYS_SERVED]
            async with anyio.create_task_group() as starting:
                for informer in first:
                    starting.start_soon(group.start, informer.run)
                self.watched, missing = choose_resources(await self._discover())
                log.info("discovered", resources=len(self.watched), **since_start())
                for name in missing:
                    log.info("optional API not served; its gangs are not read", api=name)
                self.reporter.watching(self.watched)
                rest = [self._informer(resource) for resource in self.watched if resource not in ALWAYS_SERVED]
                self.informers = first + rest
                for informer in rest:
                    starting.start_soon(group.start, informer.run)
            log.info("informers synced", resources=[str(r) for r in self.watched], nodes=self.state.snapshot.n_nodes,
                     **since_start())  # fmt: skip
            if self.freeze_heap:
                # What the first lists built lives as long as the process: out of the cyclic collector's
                # reach, a full collection no longer walks it (with 1,500 pods, one took 50-100 ms, which
                # was the slowest gangs' latency). Acyclic garbage is still freed by reference counting.
                gc.freeze()
                gc.enable()
            task_status.started()
            if self.settings.leader_election.enabled:
                await self.elector.run(self._lead)
            else:
                # Alone, it leads for as long as it runs, and says so as an elected leader does: the alert that no
                # replica leads reads this gauge.
                self.metrics.leader.set(1)
                try:
                    await self._lead()
                finally:
                    self.metrics.leader.set(0)

    async def _lead(self) -> None:
        log.info("leading", **since_start())
        try:
            self.state.take_departures()  # what left while following: a new leader keeps no room it did not see left
            self.scheduler.requeue_all()
            async with anyio.create_task_group() as group:
                await group.start(self.binder.run)
                await group.start(self.evictor.run)
                await group.start(self.reporter.run)
                await group.start(self.scheduler.run)
        finally:
            self.scheduler.lost_lead()
