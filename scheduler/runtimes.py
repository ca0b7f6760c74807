"""How long pods run, learned from the pods the scheduler has watched end: a survival estimate per kind.

A starving gang's reservation should go to the domain that empties soonest (``starvation.py``). Pods that
set ``activeDeadlineSeconds`` say when they end at the latest; most training pods say nothing, and "fewest
GPUs in use" then picks nodes whose 1-GPU jobs run for hours. So the scheduler learns:

- **Kinds.** Pods of one namespace, priority and request (what a pod asks for, per resource) run alike
  more than pods in general do. Each kind keeps the runtimes of its last ``starvation.runtimeHistory``
  pods to end: a pod that finished (start to its containers' last ``finishedAt``, else to when it was seen
  finished) or that was deleted while running (its room came back then, which is what a drain waits for).
  Pods Phalanx preempted are left out: they did not end by themselves.
- **Survival.** Per kind, the Kaplan-Meier estimate of the runtime, with the pods still running counted as
  *censored* at their age (they have run that long at least): without them the first runtimes learned are
  the short ones, and every guess would be too soon. A pod that has run for ``a`` is expected to end
  after ``E[T - a | T > a]`` more. A kind with fewer than ``MIN_RUNTIMES`` ended pods is guessed from
  every kind's together; with fewer than that in all, nothing is guessed (as before: unknown).
- **Beyond what was seen.** The estimate says nothing of when pods end past the longest runtime seen to
  end. What survival is left there (pods still running that are older) is put at twice the oldest age
  seen; a pod older than that is expected to run as long again as it has (the usual guess for lifetimes
  with a heavy tail). For the early end (below), a pod older than every runtime seen to end may end any
  time: within ``1 - c`` of its age.
- **Backfill.** A gang whose pods set no deadline may use a reservation's room only if it is expected to
  end before the reservation's shadow time with ``starvation.backfillConfidence`` (``c``): its runtime is
  taken as the one its kind does not outlast in ``c`` of the runs seen, and the shadow time as early as
  the reserved nodes could empty, each pod there ending as soon as a share ``1 - c`` of its kind does
  at its age. (The mean would let in backfill that ends after the nodes emptied half the time.)

Nothing is written to the API. A new leader relearns from what it lists: running pods (their
``startTime``, as censored runtimes) and finished pods still listed (their runtimes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from topology.domains import FloatArray, IntArray

#: Ended pods a kind needs before its own estimate is used (else every kind's together).
MIN_RUNTIMES = 20
#: Kinds learned separately at most; pods of kinds beyond them are learned together, as the last one.
MAX_KINDS = 4096


@dataclass(frozen=True, slots=True)
class Survival:
    """A runtime distribution: the runtimes at which pods ended, ascending, and the probability of each."""

    times: FloatArray
    mass: FloatArray
    #: Per index i, the probability left from times[i] on, and the runtime it holds (mass * time), summed;
    #: one entry more, 0, past the end.
    left: FloatArray
    left_time: FloatArray
    #: The longest runtime seen to end, and the longest seen at all (a pod still running may be older):
    #: past the one, when pods end is not known; past the other, not even whether they do.
    longest_ended: float
    longest_seen: float

    @classmethod
    def estimate(cls, ended: FloatArray, running: FloatArray) -> Survival:
        """Kaplan-Meier, from the runtimes of pods that ended and the ages of pods still running."""
        times = np.concatenate([ended, running])
        ends = np.concatenate([np.ones(len(ended)), np.zeros(len(running))])
        order = np.lexsort((-ends, times))  # at a tie, the end comes before the censoring
        times, ends = times[order], ends[order]
        at_risk = len(times) - np.arange(len(times))
        surviving = np.cumprod(1.0 - ends / at_risk)
        before = np.concatenate([[1.0], surviving[:-1]])
        seen = ends == 1.0
        ended_at, mass = times[seen], (before - surviving)[seen]
        longest_ended = float(ended_at[-1]) if len(ended_at) else 0.0
        if surviving[-1] > 0:  # survival left past the longest runtime: put where nothing contradicts it
            ended_at = np.append(ended_at, 2.0 * max(float(times[-1]), 1.0))
            mass = np.append(mass, surviving[-1])
        left = np.append(np.cumsum(mass[::-1])[::-1], 0.0)
        left_time = np.append(np.cumsum((mass * ended_at)[::-1])[::-1], 0.0)
        return cls(ended_at, mass, left, left_time, longest_ended, float(times[-1]))

    def remaining(self, ages: FloatArray) -> FloatArray:
        """Expected seconds left for pods that have run ``ages``: ``E[T - a | T > a]``; as long again as its
        age for a pod older than every runtime seen."""
        after = np.searchsorted(self.times, ages, side="right")
        left = self.left[after]
        with np.errstate(divide="ignore", invalid="ignore"):
            known = (left > 1e-12) & (ages < self.longest_seen)
            expected = np.where(known, self.left_time[after] / left - ages, ages)
        return np.maximum(expected, 0.0)

    def remaining_within(self, ages: FloatArray, share: float) -> FloatArray:
        """Seconds within which ``share`` of pods that have run ``ages`` end (a quantile of ``T - a`` given
        ``T > a``); ``share`` of its age for a pod older than every runtime seen to end (where the survival
        left is only known to be there, not when it ends)."""
        if share <= 0:
            return np.zeros(len(ages))
        after = np.searchsorted(self.times, ages, side="right")
        left = self.left[after]
        # The first index past which at most (1 - share) of the survival beyond the age is left.
        past = np.searchsorted(-self.left, -(left * (1.0 - share)) - 1e-12, side="left")
        ended = self.times[np.clip(past - 1, 0, len(self.times) - 1)]
        return np.where((left > 1e-12) & (ages < self.longest_ended), np.maximum(ended - ages, 0.0), share * ages)

    def quantile(self, share: float) -> float:
        """The runtime that ``share`` of pods do not outlast."""
        cumulative = np.cumsum(self.mass)
        return float(self.times[min(int(np.searchsorted(cumulative, share - 1e-12)), len(self.times) - 1)])


class Runtimes:
    """The runtimes learned, per kind; :meth:`estimate` turns them, with the pods running now, into guesses."""

    def __init__(self, history: int) -> None:
        self.history = history
        self._kinds: dict[tuple[str, int, int], int] = {}
        #: Per kind, the last ``history`` pods that ended: (when each started, how long it ran).
        self._ended: list[deque[tuple[float, float]]] = []

    def kind(self, namespace: str, priority: int, requests: object) -> int:
        """The kind of a pod of ``namespace`` and ``priority`` asking ``requests`` (one shared object per
        distinct request, as ``ClusterState`` keeps them: compared by identity)."""
        key = (namespace, priority, id(requests))
        found = self._kinds.get(key)
        if found is None:
            if len(self._ended) == MAX_KINDS:
                return MAX_KINDS - 1  # not kept: the table of kinds stays bounded too
            found = self._kinds[key] = len(self._ended)
            self._ended.append(deque(maxlen=self.history))
        return found

    def ended(self, kind: int, started: float, seconds: float) -> None:
        """A pod of ``kind`` that started at ``started`` (wall seconds) ended after running ``seconds``."""
        if 0 <= kind < len(self._ended) and seconds >= 0:
            self._ended[kind].append((started, seconds))

    def estimate(self, kinds: IntArray, ages: FloatArray, now: float) -> Estimate:
        """The survival of every kind with enough runtimes, and of all together, with ``ages`` (of pods
        running now, of ``kinds``; nan where unknown) counted as censored runtimes: those that started
        since the earliest start among the runtimes kept, the same pods the kept ones were drawn from (the
        older ones would count as surviving what the runtimes forgotten saw end)."""
        known = ~np.isnan(ages)
        kinds, ages = kinds[known], ages[known]
        kept = [np.array(runtimes, dtype=np.float64).reshape(-1, 2) for runtimes in self._ended]
        every = np.concatenate(kept) if kept else np.zeros((0, 2))
        pooled = None
        if len(every) >= MIN_RUNTIMES:
            pooled = Survival.estimate(every[:, 1], ages[ages <= now - every[:, 0].min()])
        own = {}
        for kind, runtimes in enumerate(kept):
            if len(runtimes) >= MIN_RUNTIMES:
                censored = ages[(kinds == kind) & (ages <= now - runtimes[:, 0].min())]
                own[kind] = Survival.estimate(runtimes[:, 1], censored)
        return Estimate(own, pooled)


@dataclass(frozen=True, slots=True)
class Estimate:
    """Guesses of when pods end, from :meth:`Runtimes.estimate` (one per sync of the loop)."""

    own: dict[int, Survival]
    pooled: Survival | None

    def survival(self, kind: int) -> Survival | None:
        return self.own.get(kind, self.pooled)

    def ends(self, kinds: IntArray, ages: FloatArray, now: float, *, share: float | None = None) -> FloatArray:
        """When pods of ``kinds`` that have run ``ages`` (nan: unknown) are expected to end (inf: no guess);
        with ``share``, the moment by which that share of such pods has ended instead of the mean."""
        ends = np.full(len(kinds), np.inf)
        known = ~np.isnan(ages)
        for kind in np.unique(kinds[known]).tolist():
            survival = self.survival(kind)
            if survival is not None:
                chosen = known & (kinds == kind)
                ages_now = ages[chosen]
                left = survival.remaining(ages_now) if share is None else survival.remaining_within(ages_now, share)
                ends[chosen] = now + left
        return ends

    def runtime(self, kind: int, confidence: float) -> float | None:
        """The runtime a new pod of ``kind`` does not outlast with ``confidence``; None when not known."""
        survival = self.survival(kind)
        return survival.quantile(confidence) if survival is not None else None
