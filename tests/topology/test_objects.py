"""Nodes and pods read from raw API JSON, with errors that name the field at fault."""

import pytest

from topology import SpecError, Taint, node_record, pod_shape, unsupported_constraints
from topology.request import NodeSelectorRequirement, Toleration


def api_node(**overrides: object) -> dict[str, object]:
    node: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"example.com/rack": "r1"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "63500m", "memory": "503Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }
    node.update(overrides)
    return node


def test_node_record_reads_allocatable_labels_taints_and_readiness() -> None:
    record = node_record(api_node())
    assert record.name == "gpu-1"
    assert record.labels == {"example.com/rack": "r1"}
    assert record.allocatable == {"cpu": 63500, "memory": 503 << 30, "nvidia.com/gpu": 8, "pods": 110}
    assert record.taints == (Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),)
    assert record.ready and not record.unschedulable


def test_node_without_ready_true_is_not_ready_and_cordon_is_read() -> None:
    node = api_node(spec={"unschedulable": True})
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]  # type: ignore[index]
    record = node_record(node)
    assert not record.ready and record.unschedulable


def test_node_falls_back_to_capacity_without_allocatable() -> None:
    node = api_node()
    del node["status"]["allocatable"]  # type: ignore[attr-defined]
    assert node_record(node).allocatable["cpu"] == 64000


def test_node_with_bad_quantity_names_the_field() -> None:
    node = api_node()
    node["status"]["allocatable"]["memory"] = "lots"  # type: ignore[index]
    with pytest.raises(SpecError, match=r"status\.allocatable\.memory"):
        node_record(node)


def test_node_with_bad_taint_effect_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.taints\[0\]\.effect.*NoSchedule"):
        node_record(api_node(spec={"taints": [{"key": "a", "effect": "Sometimes"}]}))


def pod_spec(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


def test_pod_shape_reads_every_node_constraint() -> None:
    shape = pod_shape(
        pod_spec(
            nodeSelector={"example.com/pool": "a100"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [{"key": "example.com/gen", "operator": "Gt", "values": ["3"]}],
                                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-1"]}],
                            }
                        ]
                    }
                }
            },
        )
    )
    constraints = shape.constraints
    assert constraints.node_selector == (("example.com/pool", "a100"),)
    assert constraints.tolerations == (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    assert constraints.affinity is not None
    (term,) = constraints.affinity
    assert term.match_expressions == (NodeSelectorRequirement(key="example.com/gen", operator="Gt", values=("3",)),)
    assert term.match_fields[0].values == ("bad-1",)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodeSelector": {"a": 1}}, "spec.nodeSelector.a"),
        ({"tolerations": [{"key": "a", "operator": "Maybe"}]}, r"spec.tolerations\[0\].operator"),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, r"spec.tolerations\[0\].operator"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "g", "operator": "Gt", "values": ["x"]}]}
                            ]
                        }
                    }
                }
            },
            r"nodeSelectorTerms\[0\]\.matchExpressions\[0\].*integer",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "g", "operator": "Near"}]}]
                        }
                    }
                }
            },
            r"matchExpressions\[0\].*Near",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["u"]}]}
                            ]
                        }
                    }
                }
            },
            r"matchFields.*metadata\.name",
        ),
    ],
)
def test_invalid_pod_constraint_names_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        pod_shape(pod_spec(**spec))


def test_unsupported_hard_constraints_are_reported_not_ignored() -> None:
    found = unsupported_constraints(
        pod_spec(
            affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]}},
            topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
                {"maxSkew": 1, "topologyKey": "zone"},
            ],
        )
    )
    assert found == (
        (
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            "required inter-pod anti-affinity",
        ),
        ("spec.topologySpreadConstraints[1]", "topology spread constraints with whenUnsatisfiable: DoNotSchedule"),
    )
    assert unsupported_constraints(pod_spec()) == ()
