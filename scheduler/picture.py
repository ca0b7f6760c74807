"""The cluster as Phalanx sees it, for the live view: one JSON object (``health.py`` serves it at
``/api/cluster``, and a gang's own at ``/api/gang``; the page in ``web/`` draws them).

Never on the decision path: a picture is taken only when someone asks, at most once every
``server.viewIntervalSeconds`` and never so often that pictures take more than 5% of the event loop's time;
everyone asking in between gets the same bytes. It shows names, counts,
states and the reasons Phalanx gives in pods' conditions; of a pod's spec only what it requests of the
accelerator the map is drawn in.

The map: every node in the order of its domains (blocks, racks: ``levels``), each accelerator of the node
one cell, 0 where it is free, 1 where a pod Phalanx does not place holds it (another scheduler's, or
devices counted without a pod), ``2 + i`` where it is gang ``owners[i]``'s (bound, being bound, or room
the gang holds or is assumed). Taking one costs a pass over the pods counted on nodes and one over the
gangs: Python per pod, which is why it is never taken more often than the interval.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import orjson

from scheduler.clock import Clock
from scheduler.gangs import GangError, GangKey, GangSpec, Problem
from scheduler.journal import Journal
from scheduler.preemption.postfilter import Preemption
from scheduler.queue import GangQueue, State
from scheduler.registry import Stages
from scheduler.starvation import Starvation
from scheduler.state import ClusterView
from topology import HOSTNAME
from topology.fit import pods_per_node, shape_fit
from topology.reasons import short_name

#: A node's accelerators drawn as at most this many cells (a node with more draws each cell for several).
MOST_CELLS = 64
#: Gangs listed in a picture: the first in the order the page shows them (waiting first, then by age).
MOST_GANGS = 500
FREE, OTHERS, FIRST_GANG = 0, 1, 2
#: The most of the event loop's time the view may take, however large the cluster and however many ask: a
#: picture that took 0.3 s (10,000 nodes and 80,000 pods) is taken about every 6 s, not every 2.
MOST_SHARE = 0.05
#: The share is kept over this many seconds: the view may spend ``MOST_SHARE * WINDOW`` (0.5 s) of the loop's
#: time at once (a picture and the gang pages of a click), then pays it back before it spends more.
WINDOW = 10.0
#: Of that, what pictures may take: the rest is kept for the gang pages a person opens between two.
PICTURES_SHARE = 0.8


T = TypeVar("T")


class Busy(Exception):
    """The view has spent its share of the event loop's time; ask again in ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"the live view is busy; ask again in {retry_after:.1f} s")
        self.retry_after = retry_after


class PendingReasons(Protocol):
    """Why each pending pod waits, as its ``PodScheduled`` condition says (``reporting.Reporter``)."""

    def why_pending(self, pod: str) -> tuple[str, str] | None: ...


class Pictures:
    def __init__(
        self,
        *,
        state: ClusterView,
        queue: GangQueue,
        stages: Stages,
        reasons: PendingReasons,
        levels: Sequence[str],
        clock: Clock,
        interval_seconds: float,
        leading: Callable[[], bool],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``timer`` measures what taking a picture costs (CPU-bound, on the event loop)."""
        self.timer = timer
        self.state = state
        self.queue = queue
        self.stages = stages
        self.reasons = reasons
        self.levels = tuple(level for level in levels if level != HOSTNAME)
        self.clock = clock
        self.interval_seconds = interval_seconds
        self.leading = leading
        self._latest: tuple[float, str, bytes] | None = None  # (monotonic, etag, body)
        self._next = 0.0  # monotonic: when the next picture is due
        self._spent, self._spent_at = 0.0, 0.0  # (see :meth:`_spent_by`)
        #: What the last picture, the last gang page and the last of either cost the loop (seconds).
        self._picture_cost = self._page_cost = self._last_cost = 0.0
        #: ETags name the process too: two replicas behind one Service do not answer each other's with 304.
        self._token = secrets.token_hex(4)
        #: Queue positions and backoffs as of the last picture (a gang's page reuses them).
        self._positions: dict[GangKey, int] = {}
        self._backing_off: dict[GangKey, float] = {}
        self._lined_up_at = -float("inf")
        self._gangs: dict[str, tuple[float, bytes]] = {}
        #: How many pictures were taken (the rate limit's test reads it), and the longest one took (seconds of
        #: the event loop's time: the benchmark reads it).
        self.taken = 0
        self.longest_seconds = 0.0

    def latest(self) -> tuple[str, bytes]:
        """The latest picture (its ETag and JSON), taken again once the interval has passed and the budget
        allows (:meth:`_spend`); :class:`Busy` when there is none yet and the budget does not allow one."""
        now = self.clock.monotonic()
        if self._latest is None or now >= self._next:
            wait = self._wait(now, self._picture_cost, share=PICTURES_SHARE)
            if wait > 0:
                if self._latest is None:
                    raise Busy(wait)
                return self._latest[1], self._latest[2]
            self._next = now + self.interval_seconds
            body = self._spend(lambda: orjson.dumps(self.take()))
            self._picture_cost = self._last_cost
            self.taken += 1
            self._latest = (now, f'"{self._token}-{self.taken}"', body)
        return self._latest[1], self._latest[2]

    def gang(self, key: str) -> bytes | None:
        """One gang's page as JSON (None for a gang not known), the same page for an interval; a new one only
        as the budget allows (:class:`Busy` otherwise), however many gangs are asked for."""
        now = self.clock.monotonic()
        cached = self._gangs.get(key)
        if cached is not None and now - cached[0] < self.interval_seconds:
            return cached[1]
        if self.state.index.get(GangKey(key)) is None:
            return None  # (no page to make: nothing spent)
        wait = self._wait(now, self._page_cost)
        if wait > 0:
            raise Busy(wait)
        found = self._spend(lambda: self.gang_picture(GangKey(key)))
        self._page_cost = self._last_cost
        if found is None:
            return None
        body = orjson.dumps(found)
        self._gangs = {k: v for k, v in self._gangs.items() if now - v[0] < self.interval_seconds}
        self._gangs[key] = (now, body)
        return body

    def _spent_by(self, now: float) -> float:
        """The loop's seconds the view has spent and not yet paid back (it pays :data:`MOST_SHARE` a second)."""
        return max(0.0, self._spent - (now - self._spent_at) * MOST_SHARE)

    def _wait(self, now: float, cost: float, *, share: float = 1.0) -> float:
        """Seconds until the view may spend ``cost`` more of the loop's time (0: now). Its spending is held to
        :data:`MOST_SHARE` of the loop's time, with no more than :data:`WINDOW` seconds' worth (0.5 s) spent
        and not paid back, of which pictures may take ``share``: the rest is kept for gang pages, or a page
        opened after each picture would find the budget spent. Work that costs more than all of it is done
        once the last is paid back."""
        spent = self._spent_by(now)
        room = MOST_SHARE * WINDOW * share
        if spent == 0 or spent + cost <= room:
            return 0.0
        return (spent - max(0.0, room - cost)) / MOST_SHARE

    def _spend(self, work: Callable[[], T]) -> T:
        """Do ``work`` on the event loop's time, and count it against the view's share (a failure counts too)."""
        started = self.timer()
        try:
            return work()
        finally:
            took = self.timer() - started
            self._last_cost = took
            self.longest_seconds = max(self.longest_seconds, took)
            now = self.clock.monotonic()
            self._spent, self._spent_at = self._spent_by(now) + took, now

    # -- the cluster ----------------------------------------------------------------------------

    def take(self) -> dict[str, Any]:
        state = self.state
        resource = accelerator(state.snapshot.resources)
        owners: dict[str, int] = {}
        held: dict[str, Counter[int]] = defaultdict(Counter)  # node -> owner code -> amount
        for key, node, requests in state.snapshot.counted():
            amount = requests.get(resource, 0) if resource else 0
            if amount:
                owner = self._owner(key)
                code = OTHERS if owner is None else FIRST_GANG + owners.setdefault(owner, len(owners))
                held[node][code] += amount
        gangs, waiting = self._gangs_listed()
        for entry in gangs:
            owners.setdefault(entry["key"], len(owners))
        for entry in gangs:
            entry["owner"] = FIRST_GANG + owners[entry["key"]]
        domains, cells, free = self._domains(resource, held)
        journal = self.stages.find(Journal)
        return {
            "taken": self.clock.wall(),
            "leading": self.leading(),
            "resource": resource,
            "levels": [short_name(level) for level in self.levels],
            "totals": {
                "nodes": state.snapshot.n_nodes,
                "cells": cells,
                "free": free,
                "gangs": len(state.index.results()),
                "waiting": waiting,
            },
            "owners": list(owners),
            "domains": domains,
            "gangs": gangs,
            "changes": [
                {"at": entry.at, "gang": entry.gang, "what": entry.what, "note": entry.note}
                for entry in (journal.entries() if journal is not None else [])
            ],
        }

    def _owner(self, key: str) -> str | None:
        """The gang a counted key's room is for (a pod of a gang, or room a gang assumed), else None."""
        assumption = self.state.assumed.get(key)
        if assumption is not None:
            return str(assumption.gang)
        gang = self.state.index.gang_of(key)
        return str(gang) if gang is not None else None

    def _domains(self, resource: str, held: Mapping[str, Counter[int]]) -> tuple[list[dict[str, Any]], int, int]:
        """Each domain of the levels above a node with its nodes' cells, its free accelerators, how many of its
        nodes are wholly free and the most free on one node; and the cells and free ones in all."""
        snapshot = self.state.snapshot
        if not snapshot.n_nodes:
            return [], 0, 0
        column = snapshot.resources.index(resource) if resource in snapshot.resources else None
        allocatable = snapshot.allocatable[:, column] if column is not None else np.zeros(snapshot.n_nodes, np.int64)
        free = snapshot.free[:, column] if column is not None else np.zeros(snapshot.n_nodes, np.int64)
        levels = [level for level in self.levels if snapshot.label(level).values]  # those the nodes have
        # Each node's domain as one id per node, and the arrays as Python lists: the loop below is per node
        # (it draws each one), and indexing numpy one element at a time costs more than the drawing.
        domain_ids = np.zeros(snapshot.n_nodes, np.int64)
        for level in levels:
            label = snapshot.label(level)
            domain_ids = domain_ids * (len(label.values) + 1) + (label.ids.astype(np.int64) + 1)
        totals, lefts = allocatable.tolist(), np.maximum(free, 0).tolist()
        domains: list[dict[str, Any]] = []
        by_path: dict[int, dict[str, Any]] = {}
        for row, (name, path) in enumerate(zip(snapshot.names, domain_ids.tolist(), strict=True)):
            domain = by_path.get(path)
            if domain is None:
                words = [f"{short_name(level)} {_value(snapshot.label(level), row)}" for level in levels]
                domain = {"name": " / ".join(words) or "cluster", "nodes": [], "free": 0, "freeNodes": 0, "largest": 0}
                by_path[path] = domain
                domains.append(domain)
            total, left = totals[row], lefts[row]
            domain["nodes"].append({"name": name, "cells": _cells(total, held.get(name, Counter())), "free": left})
            domain["free"] += left
            domain["freeNodes"] += int(total > 0 and left >= total)
            domain["largest"] = max(domain["largest"], left)
        return domains, int(allocatable.sum()), int(np.maximum(free, 0).sum())

    # -- the gangs ------------------------------------------------------------------------------

    def _gangs_listed(self) -> tuple[list[dict[str, Any]], int]:
        """The gangs the page lists (waiting first, the oldest first, :data:`MOST_GANGS` of them), and how many
        gangs wait in all."""
        self._line_up()
        listed = [
            self._gang(key, result, self._positions.get(key), self._backing_off.get(key))
            for key, result in self.state.index.results().items()
        ]
        listed.sort(key=lambda entry: (entry["state"] in ("running", "binding"), entry["since"], entry["key"]))
        waiting = sum(1 for entry in listed if entry["state"] not in ("running", "binding"))
        return listed[:MOST_GANGS], waiting

    def _line_up(self) -> None:
        self._lined_up_at = self.clock.monotonic()
        lineup = [(key, where, until) for key, where, until in self.queue.lineup() if where is not State.BINDING]
        self._positions = {key: i + 1 for i, (key, _, _) in enumerate(lineup)}
        self._backing_off = {key: until for key, where, until in lineup if where is State.BACKOFF}

    def _gang(
        self, key: GangKey, result: GangSpec | GangError, position: int | None, backoff_until: float | None
    ) -> dict[str, Any]:
        state = self.state
        if isinstance(result, GangError):
            word = "waiting for an object" if result.problem is Problem.WAITING else "invalid"
            return {
                "key": str(key), "state": word, "pods": len(result.pods),
                "bound": 0, "placed": 0, "minimum": 0, "since": 0.0, "reason": result.message, "queue": None,
                "reservation": "", "nomination": "",
            }  # fmt: skip
        members = [member.key for member in result.request.members()]
        bound_keys = {pod for pod in members if state.bound_node(pod) is not None}
        unbound = [pod for pod in members if pod not in bound_keys]  # assumed ones are told why too
        waiting = [pod for pod in unbound if pod not in state.assumed]
        bound, placed = len(bound_keys), len(members) - len(waiting)
        minimum = result.request.minimum_pods()
        why = self.reasons.why_pending(unbound[0]) if unbound else None
        reservation = self._reservation(key)
        nomination = self._nomination(key)
        holds = self.stages.permit.permit.holds(key)
        if members and bound == len(members):
            word = "running"
        elif holds:
            word = "holding room"  # its members are assumed in place, and room held for those not created yet
        elif placed > bound and not waiting:
            word = "binding"
        elif reservation:
            word = "reserving"
        elif nomination:
            word = "preempting"
        elif backoff_until is not None:
            word = "backing off"
        elif bound and result.request.satisfied_by(bound_keys):
            word = "running"  # its minimum runs; extras wait
        else:
            word = "pending"
        return {
            "key": str(key),
            "state": word,
            "pods": len(members),
            "bound": bound,
            "placed": placed,
            "minimum": minimum,
            "since": result.created,
            "reason": why[1] if why is not None else "",
            "queue": position,
            "reservation": reservation,
            "nomination": nomination,
        }

    def _reservation(self, key: GangKey) -> str:
        starvation = self.stages.find(Starvation)
        held = starvation.get(key) if starvation is not None else None
        if held is None:
            return ""
        left = max(0.0, held.deadline - self.clock.monotonic())
        return f"{held.where} for up to {left:.0f} s more"

    def _nomination(self, key: GangKey) -> str:
        preemption = self.stages.find(Preemption)
        nomination = preemption.nominations.get(key) if preemption is not None else None
        if nomination is None:
            return ""
        left = max(0.0, nomination.deadline - self.clock.monotonic())
        return f"{nomination.domain}, waiting for {len(nomination.victims)} pod(s) to go, {left:.0f} s at most"

    # -- one gang ---------------------------------------------------------------------------------

    def gang_picture(self, key: GangKey) -> dict[str, Any] | None:
        """A gang's pods (where each is, and why one waits), its placement by node, and per domain of its
        narrowest level how many of its waiting pods would fit there now."""
        result = self.state.index.get(key)
        if result is None:
            return None
        if isinstance(result, GangError):
            return {"gang": self._gang(key, result, None, None), "pods": [], "placement": {}, "domains": []}
        state = self.state
        if self.clock.monotonic() - self._lined_up_at >= self.interval_seconds:
            self._line_up()  # (a client that asks for gangs alone still sees the queue as it is)
        pods = []
        for member in result.request.members():
            node = state.bound_node(member.key)
            assumed = state.placed_node(member.key) if node is None else None
            why = self.reasons.why_pending(member.key) if node is None and assumed is None else None
            where = "bound" if node else "binding" if assumed else "pending"
            pods.append({"name": member.key, "node": node or assumed, "state": where, "reason": why[1] if why else ""})
        placement = Counter(pod["node"] for pod in pods if pod["node"])
        waiting = [member for member in result.request.members() if state.placed_node(member.key) is None]
        return {
            "gang": self._gang(key, result, self._positions.get(key), self._backing_off.get(key)),
            "pods": pods,
            "placement": dict(sorted(placement.items())),
            "domains": self._room(waiting),
        }

    def _room(self, waiting: Iterable[Any]) -> list[dict[str, Any]]:
        """Per domain of the narrowest level above a node: its free accelerators and how many of the waiting
        pods of the first shape fit there (one vectorized count per domain; explain's table, live)."""
        snapshot = self.state.snapshot
        shapes = Counter(member.shape for member in waiting)
        if not shapes or not snapshot.n_nodes or not self.levels:
            return []
        levels = [level for level in self.levels if snapshot.label(level).values]
        if not levels:
            return []
        shape, wanted = shapes.most_common(1)[0]
        fit = pods_per_node(snapshot.free, shape_fit(snapshot, shape))
        label = snapshot.label(levels[-1])
        resource = accelerator(snapshot.resources)
        free = snapshot.free[:, snapshot.resources.index(resource)] if resource else np.zeros(snapshot.n_nodes)
        rows: list[dict[str, Any]] = []
        for i, value in enumerate(label.values):
            mine = label.ids == i
            rows.append({
                "domain": f"{short_name(levels[-1])} {value}", "free": int(np.maximum(free[mine], 0).sum()),
                "fits": int(fit[mine].sum()), "wanted": wanted,
            })  # fmt: skip
        rows.sort(key=lambda row: (-int(row["fits"]), str(row["domain"])))
        return rows


def accelerator(resources: Sequence[str]) -> str:
    """The resource the map draws: a GPU (``*/gpu``), else DRA's devices of a class, else nothing."""
    for name in resources:
        if name.endswith("/gpu"):
            return name
    return next((name for name in resources if name.startswith("devices/")), "")


def _value(label: Any, row: int) -> str:
    """A node's value of a label, ``-`` where it has none."""
    found = int(label.ids[row])
    return str(label.values[found]) if found >= 0 else "-"


def _cells(total: int, held: Counter[int]) -> list[int]:
    """A node's cells: each owner's amount, gangs in order of their code, then others, then free."""
    scale = max(1, -(-total // MOST_CELLS))  # ceil: a node of 128 devices draws 64 cells of 2
    cells: list[int] = []
    for code in sorted(held, key=lambda c: (c == OTHERS, c)):
        cells.extend([code] * -(-held[code] // scale))
    count = -(-total // scale)
    return (cells + [FREE] * count)[:count] if total else []
