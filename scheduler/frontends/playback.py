"""``phalanx simulate --serve``: the live view's page over a simulated run's timeline.

The run keeps a picture of the cluster (``picture.py``) at every moment it stopped at
(``Simulation.record_frames``); this serves them with the page Phalanx serves live (``scheduler/web``),
which sees ``/api/timeline`` and shows a slider and a play button instead of polling. Read-only and safe
the same way (``health.safety``); it serves until Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
from aiohttp import web

from scheduler.health import ASSETS, SERVED_UNDER_VIEW, assets, safety, serve_app


def playback_app(frames: Sequence[tuple[float, bytes]], *, title: str, cut: bool) -> web.Application:
    """The page, its files, ``/api/timeline`` (each frame's moment, in simulated seconds from the start)
    and ``/api/cluster?frame=N`` (that moment's picture; the last one without ``frame``)."""
    files = assets()
    timeline = orjson.dumps({"title": title, "at": [at for at, _ in frames], "cut": cut})

    async def page(request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        if name not in ASSETS or ("name" in request.match_info and name not in SERVED_UNDER_VIEW):
            raise web.HTTPNotFound()
        return web.Response(body=files[name], content_type=ASSETS[name], charset="utf-8")

    async def listing(_: web.Request) -> web.Response:
        return web.Response(body=timeline, content_type="application/json")

    async def cluster(request: web.Request) -> web.Response:
        asked = request.query.get("frame", str(len(frames) - 1))
        if not (asked.isascii() and asked.isdigit() and len(asked) < 10) or int(asked) >= len(frames):
            raise web.HTTPNotFound(text=f"no frame {asked}: there are {len(frames)}\n")
        return web.Response(body=frames[int(asked)][1], content_type="application/json")

    async def no_gang(_: web.Request) -> web.Response:
        raise web.HTTPNotFound(text="a recorded run has no gang pages\n")

    app = web.Application(middlewares=[safety])
    app.router.add_get("/", page)
    app.router.add_get("/view/{name}", page)
    app.router.add_get("/api/timeline", listing)
    app.router.add_get("/api/cluster", cluster)
    app.router.add_get("/api/gang", no_gang)
    return app


async def serve_playback(app: web.Application, address: str, started: Callable[[str], None]) -> None:
    """Serve ``app`` on ``address`` (HOST:PORT; port 0 picks one) until cancelled; ``started`` gets the URL."""
    await serve_app(app, address, lambda url: started(url + "/"), any_host="127.0.0.1")
