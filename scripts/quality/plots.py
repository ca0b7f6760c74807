"""The quality benchmark's pictures (PNG, for docs/): utilisation against offered load, queueing delay by
gang size, and how full each rack is at saturation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import numpy as np
from matplotlib import pyplot

from topology import Snapshot

from .workloads import GPU, RACK

BUCKETS = ("1", "2-8", "9-31", "32plus")


def utilisation_vs_load(philly: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    figure, axes = pyplot.subplots(figsize=(6.5, 4))
    loads = sorted(philly, key=float)
    for name in philly[loads[0]]:
        axes.plot(
            [float(load) for load in loads],
            [philly[load][name]["utilisation"] for load in loads],
            marker="o",
            linewidth=2.5 if name == "phalanx" else 1.2,
            label=name,
        )
    axes.plot([0.6, 1.0], [0.6, 1.0], color="grey", linestyle=":", linewidth=1, label="offered = used")
    axes.set_xlabel("offered load (share of the cluster's GPUs)")
    axes.set_ylabel("GPU utilisation (median over seeds)")
    axes.set_title("Philly replay on 1,024 nodes: what each placer turns into running jobs")
    axes.legend(fontsize=7)
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)


def wait_by_size(figures: dict[str, dict[str, Any]], load: str, path: Path) -> None:
    names = list(figures)
    figure, axes = pyplot.subplots(figsize=(7.5, 4))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [max(figures[name][f"p95_wait_{bucket}_s"], 0.5) for bucket in BUCKETS]
        axes.bar(np.arange(len(BUCKETS)) + i * width, values, width, label=name)
    axes.set_xticks(np.arange(len(BUCKETS)) + 0.4 - width / 2, [f"{bucket} GPUs" for bucket in BUCKETS])
    axes.set_yscale("log")
    axes.set_ylabel("p95 queueing delay, seconds (log; 0 drawn as 0.5)")
    axes.set_title(f"Philly replay at {float(load):.0%} offered load: p95 wait by gang size")
    axes.legend(fontsize=7, ncol=2)
    axes.grid(alpha=0.3, axis="y")
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)


def starvation(philly: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    """p95 wait by gang size before domain reservations (greedy) and after (with and without deadlines),
    one panel per offered load."""
    loads = [load for load in sorted(philly, key=float) if float(load) >= 0.85]
    rows = (("phalanx-greedy", "before: greedy"), ("phalanx", "after: reservations"),
            ("phalanx+deadlines", "after: reservations, pods with deadlines"))  # fmt: skip
    figure, axes_list = pyplot.subplots(1, len(loads), figsize=(5.5 * len(loads), 4), squeeze=False)
    width = 0.8 / len(rows)
    for axes, load in zip(axes_list[0], loads, strict=True):
        for i, (name, label) in enumerate(rows):
            values = [max(philly[load][name][f"p95_wait_{bucket}_s"], 0.5) for bucket in BUCKETS]
            axes.bar(np.arange(len(BUCKETS)) + i * width, values, width, label=label)
        axes.set_xticks(np.arange(len(BUCKETS)) + 0.4 - width / 2, [f"{bucket} GPUs" for bucket in BUCKETS])
        axes.set_ylabel("p95 queueing delay, seconds (median over seeds)")
        axes.set_title(f"Philly replay at {float(load):.0%} offered load")
        axes.grid(alpha=0.3, axis="y")
    axes_list[0][0].legend(fontsize=7)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)


def occupancy(snapshots: dict[str, Snapshot], path: Path) -> None:
    """One panel per algorithm: a row per rack, a cell per node, coloured by the share of its GPUs used."""
    figure, axes_list = pyplot.subplots(1, len(snapshots), figsize=(5 * len(snapshots), 5), squeeze=False)
    for axes, (name, snapshot) in zip(axes_list[0], snapshots.items(), strict=True):
        column = snapshot.resources.index(GPU)
        used = snapshot.requested[:, column] / snapshot.allocatable[:, column]
        ids = snapshot.label(RACK).ids
        racks = int(ids.max()) + 1
        per_rack = np.bincount(ids)
        grid = np.full((racks, int(per_rack.max())), np.nan)
        slot = np.zeros(racks, dtype=int)
        for row, rack in enumerate(ids.tolist()):
            grid[rack, slot[rack]] = used[row]
            slot[rack] += 1
        image = axes.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        axes.set_title(f"{name}: {float(np.nanmean(grid)):.1%} of GPUs used", fontsize=9)
        axes.set_xlabel("node in rack")
        axes.set_ylabel("rack")
    figure.colorbar(image, ax=axes_list[0].tolist(), label="share of the node's GPUs in use", shrink=0.8)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    pyplot.close(figure)
