"""The oracle's device checks find each allocation the four 1.36 features forbid, whoever wrote it: they are
what the scenario tests rely on, so each is shown to fail here."""

from __future__ import annotations

from typing import Any

from scheduler.devices.sharing import Quantity, consumption
from scheduler.devices.slices import read_slice
from scheduler.simulation.device_checks import DeviceChecks, unattached
from tests.devices.support import GPU_DRIVER, claim, node_slice, partitioned_node, shared_slice


def allocated(name: str, *devices: str, pool: str = "b0-r0-n0", **result: Any) -> dict[str, Any]:
    found = claim(name, len(devices), namespace="team")
    found["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": GPU_DRIVER, "pool": pool, "device": device, **result} for device in devices
    ]}}}  # fmt: skip
    return found


def checks(*slices: dict[str, Any]) -> DeviceChecks:
    found = DeviceChecks()
    for obj in slices:
        found.slice_changed("ADDED", obj)
    return found


def test_partitions_whose_counters_add_up_beyond_their_gpu_are_found() -> None:
    oracle = checks(*partitioned_node("b0-r0-n0"))
    whole = allocated("whole", "gpu-0-7g-0")
    assert oracle.allocations([whole, allocated("parts", "gpu-0-1g-0", "gpu-0-1g-1", "gpu-0-1g-2")]) == [
        "counters overcommitted: b0-r0-n0/gpu-0/memory: 110Gi of 80Gi consumed, slices: 10 of 7 consumed"
    ]
    assert oracle.allocations([allocated("parts", *(f"gpu-0-1g-{k}" for k in range(7)))]) == []


def test_a_tainted_device_given_to_a_request_that_does_not_tolerate_it_is_found() -> None:
    tainted = node_slice("b0-r0-n0", 1)
    tainted["spec"]["devices"][0]["taints"] = [{"key": "example.com/unhealthy", "value": "true",
                                                "effect": "NoSchedule"}]  # fmt: skip
    oracle = checks(tainted)
    (problem,) = oracle.allocations([allocated("c", "gpu-0")])
    assert "tainted example.com/unhealthy=true:NoSchedule allocated to team/c" in problem
    tolerant = allocated("c", "gpu-0")
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [{"key": "example.com/unhealthy",
                                                                             "operator": "Exists"}]  # fmt: skip
    assert oracle.allocations([tolerant]) == []


def test_a_device_given_twice_is_found_unless_it_is_shared_and_then_only_beyond_its_capacity() -> None:
    assert checks(node_slice("b0-r0-n0", 1)).allocations([allocated("a", "gpu-0"), allocated("b", "gpu-0")]) == [
        "device gpu.nvidia.com/b0-r0-n0/gpu-0 allocated to team/a and to team/b"
    ]
    oracle = checks(shared_slice("b0-r0-n0"))
    share = {"consumedCapacity": {"memory": "40Gi"}}
    assert oracle.allocations([allocated(name, "gpu-0", **share) for name in ("a", "b")]) == []
    (problem,) = oracle.allocations([allocated(name, "gpu-0", **share) for name in ("a", "b", "c")])
    assert problem.startswith("device gpu.nvidia.com/b0-r0-n0/gpu-0 shared beyond its memory")


def test_a_device_whose_binding_conditions_are_not_all_true_is_unattached() -> None:
    waiting = allocated("w", "gpu-0", bindingConditions=["example.com/attached"],
                        bindingFailureConditions=["example.com/failed"])  # fmt: skip
    assert unattached(waiting) == ["gpu.nvidia.com/b0-r0-n0/gpu-0"]
    waiting["status"]["devices"] = [{"driver": GPU_DRIVER, "pool": "b0-r0-n0", "device": "gpu-0",
                                     "conditions": [{"type": "example.com/attached", "status": "True"}]}]  # fmt: skip
    assert unattached(waiting) == []


def test_a_share_is_rounded_up_as_the_device_s_policy_says_and_refused_beyond_it() -> None:
    (device,) = read_slice(
        shared_slice("n", memory="80Gi", default="8Gi", validRange={"min": "4Gi", "max": "40Gi", "step": "4Gi"})
    ).devices
    capacity = device.sharing.capacity or {}

    def taken(asked: str | None) -> str | None:
        found = consumption(capacity, {"memory": Quantity(asked, 0)} if asked is None else
                            {"memory": Quantity(asked, int(asked.removesuffix("Gi")) * 2**30 * 1000)})  # fmt: skip
        return None if found is None else found["memory"].text

    assert taken("1Gi") == "4Gi"  # below the minimum: the minimum
    assert taken("9Gi") == "12Gi"  # between steps: the next step
    assert taken("40Gi") == "40Gi"
    assert taken("41Gi") is None  # beyond the maximum: this device cannot serve it
    assert consumption(capacity, {})["memory"].text == "8Gi"  # type: ignore[index]  # not asked: the default
    (plain,) = read_slice(shared_slice("n")).devices  # no policy: a share takes what it asks
    assert consumption(plain.sharing.capacity or {}, {})["memory"].text == "80Gi"  # type: ignore[index]
