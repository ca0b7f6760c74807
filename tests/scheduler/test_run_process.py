"""``phalanx run`` as a real process: a kubeconfig, a gang bound, /readyz and /metrics, a clean SIGTERM."""

import gc
import signal
import sys
from pathlib import Path

import aiohttp
import anyio

from scheduler.app import Phalanx
from scheduler.ports.kube import KubeCluster, client_for
from tests.scheduler.support import (
    FAST,
    cluster,
    eventually,
    free_port,
    gpu_pod,
    kubeconfig,
    pfn,
    phalanx,
    refusing_server,
)


def writers_of(pid: int) -> list[int]:
    """The writer processes ``pid`` started (from /proc: its children running the writer module)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"scheduler.ports.kube.writer" in command:
            found.append(int(entry.name))
    return found


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_phalanx_run_schedules_reports_health_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where:
        where.store.ensure_namespace("phalanx-system")
        config = tmp_path / "phalanx.yaml"
        config.write_text(
            "leaderElection:\n  leaseDurationSeconds: 3\n  renewDeadlineSeconds: 2\n"
            "  retryPeriodSeconds: 0.5\nqueue:\n  initialBackoffSeconds: 0.1\n"
        )
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "scheduler.frontends.cli",
            "run",
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfig(tmp_path / "kubeconfig", where.url)),
            "--metrics-address",
            f"127.0.0.1:{port}",
            "--set",
            "leaderElection.identity=proc",
            "--set",
            "binding.writerProcesses=1",
        ]
        async with await anyio.open_process(command) as process:
            try:

                async def ready() -> bool:
                    try:
                        return (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 200
                    except aiohttp.ClientError:
                        return False

                with anyio.fail_after(60):
                    while not await ready():
                        await anyio.sleep(0.05)
                # Leading (its Lease written), it starts its writer before it has anything to write.
                await eventually(lambda: len(writers_of(process.pid)) == 1, what="the leader's writer process")
                for i in range(2):
                    where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
                await eventually(lambda: len(where.bound()) == 2, what="the gang bound by the process")
                status, metrics = await get(f"http://127.0.0.1:{port}/metrics")
                assert status == 200
                assert 'phalanx_api_writes_total{kind="bind"} 2.0' in metrics
                assert "phalanx_leader 1.0" in metrics
                assert (await get(f"http://127.0.0.1:{port}/healthz")) == (200, "ok\n")
            finally:
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    code = await process.wait()
        assert code == 0
        lease = where.store.get(
            where.store.resource("coordination.k8s.io/v1", "Lease"), "phalanx-system", "phalanx-scheduler"
        )
        assert lease["spec"]["holderIdentity"] == ""  # released on the way out


async def test_phalanx_run_with_an_unreachable_cluster_is_not_ready(tmp_path: Path) -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "scheduler.frontends.cli",
        "run",
        "--kubeconfig",
        str(kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port()}")),
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--no-leader-elect",
        "--set",
        "binding.writerProcesses=1",
    ]
    async with await anyio.open_process(command) as process:
        try:
            with anyio.fail_after(60):
                while True:
                    try:
                        status, text = await get(f"http://127.0.0.1:{port}/readyz")
                        break
                    except aiohttp.ClientError:
                        await anyio.sleep(0.05)
            assert status == 503 and text == "informers have not listed everything yet\n"
            # Without an election the process leads from its start: its writer starts at once.
            await eventually(lambda: len(writers_of(process.pid)) == 1, what="the writer process")
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                assert await process.wait() == 0


async def test_a_scheduler_owning_its_process_freezes_what_its_first_lists_built_and_keeps_collecting() -> None:
    """``phalanx run`` turns the cyclic collector off while the first lists come in and, once they are in,
    moves what they built out of its reach (gc.freeze), then turns it on again: a collector left off would
    leak every cycle of garbage for the life of the process."""
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8") as where:
        where.store.ensure_namespace("team")
        where.store.create(where.store.resource("v1", "Pod"), "team", gpu_pod("solo", annotations=pfn("solo", 1)))
        frozen_before = gc.get_freeze_count()
        port = KubeCluster(client_for(where.url), request_timeout=10)
        app = Phalanx(FAST, port, serve=False, freeze_heap=True)
        try:
            async with anyio.create_task_group() as group:
                await group.start(app.run)
                assert gc.isenabled()
                assert gc.get_freeze_count() > frozen_before  # the listed cluster, among others
                await eventually(lambda: where.pods()["team/solo"]["spec"].get("nodeName"), what="the bind")
                group.cancel_scope.cancel()
        finally:
            gc.unfreeze()  # the test process owns its heap, not the scheduler under test
            await port.close()


async def test_phalanx_run_whose_credentials_are_refused_says_so_and_keeps_asking_not_ready(tmp_path: Path) -> None:
    """A server that answers 401 (a token it does not accept): the log says the credentials are refused, not
    that the cluster did not answer; run keeps asking (a rotated token comes back) and is not ready."""
    port = free_port()
    with refusing_server() as (url, _):
        config = kubeconfig(tmp_path / "kubeconfig", url)
        command = [sys.executable, "-m", "scheduler.frontends.cli", "run", "--kubeconfig", str(config),
                   "--metrics-address", f"127.0.0.1:{port}", "--no-leader-elect"]  # fmt: skip
        async with await anyio.open_process(command) as process:
            try:
                assert process.stderr is not None
                seen = b""
                with anyio.fail_after(60):
                    async for chunk in process.stderr:
                        seen += chunk
                        if b"refused Phalanx's credentials" in seen:
                            break
                line = next(line for line in seen.decode().splitlines() if "refused Phalanx's credentials" in line)
                assert '"status": 401' in line and "Unauthorized" in line and '"level": "error"' in line, line
                assert (await get(f"http://127.0.0.1:{port}/readyz"))[0] == 503
            finally:
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    assert await process.wait() == 0


async def test_a_scheduler_without_an_election_says_that_it_leads() -> None:
    """``--no-leader-elect`` (one replica) leads for as long as it runs: ``phalanx_leader`` said 0, so that the
    shipped alert "no Phalanx replica holds the leader lease" (``max(phalanx_leader) < 1``) fired for ever."""
    async with cluster("blocks=1,racks=1,nodes=1,gpus=8") as where, phalanx(where) as app:
        await eventually(lambda: app.metrics.registry.value("phalanx_leader") == 1, what="phalanx_leader at 1")
    assert app.metrics.registry.value("phalanx_leader") == 0  # stopped: it leads no more
