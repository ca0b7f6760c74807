"""Faults SimCluster's HTTP face injects: the failures real clusters produce, seeded and repeatable.

Rules match requests by verb (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``, ``bind``) and resource (plural, e.g. ``pods``), and may fail them (500, 429 with a
``Retry-After``, 409, 503) at a rate, or delay them. Besides rules: watches can be dropped after N
events, the next watches can be answered with 410 Expired, binds of chosen pods can fail, any verb on a
chosen object can fail (``failing``), and the whole server can be made unavailable (open watches end at
their next event or bookmark). Every decision draws from one seeded generator, and every fault injected
is counted. Apart from faults, the events of a resource's watches can be sent late (``watch_lag``: a
client's cache behind the store, as on a loaded host).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from scheduler.ports.sim.status import ApiError

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "bind"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRule:
    """Fail (``error_rate``) or delay (``latency`` plus up to ``jitter`` seconds) matching requests.

    Empty ``verbs`` or ``resources`` match every verb or resource.
    """

    verbs: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    error_rate: float = 0.0
    codes: tuple[int, ...] = (500,)
    retry_after: int = 1
    latency: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if unknown := self.verbs - VERBS:
            raise ValueError(f"unknown verbs {sorted(unknown)}; use {sorted(VERBS)}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate is a probability between 0 and 1")

    def matches(self, verb: str, resource: str) -> bool:
        return (not self.verbs or verb in self.verbs) and (not self.resources or resource in self.resources)


@dataclass
class Faults:
    """The fault plan of one server; change it at any time (tests switch faults on and off)."""

    seed: int = 0
    rules: list[FaultRule] = field(default_factory=list)
    drop_watch_after: int | None = None
    expire_next_watches: int = 0
    bind_failures: dict[str, int] = field(default_factory=dict)  # "namespace/pod" -> HTTP code
    #: (verb, "namespace/name") -> HTTP code: every such request fails so until the entry is removed.
    failing: dict[tuple[str, str], int] = field(default_factory=dict)
    unavailable: bool = False
    #: resource (plural) -> (least, most) seconds each event of its watches waits before it is sent, so that a
    #: watching client's cache lags the store as on a loaded host: whatever it decides from that cache races
    #: with writes it has not seen yet. Events keep their order (each waits behind the one before). A lag is
    #: how the cluster is, not a fault: ``clear`` keeps it, it is not counted in ``injected``, and it draws
    #: from its own generator, so that the same seed fails the same requests with or without it.
    watch_lag: dict[str, tuple[float, float]] = field(default_factory=dict)
    injected: Counter[str] = field(default_factory=Counter)
    #: Watch events sent late (``watch_lag``).
    lagged: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lag_random = random.Random(self.seed)

    def clear(self) -> None:
        """Stop every fault (a ``watch_lag`` stays: it is how the cluster is, not a fault)."""
        self.rules.clear()
        self.drop_watch_after = None
        self.expire_next_watches = 0
        self.bind_failures.clear()
        self.failing.clear()
        self.unavailable = False

    def decide(self, verb: str, resource: str, target: str = "") -> tuple[float, ApiError | None]:
        """The delay to apply and the error to return (or None) for one request."""
        if self.unavailable:
            self.injected["unavailable"] += 1
            return 0.0, ApiError(503, "the server is currently unable to handle the request")
        if verb == "bind" and target in self.bind_failures:
            code = self.bind_failures[target]
            self.injected[f"bind {code}"] += 1
            return 0.0, ApiError(code, f"injected failure binding {target}")
        failing = self.failing.get((verb, target))
        if failing is not None:
            self.injected[f"{verb} {failing}"] += 1
            return 0.0, ApiError(failing, f"injected failure: {verb} {target}")
        delay = 0.0
        for rule in self.rules:
            if not rule.matches(verb, resource):
                continue
            if rule.latency or rule.jitter:
                delay += rule.latency + self._random.uniform(0, rule.jitter)
            if rule.error_rate and self._random.random() < rule.error_rate:
                code = self._random.choice(rule.codes)
                self.injected[f"{verb} {resource} {code}"] += 1
                if code == 429:
                    return delay, ApiError(
                        429, "too many requests, please try again later", retry_after=rule.retry_after
                    )
                if code == 409:
                    return delay, ApiError(409, f"injected conflict on {resource}", reason="Conflict")
                return delay, ApiError(code, f"injected {code} on {verb} {resource}")
        return delay, None

    def lag(self, resource: str) -> float:
        """How long the next watch event of ``resource`` waits before it is sent (0 when it does not)."""
        bounds = self.watch_lag.get(resource)
        if bounds is None:
            return 0.0
        self.lagged += 1
        return self._lag_random.uniform(*bounds)

    def take_expired_watch(self) -> bool:
        if self.expire_next_watches > 0:
            self.expire_next_watches -= 1
            self.injected["watch 410"] += 1
            return True
        return False
