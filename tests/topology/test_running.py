"""What the running pods below a priority hold, per node: the counts that preemption ranks nodes by, checked
against a plain sum and maximum over the pods, on random clusters with several shapes and priorities."""

from __future__ import annotations

import random

import numpy as np

from tests.builders import GPU, LEVELS, cluster
from topology import Snapshot
from topology.running import RunningPods


def test_what_runs_below_a_priority_is_summed_and_ranked_per_node_as_a_plain_loop_would() -> None:
    draw = random.Random(11)
    snapshot = Snapshot(cluster(2, 2, 4), topology=LEVELS)
    running = RunningPods()
    pods = []
    for i in range(300):
        node = draw.choice(snapshot.names)
        requests = {GPU: draw.choice((1, 2, 4)), "cpu": draw.choice((1000, 4000))}
        priority = draw.choice((-5, 0, 10, 100, 1000))
        deleting = draw.random() < 0.1
        running.set(f"p{i}", node, requests, priority, deleting=deleting)
        pods.append((f"p{i}", node, requests, priority, deleting))
    for gone in draw.sample(pods, 30):
        running.remove(gone[0])
        pods.remove(gone)
    for below in (0, 100, 5000):
        candidates = [pod for pod in pods if pod[3] < below and not pod[4]]
        held = np.zeros((snapshot.n_nodes, len(snapshot.resources)), dtype=np.int64)
        highest = np.full(snapshot.n_nodes, -1, dtype=np.int64)
        count = np.zeros(snapshot.n_nodes, dtype=np.int64)
        for _, node, requests, priority, _ in candidates:
            row = snapshot.index_of(node)
            assert row is not None
            held[row] += snapshot.request_vector(tuple(sorted(requests.items()))).vector
            highest[row] = max(highest[row], priority)
            count[row] += 1
        assert (running.below(snapshot, below) == held).all()
        found_highest, found_count = running.cheapest(snapshot, below)
        assert (found_highest == highest).all() and (found_count == count).all()
        rows = np.array([0, 3, 5], dtype=np.int64)
        on = {snapshot.names[row] for row in rows.tolist()}
        found = running.on_rows(snapshot, rows, below)
        assert len(found) == len(set(found)) and set(found) == {pod for pod, node, *_ in candidates if node in on}
