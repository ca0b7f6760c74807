"""Two replicas on one Lease: only the holder schedules, and the other takes over when it dies."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from scripts.controlplane import ControlPlane
from tests.integration.conftest import FAST
from tests.integration.support import (
    PhalanxProcess,
    bound,
    described_events,
    ensure_namespace,
    eventually,
    pods,
)
from tests.scheduler.support import gpu_pod

#: A Lease and a scheduler name of their own, so that the session's scheduler is not part of this election;
#: a lease long enough that a busy machine (the whole suite on two cores) does not lose it by accident.
OWN = (
    *FAST,
    "leaderElection.name=phalanx-handover",
    "schedulerNames=[phalanx-handover]",
    "leaderElection.leaseDurationSeconds=8",
    "leaderElection.renewDeadlineSeconds=6",
)


def holder(plane: ControlPlane) -> str:
    """Who holds the Lease; "" before a replica has created it (a slow start is not a failure)."""
    status, raw = plane.request("GET", "/apis/coordination.k8s.io/v1/namespaces/phalanx-system/leases/phalanx-handover")
    if status == 404:
        return ""
    assert status == 200, raw[:300]
    return str(json.loads(raw)["spec"].get("holderIdentity") or "")


def bound_by(plane: ControlPlane, name: str) -> str:
    """The replica that bound ``handover/<name>``: its Scheduled Event's reportingInstance."""
    pod = pods(plane, "handover")[f"handover/{name}"]
    events = eventually(
        lambda: [e for e in described_events(plane, pod) if e["reason"] == "Scheduled"], what=f"{name} Scheduled"
    )
    return str(events[0]["reportingInstance"])


def test_the_second_replica_takes_over_when_the_leader_is_killed(
    plane: ControlPlane, workdir: Path, phalanx_kubeconfig: Path
) -> None:
    ensure_namespace(plane, "handover")
    first = PhalanxProcess(workdir, phalanx_kubeconfig, name="replica-a", overrides=OWN)
    second = None
    try:
        first.wait_ready()
        eventually(lambda: holder(plane) == "replica-a", what="replica-a leading")
        second = PhalanxProcess(workdir, phalanx_kubeconfig, name="replica-b", overrides=OWN)
        second.wait_ready()  # ready means its caches are warm; it does not lead
        plane.apply(gpu_pod("before", "handover", gpus=1, scheduler="phalanx-handover"))
        eventually(lambda: "handover/before" in bound(plane, "handover"), what="bound by the leader")
        assert bound_by(plane, "before") == "replica-a"
        assert second.metric("phalanx_leader") == 0 and first.metric("phalanx_leader") == 1

        first.stop(signal.SIGKILL)  # no chance to release the Lease: the other must wait it out
        eventually(lambda: holder(plane) == "replica-b", what="replica-b leading")
        plane.apply(gpu_pod("after", "handover", gpus=1, scheduler="phalanx-handover"))
        eventually(lambda: "handover/after" in bound(plane, "handover"), what="bound by the new leader")
        assert bound_by(plane, "after") == "replica-b"
        assert second.problems() == []
    except AssertionError:
        for replica in (first, second):
            if replica is not None:
                print(f"--- {replica.name}'s log, last lines:\n{replica.log()[-4000:]}")
        raise
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_missing_lease_namespace_is_said_once_with_the_fix(
    plane: ControlPlane, workdir: Path, admin_kubeconfig: Path
) -> None:
    """`phalanx run --kubeconfig ~/.kube/config` from a laptop, with a namespace for the Lease that is not
    there (as phalanx-system is not, before the manifests are applied)."""
    lonely = PhalanxProcess(
        workdir,
        admin_kubeconfig,
        name="replica-lonely",
        overrides=(*OWN, "leaderElection.namespace=no-such-namespace", "leaderElection.retryPeriodSeconds=0.2"),
    )
    try:
        lonely.wait_ready()
        said = eventually(
            lambda: [line for line in lonely.problems() if "cannot lead" in str(line.get("event"))],
            what="the warning",
        )
        assert said[0]["event"] == (
            "cannot lead: namespace no-such-namespace for the leader-election Lease does not exist; create it "
            "(kubectl create namespace no-such-namespace), set leaderElection.namespace to one that exists, or run "
            "with --no-leader-elect. Nothing is scheduled until then."
        )
        assert lonely.metric("phalanx_leader") == 0
    finally:
        lonely.stop()
    assert len([line for line in lonely.problems() if "cannot lead" in str(line.get("event"))]) == 1  # once
