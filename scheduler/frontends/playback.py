"""``phalanx simulate --serve``: the live view's page over a simulated run's timeline.

The run keeps a picture of the cluster (``picture.py``) at every moment it stopped at
(``Simulation.record_frames``); this serves them with the page Phalanx serves live (``scheduler/web``),
which sees ``/api/timeline`` and shows a slider and a play button instead of polling. Read-only and safe
the same way (``health.SAFETY``); it serves until Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from scheduler.health import SAFETY, page
from scheduler.httpd import Handler, Refused, Request, Response, serve


def playback_routes(frames: Sequence[tuple[float, bytes]], *, title: str, cut: bool) -> dict[str, Handler]:
    """The page, its files, ``/api/timeline`` (each frame's moment, in simulated seconds from the start)
    and ``/api/cluster?frame=N`` (that moment's picture; the last one without ``frame``)."""
    timeline = orjson.dumps({"title": title, "at": [at for at, _ in frames], "cut": cut})

    async def shown(request: Request) -> Response:
        return page(request)

    async def listing(_: Request) -> Response:
        return Response(timeline, content_type="application/json")

    async def cluster(request: Request) -> Response:
        asked = request.query.get("frame", str(len(frames) - 1))
        if not (asked.isascii() and asked.isdigit() and len(asked) < 10) or int(asked) >= len(frames):
            raise Refused(404, f"no frame {asked}: there are {len(frames)}\n")
        return Response(frames[int(asked)][1], content_type="application/json")

    async def no_gang(_: Request) -> Response:
        raise Refused(404, "a recorded run has no gang pages\n")

    return {"/": shown, "/view/": shown, "/api/timeline": listing, "/api/cluster": cluster, "/api/gang": no_gang}


async def serve_playback(routes: dict[str, Handler], address: str, started: Callable[[str], None]) -> None:
    """Serve ``routes`` on ``address`` (HOST:PORT; port 0 picks one) until cancelled; ``started`` gets the URL."""
    await serve(routes, address, lambda url: started(url + "/"), any_host="127.0.0.1", headers=SAFETY)
