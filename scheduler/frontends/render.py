"""Reports for people: the gang table, a GPU map of the racks, and a progress bar on a terminal."""

from __future__ import annotations

import string
import sys
import textwrap
from collections.abc import Iterable, Mapping
from typing import TextIO

from scheduler.simulation.report import BOUND, Report
from scheduler.simulation.timeline import clock_text
from topology.reasons import short_name

#: Largest cluster drawn as a text map; beyond it the map would not fit a screen.
MAP_NODES = 256
_WRAP = 100


def gang_letters(report: Report) -> dict[str, str]:
    """A letter per gang that has a pod on some node, in the order of the gang table."""
    symbols = iter(string.ascii_uppercase + string.ascii_lowercase + string.digits)
    placed_gangs = {report.gang_of[pod] for pod in report.placement if pod in report.gang_of}
    return {gang.key: next(symbols, "*") for gang in report.gangs if gang.key in placed_gangs}


def _where(domains: Mapping[str, str]) -> str:
    return " ".join(f"{short_name(key)}={value}" for key, value in domains.items())


#: A gang's state in a dry run where the real run would say Bound: nothing was written.
WOULD_BIND = "Would bind"


def table(report: Report, *, title: str, levels: Iterable[str], would: bool = False) -> str:
    """The gang table, why each gang that is not bound waits, the GPU map (small clusters), a summary.

    ``would``: the run only shows what Phalanx would do (``dry-run``): its preemptions are not made."""
    letters = gang_letters(report)
    names = {
        gang.key: f"{gang.key} [{letters[gang.key]}]" if gang.key in letters else gang.key for gang in report.gangs
    }
    key_width = max([len("GANG"), *(len(name) for name in names.values())])
    times = f"{'ARRIVED':>8} {'BOUND AT':>8} {'WAITED':>8} {'FINISHED':>8}  " if report.timeline else ""
    # A dry run writes nothing: what it would bind is said as such.
    states = {gang.key: WOULD_BIND if would and gang.state == BOUND else gang.state for gang in report.gangs}
    state_width = max([8, *(len(state) for state in states.values())])
    lines = [title, "", f"{'GANG':<{key_width}}  {'STATE':<{state_width}} {'BOUND':>5} {'MIN':>4}  {times}WHERE"]
    for gang in report.gangs:
        if report.timeline:
            times = (
                " ".join(f"{clock_text(at):>8}" for at in (gang.arrived, gang.bound_at, gang.wait, gang.finished_at))
                + "  "
            )
        lines.append(
            f"{names[gang.key]:<{key_width}}  {states[gang.key]:<{state_width}} {gang.bound:>5} {gang.min:>4}  "
            f"{times}{_where(gang.domains)}".rstrip()
        )
    if not report.gangs:
        if would:
            lines.append("(no pending gang: every pod Phalanx owns is bound)")
        elif report.timed_out:
            lines.append("(no gangs yet: --timeout stopped the run first)")
        else:
            lines.append("(no gangs: no pod with a schedulerName Phalanx owns was created)")
    waiting = [gang for gang in report.gangs if gang.state != BOUND and gang.reason]
    if waiting:
        lines += ["", "Why:"]
        for gang in waiting:
            lines += _item(f"{gang.key}: {gang.reason}")
    if would and report.bound:
        lines += ["", "Would bind (nothing was written; the gang and the nodes its pods would go to):"]
        for gang in report.gangs:
            nodes = sorted({node for pod, node in report.bound.items() if report.gang_of.get(pod) == gang.key})
            if nodes:
                lines += _item(f"{gang.key}: {' '.join(nodes)}")
    if report.reservations:
        lines += ["", "Reserved (gangs that waited too long, and the nodes whose freeing room each reserves):"]
        for held in report.reservations:
            lines += _item(f"{held.gang} {held.reserves}: {' '.join(held.nodes)}")
    if report.preempted:
        heading = "Would preempt" if would else "Preempted"
        lines += ["", f"{heading} (pod, and the gang it makes room for):"]
        lines += [f"  {pod}  by {gang}" for pod, gang in sorted(report.preempted.items())]
    if report.nodes <= MAP_NODES and report.node_gpus and any(report.node_gpus.values()):
        lines += ["", *gpu_map(report, letters, list(levels))]
    clock = (
        f" · peak {report.peak_gpu_allocation:.1%} · {clock_text(report.simulated_seconds)} simulated"
        if report.timeline
        else ""
    )
    placed = (f"{report.pods_bound} pod(s) would bind, {len(report.pending)} would stay pending (nothing was "
              "written)") if would else f"{report.pods_bound} pod(s) bound, {len(report.pending)} pending"  # fmt: skip
    lines += [
        "",
        f"{placed} · GPU allocation {report.gpu_allocation:.1%}{clock} · {report.nodes} nodes · {report.seconds:.2f} s",
    ]
    if report.timeline:
        lines.append("Times are h:mm:ss after the start; ARRIVED is the gang's first pod, BOUND AT its minimum bound.")
    if report.until_reached:
        lines.append("The clock stopped at --until with more still to happen.")
    if report.not_arrived:
        if report.timed_out:
            lines.append(f"{report.not_arrived} object(s) had not arrived yet when --timeout stopped the run.")
        else:
            lines.append(f"{report.not_arrived} object(s) due after --until never arrived.")
    if report.timed_out:
        lines.append("The run stopped at --timeout while the scheduler was still busy; the figures are partial.")
    return "\n".join(lines)


def _item(text: str) -> list[str]:
    """One entry of a list, wrapped to the terminal and indented under its first line."""
    return textwrap.wrap(
        text,
        width=_WRAP,
        initial_indent="  ",
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def gpu_map(report: Report, letters: Mapping[str, str], levels: list[str]) -> list[str]:
    """One row per rack (the level above the node), one cell per node, one character per GPU."""
    above_node = [level for level in levels if level != "kubernetes.io/hostname"]
    row_key = above_node[-1] if above_node else None
    cells = {
        node: [letters.get(gang, "#") if gang is not None else "#" for gang in owners]
        for node, owners in report.gpu_owners().items()
    }
    rows: dict[str, list[str]] = {}
    reserved = report.reserved_nodes
    for node, gpus in sorted(report.node_gpus.items()):
        row = report.node_labels.get(node, {}).get(row_key, "-") if row_key else "all"
        cell = "".join(cells[node])[:gpus]
        rows.setdefault(row, []).append(f"[{cell.ljust(gpus, '_')}]" if node in reserved else cell.ljust(gpus, "."))
    legend = f"GPU map: a row per {short_name(row_key) if row_key else 'cluster'}, a cell per node, a character per GPU"
    held = ", [...] a node held for a gang that waited too long (_ its free GPUs)" if reserved else ""
    lines = [f"{legend} (letters are the gangs above, # other pods, . free{held}):"]
    label_width = max(len(row) for row in rows)
    for row, nodes in rows.items():
        label, text = row, " ".join(nodes)
        while len(text) > _WRAP:
            cut = text.rfind(" ", 0, _WRAP)
            lines.append(f"  {label:<{label_width}}  {text[:cut]}")
            label, text = "", text[cut + 1 :]
        lines.append(f"  {label:<{label_width}}  {text}")
    return lines


class Progress:
    """``[#####.....] 120/200 pods bound`` on one line of a terminal; nothing when not a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self._shown = False

    def __call__(self, bound: int, total: int) -> None:
        if not self.enabled or not total:
            return
        filled = 30 * bound // total
        self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {bound}/{total} pods bound")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
