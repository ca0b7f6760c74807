"""Prometheus metrics of one scheduler instance (its own registry, so that tests can run several), and
their text exposition (format 0.0.4, which every Prometheus reads).

Written here rather than with prometheus_client: importing that library cost every start 50 ms of CPU,
a tenth of the CPU to the first bind, for exporters (an HTTP server, a push gateway client) that Phalanx
does not use; it needs three kinds of metric and one output format. The series are named as
prometheus_client names them (a counter's ``_total``; a histogram's ``_bucket``, ``_sum`` and ``_count``),
without its ``_created`` series.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence

#: What ``/metrics`` answers in.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Registry:
    """The metrics of one instance, in the order they were made."""

    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def register(self, metric: _Metric) -> None:
        if any(known.name == metric.name for known in self._metrics):
            raise ValueError(f"metric {metric.name} is registered twice")
        self._metrics.append(metric)

    def exposition(self) -> bytes:
        lines = []
        for metric in self._metrics:
            name = metric.name + ("_total" if metric.kind == "counter" else "")
            documentation = _escaped(metric.documentation)
            lines += [f"# HELP {name} {documentation}", f"# TYPE {name} {metric.kind}"]
            lines += [f"{sample}{_labels(labels)} {_number(value)}" for sample, labels, value in metric.samples()]
        return ("\n".join(lines) + "\n").encode()

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of one series (``phalanx_api_writes_total``, ``{"kind": "bind"}``); None if it has none."""
        wanted = dict(labels or {})
        for metric in self._metrics:
            for sample, given, value in metric.samples():
                if sample == name and given == wanted:
                    return value
        return None


class _Metric:
    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *, registry: Registry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Child] = {}
        if not self.labelnames:
            self._children[()] = self._child()
        registry.register(self)

    def _child(self) -> _Child:
        return _Child()

    def _labelled(self, values: tuple[object, ...]) -> _Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, given {values}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child()
        return child

    def samples(self) -> Iterator[tuple[str, dict[str, str], float]]:
        suffix = "_total" if self.kind == "counter" else ""
        for key, child in self._children.items():
            yield self.name + suffix, dict(zip(self.labelnames, key, strict=True)), child.value


class _Child:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _CounterChild(_Child):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount


class Counter(_Metric):
    kind = "counter"

    def _child(self) -> _CounterChild:
        return _CounterChild()

    def labels(self, *values: object) -> _CounterChild:
        return self._labelled(values)  # type: ignore[return-value]

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)


class _GaugeChild(_Child):
    __slots__ = ()

    def set(self, value: float) -> None:
        self.value = float(value)


class Gauge(_Metric):
    kind = "gauge"

    def _child(self) -> _GaugeChild:
        return _GaugeChild()

    def labels(self, *values: object) -> _GaugeChild:
        return self._labelled(values)  # type: ignore[return-value]

    def set(self, value: float) -> None:
        self.labels().set(value)


class _HistogramChild(_Child):
    __slots__ = ("bounds", "counts")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        super().__init__()  # value: the sum of what was observed
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf's own

    def observe(self, amount: float) -> None:
        self.value += amount
        if not math.isnan(amount):  # a NaN is in no bucket, as prometheus_client had it
            self.counts[bisect.bisect_left(self.bounds, amount)] += 1


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry,
    ) -> None:
        self.bounds = tuple(sorted(float(bound) for bound in buckets if bound != math.inf))
        super().__init__(name, documentation, labelnames, registry=registry)

    def _child(self) -> _HistogramChild:
        return _HistogramChild(self.bounds)

    def labels(self, *values: object) -> _HistogramChild:
        return self._labelled(values)  # type: ignore[return-value]

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)

    def samples(self) -> Iterator[tuple[str, dict[str, str], float]]:
        for key, child in self._children.items():
            assert isinstance(child, _HistogramChild)
            labels = dict(zip(self.labelnames, key, strict=True))
            seen = 0
            for bound, count in zip((*self.bounds, math.inf), child.counts, strict=True):
                seen += count
                yield f"{self.name}_bucket", {**labels, "le": _number(bound)}, float(seen)
            yield f"{self.name}_count", labels, float(seen)
            yield f"{self.name}_sum", labels, child.value


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    # Sorted, as prometheus_client wrote them: a text match on a scraped line finds the same bytes.
    escaped = (f'{name}="{_escaped(value, quote=True)}"' for name, value in sorted(labels.items()))
    return "{" + ",".join(escaped) + "}"


def _escaped(text: str, *, quote: bool = False) -> str:
    """As the format escapes a label's value (``quote``) or a help text: backslash, line break, quote."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    return "NaN" if math.isnan(value) else repr(float(value))


_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = Registry()
        self._scheduling(self.registry)
        self._preemption(self.registry)
        self._starvation(self.registry)

    def _scheduling(self, r: Registry) -> None:
        """The cycle, the queue, binding, permit's held room, leadership and the API writes."""
        self.attempts = Counter(
            "phalanx_schedule_attempts",
            "Scheduling attempts by result: scheduled, waiting, unschedulable, preempting, invalid",
            ["result"],
            registry=r,
        )
        self.gang_latency = Histogram(
            "phalanx_gang_e2e_latency_seconds",
            "From a gang's first member's creation to its last bind",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.placement_duration = Histogram(
            "phalanx_placement_duration_seconds",
            "Time to place one gang (topology.place)",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.bind_duration = Histogram(
            "phalanx_bind_duration_seconds",
            "Time of one pods/binding request (of the batch, for a gang's members bound together)",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.bind_errors = Counter("phalanx_bind_errors", "Failed binding requests by HTTP code", ["code"], registry=r)
        self.queue_depth = Gauge("phalanx_queue_depth", "Gangs in the queue by state", ["state"], registry=r)
        self.gang_timeouts = Counter(
            "phalanx_gang_timeouts",
            "Gangs whose permit timeout passed before their members arrived (the room they held released)",
            registry=r,
        )
        self.reserved = Gauge(
            "phalanx_reserved",
            "Requests held for members of waiting gangs, by resource (base units)",
            ["resource"],
            registry=r,
        )
        self.waiting_gangs = Gauge(
            "phalanx_waiting_gangs", "Gangs holding room for members that do not exist yet", registry=r
        )
        self.leader = Gauge("phalanx_leader", "1 while this instance holds the leader lease", registry=r)
        self.api_writes = Counter("phalanx_api_writes", "Writes to the API by kind", ["kind"], registry=r)
        self.api_write_errors = Counter(
            "phalanx_api_write_errors",
            "Writes the API server refused for good (403, 400, 422: not retried at once), by kind and HTTP code",
            ["kind", "code"],
            registry=r,
        )

    def _preemption(self, r: Registry) -> None:
        """Preemption searches, their victims, and how long a preemptor waited for its room."""
        self.preemption_attempts = Counter(
            "phalanx_preemption_attempts",
            "Preemption searches by result: preempted, no_victims (nothing would help), not_allowed "
            "(preemptionPolicy Never)",
            ["result"],
            registry=r,
        )
        self.preemption_victims = Counter(
            "phalanx_preemption_victims",
            "Pods evicted to make room, by unit: gang (a whole gang), surplus (beyond a gang's minimum), pod",
            ["reason"],
            registry=r,
        )
        self.preemption_refused = Counter(
            "phalanx_preemption_victims_refused",
            "Victims whose DELETE the API server refused for good (403, an admission policy): their unit runs "
            "partly until it is accepted, tried again every preemption.refusedRetrySeconds",
            registry=r,
        )
        self.preemption_resumed = Counter(
            "phalanx_preemption_victims_resumed",
            "Victims whose eviction an earlier leader began (their DisruptionTarget condition) and this one "
            "finished, with the rest of their unit",
            registry=r,
        )
        self.preemption_to_bind = Histogram(
            "phalanx_preemption_to_bind_seconds",
            "From a preemption decision to its preemptor gang's binding",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def _starvation(self, r: Registry) -> None:
        """Domain reservations for gangs that waited too long."""
        self.starvation_reservations = Gauge(
            "phalanx_starvation_reservations",
            "Domain reservations standing for gangs that waited too long, by topology level",
            ["level"],
            registry=r,
        )
        self.starvation_reserved = Counter(
            "phalanx_starvation_reservations_made",
            "Domain reservations made for gangs that waited too long",
            registry=r,
        )
        self.starvation_released = Counter(
            "phalanx_starvation_reservations_released",
            "Domain reservations ended, by reason: bound (its gang bound), expired (starvation.maxReserveSeconds), "
            "displaced (a more important gang took the level's turn), nodes_gone, deleted, waiting (for members), "
            "invalid, preempting (it makes room by preemption), unresolvable (no room could ever come)",
            ["reason"],
            registry=r,
        )
        self.starvation_to_bind = Histogram(
            "phalanx_starvation_reservation_to_bind_seconds",
            "From a domain reservation to its gang's binding",
            buckets=(*_LATENCY_BUCKETS, 1800, 3600, 7200),
            registry=r,
        )

    def exposition(self) -> bytes:
        return self.registry.exposition()
