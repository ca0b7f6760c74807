"""``--plot FILE.png``: the racks and blocks, each node's GPUs coloured by the gang that holds them.

matplotlib is an optional extra (``pip install 'phalanx-scheduler[plot]'``): the scheduler never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler.simulation.report import Report

INSTALL_HINT = "--plot needs matplotlib: pip install 'phalanx-scheduler[plot]'"


class PlotError(RuntimeError):
    """The plot cannot be drawn or written; the message says why."""


def plot(report: Report, levels: Sequence[str], path: str | Path) -> None:
    try:
        import matplotlib  # noqa: PLC0415  (optional: imported only when a plot is asked for)

        matplotlib.use("Agg")
        from matplotlib import pyplot  # noqa: PLC0415
        from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415
    except ImportError:
        raise PlotError(INSTALL_HINT) from None

    above = [level for level in levels if level != "kubernetes.io/hostname"]
    column_key = above[-1] if above else None
    group_key = above[-2] if len(above) >= 2 else None
    columns: dict[tuple[str, str], list[str]] = {}
    for node in sorted(report.node_gpus):
        labels = report.node_labels.get(node, {})
        group = labels.get(group_key, "") if group_key else ""
        column = labels.get(column_key, "") if column_key else "cluster"
        columns.setdefault((group, column), []).append(node)

    gangs = [gang.key for gang in report.gangs if any(report.gang_of.get(pod) == gang.key for pod in report.placement)]
    palette = pyplot.get_cmap("tab20")
    colour = {gang: palette(i % 20) for i, gang in enumerate(gangs)}
    owners = report.gpu_owners(sorted(report.placement))

    reserved = report.reserved_nodes
    width = max((gpus for gpus in report.node_gpus.values()), default=1) + 1
    height = max((len(nodes) for nodes in columns.values()), default=1)
    size = (max(6.0, 0.18 * width * len(columns) + 2), max(3.0, 0.25 * height + 2))
    over_time = report.timeline and len(report.usage) > 1 and report.total_gpus > 0
    if over_time:
        figure, (axes, timeline) = pyplot.subplots(
            2, 1, figsize=(size[0], size[1] + 2.5), gridspec_kw={"height_ratios": [size[1], 2.5]}
        )
        _utilisation(timeline, report)
    else:
        figure, axes = pyplot.subplots(figsize=size)
    previous_group = None
    for x, ((group, column), nodes) in enumerate(sorted(columns.items())):
        if group != previous_group and x:
            axes.axvline(x * width - 0.5, color="black", linewidth=1.2)
        previous_group = group
        axes.text(x * width + width / 2 - 0.5, height + 0.3, column, ha="center", fontsize=7, rotation=90)
        for y, node in enumerate(nodes):
            if node in reserved:  # its freeing room is held for a gang that waited too long
                axes.add_patch(
                    Rectangle(
                        (x * width - 0.15, height - 1 - y - 0.1),
                        report.node_gpus[node] + 0.2,
                        1.1,
                        fill=False,
                        edgecolor="#d62728",
                        linewidth=1.2,
                    )
                )
            held = owners[node]
            for gpu in range(report.node_gpus[node]):
                owner = held[gpu] if gpu < len(held) else "free"
                face = "#f2f2f2" if owner == "free" else colour.get(owner or "", "#7f7f7f")
                axes.add_patch(Rectangle((x * width + gpu, height - 1 - y), 0.9, 0.9, facecolor=face, linewidth=0))
    axes.set_xlim(-1, len(columns) * width)
    axes.set_ylim(-0.5, height + 2.5)
    axes.axis("off")
    title = f"{report.nodes} nodes, GPU allocation {report.gpu_allocation:.1%}" + (" at the end" if over_time else "")
    axes.set_title(title + (f" (blocks separated by lines: {group_key})" if group_key else ""), fontsize=9)
    handles = [Patch(facecolor=colour[gang], label=gang) for gang in gangs[:20]]
    handles += [Patch(facecolor="#7f7f7f", label="other pods"), Patch(facecolor="#f2f2f2", label="free")]
    handles += [
        Patch(fill=False, edgecolor="#d62728", label=f"held for {held.gang} (waited too long)")
        for held in report.reservations
    ]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    try:
        figure.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as error:
        raise PlotError(f"--plot {path}: {error.strerror or error}") from None
    finally:
        pyplot.close(figure)


def _utilisation(axes: Any, report: Report) -> None:
    """GPUs in use over the simulated time, as a step line, with each gang's arrival marked below it."""
    hours = report.simulated_seconds >= 3 * 3600
    scale, unit = (3600.0, "hours") if hours else (60.0, "minutes")
    end = report.simulated_seconds / scale
    # Drawn a little past the end, so that the state the run ended in shows even when it began there.
    times = [at / scale for at, _ in report.usage] + [end * 1.04]
    shares = [100.0 * gpus / report.total_gpus for _, gpus in report.usage]
    axes.step(times, [*shares, shares[-1]], where="post", color="#1f77b4", linewidth=1.2)
    axes.fill_between(times, [*shares, shares[-1]], step="post", alpha=0.2, color="#1f77b4")
    axes.axvline(end, color="black", linestyle=":", linewidth=0.8)
    axes.text(end, 102, " end", fontsize=7, va="bottom")
    arrivals = sorted({gang.arrived for gang in report.gangs if gang.arrived is not None})
    axes.plot([at / scale for at in arrivals], [-4.0] * len(arrivals), "|", color="black", markersize=6)
    axes.set_ylim(-8, 110)
    axes.set_xlim(0, max(times[-1], 1e-9))
    axes.set_xlabel(f"simulated time ({unit}); ticks below: gangs arriving", fontsize=8)
    axes.set_ylabel("GPUs in use (%)", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(alpha=0.3)
