"""What a device lets a request take of it, under the four DRA features of 1.36 that GPU drivers use.

- **Partitionable devices** (``DRAPartitionableDevices``): a pool publishes counter sets (``sharedCounters``,
  a GPU's memory and its slices) in slices of their own, and each device says what it consumes of them
  (``consumesCounters``): a MIG partition consumes part of its GPU, the whole-GPU device all of it. A device
  may be given only while every counter it consumes has that much left (``Budget``).
- **Device taints** (``DRADeviceTaints``): a device tainted ``NoSchedule`` or ``NoExecute`` is given only to a
  request that tolerates the taint (``tolerates``), as a node's taints keep pods off.
- **Consumable capacity** (``DRAConsumableCapacity``): a device with ``allowMultipleAllocations`` is shared by
  several claims, each consuming part of its capacity (``consumption``: the request rounded up as the
  device's ``requestPolicy`` says, its default when the request names none, the whole capacity when the
  device has no policy); the sum on a device never exceeds its capacity.
- **Binding conditions** (``DRADeviceBindingConditions``): a device that needs the driver to attach it first
  (``bindingConditions``) is allocated, then its pods wait until the driver reports every condition True in the
  claim's ``status.devices``; a failure condition True, or no answer in time, takes the allocation back
  (``binding_state``).

Quantities are thousandths of their unit, as the selectors see them (``expressions.milli``), and each is kept
with its text, which is what is written back (``consumedCapacity``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.devices.expressions import milli

#: The taint effects that keep a device from a request that does not tolerate them (``None`` is only shown).
BLOCKING = ("NoSchedule", "NoExecute")
#: How many claims placement counts a shared device as able to serve when its requests consume nothing.
UNLIMITED_SHARES = 1024
CounterKey = tuple[str, str, str]  # (driver, pool, counter set)


@dataclass(frozen=True, slots=True)
class Quantity:
    text: str
    milli: int


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device (as its slice names it) and how requests consume it (``requestPolicy``)."""

    value: Quantity
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    minimum: Quantity | None = None
    maximum: Quantity | None = None
    step: Quantity | None = None

    @property
    def has_policy(self) -> bool:
        return self.default is not None or bool(self.valid_values) or self.minimum is not None


@dataclass(frozen=True, slots=True)
class Sharing:
    """What of the four features a device uses (the defaults: none)."""

    #: (counter set, ((counter, amount), ...)) per entry of ``consumesCounters``.
    consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    taints: tuple[Taint, ...] = ()
    #: ``allowMultipleAllocations``: several claims share it, each consuming part of its capacity.
    shared: bool = False
    #: Its capacities by the name its slice gives them (``memory``), with their request policies.
    capacity: Mapping[str, Capacity] | None = None
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    #: ``bindsToNode``: its allocation names the node even where the device is reachable from several.
    binds_to_node: bool = False


NONE = Sharing()


def tolerates(taints: Iterable[Taint], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``tolerations`` (a request's, as written) tolerate every taint that keeps requests off."""
    return all(
        any(_tolerates(toleration, taint) for toleration in tolerations) for taint in taints if taint.effect in BLOCKING
    )


def _tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key")
    if toleration.get("operator") == "Exists":
        return not key or key == taint.key
    return key == taint.key and str(toleration.get("value") or "") == taint.value


def untolerated(taints: Iterable[Taint], tolerations: Sequence[Mapping[str, Any]]) -> list[Taint]:
    return [taint for taint in taints if taint.effect in BLOCKING and not tolerates((taint,), tolerations)]


def consumption(capacity: Mapping[str, Capacity], requested: Mapping[str, Quantity]) -> dict[str, Quantity] | None:
    """What one allocation of a shared device consumes of each of its capacities for a request asking
    ``requested``; None when the request asks more than a policy allows or a capacity the device lacks."""
    if any(name not in capacity for name in requested):
        return None
    found: dict[str, Quantity] = {}
    for name, offered in capacity.items():
        asked = requested.get(name)
        if asked is None:
            found[name] = offered.default if offered.has_policy and offered.default is not None else offered.value
            continue
        rounded = _rounded(offered, asked)
        if rounded is None or rounded.milli > offered.value.milli:
            return None
        found[name] = rounded
    return found


def _rounded(capacity: Capacity, asked: Quantity) -> Quantity | None:
    """``asked`` rounded up as the capacity's policy says (None: the policy refuses it)."""
    if capacity.valid_values:
        return next((value for value in capacity.valid_values if value.milli >= asked.milli), None)
    if capacity.minimum is not None:
        if asked.milli <= capacity.minimum.milli:
            return capacity.minimum
        amount = asked.milli
        if capacity.step is not None and capacity.step.milli > 0:
            steps = -(-(asked.milli - capacity.minimum.milli) // capacity.step.milli)
            amount = capacity.minimum.milli + steps * capacity.step.milli
        if capacity.maximum is not None and amount > capacity.maximum.milli:
            return None
        return asked if amount == asked.milli else Quantity(quantity_text(amount), amount)
    return asked


def quantity_text(amount: int) -> str:
    """A quantity in thousandths written as a quantity: binary units for whole multiples of 1Ki, else whole
    units when it has no fraction, else thousandths."""
    if amount % 1000:
        return f"{amount}m"
    whole = amount // 1000
    for suffix, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if whole and whole % size == 0:
            return f"{whole // size}{suffix}"
    return str(whole)


def fits_capacity(capacity: Mapping[str, int], requested: Mapping[str, Quantity]) -> bool:
    """Of a device given whole (not shared): whether it has at least what the request asks of each capacity."""
    return all(capacity.get(name, -1) >= asked.milli for name, asked in requested.items())


def shares_left(
    capacity: Mapping[str, Capacity], used: Mapping[str, int], takes: Mapping[str, Quantity], limit: int
) -> int:
    """How many more allocations taking ``takes`` each fit in what ``used`` leaves of the capacities."""
    found = limit
    for name, taken in takes.items():
        if taken.milli > 0:
            left = capacity[name].value.milli - used.get(name, 0)
            found = min(found, max(0, left // taken.milli))
    return found


class Budget:
    """What is left of every counter set (``(driver, pool, set)`` -> counter -> amount), taken from as devices
    are given. The counter sets as published are shared, never written: what is taken lives beside them, so
    that ``copy`` (to try a choice without spending) costs the sets taken from, not every GPU's."""

    __slots__ = ("_published", "_taken")

    def __init__(self, published: Mapping[CounterKey, Mapping[str, int]]) -> None:
        self._published = published
        self._taken: dict[CounterKey, dict[str, int]] = {}

    def copy(self) -> Budget:
        found = Budget(self._published)
        found._taken = {key: dict(counters) for key, counters in self._taken.items()}
        return found

    def _left(self, key: CounterKey) -> Mapping[str, int] | None:
        return self._taken.get(key) or self._published.get(key)

    def fits(self, driver: str, pool: str, sharing: Sharing) -> bool:
        for counter_set, counters in sharing.consumes:
            there = self._left((driver, pool, counter_set))
            if there is None or any(there.get(name, 0) < amount for name, amount in counters):
                return False  # a counter set the pool does not publish (yet) gives nothing
        return True

    def take(self, driver: str, pool: str, sharing: Sharing) -> None:
        for counter_set, counters in sharing.consumes:
            key = (driver, pool, counter_set)
            there = self._taken.get(key)
            if there is None:
                there = self._taken[key] = dict(self._published.get(key, {}))
            for name, amount in counters:
                there[name] = there.get(name, 0) - amount

    def short(self, driver: str, pool: str, sharing: Sharing) -> str | None:
        """The first counter the device needs more of than is left, in words (None: it fits)."""
        for counter_set, counters in sharing.consumes:
            there = self._left((driver, pool, counter_set))
            if there is None:
                return f"counter set {counter_set} of pool {pool} is not published"
            for name, amount in counters:
                if there.get(name, 0) < amount:
                    left = quantity_text(there.get(name, 0))
                    return f"counter set {counter_set} has {left} of {name} left, one needs {quantity_text(amount)}"
        return None


def binding_state(
    conditions: Mapping[str, str], wanted: Sequence[str], failures: Sequence[str]
) -> tuple[bool, str | None]:
    """(ready, failed) of one allocated device: ready once every binding condition is True in the claim's
    ``status.devices``; failed (which condition) once a failure condition is True."""
    failed = next((name for name in failures if conditions.get(name) == "True"), None)
    return all(conditions.get(name) == "True" for name in wanted), failed


def quantity(text: object, where: str) -> Quantity:
    if not isinstance(text, str | int):
        raise ValueError(f"{where} must be a quantity")
    return Quantity(str(text), milli(str(text)))
