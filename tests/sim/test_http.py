"""SimCluster over HTTP, driven by kubernetes_asyncio exactly as the scheduler drives a real cluster."""

import json
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, watch

from scheduler.ports.sim.faults import FaultRule
from scheduler.ports.sim.store import Store
from tests.sim.support import lease, pod, served, store, without


async def next_events(stream: watch.Watch, count: int, *, skip_bookmarks: bool = True) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async for event in stream:
            if skip_bookmarks and event["type"] == "BOOKMARK":
                continue
            events.append(event)
            if len(events) == count:
                break
    return events


async def test_list_then_watch_sees_every_change_once_in_order_across_dropped_watches() -> None:
    sim = store()
    async with served(sim) as (server, api):
        core = client.CoreV1Api(api)
        for name in ("a", "b"):
            await core.create_namespaced_pod("ns", pod(name))
        listed = await core.list_namespaced_pod("ns")
        assert [item.metadata.name for item in listed.items] == ["a", "b"]
        server.faults.drop_watch_after = 3  # every watch connection closes after three events
        stream = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=listed.metadata.resource_version)
        expected: list[tuple[str, str]] = []
        for i in range(5):
            await core.create_namespaced_pod("ns", pod(f"w{i}"))
            expected.append(("ADDED", f"w{i}"))
        await core.delete_namespaced_pod("a", "ns")
        expected += [("MODIFIED", "a"), ("DELETED", "a")]  # marked for deletion first, then gone
        await core.patch_namespaced_pod("b", "ns", {"metadata": {"labels": {"seen": "yes"}}})
        expected.append(("MODIFIED", "b"))
        events = await next_events(stream, len(expected))
        assert [(event["type"], event["raw_object"]["metadata"]["name"]) for event in events] == expected
        versions = [int(event["raw_object"]["metadata"]["resourceVersion"]) for event in events]
        assert versions == sorted(set(versions))  # in order, none twice
        assert server.faults.injected["watch dropped"] >= 2
        await stream.close()


async def test_a_lagging_watch_sends_each_event_late_and_in_order() -> None:
    """``Faults.watch_lag``: a watcher's cache behind the store, so that tests can make its races happen."""
    sim = store()
    async with served(sim) as (server, api):
        core = client.CoreV1Api(api)
        listed = await core.list_namespaced_pod("ns")
        server.faults.watch_lag["pods"] = (0.3, 0.3)
        stream = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=listed.metadata.resource_version)
        created = anyio.current_time()
        for name in ("a", "b"):
            await core.create_namespaced_pod("ns", pod(name))
        events = await next_events(stream, 2)
        assert anyio.current_time() - created >= 0.6  # each waits behind the one before
        assert [event["raw_object"]["metadata"]["name"] for event in events] == ["a", "b"]
        assert server.faults.lagged == 2 and not server.faults.injected  # a lag is no fault
        await stream.close()


async def test_watch_from_a_compacted_version_gets_410_and_a_relist_recovers() -> None:
    sim = store(history=2)
    async with served(sim) as (_, api):
        core = client.CoreV1Api(api)
        old = (await core.list_namespaced_pod("ns")).metadata.resource_version
        for i in range(4):
            await core.create_namespaced_pod("ns", pod(f"p{i}"))
        stale = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=old, timeout_seconds=5)
        with pytest.raises(client.ApiException) as expired:
            await next_events(stale, 1)
        assert expired.value.status == 410
        relisted = await core.list_namespaced_pod("ns")
        assert len(relisted.items) == 4
        fresh = watch.Watch().stream(
            core.list_namespaced_pod, "ns", resource_version=relisted.metadata.resource_version, timeout_seconds=5
        )
        await core.create_namespaced_pod("ns", pod("after"))
        assert [event["raw_object"]["metadata"]["name"] for event in await next_events(fresh, 1)] == ["after"]
        await fresh.close()


async def test_binding_an_already_bound_pod_is_a_409() -> None:
    sim = store()
    async with served(sim) as (_, api):
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("ns", pod("a"))
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name="a"), target=client.V1ObjectReference(kind="Node", name="n1")
        )
        # kubernetes_asyncio 36 cannot read a Binding response into its model: ask for the raw response.
        created = await core.create_namespaced_pod_binding("a", "ns", binding, _preload_content=False)
        assert created.status == 201
        again = await core.create_namespaced_pod_binding("a", "ns", binding, _preload_content=False)
        # With _preload_content=False the client does not raise: the status must be checked by the caller.
        assert again.status == 409
        status = json.loads(await again.text())
        assert (status["kind"], status["reason"], status["message"]) == (
            "Status",
            "Conflict",
            'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n1"',
        )
        with pytest.raises(client.ApiException) as conflict:
            await core.create_namespaced_pod_binding("a", "ns", binding)
        assert conflict.value.status == 409
        assert (await core.read_namespaced_pod("a", "ns")).spec.node_name == "n1"


async def test_selectors_filter_lists_over_http() -> None:
    sim = store()
    async with served(sim) as (_, api):
        core = client.CoreV1Api(api)
        await core.create_namespaced_pod("ns", pod("a", {"gang": "x"}))
        await core.create_namespaced_pod("ns", pod("b", {"gang": "y"}, scheduler="other"))
        by_label = await core.list_namespaced_pod("ns", label_selector="gang=x")
        by_field = await core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=other")
        assert [item.metadata.name for item in by_label.items] == ["a"]
        assert [item.metadata.name for item in by_field.items] == ["b"]
        with pytest.raises(client.ApiException) as bad:
            await core.list_namespaced_pod("ns", field_selector="spec.volumes=x")
        assert bad.value.status == 400


async def test_leases_use_optimistic_concurrency() -> None:
    sim = store()
    async with served(sim) as (_, api):
        leases = client.CoordinationV1Api(api)
        await leases.create_namespaced_lease("ns", lease("phalanx", "replica-a"))
        seen = await leases.read_namespaced_lease("phalanx", "ns")
        seen.spec.holder_identity = "replica-a"
        await leases.replace_namespaced_lease("phalanx", "ns", seen)
        seen.spec.holder_identity = "replica-b"  # still carries the resourceVersion it read before the write
        with pytest.raises(client.ApiException) as lost:
            await leases.replace_namespaced_lease("phalanx", "ns", seen)
        assert lost.value.status == 409
        assert (await leases.read_namespaced_lease("phalanx", "ns")).spec.holder_identity == "replica-a"


async def test_discovery_lists_exactly_the_enabled_apis() -> None:
    sim = Store(catalog=without({"scheduling.volcano.sh", "scheduling.phalanx.dev"}))
    async with served(sim) as (_, api):
        groups = await client.ApisApi(api).get_api_versions()
        names = {group.name for group in groups.groups}
        expected = {"coordination.k8s.io", "events.k8s.io", "policy", "resource.k8s.io", "scheduling.k8s.io"}
        assert names == expected | {"scheduling.x-k8s.io"}
        scheduling = next(group for group in groups.groups if group.name == "scheduling.k8s.io")
        assert scheduling.preferred_version.version == "v1"
        assert [version.version for version in scheduling.versions] == [
            "v1",
            "v1beta1",
            "v1alpha3",
            "v1alpha2",
            "v1alpha1",
        ]
        resources = await client.CustomObjectsApi(api).get_api_resources("scheduling.k8s.io", "v1alpha3")
        assert {resource.name for resource in resources.resources} >= {"compositepodgroups", "podgroups", "workloads"}
        with pytest.raises(client.ApiException) as missing:
            await client.CustomObjectsApi(api).list_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", "ns", "podgroups"
            )
        assert missing.value.status == 404


async def test_custom_resources_and_their_status_over_http() -> None:
    sim = store()
    async with served(sim) as (_, api):
        custom = client.CustomObjectsApi(api)
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 2},
        }
        await custom.create_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", "ns", "podgroups", group)
        await custom.patch_namespaced_custom_object_status(
            "scheduling.x-k8s.io",
            "v1alpha1",
            "ns",
            "podgroups",
            "g",
            {"status": {"phase": "Scheduled", "running": 2}},
            _content_type="application/merge-patch+json",
        )
        read = await custom.get_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", "ns", "podgroups", "g")
        assert read["status"] == {"phase": "Scheduled", "running": 2} and read["spec"] == {"minMember": 2}


async def test_idle_watches_get_bookmarks_over_http() -> None:
    sim = store()
    async with served(sim, bookmark_interval=0.05) as (_, api):
        core = client.CoreV1Api(api)
        version = (await core.list_namespaced_pod("ns")).metadata.resource_version
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "ns", resource_version=version, allow_watch_bookmarks=True, timeout_seconds=5
        )
        (event,) = await next_events(stream, 1, skip_bookmarks=False)
        assert event["type"] == "BOOKMARK" and event["raw_object"]["metadata"]["resourceVersion"] == version
        await stream.close()


async def test_injected_faults_are_seeded_and_carry_retry_after() -> None:
    async def outcomes(seed: int) -> list[int]:
        sim = store()
        async with served(sim) as (server, api):
            server.faults.seed = seed
            server.faults.__post_init__()
            server.faults.rules.append(
                FaultRule(verbs=frozenset({"list"}), resources=frozenset({"pods"}), error_rate=0.5, codes=(429, 500))
            )
            core = client.CoreV1Api(api)
            found = []
            for _ in range(16):
                try:
                    await core.list_namespaced_pod("ns")
                    found.append(200)
                except client.ApiException as error:
                    found.append(error.status)
                    if error.status == 429:
                        assert error.headers["Retry-After"] == "1"
            return found

    first, again, other = await outcomes(3), await outcomes(3), await outcomes(4)
    assert first == again
    assert first != other
    assert {429, 500, 200} <= set(first) | set(other)


async def test_errors_are_status_objects() -> None:
    sim = store()
    async with served(sim) as (server, api):
        core = client.CoreV1Api(api)
        with pytest.raises(client.ApiException) as missing:
            await core.read_namespaced_pod("ghost", "ns")
        body = json.loads(missing.value.body)
        assert (missing.value.status, body["kind"], body["reason"], body["message"]) == (
            404,
            "Status",
            "NotFound",
            'pods "ghost" not found',
        )
        server.faults.bind_failures["ns/p"] = 500
        await core.create_namespaced_pod("ns", pod("p"))
        failed = await core.create_namespaced_pod_binding(
            "p",
            "ns",
            client.V1Binding(metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(name="n")),
            _preload_content=False,
        )
        assert failed.status == 500
        server.faults.unavailable = True
        with pytest.raises(client.ApiException) as down:
            await core.list_namespaced_pod("ns")
        assert down.value.status == 503


async def test_a_forced_410_makes_the_next_watch_expire() -> None:
    sim = store()
    async with served(sim) as (server, api):
        core = client.CoreV1Api(api)
        version = (await core.list_namespaced_pod("ns")).metadata.resource_version
        server.faults.expire_next_watches = 1
        expired = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=version, timeout_seconds=5)
        with pytest.raises(client.ApiException) as gone:
            await next_events(expired, 1)
        assert gone.value.status == 410
        again = watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=version, timeout_seconds=5)
        await core.create_namespaced_pod("ns", pod("x"))
        assert [event["raw_object"]["metadata"]["name"] for event in await next_events(again, 1)] == ["x"]
        await again.close()
        assert server.faults.injected["watch 410"] == 1


async def test_protobuf_bodies_other_than_a_namespace_are_415_naming_what_is_read() -> None:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    type_meta = field(1, b"scheduling.k8s.io/v1") + field(2, b"PriorityClass")
    body = b"k8s\x00" + field(1, type_meta) + field(2, field(1, field(1, b"high")))  # kubectl create priorityclass
    sim = store()
    async with served(sim) as (server, _), aiohttp.ClientSession() as session:
        answer = await session.post(
            server.url + "/apis/scheduling.k8s.io/v1/priorityclasses",
            data=body,
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
        )
        status = await answer.json()
    assert answer.status == 415 and "(SimCluster: only for a Namespace)" in status["message"]
