"""``/metrics`` as Prometheus reads it: the exposition of ``scheduler/metrics.py`` parsed by the Prometheus
client library's own parser, series by series, with the names prometheus_client gave them before."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.metrics import Counter, Gauge, Histogram, Metrics, Registry


def parsed(registry: Registry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(registry.exposition().decode())
        for sample in family.samples
    }


def test_every_kind_of_metric_reads_back_as_prometheus_reads_it() -> None:
    registry = Registry()
    writes = Counter("phalanx_api_writes", "Writes by kind", ["kind"], registry=registry)
    leader = Gauge("phalanx_leader", 'Said with "quotes",\na line break and a \\ backslash', registry=registry)
    latency = Histogram("phalanx_bind_duration_seconds", "Binds", buckets=(0.01, 0.1, 1), registry=registry)
    writes.labels("bind").inc()
    writes.labels("bind").inc(2)
    writes.labels('ev"ent\\\n').inc()  # a label value the format must escape
    leader.set(1)
    for took in (0.005, 0.01, 0.5, 7):
        latency.observe(took)
    assert parsed(registry) == {
        ("phalanx_api_writes_total", (("kind", "bind"),)): 3.0,
        ("phalanx_api_writes_total", (("kind", 'ev"ent\\\n'),)): 1.0,
        ("phalanx_leader", ()): 1.0,
        ("phalanx_bind_duration_seconds_bucket", (("le", "0.01"),)): 2.0,  # a bound holds what equals it
        ("phalanx_bind_duration_seconds_bucket", (("le", "0.1"),)): 2.0,
        ("phalanx_bind_duration_seconds_bucket", (("le", "1.0"),)): 3.0,
        ("phalanx_bind_duration_seconds_bucket", (("le", "+Inf"),)): 4.0,
        ("phalanx_bind_duration_seconds_count", ()): 4.0,
        ("phalanx_bind_duration_seconds_sum", ()): pytest.approx(7.515),
    }
    families = {family.name: family for family in text_string_to_metric_families(registry.exposition().decode())}
    assert families["phalanx_leader"].documentation == 'Said with "quotes",\na line break and a \\ backslash'
    assert {name: family.type for name, family in families.items()} == {
        "phalanx_api_writes": "counter",
        "phalanx_leader": "gauge",
        "phalanx_bind_duration_seconds": "histogram",
    }
    assert registry.value("phalanx_api_writes_total", {"kind": "bind"}) == 3.0
    assert registry.value("phalanx_api_writes_total", {"kind": "other"}) is None


def test_the_scheduler_s_metrics_are_all_exposed_before_anything_happens() -> None:
    """An unlabelled metric shows 0 from the start (an alert on its rate needs the series); a labelled one
    shows a series per label once it is used."""
    metrics = Metrics()
    shown = parsed(metrics.registry)
    assert shown[("phalanx_gang_timeouts_total", ())] == 0.0
    assert shown[("phalanx_gang_e2e_latency_seconds_count", ())] == 0.0
    assert not any(name == "phalanx_api_writes_total" for name, _ in shown)
    metrics.api_write_errors.labels("event", 422).inc()
    assert parsed(metrics.registry)[("phalanx_api_write_errors_total", (("code", "422"), ("kind", "event")))] == 1.0
    # Labels in sorted order, as prometheus_client wrote them: a text match on a scraped line still finds it.
    assert b'phalanx_api_write_errors_total{code="422",kind="event"} 1.0\n' in metrics.exposition()
    metrics.bind_duration.observe(float("nan"))  # in no bucket, as before
    assert parsed(metrics.registry)[("phalanx_bind_duration_seconds_count", ())] == 0.0


def test_misuse_is_refused() -> None:
    registry = Registry()
    writes = Counter("phalanx_api_writes", "Writes by kind", ["kind"], registry=registry)
    with pytest.raises(ValueError, match="only goes up"):
        writes.labels("bind").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        writes.labels("bind", "extra")
    with pytest.raises(ValueError, match="registered twice"):
        Gauge("phalanx_api_writes", "again", registry=registry)
