"""The real-server suite's cluster: one control plane with the CRDs, nodes and RBAC installed, and one
``phalanx run`` process for the session, authenticated as its ServiceAccount (bound by exactly
``manifests/rbac.yaml``). After every test: the invariants hold, no request of Phalanx was refused
(a verb missing from the ClusterRole fails the test that needed it), and the workloads are deleted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.controlplane import ControlPlane
from tests.integration.support import (
    PHALANX_USER,
    PhalanxProcess,
    delete_workloads,
    invariant_violations,
    refused_requests,
    service_account_token,
)

#: Test timings on top of manifests/phalanx.yaml (the deployed defaults): fast reporting and short backoffs.
FAST = (
    "queue.initialBackoffSeconds=0.2",
    "queue.maxBackoffSeconds=2",
    "reporting.eventIntervalSeconds=1",
    "reporting.statusIntervalSeconds=0.1",
    "leaderElection.leaseDurationSeconds=3",
    "leaderElection.renewDeadlineSeconds=2",
    "leaderElection.retryPeriodSeconds=0.5",
    "gangs.gangScheduleTimeoutJitterSecond=0",
)


@pytest.fixture(scope="session")
def plane(control_plane: ControlPlane) -> ControlPlane:
    return control_plane


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("phalanx")


@pytest.fixture(scope="session")
def phalanx_kubeconfig(plane: ControlPlane, workdir: Path) -> Path:
    """Phalanx's own credentials: a token of its ServiceAccount, allowed exactly what manifests/rbac.yaml allows."""
    return plane.kubeconfig(workdir / "phalanx.kubeconfig", token=service_account_token(plane), user="phalanx")


@pytest.fixture(scope="session")
def admin_kubeconfig(plane: ControlPlane, workdir: Path) -> Path:
    return plane.kubeconfig(workdir / "admin.kubeconfig")


@pytest.fixture(scope="session")
def scheduler(plane: ControlPlane, workdir: Path, phalanx_kubeconfig: Path) -> Iterator[PhalanxProcess]:
    process = PhalanxProcess(workdir, phalanx_kubeconfig, name="phalanx-0", overrides=FAST)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True  # type: ignore[attr-defined]  # read by after_each_test, to show the log
    return report


@pytest.fixture(autouse=True)
def after_each_test(request: pytest.FixtureRequest, plane: ControlPlane, scheduler: PhalanxProcess) -> Iterator[None]:
    """Checks what every test owes the operator, then clears the cluster for the next test."""
    audit_from, log_from = plane.audit_offset(), scheduler.log_offset()
    yield
    if getattr(request.node, "failed_call", False):
        print(f"--- the session scheduler's log during the test:\n{scheduler.log()[log_from:][-6000:]}")
    violations = invariant_violations(plane)
    delete_workloads(plane)
    assert not violations, "invariants violated:\n" + "\n".join(violations)
    refused = refused_requests(plane, PHALANX_USER, audit_from)
    assert not refused, "the API server refused Phalanx (is manifests/rbac.yaml missing a verb?):\n" + "\n".join(
        refused
    )
    problems = scheduler.problems(log_from)
    assert not problems, "Phalanx logged warnings nobody expected:\n" + "\n".join(map(str, problems[:10]))
