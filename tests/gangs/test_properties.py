"""Random, hostile objects through the gang index: only typed results come out, never an exception."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler.gangs import GangError, GangIndex, GangSettings, GangSpec
from scheduler.gangs.sources import KINDS
from tests.gangs.support import LEVELS, PFN

NAMES = st.sampled_from(["a", "b", "c", "g", "w"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
QUANTITY = st.sampled_from(["1", "500m", "2Gi", "-1", "lots", "", "1e3", "8"]) | JSON
KEYS = st.sampled_from(
    [
        "minMember",
        "minTaskMember",
        "scheduleTimeoutSeconds",
        "minResources",
        "schedulingPolicy",
        "schedulingConstraints",
        "parentCompositePodGroupName",
        "workloadRef",
        "podGroupTemplateRef",
        "podGroups",
        "podGroupTemplates",
        "subGroupPolicy",
        "networkTopology",
        "priority",
        "priorityClassName",
    ]
)
SPEC_VALUES = (
    JSON
    | NAMES
    | st.builds(lambda n: {"gang": {"minCount": n}}, st.integers(-1, 4))
    | st.builds(lambda n: {"gang": {"minGroupCount": n}}, st.integers(-1, 4))
    | st.just({"basic": {}})
    | st.builds(lambda key: {"topology": [{"key": key}]}, st.sampled_from(["example.com/rack", "bad key!", ""]))
    | st.builds(
        lambda n, k: [{"name": "r", "subGroupSize": n, "minSubGroups": n, "matchLabelKeys": [k]}],
        st.integers(-1, 3),
        st.sampled_from(["rid", ""]),
    )
    | st.builds(
        lambda tier, mode: {"mode": mode, "highestTierAllowed": tier},
        st.integers(-1, 5),
        st.sampled_from(["hard", "soft", "odd"]),
    )
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            "scheduling.phalanx.dev/parent",
            "scheduling.phalanx.dev/topology-required",
            "scheduling.phalanx.dev/topology-preferred",
            "scheduling.k8s.io/group-name",
            "volcano.sh/task-spec",
            f"{PFN}-name",
            f"{PFN}-size",
            f"{PFN}-schedule-timeout-seconds",
        ]
    ),
    st.sampled_from(["a", "g", "2", "0", "-1", "x", "", "example.com/rack", "Bad/Key!"]) | st.text(max_size=5),
    max_size=4,
)


@st.composite
def group_objects(draw: st.DrawFn) -> dict[str, Any]:
    group, version, kind = draw(st.sampled_from(sorted(KINDS)))
    return {
        "apiVersion": f"{group}/{version}" if draw(st.integers(0, 9)) else draw(JSON),
        "kind": kind,
        "metadata": {"name": draw(NAMES), "namespace": "ns", "annotations": draw(ANNOTATIONS | JSON)},
        "spec": draw(st.dictionaries(KEYS, SPEC_VALUES, max_size=4) | JSON),
        "value": draw(st.integers(-5, 5) | JSON),
    }


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": draw(st.sampled_from(["phalanx", "phalanx", "default-scheduler"]) | JSON),
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": draw(
                        st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITY, max_size=2)
                        | JSON
                    )
                },
            }
        ],
    }
    for key, value in draw(
        st.dictionaries(
            st.sampled_from(["schedulingGroup", "workloadRef", "nodeName", "affinity"]),
            st.builds(lambda n: {"podGroupName": n, "name": n, "podGroup": n}, NAMES) | JSON,
            max_size=2,
        )
    ).items():
        spec[key] = value
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": draw(NAMES),
            "namespace": draw(st.sampled_from(["ns", "ns", "other"]) | JSON),
            "annotations": draw(ANNOTATIONS | JSON),
            "labels": draw(st.dictionaries(st.sampled_from(["scheduling.x-k8s.io/pod-group", "rid"]), NAMES) | JSON),
        },
        "spec": spec if draw(st.integers(0, 9)) else draw(JSON),
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]))},
    }


EVENTS = st.lists(st.tuples(st.sampled_from(["upsert", "delete"]), pods() | group_objects()), min_size=1, max_size=25)


@given(EVENTS)
def test_random_objects_yield_only_typed_results(events: list[tuple[str, dict[str, Any]]]) -> None:
    index = GangIndex(GangSettings(levels=LEVELS))
    for action, document in events:
        if document.get("kind") == "Pod":
            metadata = document["metadata"]
            if action == "upsert":
                index.upsert_pod(document)
            elif isinstance(metadata.get("namespace"), str):
                index.delete_pod(metadata["namespace"], metadata["name"])
        elif action == "upsert":
            index.upsert_group(document)
        else:
            index.delete_group(document)
        index.take_changed()
    owners: dict[str, str] = {}
    for key, result in index.results().items():
        assert isinstance(result, GangSpec | GangError)
        if isinstance(result, GangError):
            assert "this is a bug" not in result.message, result.message
            assert result.message.startswith(str(result.subject))
        for pod in result.pods:
            assert pod not in owners, f"pod {pod} is in two gangs: {owners[pod]} and {key}"
            owners[pod] = key


HIERARCHY_NAMES = st.sampled_from(["r0", "r1", "c0", "c1"])


@st.composite
def hierarchy_events(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Events that build and rebuild small hierarchies: groups that gain, lose and change parents."""
    choice = draw(st.integers(0, 3))
    name = draw(HIERARCHY_NAMES)
    parent = draw(st.none() | HIERARCHY_NAMES)
    if choice == 0:
        document: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{draw(st.integers(0, 4))}", "namespace": "ns"},
            "spec": {"schedulerName": "phalanx", "schedulingGroup": {"podGroupName": name}, "containers": []},
            "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded"]))},
        }
    elif choice == 1:
        document = {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}, "parentCompositePodGroupName": parent},
        }
    else:
        document = {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "schedulingPolicy": {"gang": {"minGroupCount": draw(st.integers(1, 2))}},
                "parentCompositePodGroupName": parent,
            },
        }
    return draw(st.sampled_from(["upsert", "upsert", "delete"])), document


@given(st.lists(hierarchy_events(), min_size=1, max_size=30))
def test_incremental_index_equals_one_built_from_scratch(events: list[tuple[str, dict[str, Any]]]) -> None:
    incremental = GangIndex(GangSettings(levels=LEVELS))
    final: dict[tuple[str, str], dict[str, Any]] = {}
    for action, document in events:
        identity = (document["kind"], document["metadata"]["name"])
        is_pod = document["kind"] == "Pod"
        if action == "upsert":
            (incremental.upsert_pod if is_pod else incremental.upsert_group)(document)
            final[identity] = document
        else:
            if is_pod:
                incremental.delete_pod("ns", document["metadata"]["name"])
            else:
                incremental.delete_group(document)
            final.pop(identity, None)
        incremental.take_changed()
    scratch = GangIndex(GangSettings(levels=LEVELS))
    for document in final.values():
        (scratch.upsert_pod if document["kind"] == "Pod" else scratch.upsert_group)(document)
    scratch.take_changed()
    assert dict(incremental.results()) == dict(scratch.results())
