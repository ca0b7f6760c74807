"""Every examples/ directory, run through `phalanx simulate --output json` on the default 2 x 4 x 8 cluster:
each lands exactly where the README says it will, whole, and nothing stays pending."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scheduler.frontends.cli import main
from scheduler.ports.sim.builders import read_manifest_file
from tests.test_cli import check_all_or_nothing

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: node -> pods, per example directory.
PLACEMENT: dict[str, dict[str, list[str]]] = {
    "composite-1.37": {
        "b0-r0-n0": ["serving/llm-prefill-0-0"],
        "b0-r0-n1": ["serving/llm-prefill-0-1"],
        "b0-r0-n2": ["serving/llm-decode-0-0"],
        "b0-r0-n3": ["serving/llm-decode-0-1"],
        "b0-r0-n4": ["serving/llm-prefill-1-0"],
        "b0-r0-n5": ["serving/llm-prefill-1-1"],
    },
    "pfn": {
        "b0-r0-n0": ["team-a/resnet-worker-0"],
        "b0-r0-n1": ["team-a/resnet-worker-1"],
        "b0-r0-n2": ["team-a/resnet-worker-2"],
        "b0-r0-n3": ["team-a/resnet-worker-3"],
    },
    "phalanx-composite": {
        "b0-r0-n0": ["serving/chat-prefill-0-0"],
        "b0-r0-n1": ["serving/chat-prefill-0-1"],
        "b0-r0-n2": ["serving/chat-prefill-0-2"],
        "b0-r0-n3": ["serving/chat-prefill-0-3"],
        "b0-r0-n4": ["serving/chat-decode-0-0"],
        "b0-r0-n5": ["serving/chat-decode-0-1"],
        "b0-r0-n6": ["serving/chat-decode-0-2"],
        "b0-r0-n7": ["serving/chat-decode-0-3"],
        "b0-r1-n0": ["serving/chat-prefill-1-0"],
        "b0-r1-n1": ["serving/chat-prefill-1-1"],
        "b0-r1-n2": ["serving/chat-prefill-1-2"],
        "b0-r1-n3": ["serving/chat-prefill-1-3"],
    },
    "plain": {
        "b0-r0-n0": ["team-d/notebook", "team-d/profiler"],
    },
    "podgroup-1.36": {
        "b0-r0-n0": ["ml/train-worker-0"],
        "b0-r0-n1": ["ml/train-worker-1"],
        "b0-r0-n2": ["ml/train-worker-2"],
        "b0-r0-n3": ["ml/train-worker-3"],
    },
    "podgroup-1.37": {
        "b0-r0-n0": ["ml/finetune-worker-0"],
        "b0-r0-n1": ["ml/finetune-worker-1"],
        "b0-r0-n2": ["ml/finetune-worker-2"],
        "b0-r0-n3": ["ml/finetune-worker-3"],
    },
    "preemption": {
        "b0-r0-n0": ["prod/llm-0"],
        "b0-r0-n1": ["prod/llm-1"],
        "b0-r0-n2": ["prod/llm-2"],
        "b0-r0-n3": ["prod/llm-3"],
    },
    "scheduler-plugins": {
        "b0-r0-n0": ["team-b/etl-0", "team-b/etl-1", "team-b/etl-2", "team-b/etl-3", "team-b/etl-4"],
    },
    "volcano": {
        "b0-r0-n0": ["serving/sample-0-prefill-0-0", "serving/sample-0-prefill-0-1", "team-c/mnist-ps-0"],
        "b0-r0-n1": ["serving/sample-0-prefill-1-0", "serving/sample-0-prefill-1-1"],
        "b0-r0-n2": ["serving/sample-0-decode-0-0", "serving/sample-0-decode-0-1"],
        "b0-r0-n3": ["serving/sample-0-decode-1-0", "serving/sample-0-decode-1-1"],
        "b0-r0-n4": ["team-c/mnist-worker-0"],
        "b0-r0-n5": ["team-c/mnist-worker-1"],
        "b0-r0-n6": ["team-c/mnist-worker-2"],
    },
    "workload-1.35": {
        "b0-r0-n0": ["some-ns/driver", "some-ns/worker-0-0"],
        "b0-r0-n1": ["some-ns/worker-0-1"],
        "b0-r0-n2": ["some-ns/worker-1-0"],
        "b0-r0-n3": ["some-ns/worker-1-1"],
    },
}


#: pod -> the gang it was preempted for, per example directory (none elsewhere).
PREEMPTED: dict[str, dict[str, str]] = {
    "preemption": {f"research/sweep-a-{i}": "pfn:prod/llm" for i in range(4)},
}


#: Examples of workloads arriving over time (they are run with their own command, below).
TIMELINES = ("timeline", "preemption-jobs")


#: Examples that need a cluster of their own (its ``--cluster`` shape), run below.
OWN_CLUSTER = {"dra": "blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:8"}
#: The ComputeDomain example's: four 4-GPU nodes per NVLink clique, each with IMEX channels.
COMPUTE_DOMAIN_CLUSTER = "blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:4+compute-domain.nvidia.com:1"


def test_every_example_directory_is_covered() -> None:
    covered = [*PLACEMENT, *TIMELINES, *OWN_CLUSTER]
    assert sorted(path.name for path in EXAMPLES.iterdir() if path.is_dir()) == sorted(covered)


def test_the_dra_job_binds_whole_in_one_rack_on_nodes_that_publish_devices(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--cluster", OWN_CLUSTER["dra"], "--workload", str(EXAMPLES / "dra" / "job.yaml"),
            "--output", "json"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["bound"]) == 4 and not report["pending"]
    assert len({node.rsplit("-", 1)[0] for node in report["bound"].values()}) == 1  # one rack, as it requires
    assert report["stats"]["gpu_allocation"] == 0.5  # 32 of the 64 GPUs the DRA driver publishes
    assert report["stats"]["peak_gpu_allocation"] == 0.5  # counted when the pods bound, with their claims


def test_mig_partitions_of_one_gpu_go_to_one_gang_at_a_time_as_their_counters_allow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Fourteen 1g.10gb pods take both GPUs' counters whole; the trainer's two 7g.80gb pods bind when they end."""
    argv = ["simulate", "--cluster", "blocks=1,racks=1,nodes=2,gpus=0,dra=gpu.nvidia.com:1:mig", "--workload",
            str(EXAMPLES / "dra" / "mig-partitions.yaml"), "--output", "json"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["bound"]) == 16 and not report["pending"]
    gangs = {gang["key"]: gang for gang in report["gangs"]}
    assert gangs["pfn:ml/small"]["bound_at"] < 10 and gangs["pfn:ml/trainer"]["bound_at"] >= 600
    assert report["stats"]["peak_gpu_allocation"] == 1.0  # seven 1g partitions are one GPU, not seven


def test_a_gpu_shared_by_memory_serves_four_20gi_pods_each(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--cluster", "blocks=1,racks=1,nodes=2,gpus=0,dra=gpu.nvidia.com:1:shared", "--workload",
            str(EXAMPLES / "dra" / "shared-gpu.yaml"), "--output", "json"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["bound"].values()) == ["b0-r0-n0"] * 4 + ["b0-r0-n1"] * 4 and not report["pending"]
    assert report["stats"]["gpu_allocation"] == 1.0  # four shares of 20Gi fill an 80Gi GPU


def test_the_compute_domain_jobset_binds_whole_in_one_nvlink_clique(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--cluster", COMPUTE_DOMAIN_CLUSTER, "--workload",
            str(EXAMPLES / "dra" / "computedomain-jobset.yaml"), "--output", "json"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["bound"]) == 4 and not report["pending"]
    assert len({node.rsplit("-", 1)[0] for node in report["bound"].values()}) == 1  # the shape's cliques are racks


def test_a_preempted_job_with_a_pod_failure_policy_comes_back_and_finishes_as_the_readme_shows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    where = EXAMPLES / "preemption-jobs"
    sweep_file, finetune = where / "research-sweep.yaml", where / "production-finetune.yaml"
    argv = ["simulate", "--cluster", "blocks=1,racks=1,nodes=4,gpus=8", "--workload", f"{sweep_file}@0",
            "--workload", f"{finetune}@10m"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pfn:prod/finetune   Finished     4    4   0:10:02  0:10:32  0:00:30  0:40:32" in out
    assert "pfn:research/sweep  Finished     4    4   0:00:02" in out and "1:40:32  block=b0" in out
    assert out.count("by pfn:prod/finetune") == 4
    # The same sweep without its podFailurePolicy: the preemption counts against backoffLimit 0.
    sweep = sweep_file.read_text()
    without = tmp_path / "sweep.yaml"
    docs = [doc for doc in yaml.safe_load_all(sweep) if doc]
    del docs[-1]["spec"]["podFailurePolicy"]
    without.write_text(yaml.safe_dump_all(docs))
    argv[4] = f"{without}@0"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pfn:research/sweep  Failed" in out or "pfn:research/sweep  Deleted" in out


def test_the_timeline_example_runs_as_the_readme_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """A JobSet takes most of the cluster for an hour; a LeaderWorkerSet arrives 10 minutes in: one replica
    fits at once, the other binds when the training ends."""
    where = EXAMPLES / "timeline"
    argv = ["simulate", "--cluster", str(where / "nodes.yaml"), "--workload", f"{where / 'training-jobset.yaml'}@0",
            "--workload", f"{where / 'inference-lws.yaml'}@600"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pfn:ml/pretrain                       Finished     6    6   0:00:01  0:00:01  0:00:00  1:00:01" in out
    assert "volcano:serving/llm-0-" in out and "Bound        2    2   0:10:01  0:10:01  0:00:00" in out
    assert "Bound        2    2   0:10:01  1:00:01  0:50:00        -  block=b0 rack=b0-r1" in out
    assert "10 pod(s) bound, 0 pending · GPU allocation 50.0% · peak 100.0% · 1:00:01 simulated" in out


@pytest.mark.parametrize("example", sorted(PLACEMENT))
def test_example_lands_exactly_as_documented(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(path) for path in (EXAMPLES / example).glob("*.yaml"))
    assert main(["simulate", "--workload", *files, "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    placed: dict[str, list[str]] = {}
    for pod, node in sorted(report["bound"].items()):
        placed.setdefault(node, []).append(pod)
    assert placed == PLACEMENT[example]
    assert report["preempted"] == PREEMPTED.get(example, {})
    assert report["pending"] == {}
    states = {gang["key"]: gang["state"] for gang in report["gangs"]}
    victims = set(PREEMPTED.get(example, {}).values())
    gone = {key for key, state in states.items() if state == "Deleted"}
    assert {state for key, state in states.items() if key not in gone} == {"Bound"}
    # A gang whose every pod was preempted is reported so, and why.
    assert all(gang["reason"] == f"preempted for {', '.join(sorted(victims))}" for gang in report["gangs"]
               if gang["key"] in gone) and (not gone or victims)  # fmt: skip
    workload = [obj for path in files for obj in read_manifest_file(path) if obj["kind"] == "Pod"]
    check_all_or_nothing(report, workload, gpus_per_node=8)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*/*.yaml")), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_each_example_file_creates_its_namespace_first(path: Path) -> None:
    """`kubectl apply -f examples/<dir>/` on a fresh cluster: each file works alone, in any order."""
    cluster_wide = ("PriorityClass", "Node")
    objects = [obj for obj in read_manifest_file(str(path)) if obj["kind"] not in cluster_wide]
    if not objects:
        return
    assert objects[0]["kind"] == "Namespace"
    assert {obj["metadata"].get("namespace") for obj in objects[1:]} == {objects[0]["metadata"]["name"]}


def test_a_gang_that_arrives_running_is_bound_from_when_its_pods_arrived(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/preemption: sweep-b's pods arrive on their nodes (bound by someone else before the run); its
    BOUND AT is when its minimum had arrived, not '-' beside the state Bound."""
    where = EXAMPLES / "preemption"
    argv = ["simulate", "--workload", *(str(path) for path in sorted(where.glob("*.yaml"))), "--output", "json"]
    assert main(argv) == 0
    gangs = {gang["key"]: gang for gang in json.loads(capsys.readouterr().out)["gangs"]}
    sweep = gangs["pfn:research/sweep-b"]
    assert sweep["state"] == "Bound" and sweep["bound_at"] is not None and sweep["bound_at"] >= sweep["arrived"]


def test_a_dra_example_on_a_cluster_without_its_devices_says_which_classes_are_missing_and_how_to_add_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--workload", str(EXAMPLES / "dra" / "job.yaml")]) == 0
    captured = capsys.readouterr()
    assert "waits for DeviceClass gpu.nvidia.com to exist" in " ".join(captured.out.split())
    assert (
        "phalanx: the workload claims devices of DeviceClass gpu.nvidia.com, which the cluster does not have; give "
        "it devices with --cluster blocks=2,racks=4,nodes=8,gpus=0,dra=gpu.nvidia.com:8"
    ) in captured.err
    assert main(["simulate", "--workload", str(EXAMPLES / "dra" / "job.yaml"), "--output", "json"]) == 0
    (train,) = json.loads(capsys.readouterr().out)["gangs"]
    assert (train["state"], train["min"]) == ("Pending", 4)  # the Job's gang of four, while it waits


def pfn_gang_names(node: object) -> set[str]:
    """Every PFN gang name an object or its pod templates give, at any depth."""
    found: set[str] = set()
    if isinstance(node, dict):
        name = (node.get("annotations") or {}).get("gang-scheduling.preferred.jp/gang-name")
        if isinstance(name, str):
            found.add(name)
        for value in node.values():
            found |= pfn_gang_names(value)
    elif isinstance(node, list):
        for value in node:
            found |= pfn_gang_names(value)
    return found


@pytest.mark.parametrize("folder", sorted(path.name for path in EXAMPLES.iterdir() if path.is_dir()))
def test_the_files_of_an_example_folder_name_no_pfn_gang_twice(folder: str) -> None:
    """``kubectl apply -f examples/dra/`` applies every file of the folder: two files naming one gang in one
    namespace made it one gang of both, refused as Invalid (two required topology keys disagreed)."""
    named: dict[tuple[str, str], list[str]] = {}
    for path in sorted((EXAMPLES / folder).glob("*.yaml")):
        for obj in read_manifest_file(str(path)):
            namespace = obj.get("metadata", {}).get("namespace", "default")
            for gang in pfn_gang_names(obj):
                files = named.setdefault((namespace, gang), [])
                if path.name not in files:
                    files.append(path.name)
    assert {key: files for key, files in named.items() if len(files) > 1} == {}
