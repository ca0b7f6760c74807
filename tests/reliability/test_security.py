"""What an operator trusts Phalanx with: its credentials never reach its logs."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio

from scheduler.ports.sim import FaultRule, Faults
from tests.scheduler.support import cluster, eventually, free_port, gpu_pod, kubeconfig, pfn

TOKEN = "phalanx-test-token-9f4c2e7d1b"  # distinctive, so that any echo of it is found


async def test_the_bearer_token_is_never_logged_even_at_debug_level_and_on_errors(tmp_path: Path) -> None:
    faults = Faults(
        seed=8, rules=[FaultRule(verbs=frozenset({"bind", "create", "patch"}), error_rate=0.3, codes=(500, 429, 409))]
    )
    async with cluster("blocks=1,racks=1,nodes=2,gpus=8", faults=faults) as where:
        where.store.ensure_namespace("phalanx-system")
        command = [
            sys.executable,
            "-m",
            "scheduler.frontends.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig(tmp_path / "kubeconfig", where.url, token=TOKEN)),
            "--metrics-address",
            f"127.0.0.1:{free_port()}",
            "--log-level",
            "debug",
            "--set",
            "leaderElection.enabled=false",
        ]
        log = tmp_path / "phalanx.log"
        with log.open("wb") as sink:
            process = await anyio.open_process(command, stdout=sink, stderr=sink)
            try:
                for i in range(2):
                    where.create(gpu_pod(f"w{i}", annotations=pfn("train", 2)))
                where.create(gpu_pod("bad", annotations={"gang-scheduling.preferred.jp/gang-name": "x"}))
                await eventually(lambda: len(where.bound()) == 2, what="the gang bound through the faults")
                await eventually(lambda: sum(faults.injected.values()) >= 1, what="a failed write logged")
            finally:
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    await process.wait()
        output = log.read_text()
    assert '"event": "placed"' in output  # the logs were there to look at
    assert TOKEN not in output
    assert set(where.server.authorizations) == {f"Bearer {TOKEN}"}  # the token was really in use
