"""The API behaviour Phalanx and its users rely on, pinned on both servers (see conftest)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio

from tests.contract.conftest import Answer, Api, from_yaml, pod

DATA = Path(__file__).parent / "data"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PODGROUPS = {"group": "scheduling.x-k8s.io", "version": "v1alpha1"}
VOLCANO = {"group": "scheduling.volcano.sh", "version": "v1beta1"}


def names(resource_list: dict[str, Any]) -> set[str]:
    return {item["name"] for item in resource_list["resources"]}


async def test_discovery_names_each_resource_and_only_the_subresources_it_has(api: Api) -> None:
    core = names(await api.ok("GET", "/api/v1"))
    assert {"pods", "pods/status", "pods/binding", "nodes", "nodes/status", "namespaces", "events"} <= core
    assert "events" in names(await api.ok("GET", "/apis/events.k8s.io/v1"))
    assert {"podgroups", "podgroups/status"} <= names(await api.ok("GET", "/apis/scheduling.x-k8s.io/v1alpha1"))
    volcano = names(await api.ok("GET", "/apis/scheduling.volcano.sh/v1beta1"))
    assert "podgroups" in volcano and "podgroups/status" not in volcano  # as Volcano publishes its CRD
    groups = {group["name"] for group in (await api.ok("GET", "/apis"))["groups"]}
    assert {"scheduling.x-k8s.io", "scheduling.volcano.sh", "scheduling.phalanx.dev", "events.k8s.io"} <= groups


async def test_unknown_paths_are_404_and_known_collections_are_not_their_parent(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    for path in (
        api.path("nothings"),
        api.path("pods", "p/foo"),
        api.path("pods", "p/events"),
        "/apis/scheduling.k8s.io/v9/podgroups",
        "/apis/nothing.example.com/v1/foos",
    ):
        assert (await api.request("GET", path)).status == 404, path
    events = await api.ok("GET", api.path("events"))  # the namespace's core/v1 Events, not the Namespace
    assert events["kind"] == "EventList"


async def test_methods_a_resource_does_not_serve_are_405(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    assert (await api.request("GET", api.path("pods", "p/binding"))).status == 405
    assert (await api.request("POST", api.path("pods", "p"), pod("p"))).status == 405
    assert (await api.request("PUT", api.path("pods"), pod("p"))).status == 405


async def test_object_names_are_validated_as_the_api_server_validates_them(api: Api) -> None:
    bad = await api.request("POST", api.path("pods"), pod("Bad_Name"))
    assert (bad.status, bad.reason) == (422, "Invalid")
    assert [cause["field"] for cause in bad.json["details"]["causes"]] == ["metadata.name"]
    generated = await api.ok("POST", api.path("pods"), {**pod(""), "metadata": {"generateName": "gen-"}})
    assert re.fullmatch(r"gen-[a-z0-9]{5}", generated["metadata"]["name"])
    dotted = await api.request("POST", api.path("pods"), {**pod(""), "metadata": {"generateName": "gen."}})
    assert dotted.status == 422 and dotted.json["details"]["causes"][0]["field"] == "metadata.generateName"
    assert (await api.request("POST", api.path("pods"), pod("p"))).status == 201
    again = await api.request("POST", api.path("pods"), pod("p"))
    assert (again.status, again.reason) == (409, "AlreadyExists")
    elsewhere = await api.request("POST", "/api/v1/namespaces/no-such-namespace/pods", pod("p"))
    assert (elsewhere.status, elsewhere.reason) == (404, "NotFound")
    versioned = await api.request(
        "POST", api.path("pods"), {**pod("q"), "metadata": {"name": "q", "resourceVersion": "5"}}
    )
    assert versioned.status == 500 and "resourceVersion should not be set" in versioned.json["message"]


async def test_resource_versions_grow_and_a_stale_update_is_a_conflict(api: Api) -> None:
    first = await api.ok("POST", api.path("pods"), pod("p"))
    second = await api.ok("PATCH", api.path("pods", "p"), {"metadata": {"labels": {"a": "b"}}},
                          content_type="application/merge-patch+json")  # fmt: skip
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    stale = await api.request("PUT", api.path("pods", "p"), first)
    assert (stale.status, stale.reason) == (409, "Conflict")
    listing = await api.ok("GET", api.path("pods"))
    assert int(listing["metadata"]["resourceVersion"]) >= int(second["metadata"]["resourceVersion"])
    missing = await api.request("PATCH", api.path("pods", "nope"), {}, content_type="application/merge-patch+json")
    assert missing.status == 404


async def test_empty_labels_and_annotations_are_not_kept(api: Api) -> None:
    """Go leaves empty maps out of what it stores (``omitempty``): a client reads them back as absent."""
    body = {**pod("empty"), "metadata": {"name": "empty", "labels": {}, "annotations": {}}}
    created = await api.ok("POST", api.path("pods"), body)
    assert "labels" not in created["metadata"] and "annotations" not in created["metadata"]
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "empty", "annotations": {}}, "spec": {"minMember": 1}}  # fmt: skip
    created = await api.ok("POST", api.path("podgroups", **PODGROUPS), group)
    assert "annotations" not in created["metadata"]


async def test_status_and_spec_are_written_only_through_their_own_endpoints(api: Api) -> None:
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 2}, "status": {"phase": "Running"}}  # fmt: skip
    created = await api.ok("POST", api.path("podgroups", **PODGROUPS), group)
    assert "status" not in created  # status is the status subresource's
    written = await api.ok("PATCH", api.path("podgroups", "g/status", **PODGROUPS),
                           {"status": {"phase": "Scheduled"}, "spec": {"minMember": 9}},
                           content_type="application/merge-patch+json")  # fmt: skip
    assert written["status"] == {"phase": "Scheduled"} and written["spec"] == {"minMember": 2}
    volcano = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "v"},
               "spec": {"minMember": 2}}  # fmt: skip
    await api.ok("POST", api.path("podgroups", **VOLCANO), volcano)
    kept = await api.ok("PATCH", api.path("podgroups", "v", **VOLCANO), {"status": {"phase": "Running"}},
                        content_type="application/merge-patch+json")  # fmt: skip
    assert kept["status"]["phase"] == "Running"  # no subresource: status is written with the object


async def test_a_crd_schema_prunes_what_it_does_not_declare(api: Api) -> None:
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 2, "notInTheSchema": True}}  # fmt: skip
    created = await api.ok("POST", api.path("podgroups", **PODGROUPS), group)
    assert created["spec"] == {"minMember": 2}
    written = await api.ok("PATCH", api.path("podgroups", "g/status", **PODGROUPS),
                           {"status": {"phase": "Scheduled", "scheduled": 3}},
                           content_type="application/merge-patch+json")  # fmt: skip
    assert written["status"] == {"phase": "Scheduled"}  # the count Phalanx once wrote here is dropped
    volcano = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "v"},
        "spec": {"minMember": 2, "subGroupPolicy": [{"name": "s", "matchPolicy": [{"labelKey": "k"}]}]},
    }
    created = await api.ok("POST", api.path("podgroups", **VOLCANO), volcano)  # defaults filled, old fields gone
    assert created["spec"] == {"minMember": 2, "queue": "default",
                               "subGroupPolicy": [{"name": "s", "minSubGroups": 0, "subGroupSize": 1}]}  # fmt: skip


async def test_binding_assigns_once_and_refuses_a_gated_pod(api: Api) -> None:
    """Learned from the real server: it refuses to bind a pod that still has ``spec.schedulingGates`` (409, with
    this message), which the emulator first allowed."""
    created = await api.ok("POST", api.path("pods"), pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "b0-r0-n0"}}  # fmt: skip
    assert (await api.ok("POST", api.path("pods", "p/binding"), binding))["status"] == "Success"
    bound = await api.ok("GET", api.path("pods", "p"))
    assert bound["spec"]["nodeName"] == "b0-r0-n0"
    assert [(c["type"], c["status"]) for c in bound["status"]["conditions"]] == [("PodScheduled", "True")]
    again = await api.request("POST", api.path("pods", "p/binding"), binding)
    assert (again.status, again.json["message"]) == (
        409, 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "b0-r0-n0"'
    )  # fmt: skip
    await api.ok("POST", api.path("pods"), pod("q"))
    stale = await api.request("POST", api.path("pods", "q/binding"),
                              {**binding, "metadata": {"name": "q", "uid": created["metadata"]["uid"]}})  # fmt: skip
    assert stale.status == 409  # the uid is p's: q is not the pod the binding was meant for
    missing = await api.request("POST", api.path("pods", "nope/binding"), {**binding, "metadata": {"name": "nope"}})
    assert missing.status == 404

    gated = await api.ok("POST", api.path("pods"), pod("g", schedulingGates=[{"name": "example.com/quota"}]))
    (condition,) = gated["status"]["conditions"]
    assert {key: condition[key] for key in ("type", "status", "reason", "message")} == {
        "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }  # fmt: skip
    refused = await api.request("POST", api.path("pods", "g/binding"), {**binding, "metadata": {"name": "g"}})
    assert (refused.status, refused.json["message"]) == (
        409, 'Operation cannot be fulfilled on pods/binding "g": pod g has non-empty .spec.schedulingGates'
    )  # fmt: skip
    added = await api.request("PATCH", api.path("pods", "g"), {"spec": {"schedulingGates": [
        {"name": "example.com/quota"}, {"name": "more"}]}}, content_type="application/merge-patch+json")  # fmt: skip
    assert added.status == 422 and added.json["details"]["causes"][0]["field"] == "spec.schedulingGates[1].name"
    await api.ok("PATCH", api.path("pods", "g"), {"spec": {"schedulingGates": None}},
                 content_type="application/merge-patch+json")  # fmt: skip
    await api.ok("POST", api.path("pods", "g/binding"), {**binding, "metadata": {"name": "g"}})


def event(name: str, namespace: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-11-23T10:00:00.000000Z",
        "reportingController": "phalanx.dev/scheduler",
        "reportingInstance": "phalanx-0",
        "action": "Scheduling",
        "reason": "FailedScheduling",
        "type": "Warning",
        "note": "0/64 nodes are available",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "p", "uid": "u-1"},
    }
    for key, value in fields.items():
        if value is None:
            body.pop(key)
        else:
            body[key] = value
    return body


async def test_events_are_validated_as_the_api_server_validates_them(api: Api) -> None:
    """Learned from the real server: it once refused every Event Phalanx wrote (their names and fields), which
    the emulator had accepted; each rule here is one it was seen to apply."""
    path = api.path("events", group="events.k8s.io")
    cases = {
        "p.18eaba7efe209df3": ({}, None),
        "E": ({}, "metadata.name"),
        "no-time": ({"eventTime": None}, "eventTime"),
        "bad-type": ({"type": "Info"}, "type"),
        "no-controller": ({"reportingInstance": None}, "reportingInstance"),
        "no-action": ({"action": None}, "action"),
        "long-reason": ({"reason": "r" * 129}, "reason"),
        "long-note": ({"note": "é" * 513}, "message"),  # 1026 bytes: the limit counts bytes
        "one-in-series": ({"series": {"count": 1, "lastObservedTime": "2026-11-23T10:00:00.000000Z"}}, "series.count"),
        "legacy-times": ({"deprecatedLastTimestamp": "2026-11-23T10:00:00Z"}, "lastTimestamp"),  # not through this API
    }
    for name, (fields, field) in cases.items():
        answer = await api.request("POST", path, event(name, api.namespace, **fields))
        if field is None:
            assert answer.status == 201, (name, answer.body[:300])
        else:
            assert answer.status == 422, (name, answer.status)
            assert field in [cause["field"] for cause in answer.json["details"]["causes"]], (name, answer.json)
    prefixed = await api.request("POST", path, {**event("", api.namespace), "metadata": {"generateName": "p."}})
    assert prefixed.status == 422 and prefixed.json["details"]["causes"][0]["field"] == "metadata.generateName"


async def test_an_event_reads_through_both_apis_with_their_own_field_selectors(api: Api) -> None:
    await api.ok("POST", api.path("events", group="events.k8s.io"), event("p.1", api.namespace))
    await api.ok("PATCH", api.path("events", "p.1", group="events.k8s.io"),
                 {"series": {"count": 2, "lastObservedTime": "2026-11-23T10:00:05.000000Z"}},
                 content_type="application/merge-patch+json")  # fmt: skip
    core = await api.ok("GET", api.path("events", "p.1"))
    assert {key: core[key] for key in ("involvedObject", "reason", "message", "type", "reportingComponent",
                                       "reportingInstance", "action", "series", "eventTime")} == {
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": api.namespace, "name": "p", "uid": "u-1"},
        "reason": "FailedScheduling", "message": "0/64 nodes are available", "type": "Warning",
        "reportingComponent": "phalanx.dev/scheduler", "reportingInstance": "phalanx-0", "action": "Scheduling",
        "series": {"count": 2, "lastObservedTime": "2026-11-23T10:00:05.000000Z"},
        "eventTime": "2026-11-23T10:00:00.000000Z",
    }  # fmt: skip
    described = f"involvedObject.name=p,involvedObject.namespace={api.namespace},involvedObject.uid=u-1"
    listing = await api.ok("GET", api.path("events") + f"?fieldSelector={described}")
    assert [item["metadata"]["name"] for item in listing["items"]] == ["p.1"]
    assert (await api.request("GET", api.path("events") + "?fieldSelector=regarding.name=p")).status == 400
    modern = await api.ok("GET", api.path("events", group="events.k8s.io") + "?fieldSelector=regarding.name=p")
    assert [item["note"] for item in modern["items"]] == ["0/64 nodes are available"]
    wrong = await api.request("GET", api.path("events", group="events.k8s.io") + "?fieldSelector=involvedObject.name=p")
    assert (wrong.status, wrong.json["message"]) == (400, "field label not supported: involvedObject.name")


async def test_an_event_written_through_the_core_api_carries_both_generations_of_fields(api: Api) -> None:
    """What Phalanx writes: eventTime for events.k8s.io readers, lastTimestamp for `kubectl get events
    --sort-by=.lastTimestamp`; its series patch updates both."""
    body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.2", "namespace": api.namespace},
            "eventTime": "2026-11-23T10:00:00.000000Z", "firstTimestamp": "2026-11-23T10:00:00Z",
            "lastTimestamp": "2026-11-23T10:00:00Z", "count": 1, "source": {"component": "phalanx.dev/scheduler"},
            "reportingComponent": "phalanx.dev/scheduler", "reportingInstance": "phalanx-0", "action": "Scheduling",
            "reason": "FailedScheduling", "type": "Warning", "message": "0/64 nodes are available",
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": api.namespace, "name": "p"}}  # fmt: skip
    await api.ok("POST", api.path("events"), body)
    await api.ok("PATCH", api.path("events", "p.2"),
                 {"series": {"count": 2, "lastObservedTime": "2026-11-23T10:00:05.000000Z"}, "count": 2,
                  "lastTimestamp": "2026-11-23T10:00:05Z"}, content_type="application/merge-patch+json")  # fmt: skip
    core = await api.ok("GET", api.path("events", "p.2"))
    assert (core["lastTimestamp"], core["count"], core["series"]["count"]) == ("2026-11-23T10:00:05Z", 2, 2)
    modern = await api.ok("GET", api.path("events", "p.2", group="events.k8s.io"))
    assert (modern["note"], modern["deprecatedLastTimestamp"], modern["series"]["count"]) == (
        "0/64 nodes are available", "2026-11-23T10:00:05Z", 2)  # fmt: skip


async def test_field_selectors_each_resource_supports(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    for query, found in (
        ("spec.nodeName=", ["p"]),
        ("spec.schedulerName=nobody,status.phase=Pending", ["p"]),
        ("spec.nodeName!=", []),
        ("metadata.name=p", ["p"]),
    ):
        listing = await api.ok("GET", api.path("pods") + f"?fieldSelector={query}")
        assert [item["metadata"]["name"] for item in listing["items"]] == found, query
    nodes = await api.ok("GET", "/api/v1/nodes?fieldSelector=spec.unschedulable=false,metadata.name=b0-r0-n1")
    assert [item["metadata"]["name"] for item in nodes["items"]] == ["b0-r0-n1"]
    for path, label in ((api.path("pods"), "foo"), ("/api/v1/nodes", "metadata.namespace")):
        answer = await api.request("GET", f"{path}?fieldSelector={label}=x")
        assert (answer.status, answer.json["message"]) == (400, f"field label not supported: {label}")


async def test_a_watch_replays_from_its_version_and_sees_objects_leave_its_selection(api: Api) -> None:
    version = (await api.ok("GET", api.path("pods")))["metadata"]["resourceVersion"]
    seen: list[tuple[str, str, int]] = []

    async def watch() -> None:
        async for kind, obj in api.watch(api.path("pods"), version, fieldSelector="spec.nodeName="):
            seen.append((kind, obj["metadata"]["name"], int(obj["metadata"]["resourceVersion"])))
            if len(seen) == 6:
                return

    await api.ok("POST", api.path("pods"), pod("a"))
    await api.ok("PATCH", api.path("pods", "a"), {"metadata": {"labels": {"x": "y"}}},
                 content_type="application/merge-patch+json")  # fmt: skip
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a"},
        "target": {"kind": "Node", "name": "b0-r0-n0"},
    }
    await api.ok("POST", api.path("pods", "a/binding"), binding)  # a leaves the selection: DELETED
    await api.ok("POST", api.path("pods"), pod("b"))
    await api.ok("DELETE", api.path("pods", "b"), {"gracePeriodSeconds": 0})
    with anyio.fail_after(60):
        await watch()
    assert [(kind, name) for kind, name, _ in seen] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a"),  # bound: it left the selection
        ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b"),  # a deleted pod is marked first, then removed
    ]  # fmt: skip
    versions = [version for _, _, version in seen]
    assert versions == sorted(versions) and len(set(versions)) == 6


async def test_deletion_honours_uid_preconditions(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    mismatch = await api.request("DELETE", api.path("pods", "p"), {"preconditions": {"uid": "not-its-uid"}})
    assert (mismatch.status, mismatch.reason) == (409, "Conflict")
    await api.ok("DELETE", api.path("pods", "p"), {"gracePeriodSeconds": 0})
    assert (await api.request("GET", api.path("pods", "p"))).status == 404
    assert (await api.request("DELETE", api.path("pods", "p"))).status == 404


async def test_bodies_in_formats_the_server_cannot_read_are_415_and_answers_follow_accept(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    binary = (DATA / "kubectl-create-namespace-labelled.pb").read_bytes()  # what `kubectl create ns` sends
    protobuf = "application/vnd.kubernetes.protobuf"
    assert (await api.request("POST", api.path("pods"), b"{}", content_type="text/plain")).status == 415
    created = await api.request("POST", "/api/v1/namespaces", binary, content_type=protobuf)
    assert created.status == 201 and created.json["metadata"]["name"] == "labelled"
    as_yaml = await api.request("GET", api.path("pods", "p"), accept="application/yaml")
    assert as_yaml.status == 200 and from_yaml(as_yaml)["metadata"]["name"] == "p"
    assert (await api.request("GET", api.path("pods", "p"), accept="text/html")).status == 406
    await api.ok("DELETE", "/api/v1/namespaces/labelled")


async def test_server_side_apply_creates_then_updates(api: Api) -> None:
    manifest = (
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\n"
        b"spec:\n  schedulerName: nobody\n  containers:\n  - name: c\n    image: pause\n"
    )
    apply = "application/apply-patch+yaml"
    path = api.path("pods", "applied")
    assert (await api.request("PATCH", path, manifest, content_type=apply)).status == 422  # fieldManager is required
    created = await api.request("PATCH", path + "?fieldManager=test", manifest, content_type=apply)
    assert created.status == 201
    labelled = manifest.replace(b"  name: applied\n", b"  name: applied\n  labels: {team: a}\n")
    updated = await api.request("PATCH", path + "?fieldManager=test", labelled, content_type=apply)
    assert updated.status == 200 and updated.json["metadata"]["labels"] == {"team": "a"}


async def test_tables_have_the_columns_kubectl_prints(api: Api) -> None:
    await api.ok(
        "POST", api.path("pods"), pod("p", containers=[{"name": "a", "image": "i"}, {"name": "b", "image": "i"}])
    )
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"kind": "Node", "name": "b0-r0-n3"},
    }
    await api.ok("POST", api.path("pods", "p/binding"), binding)
    table = await api.ok("GET", api.path("pods"), accept=TABLE)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0),
        ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1),
    ]  # fmt: skip
    (row,) = table["rows"]
    cells = row["cells"]
    assert cells[:4] == ["p", "0/2", "Pending", "0"] and cells[5:] == ["<none>", "b0-r0-n3", "<none>", "<none>"]
    assert re.fullmatch(r"\d+s", cells[4]) and row["object"]["metadata"]["name"] == "p"

    nodes = await api.ok("GET", "/api/v1/nodes", accept=TABLE)
    assert [c["name"] for c in nodes["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    assert nodes["rows"][0]["cells"][:3] == ["b0-r0-n0", "Ready", "<none>"]
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 3},
    }
    await api.ok("POST", api.path("podgroups", **PODGROUPS), group)
    groups = await api.ok("GET", api.path("podgroups", **PODGROUPS), accept=TABLE)
    assert [c["name"] for c in groups["columnDefinitions"]] == [
        "Name", "Phase", "MinMember", "Running", "Succeeded", "Failed", "Age"
    ]  # fmt: skip
    (row,) = groups["rows"]
    assert row["cells"][:6] == ["g", None, 3, None, None, None] and re.fullmatch(r"\d+s", row["cells"][6])
    await api.ok("POST", api.path("events", group="events.k8s.io"), event("p.1", api.namespace))
    events = await api.ok("GET", api.path("events"), accept=TABLE)
    assert [c["name"] for c in events["columnDefinitions"]] == [
        "Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"
    ]  # fmt: skip
    assert events["rows"][0]["cells"][1:7] == [
        "Warning", "FailedScheduling", "pod/p", "", "phalanx.dev/scheduler, phalanx-0", "0/64 nodes are available"
    ]  # fmt: skip


async def test_openapi_advertises_server_side_field_validation_for_each_kind(api: Api) -> None:
    root = await api.ok("GET", "/openapi/v3")
    assert {"api/v1", "apis/scheduling.x-k8s.io/v1alpha1"} <= set(root["paths"])
    document = await api.ok("GET", root["paths"]["api/v1"]["serverRelativeURL"])
    operation = document["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"]
    parameters = [p.get("name") for p in operation.get("parameters", []) if isinstance(p, dict)]
    assert "fieldValidation" in parameters
    assert operation["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}


async def test_a_dry_run_answers_as_the_write_would_and_changes_nothing(api: Api) -> None:
    created = await api.request("POST", api.path("pods") + "?dryRun=All", pod("p"))
    assert created.status == 201 and created.json["metadata"]["name"] == "p"
    assert (await api.request("GET", api.path("pods", "p"))).status == 404  # kubectl apply --dry-run=server
    await api.ok("POST", api.path("pods"), pod("q"))
    kubectl = {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}  # kubectl delete --dry-run=server
    assert (await api.request("DELETE", api.path("pods", "q"), kubectl)).status == 200
    assert (await api.request("DELETE", api.path("pods", "q") + "?dryRun=All")).status == 200
    assert (await api.request("GET", api.path("pods", "q"))).status == 200


async def test_strict_field_validation_refuses_fields_the_server_does_not_know(api: Api) -> None:
    typo = pod("p")
    typo["spec"]["schedulngGates"] = [{"name": "example.com/quota"}]
    answer = await api.request("POST", api.path("pods") + "?fieldValidation=Strict", typo)
    assert (answer.status, answer.json["message"]) == (
        400, 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.schedulngGates"'
    )  # fmt: skip
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMemebr": 2}}  # fmt: skip
    answer = await api.request("POST", api.path("podgroups", **PODGROUPS) + "?fieldValidation=Strict", group)
    assert (answer.status, answer.json["message"]) == (
        400, 'PodGroup in version "v1alpha1" cannot be handled as a PodGroup: strict decoding error: '
        'unknown field "spec.minMemebr"'
    )  # fmt: skip
    assert (await api.request("GET", api.path("pods", "p"))).status == 404


async def test_a_field_the_server_does_not_know_is_dropped_with_a_warning_unless_strict_or_ignored(api: Api) -> None:
    """``kubectl apply --validate=warn`` sends ``fieldValidation=Warn``, and the server's default since 1.27 is
    the same: the object is stored without the field, and the answer says so in a ``Warning`` header."""
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "w"},
             "spec": {"minMember": 2, "minMembr": 3}}  # fmt: skip
    said = '299 - "unknown field \\"spec.minMembr\\""'
    for query, name in (("?fieldValidation=Warn", "warned"), ("", "defaulted")):
        answer = await api.request(
            "POST", api.path("podgroups", **PODGROUPS) + query, {**group, "metadata": {"name": name}}
        )
        assert answer.status == 201, answer.body
        assert answer.warnings == (said,), query
        assert "minMembr" not in answer.json["spec"]
    ignored = await api.request(
        "POST", api.path("podgroups", **PODGROUPS) + "?fieldValidation=Ignore", {**group, "metadata": {"name": "i"}}
    )
    assert ignored.status == 201 and ignored.warnings == ()
    typo = pod("warned-pod")
    typo["spec"]["schedulngGates"] = [{"name": "example.com/quota"}]
    answer = await api.request("POST", api.path("pods") + "?fieldValidation=Warn", typo)
    assert (answer.status, answer.warnings) == (201, ('299 - "unknown field \\"spec.schedulngGates\\""',))


async def test_a_crd_schema_refuses_wrong_types_minimums_and_values(api: Api) -> None:
    def group(spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": spec,
        }

    for spec, message in (
        ({"minMember": 0}, "spec.minMember in body should be greater than or equal to 1"),
        ({"minMember": "two"}, "spec.minMember in body must be of type integer"),
    ):
        answer = await api.request("POST", api.path("podgroups", **PODGROUPS), group(spec))
        assert answer.status == 422 and message in answer.json["message"], answer.json["message"]
        assert [cause["field"] for cause in answer.json["details"]["causes"]] == ["spec.minMember"]
    volcano = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "v"},
               "spec": {"minMember": 1}, "status": {"phase": "Bogus"}}  # fmt: skip
    answer = await api.request("POST", api.path("podgroups", **VOLCANO), volcano)
    assert answer.status == 422
    (cause,) = answer.json["details"]["causes"]
    assert (cause["field"], cause["reason"]) == ("status.phase", "FieldValueNotSupported")


def gpu_pod(name: str, requests: dict[str, str], limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = pod(name, **spec)
    body["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": limits}
    return body


async def test_pods_are_admitted_as_the_api_server_admits_them(api: Api) -> None:
    gpu = "nvidia.com/gpu"
    no_limit = await api.request("POST", api.path("pods"), gpu_pod("a", {gpu: "1"}, {}))
    assert no_limit.status == 422
    assert [c["field"] for c in no_limit.json["details"]["causes"]] == ["spec.containers[0].resources.limits"]
    unequal = await api.request("POST", api.path("pods"), gpu_pod("b", {gpu: "1"}, {gpu: "2"}))
    assert unequal.status == 422
    assert [c["field"] for c in unequal.json["details"]["causes"]] == ["spec.containers[0].resources.requests"]
    for amount, problem in (("0.5", "must be an integer"), ("-1", "must be greater than or equal to 0")):
        refused = await api.request("POST", api.path("pods"), gpu_pod("half", {}, {gpu: amount}))
        assert refused.status == 422, amount
        causes = {(c["field"], c["message"].rsplit(": ", 1)[-1]) for c in refused.json["details"]["causes"]}
        where = "spec.containers[0].resources"
        assert causes == {(f"{where}.limits[{gpu}]", problem), (f"{where}.requests[{gpu}]", problem)}, amount

    plain = await api.ok("POST", api.path("pods"), pod("c"))
    assert (plain["spec"]["priority"], plain["spec"]["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    unknown = await api.request("POST", api.path("pods"), pod("d", priorityClassName="no-such-class"))
    assert (unknown.status, unknown.json["message"]) == (
        403, 'pods "d" is forbidden: no PriorityClass with name no-such-class was found'
    )  # fmt: skip
    critical = await api.ok("POST", api.path("pods"), pod("e", priorityClassName="system-cluster-critical"))
    assert critical["spec"]["priority"] == 2_000_000_000
    high = f"{api.namespace}-high"  # PriorityClasses are cluster-wide: one per test
    await api.ok("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                 {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high},
                  "value": 1000, "preemptionPolicy": "Never"})  # fmt: skip
    try:
        # The API server admits pods against its informer's copy of the PriorityClasses: a class just made
        # may not be known to admission for a moment (a real server's eventual consistency).
        with anyio.fail_after(30):
            while (
                await api.request("POST", api.path("pods") + "?dryRun=All", pod("f", priorityClassName=high))
            ).status == 403:
                await anyio.sleep(0.05)
        classed = await api.ok("POST", api.path("pods"), pod("f", priorityClassName=high))
        assert (classed["spec"]["priority"], classed["spec"]["preemptionPolicy"]) == (1000, "Never")
        forged = await api.request("POST", api.path("pods"), pod("g", priority=5))
        assert forged.status == 403 and "must not be provided in pod spec" in forged.json["message"]
    finally:
        await api.ok("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")
    assert (await api.request("POST", "/api/v1/pods", pod("h"))).status == 405  # not in a namespace
    assert (await api.request("GET", api.path("pods") + "?labelSelector=a===b")).status == 400


async def test_a_new_pod_gets_the_defaults_a_scheduler_reads(api: Api) -> None:
    body = pod("p")
    del body["spec"]["schedulerName"]
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2", "cpu": "1", "memory": "1Gi"}}
    created = await api.ok("POST", api.path("pods"), body)
    assert created["spec"]["schedulerName"] == "default-scheduler"  # not Phalanx's unless it says so
    assert created["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "2",
        "cpu": "1",
        "memory": "1Gi",
    }
    assert created["status"]["qosClass"] == "Guaranteed"
    empty = await api.request("POST", api.path("pods"), {**pod("q"), "spec": {"schedulerName": "nobody"}})
    assert empty.status == 422 and [c["field"] for c in empty.json["details"]["causes"]] == ["spec.containers"]
    lots = gpu_pod("r", {}, {"nvidia.com/gpu": "lots"})
    answer = await api.request("POST", api.path("pods"), lots)
    assert answer.status == 400 and "quantities must match the regular expression" in answer.json["message"]


async def test_a_watch_asked_for_tables_sends_rows_as_kubectl_get_w_prints_them(api: Api) -> None:
    version = (await api.ok("GET", api.path("pods")))["metadata"]["resourceVersion"]
    seen: list[dict[str, Any]] = []

    async def watch() -> None:
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "30"}
        headers = {**api.headers, "Accept": TABLE}
        async with api.session.get(api.url + api.path("pods"), params=params, headers=headers, ssl=api.ssl) as answer:
            async for line in answer.content:
                if line.strip():
                    seen.append(json.loads(line))
                    if len(seen) == 2:
                        return

    await api.ok("POST", api.path("pods"), pod("a"))
    await api.ok("POST", api.path("pods"), pod("b"))
    with anyio.fail_after(60):
        await watch()
    first, second = (event["object"] for event in seen)
    assert (first["kind"], second["kind"]) == ("Table", "Table")
    assert [c["name"] for c in first["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
    assert second["columnDefinitions"] is None  # the columns come once, with the first row
    assert [first["rows"][0]["cells"][0], second["rows"][0]["cells"][0]] == ["a", "b"]


async def test_nominated_node_name_is_cleared_by_binding_and_refused_on_a_bound_pod(api: Api) -> None:
    await api.ok("POST", api.path("pods"), pod("p"))
    merge = "application/merge-patch+json"
    named = await api.ok("PATCH", api.path("pods", "p/status"), {"status": {"nominatedNodeName": "b0-r0-n1"}},
                         content_type=merge)  # fmt: skip
    assert named["status"]["nominatedNodeName"] == "b0-r0-n1"
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "b0-r0-n0"}}  # fmt: skip
    await api.ok("POST", api.path("pods", "p/binding"), binding)
    bound = await api.ok("GET", api.path("pods", "p"))
    assert "nominatedNodeName" not in bound["status"]  # ClearingNominatedNodeNameAfterBinding, on by default
    late = await api.request("PATCH", api.path("pods", "p/status"), {"status": {"nominatedNodeName": "b0-r0-n1"}},
                             content_type=merge)  # fmt: skip
    assert (late.status, late.json["message"]) == (
        422, 'Pod "p" is invalid: status.nominatedNodeName: Forbidden: may not be set on pods that are already bound '
        "to a node",
    )  # fmt: skip
    cleared = await api.ok("PATCH", api.path("pods", "p/status"), {"status": {"nominatedNodeName": None}},
                           content_type=merge)  # fmt: skip
    assert "nominatedNodeName" not in cleared["status"]


async def test_a_1_36_pod_group_gets_the_priority_of_its_own_class_never_of_its_pods(api: Api) -> None:
    """The 1.36 server (WorkloadAwarePreemption) sets a v1alpha2 PodGroup's spec.priority from its own
    priorityClassName, else 0, and disruptionMode Pod: what a gang's priority is read from."""
    path = api.path("podgroups", group="scheduling.k8s.io", version="v1alpha2")
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "plain"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}  # fmt: skip
    plain = await api.ok("POST", path, group)
    assert (plain["spec"]["priority"], plain["spec"]["disruptionMode"]) == (0, "Pod")
    high = f"{api.namespace}-gang"  # PriorityClasses are cluster-wide: one per test
    await api.ok("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                 {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high},
                  "value": 1000})  # fmt: skip
    try:
        classed = {**group, "metadata": {"name": "classed"}, "spec": {**group["spec"], "priorityClassName": high}}
        with anyio.fail_after(60):  # admission reads the classes from its informer (a real server's lag)
            while (await api.request("POST", path + "?dryRun=All", classed)).status == 403:
                await anyio.sleep(0.05)
        assert (await api.ok("POST", path, classed))["spec"]["priority"] == 1000
    finally:
        await api.ok("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{high}")
    unknown = {**group, "metadata": {"name": "unknown"}, "spec": {**group["spec"], "priorityClassName": "nope"}}
    answer = await api.request("POST", path, unknown)
    assert answer.status == 403
    assert (
        answer.json["message"]
        == 'podgroups.scheduling.k8s.io "unknown" is forbidden: no PriorityClass with name nope was found'
    )


async def test_a_status_patch_naming_another_uid_is_refused_so_a_replaced_pod_is_never_marked(api: Api) -> None:
    created = await api.ok("POST", api.path("pods"), pod("p"))
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "m"}
    stale = await api.request("PATCH", api.path("pods", "p/status"),
                              {"metadata": {"uid": "not-this-pod"}, "status": {"conditions": [condition]}},
                              content_type="application/strategic-merge-patch+json")  # fmt: skip
    assert stale.status == 422
    assert {c["field"] for c in stale.json["details"]["causes"]} == {"metadata.uid"}
    same = await api.ok("PATCH", api.path("pods", "p/status"),
                        {"metadata": {"uid": created["metadata"]["uid"]}, "status": {"conditions": [condition]}},
                        content_type="application/strategic-merge-patch+json")  # fmt: skip
    assert [c["type"] for c in same["status"]["conditions"]].count("DisruptionTarget") == 1


DRA = {"group": "resource.k8s.io", "version": "v1"}


async def test_dynamic_resource_allocation_is_served_with_a_status_only_for_claims(api: Api) -> None:
    served = names(await api.ok("GET", "/apis/resource.k8s.io/v1"))
    wanted = {"deviceclasses", "resourceslices", "resourceclaims", "resourceclaims/status", "resourceclaimtemplates"}
    assert wanted <= served
    assert not {"deviceclasses/status", "resourceslices/status", "resourceclaimtemplates/status"} & served
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpus"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
             "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}  # fmt: skip
    created = await api.ok("POST", api.path("resourceclaims", **DRA), claim)
    assert not created.get("status")  # status is the status subresource's
    assert created["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1  # defaulted, as the API defaults
    assert created["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"


def _allocated(request: str = "gpu", device: str = "gpu-0") -> dict[str, Any]:
    results = [{"request": request, "driver": "gpu.example.com", "pool": "n0", "device": device}]
    return {"devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}}  # fmt: skip


async def test_a_claim_s_status_is_validated_as_the_scheduler_writes_it(api: Api) -> None:
    """What PreBind and a take-back write: allocation and reservations together, more reservations later,
    both cleared together; and what the server refuses: reservations without an allocation, one pod twice,
    an allocation changed in place, a result for no request of the claim."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared"},
             "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    created = await api.ok("POST", api.path("resourceclaims", **DRA), claim)
    path = api.path("resourceclaims", "shared", **DRA) + "/status"
    # Real pods: kube-controller-manager's resourceclaim controller drops reservations of pods that do not exist.
    first, second = [
        {
            "resource": "pods",
            "name": name,
            "uid": (await api.ok("POST", api.path("pods"), pod(name)))["metadata"]["uid"],
        }
        for name in ("first", "second")
    ]

    async def patch(status: dict[str, Any], version: str | None = None) -> Answer:
        body: dict[str, Any] = {"status": status}
        if version is not None:
            body["metadata"] = {"resourceVersion": version}
        return await api.request("PATCH", path, body, content_type="application/merge-patch+json")

    def refused(answer: Answer, field: str) -> None:
        assert (answer.status, answer.reason) == (422, "Invalid"), answer.body[:300]
        assert field in [cause["field"] for cause in answer.json["details"]["causes"]], answer.json

    refused(await patch({"reservedFor": [first]}), "status.reservedFor")
    written = await patch({"allocation": _allocated(), "reservedFor": [first]}, created["metadata"]["resourceVersion"])
    assert written.status == 200, written.body[:300]
    refused(await patch({"reservedFor": [first, first]}), "status.reservedFor[1]")
    joined = await patch({"reservedFor": [first, second]}, written.json["metadata"]["resourceVersion"])
    assert joined.status == 200, joined.body[:600]
    assert [ref["name"] for ref in joined.json["status"]["reservedFor"]] == ["first", "second"]
    refused(await patch({"allocation": _allocated(device="gpu-1")}), "status.allocation")
    released = await patch({"allocation": None, "reservedFor": None})
    assert released.status == 200 and not released.json.get("status", {}).get("allocation")
    refused(await patch({"allocation": _allocated(request="other")}), "status.allocation.devices.results[0].request")


async def test_a_podgroup_shares_its_claims_and_a_claim_may_be_reserved_for_the_group(api: Api) -> None:
    """KEP-5729 (DRAWorkloadResourceClaims on): a 1.36 PodGroup keeps ``spec.resourceClaims`` under strict
    validation, and a claim's ``reservedFor`` may name the PodGroup, as PreBind writes a group's claim."""
    entry = {"name": "gpus", "resourceClaimTemplateName": "node-gpus"}
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "replica"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [entry]}}  # fmt: skip
    path = api.path("podgroups", group="scheduling.k8s.io", version="v1alpha2") + "?fieldValidation=Strict"
    created = await api.ok("POST", path, group)
    assert created["spec"]["resourceClaims"] == [entry]
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "replica-gpus"},
             "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    await api.ok("POST", api.path("resourceclaims", **DRA), claim)
    consumer = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "replica",
                "uid": created["metadata"]["uid"]}  # fmt: skip
    written = await api.ok("PATCH", api.path("resourceclaims", "replica-gpus", **DRA) + "/status",
                           {"status": {"allocation": _allocated(), "reservedFor": [consumer]}},
                           content_type="application/merge-patch+json")  # fmt: skip
    assert written["status"]["reservedFor"] == [consumer]


async def test_a_claim_is_reserved_for_at_most_256_consumers(api: Api) -> None:
    """``ResourceClaimReservedForMaxSize``: 256 consumers are written, 257 refused (PreBind says so before it
    writes: ``devices.demand.MAX_RESERVED``)."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "crowded"},
             "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    await api.ok("POST", api.path("resourceclaims", **DRA), claim)
    path = api.path("resourceclaims", "crowded", **DRA) + "/status"
    consumers = [{"resource": "pods", "name": f"p-{i}", "uid": f"00000000-0000-0000-0000-{i:012d}"} for i in range(257)]

    async def reserve(count: int) -> Answer:
        body = {"status": {"allocation": _allocated(), "reservedFor": consumers[:count]}}
        return await api.request("PATCH", path, body, content_type="application/merge-patch+json")

    refused = await reserve(257)
    assert (refused.status, refused.reason) == (422, "Invalid"), refused.body[:300]
    assert [cause["field"] for cause in refused.json["details"]["causes"]] == ["status.reservedFor"]
    written = await reserve(256)
    assert written.status == 200, written.body[:300]
    assert len(written.json["status"]["reservedFor"]) == 256


def _slice(name: str, **spec: Any) -> dict[str, Any]:
    pool = {"name": "n0", "generation": 1, "resourceSliceCount": 2}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": "gpu.example.com", "nodeName": "n0", "pool": pool, **spec}}  # fmt: skip


async def test_a_resource_slice_holds_counter_sets_or_devices_and_the_1_36_device_fields_are_kept(api: Api) -> None:
    """DRAPartitionableDevices, DRADeviceTaints, DRAConsumableCapacity and DRADeviceBindingConditions are on in
    1.36: a pool's counter sets in one slice, the partitions that consume them in another (never both in one
    slice), and every field of a device the scheduler reads is stored as written."""
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}]
    partition = {
        "name": "gpu-0-1g-0",
        "consumesCounters": [
            {"counterSet": "gpu-0", "counters": {"memory": {"value": "10Gi"}, "slices": {"value": "1"}}}
        ],
        "taints": [{"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}],
        "bindsToNode": True,
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/failed"],
    }  # fmt: skip
    policy = {"default": "80Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    shared = {"name": "gpu-1", "allowMultipleAllocations": True,
              "capacity": {"memory": {"value": "80Gi", "requestPolicy": policy}}}  # fmt: skip
    path = api.path("resourceslices", **DRA) + "?fieldValidation=Strict"
    both = await api.request("POST", path, _slice("both", sharedCounters=counters, devices=[partition]))
    assert (both.status, both.reason) == (422, "Invalid"), both.body[:300]
    await api.ok("POST", path, _slice("n0-counters", sharedCounters=counters))
    stored = await api.ok("POST", path, _slice("n0-devices", devices=[partition, shared]))
    read = {device["name"]: device for device in stored["spec"]["devices"]}
    assert read["gpu-0-1g-0"]["consumesCounters"] == partition["consumesCounters"]
    assert read["gpu-0-1g-0"]["taints"][0]["effect"] == "NoSchedule"
    assert read["gpu-0-1g-0"]["bindingConditions"] == ["example.com/attached"]
    assert read["gpu-1"]["allowMultipleAllocations"] is True
    assert read["gpu-1"]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Gi"


async def test_a_claim_s_status_keeps_what_the_1_36_allocator_writes_and_device_reports_only_of_its_devices(
    api: Api,
) -> None:
    """A result's tolerations, binding conditions, share ID and consumed capacity and the allocation's timestamp
    are stored; a driver's report of an allocated device is kept, of another refused; the server drops the
    reports with the allocation when a take-back clears it (a scheduler may not write them)."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com",
                                          "tolerations": [{"key": "example.com/unhealthy", "operator": "Exists"}],
                                          "capacity": {"requests": {"memory": "30Gi"}}}}  # fmt: skip
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "attached"},
             "spec": {"devices": {"requests": [request]}}}  # fmt: skip
    await api.ok("POST", api.path("resourceclaims", **DRA) + "?fieldValidation=Strict", claim)
    path = api.path("resourceclaims", "attached", **DRA) + "/status"
    allocation = _allocated()
    allocation["devices"]["results"][0].update(
        tolerations=[{"key": "example.com/unhealthy", "operator": "Exists"}],
        bindingConditions=["example.com/attached"],
        bindingFailureConditions=["example.com/failed"],
        shareID="0b9f8c2e-8d3c-4c59-9f55-6a3a4f5e1d2c",
        consumedCapacity={"memory": "30Gi"},
    )
    allocation["allocationTimestamp"] = "2026-11-28T00:00:00Z"

    async def patch(status: dict[str, Any]) -> Answer:
        return await api.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")

    written = await patch({"allocation": allocation})
    assert written.status == 200, written.body[:400]
    result = written.json["status"]["allocation"]["devices"]["results"][0]
    assert (result["shareID"], result["consumedCapacity"], result["bindingConditions"]) == (
        "0b9f8c2e-8d3c-4c59-9f55-6a3a4f5e1d2c", {"memory": "30Gi"}, ["example.com/attached"]
    )
    assert written.json["status"]["allocation"]["allocationTimestamp"] == "2026-11-28T00:00:00Z"
    condition = {"type": "example.com/attached", "status": "True", "reason": "Attached", "message": "",
                 "lastTransitionTime": "2026-11-28T00:00:01Z"}  # fmt: skip
    report = {"driver": "gpu.example.com", "pool": "n0", "device": "gpu-0", "conditions": [condition],
              "shareID": "0b9f8c2e-8d3c-4c59-9f55-6a3a4f5e1d2c"}  # fmt: skip
    elsewhere = await patch({"devices": [{**report, "device": "gpu-7"}]})
    assert (elsewhere.status, elsewhere.reason) == (422, "Invalid"), elsewhere.body[:300]
    reported = await patch({"devices": [report]})
    assert reported.status == 200, reported.body[:400]
    released = await patch({"allocation": None, "reservedFor": None})  # as a take-back writes it
    assert released.status == 200, released.body[:300]
    assert not released.json.get("status", {}).get("devices")  # the server drops reports of what is not allocated
