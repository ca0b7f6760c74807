"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Only the leader schedules; followers keep their informers warm, so failover costs a lease duration,
not a full list of the cluster.

- A candidate takes the Lease when it does not exist, is released (no holder), or has not been
  renewed for ``leaseDurationSeconds`` *as observed by this candidate's own clock* (clocks of other
  machines are never compared with ours). Writes carry the Lease's resourceVersion, so two candidates
  can never both win: the loser gets a 409.
- The leader renews every ``retryPeriodSeconds``. If it cannot renew for ``renewDeadlineSeconds`` it
  stops leading at once, before the lease can expire for the others.
- On a clean shutdown the leader releases the Lease so a follower takes over immediately.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog

from scheduler.clock import Clock
from scheduler.metrics import Metrics
from scheduler.ports.errors import Conflict, NotFound, PortError
from scheduler.ports.port import LEASES, ClusterPort
from scheduler.settings import LeaderSettings

log = structlog.get_logger("phalanx.leader")


def _micro(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self, port: ClusterPort, settings: LeaderSettings, identity: str, clock: Clock, metrics: Metrics
    ) -> None:
        self.port = port
        self.settings = settings
        self.identity = identity
        self.clock = clock
        self.metrics = metrics
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = -1e18
        self._told_missing_namespace = False

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever; while leading, run ``lead()`` (cancelled at once when leadership is lost)."""
        settings = self.settings
        try:
            while True:
                if await self._try():
                    self._renewed_at = self.clock.monotonic()
                    log.info("leading", identity=self.identity)
                    self._set_leading(True)
                    async with anyio.create_task_group() as group:
                        group.start_soon(self._lead_then_stop, lead, group.cancel_scope)
                        await self._renew(group.cancel_scope)
                    self._set_leading(False)
                    log.warning("stopped leading", identity=self.identity)
                await anyio.sleep(settings.retry_period_seconds)
        finally:
            if self.leading:
                self._set_leading(False)
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await self._release()

    async def _lead_then_stop(self, lead: Callable[[], Awaitable[None]], scope: anyio.CancelScope) -> None:
        await lead()
        scope.cancel()

    async def _renew(self, scope: anyio.CancelScope) -> None:
        settings = self.settings
        while True:
            await anyio.sleep(settings.retry_period_seconds)
            if await self._try():
                self._renewed_at = self.clock.monotonic()
            elif self.clock.monotonic() - self._renewed_at >= settings.renew_deadline_seconds:
                scope.cancel()
                return

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.metrics.leader.set(1 if leading else 0)

    async def _try(self) -> bool:
        """One acquire-or-renew attempt: True when this candidate holds the Lease afterwards."""
        namespace, name = self.settings.namespace, self.settings.name
        now = self.clock.wall()
        try:
            lease = await self.port.get(LEASES, namespace, name)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": self._spec(now, acquired=now, transitions=0),
            }
            try:
                await self.port.create(LEASES, namespace, body)
                return True
            except NotFound:
                # The namespace is missing (`phalanx run` from a laptop with the defaults): no replica can
                # ever lead, and nothing is scheduled. Say so once, with the fix, and keep trying.
                if not self._told_missing_namespace:
                    self._told_missing_namespace = True
                    log.warning(
                        f"cannot lead: namespace {namespace} for the leader-election Lease does not exist; "
                        f"create it (kubectl create namespace {namespace}), set leaderElection.namespace to one "
                        "that exists, or run with --no-leader-elect. Nothing is scheduled until then.",
                        namespace=namespace,
                    )
                return False
            except PortError as error:
                log.info("could not create the lease", error=str(error)[:200])
                return False
        except PortError as error:
            log.warning("could not read the lease", error=str(error)[:200])
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock.monotonic()
        expired = self.clock.monotonic() - self._observed_at >= float(
            spec.get("leaseDurationSeconds") or self.settings.lease_duration_seconds
        )
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        updated = {**lease, "spec": self._spec(now, acquired=acquired or now, transitions=transitions)}
        try:
            await self.port.update(LEASES, namespace, name, updated)
        except Conflict:
            return False  # someone else wrote first
        except PortError as error:
            log.warning("could not write the lease", error=str(error)[:200])
            return False
        return True

    def _spec(self, now: float, *, acquired: Any, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.settings.lease_duration_seconds),
            "acquireTime": acquired if isinstance(acquired, str) else _micro(acquired),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    async def _release(self) -> None:
        namespace, name = self.settings.namespace, self.settings.name
        try:
            lease = await self.port.get(LEASES, namespace, name)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            released = {**lease, "spec": {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}}
            await self.port.update(LEASES, namespace, name, released)
            log.info("released the lease", identity=self.identity)
        except PortError as error:
            log.warning("could not release the lease", error=str(error)[:200])
