"""The in-process store keeps the API semantics the scheduler relies on."""

import anyio
import pytest

from scheduler.ports.sim.selectors import selector
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, Store
from tests.sim.support import lease, pod, store, without


def pods_of(sim: Store):  # type: ignore[no-untyped-def]
    return sim.resource("v1", "Pod")


def test_create_sets_identity_and_every_write_advances_the_resource_version() -> None:
    sim = store()
    created = sim.create(pods_of(sim), "ns", pod("a"))
    metadata = created["metadata"]
    assert metadata["uid"] and metadata["creationTimestamp"].endswith("Z") and metadata["generation"] == 1
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}  # as the API server fills it
    first = int(metadata["resourceVersion"])
    second = sim.create(pods_of(sim), "ns", pod("b"))
    assert int(second["metadata"]["resourceVersion"]) == first + 1
    named = sim.create(pods_of(sim), "ns", {**pod(""), "metadata": {"generateName": "worker-"}})
    assert named["metadata"]["name"].startswith("worker-") and len(named["metadata"]["name"]) == len("worker-") + 5


def test_duplicates_missing_objects_and_missing_namespaces_are_refused_like_the_api() -> None:
    sim = store()
    sim.create(pods_of(sim), "ns", pod("a"))
    with pytest.raises(ApiError) as duplicate:
        sim.create(pods_of(sim), "ns", pod("a"))
    assert (duplicate.value.code, duplicate.value.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as missing:
        sim.get(pods_of(sim), "ns", "zzz")
    assert (missing.value.code, missing.value.message) == (404, 'pods "zzz" not found')
    with pytest.raises(ApiError) as mismatch:
        sim.create(pods_of(sim), "elsewhere", pod("a"))
    assert mismatch.value.code == 400
    stray = pod("a")
    stray["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(ApiError) as no_namespace:
        sim.create(pods_of(sim), "elsewhere", stray)
    assert no_namespace.value.message == 'namespaces "elsewhere" not found'


def test_update_with_a_stale_resource_version_is_a_conflict() -> None:
    sim = store()
    leases = sim.resource("coordination.k8s.io/v1", "Lease")
    held = sim.create(leases, "ns", lease("leader", "a"))
    sim.update(leases, "ns", "leader", {**held, "spec": {**held["spec"], "holderIdentity": "a"}})
    with pytest.raises(ApiError) as stale:
        sim.update(leases, "ns", "leader", {**held, "spec": {**held["spec"], "holderIdentity": "b"}})
    assert stale.value.code == 409
    assert "the object has been modified" in stale.value.message
    assert sim.get(leases, "ns", "leader")["spec"]["holderIdentity"] == "a"


def test_status_subresource_writes_only_status_and_generation_tracks_spec() -> None:
    sim = store()
    groups = sim.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")
    created = sim.create(groups, "ns", {"metadata": {"name": "g"}, "spec": {"minMember": 2}, "status": {"phase": "X"}})
    assert "status" not in created  # create ignores status on a resource with a status subresource
    patched = sim.patch(
        groups,
        "ns",
        "g",
        {"status": {"phase": "Scheduled"}, "spec": {"minMember": 9}},
        MERGE_PATCH,
        subresource="status",
    )
    assert patched["status"] == {"phase": "Scheduled"} and patched["spec"]["minMember"] == 2
    assert patched["metadata"]["generation"] == 1
    main = sim.patch(groups, "ns", "g", {"spec": {"minMember": 3}, "status": {"phase": "Ignored"}}, MERGE_PATCH)
    assert main["spec"]["minMember"] == 3 and main["status"] == {"phase": "Scheduled"}
    assert main["metadata"]["generation"] == 2


def test_strategic_merge_patch_merges_conditions_by_type() -> None:
    sim = store()
    sim.create(pods_of(sim), "ns", pod("a"))
    first = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}
    sim.patch(pods_of(sim), "ns", "a", first, STRATEGIC_MERGE_PATCH, subresource="status")
    second = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    patched = sim.patch(pods_of(sim), "ns", "a", second, STRATEGIC_MERGE_PATCH, subresource="status")
    assert [c["type"] for c in patched["status"]["conditions"]] == ["PodScheduled", "Ready"]
    annotated = sim.patch(pods_of(sim), "ns", "a", {"metadata": {"annotations": {"x": "1"}}}, STRATEGIC_MERGE_PATCH)
    assert annotated["metadata"]["annotations"] == {"x": "1"}
    removed = sim.patch(pods_of(sim), "ns", "a", [{"op": "remove", "path": "/metadata/annotations/x"}], JSON_PATCH)
    assert removed["metadata"]["annotations"] == {}


def test_custom_resources_refuse_strategic_merge_patch() -> None:
    sim = store()
    groups = sim.resource("scheduling.volcano.sh/v1beta1", "PodGroup")
    sim.create(groups, "ns", {"metadata": {"name": "g"}, "spec": {}})
    with pytest.raises(ApiError) as refused:
        sim.patch(groups, "ns", "g", {"spec": {"minMember": 1}}, STRATEGIC_MERGE_PATCH)
    assert refused.value.code == 415


def test_binding_sets_the_node_once_and_only_through_the_subresource() -> None:
    sim = store()
    created = sim.create(pods_of(sim), "ns", pod("a"))
    sim.bind("ns", "a", {"target": {"kind": "Node", "name": "n1"}, "metadata": {"uid": created["metadata"]["uid"]}})
    bound = sim.get(pods_of(sim), "ns", "a")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    with pytest.raises(ApiError) as twice:
        sim.bind("ns", "a", {"target": {"name": "n2"}})
    assert (twice.value.code, twice.value.message) == (
        409,
        'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n1"',
    )
    with pytest.raises(ApiError) as gone:
        sim.bind("ns", "ghost", {"target": {"name": "n1"}})
    assert gone.value.code == 404
    with pytest.raises(ApiError) as forbidden:
        sim.patch(pods_of(sim), "ns", "a", {"spec": {"nodeName": "n3"}}, STRATEGIC_MERGE_PATCH)
    assert forbidden.value.code == 422
    sim.create(pods_of(sim), "ns", pod("b"))
    with pytest.raises(ApiError) as recreated:
        sim.bind("ns", "b", {"target": {"name": "n1"}, "metadata": {"uid": "some-older-pod"}})
    assert recreated.value.code == 409 and "Precondition failed" in recreated.value.message


def test_selectors_filter_lists() -> None:
    sim = store()
    sim.create(pods_of(sim), "ns", pod("a", {"team": "x"}))
    sim.create(pods_of(sim), "ns", pod("b", {"team": "y"}, scheduler="default-scheduler"))
    sim.create(pods_of(sim), "ns", pod("c", {"team": "x", "tier": "1"}))

    def names(labels: str | None = None, fields: str | None = None) -> list[str]:
        items, _, _ = sim.list(pods_of(sim), "ns", selector(labels, fields, kind="Pod"))
        return [item["metadata"]["name"] for item in items]

    assert names("team=x") == ["a", "c"]
    assert names("team in (x,y),!tier") == ["a", "b"]
    assert names("team!=x") == ["b"]
    assert names(fields="spec.schedulerName=phalanx,status.phase=Pending") == ["a", "c"]
    assert names(fields="spec.nodeName=") == ["a", "b", "c"]
    with pytest.raises(ApiError) as unknown:
        names(fields="spec.priority=1")
    assert unknown.value.code == 400


def test_list_pages_with_limit_and_continue() -> None:
    sim = store()
    for name in "abcde":
        sim.create(pods_of(sim), "ns", pod(name))
    first, _, token = sim.list(pods_of(sim), "ns", limit=2)
    second, _, token2 = sim.list(pods_of(sim), "ns", limit=2, continue_token=token)
    third, _, token3 = sim.list(pods_of(sim), "ns", limit=2, continue_token=token2)
    assert [[item["metadata"]["name"] for item in page] for page in (first, second, third)] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    assert token3 is None


def test_every_page_of_a_list_comes_from_its_first_pages_snapshot() -> None:
    sim = store()
    for name in "bdf":
        sim.create(pods_of(sim), "ns", pod(name))
    first, version, token = sim.list(pods_of(sim), "ns", limit=2)
    sim.create(pods_of(sim), "ns", pod("e"))  # sorts into the second page, but came after the list began
    sim.delete(pods_of(sim), "ns", "f")
    second, second_version, last = sim.list(pods_of(sim), "ns", limit=2, continue_token=token)
    assert [item["metadata"]["name"] for item in first + second] == ["b", "d", "f"]
    assert second_version == version and last is None


def test_a_continue_token_expires_once_enough_newer_lists_are_in_progress() -> None:
    sim = store()
    for name in "abc":
        sim.create(pods_of(sim), "ns", pod(name))
    _, _, oldest = sim.list(pods_of(sim), "ns", limit=1)
    for _ in range(8):
        sim.list(pods_of(sim), "ns", limit=1)
    with pytest.raises(ApiError) as expired:
        sim.list(pods_of(sim), "ns", limit=1, continue_token=oldest)
    assert (expired.value.code, expired.value.reason) == (410, "Expired")
    with pytest.raises(ApiError) as garbled:
        sim.list(pods_of(sim), "ns", limit=1, continue_token="not-a-token")
    assert garbled.value.code == 400


async def collect(stream, count: int) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    found = []
    with anyio.fail_after(60):
        while len(found) < count:
            event = await stream.next()
            assert event is not None
            found.append((event.type, event.object["metadata"].get("name", "")))
    return found


async def test_watch_replays_changes_after_a_version_exactly_once_in_order() -> None:
    sim = store()
    resource = pods_of(sim)
    sim.create(resource, "ns", pod("a"))
    since = sim.resource_version
    sim.create(resource, "ns", pod("b"))
    sim.patch(resource, "ns", "a", {"metadata": {"labels": {"x": "1"}}}, MERGE_PATCH)
    stream = sim.watch(resource, "ns", resource_version=str(since))
    sim.delete(resource, "ns", "b")  # a pod is marked for deletion first, as the API server does
    assert await collect(stream, 4) == [("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert stream.pending == 0


async def test_watch_with_a_selector_sees_objects_enter_and_leave() -> None:
    sim = store()
    resource = pods_of(sim)
    stream = sim.watch(resource, "ns", selector("team=x"), resource_version=str(sim.resource_version))
    sim.create(resource, "ns", pod("a", {"team": "y"}))
    sim.patch(resource, "ns", "a", {"metadata": {"labels": {"team": "x"}}}, MERGE_PATCH)
    sim.patch(resource, "ns", "a", {"metadata": {"labels": {"tier": "1"}}}, MERGE_PATCH)
    sim.patch(resource, "ns", "a", {"metadata": {"labels": {"team": "z"}}}, MERGE_PATCH)
    assert await collect(stream, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_watch_from_a_compacted_version_is_gone_and_a_relist_recovers() -> None:
    sim = store(history=3)
    resource = pods_of(sim)
    since = sim.resource_version
    for name in "abcde":
        sim.create(resource, "ns", pod(name))
    with pytest.raises(ApiError) as expired:
        sim.watch(resource, "ns", resource_version=str(since))
    assert (expired.value.code, expired.value.reason) == (410, "Expired")
    items, version, _ = sim.list(resource, "ns")
    assert len(items) == 5
    stream = sim.watch(resource, "ns", resource_version=str(version))
    sim.create(resource, "ns", pod("f"))
    assert await collect(stream, 1) == [("ADDED", "f")]


async def test_idle_watch_gets_bookmarks_and_ends_at_its_timeout() -> None:
    sim = store()
    stream = sim.watch(
        pods_of(sim), "ns", resource_version=str(sim.resource_version), bookmark_interval=0.05, timeout=0.3
    )
    with anyio.fail_after(60):
        event = await stream.next()
        assert event is not None and event.type == "BOOKMARK"
        assert event.object["metadata"]["resourceVersion"] == str(sim.resource_version)
        while (event := await stream.next()) is not None:
            assert event.type == "BOOKMARK"


async def test_watch_from_empty_version_starts_with_the_current_objects() -> None:
    sim = store()
    sim.create(pods_of(sim), "ns", pod("a"))
    stream = sim.watch(pods_of(sim), "ns", resource_version="")
    assert await collect(stream, 1) == [("ADDED", "a")]


def test_versions_of_one_resource_share_storage() -> None:
    sim = store()
    beta = sim.resource("scheduling.k8s.io/v1beta1", "PodGroup")
    alpha = sim.resource("scheduling.k8s.io/v1alpha3", "PodGroup")
    sim.create(beta, "ns", {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"basic": {}}}})
    assert sim.get(alpha, "ns", "g")["apiVersion"] == "scheduling.k8s.io/v1alpha3"


def test_deleting_a_namespace_deletes_what_is_in_it() -> None:
    sim = store()
    sim.create(pods_of(sim), "ns", pod("a"))
    sim.delete(sim.resource("v1", "Namespace"), None, "ns")
    assert sim.list(pods_of(sim))[0] == []


def test_switched_off_apis_are_not_served() -> None:
    sim = Store(catalog=without({"scheduling.volcano.sh"}))
    with pytest.raises(ApiError) as missing:
        sim.resource("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert missing.value.code == 404
    assert "scheduling.volcano.sh" not in sim.catalog.groups()
    assert sim.catalog.versions("scheduling.k8s.io") == ["v1", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"]
