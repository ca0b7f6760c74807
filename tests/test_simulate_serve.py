"""``phalanx simulate --serve``: the live view's page over a run's timeline, a picture per moment the run
stopped at, played back from the same page; and what it answers when the address is wrong."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import yaml

from scheduler.frontends.playback import playback_routes, serve_playback
from tests.scheduler.support import listening
from tests.sim.workloads import RUN_SECONDS, gang, job

ROOT = Path(__file__).resolve().parent.parent
FULL = "blocks=1,racks=1,nodes=4,gpus=8"


def workload(tmp_path: Path) -> list[str]:
    """A Job filling the cluster for an hour, and a gang arriving ten minutes in: it binds when the Job ends."""
    fill = tmp_path / "fill.yaml"
    fill.write_text(yaml.safe_dump(job("fill", 4, 8, namespace="batch", annotations={RUN_SECONDS: "3600"})))
    late = tmp_path / "late.yaml"
    late.write_text(yaml.safe_dump(job("late", 2, 8, annotations={**gang("late", 2), RUN_SECONDS: "600"})))
    return ["--workload", str(fill), "--workload", f"{late}@10m"]


async def test_simulate_serves_the_run_s_timeline_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "scheduler.frontends.cli", "simulate", "--cluster", FULL, *workload(tmp_path),
               "--serve", "127.0.0.1:0"]  # fmt: skip
    process = await anyio.open_process(command, cwd=ROOT)
    try:
        assert process.stdout is not None
        said = b""
        with anyio.fail_after(120):
            while b"Ctrl-C stops serving it" not in said:
                said += await process.stdout.receive()
        url = said.decode().split("open ", 1)[1].split(" ", 1)[0]
        async with aiohttp.ClientSession(base_url=url) as http:
            async with http.get("/api/timeline") as response:
                timeline = await response.json()
            moments = [round(at) for at in timeline["at"]]
            assert moments == sorted(moments) and {0, 600, 3600, 4200} <= set(moments)
            frames = {}
            for at in (600, 3600):
                async with http.get("/api/cluster", params={"frame": str(moments.index(at))}) as response:
                    frames[at] = await response.json()
            late = {gang["key"]: gang for gang in frames[600]["gangs"]}["pfn:ml/late"]
            assert late["state"] in ("pending", "backing off") and "Insufficient nvidia.com/gpu" in late["reason"]
            assert frames[600]["totals"]["free"] == 0
            late = {gang["key"]: gang for gang in frames[3600]["gangs"]}["pfn:ml/late"]
            assert late["state"] in ("binding", "running")
            async with http.get("/") as response:
                assert 'id="timeline"' in await response.text()
    finally:
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(60):
            code = await process.wait()
        await process.aclose()
    assert code == 0


def test_simulate_refuses_a_bad_serve_address_in_one_line(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        usage = "give it as HOST:PORT, e.g. 127.0.0.1:8080 (a port up to 65535)"
        cases = {
            "nowhere": (2, f"phalanx: --serve nowhere: {usage}\n"),
            f"127.0.0.1:{port}": (1, f"phalanx: --serve 127.0.0.1:{port}: Address already in use\n"),
        }
        for address, expected in cases.items():
            result = subprocess.run(
                [sys.executable, "-m", "scheduler.frontends.cli", "simulate", "--cluster", FULL, "--serve", address],
                cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert (result.returncode, result.stderr) == expected  # refused before the run: nothing else said
            assert result.stdout == ""
    finally:
        taken.close()


@asynccontextmanager
async def played(frames: list[tuple[float, bytes]]) -> AsyncIterator[aiohttp.ClientSession]:
    """A client of the recorded run's view, served on loopback."""
    routes = playback_routes(frames, title="t", cut=False)
    async with (
        listening(lambda started: serve_playback(routes, "127.0.0.1:0", started)) as url,
        aiohttp.ClientSession(base_url=url.rstrip("/")) as client,
    ):
        yield client


async def test_the_recorded_run_is_served_read_only_and_not_frameable() -> None:
    frames = [(0.0, orjson.dumps({"at": 0})), (60.0, orjson.dumps({"at": 60}))]
    async with played(frames) as client:
        answers: list[tuple[str, int, Any]] = []
        for path in ("/", "/view/view.js", "/api/timeline", "/api/cluster?frame=1", "/api/cluster"):
            response = await client.get(path)
            answers.append((path, response.status, response.headers["X-Frame-Options"]))
            assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
            assert (await client.post(path)).status == 405
        assert all(status == 200 and frame == "DENY" for _, status, frame in answers)
        assert json.loads(await (await client.get("/api/cluster")).text()) == {"at": 60}  # the last, unasked
        assert json.loads(await (await client.get("/api/timeline")).text())["at"] == [0.0, 60.0]
        for missing in ("/api/cluster?frame=2", "/api/cluster?frame=x", "/api/gang?key=a", "/view/other.js"):
            assert (await client.get(missing)).status == 404, missing
