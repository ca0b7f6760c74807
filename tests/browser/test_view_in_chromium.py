"""The live view in a real browser: headless Chromium (Debian's package) loads the page from a Phalanx on the
emulated cluster, with gangs in every state, and is asked what a person would see: each gang's cells on its
nodes in its colour, the reason its pods' condition gives, and the page updating itself when a gang binds.
It is driven over the DevTools protocol (a WebSocket, through aiohttp), and leaves a screenshot
(``PHALANX_VIEW_SCREENSHOT=docs/view.png`` keeps it where the README shows it)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from scheduler.frontends.playback import playback_routes, serve_playback
from scheduler.ports.sim.builders import ClusterShape
from scheduler.settings import ServerSettings, Settings
from scheduler.simulation.driver import Simulation
from scripts.devtools import Browser, chromium
from tests.scheduler.support import FAST, cluster, eventually, gpu_pod, pfn, phalanx
from tests.sim.workloads import LEVELS, RUN_SECONDS, gang, job

OFTEN = replace(FAST, server=ServerSettings(address="127.0.0.1:0", view_interval_seconds=0.1))
RACK = "example.com/rack"


def gangs_in_every_state(where: Any) -> None:
    """Running (train), waiting for room (huge: nine 8-GPU pods in a rack of four nodes), holding room for a
    member not created yet (partial), invalid (bad), and another scheduler's pod."""
    for i in range(2):
        where.create(gpu_pod(f"train-{i}", annotations=pfn("train", 2)))
    where.create(gpu_pod("other", gpus=4, scheduler="default-scheduler", nodeName="b0-r1-n3"))
    huge = {**pfn("huge", 9), "scheduling.phalanx.dev/topology-required": RACK}
    for i in range(9):
        where.create(gpu_pod(f"huge-{i}", annotations=huge))
    for i in range(2):
        where.create(gpu_pod(f"partial-{i}", gpus=2, annotations=pfn("partial", 3, timeout=600)))
    where.create(gpu_pod("bad-0", annotations={**pfn("bad", 2), "gang-scheduling.preferred.jp/gang-size": "two"}))


async def test_the_page_shows_gangs_on_their_nodes_their_reasons_and_updates_when_a_gang_binds(
    tmp_path: Path,
) -> None:
    async with cluster() as where, phalanx(where, OFTEN) as app:
        gangs_in_every_state(where)
        await eventually(lambda: {"team/train-0", "team/train-1"} <= where.bound().keys(), what="train bound")
        await eventually(lambda: where.condition("team/huge-0"), what="huge told why it waits")
        assert app.health is not None
        async with Browser.open(chromium(), f"{app.health.url}/", tmp_path) as page:
            states = await page.wait_for(
                """(() => { const rows = [...document.querySelectorAll('#gangs tbody tr')];
                   const states = Object.fromEntries(rows.map(r => [r.dataset.gang, r.dataset.state]));
                   return states['pfn:team/train'] === 'running' && states['pfn:team/huge'] && states; })()""",
                what="the gangs' table",
            )
            assert states["pfn:team/partial"] == "holding room"
            assert states["pfn:team/bad"] == "invalid"
            assert states["pfn:team/huge"] in ("backing off", "pending")
            # The words of the pods' condition, as a person reads them (once both say the latest attempt's).
            why = "document.querySelector('tr[data-gang=\"pfn:team/huge\"] td.why').textContent"
            with anyio.fail_after(30):
                while await page.evaluate(why) != (where.condition("team/huge-0") or {}).get("message"):
                    await anyio.sleep(0.1)
            assert (await page.evaluate(why)).endswith("each node holds at most 1 (nvidia.com/gpu 8 of 8).")
            for pod in ("team/train-0", "team/train-1"):
                assert await cell_colour(page, where.bound()[pod], 7) == await gang_colour(page, "pfn:team/train")
            other = await page.evaluate("window.phalanxView.colourOf(1)")
            assert await cell_colour(page, "b0-r1-n3", 7) == await css_rgb(page, other)  # another scheduler's GPUs

            for i in range(2):  # a gang arrives and binds while the page is open: it updates by itself
                where.create(gpu_pod(f"late-{i}", annotations=pfn("late", 2)))
            await eventually(lambda: {"team/late-0", "team/late-1"} <= where.bound().keys(), what="late bound")
            await page.wait_for(
                "document.querySelector('tr[data-gang=\"pfn:team/late\"]')?.dataset.state === 'running'",
                what="the page showing the late gang running",
            )
            late = await gang_colour(page, "pfn:team/late")
            assert await cell_colour(page, where.bound()["team/late-0"], 0) == late
            changes = await page.evaluate("[...document.querySelectorAll('#changes li')].map(li => li.textContent)")
            assert any("pfn:team/late done" in change for change in changes)

            shot = tmp_path / "view.png"
            shot.write_bytes(await page.screenshot())
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
            keep = os.environ.get("PHALANX_VIEW_SCREENSHOT")
            if keep:
                shutil.copyfile(shot, keep)


async def gang_colour(page: Any, gang: str) -> list[int]:
    code = await page.evaluate(
        f"2 + window.phalanxView.picture().owners.indexOf({json.dumps(gang)})"
    )
    return await css_rgb(page, await page.evaluate(f"window.phalanxView.colourOf({code})"))


async def cell_colour(page: Any, node: str, cell: int) -> list[int]:
    found = await page.evaluate(f"window.phalanxView.cellPixel({json.dumps(node)}, {cell})")
    assert found is not None, f"{node} is not drawn"
    return list(found)


async def css_rgb(page: Any, colour: str) -> list[int]:
    """What a CSS colour looks like painted: one pixel of it on a canvas, read back."""
    expression = f"""(() => {{ const c = document.createElement('canvas'); c.width = c.height = 1;
        const x = c.getContext('2d'); x.fillStyle = {json.dumps(colour)}; x.fillRect(0, 0, 1, 1);
        return Array.from(x.getImageData(0, 0, 1, 1).data.slice(0, 3)); }})()"""
    return list(await page.evaluate(expression))



async def test_a_recorded_run_plays_back_with_a_slider_over_its_moments(tmp_path: Path) -> None:
    """``simulate --serve``: a Job fills the cluster for an hour, a gang arrives ten minutes in and binds when
    the Job ends; the slider shows each moment as it was."""
    simulation = Simulation(Settings(levels=LEVELS))
    simulation.record_frames()
    simulation.add_nodes(ClusterShape.parse("blocks=1,racks=1,nodes=4,gpus=8").node_manifests())
    simulation.add_objects([job("fill", 4, 8, namespace="batch", annotations={RUN_SECONDS: "3600"})])
    simulation.add_objects([job("late", 2, 8, annotations={**gang("late", 2), RUN_SECONDS: "600"})], at=600.0)
    await simulation.run(timeout=120)
    assert simulation.frames is not None
    moments = [round(at) for at, _ in simulation.frames]
    urls: list[str] = []
    async with anyio.create_task_group() as group:
        app = playback_routes(simulation.frames, title="a test", cut=False)
        group.start_soon(serve_playback, app, "127.0.0.1:0", urls.append)
        await eventually(lambda: urls, what="the playback server")
        async with Browser.open(chromium(), urls[0], tmp_path) as page:
            label = await page.wait_for("document.getElementById('moment-label')?.textContent", what="the slider")
            assert label.endswith(f"(moment {len(moments)} of {len(moments)})")
            assert await page.evaluate("document.getElementById('timeline').hidden") is False
            state = "document.querySelector('tr[data-gang=\"pfn:ml/late\"]')?.dataset.state"
            arrived = moments.index(600)  # the gang's arrival; the Job's end is the first moment an hour in
            ended = next(i for i, at in enumerate(moments) if at >= 3600)
            await page.evaluate(f"window.phalanxView.moment({arrived})")
            assert await page.evaluate(state) in ("pending", "backing off")
            assert await page.evaluate("document.getElementById('moment-label').textContent") == (
                f"10m 00s into the run (moment {arrived + 1} of {len(moments)})"
            )
            await page.evaluate(f"window.phalanxView.moment({ended})")
            assert await page.evaluate(state) in ("binding", "running")
        group.cancel_scope.cancel()
