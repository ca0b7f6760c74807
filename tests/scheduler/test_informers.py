"""What an informer keeps of the objects a real server sends."""

from collections.abc import AsyncGenerator
from typing import Any

import anyio

from scheduler.clock import ManualClock
from scheduler.informers import Informer
from scheduler.ports.port import PODS, ApiResource, Change, Listing
from scheduler.ports.sim import Store
from scheduler.ports.sim.adapter import SimCluster
from scheduler.state import ClusterState
from tests.scheduler.support import FAST, eventually, gpu_pod

MANAGED = [{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {"f:containers": {}}}}]  # fmt: skip


class _RealServer(SimCluster):
    """Objects as kube-apiserver serves them: with the managedFields the emulator leaves out."""

    async def list(
        self, resource: ApiResource, *, limit: int | None = None, continue_token: str | None = None
    ) -> Listing:
        listing = await super().list(resource, limit=limit, continue_token=continue_token)
        items = [{**item, "metadata": {**item["metadata"], "managedFields": MANAGED}} for item in listing.items]
        return Listing(items, listing.resource_version, listing.continue_token)

    async def watch(
        self, resource: ApiResource, resource_version: str, *, timeout: float
    ) -> AsyncGenerator[Change, None]:
        async for change in super().watch(resource, resource_version, timeout=timeout):
            obj = change.object
            if "metadata" in obj:
                obj = {**obj, "metadata": {**obj["metadata"], "managedFields": MANAGED}}
            yield Change(change.type, obj)


async def test_pods_are_kept_without_their_managed_fields_whether_listed_or_watched() -> None:
    store = Store()
    store.ensure_namespace("team")
    pods = store.resource("v1", "Pod")
    store.create(pods, "team", gpu_pod("listed"))
    port = _RealServer(store)
    state = ClusterState(FAST, ManualClock())
    informer = Informer(port=port, resource=PODS, state=state, settings=FAST.informers, poke=lambda: None)

    def kept(name: str) -> dict[str, Any] | None:
        info = state.index.pod(f"team/{name}")
        return None if info is None else dict(info.raw["metadata"])

    async with anyio.create_task_group() as group:
        await group.start(informer.run)
        store.create(pods, "team", gpu_pod("watched"))
        await eventually(lambda: kept("watched"), timeout=10, what="the watched pod")
        group.cancel_scope.cancel()
    for name in ("listed", "watched"):
        metadata = kept(name)
        assert metadata is not None and metadata["name"] == name and "managedFields" not in metadata
