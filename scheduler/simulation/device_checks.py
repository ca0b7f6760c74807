"""The device half of the invariant oracle: what the allocations in the store may never do, whoever wrote them.

- no device allocated to two claims, unless it allows multiple allocations, and then the claims' consumed
  capacity within the device's capacity;
- no counter of a counter set consumed beyond its value (each allocated partition counted once);
- no device tainted ``NoSchedule``/``NoExecute`` given to a request that does not tolerate the taint;
- (at a bind) every device of the pod's claims that has binding conditions reports them all True.

The devices are kept from the store's ResourceSlices as the scheduler reads them (``devices.slices.Pools``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.devices.claims import Claim, ClaimError, read_claim
from scheduler.devices.sharing import binding_state, quantity_text, untolerated
from scheduler.devices.slices import Device, Pools


class DeviceChecks:
    def __init__(self) -> None:
        self.pools = Pools()
        self._by_id: dict[tuple[str, str, str], Device] | None = None

    def slice_changed(self, change_type: str, obj: Mapping[str, Any]) -> None:
        self.pools.apply(change_type, obj)
        self._by_id = None

    def _device(self, device_id: tuple[str, str, str]) -> Device | None:
        if self._by_id is None:
            self._by_id = {device.id: device for device in self.pools.devices()}
        return self._by_id.get(device_id)

    def allocations(self, claims: Iterable[Mapping[str, Any]]) -> list[str]:
        """What the allocations of ``claims`` (every claim in the store) break, in words."""
        found: list[str] = []
        holders: dict[tuple[str, str, str], list[str]] = {}
        used: dict[tuple[str, str, str], dict[str, int]] = {}
        for obj in claims:
            claim = _read(obj)
            if claim is None:
                continue
            tolerations = {way.name: way.tolerations for request in claim.requests for way in request.alternatives}
            for i, device_id in enumerate(claim.allocated):
                holders.setdefault(device_id, []).append(claim.key)
                for name, amount in (claim.consumed[i] if i < len(claim.consumed) else {}).items():
                    used.setdefault(device_id, {})[name] = used.setdefault(device_id, {}).get(name, 0) + amount
                device = self._device(device_id)
                given_for = claim.allocated_requests[i] if i < len(claim.allocated_requests) else ""
                if device is not None and device.sharing.taints:
                    for taint in untolerated(device.sharing.taints, tolerations.get(given_for, ())):
                        found.append(f"device {'/'.join(device_id)} tainted {taint} allocated to {claim.key}, "
                                     f"whose request {given_for} does not tolerate it")  # fmt: skip
        budget = {key: dict(counters) for key, counters in self.pools.counters().items()}
        for device_id, claims_there in holders.items():
            device = self._device(device_id)
            shared = device is not None and device.sharing.shared
            if len(claims_there) > 1 and not shared:
                found.append(f"device {'/'.join(device_id)} allocated to {claims_there[0]} and to {claims_there[1]}")
            if shared and device is not None:
                for name, capacity in (device.sharing.capacity or {}).items():
                    if used.get(device_id, {}).get(name, 0) > capacity.value.milli:
                        found.append(f"device {'/'.join(device_id)} shared beyond its {name}: "
                                     f"{quantity_text(used[device_id][name])} of {capacity.value.text} consumed by "
                                     f"{', '.join(sorted(claims_there))}")  # fmt: skip
            for counter_set, counters in device.sharing.consumes if device is not None else ():
                there = budget.setdefault((device_id[0], device_id[1], counter_set), {})
                for name, amount in counters:
                    there[name] = there.get(name, 0) - amount
        for (driver, pool, counter_set), left_of in sorted(budget.items()):
            over = {name: left for name, left in left_of.items() if left < 0}
            if over:
                total = self.pools.counters().get((driver, pool, counter_set), {})
                words = ", ".join(
                    f"{name}: {quantity_text(total.get(name, 0) - left)} of {quantity_text(total.get(name, 0))} "
                    "consumed"
                    for name, left in sorted(over.items())
                )
                found.append(f"counters overcommitted: {pool}/{counter_set}/{words}")
        return found


def unattached(claim_obj: Mapping[str, Any]) -> list[str]:
    """The devices of an allocated claim whose binding conditions are not all True yet (or failed)."""
    claim = _read(claim_obj)
    if claim is None:
        return []
    found = []
    for device_id, (wanted, failures) in zip(claim.allocated, claim.binding, strict=False):
        ready, failed = binding_state(claim.conditions.get(device_id, {}), wanted, failures)
        if not ready or failed is not None:
            found.append("/".join(device_id))
    return found


def _read(obj: Mapping[str, Any]) -> Claim | None:
    try:
        return read_claim(obj)
    except ClaimError:
        return None
