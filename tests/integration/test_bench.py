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
        cores = report[name]["cores_in_window"]  # what the machine's cores went to over the bind window
        binder = () if name == "raw binding" else (name,)
        assert {"kube-apiserver", "etcd", *binder} <= cores.keys() and cores["kube-apiserver"] > 0, cores
    if not has_kube_scheduler():  # setup-envtest's directories hold only kube-apiserver and etcd
        assert report["kube-scheduler"] is None
    assert "machine:" in completed.stderr and "command: scripts/bench_e2e.py --real --quick --json" in completed.stderr


def test_the_upstream_gang_benchmark_binds_every_gang_whole_with_both_schedulers_and_counts_their_writes() -> None:
    """``--upstream-gangs``: kube-scheduler 1.36's own gang scheduling (its feature gates on) and Phalanx each
    bind the same v1alpha2 gangs; the rack-required ones land in one rack each, with either scheduler."""
    command = [sys.executable, "scripts/bench_e2e.py", "--real", "--upstream-gangs", "--quick", "--only", "burst"]
    completed = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    if not has_kube_scheduler():  # setup-envtest's directories: nothing to compare with, and it says so
        assert completed.returncode != 0 and "has no kube-scheduler" in completed.stderr
        return
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    for name in ("phalanx", "kube-scheduler"):
        spread = report["burst: 30 gangs of 3"][name]
        racked = report["burst: 20 gangs of 4, one rack each"][name]
        assert racked["in_one_rack"] == 20 and racked["racks_max"] == 1, (name, racked)
        assert 0 < spread["first_bind_s"] <= spread["last_bind_s"] <= spread["last_write_s"], (name, spread)
        (writes,) = (run["writes"] for run in spread["runs"])
        assert writes["pods/binding"] == 90 and writes["events"] >= 90, (name, writes)
    assert report["burst: 30 gangs of 3"]["phalanx"]["in_one_rack"] == 30
