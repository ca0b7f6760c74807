"""The ``phalanx`` command: ``run``, ``simulate``, ``serve``, ``dry-run`` and ``explain``.

Every failure a user can cause (a bad flag, a missing or malformed file, an unusable kubeconfig, an
unreachable cluster) ends in one readable line on stderr and a non-zero exit status, never a traceback:
2 for a bad command line, configuration or input file, 1 when the cluster cannot be used or the
object asked about does not exist.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import structlog

from scheduler import __version__
from scheduler.app import Phalanx
from scheduler.gangs import SettingsError
from scheduler.httpd import ListenError
from scheduler.logs import LEVELS, configure
from scheduler.ports.errors import Forbidden, PortError
from scheduler.ports.kube import KubeCluster, KubeConfigError, connect, user_of
from scheduler.ports.kube.writers import Writers, writer_processes
from scheduler.settings import Settings, load_settings

# The other commands' modules (the emulator, the simulation, the report tables) are imported by the
# commands that use them: `phalanx run` would otherwise spend a fifth of its start importing them, and a
# scheduler's start is time its gangs wait (a restart, a new leader).
if TYPE_CHECKING:
    from scheduler.simulation.timeline import Scheduled

EXIT_USAGE, EXIT_CLUSTER = 2, 1
#: ``simulate`` stopped by ``--timeout``: its result is partial (the status ``timeout(1)`` gives).
EXIT_TIMED_OUT = 124
#: What a shell reports for a command killed by SIGPIPE (128 + 13), as `phalanx simulate | head` ends.
EXIT_BROKEN_PIPE = 141


class _VersionAction(argparse.Action):
    """``--version``: the release, ``scheduler.__version__`` (which pyproject.toml gives the package)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, help="show the version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        sys.stdout.write(f"phalanx {__version__}\n")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line in one line (with a pointer to --help), not usage plus error."""

    #: The command's own parsers, by name (on the top-level parser).
    commands: Mapping[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: None = None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse's, but an argument no command knows is reported by the command it was given to, so
        that the pointer to --help is that command's (``phalanx run --help``)."""
        found, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self.commands.get(getattr(found, "command", None) or "", self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return found


class UserError(Exception):
    """A problem the user can fix; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _settings_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--config", metavar="FILE", help="YAML configuration file (schema in the README)")
    command.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by its YAML path, e.g. topology.levels=[example.com/rack,kubernetes.io/hostname]",
    )
    command.add_argument(
        "--levels", metavar="KEYS", help="topology levels, broad to narrow, comma-separated label keys"
    )
    command.add_argument(
        "--scheduler-name", action="append", metavar="NAME", help="a schedulerName to own (repeatable)"
    )


def _cluster_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    command.add_argument("--context", metavar="NAME", help="kubeconfig context")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="phalanx",
        description="Phalanx: an all-or-nothing, topology-aware gang scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.commands = commands.choices

    _run_command(commands)
    _simulate_command(commands)
    _serve_command(commands)
    _dry_run_command(commands)
    _explain_command(commands)
    return parser


def _run_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``phalanx run``: the scheduler against a cluster."""
    run = commands.add_parser(
        "run",
        help="run the scheduler against a cluster (in-cluster credentials unless --kubeconfig is given)",
        description="Run the scheduler. Settings come from --config, then the flags, then each --set.",
    )
    _settings_flags(run)
    run.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use instead of the in-cluster account")
    run.add_argument("--context", metavar="NAME", help="kubeconfig context")
    run.add_argument("--metrics-address", metavar="HOST:PORT", help="where /metrics, /healthz, /readyz listen")
    run.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="elect a leader through a Lease (default on)",
    )
    run.add_argument("--log-level", choices=LEVELS, default="info")
    run.add_argument("--log-format", choices=("json", "console"), default="json")


def _simulate_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``phalanx simulate``: the real scheduler on an embedded cluster."""
    simulate = commands.add_parser(
        "simulate",
        help="run the scheduler on an embedded cluster until nothing more can be placed",
        description=(
            "Run the real scheduler on an in-memory cluster until no further progress is possible. With no "
            "arguments: 2 blocks x 4 racks x 8 nodes of 8 GPUs, and a sample workload in every input format."
        ),
    )
    _workload_flags(simulate)
    simulate.add_argument(
        "--output", choices=("table", "json"), default="table", help="a table for people (default), or one JSON object"
    )
    simulate.add_argument(
        "--plot", metavar="FILE.png", help="draw the racks with each GPU coloured by gang, and GPUs in use over time"
    )
    simulate.add_argument(
        "--serve",
        nargs="?",
        const="127.0.0.1:10251",
        metavar="HOST:PORT",
        help="then serve the live view's page over the run's timeline until Ctrl-C (default 127.0.0.1:10251)",
    )
    simulate.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    simulate.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help=f"stop after this long, in wall seconds, and exit {EXIT_TIMED_OUT} with a partial result (default 300)",
    )
    simulate.add_argument(
        "--until",
        default="30d",
        metavar="WHEN",
        help="how far the simulated clock may go: seconds, or a duration such as 12h (default %(default)s)",
    )
    simulate.add_argument(
        "--controller-gangs",
        choices=("on", "off"),
        default="on",
        help="whether LeaderWorkerSet and PyTorchJob controllers create a PodGroup per gang, as they do when "
        "set up for gang scheduling (default %(default)s)",
    )
    _settings_flags(simulate)


def _serve_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``phalanx serve``: an emulated cluster for kubectl, Phalanx scheduling in it."""
    serve = commands.add_parser(
        "serve",
        help="an emulated cluster with Phalanx scheduling in it, for kubectl (writes a kubeconfig)",
        description=(
            "Serve an in-memory Kubernetes API with Phalanx scheduling in it, and write a kubeconfig for it, so "
            "that kubectl apply, get -o wide, describe and get events can be tried on a laptop. The default "
            "cluster is 2 blocks x 4 racks x 8 nodes of 8 GPUs. Runs until Ctrl-C."
        ),
    )
    _workload_flags(serve, timed=False)
    serve.add_argument(
        "--address", default="127.0.0.1:8080", metavar="HOST:PORT", help="where the API listens (default %(default)s)"
    )
    serve.add_argument(
        "--view",
        metavar="HOST:PORT",
        help="also serve Phalanx's live view (and /metrics) there, e.g. 127.0.0.1:10251 (default: not served)",
    )
    serve.add_argument(
        "--write-kubeconfig",
        default="phalanx-sandbox.kubeconfig",
        metavar="FILE",
        help="where to write the kubeconfig for kubectl (default %(default)s)",
    )
    serve.add_argument("--log-level", choices=LEVELS, default="info")
    _settings_flags(serve)


def _dry_run_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``phalanx dry-run``: where a cluster's pending gangs would go, nothing written."""
    dry_run = commands.add_parser(
        "dry-run",
        help="show where a cluster's pending gangs would go, without writing to it",
        description=(
            "Read nodes, pods and group objects from a cluster (through a client that refuses every write), "
            "run one scheduling pass on a copy, and show where each pending gang would go or why it cannot."
        ),
    )
    _cluster_flags(dry_run)
    dry_run.add_argument("-n", "--namespace", metavar="NS", help="only gangs in this namespace")
    dry_run.add_argument(
        "--all-schedulers", action="store_true", help="treat every pending pod as Phalanx's, whatever it names"
    )
    dry_run.add_argument(
        "--output", choices=("table", "json"), default="table", help="a table for people (default), or one JSON object"
    )
    _settings_flags(dry_run)


def _explain_command(commands: argparse._SubParsersAction[_Parser]) -> None:
    """``phalanx explain``: why one pod or group is pending."""
    explain = commands.add_parser(
        "explain",
        help="explain why one pod or group is pending, with the numbers",
        description="Explain one pod's or group object's gang: what it needs, what Phalanx would do, and why.",
    )
    explain.add_argument(
        "target", metavar="NAMESPACE/NAME", help="a pod, a group object (PodGroup, ...), or a gang (pfn:team/big)"
    )
    _cluster_flags(explain)
    _settings_flags(explain)


def _workload_flags(command: argparse.ArgumentParser, *, timed: bool = True) -> None:
    """``--cluster`` and ``--workload``; ``timed``: a workload file may arrive later (``FILE@WHEN``)."""
    command.add_argument(
        "--cluster",
        metavar="FILE|SHAPE",
        help="Node manifests (multi-document YAML or a List), or a shape such as blocks=2,racks=4,nodes=8,gpus=8",
    )
    kinds = (
        "manifest files, or folders of them: Pods, group objects, Jobs, JobSets, LeaderWorkerSets, PyTorchJobs, "
        "TrainJobs, Deployments, StatefulSets (pods without schedulerName are Phalanx's)"
    )
    command.add_argument(
        "--workload",
        metavar="FILE[@WHEN]" if timed else "FILE",
        nargs="+",
        action="extend",
        default=[],
        help=kinds + ("; FILE@WHEN, e.g. inference.yaml@600 or @10m, arrives later" if timed else ""),
    )


#: The files of a folder given as a workload that are read, as kubectl reads a folder.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _read_workloads(paths: list[str]) -> list[tuple[Scheduled, list[dict[str, Any]]]]:
    """Each ``--workload`` argument (a file, or a folder of them): when it arrives, and its objects."""
    from scheduler.ports.sim.builders import ManifestError, read_manifest_file  # noqa: PLC0415
    from scheduler.simulation.timeline import scheduled  # noqa: PLC0415

    workloads = []
    for value in paths:
        when = scheduled(value)
        if not when.path.strip():
            raise ManifestError(f"--workload {value!r}: no file named; give a file of manifests")
        folder = Path(when.path)
        if folder.is_dir():  # as `kubectl apply -f DIR` reads one: its manifest files, in name order
            files = sorted(path for path in folder.iterdir() if path.suffix in MANIFEST_SUFFIXES and path.is_file())
            if not files:
                raise ManifestError(f"--workload {value}: a folder with no .yaml, .yml or .json file")
            workloads.append((when, [obj for path in files for obj in read_manifest_file(str(path))]))
            continue
        workloads.append((when, read_manifest_file(when.path)))
    return workloads


def _settings(args: argparse.Namespace) -> Settings:
    flags: list[tuple[str, str, object]] = []
    if args.scheduler_name:
        names = [name.strip() for value in args.scheduler_name for name in value.split(",") if name.strip()]
        flags.append(("--scheduler-name", "schedulerNames", names))
    if args.levels is not None:
        flags.append(("--levels", "topology.levels", args.levels))
    if getattr(args, "metrics_address", None):
        flags.append(("--metrics-address", "server.address", args.metrics_address))
    if getattr(args, "leader_elect", None) is not None:
        flags.append(
            (
                "--leader-elect" if args.leader_elect else "--no-leader-elect",
                "leaderElection.enabled",
                args.leader_elect,
            )
        )
    return load_settings(args.config, list(args.overrides), flags)


# -- run ------------------------------------------------------------------------------------------


async def _run(settings: Settings, kubeconfig: str | None, context: str | None) -> None:
    connection = await connect(kubeconfig, context)
    processes = writer_processes(settings.binding.writer_processes) if connection.origin else 0
    port = Writers(KubeCluster(connection), processes)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signal, group.cancel_scope)
            # Writers start once this replica leads (a follower starts none): at once without an election.
            group.start_soon(functools.partial(port.run, at_once=not settings.leader_election.enabled))
            group.start_soon(Phalanx(settings, port, freeze_heap=True).run)
    finally:
        with anyio.CancelScope(shield=True):
            await port.close()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()  # leaders release their lease on the way out
            return


def _command_run(args: argparse.Namespace, settings: Settings) -> int:
    configure(args.log_level, args.log_format)
    _warn_renamed(settings)
    try:
        anyio.run(_run, settings, args.kubeconfig, args.context)
    except (ListenError, BaseExceptionGroup) as error:
        leaf = _leaf(error)
        if not isinstance(leaf, ListenError):
            raise
        flag = "--metrics-address" if args.metrics_address else "server.address"
        raise UserError(f"{flag} {leaf}", EXIT_CLUSTER) from None
    return 0


# -- simulate -------------------------------------------------------------------------------------


def cluster_nodes(value: str | None) -> list[dict[str, Any]]:
    """``--cluster``: a file of Node manifests, or a shape; the embedded default when not given."""
    from scheduler.frontends.samples import default_cluster  # noqa: PLC0415
    from scheduler.ports.sim.builders import ClusterShape, ManifestError, read_manifest_file  # noqa: PLC0415

    if value is None:
        return default_cluster()
    wanted = "give a file of Node manifests or a shape such as blocks=2,racks=4,nodes=8,gpus=8"
    if not value.strip():
        raise ManifestError(f"--cluster is empty: {wanted}")
    if Path(value).is_dir():
        raise ManifestError(f"--cluster {value}: a folder; {wanted}")
    if Path(value).exists():
        objects = read_manifest_file(value)
        strays = [obj for obj in objects if obj.get("kind") not in _CLUSTER_KINDS]
        if strays:
            name = (strays[0].get("metadata") or {}).get("name", "?")
            raise ManifestError(
                f"{value}: {strays[0].get('kind')} {name!r} is not a Node; --cluster takes Nodes only (and the "
                "DeviceClasses and ResourceSlices of their devices)"
            )
        if not any(obj.get("kind") == "Node" for obj in objects):
            raise ManifestError(f"{value}: no Node in the file")
        return objects
    if "=" in value:
        return ClusterShape.parse(value).manifests()
    raise ManifestError(f"--cluster {value}: no such file, and not a shape such as blocks=2,racks=4,nodes=8,gpus=8")


#: How a pending gang's reason says that a DeviceClass its claims name does not exist.
_MISSING_CLASS = re.compile(r"waits for DeviceClass (\S+) to exist")

#: What a ``--cluster`` file may hold: the nodes, and the devices they publish (DRA).
_CLUSTER_KINDS = frozenset({"Node", "DeviceClass", "ResourceSlice"})


def _command_simulate(args: argparse.Namespace, settings: Settings) -> int:
    from scheduler.frontends.plot import plot  # noqa: PLC0415
    from scheduler.frontends.render import Progress, table  # noqa: PLC0415
    from scheduler.frontends.samples import default_workload  # noqa: PLC0415
    from scheduler.simulation.controllers import EXPANDED  # noqa: PLC0415
    from scheduler.simulation.driver import Simulation  # noqa: PLC0415
    from scheduler.simulation.timeline import Scheduled, parse_seconds  # noqa: PLC0415

    if args.plot:
        _require_plotting(args.plot)
    until = parse_seconds(args.until, what="--until")
    nodes = cluster_nodes(args.cluster)
    workloads = _read_workloads(args.workload)
    if not args.workload:
        workloads = [(Scheduled("the embedded sample"), default_workload())]
    nodes += [obj for _, objects in workloads for obj in objects if obj.get("kind") == "Node"]
    if args.serve is not None:
        _check_address("--serve", args.serve)
        _check_free("--serve", args.serve)  # before the run, which may take minutes, not after it
    simulation = Simulation(settings, seed=args.seed, controller_gangs=args.controller_gangs == "on", until=until)
    if args.serve is not None:
        simulation.record_frames()
    simulation.add_nodes(nodes)
    for when, objects in sorted(workloads, key=lambda workload: workload[0].at):
        simulation.add_objects([obj for obj in objects if obj.get("kind") != "Node"], at=when.at, source=when.path)
    progress = Progress() if args.output == "table" else None
    try:
        report = anyio.run(lambda: simulation.run(timeout=args.timeout, progress=progress))
    finally:
        if progress is not None:
            progress.close()
    for line in report.refused:
        sys.stderr.write(f"phalanx: skipped {line}\n")
    if any(line.endswith(": not simulated") for line in report.refused):
        sys.stderr.write(
            "phalanx: simulate takes pods, nodes, priority classes and group objects, and expands "
            f"{', '.join(EXPANDED.values())}; it skips other kinds\n"
        )
    missing = sorted({name for gang in report.gangs for name in _MISSING_CLASS.findall(gang.reason)})
    if missing:  # the workload claims devices of classes the cluster does not publish: say how to publish them
        from scheduler.ports.sim.builders import DRIVERS  # noqa: PLC0415

        drivers = {class_name: driver for driver, (_, class_name, _) in DRIVERS.items()}
        shape = "dra=" + "+".join(f"{drivers.get(name, name)}:{1 if name in drivers else 8}" for name in missing)
        sys.stderr.write(
            f"phalanx: the workload claims devices of DeviceClass {', '.join(missing)}, which the cluster does not "
            f"have; give it devices with --cluster blocks=2,racks=4,nodes=8,gpus=0,{shape} (or a --cluster file "
            "with the DeviceClasses and ResourceSlices of its nodes)\n"
        )
    if args.plot:
        plot(report, settings.levels, args.plot)
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        source = "the embedded sample" if not args.workload else ", ".join(args.workload)
        gangs = len(report.gangs)
        title = f"Phalanx simulate: {report.nodes} nodes, {gangs} gang(s) from {source}, seed {args.seed}"
        print(table(report, title=title, levels=settings.levels))
        if args.plot:
            print(f"plot written to {args.plot}")
    if report.timed_out:
        sys.stderr.write(f"phalanx: stopped after --timeout {args.timeout:g}s; the result is partial\n")
    if args.serve is not None and simulation.frames is not None:
        source = "the embedded sample" if not args.workload else ", ".join(args.workload)
        _serve_timeline(args.serve, simulation.frames, f"{report.nodes} nodes, {source}", simulation.frames_cut)
    return EXIT_TIMED_OUT if report.timed_out else 0


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number of seconds")
    return seconds


def _check_address(flag: str, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"{flag} {address}: give it as HOST:PORT, e.g. 127.0.0.1:8080 (a port up to 65535)")


def _check_free(flag: str, address: str) -> None:
    """Refuse an address nothing could listen on now (taken, or not this machine's), as serving it would."""
    import socket  # noqa: PLC0415

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as error:
            raise UserError(f"{flag} {address}: {error.strerror or error}", EXIT_CLUSTER) from None


def _serve_timeline(address: str, frames: list[tuple[float, bytes]], title: str, cut: bool) -> None:
    """Serve the run's pictures until Ctrl-C (``frontends/playback.py``)."""
    from scheduler.frontends.playback import playback_routes, serve_playback  # noqa: PLC0415
    from scheduler.httpd import ListenError  # noqa: PLC0415

    def started(url: str) -> None:
        more = f" (the first {len(frames)} moments)" if cut else ""
        print(f"The run's timeline{more}: open {url} (Ctrl-C stops serving it)", flush=True)

    async def serving() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(serve_playback, playback_routes(frames, title=title, cut=cut), address, started)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    group.cancel_scope.cancel()
                    break

    try:
        anyio.run(serving)
    except (ListenError, BaseExceptionGroup) as error:
        leaf = _leaf(error) if isinstance(error, BaseExceptionGroup) else error
        if not isinstance(leaf, ListenError):
            raise
        raise UserError(f"--serve {address}: {str(leaf).split(': ', 1)[-1]}", EXIT_CLUSTER) from None


def _require_plotting(path: str) -> None:
    """Refuse before the run, not after it, a plot that cannot be drawn or written."""
    from scheduler.frontends.plot import INSTALL_HINT  # noqa: PLC0415

    try:
        from matplotlib.backend_bases import FigureCanvasBase  # noqa: PLC0415
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    suffix = Path(path).suffix.lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise UserError(f"--plot {path}: matplotlib cannot write .{suffix} files; name a .png, .svg or .pdf file")
    folder = Path(path).parent
    if not folder.is_dir():
        raise UserError(f"--plot {path}: there is no folder {folder}")


# -- serve ------------------------------------------------------------------------------------------


def _command_serve(args: argparse.Namespace, settings: Settings) -> int:
    from scheduler.frontends.sandbox import Sandbox, serve  # noqa: PLC0415
    from scheduler.httpd import ListenError  # noqa: PLC0415

    configure(args.log_level, "console")
    _warn_renamed(settings)
    _check_address("--address", args.address)
    host, _, port = args.address.rpartition(":")
    if args.view is not None:
        _check_address("--view", args.view)
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write(
            f"phalanx: warning: the sandbox asks for no credentials, and {host} is not loopback: anyone who can "
            "reach it can change it\n"
        )
    nodes = cluster_nodes(args.cluster)
    # FILE@WHEN: the file is there, the name with its @ is not (a name with an @ that is not there at all is
    # "no such file", as for simulate).
    timed = next(
        (text for text in args.workload if not Path(text).exists() and Path(text.rpartition("@")[0]).is_file()),
        None,
    )
    if timed is not None:
        raise UserError(f"--workload {timed}: serve takes files as they are (it has no simulated clock: times are "
                        "for simulate); apply the later objects with kubectl when you want them")  # fmt: skip
    workloads = _read_workloads(args.workload)
    workload = [obj for _, objects in workloads for obj in objects]
    nodes += [obj for obj in workload if obj.get("kind") == "Node"]
    objects = [obj for obj in workload if obj.get("kind") != "Node"]
    kubeconfig = Path(args.write_kubeconfig)
    if not kubeconfig.parent.is_dir():
        raise UserError(f"--write-kubeconfig {args.write_kubeconfig}: no directory {kubeconfig.parent} to write it in")

    def started(sandbox: Sandbox) -> None:
        print(
            f"Phalanx sandbox: an emulated Kubernetes API at {sandbox.url} with {sandbox.nodes} nodes, "
            f"Phalanx scheduling in it.\nkubeconfig written to {sandbox.kubeconfig}. Try:\n"
            f"  export KUBECONFIG={sandbox.kubeconfig.resolve()}\n"
            "  kubectl apply -f examples/pfn/training-gang.yaml     # from a checkout of Phalanx's repository\n"
            "  kubectl get pods -n team-a -o wide\n"
            "  kubectl describe pod -n team-a resnet-worker-0\n"
            + (f"Phalanx's live view: open {sandbox.view}\n" if sandbox.view is not None else "")
            + "Ctrl-C stops it (bound pods stay Pending: nothing runs them).",
            flush=True,
        )

    try:
        anyio.run(
            lambda: serve(
                settings,
                nodes,
                objects,
                host=host,
                port=int(port),
                kubeconfig=kubeconfig,
                started=started,
                warn=lambda line: sys.stderr.write(f"phalanx: skipped {line}\n"),
                view=args.view,
            )
        )
    except (OSError, BaseExceptionGroup) as error:
        leaf = _leaf(error)
        if isinstance(leaf, ListenError):
            raise UserError(f"--view {args.view}: {str(leaf).split(': ', 1)[-1]}", EXIT_CLUSTER) from None
        if not isinstance(leaf, OSError):
            raise
        if leaf.filename is not None:  # the kubeconfig could not be written (a directory, no permission)
            raise UserError(f"--write-kubeconfig {args.write_kubeconfig}: {leaf.strerror or leaf}") from None
        raise UserError(f"--address {args.address}: {leaf.strerror or leaf}", EXIT_CLUSTER) from None
    return 0


# -- dry-run and explain ----------------------------------------------------------------------------


def _command_dry_run(args: argparse.Namespace, settings: Settings) -> int:
    from scheduler.frontends.dryrun import dry_run, read_real_cluster  # noqa: PLC0415
    from scheduler.frontends.render import table  # noqa: PLC0415

    copy = anyio.run(read_real_cluster, args.kubeconfig, args.context)
    report = anyio.run(lambda: dry_run(copy, settings, namespace=args.namespace, all_schedulers=args.all_schedulers))
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
        return 0
    scope = f" in namespace {args.namespace}" if args.namespace else ""
    title = f"Phalanx dry-run against {copy.server}: {len(report.gangs)} pending gang(s){scope}; nothing was written"
    print(table(report, title=title, levels=settings.levels, would=True))
    return 0


def _command_explain(args: argparse.Namespace, settings: Settings) -> int:
    from scheduler.frontends.dryrun import read_real_cluster  # noqa: PLC0415
    from scheduler.frontends.explain import ExplainError, explain, parse_target  # noqa: PLC0415

    try:
        parse_target(args.target)
    except ExplainError as error:
        raise UserError(str(error)) from None
    copy = anyio.run(read_real_cluster, args.kubeconfig, args.context)
    try:
        print(anyio.run(explain, copy, settings, args.target))
    except ExplainError as error:
        raise UserError(str(error), EXIT_CLUSTER) from None
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Settings], int]] = {
    "run": _command_run,
    "simulate": _command_simulate,
    "serve": _command_serve,
    "dry-run": _command_dry_run,
    "explain": _command_explain,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = COMMANDS.get(args.command or "")
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command not in ("run", "serve"):
        configure("warning", "console")
    try:
        code = _unwrapped(command, args)
        sys.stdout.flush()  # inside the try: a reader that went away (`| head`) is met here
        return code
    except BrokenPipeError:
        # The reader of our output stopped reading, as `head` does: that is not an error worth a traceback.
        # Point stdout at /dev/null so that the interpreter's last flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except _input_errors() as error:  # evaluated only once something was raised
        return _fail(str(error), EXIT_USAGE)
    except KubeConfigError as error:
        return _fail(str(error), EXIT_CLUSTER)
    except Forbidden as error:  # it answered: the credentials are refused (401) or lack a right (403)
        status = "401 Unauthorized" if error.code == 401 else "403 Forbidden"
        who = user_of(getattr(args, "kubeconfig", None), getattr(args, "context", None))
        return _fail(f"the API server refused the request of {who} ({status}): {error}", EXIT_CLUSTER)
    except PortError as error:
        return _fail(_cluster_problem(error), EXIT_CLUSTER)
    except UserError as error:
        return _fail(str(error), error.code)
    except KeyboardInterrupt:
        return 130


def _unwrapped(command: Callable[[argparse.Namespace, Settings], int], args: argparse.Namespace) -> int:
    """Run ``command``; an error a task group wrapped alone is raised as itself, so that it is told as one line
    like any other (a group of several is left as it is: a bug, whose traceback is wanted)."""
    settings = _settings(args)
    if args.command not in ("run", "serve"):  # those configure their logging first
        _warn_renamed(settings)
    try:
        return command(args, settings)
    except BaseExceptionGroup as group:
        leaf = _leaf(group)
        if isinstance(leaf, BaseExceptionGroup):
            raise
        raise leaf from None


def _cluster_problem(error: PortError) -> str:
    """A request the cluster did not carry out, told by what went wrong: no answer, a certificate the
    kubeconfig does not trust, or an answer that was an error."""
    import ssl  # noqa: PLC0415  (loaded already by the port; imported here to name its errors)

    cause = error.__cause__
    if isinstance(cause, ssl.SSLCertVerificationError):
        advice = _CERTIFICATE_ADVICE.get(cause.verify_code, "")
        return f"the cluster's certificate is not trusted: {cause.verify_message}{advice}"
    if isinstance(cause, ssl.SSLError):
        return f"TLS with the cluster failed: {error}"
    if isinstance(cause, (OSError, TimeoutError)):
        return f"the cluster did not answer: {error}"
    if cause is None or isinstance(cause, (PortError, json.JSONDecodeError)):  # (orjson's is one)
        return f"the cluster answered with an error: {error}"  # a status it sent, or a body that was not JSON
    return f"the request to the cluster failed: {error}"


#: What to do about a server certificate, by OpenSSL's verification code.
_CERTIFICATE_ADVICE = {
    **dict.fromkeys(
        (18, 19, 20, 21),  # self-signed, or signed by an authority that is not trusted
        "; the kubeconfig's certificate-authority (in a pod, the service account's ca.crt) must be the "
        "authority that signed it",
    ),
    **dict.fromkeys(
        (62, 64),  # the name or address the client asked for is not one the certificate lists
        "; reach the server by a name its certificate lists, or name one in the kubeconfig's tls-server-name",
    ),
}


def _warn_renamed(settings: Settings) -> None:
    for change in settings.renamed:
        old, new = change.split(" -> ")
        structlog.get_logger("phalanx").warning("a setting was renamed; its old name still works", old=old, new=new)


def _leaf(error: BaseException) -> BaseException:
    """The one exception that task groups wrapped (``error`` itself when it is none, or a group of several)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _input_errors() -> tuple[type[Exception], ...]:
    """What a bad configuration, manifest or plot request raises (imported only when something failed)."""
    from scheduler.frontends.plot import PlotError  # noqa: PLC0415
    from scheduler.ports.sim.builders import ManifestError  # noqa: PLC0415

    return SettingsError, ManifestError, PlotError


def _fail(message: str, code: int) -> int:
    # One line, whatever a library put in its message: scripts grep it, humans read it at a glance.
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    sys.stderr.write(f"phalanx: {line}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
