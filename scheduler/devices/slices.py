"""The devices drivers publish (ResourceSlices, ``resource.k8s.io/v1``), as the allocator may use them.

A driver publishes each pool of devices in one or more ResourceSlices; ``spec.pool`` says the pool's
generation and how many slices it has at that generation. As kube-scheduler's allocator does, only the
newest generation of a pool counts, and only once all its slices are there (a pool half published, as
while a driver restarts, offers nothing). A slice's devices are on the node it names (``nodeName``), or
reachable from several (network-attached devices): from every node (``allNodes``) or from the nodes a
``nodeSelector`` selects (``reach``); with ``perDeviceNodeSelection`` each device says which.

A pool may also publish counter sets (``sharedCounters``, in slices that hold no devices: 1.36 refuses a slice
with both) that its partitionable devices consume; what each device uses of the other features of 1.36
(counters, taints, shared capacity, binding conditions) is its ``sharing`` (``sharing.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.devices.expressions import DeviceView, milli
from scheduler.devices.sharing import NONE, Capacity, Quantity, Sharing, Taint, quantity
from topology import QuantityError, SpecError
from topology.objects import node_selector_terms
from topology.request import NodeSelectorTerm

PoolKey = tuple[str, str]  # (driver, pool name)
#: The ``reach`` of a device every node reaches (``allNodes``).
ALL_NODES: tuple[NodeSelectorTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    #: The node it is on; None for a device reachable from several (``reach``).
    node: str | None
    view: DeviceView
    #: Changes whenever the slice that publishes the device does (selector results are kept by it).
    key: tuple[str, str, str, str]
    #: Of a device on no one node, the nodes that reach it: ``ALL_NODES``, or node selector terms (ORed).
    reach: tuple[NodeSelectorTerm, ...] | None = None
    sharing: Sharing = NONE

    @property
    def id(self) -> tuple[str, str, str]:
        """(driver, pool, device): how an allocation names it."""
        return self.driver, self.pool, self.name


@dataclass(slots=True)
class _Slice:
    name: str
    pool: PoolKey
    generation: int
    count: int
    devices: tuple[Device, ...]
    problem: str | None = None
    #: ``sharedCounters``: counter set -> counter -> amount.
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(slots=True)
class Pools:
    """Every ResourceSlice, and the devices of the pools that are complete at their newest generation."""

    _slices: dict[str, _Slice] = field(default_factory=dict)
    #: What is wrong with slices that could not be read, by name (the rest of their pool is unusable).
    problems: dict[str, str] = field(default_factory=dict)

    def apply(self, change_type: str, obj: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
        """Apply one watch event of a ResourceSlice; returns the keys of devices that changed or went."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        before = self._slices.pop(name, None)
        self.problems.pop(name, None)
        changed = {device.key for device in before.devices} if before is not None else set()
        if change_type != "DELETED":
            read = read_slice(obj)
            self._slices[name] = read
            if read.problem is not None:
                self.problems[name] = read.problem
            changed |= {device.key for device in read.devices}
        return changed

    def known(self) -> set[tuple[str, str]]:
        return {("", name) for name in self._slices}

    def devices(self) -> Iterator[Device]:
        """Devices of every pool that is complete at its newest generation and wholly readable."""
        for item in self._usable():
            yield from item.devices

    def counters(self) -> dict[tuple[str, str, str], dict[str, int]]:
        """The counter sets of the usable pools: (driver, pool, set) -> counter -> amount."""
        return {
            (*item.pool, name): dict(counters) for item in self._usable() for name, counters in item.counters.items()
        }

    def _usable(self) -> Iterator[_Slice]:
        newest: dict[PoolKey, int] = {}
        for item in self._slices.values():
            newest[item.pool] = max(newest.get(item.pool, item.generation), item.generation)
        current: dict[PoolKey, list[_Slice]] = {}
        for item in self._slices.values():
            if item.generation == newest[item.pool]:
                current.setdefault(item.pool, []).append(item)
        for slices in current.values():
            if len(slices) != slices[0].count or any(item.problem for item in slices):
                continue  # incomplete, or part of it unreadable: the driver has not finished publishing
            yield from slices

    def incomplete(self) -> list[PoolKey]:
        """Pools whose newest generation lacks slices (or has unreadable ones), for explanations."""
        usable = {(device.driver, device.pool) for device in self.devices()}
        return sorted({item.pool for item in self._slices.values()} - usable)


def read_slice(obj: Mapping[str, Any]) -> _Slice:
    """A ResourceSlice's pool and devices; a slice that cannot be read keeps its pool from counting."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(metadata.get("name", ""))
    version = str(metadata.get("resourceVersion", ""))
    driver = str(spec.get("driver", ""))
    pool = spec.get("pool") or {}
    pool_key = (driver, str(pool.get("name", "")))
    try:
        generation = int(pool.get("generation", 0))
        count = int(pool.get("resourceSliceCount", 1))
    except (TypeError, ValueError):
        return _Slice(name, pool_key, 0, 1, (), f"slice {name}: spec.pool generation and count must be integers")
    per_device = spec.get("perDeviceNodeSelection") is True
    devices = []
    try:
        counters = _counter_sets(spec.get("sharedCounters"), f"slice {name}: spec.sharedCounters")
        if counters and spec.get("devices"):
            raise ValueError("spec.sharedCounters and spec.devices: a slice holds one or the other")
        where = _reach(spec, f"slice {name}: spec") if not counters else (None, None)
        for i, raw in enumerate(spec.get("devices") or []):
            device_node, reach = _reach(raw, f"slice {name}: spec.devices[{i}]") if per_device else where
            devices.append(
                Device(
                    driver=driver,
                    pool=pool_key[1],
                    name=str(raw.get("name", "")),
                    node=device_node,
                    view=DeviceView(driver, _attributes(raw.get("attributes"), driver), _capacity(raw, driver)),
                    key=(driver, pool_key[1], str(raw.get("name", "")), version),
                    reach=reach,
                    sharing=_sharing(raw, f"slice {name}: spec.devices[{i}]"),
                )
            )
    except (QuantityError, SpecError, TypeError, ValueError, AttributeError) as error:
        return _Slice(name, pool_key, generation, count, (), f"slice {name}: {error}")
    return _Slice(name, pool_key, generation, count, tuple(devices), counters=counters)


def _counter_sets(raw: object, where: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for i, entry in enumerate(raw if isinstance(raw, list) else ()):
        found[str(entry.get("name", ""))] = _counters(entry.get("counters"), f"{where}[{i}].counters")
    return found


def _counters(raw: object, where: str) -> dict[str, int]:
    return {name: quantity((value or {}).get("value"), f"{where}.{name}").milli for name, value in _items(raw)}


def _sharing(raw: Mapping[str, Any], where: str) -> Sharing:
    """What the device uses of counters, taints, shared capacity and binding conditions (most use none)."""
    if not any(raw.get(field) for field in _SHARING_FIELDS):
        return NONE
    consumes = tuple(
        (str(entry.get("counterSet", "")),
         tuple(_counters(entry.get("counters"), f"{where}.consumesCounters[{i}].counters").items()))
        for i, entry in enumerate(raw.get("consumesCounters") or [])
    )  # fmt: skip
    taints = tuple(
        Taint(str(taint.get("key", "")), str(taint.get("value") or ""), str(taint.get("effect", "")))
        for taint in raw.get("taints") or []
    )
    shared = raw.get("allowMultipleAllocations") is True
    return Sharing(
        consumes=consumes,
        taints=taints,
        shared=shared,
        capacity=_policies(raw.get("capacity"), f"{where}.capacity") if shared else None,
        binding_conditions=tuple(str(name) for name in raw.get("bindingConditions") or []),
        binding_failure_conditions=tuple(str(name) for name in raw.get("bindingFailureConditions") or []),
        binds_to_node=raw.get("bindsToNode") is True,
    )


_SHARING_FIELDS = ("consumesCounters", "taints", "allowMultipleAllocations", "bindingConditions", "bindsToNode")


def _policies(raw: object, where: str) -> dict[str, Capacity]:
    found = {}
    for name, value in _items(raw):
        policy = value.get("requestPolicy") or {}
        bounds = policy.get("validRange") or {}
        at = f"{where}.{name}.requestPolicy"
        found[name] = Capacity(
            value=quantity(value.get("value"), f"{where}.{name}.value"),
            default=_optional(policy.get("default"), f"{at}.default"),
            valid_values=tuple(quantity(v, f"{at}.validValues") for v in policy.get("validValues") or []),
            minimum=_optional(bounds.get("min"), f"{at}.validRange.min"),
            maximum=_optional(bounds.get("max"), f"{at}.validRange.max"),
            step=_optional(bounds.get("step"), f"{at}.validRange.step"),
        )
    return found


def _optional(text: object, where: str) -> Quantity | None:
    return quantity(text, where) if text is not None else None


def _reach(spec: Mapping[str, Any], where: str) -> tuple[str | None, tuple[NodeSelectorTerm, ...] | None]:
    """(the node, None) of a node's devices; (None, the nodes that reach them) of network-attached ones."""
    node = spec.get("nodeName")
    if isinstance(node, str) and node:
        return node, None
    if spec.get("allNodes") is True:
        return None, ALL_NODES
    if spec.get("nodeSelector") is not None:
        return None, node_selector_terms(spec["nodeSelector"], f"{where}.nodeSelector")
    return None, None  # perDeviceNodeSelection: each device says


def _split(name: str, driver: str) -> tuple[str, str]:
    """``domain/name``, or a bare name in the driver's domain."""
    domain, _, rest = name.rpartition("/")
    return (domain, rest) if domain else (driver, name)


def _attributes(raw: object, driver: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name, value in _items(raw):
        domain, key = _split(name, driver)
        found.setdefault(domain, {})[key] = _attribute_value(value, name)
    return found


def _attribute_value(value: object, name: str) -> Any:
    if not isinstance(value, Mapping):
        raise ValueError(f"attribute {name} must be an object")
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    for kind in ("ints", "bools", "strings", "versions"):
        if kind in value:
            return list(value[kind])
    raise ValueError(f"attribute {name} has no value of a known type")


def _capacity(raw: Mapping[str, Any], driver: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for name, value in _items(raw.get("capacity")):
        domain, key = _split(name, driver)
        quantity = value.get("value") if isinstance(value, Mapping) else None
        if not isinstance(quantity, str | int):
            raise ValueError(f"capacity {name} must have a value")
        found.setdefault(domain, {})[key] = milli(str(quantity))
    return found


def _items(raw: object) -> Iterable[tuple[str, Any]]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ValueError("must be a map")
    return ((str(name), value) for name, value in raw.items())
