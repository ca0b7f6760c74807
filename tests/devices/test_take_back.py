"""The binder gives a gang back only once the claims of its pods that did not bind are taken back, and no
PreBind trusts such a claim until the watch shows it taken back (a port that holds the take-back open)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from scheduler.binding import Binder
from scheduler.loop import NullRecorder
from scheduler.metrics import Metrics
from scheduler.ports.errors import NotFound
from scheduler.ports.port import RESOURCE_CLAIMS, ApiResource, Binding, Change, Outcomes
from scheduler.ratelimit import TokenBucket
from scheduler.settings import BindingSettings
from tests.devices.support import claim
from tests.devices.test_placement import dra_loop, sharing


class HeldPort:
    """Writes claims at once, except a take-back, which waits for ``go``; every bind finds its pod gone."""

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.taking_back = anyio.Event()

    async def patch(self, resource: ApiResource, namespace: str, name: str, body: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "2"}}

    async def patch_status(self, resource: ApiResource, namespace: str, name: str, body: Any) -> dict[str, Any]:
        if body["status"].get("allocation", "") is None:  # the take-back clears it
            self.taking_back.set()
            await self.go.wait()
        return {"metadata": {"resourceVersion": "3"}}

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise NotFound(f"pods {name} not found")

    async def bind_all(self, bindings: Sequence[Binding]) -> Outcomes:
        return [NotFound(f"pods {binding.name} not found") for binding in bindings]


async def test_a_gang_whose_bind_failed_is_given_back_only_after_its_claims_are_taken_back() -> None:
    loop = dra_loop(device_nodes=("b0-r0-n0",))
    loop.state.apply(RESOURCE_CLAIMS, Change("ADDED", claim("pair-gpus", 8)))
    for name in ("left", "right"):
        sharing(loop, name, "pair-gpus", ("pair", 2))
    loop.loop.sync()
    assert loop.loop.step()
    (job,) = loop.binder.jobs
    port, given_back = HeldPort(), []

    def place_again(gang: Any, why: str) -> None:
        given_back.append(why)
        loop.loop.place_again(gang, why)

    binder = Binder(
        port=port,  # type: ignore[arg-type]
        state=loop.state,
        settings=BindingSettings(),
        clock=loop.clock,
        limiter=TokenBucket(1000, 1000, loop.clock),
        reporter=NullRecorder(),  # type: ignore[arg-type]
        metrics=Metrics(),
        place_again=place_again,
        back_off=lambda gang, why: given_back.append(why),
    )
    async with anyio.create_task_group() as group:
        group.start_soon(binder._bind_gang_steps, job)
        await port.taking_back.wait()
        assert not given_back  # not while the claim is still allocated on the server
        assert "ml/pair-gpus" in loop.state.devices.releasing
        port.go.set()
    assert given_back == ["binding ml/left was gone"]
    # The watch has not shown the take-back yet: the next attempt does not trust the claim as known here.
    loop.loop.sync()
    assert loop.loop.step()
    (again,) = loop.binder.jobs[1:]
    await binder._bind_gang_steps(again)
    assert given_back[-1] == "ResourceClaim ml/pair-gpus is being released by an earlier attempt"
