"""Prometheus metrics of one scheduler instance (its own registry, so that tests can run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._scheduling(self.registry)
        self._preemption(self.registry)
        self._starvation(self.registry)

    def _scheduling(self, r: CollectorRegistry) -> None:
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

    def _preemption(self, r: CollectorRegistry) -> None:
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

    def _starvation(self, r: CollectorRegistry) -> None:
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
        return generate_latest(self.registry)
