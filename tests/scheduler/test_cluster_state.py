"""What the scheduler's cluster state does with binds the watch does or does not confirm."""

from typing import Any

import pytest

import scheduler.state.pod_applier as state_module
from scheduler.clock import ManualClock
from scheduler.gangs import GangError, GangIndex, GangKey, GangSpec
from scheduler.ports.port import NODES, PODS, Change
from scheduler.ports.sim.builders import node_manifest
from scheduler.state import ClusterState
from tests.scheduler.support import FAST, gpu_pod, pfn
from topology import Assignment, PodShape, pod_demand

GANG = GangKey("pfn:team/train")
SHAPE = PodShape.of({"cpu": 1000, "nvidia.com/gpu": 8})


def state_with_nodes(*names: str) -> tuple[ClusterState, ManualClock]:
    clock = ManualClock()
    state = ClusterState(FAST, clock)
    for name in names:
        node = node_manifest(name, capacity={"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"})
        state.apply(NODES, Change("ADDED", node))
    return state, clock


def gpus_taken(state: ClusterState) -> int:
    column = state.snapshot.resources.index("nvidia.com/gpu")
    return int(state.snapshot.requested[:, column].sum())


def test_a_bind_the_watch_never_confirms_releases_its_room_after_the_assume_timeout() -> None:
    state, clock = state_with_nodes("n0", "n1")
    state.assume(GANG, [Assignment(pod="team/a", node="n0", shape=SHAPE)])
    clock.advance(100)  # in flight (no deadline yet): held however long the bind takes
    assert state.expire() == [] and state.next_expiry() is None
    state.binding_done("team/a")
    timeout = FAST.binding.assume_timeout_seconds
    assert state.next_expiry() == clock.monotonic() + timeout
    clock.advance(timeout - 0.1)
    assert state.expire() == [] and gpus_taken(state) == 8
    clock.advance(0.2)
    assert state.expire() == ["team/a"]
    assert gpus_taken(state) == 0 and state.next_expiry() is None


def test_a_gang_given_up_while_its_binds_are_out_keeps_their_room_until_they_are_answered() -> None:
    """Its PodGroup deleted (or its minimum raised) while a member's bind request is out: the server may bind it
    yet, so its room is not given to another gang before the answer (once, with writer processes, two 8-GPU
    pods were bound to one node this way); then it is let go unless the pod was bound. A member whose bind
    was not sent yet is let go at once."""
    state, _ = state_with_nodes("n0", "n1", "n2")
    state.assume(GANG, [Assignment(pod=f"team/m{i}", node=f"n{i}", shape=SHAPE) for i in range(3)])
    state.sending(["team/m0", "team/m1"])
    state.forget_gang(GANG)
    assert sorted(state.assumed) == ["team/m0", "team/m1"] and gpus_taken(state) == 16
    state.binding_done("team/m0")  # the server bound it: it waits for the watch as any bound pod
    state.sent(["team/m0", "team/m1"])  # m1's bind was refused
    assert list(state.assumed) == ["team/m0"] and gpus_taken(state) == 8


def test_a_confirmed_bind_never_expires_and_only_the_late_one_of_two_does() -> None:
    state, clock = state_with_nodes("n0", "n1")
    state.assume(GANG, [Assignment(pod=f"team/w{i}", node=f"n{i}", shape=SHAPE) for i in range(2)])
    state.binding_done("team/w0")
    clock.advance(1)
    state.binding_done("team/w1")
    bound = gpu_pod("w0", nodeName="n0")
    bound["metadata"]["uid"] = "uid-w0"
    state.apply(PODS, Change("ADDED", bound))
    assert "team/w0" not in state.assumed
    assert state.next_expiry() == 1 + FAST.binding.assume_timeout_seconds  # w0's stale entry is skipped
    clock.advance(FAST.binding.assume_timeout_seconds + 1)
    assert state.expire() == ["team/w1"]
    assert state.bound_node("team/w0") == "n0" and gpus_taken(state) == 8


def test_a_gang_compiled_from_the_demand_the_state_read_is_the_gang_read_afresh() -> None:
    """The state reads what each pod asks once and hands it to the gang index with the pod; a gang compiled
    from it is the one compiled from the pods alone. A pod whose spec the state cannot read hands nothing: the
    compile reads (and refuses) it itself."""
    state, _ = state_with_nodes("n0")
    gang = {"gang-scheduling.preferred.jp/gang-name": "train", "gang-scheduling.preferred.jp/gang-size": "2"}
    pods = [gpu_pod("w0", annotations=gang), gpu_pod("w1", annotations=gang), gpu_pod("odd")]
    pods[1]["spec"]["initContainers"] = [{"name": "init", "image": "x", "resources": {"requests": {"cpu": "4"}}}]
    pods[2]["spec"]["containers"][0]["resources"]["requests"] = {"memory": "not-a-quantity"}
    for i, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"u{i}"
        state.apply(PODS, Change("ADDED", pod))
    handed = {name: state.index.pod(f"team/{name}").demand for name in ("w0", "w1", "odd")}  # type: ignore[union-attr]
    assert handed["w1"] == {"cpu": 4000, "nvidia.com/gpu": 8, "pods": 1} and handed["odd"] is None
    state.index.take_changed()
    afresh = GangIndex(state.index.settings, state.kinds)
    for pod in pods:
        afresh.upsert_pod(state.index.pod(f"team/{pod['metadata']['name']}").raw)  # type: ignore[union-attr]
    afresh.take_changed()
    assert state.index.results() == afresh.results()
    assert isinstance(state.index.get(GANG), GangSpec)
    assert isinstance(state.index.get(GangKey("pod:team/odd")), GangError)  # refused by the compile itself


def test_a_member_s_demand_is_read_again_only_when_its_spec_changed_beyond_its_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []

    def counted(pod: Any, kinds: Any) -> dict[str, int]:
        reads.append(pod["metadata"]["name"])
        return pod_demand(pod, kinds)

    monkeypatch.setattr(state_module, "pod_demand", counted)
    state, _ = state_with_nodes("n0")
    gang = {"gang-scheduling.preferred.jp/gang-name": "train", "gang-scheduling.preferred.jp/gang-size": "1"}
    pod = gpu_pod("w0", annotations=gang)
    pod["metadata"]["uid"] = "u0"
    state.apply(PODS, Change("ADDED", pod))
    read = state.index.pod("team/w0").demand  # type: ignore[union-attr]
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n0"}}
    state.apply(PODS, Change("MODIFIED", bound))
    assert state.index.pod("team/w0").demand is read and reads == ["w0"]  # type: ignore[union-attr]  # a bind
    resized = {**bound, "spec": {**bound["spec"], "containers": [
        {"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}  # fmt: skip
    state.apply(PODS, Change("MODIFIED", resized))
    assert state.index.pod("team/w0").demand == {"nvidia.com/gpu": 4, "pods": 1}  # type: ignore[union-attr]
    assert gpus_taken(state) == 4 and reads == ["w0", "w0"]  # read again: the node holds what it asks now


def test_pods_listed_one_after_another_each_ask_what_their_own_spec_asks() -> None:
    """Pods of a gang mostly have equal specs, and what one asks is taken for the next equal one; a member
    whose spec differs (more GPUs, a node selector, already bound) is read for itself, in the node's room
    and in the gang the index compiles."""
    state, _ = state_with_nodes("n0", "n1")
    selected = {"nodeSelector": {"kubernetes.io/hostname": "n1"}}
    specs = {"a": {}, "b": {}, "c": {"gpus": 2, **selected}, "d": {}, "e": {"gpus": 4, "nodeName": "n0"}, "f": {}}
    for name, spec in specs.items():
        state.apply(PODS, Change("ADDED", gpu_pod(name, **{"gpus": 1, **spec}, annotations=pfn("g", 6))))
    state.index.take_changed()
    spec = state.index.get(GangKey("pfn:team/g"))
    assert isinstance(spec, GangSpec)
    members = {member.key: member for member in spec.request.pods}
    asked = {key: dict(member.shape.requests).get("nvidia.com/gpu", 0) for key, member in members.items()}
    assert asked == {"team/a": 1, "team/b": 1, "team/c": 2, "team/d": 1, "team/e": 4, "team/f": 1}
    assert dict(members["team/c"].shape.constraints.node_selector) == {"kubernetes.io/hostname": "n1"}
    assert members["team/d"].shape.constraints.node_selector == ()
    assert members["team/e"].node == "n0" and members["team/f"].node is None
    assert gpus_taken(state) == 4  # only the bound member's room is counted
    assert {key: state.pod(key).requests["nvidia.com/gpu"] for key in asked} == asked  # type: ignore[union-attr]
    kept = {name: state.index.pod(f"team/{name}").raw["spec"] for name in specs}  # type: ignore[union-attr]
    assert kept["b"] is kept["a"] and kept["d"] is not kept["c"] and kept["d"] == kept["a"]  # one copy of a spec
