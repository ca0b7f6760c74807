"""Each project's documented shape compiles to the gang tree it means (examples/ are the inputs)."""

import pytest

from scheduler.gangs import GangIndex, GangKey, GangSettings, GangSpec, Source, Timeout
from tests.gangs.support import EXAMPLES, EXPANDED_EXAMPLES, LEVELS, feed, index_of, outline


def compiled(example: str, key: str) -> GangSpec:
    index = index_of(EXAMPLES / example)
    result = index.get(key)  # type: ignore[arg-type]
    assert isinstance(result, GangSpec), result
    return result


CASES = [
    pytest.param(
        "pfn",
        "pfn:team-a/resnet",
        [
            "team-a/resnet (4 of 4 pods, preferred example.com/rack): resnet-worker-0 resnet-worker-1 resnet-worker-2 "
            "resnet-worker-3"
        ],
        id="PFN annotations: a leaf of size 4",
    ),
    pytest.param(
        "scheduler-plugins",
        "scheduler-plugins:team-b/etl",
        ["team-b/etl (3 of 5 pods): etl-0 etl-1 etl-2 etl-3 etl-4"],
        id="scheduler-plugins PodGroup: minMember 3 of 5",
    ),
    pytest.param(
        "volcano",
        "volcano:serving/sample-0",
        [
            "serving/sample-0 (2 of 2 parts, 6 pods in all)",
            "  serving/sample-0/prefill (2 of 2 parts)",
            "    serving/sample-0/prefill/prefill-0 (2 of 2 pods, required example.com/rack): "
            "sample-0-prefill-0-0 sample-0-prefill-0-1",
            "    serving/sample-0/prefill/prefill-1 (2 of 2 pods, required example.com/rack): "
            "sample-0-prefill-1-0 sample-0-prefill-1-1",
            "  serving/sample-0/decode (1 of 2 parts)",
            "    serving/sample-0/decode/decode-0 (2 of 2 pods, required example.com/rack): "
            "sample-0-decode-0-0 sample-0-decode-0-1",
            "    serving/sample-0/decode/decode-1 (2 of 2 pods, required example.com/rack): "
            "sample-0-decode-1-0 sample-0-decode-1-1",
        ],
        id="Volcano subGroupPolicy (Kthena minRoleReplicas): roles, replicas, tier 1 = rack",
    ),
    pytest.param(
        "volcano",
        "volcano:team-c/mnist",
        [
            "team-c/mnist (2 of 2 parts, 3 pods in all, required example.com/block)",
            "  team-c/mnist/ps (1 of 1 pods): mnist-ps-0",
            "  team-c/mnist/worker (2 of 3 pods): mnist-worker-0 mnist-worker-1 mnist-worker-2",
        ],
        id="Volcano minTaskMember with networkTopology tier 2 = block",
    ),
    pytest.param(
        "workload-1.35",
        "workload:some-ns/training-job-workload/workers/0",
        ["some-ns/training-job-workload/workers/0 (2 of 2 pods): worker-0-0 worker-0-1"],
        id="1.35 Workload: one gang per podGroupReplicaKey",
    ),
    pytest.param(
        "workload-1.35",
        "workload:some-ns/training-job-workload/driver",
        ["some-ns/training-job-workload/driver (0 of 1 pods): driver"],
        id="1.35 Workload: basic policy is no gang",
    ),
    pytest.param(
        "podgroup-1.36",
        "podgroup:ml/train-workers-0",
        [
            "ml/train-workers-0 (4 of 4 pods, required example.com/rack): train-worker-0 train-worker-1 "
            "train-worker-2 train-worker-3"
        ],
        id="1.36 PodGroup: schedulingConstraints.topology[].key",
    ),
    pytest.param(
        "podgroup-1.37",
        "podgroup:ml/finetune-workers-0",
        [
            "ml/finetune-workers-0 (4 of 4 pods, required example.com/rack): finetune-worker-0 finetune-worker-1 "
            "finetune-worker-2 finetune-worker-3"
        ],
        id="1.37 PodGroup: schedulingConstraints.topology[].key",
    ),
    pytest.param(
        "composite-1.37",
        "composite:serving/llm",
        [
            "serving/llm (2 of 2 parts, required example.com/block)",
            "  serving/llm-decode (1 of 1 parts)",
            "    serving/llm-decode-0 (2 of 2 pods, required example.com/rack): llm-decode-0-0 llm-decode-0-1",
            "  serving/llm-prefill (1 of 2 parts)",
            "    serving/llm-prefill-0 (2 of 2 pods, required example.com/rack): llm-prefill-0-0 llm-prefill-0-1",
            "    serving/llm-prefill-1 (2 of 2 pods, required example.com/rack): llm-prefill-1-0 llm-prefill-1-1",
        ],
        id="1.37 CompositePodGroup: at least one of each role, block above racks",
    ),
    pytest.param(
        "phalanx-composite",
        "phalanx:serving/chat",
        [
            "serving/chat (2 of 2 parts, required example.com/block)",
            "  serving/chat-decode (1 of 1 parts)",
            "    serving/chat-decode-0 (4 of 4 pods, required example.com/rack): chat-decode-0-0 chat-decode-0-1 "
            "chat-decode-0-2 chat-decode-0-3",
            "  serving/chat-prefill (1 of 2 parts)",
            "    serving/chat-prefill-0 (4 of 4 pods, required example.com/rack): chat-prefill-0-0 chat-prefill-0-1 "
            "chat-prefill-0-2 chat-prefill-0-3",
            "    serving/chat-prefill-1 (4 of 4 pods, required example.com/rack): chat-prefill-1-0 chat-prefill-1-1 "
            "chat-prefill-1-2 chat-prefill-1-3",
        ],
        id="Phalanx CompositePodGroup over scheduler-plugins groups joined by annotation",
    ),
    pytest.param("plain", "pod:team-d/notebook", ["team-d/notebook (1 of 1 pods): notebook"], id="a plain pod"),
    pytest.param(
        "plain",
        "pod:team-d/profiler",
        ["team-d/profiler (1 of 1 pods, required example.com/rack): profiler"],
        id="a plain pod with a topology annotation",
    ),
]


@pytest.mark.parametrize(("example", "key", "tree"), CASES)
def test_example_compiles_to_its_tree(example: str, key: str, tree: list[str]) -> None:
    assert outline(compiled(example, key).request) == tree


def test_every_example_compiles_without_error() -> None:
    index = index_of(
        *(path for path in sorted(EXAMPLES.iterdir()) if path.is_dir() and path.name not in EXPANDED_EXAMPLES)
    )
    problems = {key: result for key, result in index.results().items() if not isinstance(result, GangSpec)}
    assert problems == {}
    assert {result.source for result in index.results().values()} == set(Source)  # type: ignore[union-attr]


def test_pfn_timeout_is_the_annotation_capped_by_the_limit_plus_jitter() -> None:
    gang = compiled("pfn", "pfn:team-a/resnet")
    assert gang.timeout == Timeout(seconds=60, jitter_seconds=30)


def test_scheduler_plugins_group_carries_min_resources_and_its_own_timeout() -> None:
    gang = compiled("scheduler-plugins", "scheduler-plugins:team-b/etl")
    assert gang.min_resources == {"cpu": 12000, "nvidia.com/gpu": 3}
    assert gang.timeout.seconds == 30
    assert [str(ref) for ref in gang.objects] == ["PodGroup.scheduling.x-k8s.io team-b/etl"]


def test_composite_lists_every_group_object_root_first() -> None:
    gang = compiled("phalanx-composite", "phalanx:serving/chat")
    assert [ref.name for ref in gang.objects] == [
        "chat",
        "chat-decode",
        "chat-decode-0",
        "chat-prefill",
        "chat-prefill-0",
        "chat-prefill-1",
    ]
    assert gang.missing_pods == 0


def test_a_1_36_podgroup_in_the_pre_release_spelling_is_still_read() -> None:
    index = GangIndex(GangSettings(levels=LEVELS))
    constraints = {"topologyConstraints": [{"topologyKey": "example.com/rack"}]}
    spec = {"schedulingPolicy": {"gang": {"minCount": 1}}, "schedulingConstraints": constraints}
    metadata = {"name": "g", "namespace": "ml"}
    feed(index, {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": metadata, "spec": spec})
    feed(index, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                 "spec": {"schedulerName": "phalanx", "schedulingGroup": {"podGroupName": "g"},
                          "containers": [{"name": "c", "image": "pause"}]}})  # fmt: skip
    index.take_changed()
    gang = index.get(GangKey("podgroup:ml/g"))
    assert isinstance(gang, GangSpec) and gang.request.required == "example.com/rack"
