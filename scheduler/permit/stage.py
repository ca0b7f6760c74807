"""The permit stage of the cycle: what a gang that lacks members is told, and the room it holds for them.

Each method answers with an :class:`Outcome` (or None: nothing to say, go on) and changes only what it
owns: the holds (``holds.py``) and their assumptions in ClusterView. The cycle records the answer.

- :meth:`PermitStage.arrivals`: a gang that holds room gives each arrived member a placeholder's place,
  and is permitted once none is missing;
- :meth:`PermitStage.before_placing`: a gang cooling down after a timeout, or whose placeholders would
  take the held share past ``permit.maxReservedShare``, holds nothing now;
- :meth:`PermitStage.hold`: the room placement set aside for missing members is held until its timeout;
- :meth:`PermitStage.timed_out`: the timeout passed first: the room is released, the gang cools down;
- :meth:`PermitStage.unknown_members` and :meth:`PermitStage.existing_fit`: gangs that wait for members
  without holding room, because nothing says what those members will need, or where.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from scheduler.clock import Clock
from scheduler.decision import GANG_WAITING, BindJob, Code, Outcome, Reason, Wake
from scheduler.gangs import GangError, GangKey, GangSpec
from scheduler.permit.holds import Hold, Permit, placeholder_requests
from scheduler.permit.missing import Shortfall, absent, describe, gated
from scheduler.settings import Settings
from scheduler.stages import Due, GangNews, Stage
from scheduler.state import ClusterView
from topology import Assignment, GangRequest, Infeasible, NodeConstraints, Placement, Placer, PodShape

log = structlog.get_logger("phalanx.permit")


class PermitStage(Stage):
    def __init__(self, *, state: ClusterView, permit: Permit, placer: Placer, settings: Settings, clock: Clock) -> None:
        self.state = state
        self.permit = permit
        self.placer = placer
        self.settings = settings
        self.clock = clock

    def arrivals(self, spec: GangSpec) -> Outcome | None:
        """Members that arrived take their placeholders' places. None when they do not match what was held:
        the hold is released and the gang is placed afresh."""
        state = self.state
        leaf_of = {member.key: leaf.key for leaf in spec.request.walk() if leaf.is_leaf for member in leaf.pods}
        arrivals = [(member.key, leaf_of.get(member.key, ""), member.shape) for member in state.unplaced(spec.request)]
        moves = self.permit.arrive(spec.key, arrivals)
        if moves is None:
            self.release(spec.key)
            return None
        for move in moves:
            if move.left is not None:
                state.assume_room(spec.key, move.placeholder, move.node, move.left.shape, move.left.requests)
            else:
                state.forget(move.placeholder)
            state.assume(spec.key, [Assignment(pod=move.member, node=move.node, shape=move.shape)])
        hold = self.permit.hold_of(spec.key)
        if not state.meets_minimum(spec.request):
            if hold.placeholders:
                # Still waiting; what it waits for may have changed (a member arrived, a pod got or lost gates).
                return self.holding(spec, hold, attempt=False)
            # Every placeholder is taken and the minimum still lacks members (one was deleted, or the
            # minimum was raised): the hold no longer fits the gang; it is placed afresh.
            self.release(spec.key)
            return None
        for placeholder in self.permit.release(spec.key):  # complete (room left over: the minimum was lowered)
            state.forget(placeholder)
        placed = tuple(
            (pod, node)
            for pod in spec.pods
            if state.bound_node(pod) is None and (node := state.placed_node(pod)) is not None
        )
        log.info("permitted", gang=spec.key, pods=len(placed))
        return Outcome(code=Code.SCHEDULED, message="all members placed", job=BindJob(spec.key, placed, spec.created))

    def before_placing(self, spec: GangSpec, request: GangRequest, missing: int, wake: Wake) -> Outcome | None:
        """A gang that lacks members and may not hold room for them now: cooling down after a timeout, or
        its placeholders would take held room past its share of the cluster."""
        if not missing:
            return None
        cooling = self.permit.cooling(spec.key)
        if cooling is not None:
            timeouts = self.permit.timeouts.get(spec.key, 0)
            message = (
                f"Gang {spec.key} waits for {absent(spec, missing)}; it held room for them until its timeout "
                f"({_times(timeouts)} in a row), and holds room again in {cooling:.0f} s.{gated(spec)}"
            )
            return Outcome(code=Code.WAIT, message=message, pods=spec.pods, reason=Reason.GANG_WAITING, attempt=False)
        if not self.permit.can_hold(placeholder_requests(request), self._allocatable()):
            message = (
                f"Gang {spec.key} waits for {absent(spec, missing)}, and room held for waiting gangs is at its "
                f"limit ({self.settings.permit.max_reserved_share:.0%} of the cluster).{gated(spec)}"
            )
            return Outcome(
                code=Code.UNSCHEDULABLE,
                message=message,
                pods=spec.pods,
                wake=wake,
                reason=Reason.GANG_WAITING,
                condition=GANG_WAITING,
            )
        return None

    def hold(self, spec: GangSpec, placed: Placement) -> Outcome:
        """Hold the room placement set aside for members not created yet (its members are assumed already)."""
        hold = self.permit.hold(spec, placed.held)
        for key, placeholder in hold.placeholders.items():
            self.state.assume_room(spec.key, key, placeholder.node, placeholder.shape, placeholder.requests)
        return self.holding(spec, hold)

    def holding(self, spec: GangSpec, hold: Hold, *, attempt: bool = True) -> Outcome:
        message = (
            f"Gang {spec.key} holds room for {absent(spec, hold.missing)}; it binds when they arrive, or "
            f"releases the room in {hold.deadline - self.clock.monotonic():.0f}s.{gated(spec)}"
        )
        return Outcome(code=Code.WAIT, message=message, pods=spec.pods, attempt=attempt)

    def timed_out(self, hold: Hold) -> Outcome | None:
        """The gang's timeout passed before its members arrived: its room is released and it cools down.
        None when the gang is gone (nothing to tell)."""
        key = hold.gang
        self.release(key)
        spec = self.state.index.get(key)
        timeout = spec.timeout.seconds if isinstance(spec, GangSpec) else 0.0
        cooldown = self.permit.timed_out(key, timeout)
        log.info("gang timed out", gang=key, missing=hold.missing, cooldown_s=round(cooldown, 1))
        if not isinstance(spec, GangSpec):
            return None
        message = (
            f"Gang {key} timed out waiting for {absent(spec, hold.missing)}; the room it held is released, and it "
            f"holds room again in {cooldown:.0f} s.{gated(spec)}"
        )
        return Outcome(
            code=Code.UNSCHEDULABLE,
            message=message,
            pods=spec.pods,
            reason=Reason.GANG_TIMEOUT,
            condition=GANG_WAITING,  # it still lacks members; more room would not help it
            wake=Wake(nodes=True),
            attempt=False,
        )

    # -- what the stage is told ----------------------------------------------------------------------

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> tuple[GangKey, ...]:
        if outcome.code in (Code.PLACED, Code.SCHEDULED):
            self.permit.clear_timeouts(gang.key)  # its timeouts in a row end
        return ()

    def told(self, gang: GangKey, news: GangNews) -> tuple[GangKey, ...]:
        if news in (GangNews.DELETED, GangNews.INVALID):
            self.release(gang)
        if news is GangNews.DELETED:
            self.permit.clear_timeouts(gang)
        return ()

    def due(self) -> Due:
        """Holds whose timeout passed, each released and told (:meth:`timed_out`); gangs whose cooldown
        ended, to be looked at again."""
        decided = []
        for hold in self.permit.expired():
            timed_out = self.timed_out(hold)
            spec = self.state.index.get(hold.gang)
            if timed_out is not None and isinstance(spec, GangSpec):
                decided.append((spec, timed_out))
        return Due(decided=decided, requeue=self.permit.cooled())

    def next_deadline(self) -> float | None:
        return self.permit.next_deadline()

    def lost_lead(self) -> None:
        self.permit.release_all()

    def release(self, key: GangKey) -> None:
        """Drop a gang's hold and whatever it assumed that is not bound."""
        for placeholder in self.permit.release(key):
            self.state.forget(placeholder)
        self.state.forget_gang(key)

    def unknown_members(
        self, spec: GangSpec, pods: tuple[str, ...], wake: Wake, trial: GangRequest | None, shortfalls: list[Shortfall]
    ) -> Outcome:
        """Parts of the gang have no member yet, so no room can be held for them: the gang waits, holding
        nothing. What exists is placed on trial (not kept), so that a gang that would not fit anyway says
        so, and cluster-autoscaler only hears ``Unschedulable`` when more room would help."""
        lacking = describe(shortfalls)
        if trial is not None:
            placed = self.placer(self.state.snapshot, trial, max_tries=self.settings.placement.max_domain_tries)
            if isinstance(placed, Infeasible):
                message = f"{placed.message} It also waits for members that do not exist yet: {lacking}.{gated(spec)}"
                return Outcome(code=Code.UNSCHEDULABLE, message=message, pods=pods, each_pod=True, wake=wake)
        exists = " The members that exist fit now." if trial is not None else ""
        message = f"Gang {spec.key} waits for members that do not exist yet: {lacking}.{exists}{gated(spec)}"
        return Outcome(code=Code.WAIT, message=message, pods=spec.pods)

    def existing_fit(self, spec: GangSpec, request: GangRequest, failed: Infeasible, missing: int) -> Outcome | None:
        """The gang did not fit with room for its missing members shaped like their siblings, node
        constraints included. If it fits with that room asked by requests alone, the constraints copied
        onto members that do not exist yet were the obstacle (Kueue may give each pod its own node): a
        guess, not a lack of room. The gang waits for them, holding nothing, and is not called
        unschedulable (cluster-autoscaler would add nodes for it)."""
        if not any(
            part.placeholder_shape and part.placeholder_shape.constraints != NodeConstraints()
            for part in request.walk()
        ):
            return None
        loose = _loose_placeholders(request)
        trial = self.placer(self.state.snapshot, loose, max_tries=self.settings.placement.max_domain_tries)
        if isinstance(trial, Infeasible):
            return None
        message = (
            f"Gang {spec.key} waits for {absent(spec, missing)}. Room for them cannot be held now where their "
            f"siblings' node constraints would put them ({failed.reason}); the gang is placed once they exist."
            f"{gated(spec)}"
        )
        return Outcome(
            code=Code.UNSCHEDULABLE,
            message=message,
            pods=spec.pods,
            wake=Wake(nodes=True, shapes=frozenset(m.shape for m in spec.request.members()), pods=missing),
            reason=Reason.GANG_WAITING,
            condition=GANG_WAITING,
        )

    def _allocatable(self) -> dict[str, int]:
        snapshot = self.state.snapshot
        totals = snapshot.allocatable.sum(axis=0)
        return {name: int(total) for name, total in zip(snapshot.resources, totals, strict=True)}


def _times(count: int) -> str:
    return "once" if count == 1 else "twice" if count == 2 else f"{count} times"


def _loose_placeholders(request: GangRequest) -> GangRequest:
    """``request`` with its placeholders asking for room by their requests alone, anywhere."""
    if request.is_leaf:
        shape = request.placeholder_shape
        return replace(request, placeholder_shape=PodShape(requests=shape.requests)) if shape else request
    return replace(request, children=tuple(_loose_placeholders(child) for child in request.children))
