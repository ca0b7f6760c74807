"""The benchmark scripts keep running and keep their output shape (their figures are not asserted here)."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_quick(script: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run a benchmark with --quick --json; its report, and the process (stderr has the header)."""
    completed = subprocess.run(
        [sys.executable, script, "--quick", "--json"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=180
    )
    return completed, json.loads(completed.stdout)


def test_bench_placement_quick_json_has_every_scenario() -> None:
    completed, report = run_quick("scripts/bench_placement.py")
    for scenario in ("basic_3pod_5k", "rack_4pod_5k", "block_1000pod_20k", "block_1000pod_20k_fit"):
        assert {"pods_per_s", "ms_per_gang_p50", "ms_per_gang_p99"} <= report[scenario].keys()
    assert report["growth"]["nodes"] == [1280, 5120, 20480]
    assert report["block_1000pod_20k"]["note"].startswith("infeasible: Gang team/g0 needs 1000 pods in one")
    assert report["block_1000pod_20k_fit"]["note"].startswith("placed in")
    assert "machine:" in completed.stderr and "command: scripts/bench_placement.py --quick --json" in completed.stderr


def test_bench_simcluster_quick_json_has_every_scenario() -> None:
    completed, report = run_quick("scripts/bench_simcluster.py")
    for scenario in ("in_process", "http_watch", "http_create"):
        assert {"objects", "seconds", "objects_per_s"} <= report[scenario].keys()
    assert report["in_process"]["objects"] == 2048 + 10_000
    assert "machine:" in completed.stderr


def test_bench_e2e_quick_json_binds_every_pod_and_reports_memory() -> None:
    completed = subprocess.run(
        [sys.executable, "scripts/bench_e2e.py", "--quick", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    report = json.loads(completed.stdout)
    for scenario in ("sim_8pod_5k", "http_8pod_1k", "bind_fanout_1k"):
        assert report[scenario]["pods_per_s"] > 0 and report[scenario]["pods"] > 0
    assert 0 < report["rss_20k_100k"]["peak_rss_mb"] < 2000
    assert "machine:" in completed.stderr and "command: scripts/bench_e2e.py --quick --json" in completed.stderr


def test_bench_quality_quick_json_compares_every_algorithm() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "scripts/bench_quality.py",
            "--quick",
            "--json",
            "--only",
            "saturation",
            "optimum",
            "adversarial",
            "elastic",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    report = json.loads(completed.stdout)
    names = {"phalanx", "kube-least", "kube-most", "upstream-tas", "kueue-bestfit", "first-fit", "random"}
    assert set(report["saturation"]["1024_nodes"]) == names
    assert {"gpu_allocation", "stranded_gpus", "free_racks", "span_ratio"} <= report["saturation"]["1024_nodes"][
        "phalanx"
    ].keys()
    assert names <= set(report["optimum"]) and names <= set(report["optimum_arrival_order"])
    assert 0 < report["optimum"]["phalanx"]["share_min"] <= report["optimum"]["phalanx"]["share_mean"] <= 1
    assert names <= set(report["elastic"])
    assert 0 < report["elastic"]["phalanx"]["extras_placed"] <= report["elastic"]["instances"]["optimum_extras"]
    assert "machine:" in completed.stderr


def test_bench_preemption_quick_json_compares_with_the_optimum_and_the_baselines() -> None:
    completed, report = run_quick("scripts/bench_preemption.py")
    quality = report["quality"]
    assert quality["instances"] == 10 and quality["equal_to_optimum"] >= 9  # the full run's target is 95%
    assert set(quality["algorithms"]) == {"phalanx", "exact", "per-pod (kube-scheduler)", "per-node (Volcano-like)"}
    assert quality["algorithms"]["phalanx"]["gangs_broken"] == 0  # whole units only: a failure, not a figure
    assert report["decision"]["nodes"] == 1280 and report["decision"]["victims"] > 0
    assert "machine:" in completed.stderr and "command: scripts/bench_preemption.py --quick --json" in completed.stderr


def test_bench_timeline_quick_json_runs_a_simulated_day_of_arrivals_and_endings() -> None:
    completed, report = run_quick("scripts/bench_timeline.py")
    day = report["day"]
    assert day["nodes"] == 128 and day["jobs"] == 90 and not day["timed_out"]
    assert day["pods_created"] > day["pods_bound"] > day["pods_ended"] > 0  # Jobs ended, services did not
    assert 2.5 < day["simulated_hours"] <= 3
    assert "machine:" in completed.stderr and "command: scripts/bench_timeline.py --quick --json" in completed.stderr


def test_bench_devices_quick_json_places_a_gang_that_claims_devices() -> None:
    completed, report = run_quick("scripts/bench_devices.py")
    whole, partitions = report["whole"], report["partitions"]
    assert whole["nodes"] == 1024 and whole["devices"] == 8192
    assert whole["decision_ms"] > 0 and whole["index_s"] > 0
    assert partitions["nodes"] == 32 and partitions["devices"] == 32 * 8 * 13  # 13 MIG partitions per GPU
    assert partitions["decision_ms"] > 0 and partitions["prebind_ms"] > 0
    assert "machine:" in completed.stderr and "command: scripts/bench_devices.py --quick --json" in completed.stderr


def test_the_philly_replay_reads_a_baseline_from_its_cache_and_replays_phalanx_rows(tmp_path: Path) -> None:
    """A baseline row replayed once is read back (with the same harness and trace); Phalanx's own rows, whose
    figures change with Phalanx, are always replayed. A changed trace is a different harness version."""
    scripts = str(ROOT / "scripts")
    sys.path.insert(0, scripts)
    try:
        import bench_quality  # noqa: PLC0415
        from quality.cache import ReplayCache  # noqa: PLC0415
    finally:
        sys.path.remove(scripts)
    trace = tmp_path / "philly.csv"
    trace.write_text("timestamp,duration,num_gpus\n2017-10-03 00:00:00,60,1\n")
    cache = ReplayCache(tmp_path / "cache")
    cache.put(str(trace), "kueue-bestfit-load0.85-seed0-1h-14d", {"p95_wait_32plus_s": 123.0})
    cache.put(str(trace), "phalanx-load0.85-seed0-1h-14d", {"p95_wait_32plus_s": 456.0})
    bench_quality.CACHE = cache

    name, _, _, figures, seconds = bench_quality._replay_one(("kueue-bestfit", 0.85, 0, 1.0, 14.0, str(trace), True))

    assert (name, figures, seconds) == ("kueue-bestfit", {"p95_wait_32plus_s": 123.0}, 0.0)
    # A phalanx row is replayed, whatever was kept: this trace of one job has no window to replay.
    with pytest.raises(ValueError, match="no window"):
        bench_quality._replay_one(("phalanx", 0.85, 0, 1.0, 14.0, str(trace), True))
    trace.write_text("timestamp,duration,num_gpus\n2017-10-03 00:00:00,60,2\n")
    assert cache.get(str(trace), "kueue-bestfit-load0.85-seed0-1h-14d") is None


def test_bench_start_quick_json_times_each_milestone_of_phalanx_run_s_start() -> None:
    completed, report = run_quick("scripts/bench_start.py")
    marks = ("discovered", "informers synced", "leading", "first bind", "last bind")
    walls = [report[f"{mark} wall"] for mark in marks]
    assert walls == sorted(walls) and walls[0] > 0  # in the order a start reaches them
    assert report["first bind cpu"] >= report["informers synced cpu"] > 0 and report["imports cpu"] > 0
    assert report["per pod ms"] > 0 and report["per pod from leading ms"] > 0
    assert set(report["met"]) == {"first bind", "per pod"}
    # The first pod bound as the benchmark's watch sees it: after the loop began, and not after the last.
    assert report["leading wall"] < report["bound seen wall"] <= report["last bind wall"]
    assert "machine:" in completed.stderr and "command: scripts/bench_start.py --quick --json" in completed.stderr


def test_bench_events_quick_json_measures_each_kind_of_pod_event_and_compile() -> None:
    completed, report = run_quick("scripts/bench_events.py")
    assert set(report) == {"added us", "compile us per gang", "bound us", "rebound us per gang"}
    assert all(value > 0 for value in report.values())
    assert "machine:" in completed.stderr and "command: scripts/bench_events.py --quick --json" in completed.stderr


def test_bench_view_quick_json_measures_a_picture() -> None:
    completed, report = run_quick("scripts/bench_view.py")
    assert {"nodes", "pods", "picture_ms", "json_kb", "gzip_kb", "every_s"} <= report["512"].keys()
    assert report["512"]["pods"] == 3906 and report["512"]["gzip_kb"] < report["512"]["json_kb"]
    assert "machine:" in completed.stderr and "command: scripts/bench_view.py --quick --json" in completed.stderr
