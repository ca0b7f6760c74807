"""The ``phalanx`` command.

Every failure a user can cause (a bad flag, a missing file, an unusable kubeconfig) ends in one readable
line on stderr and a non-zero exit status, never a traceback: 2 for a bad command line or configuration,
1 when the cluster cannot be used.
"""

from __future__ import annotations

import argparse
import signal
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

import anyio

from scheduler import demo
from scheduler.app import Phalanx
from scheduler.gangs import SettingsError
from scheduler.kube import KubeCluster, KubeConfigError, connect
from scheduler.logs import LEVELS, configure
from scheduler.settings import Settings, load_settings


def _version() -> str:
    try:
        return version("phalanx-scheduler")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line in one line (with a pointer to --help), not usage plus error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"phalanx: {message}\n")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="phalanx",
        description="Phalanx: an all-or-nothing, topology-aware gang scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"phalanx {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run the scheduler against a cluster (in-cluster credentials unless --kubeconfig is given)",
        description="Run the scheduler. Settings come from --config (YAML, schema in the README), then flags.",
    )
    run.add_argument("--config", metavar="FILE", help="YAML configuration file")
    run.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use instead of the in-cluster account")
    run.add_argument("--context", metavar="NAME", help="kubeconfig context")
    run.add_argument("--scheduler-name", action="append", metavar="NAME", help="a schedulerName to own (repeatable)")
    run.add_argument("--levels", metavar="KEYS", help="topology levels, broad to narrow, comma-separated label keys")
    run.add_argument("--metrics-address", metavar="HOST:PORT", help="where /metrics, /healthz, /readyz listen")
    run.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="elect a leader through a Lease (default on)",
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by its YAML path, e.g. binding.concurrency=32 (repeatable)",
    )
    run.add_argument("--log-level", choices=LEVELS, default="info")
    run.add_argument("--log-format", choices=("json", "console"), default="json")

    commands.add_parser(
        "demo",
        help="place a mixed sample workload on a small embedded cluster and show where it went",
        description="Place a mixed sample workload on an embedded 2 blocks x 4 racks x 8 nodes cluster.",
    )
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    overrides = list(args.overrides)
    if args.scheduler_name:
        overrides.append(f"schedulerNames=[{','.join(args.scheduler_name)}]")
    if args.levels is not None:
        overrides.append(f"topology.levels=[{args.levels}]")
    if args.metrics_address:
        overrides.append(f"server.address={args.metrics_address}")
    if args.leader_elect is not None:
        overrides.append(f"leaderElection.enabled={'true' if args.leader_elect else 'false'}")
    return load_settings(args.config, overrides)


async def _run(settings: Settings, kubeconfig: str | None, context: str | None) -> None:
    port = KubeCluster(await connect(kubeconfig, context))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(Phalanx(settings, port).run)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    group.cancel_scope.cancel()  # leaders release their lease on the way out
                    break
    finally:
        with anyio.CancelScope(shield=True):
            await port.close()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo.main()
    if args.command == "run":
        try:
            settings = _settings(args)
        except SettingsError as error:
            return _fail(str(error), 2)
        configure(args.log_level, args.log_format)
        try:
            anyio.run(_run, settings, args.kubeconfig, args.context)
        except KubeConfigError as error:
            return _fail(str(error), 1)
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
