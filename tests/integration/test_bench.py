"""`scripts/bench_e2e.py --real` keeps running against the real server and keeps its output shape (its
figures are not asserted here; they are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scripts.controlplane import assets_dir
from tests.integration.support import ROOT


def has_kube_scheduler() -> bool:
    assets = assets_dir()
    return assets is not None and os.access(assets / "kube-scheduler", os.X_OK)


def test_the_real_side_by_side_benchmark_runs_all_three_and_reports_pods_per_second() -> None:
    completed = subprocess.run(
        [sys.executable, "scripts/bench_e2e.py", "--real", "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    report = json.loads(completed.stdout)
    measured = ("phalanx", "raw binding", *(("kube-scheduler",) if has_kube_scheduler() else ()))
    for name in measured:
        assert report[name]["pods"] == 256 and report[name]["pods_per_s"] > 0, report[name]
    if not has_kube_scheduler():  # setup-envtest's directories hold only kube-apiserver and etcd
        assert report["kube-scheduler"] is None
    assert "machine:" in completed.stderr and "command: scripts/bench_e2e.py --real --quick --json" in completed.stderr
