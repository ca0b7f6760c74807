"""Static filters exclude the right nodes and charge them to kube-scheduler's reasons."""

import pytest

from tests.builders import GPU, LEVELS, RACK, gang, gpu_shape, members, node
from topology import (
    GangRequest,
    Infeasible,
    NodeConstraints,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Snapshot,
    Taint,
    Toleration,
    place,
)
from topology.eligibility import eligibility

BROKEN = Taint(key="gpu", value="broken", effect="NoSchedule")


def names_allowed(snapshot: Snapshot, constraints: NodeConstraints) -> set[str]:
    mask = eligibility(snapshot, constraints).mask
    return {name for name, ok in zip(snapshot.names, mask, strict=True) if ok}


@pytest.fixture
def snapshot() -> Snapshot:
    return Snapshot(
        [
            node("a", labels={RACK: "r1", "gen": "3", "pool": "train"}),
            node("b", labels={RACK: "r1", "gen": "4", "pool": "infer"}),
            node("c", labels={RACK: "r2", "gen": "five"}),
            node("d", labels={RACK: "r2"}, taints=[BROKEN]),
            node("e", labels={RACK: "r2"}, taints=[Taint(key="soft", effect="PreferNoSchedule")]),
            node("f", labels={RACK: "r3"}, unschedulable=True),
            node("g", labels={RACK: "r3"}, ready=False),
        ],
        topology=LEVELS,
    )


def expr(key: str, operator: str, *values: str) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(key=key, operator=operator, values=values),))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("constraints", "allowed"),
    [
        pytest.param(NodeConstraints(), {"a", "b", "c", "e"}, id="no constraints: taints, cordon and NotReady exclude"),
        pytest.param(NodeConstraints(node_selector=(("pool", "train"),)), {"a"}, id="nodeSelector"),
        pytest.param(NodeConstraints(node_selector=(("pool", "gpu"),)), set(), id="nodeSelector value nobody has"),
        pytest.param(NodeConstraints(affinity=(expr("gen", "In", "3", "4"),)), {"a", "b"}, id="In"),
        pytest.param(
            NodeConstraints(affinity=(expr("pool", "NotIn", "train"),)), {"b", "c", "e"}, id="NotIn matches unlabelled"
        ),
        pytest.param(NodeConstraints(affinity=(expr("gen", "Exists"),)), {"a", "b", "c"}, id="Exists"),
        pytest.param(NodeConstraints(affinity=(expr("gen", "DoesNotExist"),)), {"e"}, id="DoesNotExist"),
        pytest.param(NodeConstraints(affinity=(expr("gen", "Gt", "3"),)), {"b"}, id="Gt skips non-integers"),
        pytest.param(NodeConstraints(affinity=(expr("gen", "Lt", "4"),)), {"a"}, id="Lt"),
        pytest.param(
            NodeConstraints(affinity=(expr("gen", "In", "3"), expr("pool", "In", "infer"))),
            {"a", "b"},
            id="terms are ORed",
        ),
        pytest.param(NodeConstraints(affinity=(NodeSelectorTerm(),)), set(), id="an empty term matches nothing"),
        pytest.param(
            NodeConstraints(
                affinity=(
                    NodeSelectorTerm(
                        match_fields=(NodeSelectorRequirement(key="metadata.name", operator="In", values=("b", "c")),)
                    ),
                )
            ),
            {"b", "c"},
            id="matchFields metadata.name",
        ),
        pytest.param(NodeConstraints(node_name="c"), {"c"}, id="nodeName"),
        pytest.param(
            NodeConstraints(tolerations=(Toleration(key="gpu", value="broken", effect="NoSchedule"),)),
            {"a", "b", "c", "d", "e"},
            id="toleration with value",
        ),
        pytest.param(
            NodeConstraints(tolerations=(Toleration(key="gpu", value="fine"),)),
            {"a", "b", "c", "e"},
            id="toleration with the wrong value",
        ),
        pytest.param(
            NodeConstraints(tolerations=(Toleration(operator="Exists"),)),
            {"a", "b", "c", "d", "e", "f", "g"},
            id="tolerate everything, even cordon and NotReady",
        ),
    ],
)
def test_eligible_nodes(snapshot: Snapshot, constraints: NodeConstraints, allowed: set[str]) -> None:
    assert names_allowed(snapshot, constraints) == allowed


def test_reason_counts_use_kube_scheduler_wording(snapshot: Snapshot) -> None:
    for name in ("a", "b"):
        snapshot.assume(f"other/{name}", name, {GPU: 8, "pods": 1})
    result = place(snapshot, gang("team/x", 17))  # c and e have 8 GPUs each
    assert isinstance(result, Infeasible)
    assert result.message == (
        "2/7 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {gpu: broken}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) were unschedulable. "
        "Gang team/x needs 17 pods; the cluster fits 16: each node holds at most 8 (nvidia.com/gpu 8 of 8)."
    )


def test_first_failing_filter_wins_and_selector_mismatch_is_counted(snapshot: Snapshot) -> None:
    shape = gpu_shape(1, constraints=NodeConstraints(node_selector=(("pool", "train"),)))
    snapshot.assume("other/a", "a", {GPU: 8, "pods": 1})
    result = place(snapshot, gang("team/y", 1, shape=shape))
    assert isinstance(result, Infeasible)
    assert dict(result.node_reasons) == {
        "node(s) didn't match Pod's node affinity/selector": 3,  # b, c, e
        "Insufficient nvidia.com/gpu": 1,  # a
        "node(s) had untolerated taint {gpu: broken}": 1,  # d, tainted before selector is checked
        "node(s) were unschedulable": 1,
        "node(s) had untolerated taint {node.kubernetes.io/not-ready: }": 1,
    }
    assert result.message.startswith(
        "0/7 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 1 Insufficient nvidia.com/gpu, "
    )


def test_a_gang_of_two_shapes_is_told_by_the_shape_that_has_no_room(snapshot: Snapshot) -> None:
    """Its 8-GPU pods fit two free nodes; its one pod whose selector matches no node was the reason, where the
    nodes' counts were told for the biggest shape ("2/7 nodes are available") and named no selector."""
    nowhere = gpu_shape(1, constraints=NodeConstraints(node_selector=(("pool", "nowhere"),)))
    pods = [*members("team/mixed-big", 2, gpu_shape(8)), *members("team/mixed-small", 1, nowhere)]
    result = place(snapshot, GangRequest.leaf("team/mixed", pods))
    assert isinstance(result, Infeasible)
    assert result.message.startswith("0/7 nodes are available: 4 node(s) didn't match Pod's node affinity/selector")
    assert result.message.endswith("Gang team/mixed needs 3 pods of 2 shapes; the cluster fits 2 of them together.")


def test_eligibility_is_cached_per_generation_and_recomputed_after_a_node_change(snapshot: Snapshot) -> None:
    constraints = NodeConstraints(node_selector=(("pool", "train"),))
    first = eligibility(snapshot, constraints)
    assert eligibility(snapshot, constraints) is first
    snapshot.set_node(node("h", labels={RACK: "r3", "pool": "train"}))
    assert names_allowed(snapshot, constraints) == {"a", "h"}
