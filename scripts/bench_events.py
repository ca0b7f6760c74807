#!/usr/bin/env python3
"""Event benchmark (issue 40): what the deciding process spends applying pod events and compiling gangs.

In one process, without HTTP: 256 nodes of 8 GPUs (32 per rack) and 2,000 pending pods in PFN gangs of 8,
fed to ``ClusterState`` as a first list feeds them (ADDED events, decoded from JSON as a watch delivers
them), then:

  added      CPU per ADDED pod event (JSON decoded, strings shared, requests read, gang membership)
  compile    CPU of the first compile of the 250 gangs (``GangIndex.take_changed``), per gang
  bound      CPU per MODIFIED event that binds a pod (``spec.nodeName`` set, a ``PodScheduled`` condition)
  rebound    CPU per gang of taking those binds, in batches of four pods (a gang of 8 comes back in two)

Medians over the runs (each on a fresh state). CPU time, which a busy host does not blur.
--json prints one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.clock import ManualClock  # noqa: E402
from scheduler.ports.port import NODES, PODS, Change  # noqa: E402
from scheduler.ports.sim.builders import ClusterShape  # noqa: E402
from scheduler.settings import Settings  # noqa: E402
from scheduler.state import ClusterState  # noqa: E402
from scripts.bench_start import GANGS, SHAPE, SIZE, pending_pods  # noqa: E402
from scripts.benchinfo import machine  # noqa: E402

LEVELS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")
BATCH = 4


def events() -> tuple[list[str], list[str]]:
    """The pods' ADDED events and the MODIFIED events that bind them, as JSON text."""
    pods = [pod for pod in pending_pods() if pod["kind"] == "Pod"]
    added, bound = [], []
    for i, pod in enumerate(pods):
        pod["metadata"].update(uid=f"uid-{i}", resourceVersion=str(i + 1), creationTimestamp="2026-11-28T00:00:00Z")
        pod["status"] = {"phase": "Pending"}
        added.append(json.dumps(pod))
        bind = copy.deepcopy(pod)
        bind["spec"]["nodeName"] = f"b0-r{(i // SIZE) // 32}-n{(i // SIZE) % 32}"
        bind["metadata"]["resourceVersion"] = str(10_000 + i)
        bind["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        bound.append(json.dumps(bind))
    return added, bound


def one_run(added: list[str], bound: list[str]) -> dict[str, float]:
    state = ClusterState(Settings(levels=LEVELS), ManualClock())
    for node in ClusterShape.parse(SHAPE).node_manifests():
        state.apply(NODES, Change("ADDED", node))
    began = time.process_time()
    for text in added:
        state.apply(PODS, Change("ADDED", json.loads(text)))
    after_added = time.process_time()
    state.index.take_changed()
    after_compile = time.process_time()
    spent_applying = spent_taking = 0.0
    for start in range(0, len(bound), BATCH):
        mark = time.process_time()
        for text in bound[start : start + BATCH]:
            state.apply(PODS, Change("MODIFIED", json.loads(text)))
        taken = time.process_time()
        state.index.take_changed()
        spent_applying += taken - mark
        spent_taking += time.process_time() - taken
    return {
        "added us": (after_added - began) / len(added) * 1e6,
        "compile us per gang": (after_compile - after_added) / GANGS * 1e6,
        "bound us": spent_applying / len(bound) * 1e6,
        "rebound us per gang": spent_taking / GANGS * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    parser.add_argument("--repeat", type=int, default=7, help="runs (default 7)")
    parser.add_argument("--quick", action="store_true", help="one run")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    print(f"command: scripts/bench_events.py {' '.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    print(f"machine: {machine()}", file=sys.stderr)
    print(f"cluster: {SHAPE} (256 nodes), {GANGS * SIZE:,} pods in {GANGS} gangs of {SIZE}, binds in batches of "
          f"{BATCH}; runs: {repeat} (medians)", file=sys.stderr)  # fmt: skip
    added, bound = events()
    runs = [one_run(added, bound) for _ in range(repeat)]
    result: dict[str, Any] = {key: round(statistics.median(run[key] for run in runs), 1) for key in runs[0]}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        print(f"{key:<22}{value:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
