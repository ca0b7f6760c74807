"""How Events are aggregated and written, as a user reading `kubectl get events` sees them, and what is said
when a group object's CRD drops the status Phalanx writes."""

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import structlog
from structlog.testing import capture_logs

from scheduler.clock import ManualClock
from scheduler.decision import Subject
from scheduler.gangs import GangKey, GangSpec, ObjectRef, Source, Timeout
from scheduler.metrics import Metrics
from scheduler.ports.errors import PortError, Throttled, Unavailable
from scheduler.ports.port import PODS, ApiResource, Change
from scheduler.ports.sim import Store
from scheduler.ports.sim.adapter import SimCluster
from scheduler.ratelimit import TokenBucket
from scheduler.reporting import Reporter, clip_bytes, event_name
from scheduler.settings import ReportingSettings
from scheduler.state import ClusterState
from tests.scheduler.loop import Loop
from tests.scheduler.support import FAST, eventually, gpu_pod
from topology import GangRequest


def reporter_on(store: Store) -> tuple[Reporter, ManualClock]:
    clock = ManualClock()
    reporter = Reporter(
        port=SimCluster(store),
        state=ClusterState(FAST, clock),
        settings=ReportingSettings(event_interval_seconds=10),
        clock=clock,
        limiter=TokenBucket(1e9, 1_000_000, clock),
        metrics=Metrics(),
        identity="test",
    )
    return reporter, clock


def events(store: Store, name: str) -> list[dict]:  # type: ignore[type-arg]
    found = store.objects(store.resource("events.k8s.io/v1", "Event"))
    return [event for event in found if event["regarding"]["name"] == name]


def subject(i: int) -> Subject:
    return Subject("v1", "Pod", "team", f"p{i}", f"uid-{i}")


def record_scheduled(reporter: Reporter, numbers: range) -> None:
    """The Scheduled Event of each pod numbered, as the binder records them."""
    for i in numbers:
        reporter.event(subject(i), "Scheduled", f"Successfully assigned team/p{i} to n1", type="Normal")


async def test_repeats_of_a_recent_event_grow_its_series_and_long_quiet_ones_start_a_new_event() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, clock = reporter_on(store)
    for i in range(6000):  # more distinct Events than are tracked for aggregation, written as they come
        reporter.event(subject(i), "FailedScheduling", "0/4 nodes are available")
        if i % 500 == 499:
            await reporter.flush()
    assert len(events(store, "p0")) == len(events(store, "p5999")) == 1

    clock.advance(10)
    reporter.event(subject(5999), "FailedScheduling", "0/4 nodes are available")
    reporter.event(subject(0), "FailedScheduling", "0/4 nodes are available")
    await reporter.flush()
    recent = events(store, "p5999")
    assert len(recent) == 1 and recent[0]["series"]["count"] == 2
    oldest = events(store, "p0")
    assert len(oldest) == 2 and all("series" not in event for event in oldest)


async def test_occurrences_between_writes_are_counted_not_lost() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, clock = reporter_on(store)
    reporter.event(subject(1), "FailedScheduling", "no room")
    await reporter.flush()
    for _ in range(4):
        reporter.event(subject(1), "FailedScheduling", "no room")
    await reporter.flush()  # too soon after the first write: nothing sent yet
    assert "series" not in events(store, "p1")[0]
    clock.advance(10)
    await reporter.flush()
    assert events(store, "p1")[0]["series"]["count"] == 5


async def test_a_burst_the_api_cannot_take_keeps_memory_bounded_and_the_latest_events() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, _ = reporter_on(store)
    for i in range(20_000):  # never flushed: as if the API refused every write meanwhile
        reporter.event(subject(i), "FailedScheduling", "no room")
    await reporter.flush()
    written = store.objects(store.resource("events.k8s.io/v1", "Event"))
    names = {event["regarding"]["name"] for event in written}
    assert 4096 <= len(names) <= 4096 + 512 and "p19999" in names and "p0" not in names


def test_events_are_named_as_client_go_names_them_and_fit_what_the_api_server_validates() -> None:
    assert event_name("train-2", 0x18EABA7EFE209DF3) == "train-2.18eaba7efe209df3"
    too_long = event_name("p" * 252, 1)  # a valid pod name (253 at most) may leave no room for the suffix
    assert len(too_long) == 36 and too_long.count("-") == 4  # a UUID instead
    note = clip_bytes("é" * 600, 1024)  # the server counts the note's limit in bytes
    assert len(note.encode()) <= 1024 and note.endswith("...") and "\ufffd" not in note


async def test_an_over_long_instance_is_clipped_and_an_event_about_a_vanished_namespace_is_dropped() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, _ = reporter_on(store)
    reporter.identity = "x" * 200  # longer than reportingInstance may be: clipped, not refused
    reporter.event(subject(1), "FailedScheduling", "no room")
    await reporter.flush()
    (written,) = events(store, "p1")
    assert len(written["reportingInstance"]) == 128 and written["metadata"]["name"].startswith("p1.")
    reporter.event(Subject("v1", "Pod", "gone", "p2", "uid-2"), "FailedScheduling", "no room")  # no such namespace
    await reporter.flush()
    await reporter.flush()
    assert reporter.metrics.api_write_errors.labels("event", "404").value == 0  # 404: dropped quietly
    assert not reporter._due


class _PruningPort(SimCluster):
    """A cluster whose PodGroup CRD is older than scheduler-plugins' current one: no scheduleStartTime."""

    async def patch_status(self, resource: Any, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        stored = await super().patch_status(resource, namespace, name, patch)
        stored["status"].pop("scheduleStartTime", None)
        return stored


async def test_a_status_field_the_installed_crd_drops_is_logged_once_with_what_to_do() -> None:
    store = Store()
    store.ensure_namespace("team")
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 1}}  # fmt: skip
    store.create(store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup"), "team", group)
    reporter, _ = reporter_on(store)
    reporter.port = _PruningPort(store)
    for obj in store.objects(store.resource("scheduling.x-k8s.io/v1alpha1", "PodGroup")):
        reporter.state.index.upsert_group(obj)
    reporter.watching([ApiResource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")])
    spec = GangSpec(key=GangKey("scheduler-plugins:team/g"), source=Source.SCHEDULER_PLUGINS,
                    request=GangRequest.leaf("team/g", [], min_pods=1), priority=0, created=0.0,
                    timeout=Timeout(seconds=30, jitter_seconds=0),
                    objects=(ObjectRef("scheduling.x-k8s.io", "PodGroup", "team", "g"),))  # fmt: skip
    with capture_logs() as logs:
        for scheduled in (True, False):  # two writes, one warning
            reporter.group(spec, scheduled=scheduled, message="m")
            await reporter.flush()
    warnings = [line for line in logs if line["log_level"] == "warning"]
    assert [(line["resource"], line["field"]) for line in warnings] == [
        ("PodGroup.scheduling.x-k8s.io", "status.scheduleStartTime")
    ]
    assert "install the CRD as its project publishes it" in warnings[0]["hint"]


async def test_notes_that_differ_only_in_their_counts_are_one_series_that_says_the_latest() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, clock = reporter_on(store)
    for waiting in (26, 3, 40, 1):  # a gang gathering members, told at every change
        reporter.event(subject(1), "GangWaiting", f"Gang pfn:team/job waits for {waiting} member(s); 0.5 s left")
    reporter.event(subject(1), "FailedScheduling", "0/4 nodes are available")  # another reason: its own Event
    clock.advance(10)
    await reporter.flush()
    clock.advance(10)
    await reporter.flush()
    written = {event["reason"]: event for event in events(store, "p1")}
    assert len(events(store, "p1")) == 2
    assert written["GangWaiting"]["note"] == "Gang pfn:team/job waits for 1 member(s); 0.5 s left"
    assert written["GangWaiting"]["series"]["count"] == 4


class _SlowCluster(SimCluster):
    """Writes that take a while to answer (a few turns of the event loop), counting how many are in flight."""

    in_flight = most_in_flight = 0

    async def create(self, resource: ApiResource, namespace: str, body: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            return await super().create(resource, namespace, body)
        finally:
            self.in_flight -= 1


async def test_events_go_out_several_at_a_time_never_more_than_the_setting_allows() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, _ = reporter_on(store)
    reporter.port = slow = _SlowCluster(store)
    reporter.settings = ReportingSettings(concurrency=8)
    record_scheduled(reporter, range(100))
    await reporter.flush()
    assert all(len(events(store, f"p{i}")) == 1 for i in range(100))
    assert slow.most_in_flight == 8


async def test_a_new_event_is_written_at_once_while_pending_conditions_wait_for_the_interval() -> None:
    store = Store()
    store.ensure_namespace("team")
    pods = store.resource("v1", "Pod")
    reporter, _ = reporter_on(store)
    reporter.settings = ReportingSettings(status_interval_seconds=3600)
    reporter.state.apply(PODS, Change("ADDED", store.create(pods, "team", gpu_pod("waiting"))))
    async with anyio.create_task_group() as group:
        await group.start(reporter.run)
        reporter.pending(["team/waiting"], "Unschedulable", "0/4 nodes are available")
        reporter.event(subject(1), "Scheduled", "Successfully assigned team/p1 to n1", type="Normal")
        await eventually(lambda: events(store, "p1"), timeout=10, what="the Scheduled Event")
        group.cancel_scope.cancel()
    conditions = (store.get(pods, "team", "waiting").get("status") or {}).get("conditions") or []
    assert not any(c["type"] == "PodScheduled" for c in conditions)  # an hour's interval: not written yet


async def test_news_waits_while_gangs_are_being_bound_and_follows_the_last_bind() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, _ = reporter_on(store)
    reporter.settings = ReportingSettings(status_interval_seconds=3600)
    async with anyio.create_task_group() as group:
        await group.start(reporter.run)
        reporter.binding(2)
        reporter.event(subject(1), "Scheduled", "Successfully assigned team/p1 to n1", type="Normal")
        await eventually(lambda: reporter._binds_done is not None, timeout=10, what="the reporter holding news")
        assert events(store, "p1") == []  # two gangs still binding: the news waits
        reporter.binding(0)
        await eventually(lambda: events(store, "p1"), timeout=10, what="the Scheduled Event after the binds")
        group.cancel_scope.cancel()


class _UnreachableCluster(SimCluster):
    """A server that does not answer while ``down``: every write fails as a refused connection does (or as
    ``failure`` says)."""

    down = True
    attempts = 0
    failure: PortError = Unavailable("POST events: ClientConnectorError: Connect call failed")

    async def create(self, resource: ApiResource, namespace: str, body: Any) -> dict[str, Any]:
        self.attempts += 1
        await anyio.lowlevel.checkpoint()
        if self.down:
            raise self.failure
        return await super().create(resource, namespace, body)


async def test_while_the_server_does_not_answer_writes_pause_longer_each_time_then_all_go_out() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, clock = reporter_on(store)
    reporter.port = server = _UnreachableCluster(store)
    reporter.settings = ReportingSettings(concurrency=4)
    record_scheduled(reporter, range(100))
    with capture_logs() as logs:
        await reporter.flush()
        assert server.attempts <= 4  # those in flight when the first failed; the other 96 wait
        for pause in (1, 2, 4, 8, 16, 30, 30):
            tried = server.attempts
            clock.advance(pause - 0.1)
            await reporter.flush()
            assert server.attempts == tried  # still pausing: nothing is sent
            clock.advance(0.2)
            await reporter.flush()
            assert 1 <= server.attempts - tried <= 4  # the pause is over: a few are tried, and fail again
    assert len([entry for entry in logs if entry["log_level"] == "warning"]) == 8  # one line a pause, not a write
    server.down = False
    clock.advance(31)
    await reporter.flush()
    assert all(len(events(store, f"p{i}")) == 1 for i in range(100))
    clock.advance(1)
    record_scheduled(reporter, range(100, 110))  # a success ended the doubling: the next pause is 1 s again
    server.down = True
    await reporter.flush()
    server.down = False
    clock.advance(1)
    await reporter.flush()
    assert all(len(events(store, f"p{i}")) == 1 for i in range(100, 110))


async def test_the_interval_writes_wait_for_binds_in_flight_but_not_for_ever() -> None:
    store = Store()
    store.ensure_namespace("team")
    pods = store.resource("v1", "Pod")
    reporter, _ = reporter_on(store)
    reporter.settings = ReportingSettings(status_interval_seconds=0.5)  # so binds hold them up 5 s at most

    def condition(name: str) -> list[dict[str, Any]]:
        conditions = (store.get(pods, "team", name).get("status") or {}).get("conditions") or []
        return [c for c in conditions if c["type"] == "PodScheduled"]

    for name in ("first", "second"):
        reporter.state.apply(PODS, Change("ADDED", store.create(pods, "team", gpu_pod(name))))
    async with anyio.create_task_group() as group:
        reporter.binding(1)
        await group.start(reporter.run)
        reporter.pending(["team/first"], "Unschedulable", "0/4 nodes are available")
        await eventually(lambda: reporter._binds_done is not None, timeout=10, what="the interval waiting on binds")
        assert condition("first") == []  # a gang is being bound: its binds go first
        reporter.binding(0)
        await eventually(lambda: condition("first"), timeout=10, what="the condition once the binds are done")
        reporter.binding(1)  # binds in flight from now on, and never done
        reporter.pending(["team/second"], "Unschedulable", "0/4 nodes are available")
        await eventually(lambda: condition("second"), timeout=30, what="the condition despite endless binds")
        group.cancel_scope.cancel()


async def test_a_server_that_asks_for_time_with_retry_after_gets_it() -> None:
    store = Store()
    store.ensure_namespace("team")
    reporter, clock = reporter_on(store)
    reporter.port = server = _UnreachableCluster(store)
    server.failure = Throttled("too many requests", retry_after=5)
    record_scheduled(reporter, range(10))
    await reporter.flush()
    tried = server.attempts
    clock.advance(4)  # past the first pause of 1 s, not past the 5 s the server asked for
    await reporter.flush()
    assert server.attempts == tried
    server.down = False
    clock.advance(2)
    await reporter.flush()
    assert all(len(events(store, f"p{i}")) == 1 for i in range(10))


@contextlib.contextmanager
def info_logs() -> Iterator[None]:
    """Info lines logged, whatever level an earlier test configured (a filtered line is never captured)."""
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield
    finally:
        structlog.configure(**before)


def test_an_invalid_gang_is_one_line_in_the_log_until_what_is_wrong_changes() -> None:
    """An operator tailing the log sees each invalid gang once (not once per pod, not at every pass), and again
    only when what is wrong with it changes."""
    loop = Loop(racks=1, nodes=2)
    bad = {"scheduling.phalanx.dev/topology-required": "Bad Key!"}
    with info_logs(), capture_logs() as logs:
        for i in range(3):
            loop.submit(f"bad-{i}", 1, gang=("bad", 3), annotations=bad)
        loop.settle()
        loop.state.apply(PODS, Change("MODIFIED", {**loop.pods["ml/bad-0"]}))  # touched again, as wrong as before
        loop.settle()
    said = [line for line in logs if line["event"] == "invalid gang"]
    assert len(said) == 1 and said[0]["log_level"] == "info" and said[0]["pods"] == 3
    assert said[0]["gang"] == "pfn:ml/bad" and "'Bad Key!'" in said[0]["why"]
    with info_logs(), capture_logs() as logs:
        worse = {"scheduling.phalanx.dev/topology-required": "Worse Key!"}
        for i in range(3):
            pod = loop.pods[f"ml/bad-{i}"]
            loop.pods[f"ml/bad-{i}"] = {
                **pod,
                "metadata": {**pod["metadata"], "annotations": {**pod["metadata"]["annotations"], **worse}},
            }
            loop.state.apply(PODS, Change("MODIFIED", loop.pods[f"ml/bad-{i}"]))
        loop.settle()
    assert [line["why"].count("Worse Key!") for line in logs if line["event"] == "invalid gang"] == [1]
