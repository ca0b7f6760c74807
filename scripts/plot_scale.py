#!/usr/bin/env python3
"""How Phalanx's figures grow with the cluster: a picture of ``bench_e2e.py --scale --json`` and
``bench_placement.py --scale --json`` side by side, each against a line that grows as the node count does.

    scripts/plot_scale.py E2E.json PLACEMENT.json OUT.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: scripts/plot_scale.py E2E.json PLACEMENT.json OUT.png\n")
        return 2
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        sys.stderr.write("plot_scale.py: matplotlib is not installed (pip install -e '.[plot]')\n")
        return 2
    e2e: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    placement: dict[str, Any] = json.loads(Path(argv[1]).read_text())
    rows = placement["sizes"]
    nodes = [row["nodes"] for row in rows]
    http = [e2e[f"http_{n}"] for n in nodes]
    local = [e2e[f"in_process_{n}"] for n in nodes]
    panels = [
        ("time to ready (s)", {"over HTTP": [r["ready_s"] for r in http], "in process": [r["ready_s"] for r in local]},
         60.0),
        ("resident memory once ready (MB)", {"over HTTP": [r["rss_mb"] for r in http]}, 1500.0),
        ("decision (ms)", {"1,000-pod gang in one block": [r["block_1000_ms"] for r in rows],
                           "64-GPU preemption": [r["preempt_64_ms"] for r in rows]}, 50.0),
        ("3-pod gangs (pods/s of decisions)", {"3-pod gangs": [r["basic_3pod_pods_per_s"] for r in rows]}, 4000.0),
    ]  # fmt: skip
    figure, axes = plt.subplots(1, 4, figsize=(17, 4))
    for axis, (title, series, goal) in zip(axes, panels, strict=True):
        for label, values in series.items():
            axis.plot(nodes, values, marker="o", label=label)
        first = next(iter(series.values()))
        if "pods/s" not in title:  # a cost: the line it would follow if it grew as the node count does
            axis.plot(nodes, [first[0] * n / nodes[0] for n in nodes], linestyle=":", color="grey", label="linear")
        axis.axhline(goal, linestyle="--", color="red", linewidth=0.8, label="goal at 65,536 nodes")
        axis.set_xscale("log")
        axis.set_xticks(nodes, [f"{n:,}" for n in nodes])
        axis.minorticks_off()
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("nodes (500,000 pods per 65,536)")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
