"""The Grafana dashboard and the alerts in ``manifests/optional/`` ask only for what Phalanx exports: every
metric a query names is one of ``scheduler/metrics.py``'s (with the suffix its type exposes), grouped only
by labels it has, and the objects are what the Grafana sidecar and the Prometheus Operator load."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from scheduler.metrics import Counter, Gauge, Histogram, Metrics

OPTIONAL = Path(__file__).resolve().parent.parent / "manifests" / "optional"
SUFFIXES = {Counter: ("_total",), Gauge: ("",), Histogram: ("_bucket", "_sum", "_count")}
#: PromQL's own words, which look like names in an expression.
PROMQL = {"sum", "max", "min", "rate", "increase", "histogram_quantile", "by", "or", "absent", "le", "and"}


def exported() -> dict[str, tuple[str, ...]]:
    """Every series name Phalanx exports, with the labels of its metric."""
    names: dict[str, tuple[str, ...]] = {}
    for metric in vars(Metrics()).values():
        if isinstance(metric, Counter | Gauge | Histogram):
            for suffix in SUFFIXES[type(metric)]:
                names[metric.name + suffix] = metric.labelnames
    return names


def dashboard() -> dict[str, Any]:
    config = yaml.safe_load((OPTIONAL / "grafana-dashboard.yaml").read_text())
    assert config["kind"] == "ConfigMap" and config["metadata"]["labels"]["grafana_dashboard"] == "1"
    found: dict[str, Any] = json.loads(config["data"]["phalanx.json"])
    return found


def rules() -> list[dict[str, Any]]:
    rule = yaml.safe_load((OPTIONAL / "prometheus-rules.yaml").read_text())
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    return [item for group in rule["spec"]["groups"] for item in group["rules"]]


def expressions() -> list[str]:
    panels = [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]
    return panels + [item["expr"] for item in rules()]


def unknown(expr: str, names: dict[str, tuple[str, ...]]) -> list[str]:
    """The metrics ``expr`` names that are not exported, and the labels it groups by that they lack."""
    metrics = [name for name in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if name.startswith("phalanx_")]
    problems = [name for name in metrics if name not in names]
    for labels in re.findall(r"by \(([^)]*)\)", expr):
        for label in (part.strip() for part in labels.split(",")):
            if label != "le" and not any(label in names.get(name, ()) for name in metrics):
                problems.append(f"label {label}")
    return problems


def test_every_query_names_a_metric_phalanx_exports_and_its_labels() -> None:
    names = exported()
    assert "phalanx_schedule_attempts_total" in names and "phalanx_gang_e2e_latency_seconds_bucket" in names
    found = {expr: unknown(expr, names) for expr in expressions()}
    assert len(found) >= 15, "the dashboard and the rules lost their queries"
    assert {expr: problems for expr, problems in found.items() if problems} == {}


def test_the_query_check_finds_a_metric_or_a_label_that_does_not_exist() -> None:
    names = exported()
    assert unknown("sum(rate(phalanx_binds_total[5m]))", names) == ["phalanx_binds_total"]
    assert unknown("sum by (node) (phalanx_queue_depth)", names) == ["label node"]
    assert unknown("sum by (state) (phalanx_queue_depth)", names) == []


def test_the_dashboard_covers_what_operators_watch_and_the_alerts_say_what_to_do() -> None:
    board = dashboard()
    assert board["uid"] == "phalanx-scheduler" and board["templating"]["list"][0]["type"] == "datasource"
    queried = " ".join(expressions())
    for metric in ("queue_depth", "gang_e2e_latency", "bind_errors", "preemption_attempts", "starvation", "leader"):
        assert f"phalanx_{metric}" in queried, metric
    alerts = {item["alert"]: item for item in rules()}
    assert set(alerts) >= {"PhalanxNoLeader", "PhalanxBindsRefused", "PhalanxGangsTimingOut"}
    for item in alerts.values():
        assert item["labels"]["severity"] in ("critical", "warning") and item["annotations"]["description"]
