"""Shared strings: the objects ClusterState keeps are the objects the server sent, with one copy of each
repeated string; a pod's next event takes what did not change from its last."""

from __future__ import annotations

import copy
import json

from scheduler.strings import SharedStrings
from tests.scheduler.support import gpu_pod, pfn


def test_an_object_shared_is_the_object_sent_with_one_copy_of_each_repeated_string() -> None:
    strings = SharedStrings()
    first, second = (json.loads(json.dumps(gpu_pod(name, annotations=pfn("train", 2)))) for name in ("a", "b"))
    kept = [strings.share(first), strings.share(second)]
    assert kept == [first, second]
    image = [pod["spec"]["containers"][0]["image"] for pod in kept]
    assert image[0] is image[1] and second["spec"]["containers"][0]["image"] is not image[1]
    assert kept[0]["metadata"]["name"] == "a" and kept[1]["metadata"]["name"] == "b"


def test_a_bind_event_takes_the_unchanged_parts_of_the_pod_s_last_event_and_equals_the_event() -> None:
    strings = SharedStrings()
    pending = gpu_pod("a", annotations=pfn("train", 2))
    pending["metadata"].update(uid="u1", resourceVersion="1")
    before = strings.share(json.loads(json.dumps(pending)))
    bound = copy.deepcopy(pending)
    bound["metadata"]["resourceVersion"] = "2"
    bound["spec"]["nodeName"] = "b0-r0-n0"
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    event = json.loads(json.dumps(bound))
    after = strings.share(event, before)
    assert after == event  # what the server sent, exactly
    assert after["spec"]["containers"] is before["spec"]["containers"]  # unchanged: the same objects
    assert after["metadata"]["annotations"] is before["metadata"]["annotations"]
    assert after["metadata"]["resourceVersion"] == "2" and after["spec"]["nodeName"] == "b0-r0-n0"
    # A spec that changed beyond the node is taken from the event, not from before
    changed = copy.deepcopy(event)
    changed["spec"]["containers"][0]["image"] = "other:2"
    assert strings.share(changed, before)["spec"]["containers"][0]["image"] == "other:2"


def test_pods_of_one_spec_read_one_after_another_keep_one_copy_of_it_and_another_spec_its_own() -> None:
    strings = SharedStrings()
    sent = [json.loads(json.dumps(gpu_pod(name, annotations=pfn("train", 3)))) for name in ("a", "b", "c")]
    sent[2]["spec"]["containers"][0]["image"] = "other:2"
    first = strings.share(sent[0])
    second = strings.share(sent[1], alike=first)
    third = strings.share(sent[2], alike=second)
    assert [first, second, third] == sent  # what the server sent, exactly
    assert second["spec"] is first["spec"] and second["metadata"]["name"] == "b"
    assert third["spec"] is not second["spec"] and third["spec"]["containers"][0]["image"] == "other:2"
    # A pod's earlier version is taken part by part before another pod's spec is taken whole
    bound = copy.deepcopy(sent[2])
    bound["spec"]["nodeName"] = "b0-r0-n0"
    again = strings.share(bound, third, alike=first)
    assert again == bound and again["spec"]["containers"] is third["spec"]["containers"]
