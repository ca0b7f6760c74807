"""Writer processes: the deciding process's writes made by other processes, answered as the port answers, and
nothing lost or bound twice when a writer dies."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import orjson
import pytest

from scheduler.ports.errors import Conflict, NotFound, Unavailable
from scheduler.ports.kube import KubeCluster, client_for
from scheduler.ports.kube.writers import MOST_BY_DEFAULT, Writers, usable_cores, writer_processes
from scheduler.ports.port import PODS, ApiResource, Binding
from scheduler.ports.sim import Faults
from scheduler.ports.sim.faults import FaultRule
from tests.scheduler.support import Cluster, cluster, eventually, gpu_pod, pfn, phalanx

EVENTS = ApiResource("events.k8s.io", "v1", "events", "Event")
LEASES = ApiResource("coordination.k8s.io", "v1", "leases", "Lease")


@asynccontextmanager
async def writing(where: Cluster, processes: int) -> AsyncIterator[Writers]:
    writers = Writers(KubeCluster(client_for(where.url), request_timeout=10), processes)
    async with anyio.create_task_group() as group:
        await group.start(functools.partial(writers.run, at_once=True))
        await eventually(lambda: len(writers.ready) == processes, what=f"{processes} writer(s) to be ready")
        yield writers
        group.cancel_scope.cancel()
    await writers.close()


async def test_writes_made_by_a_writer_are_answered_as_the_port_answers() -> None:
    async with cluster() as where, writing(where, 1) as writers:
        where.create(gpu_pod("solo"))
        uid = where.pods()["team/solo"]["metadata"]["uid"]
        await writers.bind("team", "solo", uid, "b0-r0-n0")
        assert where.bound() == {"team/solo": "b0-r0-n0"}
        with pytest.raises(Conflict):
            await writers.bind("team", "solo", uid, "b0-r0-n1")  # already bound: the same error as the port's
        with pytest.raises(NotFound):
            await writers.bind("team", "nobody", "uid", "b0-r0-n0")
        event = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "solo.1", "namespace": "team"},
            "regarding": {"kind": "Pod", "namespace": "team", "name": "solo", "uid": uid},
            "reason": "Scheduled", "note": "bound", "type": "Normal", "action": "Binding",
            "eventTime": "2026-11-28T00:00:00.000000Z", "reportingController": "phalanx",
            "reportingInstance": "test",
        }  # fmt: skip
        created = await writers.create(EVENTS, "team", event)
        assert created["metadata"]["uid"] and created["reason"] == "Scheduled"  # the object as stored
        assert writers.handed == 4
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "team"},
        }
        await writers.create(LEASES, "team", lease)
        assert writers.handed == 4  # the Lease is written here: leadership does not hang on a writer
        with pytest.raises(Conflict):
            await writers.delete(PODS, "team", "solo", uid="another")
        await writers.delete(PODS, "team", "solo", uid=uid)
        assert "team/solo" not in where.pods()


@pytest.mark.parametrize("processes", [0, 1])
async def test_a_gang_s_binds_handed_over_together_are_each_answered_as_the_port_answers(processes: int) -> None:
    async with cluster() as where, writing(where, processes) as writers:
        for name in ("free", "taken"):
            where.create(gpu_pod(name))
        uid = {name: where.pods()[f"team/{name}"]["metadata"]["uid"] for name in ("free", "taken")}
        await writers.bind("team", "taken", uid["taken"], "b0-r0-n1")
        outcomes = await writers.bind_all(
            [
                Binding("team", "free", uid["free"], "b0-r0-n0"),
                Binding("team", "taken", uid["taken"], "b0-r0-n2"),
                Binding("team", "nobody", "uid", "b0-r0-n0"),
            ]
        )
        assert [type(outcome) for outcome in outcomes] == [type(None), Conflict, NotFound]
        assert where.bound() == {"team/free": "b0-r0-n0", "team/taken": "b0-r0-n1"}
        assert writers.handed == 2 * processes  # one bind, then the three in one message


async def test_a_writer_that_dies_fails_its_calls_as_unavailable_and_is_started_again() -> None:
    faults = Faults(seed=1)
    async with cluster(faults=faults) as where, writing(where, 1) as writers:
        for name in ("slow", "later"):
            where.create(gpu_pod(name))
        faults.rules.append(FaultRule(verbs=frozenset({"bind"}), latency=60.0))  # the bind stays in flight
        (first,) = writers.ready
        failed: list[BaseException] = []

        async def bind() -> None:
            try:
                await writers.bind("team", "slow", where.pods()["team/slow"]["metadata"]["uid"], "b0-r0-n0")
            except Unavailable as error:
                failed.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(bind)
            await eventually(lambda: writers.in_flight == {first: 1}, what="the bind to be with the writer")
            os.kill(first, signal.SIGKILL)
        assert len(failed) == 1 and "ended before the server answered" in str(failed[0])
        faults.rules.clear()
        await eventually(lambda: writers.ready and writers.ready != (first,), what="a writer started again")
        await writers.bind("team", "later", where.pods()["team/later"]["metadata"]["uid"], "b0-r0-n1")
        assert where.bound()["team/later"] == "b0-r0-n1" and writers.restarts == 1


async def test_writers_start_once_the_replica_leads_and_a_follower_starts_none() -> None:
    """A replica that does not lead only tries its Lease (here; refused, someone else holds it): it starts no
    writer. A replica whose Lease is written leads: its writers start then, before its first bind."""
    async with cluster() as where:
        where.create(gpu_pod("solo"))
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "team"},
        }
        where.create(lease)  # held by another replica
        follower = Writers(KubeCluster(client_for(where.url), request_timeout=10), 1)
        async with anyio.create_task_group() as group:
            await group.start(follower.run)
            with pytest.raises(Conflict):
                await follower.create(LEASES, "team", lease)
            await follower.get(PODS, "team", "solo")
            assert not follower.ready and follower.restarts == 0 and follower.handed == 0
            group.cancel_scope.cancel()
        await follower.close()
        leader = Writers(KubeCluster(client_for(where.url), request_timeout=10), 1)
        async with anyio.create_task_group() as group:
            await group.start(leader.run)
            taken = await leader.get(LEASES, "team", "l")
            await leader.update(LEASES, "team", "l", {**taken, "spec": {"holderIdentity": "leader"}})
            await eventually(lambda: len(leader.ready) == 1, what="the writer started by the Lease written")
            await leader.bind("team", "solo", where.pods()["team/solo"]["metadata"]["uid"], "b0-r0-n0")
            assert where.bound() == {"team/solo": "b0-r0-n0"} and leader.handed == 1  # made by the writer
            group.cancel_scope.cancel()
        await leader.close()


async def test_without_a_lease_the_first_write_starts_the_writers_and_is_made_here_meanwhile() -> None:
    async with cluster() as where:
        where.create(gpu_pod("solo"))
        writers = Writers(KubeCluster(client_for(where.url), request_timeout=10), 1)
        async with anyio.create_task_group() as group:
            await group.start(writers.run)
            await writers.bind("team", "solo", where.pods()["team/solo"]["metadata"]["uid"], "b0-r0-n0")
            assert where.bound() == {"team/solo": "b0-r0-n0"} and writers.handed == 0  # made here
            await eventually(lambda: len(writers.ready) == 1, what="the writer started by the first write")
            group.cancel_scope.cancel()
        await writers.close()


@pytest.mark.parametrize("processes", [0, 2])
async def test_gangs_bind_whole_whether_this_process_or_writers_write(processes: int) -> None:
    """With no writer the deciding process writes, as before writers existed; with two, they do. The same gangs
    bind, each in one rack, and the monitor finds nothing bound beyond a node or below a gang's minimum."""
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8") as where:
        for gang in range(4):
            for member in range(4):
                where.create(gpu_pod(f"g{gang}-{member}", gpus=8, annotations=pfn(f"g{gang}", 4)))
        async with phalanx(where, writers=processes):
            await eventually(lambda: len(where.bound()) == 8, what="two gangs of four to bind")
            await eventually(lambda: len(where.events("Scheduled")) == 8, what="a Scheduled Event per pod")
        racks: dict[str, set[str]] = {f"g{gang}": set() for gang in range(4)}
        for key, node in where.bound().items():
            racks[key.split("/")[1].split("-")[0]].add(node.rsplit("-", 1)[0])
        assert sorted(len(found) for found in racks.values()) == [0, 0, 1, 1]  # two gangs bound, each in one rack


async def test_a_writer_killed_while_a_gang_binds_loses_nothing_and_binds_nothing_twice() -> None:
    faults = Faults(seed=1)
    faults.rules.append(FaultRule(verbs=frozenset({"bind"}), latency=0.2))  # binds in flight long enough
    async with cluster("blocks=1,racks=2,nodes=4,gpus=8", faults=faults) as where:
        async with phalanx(where, writers=2) as app:
            writers = app.port
            assert isinstance(writers, Writers)
            await eventually(lambda: len(writers.ready) == 2, what="two writers to be ready")
            for gang in range(2):
                for member in range(4):
                    where.create(gpu_pod(f"g{gang}-{member}", gpus=8, annotations=pfn(f"g{gang}", 4)))
            busy = await eventually(lambda: max(writers.in_flight.items(), key=lambda item: item[1]) if any(
                writers.in_flight.values()) else None, what="binds with the writers")  # fmt: skip
            os.kill(busy[0], signal.SIGKILL)  # the writer with the most binds in flight
            await eventually(lambda: len(where.bound()) == 8, timeout=60, what="both gangs to bind")
        bound = where.bound()
        assert len(bound) == 8 and len(set(bound.values())) == 8  # each pod on a node of its own
        assert writers.restarts >= 1


async def test_a_writer_that_stops_answering_is_killed_and_its_call_fails_as_unavailable() -> None:
    faults = Faults(seed=1)
    async with cluster(faults=faults) as where:
        where.create(gpu_pod("stuck"))
        writers = Writers(KubeCluster(client_for(where.url), request_timeout=0.5), 1, answer_margin_s=0.2)
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(writers.run, at_once=True))
            await eventually(lambda: len(writers.ready) == 1, what="a writer to be ready")
            (first,) = writers.ready
            os.kill(first, signal.SIGSTOP)  # alive, and answering nothing
            with pytest.raises(Unavailable, match="ended before the server answered"):
                await writers.bind("team", "stuck", where.pods()["team/stuck"]["metadata"]["uid"], "b0-r0-n0")
            await eventually(lambda: writers.ready and writers.ready != (first,), what="a writer started again")
            assert writers.restarts == 1
            group.cancel_scope.cancel()
        await writers.close()


async def test_a_writer_that_cannot_be_started_leaves_the_writes_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No process can be started (a pids limit, no memory): it is tried again later, and meanwhile the deciding
    process writes itself; the scheduler does not stop."""
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    async with cluster() as where:
        where.create(gpu_pod("solo"))
        writers = Writers(KubeCluster(client_for(where.url), request_timeout=10), 1)
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(writers.run, at_once=True))
            await eventually(lambda: writers.restarts >= 1, what="a failed start")
            await writers.bind("team", "solo", where.pods()["team/solo"]["metadata"]["uid"], "b0-r0-n0")
            assert where.bound() == {"team/solo": "b0-r0-n0"} and writers.handed == 0
            group.cancel_scope.cancel()
        await writers.close()


def test_writer_processes_by_default_one_per_core_but_the_deciding_one_s_and_a_few_at_most() -> None:
    assert [writer_processes(None, cores) for cores in (1, 2, 3, 5, 16)] == [0, 1, 2, 4, MOST_BY_DEFAULT]
    assert writer_processes(0, 16) == 0 and writer_processes(3, 1) == 3


def cgroups(root: Path, membership: str, files: dict[str, str]) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(membership)
    for name, text in files.items():
        (root / "sys/fs/cgroup" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup" / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("membership", "files", "quota"),
    [
        ("0::/\n", {"cpu.max": "150000 100000\n"}, 2),  # cgroup v2, a private namespace: limits.cpu 1500m
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),  # no limit
        ("0::/kubepods/pod1/c1\n",  # cgroup v2, the host's view: the limit on the pod's cgroup, above
         {"kubepods/pod1/cpu.max": "200000 100000\n", "kubepods/pod1/c1/cpu.max": "max 1"}, 2),
        (
            "12:memory:/kubepods/pod1/c1\n4:cpu,cpuacct:/kubepods/pod1/c1\n",  # cgroup v1 (Amazon Linux 2 nodes)
            {"cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us": "100000\n",
             "cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us": "100000\n"},
            1,
        ),
        ("4:cpu,cpuacct:/\n",
         {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, None),
    ],
)  # fmt: skip
def test_usable_cores_are_bounded_by_the_container_s_cpu_limit(
    tmp_path: Path, membership: str, files: dict[str, str], quota: int | None
) -> None:
    affinity = len(os.sched_getaffinity(0))
    expected = affinity if quota is None else min(affinity, quota)
    assert usable_cores(cgroups(tmp_path, membership, files)) == expected
    assert usable_cores(tmp_path / "absent") == affinity


async def test_a_gang_s_binds_with_a_writer_that_stops_answering_fail_each_as_unavailable() -> None:
    """The batch's failure is each binding's (the binder tries each again alone), never an exception out of
    bind_all, which would end the binder with half the gang bound."""
    async with cluster() as where:
        for name in ("a", "b"):
            where.create(gpu_pod(name))
        writers = Writers(KubeCluster(client_for(where.url), request_timeout=0.5), 1, answer_margin_s=0.2)
        async with anyio.create_task_group() as group:
            await group.start(functools.partial(writers.run, at_once=True))
            await eventually(lambda: len(writers.ready) == 1, what="a writer to be ready")
            os.kill(writers.ready[0], signal.SIGSTOP)
            uid = {name: where.pods()[f"team/{name}"]["metadata"]["uid"] for name in ("a", "b")}
            outcomes = await writers.bind_all([Binding("team", name, uid[name], "b0-r0-n0") for name in ("a", "b")])
            assert [type(outcome) for outcome in outcomes] == [Unavailable, Unavailable]
            group.cancel_scope.cancel()
        await writers.close()


async def test_a_write_whose_body_cannot_be_sent_is_refused_at_once_and_leaves_no_call_in_flight() -> None:
    async with cluster() as where, writing(where, 1) as writers:
        with pytest.raises(TypeError):
            await writers.patch(PODS, "team", "x", {"metadata": {"labels": {1: "not a string key"}}})
        assert writers.in_flight == {writers.ready[0]: 0}  # nothing for the watchdog to find unanswered


async def test_a_writer_whose_deciding_process_is_gone_carries_out_its_calls_and_ends_quietly() -> None:
    """The deciding process crashed (or was killed) with a bind handed over: the writer's answers meet a
    broken pipe. It still binds the pod, and it ends when its stdin does, with no traceback on stderr."""
    async with cluster() as where:
        where.create(gpu_pod("solo"))
        uid = where.pods()["team/solo"]["metadata"]["uid"]
        command = [sys.executable, "-m", "scheduler.ports.kube.writer", "--url", where.url]
        pipes = subprocess.PIPE
        with subprocess.Popen(command, stdin=pipes, stdout=pipes, stderr=pipes) as writer:
            assert writer.stdin is not None and writer.stdout is not None and writer.stderr is not None
            ready = await anyio.to_thread.run_sync(writer.stdout.readline)
            assert orjson.loads(ready) == {"ready": True}
            writer.stdout.close()  # the deciding process is gone: nobody reads the answers
            call = {"id": 1, "call": "bind", "args": ["team", "solo", uid, "b0-r0-n0"]}
            writer.stdin.write(orjson.dumps(call) + b"\n")
            writer.stdin.close()
            code = await anyio.to_thread.run_sync(functools.partial(writer.wait, timeout=30))
            stderr = writer.stderr.read()
        assert where.bound() == {"team/solo": "b0-r0-n0"}
        assert code == 0 and b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode()
