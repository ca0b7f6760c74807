"""`scripts/bench_e2e.py --real` keeps running against the real server and keeps its output shape (its
figures are not asserted here; they are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.support import ROOT


def test_the_real_side_by_side_benchmark_runs_all_three_and_reports_pods_per_second() -> None:
    completed = subprocess.run(
        [sys.executable, "scripts/bench_e2e.py", "--real", "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    report = json.loads(completed.stdout)
    for name in ("phalanx", "kube-scheduler", "raw binding"):
        assert report[name]["pods"] == 256 and report[name]["pods_per_s"] > 0, report[name]
    assert "machine:" in completed.stderr and "command: scripts/bench_e2e.py --real --quick --json" in completed.stderr
