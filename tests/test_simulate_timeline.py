"""`phalanx simulate` over time: workloads arriving later, pods ending after their durations, a gang
that arrives on a full cluster and binds when room frees up."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from scheduler.frontends.cli import main
from scheduler.frontends.plot import plot
from scheduler.ports.sim import ManifestError
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.timeline import clock_text, parse_seconds, scheduled
from tests.sim.workloads import LEVELS, RUN_SECONDS, bare_pod, gang, job, pods, simulate

FULL = "blocks=1,racks=1,nodes=4,gpus=8"


def filling_job(seconds: int) -> dict[str, object]:
    """Four pods of 8 GPUs that take the whole of FULL for ``seconds``, then succeed."""
    return job("fill", 4, 8, namespace="batch", annotations={RUN_SECONDS: str(seconds)})


def test_a_gang_that_arrives_on_a_full_cluster_binds_when_room_frees_up() -> None:
    late = job("late", 2, 8, annotations={**gang("late", 2), RUN_SECONDS: "600"})
    simulation, report = simulate(([filling_job(3600)], 0.0), ([late], 600.0), shape=FULL)
    gangs = {gang.key: gang for gang in report.gangs}
    fill = gangs["pod:" + next(key for key in report.bound if "fill" in key)]
    waited = gangs["pfn:ml/late"]
    assert (waited.arrived, waited.state) == (600.0, "Finished")
    assert waited.bound_at == pytest.approx(3600, abs=1)  # when the filling Job's pods succeeded
    assert waited.wait == pytest.approx(3000, abs=1)
    assert waited.finished_at == pytest.approx(4200, abs=1)
    assert fill.finished_at == pytest.approx(3600, abs=1)
    # Full until the filling Job ended, then half full, then empty.
    assert [(round(at), gpus) for at, gpus in report.usage] == [(0, 32), (3600, 16), (4200, 0)]
    assert report.simulated_seconds == pytest.approx(4200, abs=1)
    assert {pod["status"]["phase"] for pod in pods(simulation.store).values()} == {"Succeeded"}


def test_a_pod_ends_at_its_active_deadline_and_its_run_seconds_only_if_it_may_complete() -> None:
    deadline = bare_pod("team", "deadline", 1, activeDeadlineSeconds=300)
    finishes = bare_pod("team", "finishes", 1, annotations={RUN_SECONDS: "120"}, restartPolicy="OnFailure")
    restarted = bare_pod("team", "restarted", 1, annotations={RUN_SECONDS: "120"})  # restartPolicy Always
    simulation, report = simulate(([deadline, finishes, restarted], None))
    status = {key: pod["status"] for key, pod in pods(simulation.store).items()}
    assert (status["team/deadline"]["phase"], status["team/deadline"]["reason"]) == ("Failed", "DeadlineExceeded")
    assert status["team/finishes"]["phase"] == "Succeeded"
    assert status["team/restarted"]["phase"] == "Running"  # its kubelet starts the containers again
    history = simulation.history.pods
    assert (history["team/finishes"].ended or 0) - (history["team/finishes"].bound or 0) == pytest.approx(120)
    assert (history["team/deadline"].ended or 0) - (history["team/deadline"].bound or 0) == pytest.approx(300)
    assert report.gpu_allocation == pytest.approx(1 / 64)  # the one left running


def test_a_pod_created_bound_to_a_node_without_room_is_rejected_as_a_kubelet_rejects_it() -> None:
    """No scheduler checks a pod created with ``nodeName``: the node's kubelet does. The sandbox ran two 8-GPU pods
    on one 8-GPU node, and the views showed it with -8 GPUs free."""
    first = bare_pod("team", "first", 8, nodeName="b0-r0-n0", schedulerName="default-scheduler")
    second = bare_pod("team", "second", 8, nodeName="b0-r0-n0", schedulerName="default-scheduler")
    simulation, report = simulate(([first, second], None))
    status = {key: pod["status"] for key, pod in pods(simulation.store).items()}
    assert status["team/first"]["phase"] == "Running"
    assert (status["team/second"]["phase"], status["team/second"]["reason"]) == ("Failed", "OutOfnvidia.com/gpu")
    assert status["team/second"]["message"] == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, capacity: 8"
    )
    assert report.gpu_allocation == pytest.approx(8 / 64)  # a rejected pod holds no room


def test_the_clock_stops_at_until_when_something_would_go_on_for_ever() -> None:
    """A Deployment whose pods have a deadline makes new ones for ever: the run ends at ``until``."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "serving"},
        "spec": {"replicas": 1, "template": {"spec": {**bare_pod("x", "x", 1)["spec"], "activeDeadlineSeconds": 600}}},
    }
    simulation, report = simulate(([deployment], None), until=3600)
    assert report.until_reached and report.simulated_seconds <= 3600
    made = pods(simulation.store).values()
    assert len(made) == 6  # a pod every 600 s: one running, five that failed at their deadline
    assert sum(1 for pod in made if pod["status"]["phase"] == "Failed") == 5


def test_times_are_seconds_or_durations_and_a_bad_one_is_one_line() -> None:
    assert [parse_seconds(text, what="t") for text in ("600", "90s", "10m", "1h30m", "2d", "0.5")] == [
        600, 90, 600, 5400, 172800, 0.5]  # fmt: skip
    with pytest.raises(ManifestError) as bad:
        parse_seconds("soon", what="--workload x.yaml@soon")
    assert str(bad.value) == (
        "--workload x.yaml@soon: 'soon' is not a time; give seconds (600) or a duration such as 90s, 10m, 1h30m"
    )
    assert scheduled("inference.yaml@10m").at == 600 and scheduled("inference.yaml").at == 0
    assert clock_text(3725) == "1:02:05" and clock_text(None) == "-"


def test_a_file_whose_name_has_an_at_sign_is_taken_whole(tmp_path: Path) -> None:
    named = tmp_path / "team@night.yaml"
    named.write_text("")
    assert scheduled(str(named)).path == str(named) and scheduled(str(named)).at == 0


def test_a_bad_run_seconds_is_refused_before_anything_runs() -> None:
    broken = job("train", 2, 8, annotations={RUN_SECONDS: "an hour"})
    with pytest.raises(ManifestError) as refused:
        Simulation(Settings(levels=LEVELS)).add_objects([broken], at=600, source="train.yaml")
    assert str(refused.value) == (
        "train.yaml: pod 'of Job train': simulate.phalanx.dev/run-seconds must be a number of seconds, got 'an hour'"
    )


# -- the command ----------------------------------------------------------------------------------------


def write(path: Path, *objects: object) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_simulate_a_timeline_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill = write(tmp_path / "fill.yaml", filling_job(1800))
    late = write(tmp_path / "late.yaml", job("late", 4, 8, annotations=gang("late", 4)))
    assert main(["simulate", "--cluster", FULL, "--workload", f"{fill}@0", f"{late}@10m"]) == 0
    out = capsys.readouterr().out
    assert "GANG                  STATE    BOUND  MIN   ARRIVED BOUND AT   WAITED FINISHED  WHERE" in out
    assert "pfn:ml/late [A]       Bound        4    4   0:10:00  0:30:00  0:20:00        -  block=b0 rack=b0-r0" in out
    assert out.count("Finished     1    1   0:00:00  0:00:00  0:00:00  0:30:00  block=b0 rack=b0-r0") == 4
    assert "peak 100.0% · 0:30:00 simulated" in out
    assert main(["simulate", "--cluster", FULL, "--workload", f"{fill}@0", f"{late}@10m", "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    late_gang = next(gang for gang in report["gangs"] if gang["key"] == "pfn:ml/late")
    assert (late_gang["arrived"], late_gang["wait_seconds"]) == (600.0, 1200.0)
    assert report["gpu_allocation_over_time"] == [[0.0, 1.0], [1800.0, 1.0]]  # one ended and one bound at 0:30


def png_height(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[20:24], "big")  # IHDR: width, then height


def test_a_timeline_plot_draws_utilisation_over_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill = write(tmp_path / "fill.yaml", filling_job(1800))
    picture = tmp_path / "timeline.png"
    assert main(["simulate", "--cluster", FULL, "--workload", f"{fill}@5m", "--plot", str(picture)]) == 0
    capsys.readouterr()
    _, snapshot = simulate(([filling_job(1800)], None), shape=FULL, kubelets=False)  # nothing ends: no timeline
    racks_only = tmp_path / "racks.png"
    plot(snapshot, LEVELS, racks_only)
    assert not snapshot.timeline and png_height(picture) > png_height(racks_only) + 200  # the panel below


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--workload", "x.yaml@soon"], "--workload x.yaml@soon: 'soon' is not a time"),
        (["simulate", "--until", "-5"], "--until: '-5' must be zero or more seconds"),
        (["serve", "--workload", "{fill}@60"], "@60: serve takes files as they are (it has no simulated clock"),
    ],
)
def test_bad_times_are_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill = write(tmp_path / "fill.yaml", filling_job(60))
    assert main([part.format(fill=fill) for part in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("phalanx: ") and message in err


def test_a_job_that_ran_out_of_retries_is_failed() -> None:
    retried = job("retried", 2, 8, annotations=gang("retried", 2), backoffLimit=2)
    retried["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 600
    _, report = simulate(([retried], 0.0))
    (failed,) = report.gangs
    # Two pods failed at their deadline, two more tried and failed: 4 failures, more than its limit of 2.
    assert (failed.state, failed.bound, failed.min) == ("Failed", 2, 2)
    assert failed.finished_at == pytest.approx(1200, abs=1)
    assert len(report.bound) == 4


def test_a_job_deleted_before_its_gang_could_run_is_reported_deleted() -> None:
    impatient = job("impatient", 4, 8, annotations=gang("impatient", 4), activeDeadlineSeconds=900)
    _, report = simulate(([filling_job(3600)], 0.0), ([impatient], 60.0), shape=FULL)
    deleted = {gang.key: gang for gang in report.gangs}["pfn:ml/impatient"]
    # The Job's own deadline passed while its gang waited for room: the Job deleted its pods.
    assert (deleted.state, deleted.bound, deleted.reason) == ("Deleted", 0, "its pods were deleted")
    assert deleted.arrived == 60.0 and deleted.bound_at is None
    assert not any("impatient" in pod for pod in report.bound)


def test_a_later_file_arrives_at_its_time_whatever_is_still_arriving() -> None:
    many = [bare_pod("team", f"p-{i}", 0) for i in range(20)]  # arriving 0:00:00 to 0:00:19
    late = job("late", 1, 8, annotations=gang("late", 1))
    _, report = simulate((many, 0.0), ([late], 10.0))
    assert {gang.key: gang.arrived for gang in report.gangs}["pfn:ml/late"] == 10.0


def test_the_clock_goes_to_until_when_it_stops_there() -> None:
    _, report = simulate(([filling_job(7200)], 0.0), until=1800)
    assert report.until_reached and report.simulated_seconds == 1800


def test_pods_the_api_server_refuses_are_said_once_with_the_job_that_made_them() -> None:
    bad = job("bad", 2, 8)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    other = job("other", 1, 1, annotations={RUN_SECONDS: "60"}, completions=3)
    _, report = simulate(([bad, other], 0.0))
    assert len(report.refused) == 1 and report.refused[0].startswith("Job 'bad' made Pod 'bad-*', which the API")


def test_objects_due_after_until_are_counted_and_a_run_with_no_pods_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill = write(tmp_path / "fill.yaml", filling_job(60))
    assert main(["simulate", "--cluster", FULL, "--workload", f"{fill}@2d", "--until", "1d"]) == 0
    out = capsys.readouterr().out
    assert "(no gangs: no pod with a schedulerName Phalanx owns was created)" in out
    assert "1 object(s) due after --until never arrived." in out


def test_a_workload_object_named_by_generate_name_gets_a_name_as_the_api_server_gives_one() -> None:
    unnamed = job("x", 1, 8)
    unnamed["metadata"] = {"generateName": "sweep-", "namespace": "ml"}
    simulation, report = simulate(([unnamed], None))
    (pod,) = pods(simulation.store).values()
    assert re.fullmatch("sweep-[bcdfghjklmnpqrstvwxz2456789]{5}", pod["metadata"]["labels"]["job-name"])
    assert len(report.bound) == 1
