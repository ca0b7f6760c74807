"""The live view as an operator reaches it (``kubectl port-forward`` to the server's address): the picture
of the cluster at ``/api/cluster``, a gang's page at ``/api/gang``, the page itself, taken at a bounded rate,
read-only, not frameable, and showing nothing of a pod but what it requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import pytest

from scheduler.app import Phalanx
from scheduler.settings import ServerSettings, SettingsError, load_settings, parse_settings
from tests.scheduler.support import FAST, Cluster, cluster, create_manifests, eventually, gpu_pod, pfn, phalanx

RACK = "example.com/rack"
ROOT = Path(__file__).resolve().parents[2]
#: A picture may be taken at every ask: the tests wait on what it shows, not on the interval.
OFTEN = replace(FAST, server=ServerSettings(address="127.0.0.1:0", view_interval_seconds=0.01))


@asynccontextmanager
async def viewer(app: Phalanx) -> AsyncIterator[aiohttp.ClientSession]:
    assert app.health is not None
    async with aiohttp.ClientSession(base_url=app.health.url) as http:
        yield http


async def picture(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get("/api/cluster") as response:
        assert response.status == 200 and response.content_type == "application/json"
        found: dict[str, Any] = await response.json()
        return found


def cells_of(shown: dict[str, Any], node: str) -> list[int]:
    return next(n["cells"] for domain in shown["domains"] for n in domain["nodes"] if n["name"] == node)


def gang_in(shown: dict[str, Any], key: str) -> dict[str, Any] | None:
    return next((gang for gang in shown["gangs"] if gang["key"] == key), None)


def scene(where: Cluster) -> None:
    """A gang of two 8-GPU pods (it binds), another scheduler's 4-GPU pod, and a gang that never fits (nine
    8-GPU pods in one rack of four nodes)."""
    for i in range(2):
        where.create(gpu_pod(f"train-{i}", annotations=pfn("train", 2)))
    where.create(gpu_pod("other", gpus=4, scheduler="default-scheduler", nodeName="b0-r1-n3"))
    huge = {**pfn("huge", 9), "scheduling.phalanx.dev/topology-required": RACK}
    for i in range(9):
        where.create(gpu_pod(f"huge-{i}", annotations=huge, env=[{"name": "TOKEN", "value": "hunter2"}]))


async def test_the_picture_shows_each_gang_on_its_nodes_others_pods_free_room_and_why_a_gang_waits() -> None:
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        scene(where)
        await eventually(lambda: {"team/train-0", "team/train-1"} <= where.bound().keys(), what="train bound")
        await eventually(lambda: where.condition("team/huge-0"), what="huge told why it waits")

        async def shown_settled() -> dict[str, Any]:
            """Train shown running, and huge's reason the one its pod's condition says (written by then)."""
            shown = await picture(http)
            huge = gang_in(shown, "pfn:team/huge")
            train = gang_in(shown, "pfn:team/train")
            condition = where.condition("team/huge-0") or {}
            said = huge is not None and huge["reason"] == condition.get("message")
            return shown if said and train and train["state"] == "running" else {}

        shown = await eventually_async(shown_settled)
        train = 2 + shown["owners"].index("pfn:team/train")
        for pod in ("team/train-0", "team/train-1"):
            assert cells_of(shown, where.bound()[pod]) == [train] * 8
        assert sorted(cells_of(shown, "b0-r1-n3")) == [0] * 4 + [1] * 4  # another scheduler's 4 GPUs, 4 free
        assert shown["totals"] == {"nodes": 8, "cells": 64, "free": 64 - 16 - 4, "gangs": 2, "waiting": 1}
        huge = gang_in(shown, "pfn:team/huge")
        assert huge is not None and "Gang team/huge needs 9 pods" in huge["reason"]  # as its condition says
        assert (huge["bound"], huge["pods"], huge["minimum"]) == (0, 9, 9)
        assert [d["name"] for d in shown["domains"]] == ["block b0 / rack b0-r0", "block b0 / rack b0-r1"]
        placed = [c["what"] for c in shown["changes"] if c["gang"] == "pfn:team/train"]
        assert placed == ["done", "placed"]  # newest first


async def eventually_async(ask: Any, timeout: float = 30.0) -> dict[str, Any]:
    """Ask until the answer is not empty (an async ``eventually``)."""
    with anyio.move_on_after(timeout):
        while not (found := await ask()):
            await anyio.sleep(0.02)
        return found  # type: ignore[no-any-return]
    raise AssertionError(f"timed out after {timeout}s waiting for the picture")


async def test_a_gang_s_page_lists_its_pods_and_where_its_waiting_pods_would_fit() -> None:
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        scene(where)
        await eventually(lambda: {"team/train-0", "team/train-1"} <= where.bound().keys(), what="train bound")
        await eventually(lambda: where.condition("team/huge-0"), what="huge told why it waits")
        async with http.get("/api/gang", params={"key": "pfn:team/huge"}) as response:
            assert response.status == 200
            page = await response.json()
        assert [pod["name"] for pod in page["pods"]] == [f"team/huge-{i}" for i in range(9)]
        assert {pod["state"] for pod in page["pods"]} == {"pending"}
        rows = page["domains"]
        assert sorted(row["domain"] for row in rows) == ["rack b0-r0", "rack b0-r1"]
        # 8 nodes of 8 GPUs: train takes two whole nodes, another scheduler's pod half of one; five are whole.
        assert sum(row["free"] for row in rows) == 64 - 16 - 4 and sum(row["fits"] for row in rows) == 5
        assert [row["wanted"] for row in rows] == [9, 9] and rows[0]["fits"] >= rows[1]["fits"]
        async with http.get("/api/gang", params={"key": "pfn:team/nobody"}) as response:
            assert response.status == 404


async def test_a_picture_is_taken_at_most_once_per_interval_however_many_ask() -> None:
    slow = replace(FAST, server=ServerSettings(address="127.0.0.1:0", view_interval_seconds=3600))
    async with cluster() as where, phalanx(where, slow) as app, viewer(app) as http:
        scene(where)
        async with http.get("/api/cluster") as response:
            first = await response.json()
            etag = response.headers["ETag"]
        for _ in range(20):
            async with http.get("/api/cluster") as response:
                assert response.status == 200 and response.headers["ETag"] == etag
        assert app.pictures.taken == 1 and first["totals"]["gangs"] <= 2 and etag.endswith('-1"')
        async with http.get("/api/cluster", headers={"If-None-Match": etag}) as response:
            assert response.status == 304  # the page polls cheaply: unchanged pictures are not sent again


async def test_the_view_answers_reads_only_refuses_framing_and_shows_no_pod_spec() -> None:
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        scene(where)
        await eventually(lambda: where.condition("team/huge-0"), what="huge told why it waits")
        paths = ["/", "/view/view.js", "/view/view.css", "/api/cluster", "/api/gang?key=pfn:team/huge", "/metrics"]
        for path in paths:
            async with http.get(path) as response:
                assert response.status == 200, path
                assert response.headers["X-Frame-Options"] == "DENY"
                assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
                body = await response.text()
                assert "hunter2" not in body and "TOKEN" not in body
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                async with http.request(method, path) as response:
                    assert response.status == 405, (method, path)
        for missing in ("/view/index.py", "/view/..%2fpicture.py", "/view/", "/api/nothing"):
            async with http.get(missing) as response:
                assert response.status == 404, missing
                assert response.headers["X-Frame-Options"] == "DENY"
        async with http.get("/") as response:
            page = await response.text()
        assert 'src="view/view.js"' in page and "http" not in page.replace("http-equiv", "")  # nothing from elsewhere


async def test_the_view_turned_off_leaves_metrics_and_health() -> None:
    off = replace(FAST, server=ServerSettings(address="127.0.0.1:0", view=False))
    async with cluster() as where, phalanx(where, off) as app, viewer(app) as http:
        for path in ("/", "/api/cluster", "/view/view.js"):
            async with http.get(path) as response:
                assert response.status == 404, path
        async with http.get("/metrics") as response:
            assert response.status == 200
        assert app.pictures.taken == 0


def test_the_view_s_interval_must_be_positive() -> None:
    with pytest.raises(SettingsError, match=r"server\.viewIntervalSeconds: must be positive"):
        load_settings(None, ["server.viewIntervalSeconds=0"])


def test_pictures_that_take_long_are_taken_less_often_so_that_they_cost_the_loop_at_most_a_twentieth() -> None:
    """A picture that takes 1 s of the loop's time: more than the view may spend at once (0.5 s), so it is
    taken only once all it spent is paid back, at 0.05 s a second: not again until 20 s later, whoever asks."""
    from scheduler.clock import ManualClock  # noqa: PLC0415
    from scheduler.picture import Pictures  # noqa: PLC0415
    from tests.scheduler.loop import Loop  # noqa: PLC0415

    loop = Loop(racks=1, nodes=2)
    clock = ManualClock()
    ticks = iter(range(0, 1000, 1))  # each picture takes one second of the loop's time
    pictures = Pictures(
        state=loop.state, queue=loop.queue, stages=loop.loop.stages, reasons=_NoReasons(), levels=loop.settings.levels,
        clock=clock, interval_seconds=2.0, leading=lambda: True, timer=lambda: float(next(ticks)),
    )  # fmt: skip
    first, _ = pictures.latest()
    for moment in (2.0, 10.0, 19.9):
        clock.advance(moment - clock.monotonic())
        assert pictures.latest()[0] == first
    clock.advance(0.2)
    assert pictures.latest()[0] != first and pictures.taken == 2


class _NoReasons:
    def why_pending(self, pod: str) -> tuple[str, str] | None:
        return None


async def test_the_picture_is_sent_compressed_to_a_browser_that_takes_gzip() -> None:
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        scene(where)
        async with http.get("/api/cluster", headers={"Accept-Encoding": "gzip"}) as response:
            assert response.status == 200 and response.headers["Content-Encoding"] == "gzip"
            assert (await response.json())["totals"]["nodes"] == 8


async def test_a_composite_gang_shows_its_true_minimum_and_runs_once_it_is_met() -> None:
    """Kthena's prefill/decode PodGroup: 8 pods in replicas of two, of which 6 (two prefill replicas and one
    decode replica) are the minimum: not the sum of every replica's own minimum."""
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        await create_manifests(where, ROOT / "examples" / "volcano" / "kthena-prefill-decode.yaml")

        async def shown() -> dict[str, Any]:
            found = [gang for gang in (await picture(http))["gangs"] if gang["pods"] == 8]
            return found[0] if found and found[0]["bound"] >= 6 else {}

        gang = await eventually_async(shown)
        assert (gang["minimum"], gang["state"]) == (6, "running")


def test_the_view_answers_loopback_only_unless_told_otherwise() -> None:
    from scheduler.health import HealthServer  # noqa: PLC0415
    from scheduler.httpd import Refused, Request  # noqa: PLC0415
    from scheduler.metrics import Metrics  # noqa: PLC0415

    def request_from(address: str) -> Request:
        return Request("/api/cluster", remote=address)

    loopback_only = HealthServer("127.0.0.1:0", Metrics(), lambda: (True, "ok"))
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):  # (the last: IPv4 on a dual-stack socket)
        loopback_only._may_view(request_from(address))  # port-forward arrives here: answered
    with pytest.raises(Refused):
        loopback_only._may_view(request_from("::ffff:10.12.0.7"))
    with pytest.raises(Refused) as refused:
        loopback_only._may_view(request_from("10.12.0.7"))  # another pod, through the Service: refused
    assert refused.value.status == 403 and "server.viewFrom: anywhere" in refused.value.text
    HealthServer("127.0.0.1:0", Metrics(), lambda: (True, "ok"), view_from_anywhere=True)._may_view(
        request_from("10.12.0.7")
    )
    with pytest.raises(SettingsError, match=r"server\.viewFrom: loopback or anywhere"):
        load_settings(None, ["server.viewFrom=everyone"])


async def test_the_view_refuses_a_page_of_another_site_whose_name_was_rebound_to_loopback() -> None:
    """DNS rebinding: while someone runs kubectl port-forward, a page of evil.example whose name now resolves
    to 127.0.0.1 makes their browser ask the forwarded port, with ``Host: evil.example:PORT``."""
    async with cluster() as where, phalanx(where, OFTEN) as app, viewer(app) as http:
        assert app.health is not None
        port = urlsplit(app.health.url).port
        for host in (
            f"localhost:{port}",
            f"127.0.0.1:{port}",
            f"[::1]:{port}",
            "LOCALHOST",
            "view.localhost.",
            "0.0.0.0",
        ):
            async with http.get("/api/cluster", headers={"Host": host}) as response:
                assert response.status == 200, host
        for host in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example", f"[2001:db8::1]:{port}"):
            async with http.get("/", headers={"Host": host}) as response:
                assert response.status == 403, host
                assert "addressed to localhost only" in await response.text()
        async with http.get("/metrics", headers={"Host": "evil.example"}) as response:
            assert response.status == 200  # what Prometheus scrapes is not the view


async def test_the_view_answers_the_names_it_is_told_a_bastion_s_port_forward_is_opened_by() -> None:
    """``kubectl port-forward --address 0.0.0.0`` on a bastion, opened from a laptop by the bastion's name."""
    bastion = replace(OFTEN, server=replace(OFTEN.server, view_hosts=("Bastion.Example.com",)))
    async with cluster() as where, phalanx(where, bastion) as app, viewer(app) as http:
        for host, status in (("bastion.example.com:8080", 200), ("bastion.example.com.", 200), ("evil.example", 403)):
            async with http.get("/api/cluster", headers={"Host": host}) as response:
                assert response.status == status, host
    settings = load_settings(None, ["server.viewHosts=bastion.example.com, 10.0.0.5"])
    assert settings.server.view_hosts == ("bastion.example.com", "10.0.0.5")
    with pytest.raises(SettingsError, match=r"server\.viewHosts: must be a list of strings"):
        parse_settings({"server": {"viewHosts": [3]}})


def test_gang_pages_share_the_view_s_budget_however_many_gangs_are_asked_for() -> None:
    from scheduler.clock import ManualClock  # noqa: PLC0415
    from scheduler.picture import Busy, Pictures  # noqa: PLC0415
    from tests.scheduler.loop import Loop  # noqa: PLC0415

    loop = Loop(racks=1, nodes=2)
    for name in ("a", "b"):
        loop.submit(f"{name}-0", 8, gang=(name, 1))
    loop.settle()
    clock = ManualClock()
    ticks = iter(range(1000))  # each page takes one second of the loop's time
    pictures = Pictures(
        state=loop.state, queue=loop.queue, stages=loop.loop.stages, reasons=_NoReasons(), levels=loop.settings.levels,
        clock=clock, interval_seconds=2.0, leading=lambda: True, timer=lambda: float(next(ticks)),
    )  # fmt: skip
    assert pictures.gang("pfn:ml/a") is not None
    assert pictures.gang("pfn:ml/a") is not None  # the same page again: no new cost
    with pytest.raises(Busy) as busy:
        pictures.gang("pfn:ml/b")  # another gang at once: 1 s spent, to be paid back at 0.05 s a second
    assert busy.value.retry_after == pytest.approx(20.0)
    assert pictures.gang("pfn:ml/nobody") is None  # a gang not known costs nothing, busy or not
    clock.advance(20.0)
    assert pictures.gang("pfn:ml/b") is not None


def test_pictures_leave_room_for_the_gang_page_a_person_opens_between_two() -> None:
    """Pictures of 0.1 s every 2 s, and after each the page of the gang a person has open (0.01 s): the
    pictures may use four fifths of what the view may spend at once, so the page is never refused."""
    from scheduler.clock import ManualClock  # noqa: PLC0415
    from scheduler.picture import Pictures  # noqa: PLC0415
    from tests.scheduler.loop import Loop  # noqa: PLC0415

    loop = Loop(racks=1, nodes=2)
    loop.submit("a-0", 8, gang=("a", 1))
    loop.settle()
    clock = ManualClock()
    costs = {"picture": 0.1, "page": 0.01}
    now = [0.0]
    doing = ["picture"]

    def timer() -> float:  # each call pair (start, end) of a piece of work spends its cost
        now[0] += costs[doing[0]] / 2
        return now[0]

    pictures = Pictures(
        state=loop.state, queue=loop.queue, stages=loop.loop.stages, reasons=_NoReasons(), levels=loop.settings.levels,
        clock=clock, interval_seconds=2.0, leading=lambda: True, timer=timer,
    )  # fmt: skip
    for _ in range(60):
        doing[0] = "picture"
        pictures.latest()
        doing[0] = "page"
        assert pictures.gang("pfn:ml/a") is not None
        clock.advance(2.0)
    assert pictures.taken >= 40  # most polls still got a new picture


def test_the_journal_tells_a_deleted_gang_once_and_forgets_old_deletions() -> None:
    from scheduler.clock import ManualClock  # noqa: PLC0415
    from scheduler.gangs import GangKey  # noqa: PLC0415
    from scheduler.journal import LENGTH, Journal  # noqa: PLC0415
    from scheduler.stages import GangNews  # noqa: PLC0415

    journal = Journal(ManualClock())
    for _ in range(2):  # the binder gives back a gang that is gone already: told deleted again
        journal.told(GangKey("pfn:ml/gone"), GangNews.DELETED)
    assert [entry.what for entry in journal.entries()] == ["deleted"]
    for i in range(10 * LENGTH):
        journal.told(GangKey(f"pfn:ml/g{i}"), GangNews.DELETED)
    assert len(journal.entries()) == LENGTH and len(journal._deleted) <= 4 * LENGTH  # bounded, however many
