"""Every invalid or incomplete gang is a typed result whose message names the object, the field, the value
and what would be valid; the pods stay pending with it, and nothing raises."""

from typing import Any

import pytest

from scheduler.gangs import GangError, GangSettings, GangSpec, Problem
from tests.gangs.support import (
    PFN,
    composite,
    indexed,
    pfn_pod,
    plugins_group,
    plugins_pod,
    pod,
    upstream_group,
    upstream_pod,
    volcano_group,
    volcano_pod,
    workload,
)

GANG = {"gang": {"minCount": 1}}
ONE_GROUP = {"gang": {"minGroupCount": 1}}
BASIC: dict[str, Any] = {"basic": {}}


def problem_of(key: str, *documents: dict[str, Any], settings: GangSettings | None = None) -> GangError:
    result = indexed(*documents, settings=settings).get(key)  # type: ignore[arg-type]
    assert isinstance(result, GangError), f"expected a problem, got {result}"
    assert result.pods, "a gang problem must hold its pods pending"
    return result


INVALID = [
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", "abc"), pfn_pod("b", "abc")],
        f"Pod ns/a: metadata.annotations[{PFN}-size] is 'abc'; the gang size must be an integer of at least 1",
        id="PFN size not an integer",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", "0")],
        f"Pod ns/a: metadata.annotations[{PFN}-size] is '0'; the gang size must be an integer of at least 1",
        id="PFN size below 1",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", None)],
        f"Pod ns/a: metadata.annotations[{PFN}-size] is missing; a gang member must state the gang size, "
        "an integer of at least 1",
        id="PFN size missing",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", "2"), pfn_pod("b", "3")],
        f"Pod ns/b: metadata.annotations[{PFN}-size] is 3; pod ns/a of the same gang has 2; "
        "all members must give the same size",
        id="PFN members disagree on size",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", "1", "0")],
        f"Pod ns/a: metadata.annotations[{PFN}-schedule-timeout-seconds] is '0'; the timeout must be a positive "
        "number of seconds (at most 100 is used); leave it out for the default",
        id="PFN timeout not positive",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", "2", "10"), pfn_pod("b", "2", "20")],
        f"Pod ns/b: metadata.annotations[{PFN}-schedule-timeout-seconds] is 20; pod ns/a of the same gang has 10; "
        "all members must give the same schedule timeout (in effect, seconds)",
        id="PFN members disagree on timeout",
    ),
    pytest.param(
        "scheduler-plugins:ns/g",
        [plugins_group("g", minMember=0), plugins_pod("a", "g")],
        "PodGroup.scheduling.x-k8s.io ns/g: spec.minMember is 0; it must be an integer of at least 1",
        id="scheduler-plugins minMember below 1",
    ),
    pytest.param(
        "scheduler-plugins:ns/g",
        [plugins_group("g", minMember=1, minResources={"cpu": "lots"}), plugins_pod("a", "g")],
        "PodGroup.scheduling.x-k8s.io ns/g: spec.minResources.cpu is 'lots'; "
        "must look like '<number><suffix>', e.g. '500m', '1.5Gi', '2e3'",
        id="scheduler-plugins minResources malformed",
    ),
    pytest.param(
        "scheduler-plugins:ns/g",
        [plugins_group("g", minMember=1, scheduleTimeoutSeconds=0), plugins_pod("a", "g")],
        "PodGroup.scheduling.x-k8s.io ns/g: spec.scheduleTimeoutSeconds is 0; it must be an integer of at least 1",
        id="scheduler-plugins timeout not positive",
    ),
    pytest.param(
        "volcano:ns/g",
        [
            volcano_group("g", minMember=1, networkTopology={"mode": "hard", "highestTierAllowed": 5}),
            volcano_pod("a", "g"),
        ],
        "PodGroup.scheduling.volcano.sh ns/g: spec.networkTopology.highestTierAllowed is 5; the configured tiers are "
        "1 = rack (example.com/rack), 2 = block (example.com/block), 3 = zone (topology.kubernetes.io/zone)",
        id="Volcano tier beyond the configured levels",
    ),
    pytest.param(
        "volcano:ns/g",
        [volcano_group("g", minMember=1, networkTopology={"highestTierName": "spine"}), volcano_pod("a", "g")],
        "PodGroup.scheduling.volcano.sh ns/g: spec.networkTopology.highestTierName is 'spine'; it must name a "
        "configured tier: 1 = rack (example.com/rack), 2 = block (example.com/block), "
        "3 = zone (topology.kubernetes.io/zone)",
        id="Volcano tier name unknown",
    ),
    pytest.param(
        "volcano:ns/g",
        [volcano_group("g", minMember=1, networkTopology={"mode": "strict"}), volcano_pod("a", "g")],
        "PodGroup.scheduling.volcano.sh ns/g: spec.networkTopology.mode is 'strict'; it must be hard or soft",
        id="Volcano topology mode unknown",
    ),
    pytest.param(
        "volcano:ns/g",
        [
            volcano_group("g", subGroupPolicy=[{"name": "r", "subGroupSize": 1, "matchLabelKeys": ["rid"]}]),
            volcano_pod("a", "g"),
        ],
        "Pod ns/a: metadata.labels[rid] is missing; PodGroup.scheduling.volcano.sh ns/g groups the pods of "
        "spec.subGroupPolicy[0] by this label; every pod it selects needs it",
        id="Volcano subgroup label missing on a pod",
    ),
    pytest.param(
        "volcano:ns/g",
        [
            volcano_group(
                "g",
                subGroupPolicy=[
                    {"name": "r", "labelSelector": {"matchExpressions": [{"key": "x", "operator": "Near"}]}}
                ],
            ),
            volcano_pod("a", "g"),
        ],
        "PodGroup.scheduling.volcano.sh ns/g: spec.subGroupPolicy[0].labelSelector.matchExpressions[0].operator "
        "is 'Near'; it must be In, NotIn, Exists or DoesNotExist",
        id="Volcano selector that cannot parse",
    ),
    pytest.param(
        "volcano:ns/g",
        [volcano_group("g", minTaskMember={"ps": -1}), volcano_pod("a", "g")],
        "PodGroup.scheduling.volcano.sh ns/g: spec.minTaskMember[ps] is -1; it must be an integer of at least 0",
        id="Volcano task minimum negative",
    ),
    pytest.param(
        "volcano:ns/g",
        [volcano_group("g", subGroupPolicy=[{"name": "r", "minSubGroups": 3}]), volcano_pod("a", "g")],
        "PodGroup.scheduling.volcano.sh ns/g: spec.subGroupPolicy[0].minSubGroups is 3; only 1 subgroup(s) exist "
        "and subGroupSize is not set, so the missing ones cannot be reserved; set subGroupSize",
        id="Volcano minimum of subgroups that can never be sized",
    ),
    pytest.param(
        "podgroup:ns/g",
        [upstream_group("g", schedulingPolicy={"basic": {}, "gang": {"minCount": 2}}), upstream_pod("a", "g")],
        "PodGroup.scheduling.k8s.io ns/g: spec.schedulingPolicy is {'basic': {}, 'gang': {'minCount': 2}}; "
        "it must set exactly one of basic or gang",
        id="upstream policy both basic and gang",
    ),
    pytest.param(
        "podgroup:ns/g",
        [upstream_group("g", schedulingPolicy={"gang": {"minCount": 0}}), upstream_pod("a", "g")],
        "PodGroup.scheduling.k8s.io ns/g: spec.schedulingPolicy.gang.minCount is 0; "
        "it must be an integer of at least 1",
        id="upstream minCount below 1",
    ),
    pytest.param(
        "podgroup:ns/g",
        [
            upstream_group(
                "g", schedulingPolicy=GANG, schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}
            ),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: spec.schedulingConstraints.topology is [{'key': 'a'}, {'key': 'b'}]; "
        "only one topology constraint is supported",
        id="upstream two topology constraints",
    ),
    pytest.param(
        "podgroup:ns/g",
        [
            upstream_group(
                "g", schedulingPolicy=GANG, schedulingConstraints={"topology": [{"key": "Example.com/rack!"}]}
            ),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: spec.schedulingConstraints.topology[0].key is 'Example.com/rack!'; "
        "the prefix 'Example.com' of a label key must be a DNS subdomain such as example.com",
        id="topology key that is not a label key",
    ),
    pytest.param(
        "podgroup:ns/g",
        [
            upstream_group(
                "g",
                annotations={"scheduling.phalanx.dev/topology-required": "example.com/block"},
                schedulingPolicy=GANG,
                schedulingConstraints={"topology": [{"key": "example.com/rack"}]},
            ),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: two required topology keys disagree: 'example.com/rack' in "
        "spec.schedulingConstraints.topology[0].key and 'example.com/block' in "
        "metadata.annotations[scheduling.phalanx.dev/topology-required]; a gang has one required topology key",
        id="topology annotation disagrees with the group's field",
    ),
    pytest.param(
        "pfn:ns/g",
        [
            pfn_pod("a", annotations={"scheduling.phalanx.dev/topology-required": "example.com/rack"}),
            pfn_pod("b", annotations={"scheduling.phalanx.dev/topology-required": "example.com/block"}),
        ],
        "Pod ns/a: two required topology keys disagree: 'example.com/rack' in "
        "metadata.annotations[scheduling.phalanx.dev/topology-required] and 'example.com/block' in pod ns/b "
        "metadata.annotations[scheduling.phalanx.dev/topology-required]; a gang has one required topology key",
        id="members disagree on the topology annotation",
    ),
    pytest.param(
        "pfn:ns/g",
        [pfn_pod("a", annotations={"scheduling.phalanx.dev/topology-required": "Bad Key!"})],
        "Pod ns/a: metadata.annotations[scheduling.phalanx.dev/topology-required] is 'Bad Key!'; a label key's "
        "name must be 63 characters or fewer, start and end with a letter or digit, and contain only letters, "
        "digits, '-', '_' and '.'",
        id="a pod's own bad topology key names the pod once",
    ),
    pytest.param(
        "workload:ns/w/workers",
        [
            workload("w", podGroups=[{"name": "driver", "policy": {"basic": {}}}]),
            pod("a", workloadRef={"name": "w", "podGroup": "workers"}),
        ],
        "Pod ns/a: spec.workloadRef.podGroup is 'workers'; Workload.scheduling.k8s.io ns/w has no pod group of "
        "that name (it has: driver)",
        id="1.35 pod group that does not resolve",
    ),
    pytest.param(
        "podgroup:ns/g",
        [
            workload("w", version="v1beta1", podGroupTemplates=[{"name": "workers", "schedulingPolicy": GANG}]),
            upstream_group("g", workloadRef={"workloadName": "w", "templateName": "wrkrs"}, schedulingPolicy=GANG),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: spec.workloadRef.templateName is 'wrkrs'; Workload.scheduling.k8s.io ns/w "
        "has no template of that name (it has: workers)",
        id="template that does not resolve",
    ),
    pytest.param(
        "composite:ns/x",
        [
            composite("x", parentCompositePodGroupName="y", schedulingPolicy=ONE_GROUP),
            composite("y", parentCompositePodGroupName="x", schedulingPolicy=ONE_GROUP),
            upstream_group("g", parentCompositePodGroupName="x", schedulingPolicy=GANG),
            upstream_pod("a", "g"),
        ],
        "CompositePodGroup.scheduling.k8s.io ns/x: spec.parentCompositePodGroupName is 'y'; the parents form a cycle: "
        "CompositePodGroup.scheduling.k8s.io ns/x -> CompositePodGroup.scheduling.k8s.io ns/y -> "
        "CompositePodGroup.scheduling.k8s.io ns/x",
        id="cycle of parents",
    ),
    pytest.param(
        "composite:ns/c1",
        [
            composite("c1", schedulingPolicy=BASIC),
            composite("c2", parentCompositePodGroupName="c1", schedulingPolicy=BASIC),
            composite("c3", parentCompositePodGroupName="c2", schedulingPolicy=BASIC),
            composite("c4", parentCompositePodGroupName="c3", schedulingPolicy=BASIC),
            upstream_group("g", parentCompositePodGroupName="c4", schedulingPolicy=GANG),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: spec.parentCompositePodGroupName is 'c4'; the hierarchy is deeper than 4 "
        "levels (CompositePodGroup.scheduling.k8s.io ns/c1 > CompositePodGroup.scheduling.k8s.io ns/c2 > "
        "CompositePodGroup.scheduling.k8s.io ns/c3 > CompositePodGroup.scheduling.k8s.io ns/c4 > "
        "PodGroup.scheduling.k8s.io ns/g)",
        id="hierarchy deeper than 4",
    ),
    pytest.param(
        "composite:ns/c",
        [
            composite("c", schedulingPolicy=BASIC, workloadRef={"workloadName": "w1", "templateName": "t"}),
            upstream_group(
                "g",
                parentCompositePodGroupName="c",
                schedulingPolicy=GANG,
                workloadRef={"workloadName": "w2", "templateName": "r"},
            ),
            upstream_pod("a", "g"),
        ],
        "PodGroup.scheduling.k8s.io ns/g: spec.workloadRef.workloadName is 'w2'; the hierarchy under "
        "CompositePodGroup.scheduling.k8s.io ns/c also uses Workload 'w1'; one hierarchy belongs to one Workload",
        id="tree spanning several Workloads",
    ),
    pytest.param(
        "phalanx:ns/c",
        [
            composite(
                "c",
                "scheduling.phalanx.dev/v1alpha1",
                {"scheduling.phalanx.dev/parent": "p"},
                parentCompositePodGroupName="q",
                schedulingPolicy=ONE_GROUP,
            ),
            plugins_group("g", {"scheduling.phalanx.dev/parent": "c"}, minMember=1),
            plugins_pod("a", "g"),
        ],
        "CompositePodGroup.scheduling.phalanx.dev ns/c: metadata.annotations[scheduling.phalanx.dev/parent] is 'p'; "
        "it disagrees with spec.parentCompositePodGroupName 'q'; a group has one parent",
        id="two different parents",
    ),
    pytest.param(
        "pod:ns/a",
        [
            pod(
                "a",
                affinity={
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]}
                },
            )
        ],
        "Pod ns/a: spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution is set; Phalanx does "
        "not implement required inter-pod anti-affinity; remove it, or leave this pod to another scheduler",
        id="hard constraint Phalanx does not implement",
    ),
    pytest.param(
        "pod:ns/a",
        [
            {
                **pod("a"),
                "spec": {
                    "schedulerName": "phalanx",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "2 cores"}}}],
                },
            }
        ],
        "Pod ns/a: spec.containers[0].resources.requests.cpu is '2 cores'; must look like '<number><suffix>', "
        "e.g. '500m', '1.5Gi', '2e3'",
        id="malformed pod quantity",
    ),
    pytest.param(
        "podgroup:ns/g",
        [upstream_group("g", schedulingPolicy=GANG, priorityClassName="urgent"), upstream_pod("a", "g")],
        "PodGroup.scheduling.k8s.io ns/g: spec.priorityClassName is 'urgent'; no PriorityClass has that name; "
        "create it or remove the field",
        id="priority class that does not exist",
    ),
]


@pytest.mark.parametrize(("key", "documents", "message"), INVALID)
def test_invalid_gang_says_what_to_fix(key: str, documents: list[dict[str, Any]], message: str) -> None:
    problem = problem_of(key, *documents)
    assert problem.problem is Problem.INVALID
    assert problem.message == message


WAITING = [
    pytest.param(
        "scheduler-plugins:ns/g",
        [plugins_pod("a", "g")],
        "Pod ns/a: PodGroup.scheduling.x-k8s.io ns/g does not exist yet; this gang waits for it",
        plugins_group("g", minMember=1),
        id="group object not created yet",
    ),
    pytest.param(
        "workload:ns/w/workers",
        [pod("a", workloadRef={"name": "w", "podGroup": "workers"})],
        "Pod ns/a: spec.workloadRef.name is 'w'; Workload.scheduling.k8s.io ns/w does not exist yet; "
        "the pods wait for it",
        workload("w", podGroups=[{"name": "workers", "policy": {"gang": {"minCount": 1}}}]),
        id="1.35 Workload not created yet",
    ),
    pytest.param(
        "composite:ns/c",
        [upstream_group("g", parentCompositePodGroupName="c", schedulingPolicy=GANG), upstream_pod("a", "g")],
        "PodGroup.scheduling.k8s.io ns/g: CompositePodGroup.scheduling.k8s.io ns/c does not exist yet; "
        "this gang waits for it",
        composite("c", schedulingPolicy=ONE_GROUP),
        id="parent composite not created yet",
    ),
    pytest.param(
        "composite:ns/c",
        [
            composite("c", schedulingPolicy={"gang": {"minGroupCount": 2}}),
            upstream_group("g", parentCompositePodGroupName="c", schedulingPolicy=GANG),
            upstream_pod("a", "g"),
        ],
        "CompositePodGroup.scheduling.k8s.io ns/c: spec.schedulingPolicy.gang.minGroupCount is 2; only 1 child "
        "group(s) exist yet; the gang waits for the others",
        upstream_group("h", parentCompositePodGroupName="c", schedulingPolicy=BASIC),
        id="composite waiting for more children",
    ),
]


@pytest.mark.parametrize(("key", "documents", "message", "arrives"), WAITING)
def test_gang_waiting_for_an_object_is_picked_up_when_it_appears(
    key: str, documents: list[dict[str, Any]], message: str, arrives: dict[str, Any]
) -> None:
    index = indexed(*documents)
    problem = index.get(key)  # type: ignore[arg-type]
    assert isinstance(problem, GangError)
    assert problem.problem is Problem.WAITING
    assert problem.message == message
    index.upsert_group(arrives)
    assert key in index.take_changed()
    assert isinstance(index.get(key), GangSpec)  # type: ignore[arg-type]


def test_unparsable_pfn_timeout_means_the_default() -> None:
    spec = indexed(pfn_pod("a", "1", "soon")).get("pfn:ns/g")  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    assert spec.timeout.seconds == 30


def test_timeout_above_the_limit_is_capped() -> None:
    spec = indexed(pfn_pod("a", "1", "600")).get("pfn:ns/g")  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    assert spec.timeout.seconds == 100


def test_a_pod_with_markers_of_several_sources_belongs_to_the_first_and_names_the_others() -> None:
    both = volcano_pod(
        "a", "vg", labels={"scheduling.x-k8s.io/pod-group": "pg"}, annotations={f"{PFN}-name": "g", f"{PFN}-size": "1"}
    )
    index = indexed(volcano_group("vg", minMember=1), plugins_group("pg", minMember=1), both)
    spec = index.get("volcano:ns/vg")  # type: ignore[arg-type]
    assert isinstance(spec, GangSpec)
    assert spec.warnings == (
        "pod ns/a also carries label scheduling.x-k8s.io/pod-group (pg); "
        "it is ignored, the pod belongs to volcano:ns/vg",
        "pod ns/a also carries the PFN gang annotations (g); it is ignored, the pod belongs to volcano:ns/vg",
    )
    assert index.get("scheduler-plugins:ns/pg") is None  # type: ignore[arg-type]
    assert index.get("pfn:ns/g") is None  # type: ignore[arg-type]
