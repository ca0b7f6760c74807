"""CEL device selectors as kube-scheduler's DRA allocator evaluates them, each compiled once."""

from __future__ import annotations

import re
import sys

import pytest

from scheduler.devices.expressions import DeviceView, SelectorError, Selectors, milli

H100 = DeviceView(
    "gpu.nvidia.com",
    {"gpu.nvidia.com": {"type": "gpu", "productName": "NVIDIA H100 80GB HBM3", "driverVersion": "550.54.15",
                        "index": 3}},
    {"gpu.nvidia.com": {"memory": milli("80Gi")}},
)  # fmt: skip
CHANNEL = DeviceView("compute-domain.nvidia.com", {"compute-domain.nvidia.com": {"type": "channel", "id": 0}}, {})

CASES = [
    ("device.driver == 'gpu.nvidia.com'", True, False),
    ("device.attributes['gpu.nvidia.com'].type == 'gpu'", True, "error"),  # no such attribute on a channel
    ("'type' in device.attributes['gpu.nvidia.com']", True, False),  # an unknown domain is an empty map
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True, "error"),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))", False, "error"),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))", True, "error"),
    ("semver('1.2.3-rc.1').isLessThan(semver('1.2.3'))", True, True),
    ("semver('1.2.3').major() == 1 && quantity('1.5').compareTo(quantity('1500m')) == 0", True, True),
    ("cel.bind(gpu, device.attributes['gpu.nvidia.com'], gpu.type == 'gpu' && gpu.index < 4)", True, "error"),
]


@pytest.mark.parametrize(("expression", "on_gpu", "on_channel"), CASES, ids=[case[0] for case in CASES])
def test_a_selector_gives_what_kube_scheduler_s_allocator_gives(
    expression: str, on_gpu: bool, on_channel: bool | str
) -> None:
    selectors = Selectors()
    assert selectors.matches(expression, "gpu", H100) is on_gpu
    if on_channel == "error":
        with pytest.raises(SelectorError, match=re.escape("failed on a device of compute-domain.nvidia.com")):
            selectors.matches(expression, "channel", CHANNEL)
    else:
        assert selectors.matches(expression, "channel", CHANNEL) is on_channel


def test_each_expression_is_compiled_once_and_evaluated_once_per_device_until_the_device_changes() -> None:
    selectors = Selectors()
    expression = "device.attributes['gpu.nvidia.com'].index < 4"
    for _ in range(3):
        assert selectors.matches(expression, ("pool", "gpu-3", "v1"), H100)
        assert selectors.matches("device.driver != ''", ("pool", "gpu-3", "v1"), H100)
    assert (selectors.compilations, selectors.evaluations) == (2, 2)
    selectors.invalidate([("pool", "gpu-3", "v1")])
    assert selectors.matches(expression, ("pool", "gpu-3", "v1"), H100)
    assert (selectors.compilations, selectors.evaluations) == (2, 3)


def test_a_selector_that_does_not_compile_or_is_not_a_bool_says_why() -> None:
    selectors = Selectors()
    assert "does not compile" in (selectors.check("device.attributes[") or "")
    assert "undeclared reference to 'gpu.type'" in (selectors.check("gpu.type == 'gpu'") or "")
    assert "must evaluate to a bool" in (selectors.check("1 + 2") or "")
    assert selectors.check("device.driver == 'x'") is None
    with pytest.raises(SelectorError, match="does not compile"):
        selectors.matches("device.attributes[", "gpu", H100)
    with pytest.raises(SelectorError, match=re.escape("gave 'gpu.nvidia.com', not a bool")):
        selectors.matches("device.driver", "gpu", H100)  # of unknown type until it runs, as in Kubernetes


def test_a_cel_engine_that_cannot_be_loaded_fails_each_selector_not_the_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine is loaded by the first selector compiled (not at start): a broken install is then that
    selector's failure, told as its reason, and the scheduling pass goes on."""
    from scheduler.devices import expressions  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, "cel_expr_python", None)  # what an environment without it looks like
    expressions._environment.cache_clear()
    try:
        selectors = Selectors()
        problem = selectors.check('device.driver == "gpu.example.com"')
        assert problem is not None and problem.startswith(
            "selector 'device.driver == \"gpu.example.com\"' cannot be evaluated: the CEL engine: "
        )
        with pytest.raises(SelectorError, match="cannot be evaluated: the CEL engine"):
            selectors.matches('device.driver == "gpu.example.com"', "d0", DeviceView("gpu.example.com", {}, {}))
    finally:
        expressions._environment.cache_clear()  # the next test loads the real engine
