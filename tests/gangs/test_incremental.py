"""One event changes exactly the gang it touches; the others are not even compiled again."""

from typing import Any

from scheduler.gangs import GangIndex, GangSettings, GangSpec
from scheduler.gangs.pods import read_bound, read_pod
from tests.gangs.support import (
    EXAMPLES,
    EXPANDED_EXAMPLES,
    LEVELS,
    composite,
    documents,
    feed,
    index_of,
    pfn_pod,
    plugins_group,
    plugins_pod,
    upstream_group,
    upstream_pod,
    volcano_group,
    volcano_pod,
)

PFN_KEY, PLUGINS_KEY, VOLCANO_KEY = "pfn:ns/g", "scheduler-plugins:ns/etl", "volcano:ns/job"


def cluster_with_three_gangs() -> GangIndex:
    index = GangIndex(GangSettings(levels=LEVELS))
    for document in (
        pfn_pod("a0"),
        pfn_pod("a1"),
        plugins_group("etl", minMember=2),
        plugins_pod("b0", "etl"),
        plugins_pod("b1", "etl"),
        volcano_group("job", minMember=1),
        volcano_pod("c0", "job"),
        volcano_pod("c1", "job"),
    ):
        (index.upsert_pod if document["kind"] == "Pod" else index.upsert_group)(document)
    assert index.take_changed() == {PFN_KEY, PLUGINS_KEY, VOLCANO_KEY}
    return index


def members(index: GangIndex, key: str) -> set[str]:
    result = index.get(key)  # type: ignore[arg-type]
    assert result is not None
    return {pod.split("/")[1] for pod in result.pods}


def with_phase(document: dict[str, Any], phase: str) -> dict[str, Any]:
    return {**document, "status": {"phase": phase}}


def test_adding_finishing_and_deleting_members_changes_only_their_gang() -> None:
    index = cluster_with_three_gangs()
    before = {key: index.get(key) for key in (PFN_KEY, PLUGINS_KEY, VOLCANO_KEY)}  # type: ignore[arg-type]

    index.upsert_pod(pfn_pod("a2"))
    assert index.take_changed() == {PFN_KEY}
    assert members(index, PFN_KEY) == {"a0", "a1", "a2"}
    assert index.get(PLUGINS_KEY) is before[PLUGINS_KEY]  # type: ignore[arg-type]
    assert index.get(VOLCANO_KEY) is before[VOLCANO_KEY]  # type: ignore[arg-type]

    index.upsert_pod(with_phase(plugins_pod("b1", "etl"), "Succeeded"))
    assert index.take_changed() == {PLUGINS_KEY}
    assert members(index, PLUGINS_KEY) == {"b0"}
    assert index.gang_of("ns/b1") is None

    index.delete_pod("ns", "c0")
    assert index.take_changed() == {VOLCANO_KEY}
    assert members(index, VOLCANO_KEY) == {"c1"}

    being_deleted = volcano_pod("c1", "job")
    being_deleted["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    index.upsert_pod(being_deleted)
    assert index.take_changed() == {VOLCANO_KEY}
    assert index.get(VOLCANO_KEY) is None  # type: ignore[arg-type]  # no members left: no gang


def test_status_only_updates_and_other_schedulers_pods_change_nothing() -> None:
    index = cluster_with_three_gangs()
    index.upsert_pod(with_phase(pfn_pod("a0"), "Running"))
    foreign = plugins_pod("x", "etl")
    foreign["spec"]["schedulerName"] = "default-scheduler"
    index.upsert_pod(foreign)
    assert index.take_changed() == set()


def test_binding_a_member_recompiles_its_gang_with_the_member_pinned() -> None:
    index = cluster_with_three_gangs()
    bound = pfn_pod("a0")
    bound["spec"]["nodeName"] = "node-1"
    index.upsert_pod(bound)
    assert index.take_changed() == {PFN_KEY}
    spec = index.get(PFN_KEY)  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    assert {member.key: member.node for member in spec.request.members()} == {"ns/a0": "node-1", "ns/a1": None}
    pinned = {member.key: member.shape.constraints.node_name for member in spec.request.members()}
    assert pinned == {"ns/a0": "node-1", "ns/a1": None}


def test_members_bound_together_to_one_node_are_pinned_there_as_a_compile_would_pin_them() -> None:
    """Four members of one shape: three bound to one node and one to another in one batch. The gang is what a
    fresh compile gives, and the members on one node share their pinned shape."""
    index = GangIndex(GangSettings(levels=LEVELS))
    pods = [pfn_pod(f"m{i}", size="4") for i in range(4)]
    for document in pods:
        index.upsert_pod(document)
    index.take_changed()
    nodes = ["node-a", "node-a", "node-b", "node-a"]
    bound = [
        {**document, "spec": {**document["spec"], "nodeName": node}} for document, node in zip(pods, nodes, strict=True)
    ]
    for document in bound:
        index.upsert_pod(document)
    index.take_changed()
    fresh = GangIndex(GangSettings(levels=LEVELS))
    for document in bound:
        fresh.upsert_pod(document)
    fresh.take_changed()
    assert index.results() == fresh.results()
    spec = index.get(PFN_KEY)  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    shapes = {member.key: member.shape for member in spec.request.members()}
    assert {key: shape.constraints.node_name for key, shape in shapes.items()} == dict(
        zip(["ns/m0", "ns/m1", "ns/m2", "ns/m3"], nodes, strict=True)
    )
    assert shapes["ns/m0"] is shapes["ns/m1"] is shapes["ns/m3"] and shapes["ns/m2"] is not shapes["ns/m0"]


def test_a_pending_members_changed_scheduling_directives_reach_its_gang() -> None:
    index = cluster_with_three_gangs()
    changed = pfn_pod("a1")
    changed["spec"]["nodeSelector"] = {"pool": "h100"}  # allowed while a pod is gated (KEP-3838)
    changed["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    index.upsert_pod(changed)
    assert index.take_changed() == {PFN_KEY}
    spec = index.get(PFN_KEY)  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    shape = next(member.shape for member in spec.request.members() if member.key == "ns/a1")
    assert shape.constraints.node_selector == (("pool", "h100"),)
    assert dict(shape.requests)["cpu"] == 3000


def test_a_group_object_change_recompiles_its_gang_only() -> None:
    index = cluster_with_three_gangs()
    index.upsert_group(plugins_group("etl", minMember=1))
    assert index.take_changed() == {PLUGINS_KEY}
    spec = index.get(PLUGINS_KEY)  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec) and spec.request.min_pods == 1


def test_joining_and_leaving_a_composite_moves_a_group_between_gangs() -> None:
    index = GangIndex(GangSettings(levels=LEVELS))
    for document in (
        composite("svc", schedulingPolicy={"gang": {"minGroupCount": 1}}),
        upstream_group("r0", parentCompositePodGroupName="svc", schedulingPolicy={"gang": {"minCount": 1}}),
        upstream_pod("p0", "r0"),
        upstream_group("r1", schedulingPolicy={"gang": {"minCount": 1}}),
        upstream_pod("p1", "r1"),
    ):
        (index.upsert_pod if document["kind"] == "Pod" else index.upsert_group)(document)
    assert index.take_changed() == {"composite:ns/svc", "podgroup:ns/r1"}

    index.upsert_group(
        upstream_group("r1", parentCompositePodGroupName="svc", schedulingPolicy={"gang": {"minCount": 1}})
    )
    assert index.take_changed() == {"composite:ns/svc", "podgroup:ns/r1"}
    assert index.get("podgroup:ns/r1") is None  # type: ignore[arg-type]
    assert members(index, "composite:ns/svc") == {"p0", "p1"}
    assert index.gang_of("ns/p1") == "composite:ns/svc"

    index.delete_group(composite("svc"))
    assert index.take_changed() == {"composite:ns/svc"}
    waiting = index.get("composite:ns/svc")  # type: ignore[arg-type]
    assert waiting is not None and not isinstance(waiting, GangSpec)
    assert "does not exist yet" in waiting.message


def test_members_bound_in_batches_update_their_gang_as_a_compile_would_without_one() -> None:
    """Binds come back a few at a time. Each batch gives the compiled gang its members' nodes, exactly what
    compiling every gang afresh gives, for every example that the API alone serves, and without compiling
    gangs whose pods claim no devices."""
    paths = [path for path in sorted(EXAMPLES.iterdir()) if path.is_dir() and path.name not in EXPANDED_EXAMPLES]
    index = index_of(*paths)
    compiles: list[str] = []
    compile = index.compiler.compile
    index.compiler.compile = lambda key: compiles.append(key) or compile(key)  # type: ignore[method-assign, func-returns-value]
    objects = [document for path in paths for file in sorted(path.rglob("*.yaml")) for document in documents(file)]
    pods = [document for document in objects if document["kind"] == "Pod"]
    members = {pod for result in index.results().values() for pod in result.pods}
    bound = []
    for i, document in enumerate(pods):
        key = f"{document['metadata']['namespace']}/{document['metadata']['name']}"
        if key not in members or document["spec"].get("nodeName"):
            continue  # gated, invalid alone, another scheduler's, bound already: not the case at hand
        bound.append({**document, "spec": {**document["spec"], "nodeName": f"node-{i}"}})
        index.upsert_pod(bound[-1])
        if len(bound) % 3 == 0:
            index.take_changed()
    index.take_changed()
    assert len(bound) > 20 and not compiles
    fresh = GangIndex(GangSettings(levels=LEVELS))
    for document in objects:
        feed(fresh, next((pod for pod in bound if pod["metadata"] == document["metadata"]), document))
    fresh.take_changed()
    assert index.results() == fresh.results()
    assert {member.node for result in index.results().values() for member in result.request.members()} > {"node-0"}
    # what each bound member is known as, taken from its last event, is what reading its bind event gives
    for document in bound:
        key = f"{document['metadata']['namespace']}/{document['metadata']['name']}"
        assert index.pod(key) == read_pod(document, GangSettings(levels=LEVELS))


def test_a_bind_event_is_read_from_the_member_s_last_event_only_when_it_changed_no_more_than_a_bind_does() -> None:
    settings = GangSettings(levels=LEVELS)
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "team", "name": "w0", "uid": "u0", "resourceVersion": "1",
                     "annotations": {"pod-group.scheduling.sigs.k8s.io/name": "train",
                                     "pod-group.scheduling.sigs.k8s.io/min-available": "2"}},
        "spec": {"schedulerName": "phalanx", "containers": [{"name": "main", "image": "pause"}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    before = read_pod(pending, settings)
    assert before is not None
    bound = {
        **pending,
        "metadata": {**pending["metadata"], "resourceVersion": "2"},
        "spec": {**pending["spec"], "nodeName": "n0"},
        "status": {"phase": "Running"},
    }
    assert read_bound(bound, before) == read_pod(bound, settings)
    managed = {**bound, "metadata": {**bound["metadata"], "managedFields": [{"manager": "kube-scheduler"}]}}
    assert read_bound(managed, before) == read_pod(managed, settings)
    relabelled = {**bound, "metadata": {**bound["metadata"], "labels": {"team": "b"}}}
    respecced = {**bound, "spec": {**bound["spec"], "priority": 7}}
    assert read_bound(relabelled, before) is None and read_bound(respecced, before) is None
