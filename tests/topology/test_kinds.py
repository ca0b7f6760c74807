"""Kinds of resource (``topology/kinds.py``): a new kind adds its columns, and placement honours them with
no other change; devices claimed through DRA are refused by name until a kind places them."""

from collections.abc import Mapping
from typing import Any

import pytest

from topology import GangRequest, Infeasible, Member, Snapshot, Topology, node_record, place, pod_shape
from topology.kinds import KINDS, Claims, Requests, node_supply, pod_demand, replacing
from topology.objects import unsupported_constraints

WIDGETS = "example.com/widgets"


class Widgets:
    """A made-up kind: nodes offer widgets in an annotation, pods ask for them in another."""

    def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
        wanted = (pod.get("metadata") or {}).get("annotations", {}).get(WIDGETS)
        return {WIDGETS: int(wanted)} if wanted else {}

    def supply(self, node: Mapping[str, Any]) -> Mapping[str, int]:
        offered = (node.get("metadata") or {}).get("annotations", {}).get(WIDGETS)
        return {WIDGETS: int(offered)} if offered else {}

    def unsupported(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return ()

    def waits(self, pod: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return ()

    def node(self, pod: Mapping[str, Any]) -> str | None:
        return None

    def together(self, pod: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
        return ()


def node(name: str, widgets: int | None = None) -> dict[str, Any]:
    annotations = {WIDGETS: str(widgets)} if widgets is not None else {}
    return {
        "metadata": {"name": name, "annotations": annotations, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, widgets: int | None = None, **spec: Any) -> dict[str, Any]:
    annotations = {WIDGETS: str(widgets)} if widgets is not None else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}], **spec},
    }


def test_the_built_in_kinds_are_the_requests_and_the_claims_they_refuse() -> None:
    assert [type(kind) for kind in KINDS] == [Requests, Claims]
    assert pod_demand(pod("p")) == {"nvidia.com/gpu": 1, "pods": 1}
    assert node_supply(node("n"))["nvidia.com/gpu"] == 8


def test_a_new_kind_adds_its_columns_and_placement_honours_them_with_nothing_else_changed() -> None:
    kinds = (*KINDS, Widgets())
    nodes = [node_record(node("plain"), kinds), node_record(node("rich", widgets=3), kinds)]
    assert dict(nodes[1].allocatable)[WIDGETS] == 3 and WIDGETS not in dict(nodes[0].allocatable)
    snapshot = Snapshot(nodes, topology=Topology(levels=("kubernetes.io/hostname",)))
    wanting = [Member(key=f"ml/w{i}", shape=pod_shape(pod(f"w{i}", widgets=2), kinds)) for i in range(2)]
    one = place(snapshot, GangRequest.leaf("one", wanting[:1], min_pods=1))
    assert not isinstance(one, Infeasible) and [a.node for a in one.assignments] == ["rich"]
    both = place(snapshot, GangRequest.leaf("both", wanting, min_pods=2))
    assert isinstance(both, Infeasible)  # 4 widgets asked, 3 in the whole cluster
    assert WIDGETS in both.message
    plain = place(snapshot, GangRequest.leaf("plain", [Member(key="ml/p", shape=pod_shape(pod("p"), kinds))]))
    assert not isinstance(plain, Infeasible)  # a pod asking no widgets goes anywhere


def test_a_pod_that_claims_devices_is_refused_by_name_and_one_without_claims_is_not() -> None:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    assert ("spec.resourceClaims", "dynamic resource allocation (resource claims)") in unsupported_constraints(
        pod("p", resourceClaims=claims)
    )
    assert unsupported_constraints(pod("p")) == ()


def test_a_kind_is_replaced_in_its_place_and_only_a_kind_there_is() -> None:
    """How the scheduler plugs in the devices it watches: every other kind as KINDS has it, in the same order."""

    class Watched(Claims):
        def demand(self, pod: Mapping[str, Any]) -> Mapping[str, int]:
            return {"devices/gpu.example.com": 1} if (pod.get("spec") or {}).get("resourceClaims") else {}

    watched = Watched()
    kinds = replacing(Claims, watched)
    assert [type(kind) for kind in kinds] == [Requests, Watched]
    pod = {"spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "g", "resourceClaimName": "x"}]}}
    assert pod_demand(pod, kinds)["devices/gpu.example.com"] == 1
    with pytest.raises(ValueError, match="no kind of class Watched"):
        replacing(Watched, watched, (Requests(),))
