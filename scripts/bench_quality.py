#!/usr/bin/env python3
"""Placement quality (issue 7): Phalanx beside the placers people use today, on the same arrays.

  saturation   clusters of 1,024 and 5,120 nodes (32 nodes per rack, 8 racks per block) filled with a
               seeded mix of gangs (1-1,024 GPUs; no constraint, preferred rack, required rack or
               required block) asking for as many GPUs as the cluster has, in arrival order; a size of
               gang is no longer offered after its first rejection. GPU allocation, stranded GPUs,
               wholly free racks and blocks, and racks spanned over the fewest possible.
  optimum      small instances (64 nodes, half already partly used; up to 30 gangs asking 90-100% of
               what is left) solved exactly with scipy.optimize.milp; each algorithm's placed GPUs as
               a share of the optimum, gangs offered largest first ("optimum") and as drawn
               ("optimum_arrival_order").
  philly       the Philly trace through the real queue and scheduling cycle (simulated clock, binds
               at once): a seeded 14-day window compressed to 70/85/95% offered load of 1,024 nodes,
               replayed for some hours; utilisation and p50/p95 queueing delay by gang size. Phalanx
               runs three ways: as configured by default (domain reservations for gangs that waited
               too long, pods without deadlines), with every pod's activeDeadlineSeconds set from its
               job's duration (so that short jobs may backfill reserved room), and without
               reservations (greedy, as before issue 16). The baselines place without reservations.
  adversarial  single-GPU jobs alternating with gangs of a whole rack that must share one rack.
  elastic      6 elastic gangs (2-4 whole-node pods each at least, 2-4 more wanted, one rack each) on 64
               nodes whose racks are partly taken, solved exactly as in "optimum": each algorithm's placed
               GPUs as a share of the optimum, and the extra pods it placed beside the optimum's.

Figures are medians over seeds (5, or 1 with --quick), with the spread (min-max) where it matters.
--plots DIR writes the PNG pictures of docs/benchmarks.md.

The Philly replay is the long one (about 90 s per row, load and seed at 95%). `--rows phalanx
phalanx-greedy --loads 0.95` measures one mode at one load alone. The baselines' figures do not depend on
Phalanx's placement or reservations: they are kept under ~/.cache/phalanx/bench-quality (or
$XDG_CACHE_HOME), per harness version (scripts/quality/cache.py), and read back; --no-cache replays them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchinfo import machine
from quality.baselines import algorithms
from quality.cache import ReplayCache
from quality.optimum import optimum
from quality.replay import TRACE, Replay, read_trace, stats, window
from quality.saturation import run_stream, summary
from quality.workloads import (
    SIZES,
    adversarial_stream,
    cluster,
    elastic_instance,
    saturation_stream,
    small_instance,
)

from scheduler.logs import configure

NAMES = list(algorithms())
#: The Philly replay's baselines do not change with Phalanx's placement or reservations: their figures are
#: kept per harness version (``quality.replay.HARNESS_VERSION`` and the harness's source) and read back.
CACHE = ReplayCache()
#: Rows of the Philly replay beyond the placers: (placer, domain reservations, pods set activeDeadlineSeconds).
REPLAYED = {
    "phalanx": ("phalanx", True, False),
    "phalanx+deadlines": ("phalanx", True, True),
    "phalanx-greedy": ("phalanx", False, False),
    **{name: (name, False, False) for name in NAMES if name != "phalanx"},
}
CACHED = frozenset(name for name in REPLAYED if not name.startswith("phalanx"))


def spread(values: list[float]) -> list[float]:
    return [round(min(values), 4), round(max(values), 4)]


def saturation(sizes: list[int], seeds: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    report: dict[str, Any] = {}
    pictures: dict[str, Any] = {}
    for nodes in sizes:
        size = SIZES[nodes]
        per_algorithm: dict[str, dict[str, list[float]]] = {name: {} for name in NAMES}
        for seed in seeds:
            gangs = saturation_stream(size, seed)
            for name, placer in algorithms(seed).items():
                result = run_stream(cluster(size), gangs, placer)
                for key, value in summary(result).items():
                    per_algorithm[name].setdefault(key, []).append(value)
                if nodes == sizes[0] and seed == seeds[0]:
                    pictures[name] = result.snapshot
        report[size.name] = {
            name: {
                **{key: round(statistics.median(values), 4) for key, values in figures.items()},
                "gpu_allocation_spread": spread(figures["gpu_allocation"]),
                "span_ratio_spread": spread(figures["span_ratio"]),
            }
            for name, figures in per_algorithm.items()
        }
    return report, pictures


def optimum_shares(seeds: list[int], per_seed: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for order in ("largest-first", "arrival"):
        shares: dict[str, list[float]] = {name: [] for name in NAMES}
        solved, unproven, solve_seconds = 0, 0, []
        for seed in seeds:
            for i in range(per_seed):
                instance = small_instance(1000 * seed + i, order=order)
                started = time.perf_counter()
                best = optimum(instance.snapshot(), instance.gangs)
                solve_seconds.append(time.perf_counter() - started)
                solved += 1
                unproven += not best.proven
                for name, placer in algorithms(seed).items():
                    placed = run_stream(instance.snapshot(), instance.gangs, placer, close_sizes=False).placed_gpus
                    shares[name].append(placed / best.gpus if best.gpus else 1.0)
        report[order] = {
            name: {
                "share_mean": round(statistics.mean(values), 4),
                "share_min": round(min(values), 4),
                "share_median": round(statistics.median(values), 4),
            }
            for name, values in shares.items()
        }
        report[order]["instances"] = {
            "count": solved,
            "not_proven_optimal": unproven,
            "solver_seconds_max": round(max(solve_seconds), 2),
        }
    return report


#: One replay: row, load, seed, hours, days, the trace's path, and whether a baseline's figures may come from
#: (and go to) the cache.
ReplayTask = tuple[str, float, int, float, float, str, bool]


def _replay_one(task: ReplayTask) -> tuple[str, float, int, dict[str, float], float]:
    name, load, seed, hours, days, trace, cached = task
    key = f"{name}-load{load:g}-seed{seed}-{hours:g}h-{days:g}d"
    kept = CACHE.get(trace, key) if cached and name in CACHED else None
    if kept is not None:
        return name, load, seed, kept, 0.0
    configure("error")
    size = SIZES[1024]
    jobs = window(read_trace(Path(trace)), seed, days, load, size.n_nodes * 8, hours=hours)
    started = time.perf_counter()
    placer, starvation, deadlines = REPLAYED[name]
    replay = Replay(size, algorithms(seed)[placer], seed=seed, starvation=starvation, deadlines=deadlines)
    result = replay.run(jobs)
    figures = stats(result)
    figures["jobs"] = len(jobs)
    if cached and name in CACHED:
        CACHE.put(trace, key, figures)
    return name, load, seed, figures, time.perf_counter() - started


def philly(
    loads: list[float],
    seeds: list[int],
    *,
    hours: float,
    days: float,
    workers: int,
    trace: str,
    rows: list[str] | None = None,
    cached: bool = True,
) -> dict[str, Any]:
    names = rows or list(REPLAYED)
    tasks = [(name, load, seed, hours, days, trace, cached) for load in loads for seed in seeds for name in names]
    collected: dict[tuple[float, str], list[dict[str, float]]] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for name, load, _seed, figures, _seconds in pool.map(_replay_one, tasks):
            collected.setdefault((load, name), []).append(figures)
    report: dict[str, Any] = {}
    rows = list(REPLAYED)
    for (load, name), runs in sorted(collected.items(), key=lambda item: (item[0][0], rows.index(item[0][1]))):
        keys = runs[0].keys()
        entry = {key: round(statistics.median(run[key] for run in runs), 2) for key in keys}
        entry["p95_wait_32plus_s_spread"] = spread([run["p95_wait_32plus_s"] for run in runs])
        entry["p95_wait_small_s_spread"] = spread([run["p95_wait_small_s"] for run in runs])
        report.setdefault(f"{load:.2f}", {})[name] = entry
    return report


def adversarial(nodes: int) -> dict[str, Any]:
    size = SIZES[nodes]
    report = {}
    for name, placer in algorithms(0).items():
        result = run_stream(cluster(size), adversarial_stream(size), placer, close_sizes=False)
        racks = sum(1 for gang, _ in result.placed if gang.gpus > 1)
        report[name] = {**summary(result), "rack_gangs_placed": racks, "rack_gangs_offered": size.blocks * size.racks}
    return report


def elastic(seeds: list[int], per_seed: int) -> dict[str, Any]:
    shares: dict[str, list[float]] = {name: [] for name in NAMES}
    extras: dict[str, int] = dict.fromkeys(NAMES, 0)
    best_extras, unproven, count = 0, 0, 0
    for seed in seeds:
        for i in range(per_seed):
            instance = elastic_instance(1000 * seed + i)
            best = optimum(instance.snapshot(), instance.gangs)
            count += 1
            unproven += not best.proven
            best_extras += best.extras
            for name, placer in algorithms(seed).items():
                result = run_stream(instance.snapshot(), instance.gangs, placer, close_sizes=False)
                shares[name].append(result.placed_gpus / best.gpus if best.gpus else 1.0)
                extras[name] += result.extras
    report: dict[str, Any] = {
        name: {
            "share_mean": round(statistics.mean(values), 4),
            "share_min": round(min(values), 4),
            "extras_placed": extras[name],
        }
        for name, values in shares.items()
    }
    report["instances"] = {"count": count, "not_proven_optimal": unproven, "optimum_extras": best_extras}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.add_argument("--quick", action="store_true", help="one seed, smaller runs (about a minute)")
    parser.add_argument("--plots", metavar="DIR", help="write the PNG pictures into DIR")
    parser.add_argument("--only", nargs="+", choices=["saturation", "optimum", "philly", "adversarial", "elastic"])
    parser.add_argument("--trace", default=str(TRACE), help=f"the Philly CSV (default {TRACE})")
    parser.add_argument(
        "--rows",
        nargs="+",
        choices=list(REPLAYED),
        metavar="ROW",
        help=f"philly: only these rows ({', '.join(REPLAYED)})",
    )
    parser.add_argument(
        "--loads", nargs="+", type=float, metavar="LOAD", help="philly: only these offered loads (e.g. 0.95)"
    )
    parser.add_argument(
        "--no-cache", action="store_true", help=f"philly: replay the baselines again, not from {CACHE.folder}"
    )
    args = parser.parse_args(argv)
    if args.plots and (args.rows or args.loads):
        parser.error("--plots draws every row at every load: leave out --rows and --loads")
    log = sys.stderr if args.json else sys.stdout
    print(
        f"command: scripts/bench_quality.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip(), file=log
    )
    print(f"machine: {machine()}", file=log)
    configure("error")
    seeds = [0] if args.quick else [0, 1, 2, 3, 4]
    wanted = set(args.only or ["saturation", "optimum", "philly", "adversarial", "elastic"])
    report: dict[str, Any] = {}
    timings: dict[str, float] = {}
    pictures: dict[str, Any] = {}
    if "saturation" in wanted:
        started = time.perf_counter()
        report["saturation"], pictures = saturation([1024] if args.quick else [1024, 5120], seeds)
        timings["saturation"] = time.perf_counter() - started
    if "optimum" in wanted:
        started = time.perf_counter()
        shares = optimum_shares(seeds, 3 if args.quick else 8)
        report["optimum"], report["optimum_arrival_order"] = shares["largest-first"], shares["arrival"]
        timings["optimum"] = time.perf_counter() - started
    if "philly" in wanted:
        started = time.perf_counter()
        loads = args.loads or ([0.85] if args.quick else [0.7, 0.85, 0.95])
        hours = 1.0 if args.quick else 4.0
        report["philly"] = philly(
            loads,
            seeds,
            hours=hours,
            days=14.0,
            workers=os.cpu_count() or 1,
            trace=args.trace,
            rows=args.rows,
            cached=not args.no_cache,
        )
        timings["philly"] = time.perf_counter() - started
    if "adversarial" in wanted:
        started = time.perf_counter()
        report["adversarial"] = adversarial(1024)
        timings["adversarial"] = time.perf_counter() - started
    if "elastic" in wanted:
        started = time.perf_counter()
        report["elastic"] = elastic(seeds, 3 if args.quick else 8)
        timings["elastic"] = time.perf_counter() - started
    report["seconds"] = {key: round(value, 1) for key, value in timings.items()}
    report["seeds"] = seeds
    report["machine"] = machine()
    if args.plots:
        from quality import plots  # noqa: PLC0415  (matplotlib only when pictures are asked for)

        folder = Path(args.plots)
        folder.mkdir(parents=True, exist_ok=True)
        if "philly" in report:
            plots.utilisation_vs_load(report["philly"], folder / "quality_utilisation_vs_load.png")
            middle = "0.85" if "0.85" in report["philly"] else next(iter(report["philly"]))
            plots.wait_by_size(
                {name: row for name, row in report["philly"][middle].items() if name in NAMES},
                middle,
                folder / "quality_wait_by_size.png",
            )
            plots.starvation(report["philly"], folder / "quality_starvation.png")
        if pictures:
            figures = report["saturation"][next(iter(report["saturation"]))]
            best = max((name for name in figures if name != "phalanx"), key=lambda n: figures[n]["gpu_allocation"])
            plots.occupancy({"phalanx": pictures["phalanx"], best: pictures[best]}, folder / "quality_occupancy.png")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_summary(report, log)
    return 0


def print_summary(report: dict[str, Any], out: Any) -> None:
    for cluster_name, figures in report.get("saturation", {}).items():
        print(f"\nsaturation {cluster_name}: allocation, stranded GPUs, free racks, rack span", file=out)
        for name, row in figures.items():
            print(
                f"  {name:<14} {row['gpu_allocation']:.3f} {row['stranded_gpus']:>6.0f} {row['free_racks']:>4.0f}"
                f" {row['span_ratio']:.2f}",
                file=out,
            )
    orders = (("largest first", "optimum"), ("arrival order", "optimum_arrival_order"))
    for order, figures in ((order, report[key]) for order, key in orders if key in report):
        print(f"\noptimum ({order}): share mean / min", file=out)
        for name, row in figures.items():
            if "share_mean" in row:
                print(f"  {name:<14} {row['share_mean']:.3f} {row['share_min']:.3f}", file=out)
    for load, figures in report.get("philly", {}).items():
        print(f"\nphilly at {load}: utilisation, p95 wait 32+ GPUs, p95 wait <= 8 GPUs", file=out)
        for name, row in figures.items():
            print(
                f"  {name:<14} {row['utilisation']:.3f} {row['p95_wait_32plus_s']:>9.0f}s"
                f" {row['p95_wait_small_s']:>7.0f}s",
                file=out,
            )
    if "adversarial" in report:
        print("\nadversarial: rack gangs placed, allocation", file=out)
        for name, row in report["adversarial"].items():
            print(
                f"  {name:<14} {row['rack_gangs_placed']:>3}/{row['rack_gangs_offered']} {row['gpu_allocation']:.3f}",
                file=out,
            )
    if "elastic" in report:
        figures = report["elastic"]
        instances = figures["instances"]
        print(
            f"\nelastic ({instances['count']} instances; the optimum placed {instances['optimum_extras']} extra pods): "
            "share of the optimum's GPUs mean / min, extra pods placed",
            file=out,
        )
        for name, row in figures.items():
            if "share_mean" in row:
                print(
                    f"  {name:<14} {row['share_mean']:.3f} {row['share_min']:.3f} {row['extras_placed']:>5}", file=out
                )
    print(f"\nseconds per scenario: {report['seconds']}", file=out)


if __name__ == "__main__":
    sys.exit(main())
