"""The `phalanx` command as a user meets it: simulate, its output formats, and every way to get it wrong."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.frontends.cli import main
from scheduler.frontends.samples import default_workload, pfn_gang, pod
from scheduler.ports.sim.builders import ClusterShape
from tests.scheduler.support import refusing_server
from topology import pod_requests

GPU = "nvidia.com/gpu"
DRA = Path(__file__).resolve().parents[1] / "examples" / "dra"
TLS = Path(__file__).resolve().parent / "data" / "tls"  # certificates: no manifest


def simulate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", "--output", "json", *argv]) == 0
    out = capsys.readouterr().out
    return json.loads(out)  # exactly one JSON object, nothing else on stdout


def check_all_or_nothing(report: dict[str, Any], workload: list[dict[str, Any]], gpus_per_node: int) -> None:
    """No gang below its minimum has a bound pod, and no node holds more GPUs than it has."""
    for gang in report["gangs"]:
        if gang["state"] in ("Pending", "Invalid", "Deleted"):
            assert gang["bound"] == 0, gang
            assert gang["bound_at"] is None, gang
        else:
            assert gang["bound"] >= gang["min"], gang
    # Bare pods only: the pods controllers made are checked by the invariant monitor (tests/sim/test_controllers.py).
    gpus = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": pod_requests(p).get(GPU, 0) for p in workload}
    used: dict[str, int] = {}
    for name, node in report["bound"].items():
        used[node] = used.get(node, 0) + gpus.get(name, 0)
    assert max(used.values(), default=0) <= gpus_per_node


def test_simulate_with_no_arguments_places_every_format_and_explains_what_waits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Phalanx simulate: 64 nodes, 12 gang(s) from the embedded sample, seed 0")
    # Its 12 pods arrive a second apart, and the gang binds when the last one exists.
    assert (
        "pfn:team-a/pretrain [A]                     Bound       12   12   0:00:00  0:00:11  0:00:11        -  block=b0"
        in out
    )
    assert "pfn:team-f/huge                             Pending      0   40   0:00:59        -        -        -" in out
    # The Job's pods run half an hour and succeed; the LeaderWorkerSet's groups are gangs of their own.
    assert "pfn:team-g/sweep                            Finished     4    4   0:00:53  0:00:53  0:00:00  0:30:53" in out
    assert "volcano:serving/assistant-0-q2lrlqbffk [G]  Bound        4    4   0:00:54  0:00:54  0:00:00        -" in out
    words = " ".join(out.split())  # reasons are wrapped to the terminal
    assert "Gang team-f/huge needs 40 pods in one example.com/block; the largest block fits 18." in words
    assert "metadata.annotations[gang-scheduling.preferred.jp/gang-size] is 'two'" in out
    assert "  b1-r3  ........ ........ ........ ........ ........ ........ ........ ........" in out
    assert "57 pod(s) bound, 42 pending · GPU allocation 65.4% · peak 71.7% · 0:30:53 simulated · 64 nodes" in out


def test_simulate_json_is_the_documented_shape_and_keeps_every_gang_whole(capsys: pytest.CaptureFixture[str]) -> None:
    report = simulate_json(capsys)
    assert list(report) == [
        "bound",
        "pending",
        "gangs",
        "preempted",
        "reservations",
        "refused",
        "gpu_allocation_over_time",
        "stats",
    ]
    assert list(report["stats"]) == [
        "nodes",
        "pods_bound",
        "gpu_allocation",
        "peak_gpu_allocation",
        "simulated_seconds",
        "until_reached",
        "timed_out",
        "not_arrived",
        "seconds",
    ]
    states = {gang["key"]: gang["state"] for gang in report["gangs"]}
    assert states == {
        "pfn:team-a/pretrain": "Bound",
        "pfn:team-e/broken": "Invalid",
        "pfn:team-f/huge": "Pending",
        "pfn:team-g/sweep": "Finished",
        "phalanx:serving/chat": "Bound",
        "pod:team-d/notebook": "Bound",
        "pod:team-d/profiler": "Bound",
        "podgroup:ml/finetune-workers-0": "Bound",
        "scheduler-plugins:team-b/etl": "Bound",
        "volcano:serving/assistant-0-q2lrlqbffk": "Bound",
        "volcano:serving/assistant-1-q2lrlqbffk": "Bound",
        "volcano:serving/llm": "Bound",
    }
    gang = next(gang for gang in report["gangs"] if gang["key"] == "podgroup:ml/finetune-workers-0")
    assert gang == {
        "key": "podgroup:ml/finetune-workers-0",
        "state": "Bound",
        "bound": 4,
        "min": 4,
        "domains": {"example.com/block": "b0", "example.com/rack": "b0-r3"},
        "reason": "",
        "arrived": 31.0,
        "bound_at": 34.0,
        "finished_at": None,
        "wait_seconds": 3.0,
    }
    assert report["pending"]["team-e/broken-0"].startswith("Pod team-e/broken-0: metadata.annotations")
    assert report["stats"]["pods_bound"] == len(report["bound"]) == 57
    assert report["stats"]["simulated_seconds"] == 1853.0  # the Job's pods ended at 0:30:53
    assert report["gpu_allocation_over_time"][-1] == [1853.0, 0.6543]
    check_all_or_nothing(report, default_workload(), 8)


def test_the_same_seed_gives_the_same_placement(capsys: pytest.CaptureFixture[str]) -> None:
    first, second = simulate_json(capsys, "--seed", "7"), simulate_json(capsys, "--seed", "7")
    assert first["bound"] == second["bound"] and first["gangs"] == second["gangs"]


def test_a_partial_gang_holds_room_then_times_out_and_the_room_goes_to_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three of four members exist: the gang holds the whole cluster until its timeout, then the gang
    behind it binds. Virtual time: the run does not wait the timeout out."""
    waiting = pfn_gang("team", "waiting", 3, 8, size="4")
    for member in waiting:
        member["metadata"]["annotations"]["gang-scheduling.preferred.jp/gang-schedule-timeout-seconds"] = "60"
        del member["spec"]["schedulerName"]  # pods that name no scheduler are Phalanx's in a simulation
    behind = pfn_gang("team", "behind", 4, 8)
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump_all(waiting + behind))
    report = simulate_json(capsys, "--cluster", "blocks=1,racks=1,nodes=4,gpus=8", "--workload", str(workload))
    states = {gang["key"]: (gang["state"], gang["bound"]) for gang in report["gangs"]}
    assert states == {"pfn:team/behind": ("Bound", 4), "pfn:team/waiting": ("Pending", 0)}
    assert report["pending"]["team/waiting-0"].startswith(
        "Gang pfn:team/waiting timed out waiting for 1 member(s) that do not exist yet"
    )


def test_cluster_from_node_manifests_and_several_workload_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = tmp_path / "nodes.yaml"
    node_list = {"apiVersion": "v1", "kind": "List", "items": ClusterShape(blocks=1, racks=2, nodes=2).node_manifests()}
    nodes.write_text(yaml.safe_dump(node_list))  # as `kubectl get nodes -o yaml` prints them
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump_all(pfn_gang("team", "a", 2, 8)))
    second.write_text(yaml.safe_dump(pod("team", "solo", 4)))
    report = simulate_json(capsys, "--cluster", str(nodes), "--workload", str(first), str(second))
    assert report["stats"]["nodes"] == 4
    assert sorted(report["bound"]) == ["team/a-0", "team/a-1", "team/solo"]


def test_a_run_stopped_by_timeout_exits_124_and_says_its_result_is_partial(capsys: pytest.CaptureFixture[str]) -> None:
    """A script must be able to tell a partial result from a whole one: the status ``timeout(1)`` gives, and
    ``stats.timed_out``; the objects not reached are blamed on the timeout, not on ``--until``."""
    assert main(["simulate", "--timeout", "1e-9", "--output", "json"]) == 124
    out, err = capsys.readouterr()
    assert json.loads(out)["stats"]["timed_out"] is True
    assert err == "phalanx: stopped after --timeout 1e-09s; the result is partial\n"
    assert main(["simulate", "--timeout", "1e-9"]) == 124
    table = capsys.readouterr().out
    assert "(no gangs yet: --timeout stopped the run first)" in table
    assert "object(s) had not arrived yet when --timeout stopped the run." in table and "--until" not in table
    assert simulate_json(capsys)["stats"]["timed_out"] is False


def test_a_workload_folder_is_read_as_kubectl_reads_one(capsys: pytest.CaptureFixture[str]) -> None:
    """``--workload DIR`` takes the folder's manifest files in name order, as ``kubectl apply -f DIR`` does."""
    shape = "blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:4+compute-domain.nvidia.com:1"
    folder = simulate_json(capsys, "--cluster", shape, "--workload", str(DRA))
    files = sorted(str(path) for path in DRA.glob("*.yaml"))
    assert len(files) > 1
    one_by_one = simulate_json(capsys, "--cluster", shape, *(arg for path in files for arg in ("--workload", path)))
    assert [gang["key"] for gang in folder["gangs"]] == [gang["key"] for gang in one_by_one["gangs"]]
    assert len(folder["gangs"]) >= len(files)


def test_plot_draws_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "racks.png"
    assert main(["simulate", "--plot", str(picture)]) == 0
    assert f"plot written to {picture}" in capsys.readouterr().out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it looks like
    assert main(["simulate", "--plot", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err == "phalanx: --plot needs matplotlib: pip install 'phalanx-scheduler[plot]'\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "nowhere.yaml"], "--cluster nowhere.yaml: no such file, and not a shape such as"),
        (["--cluster", "blocks=two"], "cluster shape 'blocks=two': blocks must be a whole number"),
        (["--cluster", ""], "--cluster is empty: give a file of Node manifests or a shape such as blocks=2"),
        (["--cluster", str(DRA)], f"--cluster {DRA}: a folder; give a file of Node manifests or a shape"),
        (["--workload", str(TLS)], f"--workload {TLS}: a folder with no .yaml, .yml or .json file"),
        (["--workload", ""], "--workload '': no file named; give a file of manifests"),
        (["--workload", "missing.yaml"], "missing.yaml: No such file or directory"),
        (["--config", "missing.yaml"], "missing.yaml: No such file or directory"),
        (["--set", "binding.concurency=3"], "binding.concurency: unknown setting; did you mean 'concurrency'?"),
        (["--set", "placement.maxDomainTries=0"], "placement.maxDomainTries: must be positive, got 0"),
        (["--set", "binding.concurrency=["], "--set 'binding.concurrency=[': the value is not valid YAML at line 1"),
        (["--levels", "{"], "--levels: '{' is not a node label key"),
        (["--until", "inf"], "--until: 'inf' is not a finite number of seconds"),
        (
            ["--plot", "racks.txt"],
            "--plot racks.txt: matplotlib cannot write .txt files; name a .png, .svg or .pdf file",
        ),
        (["--plot", "no/such/folder/racks.png"], "--plot no/such/folder/racks.png: there is no folder no/such/folder"),
    ],
)
def test_bad_input_is_one_readable_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *argv]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("phalanx: ") and message in err
    assert out == ""  # refused before the run, not after it


def test_a_workload_file_that_is_not_kubernetes_objects_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: {name: x}\n")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: x, namespace: y}\n")
    assert main(["simulate", "--workload", str(broken)]) == 2
    assert capsys.readouterr().err == f"phalanx: {broken}: object 'x' has no apiVersion or kind\n"
    # An object nothing here expands is left out, by name, in one line; the rest of the file still runs.
    unknown.write_text(unknown.read_text() + "---\n" + yaml.safe_dump(pod("y", "solo", 1)))
    report = simulate_json(capsys, "--workload", str(unknown))
    assert report["bound"] == {"y/solo": "b0-r0-n0"}
    assert report["refused"] == [f"{unknown}: Gizmo 'x' (example.com/v1): not simulated"]
    assert main(["simulate", "--workload", str(unknown)]) == 0
    assert capsys.readouterr().err == (
        f"phalanx: skipped {report['refused'][0]}\n"
        "phalanx: simulate takes pods, nodes, priority classes and group objects, and expands Job, JobSet, "
        "LeaderWorkerSet, PyTorchJob, TrainJob, Deployment, StatefulSet; it skips other kinds\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-such-flag"],
        ["frobnicate"],
        ["simulate", "--output", "xml"],
        ["simulate", "--timeout", "nan"],
        ["simulate", "--timeout", "0"],
    ],
)
def test_a_bad_command_line_is_one_readable_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("phalanx") and "--help" in err


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert all(command in err for command in ("run", "simulate", "dry-run", "explain"))


@pytest.mark.parametrize("command", ["run", "simulate", "dry-run", "explain"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: phalanx {command}")


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path) -> None:
    """`phalanx simulate ... | head`: the reader goes away after a line; no BrokenPipeError traceback."""
    import subprocess  # noqa: PLC0415

    workload = tmp_path / "many.yaml"
    # About 240 KB of JSON: more than the pipe holds (64 KiB) once the reader has gone.
    workload.write_text(yaml.safe_dump_all([pod("team", f"solo-{i:04d}", 1) for i in range(300)]))
    with subprocess.Popen(
        [sys.executable, "-m", "scheduler.frontends.cli", "simulate", "--output", "json", "--workload", str(workload)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[1],
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == b"{\n"
        process.stdout.close()  # as head does once it has its lines
        errors = process.stderr.read().decode()
        assert process.wait(timeout=120) == 141, errors
    assert errors == ""


def unreachable_kubeconfig(tmp_path: Path, **cluster: Any) -> Path:
    """A kubeconfig for a server nothing listens on (port 1), with ``cluster`` fields added."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", **cluster}}],
        "users": [{"name": "alice", "user": {"token": "wrong"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "alice"}}],
    }))  # fmt: skip
    return path


def test_run_on_a_metrics_port_already_taken_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code = main(["run", "--kubeconfig", str(unreachable_kubeconfig(tmp_path)), "--metrics-address", address,
                     "--log-level", "error"])  # fmt: skip
    assert code == 1
    assert capsys.readouterr().err == f"phalanx: --metrics-address {address}: Address already in use\n"


def test_serve_told_to_write_its_kubeconfig_where_it_cannot_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = tmp_path / "no" / "such" / "kubeconfig"
    assert main(["serve", "--write-kubeconfig", str(nowhere)]) == 2
    assert (
        capsys.readouterr().err
        == f"phalanx: --write-kubeconfig {nowhere}: no directory {nowhere.parent} to write it in\n"
    )


def test_serve_refuses_a_workload_time_quoting_what_was_typed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workload", "examples/pfn/training-gang.yaml@10m"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("phalanx: --workload examples/pfn/training-gang.yaml@10m: serve takes files as they are")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "FILE[@WHEN]" not in capsys.readouterr().out  # offered to simulate only


def test_an_unknown_flag_points_to_its_own_command_s_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "phalanx run: unrecognized arguments: --bogus (see phalanx run --help)\n"


def test_a_kubeconfig_naming_a_missing_ca_file_says_which_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = unreachable_kubeconfig(tmp_path, **{"certificate-authority": "/no/such/ca.crt"})
    assert main(["dry-run", "--kubeconfig", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file: /no/such/ca.crt" in err and "does not exists" not in err, err


def test_credentials_the_server_refuses_are_told_as_a_refusal_naming_the_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server answers every request 401, as kube-apiserver answers a token it does not accept."""

    with refusing_server() as (url, sent):
        config = unreachable_kubeconfig(tmp_path)
        config.write_text(config.read_text().replace("https://127.0.0.1:1", url))
        assert main(["dry-run", "--kubeconfig", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"phalanx: the API server refused the request of user 'alice' of kubeconfig {config} "
                          "(401 Unauthorized)"), err  # fmt: skip
    assert "did not answer" not in err and err.count("\n") == 1
    assert sent and set(sent) == {"Bearer wrong"}  # the kubeconfig's token, on every request


def test_the_readme_s_demo_sample_is_what_the_demo_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The sample under "Try it" is the output of `scripts/demo` (`phalanx simulate`), line for line where it
    quotes lines, in their order; `...` stands for lines left out."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Try it", 1)[1].split("```\n", 2)[1]
    quoted = [line.rstrip() for line in block.splitlines() if line.strip() and line.strip() != "..."]
    assert main(["simulate"]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    at = 0
    for line in quoted:
        assert line in printed[at:], f"README quotes {line!r}, which the demo does not print (after line {at})"
        at = printed.index(line, at) + 1
    # The opening sample is the demo's reason for its huge gang, in the same words (wrapped there).
    opening = readme.split("in the words operators already know\nfrom kube-scheduler:\n\n```\n", 1)[1].split("```")[0]
    reasons = " ".join(" ".join(printed).split())
    for sentence in opening.splitlines():
        assert sentence in reasons, f"README's opening sample says {sentence!r}, which the demo does not"


@pytest.mark.parametrize("command", ["simulate", "serve", "dry-run", "explain"])
def test_the_readme_s_synopsis_of_a_command_lists_every_flag_its_help_lists(command: str) -> None:
    from scheduler.frontends.cli import build_parser  # noqa: PLC0415

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index(f"\nphalanx {command} ")
    synopsis = readme[start : readme.index("```", start)]
    documented = set(re.findall(r"--[a-z][a-z-]*", synopsis))
    parser = build_parser().commands[command]  # type: ignore[attr-defined]
    flags = {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}
    missing = sorted(flags - documented - {"--help"})
    assert not missing, f"README's synopsis of {command} lacks {missing}"


def test_version_names_the_installed_package_s_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and re.fullmatch(r"phalanx \d+\.\d+\.\d+\S*\n", out), out
    assert out == f"phalanx {importlib.metadata.version('phalanx-scheduler')}\n"  # the package's, as installed


def test_the_phalanx_command_starts_no_blas_threads_unless_the_operator_asks() -> None:
    """numpy's OpenBLAS would start a spinning thread per core at import (0.2 s of CPU at every start on two
    cores); an operator's own OPENBLAS_NUM_THREADS is kept."""
    count = (
        "import os, scheduler.frontends.cli; "
        "print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
    )
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    alone = subprocess.run([sys.executable, "-c", count], env=env, capture_output=True, text=True, check=True)
    assert alone.stdout.split() == ["1", "1"]
    asked = subprocess.run(
        [sys.executable, "-c", count],
        env={**env, "OPENBLAS_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert asked.stdout.split()[1] == "2"


def test_phalanx_run_loads_nothing_that_only_other_commands_or_device_selectors_need() -> None:
    """Every library `run` loads costs each start (and a leader taking over) its import: the generated
    Kubernetes client, aiohttp, the emulator, the simulation, the plots, and the CEL engine (loaded by the
    first device selector compiled) are left to whatever needs them."""
    code = "import sys, scheduler.frontends.cli, scheduler.ports.kube; print(' '.join(sys.modules))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "numpy" in loaded and "scheduler.ports.kube.cluster" in loaded  # the run path itself was imported
    heavy = ("kubernetes_asyncio", "aiohttp", "prometheus_client", "matplotlib", "cel_expr_python")
    ours = ("scheduler.ports.sim", "scheduler.simulation", "scheduler.frontends.sandbox")
    assert sorted(name for name in loaded if name.split(".")[0] in heavy or name.startswith(ours)) == []


def test_a_configuration_with_a_renamed_setting_works_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "phalanx.yaml"
    config.write_text("starvation:\n  maxHoldSeconds: 600\n")
    assert main(["simulate", "--config", str(config), "--seed", "1"]) == 0
    warning = capsys.readouterr().err
    assert "a setting was renamed; its old name still works" in warning
    assert "starvation.maxHoldSeconds" in warning and "starvation.maxReserveSeconds" in warning
