"""Kubernetes resource quantities and a pod's effective request, in integer base units.

Why this exists: placement compares integers. Every quantity that reaches the engine (a node's
allocatable, a container's request) is parsed here exactly as the API server's `resource.Quantity`
parses it, then rounded *up* to the resource's base unit, as kube-scheduler does with `Value()` and
`MilliValue()`:

- ``cpu`` is counted in millicores (``MilliValue``),
- every other resource (``memory`` in bytes, ``pods``, ``nvidia.com/gpu``, ``hugepages-2Mi``, ...)
  in whole units (``Value``).

Values are capped at :data:`MAX_AMOUNT` so that sums of a few of them never overflow int64 arrays;
nothing that large is ever allocatable, so a capped request simply fits nowhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from math import ceil
from typing import Any, Final

from topology.spec_error import SpecError

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
#: The columns of claimed devices (``devices/<DeviceClass>``, then a digest of the claim's own selectors
#: when it has some): named by the scheduler's device kind, worded here for the reasons.
DEVICES: Final = "devices/"
#: Appended to a column of devices for pods whose request takes every matching device of their node
#: (``allocationMode: All``): a node whose count of them is the largest offers one such set.
WHOLE_NODE: Final = "#all"

#: A pod's requests as ``(resource, amount)`` pairs, sorted: hashable, for room kept or hidden by pod.
RequestItems = tuple[tuple[str, int], ...]
#: Largest amount a single quantity is given, in base units (2**62 - 1): a handful of these
#: still add up inside int64.
MAX_AMOUNT: Final = (1 << 62) - 1

_INT64_MAX: Final = (1 << 63) - 1
_NANO: Final = Fraction(1, 10**9)
_DECIMAL_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DIGITS: Final = frozenset("0123456789")

# Resources whose pod-level request (`spec.resources.requests`, PodLevelResources) replaces the
# sum over containers, as in k8s.io/component-helpers/resource.IsSupportedPodLevelResource.
_POD_LEVEL_RESOURCES: Final = frozenset({CPU, MEMORY})
_HUGEPAGES_PREFIX: Final = "hugepages-"


def resource_words(resource: str) -> str:
    """How a reason names a resource: as it is, but a column of devices by its DeviceClass
    (``devices of class gpu.nvidia.com``)."""
    if not resource.startswith(DEVICES):
        return resource
    if resource.endswith(WHOLE_NODE):
        return f"nodes with all their {resource_words(resource.removesuffix(WHOLE_NODE))} free (allocationMode All)"
    device_class, _, digest = resource.removeprefix(DEVICES).partition("/")
    return f"devices of class {device_class}" + (" that satisfy the claim's selectors" if digest else "")


def amount_words(amount: int, resource: str) -> str:
    """``1 device of class gpu.nvidia.com``, ``8 devices of class ...``: a count of a resource for a sentence."""
    words = resource_words(resource)
    return f"{amount} {words.replace('devices', 'device', 1) if amount == 1 else words}"


def counts_devices(resource: str) -> bool:
    """Whether a column counts devices (for sentences that add them up)."""
    return resource.startswith(DEVICES) and not resource.endswith(WHOLE_NODE)


class QuantityError(SpecError):
    """A resource quantity that the Kubernetes API would not accept (the field names where it was)."""


def parse_quantity(text: str, *, field: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity string into its exact value.

    Follows `k8s.io/apimachinery/pkg/api/resource.ParseQuantity`: ``<sign><number><suffix>`` where
    the suffix is binary SI (``Ki`` .. ``Ei``), decimal SI (``n u m k M G T P E``) or a decimal
    exponent (``e3``, ``E-2``). Like the API, values finer than 1n are rounded away from zero to
    1n, and binary-SI values are capped at 2**63 - 1.
    """
    if not isinstance(text, str):
        raise QuantityError(field, text, "must be a string such as '500m', '2Gi' or '8'")
    sign, integer, fraction, suffix = _scan(text, field)
    if suffix in _DECIMAL_SUFFIXES:
        base, exponent = 10, _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        base, exponent = 2, _BINARY_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _is_int32(suffix[1:]):
        base, exponent = 10, int(suffix[1:])
    else:
        raise QuantityError(
            field, text, f"unknown suffix {suffix!r} (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or eN)"
        )
    mantissa = Fraction(int(integer + fraction), 10 ** len(fraction))
    value = mantissa * Fraction(base) ** exponent
    if value and value % _NANO:
        value = (value // _NANO + 1) * _NANO  # round away from zero, to the nano unit
    if base == 2 and value > _INT64_MAX:
        value = Fraction(_INT64_MAX)
    return -value if sign < 0 else value


def _scan(text: str, field: str) -> tuple[int, str, str, str]:
    """Split a quantity into sign, integer digits, fraction digits and suffix.

    Mirrors `parseQuantityString`, including its leniencies ("1.", ".5", "1.G" and a bare sign parse).
    """
    if not text:
        raise QuantityError(field, text, "empty string")
    pos, end, sign = 0, len(text), 1
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    integer = text[start:pos] or "0"
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise QuantityError(field, text, "must look like '<number><suffix>', e.g. '500m', '1.5Gi', '2e3'")
    return sign, integer, fraction, text[suffix_start:]


def _is_int32(digits: str) -> bool:
    body = digits[1:] if digits[:1] in ("+", "-") else digits
    return bool(body) and all(c in _DIGITS for c in body) and -(2**31) <= int(digits) < 2**31


def to_base_units(resource: str, value: Fraction) -> int:
    """Round a quantity up to the resource's base unit (millicores for cpu, whole units otherwise)."""
    scaled = value * 1000 if resource == CPU else value
    return max(-MAX_AMOUNT, min(MAX_AMOUNT, ceil(scaled)))


def quantity_amount(resource: str, raw: object, *, field: str) -> int:
    """Parse one quantity (string, or a number as YAML may give it) into base units."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(field, raw, "must be a string such as '500m', '2Gi' or '8'")
    if isinstance(raw, float):
        raw = repr(raw) if math.isfinite(raw) else "invalid"
    try:
        return _base_units_of(resource == CPU, str(raw))
    except QuantityError as error:
        raise QuantityError(field, error.value, error.problem) from None


@functools.lru_cache(maxsize=4096)
def _base_units_of(is_cpu: bool, text: str) -> int:
    # A cluster uses a handful of distinct quantity strings ("1", "4Gi", "500m") across all its pods;
    # exact parsing with Fractions is slow enough to matter when every pod event is read.
    return to_base_units(CPU if is_cpu else "", parse_quantity(text))


def resource_list(raw: object, *, field: str, allow_negative: bool = False) -> dict[str, int]:
    """Parse a ``ResourceList`` mapping (``{"cpu": "500m", ...}``) into base units."""
    if raw is None:
        return {}
    if type(raw) is not dict and not isinstance(raw, Mapping):  # dict first: what a JSON parser makes
        raise QuantityError(field, raw, "must be a mapping of resource name to quantity")
    amounts: dict[str, int] = {}
    for name, quantity in raw.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(field, name, "resource names must be non-empty strings")
        amount = quantity_amount(name, quantity, field=f"{field}.{name}")
        if amount < 0 and not allow_negative:
            raise QuantityError(f"{field}.{name}", quantity, "must be greater than or equal to 0")
        amounts[name] = amount
    return amounts


def _add(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, amount in extra.items():
        total[name] = min(MAX_AMOUNT, total.get(name, 0) + amount)


def _raise_to(total: dict[str, int], floor: Mapping[str, int]) -> None:
    for name, amount in floor.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _container_requests(container: object, field: str) -> dict[str, int]:
    """A container's requests, with requests defaulted from limits as the API server defaults them."""
    if type(container) is not dict and not isinstance(container, Mapping):
        raise QuantityError(field, container, "must be a container object")
    resources = container.get("resources") or {}
    if type(resources) is not dict and not isinstance(resources, Mapping):
        raise QuantityError(f"{field}.resources", resources, "must be a mapping")
    limits = resource_list(resources.get("limits"), field=f"{field}.resources.limits")
    requests = resource_list(resources.get("requests"), field=f"{field}.resources.requests")
    return {**limits, **requests}


def _containers(spec: Mapping[str, Any], key: str) -> list[object]:
    containers = spec.get(key) or []
    if not isinstance(containers, list):
        raise QuantityError(f"spec.{key}", containers, "must be a list of containers")
    return containers


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The effective request of a pod, as kube-scheduler's NodeResourcesFit computes it.

    ``max(sum of containers, largest init container) + overhead`` where restartable ("sidecar")
    init containers (``restartPolicy: Always``) keep running: they add to the containers' sum and
    to every later init container's peak (KEP-753). Pod-level requests (``spec.resources``) replace
    the container sum for cpu, memory and hugepages. Every pod also takes one unit of ``pods``.
    """
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise QuantityError("spec", spec, "must be a mapping")
    total: dict[str, int] = {}
    for i, container in enumerate(_containers(spec, "containers")):
        _add(total, _container_requests(container, f"spec.containers[{i}]"))

    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(_containers(spec, "initContainers")):
        requests = _container_requests(container, f"spec.initContainers[{i}]")
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _raise_to(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _raise_to(init_peak, running)
    _raise_to(total, init_peak)

    pod_level = spec.get("resources") or {}
    if isinstance(pod_level, Mapping) and pod_level.get("requests"):
        requested = resource_list(pod_level.get("requests"), field="spec.resources.requests")
        for name, amount in requested.items():
            if name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX):
                total[name] = amount

    _add(total, resource_list(spec.get("overhead"), field="spec.overhead"))
    total[PODS] = 1
    return {name: amount for name, amount in total.items() if amount > 0 or name == PODS}


def merge_names(*lists: Iterable[str]) -> tuple[str, ...]:
    """Resource names in a stable order: the core ones first, then the rest sorted."""
    names = {name for names in lists for name in names}
    core = [name for name in (CPU, MEMORY, PODS) if name in names]
    return (*core, *sorted(names - set(core)))
