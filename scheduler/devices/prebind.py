"""PreBind: the devices of a permitted gang, written before any of its pods is bound, as kube-scheduler's
DynamicResources plugin writes them, and taken back when the gang does not bind.

The binder asks, in order: :meth:`PreBind.allocate` (each claim's allocation and reservation, with the
delete-protection finalizer; the claim a pod's extended resources need is made first, KEP-5004),
:meth:`PreBind.attached` (binding nothing until the drivers report every binding condition of the devices
True, or why not), and, for the claims of pods that did not bind, :meth:`PreBind.take_back`. What is chosen is
``allocation.plan``'s; this module only writes it and waits on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio
import structlog

from scheduler.clock import Clock
from scheduler.devices.allocation import DELETE_PROTECTION, ClaimWrite, plan, taken_back
from scheduler.devices.extended import asks_any, claim_body, pod_claim_status
from scheduler.devices.inventory import Devices, Release
from scheduler.devices.sharing import binding_state
from scheduler.ports.errors import Conflict, NotFound, PortError
from scheduler.ports.port import PODS, RESOURCE_CLAIMS, ClusterPort
from scheduler.ratelimit import TokenBucket
from topology.request import NodeSelectorTerm

log = structlog.get_logger("phalanx.binding")

#: How long taking back a gang's claim allocations may hold up a binding that stops (cancelled or failed).
TAKE_BACK_SECONDS = 10.0
#: A claim written, with the ``resourceVersion`` the write left it at.
Written = tuple[ClaimWrite, str]


class PreBind:
    def __init__(
        self,
        *,
        port: ClusterPort,
        devices: Devices,
        limiter: TokenBucket,
        clock: Clock,
        timeout: float,
        pod_of: Callable[[str], Mapping[str, Any] | None],
        own: Callable[[str], Mapping[str, int]],
        reaches: Callable[[tuple[NodeSelectorTerm, ...], str], bool],
    ) -> None:
        """``timeout``: how long to wait for drivers to attach devices; ``pod_of(pod)``: the pod object as last
        seen; ``own(node)``: what the node itself has (a device plugin's extended resources); ``reaches(terms,
        node)``: whether a node selector selects the node."""
        self.port = port
        self.devices = devices
        self.limiter = limiter
        self.clock = clock
        self.timeout = timeout
        self.pod_of = pod_of
        self.own = own
        self.reaches = reaches

    async def ready(self, pods: Sequence[str], claims_of: Callable[[str], Sequence[str]]) -> str | None:
        """Why the claims of ``pods`` cannot be written now, if so: a claim an earlier attempt made for a pod's
        extended resources is deleted first (a refusal when it cannot be), and a claim an earlier attempt is
        still taking back makes the gang wait until the watch shows it taken back (it passes by itself)."""
        devices = self.devices
        made = [devices.extended_of[pod] for pod in pods if pod in devices.extended_of]
        for claim in made:
            if claim not in devices.releasing and not await self.delete_made(claim):
                return f"ResourceClaim {claim}, made by an earlier attempt, is not deleted yet"
        named = {claim for pod in pods for claim in claims_of(pod)}
        stale = sorted((named | set(made)) & set(devices.releasing))
        if stale:
            return f"ResourceClaim {stale[0]} is being released by an earlier attempt"
        return None

    async def allocate(self, placed: Sequence[tuple[str, str]]) -> str | list[Written]:
        """Give every claim of the placed pods (pod, node) its devices (``allocation.plan``); the claims written,
        with their new versions, or why not (what was written is taken back then)."""
        pods = []
        devices = self.devices
        served = devices.served()
        for pod, node in placed:
            raw = self.pod_of(pod)
            if raw is None:
                continue
            if (raw.get("spec") or {}).get("resourceClaims") or asks_any(raw, served):
                pods.append((raw, node))
        if not pods:
            return []
        writes = plan(devices, pods, self.own, self.reaches)
        if isinstance(writes, str):
            return writes
        written: list[Written] = []
        for i, planned in enumerate(writes):
            write = planned
            try:
                if write.extended:  # made now (KEP-5004); from here on, taking the gang back deletes it
                    write = await self._make_claim(write)
                    written.append((write, write.version))
                version = write.version
                if write.finalizers is not None:
                    await self.limiter.take()
                    protected = {"metadata": {"finalizers": list(write.finalizers), "resourceVersion": version}}
                    stored = await self.port.patch(RESOURCE_CLAIMS, write.namespace, write.name, protected)
                    version = str((stored.get("metadata") or {}).get("resourceVersion", ""))
                await self.limiter.take()
                stored = await self.port.patch_status(
                    RESOURCE_CLAIMS,
                    write.namespace,
                    write.name,
                    {"metadata": {"resourceVersion": version}, "status": write.status},
                )
                if write.extended:  # the pod names its claim, as kube-scheduler's PreBind writes it
                    written.pop()
                    written.append((write, str((stored.get("metadata") or {}).get("resourceVersion", ""))))
                    await self.limiter.take()
                    await self.port.patch_status(PODS, write.namespace, write.pods[0].split("/", 1)[1],
                                                 {"status": pod_claim_status(write.name, write.extended)})  # fmt: skip
            except PortError as error:
                for unwritten in writes[i:]:
                    self.devices.put_back(unwritten.devices, f"{unwritten.namespace}/{unwritten.name}")
                with anyio.CancelScope(shield=True), anyio.move_on_after(TAKE_BACK_SECONDS):
                    await self.take_back(written)
                return f"allocating ResourceClaim {write.namespace}/{write.name} was refused: {error}"
            except BaseException:
                for unwritten in writes[i:]:
                    self.devices.put_back(unwritten.devices, f"{unwritten.namespace}/{unwritten.name}")
                with anyio.CancelScope(shield=True), anyio.move_on_after(TAKE_BACK_SECONDS):
                    await self.take_back(written)
                raise
            if not write.extended:
                written.append((write, str((stored.get("metadata") or {}).get("resourceVersion", ""))))
        log.info("claims allocated", pods=len(pods), claims=len(written))
        return written

    async def attached(self, claimed: list[Written], named: Iterable[str] = ()) -> str | None:
        """Wait until the drivers report every binding condition True (the claims' ``status.devices``, as the
        watch shows them) of the devices just allocated, and of those allocated before to claims the gang's pods
        name (``named``: a shared claim another gang is still waiting on, say); why not, when a failure
        condition turns True or ``binding.deviceBindingTimeoutSeconds`` passes first (None at once when no
        device waits). No pod of the gang is bound meanwhile."""
        devices = self.devices
        keys = [f"{write.namespace}/{write.name}" for write, _ in claimed if write.waits_for_driver]
        keys += sorted(
            {key for key in named if (claim := devices.claims.get(key)) is not None and claim.allocated
             and any(wanted for wanted, _ in claim.binding)} - set(keys)
        )  # fmt: skip
        if not keys:
            return None
        deadline = self.clock.monotonic() + self.timeout
        seen: set[str] = set()  # claims the watch has shown allocated (before, it may be behind the write)
        while True:
            waiting = []
            for key in keys:
                claim = devices.claims.get(key)
                if claim is None or not claim.allocated:
                    if key in seen:
                        return f"ResourceClaim {key} lost its allocation while its devices were being attached"
                    waiting.append(f"ResourceClaim {key} (its allocation)")  # the watch is behind the write
                    continue
                seen.add(key)
                for device, (wanted, failures) in zip(claim.allocated, claim.binding, strict=False):
                    ready, failed = binding_state(claim.conditions.get(device, {}), wanted, failures)
                    if failed is not None:
                        named = "/".join(device)
                        return f"device {named} of ResourceClaim {key} reports {failed}: it could not be attached"
                    if not ready:
                        waiting.append(f"{'/'.join(device)} ({', '.join(wanted)})")
            if not waiting:
                log.info("devices attached", claims=len(keys))
                return None
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return (f"the driver did not report {waiting[0]} ready within "
                        f"{self.timeout:g}s")  # fmt: skip
            changed = anyio.Event()
            devices.wakers.add(changed.set)
            try:
                with anyio.move_on_after(min(left, 1.0)):
                    await changed.wait()
            finally:
                devices.wakers.discard(changed.set)

    def as_known(self, claimed: list[Written]) -> list[Written]:
        """The writes with the versions the watch shows now where it shows them written (a driver reporting its
        devices' conditions changed the claims since); the written version where the watch is behind."""
        known = self.devices.claims
        found = []
        for write, version in claimed:
            claim = known.get(f"{write.namespace}/{write.name}")
            seen = claim is not None and sorted(claim.allocated) == sorted(write.devices) and bool(write.devices)
            found.append((write, claim.version if seen and claim is not None else version))
        return found

    async def _make_claim(self, write: ClaimWrite) -> ClaimWrite:
        """Make the claim of a pod's extended resources (KEP-5004), with kube-scheduler's finalizer on: the
        write with its name and version."""
        pod = self.pod_of(write.pods[0]) or {"metadata": {"name": write.pods[0].split("/", 1)[1]}}
        await self.limiter.take()
        made = await self.port.create(RESOURCE_CLAIMS, write.namespace, claim_body(pod, write.extended,
                                                                                   DELETE_PROTECTION))  # fmt: skip
        metadata = made.get("metadata") or {}
        named = replace(write, name=str(metadata.get("name", "")), version=str(metadata.get("resourceVersion", "")),
                        finalizers=None)  # fmt: skip
        # Held under its name from now on: the watch's DELETED of it lets them go, whatever happens here.
        self.devices.put_back(write.devices, f"{write.namespace}/{write.name}")
        self.devices.set_aside(f"{named.namespace}/{named.name}", named.devices, named.consumed)
        return named

    async def _read(self, write: ClaimWrite) -> Mapping[str, Any] | None:
        try:
            return await self.port.get(RESOURCE_CLAIMS, write.namespace, write.name)
        except PortError:
            return None

    async def delete_made(self, key: str) -> bool:
        """Delete a claim made for a pod's extended resources, its finalizer taken off first (as kube-scheduler's
        Unreserve does); whether it is gone. Until the watch shows it gone, no PreBind uses what is known of it
        (``Devices.releasing``); one that cannot be deleted now is deleted at the pod's next attempt."""
        namespace, name = key.split("/", 1)
        known = self.devices.claims.get(key)
        kept = [finalizer for finalizer in (known.finalizers if known else ()) if finalizer != DELETE_PROTECTION]
        for attempt in range(3):
            try:
                await self.limiter.take()
                await self.port.patch(RESOURCE_CLAIMS, namespace, name, {"metadata": {"finalizers": kept or None}})
                await self.limiter.take()
                await self.port.delete(RESOURCE_CLAIMS, namespace, name)
            except NotFound:
                pass
            except PortError as error:
                log.warning("claim made for extended resources not deleted yet", claim=key, error=str(error)[:200])
                await anyio.sleep(0.2 * (attempt + 1))
                continue
            if key in self.devices.claims:
                self.devices.releasing[key] = Release(True, set())
            return True
        return False

    async def take_back(self, written: list[Written]) -> None:
        """Release the allocations this gang's PreBind wrote (or the reservations it added), so that no claim
        stays allocated for a pod that is not bound. A claim changed since (its version differs) is read again:
        one whose allocation (or reservations) is still this write's (a driver reported its devices meanwhile)
        is taken back at its new version; one that is someone else's now is left alone. Until the watch shows a
        claim taken back, no PreBind trusts what is known of it (``Devices.releasing``): it would still look
        allocated for the pod."""
        devices = self.devices
        for write, _ in written:
            if write.extended:
                continue  # deleted, not taken back: nothing of it stays to be seen
            before = {str(ref.get("uid", "")) for ref in write.reserved_before or ()}
            added = {str(ref.get("uid", "")) for ref in write.status.get("reservedFor") or ()} - before
            devices.releasing[f"{write.namespace}/{write.name}"] = Release(write.reserved_before is None, added)
        for write, written_version in written:
            key = f"{write.namespace}/{write.name}"
            if write.extended:
                if await self.delete_made(key):
                    devices.put_back(write.devices, key)  # free again once the watch shows the claim gone
                continue
            taken, version = False, written_version
            for attempt in range(4):
                try:
                    stored = await self.port.patch_status(
                        RESOURCE_CLAIMS, write.namespace, write.name, taken_back(write, version)
                    )
                    taken = True
                    if write.finalizers is not None:  # the finalizer was ours: it goes with the allocation
                        kept = [name for name in write.finalizers if name != DELETE_PROTECTION]
                        now = str((stored.get("metadata") or {}).get("resourceVersion", ""))
                        unprotected = {"metadata": {"finalizers": kept or None, "resourceVersion": now}}
                        await self.port.patch(RESOURCE_CLAIMS, write.namespace, write.name, unprotected)
                    break
                except NotFound:
                    break
                except Conflict:
                    if taken:
                        break
                    current = await self._read(write)
                    if current is None or not _still_ours(write, current):
                        break
                    version = str((current.get("metadata") or {}).get("resourceVersion", ""))
                except PortError as error:
                    if taken:
                        break  # only our finalizer is left on the claim: it does not keep it from being allocated
                    log.warning("claim allocation not taken back yet", claim=write.name, error=str(error)[:200])
                    await anyio.sleep(0.2 * (attempt + 1))
            if taken:
                devices.put_back(write.devices, key)  # free again once the watch shows the claim without them
            else:  # still allocated as written: what is known of it will be true once the watch shows it
                devices.releasing.pop(key, None)


def _still_ours(write: ClaimWrite, claim: Mapping[str, Any]) -> bool:
    """Whether ``claim`` (as the server has it now) still holds what ``write`` gave it: its allocation of the same
    devices, or the reservations it added."""
    status = claim.get("status") or {}
    if write.reserved_before is None:
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        given = tuple((str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))) for r in results)
        return bool(given) and sorted(given) == sorted(write.devices)
    before = {str(ref.get("uid", "")) for ref in write.reserved_before}
    added = {str(ref.get("uid", "")) for ref in write.status.get("reservedFor") or ()} - before
    return bool(added) and added <= {str(ref.get("uid", "")) for ref in status.get("reservedFor") or ()}
