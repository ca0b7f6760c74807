"""Hostile and broken objects fed through the informers of a running Phalanx, over HTTP.

Hypothesis draws batches of pods and group objects with wrong types, missing fields, huge numbers,
megabyte annotations, unicode, negative and malformed quantities, selectors that cannot parse, and
hierarchies with cycles. In every run: the process keeps going; every pending pod of ours shows its
latest decision as a condition; every pod whose gang is invalid has a Warning Event saying what is wrong;
and a well-formed gang created in the same run is bound.
"""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.gangs import GangError, Problem
from tests.reliability.chaos import settle
from tests.scheduler.checks import check_invariants
from tests.scheduler.support import cluster, gpu_pod, pfn, phalanx

PFN = "gang-scheduling.preferred.jp/gang"
HUGE = st.sampled_from([2**63, 10**30, -(2**63), 1e308, 4_294_967_297])
WRONG = (
    st.none()
    | st.booleans()
    | HUGE
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
UNICODE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
MEGABYTE = st.just("ü" * 500_000)  # a megabyte of UTF-8
NUMBER_TEXT = st.sampled_from(["0", "-1", "3", "1e3", "0x10", " 2", "9" * 40]) | HUGE.map(str) | UNICODE
QUANTITY = st.sampled_from(["-1", "-8", "lots", "", "1e400", "99999999999999999999Ei", "1.5.2", "8"]) | WRONG | UNICODE
ANNOTATION_VALUE = NUMBER_TEXT | MEGABYTE | WRONG
BAD_OPERATORS = st.sampled_from(["Bogus", "", "in", "Gt"])


@st.composite
def hostile_pod(draw: st.DrawFn, name: str) -> dict[str, Any]:
    annotations: dict[str, Any] = {f"{PFN}-name": draw(st.sampled_from(["bad", "bad", "other"]) | UNICODE | WRONG)}
    for key in draw(st.sets(st.sampled_from(["-size", "-schedule-timeout-seconds"]), max_size=2)):
        annotations[PFN + key] = draw(ANNOTATION_VALUE)
    for key in draw(
        st.sets(
            st.sampled_from(
                [
                    "scheduling.phalanx.dev/topology-required",
                    "scheduling.phalanx.dev/topology-preferred",
                    "scheduling.phalanx.dev/parent",
                    "note",
                ]
            ),
            max_size=2,
        )
    ):
        annotations[key] = draw(ANNOTATION_VALUE | st.sampled_from(["example.com/rack", "Bad Key!", "cycle-a"]))
    pod = gpu_pod(name, gpus=draw(st.integers(1, 8)), annotations=annotations)
    spec = pod["spec"]
    if draw(st.booleans()):
        spec["containers"][0]["resources"] = draw(
            st.fixed_dictionaries(
                {
                    "requests": st.dictionaries(
                        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), QUANTITY, max_size=2
                    )
                }
            )
            | WRONG
        )
    if draw(st.booleans()):
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": draw(UNICODE),
                                    "operator": draw(BAD_OPERATORS),
                                    "values": draw(WRONG | st.lists(UNICODE, max_size=2)),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(UNICODE, UNICODE | WRONG, max_size=2) | WRONG)
    if draw(st.integers(0, 9)) == 0:
        del spec["containers"]
    if draw(st.integers(0, 9)) == 0:
        pod["metadata"]["labels"] = draw(WRONG)
    return pod


@st.composite
def hostile_groups(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A scheduler-plugins PodGroup with odd fields, and Phalanx CompositePodGroups whose parents form a cycle."""
    minimum = draw(HUGE | WRONG | st.integers(-3, 3) | UNICODE)
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "grp", "namespace": "team", "annotations": {"scheduling.phalanx.dev/parent": "cycle-a"}},
        "spec": {
            "minMember": minimum,
            "minResources": draw(
                st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu"]), QUANTITY, max_size=2) | WRONG
            ),
        },
    }
    cycle = [
        {
            "apiVersion": "scheduling.phalanx.dev/v1alpha1",
            "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"parentCompositePodGroupName": parent, "schedulingPolicy": {"gang": {"minGroupCount": 1}}},
        }
        for name, parent in (("cycle-a", "cycle-b"), ("cycle-b", "cycle-a"))
    ]
    return [group, *cycle] if draw(st.booleans()) else [group]


@st.composite
def hostile_batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    pods = [draw(hostile_pod(f"bad-{i}")) for i in range(draw(st.integers(1, 5)))]
    for i in range(draw(st.integers(0, 2))):  # members of the odd PodGroup
        pods.append(gpu_pod(f"member-{i}", gpus=1, labels={"scheduling.x-k8s.io/pod-group": "grp"}))
    return [*draw(hostile_groups()), *pods]


async def feed(batch: list[dict[str, Any]]) -> None:
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where, phalanx(where) as app:
        for obj in batch:
            where.restore(obj)  # the API server would refuse some of these; an older one, or a laxer CRD, may not
        for i in range(2):
            where.create(gpu_pod(f"good-{i}", annotations=pfn("good", 2)))
        await settle(where, app)
        assert {"team/good-0", "team/good-1"} <= set(where.bound()), "the well-formed gang was not bound"
        app.state.index.take_changed()
        invalid = {
            pod: result.message
            for result in app.state.index.results().values()
            if isinstance(result, GangError) and result.problem is not Problem.WAITING
            for pod in result.pods
            if pod in where.pods() and pod not in where.bound()
        }

        def unwarned() -> set[str]:
            warned = {
                event["regarding"]["name"]
                for event in where.events()
                if event["type"] == "Warning" and event["regarding"].get("kind") == "Pod"
            }
            return {pod for pod in invalid if pod.split("/")[1] not in warned}

        with anyio.move_on_after(60):  # Events are written off the scheduling cycle
            while unwarned():
                await anyio.sleep(0.05)
        assert not unwarned(), f"invalid but without a Warning: {sorted(unwarned())} ({invalid})"
        for pod, message in invalid.items():
            assert where.condition(pod)["message"] == message
        await check_invariants(where)


@settings(max_examples=12)
@given(hostile_batches())
def test_hostile_objects_are_reported_and_never_stop_the_good_ones(batch: list[dict[str, Any]]) -> None:
    anyio.run(feed, batch)
