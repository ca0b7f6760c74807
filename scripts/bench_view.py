"""What the live view costs: one picture of the cluster (``scheduler/picture.py``) on clusters of 2,560 and
10,240 nodes of 8 GPUs, 95% full of one-GPU pods, half of them Phalanx's gangs of 8 (the clusters of the
scale benchmarks, ``scalecluster.py``), fed to the scheduler's own state as watch events.

For each size: the milliseconds one picture takes on the event loop (median of the runs), its JSON's size,
and that size gzipped as the server sends it to a browser. A picture is taken at most every
``server.viewIntervalSeconds`` (2) and never so often that pictures take more than 5% of the loop's time:
the last column is how often that lets one be taken. With ``--browser``, the largest picture is also drawn
by the page in headless Chromium (Debian's package): the milliseconds to draw every rack from nothing, and
to fetch and redraw the same picture (racks whose cells did not change keep their canvas).

    python scripts/bench_view.py [--quick] [--repeat N] [--browser] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson
import scalecluster
from benchinfo import machine

from scheduler.clock import ManualClock
from scheduler.loop import NullRecorder, scheduling_loop
from scheduler.metrics import Metrics
from scheduler.picture import MOST_SHARE, Pictures
from scheduler.ports.port import NODES, PODS, Change
from scheduler.settings import Settings
from scheduler.state import ClusterState

SIZES = (2_560, 10_240)
LEVELS = (scalecluster.BLOCK, scalecluster.RACK, "kubernetes.io/hostname")


class _Reasons:
    def why_pending(self, pod: str) -> tuple[str, str] | None:
        return None


def measure(n_nodes: int, repeat: int, pictures_taken: list[bytes] | None = None) -> dict[str, float]:
    settings = Settings(levels=LEVELS)
    clock = ManualClock()
    state = ClusterState(settings, clock)
    nodes, pods = scalecluster.objects(n_nodes)
    for node in nodes:
        state.apply(NODES, Change("ADDED", node))
    count = 0
    for pod in pods:
        state.apply(PODS, Change("ADDED", pod))
        count += 1
    state.index.take_changed()
    loop = scheduling_loop(
        settings=settings, state=state, clock=clock, queue_rng=random.Random(0), permit_rng=random.Random(1),
        binder=_Sink(), reporter=NullRecorder(), metrics=Metrics(),
    )  # fmt: skip
    pictures = Pictures(
        state=state, queue=loop.queue, stages=loop.stages, reasons=_Reasons(), levels=LEVELS, clock=clock,
        interval_seconds=settings.server.view_interval_seconds, leading=lambda: True,
    )  # fmt: skip
    times, body = [], b""
    for _ in range(repeat):
        started = time.perf_counter()
        body = orjson.dumps(pictures.take())
        times.append(time.perf_counter() - started)
    took = statistics.median(times)
    if pictures_taken is not None:
        pictures_taken.append(body)
    return {
        "nodes": n_nodes,
        "pods": count,
        "picture_ms": took * 1000,
        "json_kb": len(body) / 1024,
        "gzip_kb": len(gzip.compress(body, 6)) / 1024,
        "every_s": max(settings.server.view_interval_seconds, took / MOST_SHARE),
    }


async def drawn(body: bytes) -> dict[str, float]:
    """The page drawing ``body`` in headless Chromium, served as a one-moment recorded run."""
    import tempfile  # noqa: PLC0415

    import anyio  # noqa: PLC0415
    from devtools import Browser, chromium  # noqa: PLC0415

    from scheduler.frontends.playback import playback_routes, serve_playback  # noqa: PLC0415

    urls: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(
            serve_playback, playback_routes([(0.0, body)], title="bench", cut=False), "127.0.0.1:0", urls.append
        )
        while not urls:
            await anyio.sleep(0.05)
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:  # (Chromium's children linger)
            async with Browser.open(chromium(), urls[0], Path(scratch)) as page:
                await page.wait_for("document.querySelectorAll('canvas').length > 0", what="the map", timeout=120)
                timing = (
                    "(async () => { const t = performance.now(); await window.phalanxView.moment(0); "
                    "return performance.now() - t; })()"
                )
                await page.evaluate("window.phalanxView.forget()")
                fresh = await page.evaluate(timing)
                again = await page.evaluate(timing)
        group.cancel_scope.cancel()
    return {"draw_ms": fresh, "redraw_ms": again}


class _Sink:
    def submit(self, job: object) -> None:
        pass

    def idle(self) -> bool:
        return True

    def starting(self) -> bool:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one cluster of 512 nodes, one picture (seconds)")
    parser.add_argument("--repeat", type=int, default=None, help="pictures taken per size (default 5, quick 1)")
    parser.add_argument("--browser", action="store_true", help="also draw the largest picture in headless Chromium")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 5)
    log = sys.stderr if args.json else sys.stdout
    print(f"command: scripts/bench_view.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip(), file=log)
    print(f"machine: {machine()}", file=log)
    print(f"pictures per size: {args.repeat} (figures are medians)\n", file=log)
    bodies: list[bytes] = []
    result: dict[str, dict[str, float]] = {
        str(size): measure(size, args.repeat, bodies) for size in ((512,) if args.quick else SIZES)
    }
    if args.browser:
        import anyio  # noqa: PLC0415

        result["browser"] = anyio.run(drawn, bodies[-1])
    if args.json:
        print(json.dumps({**result, "machine": machine()}, indent=2))
        return 0
    print(f"{'nodes':>6} {'pods':>7} {'picture ms':>11} {'JSON KB':>8} {'gzip KB':>8} {'taken every s':>14}")
    for name, row in result.items():
        if name == "browser":
            print(f"\nin Chromium: {row['draw_ms']:.0f} ms to draw every rack, ", end="")
            print(f"{row['redraw_ms']:.0f} ms to fetch and redraw")
            continue
        print(f"{row['nodes']:>6.0f} {row['pods']:>7.0f} {row['picture_ms']:>11.1f} {row['json_kb']:>8.0f} "
              f"{row['gzip_kb']:>8.0f} {row['every_s']:>14.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
