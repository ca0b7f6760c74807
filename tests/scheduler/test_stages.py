"""A policy is one module and one line in the registry: the cycle calls it at its extension points
(``scheduler/stages.py``) without a change of its own, and every stage is told what became of each
decision and each gang."""

from __future__ import annotations

from dataclasses import replace

from scheduler.decision import Code, Outcome
from scheduler.gangs import GangError, GangKey, GangSpec
from scheduler.ports.port import PODS, Change
from scheduler.preemption.postfilter import Preemption
from scheduler.registry import Stages
from scheduler.stages import GangNews, Hidden, Stage, Tried
from scheduler.starvation import Starvation
from scheduler.vacancies import Vacancies
from tests.scheduler.loop import Loop

MAINTAINED = "b0-r0-n0"


class Maintenance(Stage):
    """The kind of policy an operator adds: a node kept from every gang during its maintenance window,
    and a sentence for the gangs that do not fit."""

    def __init__(self) -> None:
        self.recorded_codes: list[tuple[str, Code]] = []
        self.news: list[tuple[str, GangNews]] = []

    def hide(self, spec: GangSpec, *, missing: int) -> Hidden | None:
        return Hidden(nodes=[(MAINTAINED, (("nvidia.com/gpu", 8),))], note=f" Node {MAINTAINED} is in maintenance.")

    def post_filter(self, tried: Tried) -> Outcome:
        return replace(tried.failed, message=f"{tried.failed.message} Maintenance ends at 18:00.")

    def recorded(self, gang: GangSpec | GangError, outcome: Outcome) -> list[GangKey]:
        self.recorded_codes.append((str(gang.key), outcome.code))
        return []

    def told(self, gang: GangKey, news: GangNews) -> list[GangKey]:
        self.news.append((str(gang), news))
        return []


def with_stage(loop: Loop, stage: Stage) -> None:
    """``stage`` registered after the others, as its one line in ``registry.register`` would."""
    stages = loop.loop.cycle.stages
    loop.loop.cycle.stages = Stages((*stages.all, stage), stages.whose_room)


def test_a_registered_stage_is_a_pre_filter_and_a_post_filter_by_the_methods_it_has() -> None:
    loop = Loop(racks=1, nodes=4)
    maintenance = Maintenance()
    with_stage(loop, maintenance)
    stages = loop.loop.stages
    assert maintenance in stages.pre_filters and maintenance in stages.post_filters
    vacancies = stages.one(Vacancies)
    assert vacancies in stages.pre_filters and vacancies not in stages.post_filters  # it only hides room
    assert list(stages.post_filters)[-2:] == [stages.one(Starvation), maintenance]  # in registration order
    assert stages.find(Maintenance) is maintenance


def test_the_cycle_keeps_the_room_a_new_stage_hides_and_says_what_its_post_filter_says() -> None:
    loop = Loop(racks=1, nodes=4)
    maintenance = Maintenance()
    with_stage(loop, maintenance)
    members = [loop.submit(f"train-{i}", 8, gang=("train", 3)) for i in range(3)]
    loop.settle()
    assert sorted(loop.bound()[pod] for pod in members) == ["b0-r0-n1", "b0-r0-n2", "b0-r0-n3"]
    big = loop.submit("solo", 8)
    loop.settle()
    assert big not in loop.bound()  # the maintained node is free, and nobody sees it
    message = loop.told.pending[big]
    assert message.endswith(f"Node {MAINTAINED} is in maintenance. Maintenance ends at 18:00.")
    assert ("pfn:ml/train", Code.SCHEDULED) in maintenance.recorded_codes
    assert ("pod:ml/solo", Code.UNSCHEDULABLE) in maintenance.recorded_codes


def test_every_stage_is_told_when_a_gang_is_done_or_deleted() -> None:
    loop = Loop(racks=1, nodes=4)
    maintenance = Maintenance()
    with_stage(loop, maintenance)
    members = [loop.submit(f"train-{i}", 8, gang=("train", 2)) for i in range(2)]
    loop.settle()
    assert all(pod in loop.bound() for pod in members)
    assert ("pfn:ml/train", GangNews.DONE) in maintenance.news
    loop.finish(*members)
    loop.settle()
    assert ("pfn:ml/train", GangNews.DELETED) in maintenance.news


def test_room_the_api_shows_nominated_stays_hidden_where_nothing_preempts() -> None:
    """A higher-priority pod of another scheduler nominated to the one node keeps it from our pod, with an
    evictor or without one (the replay has none): the nominations' pre-filter is registered either way."""
    for preemption in (False, True):
        loop = Loop(racks=1, nodes=1, preemption=preemption)
        node = loop.state.snapshot.names[0]
        other = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ml", "name": "other", "uid": "other",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "default-scheduler", "priority": 1000,
                     "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
            "status": {"nominatedNodeName": node},
        }  # fmt: skip
        loop.state.apply(PODS, Change("ADDED", other))
        mine = loop.submit("mine", 8)
        loop.settle()
        assert mine not in loop.bound(), preemption
        assert loop.loop.stages.find(Preemption) is not None
