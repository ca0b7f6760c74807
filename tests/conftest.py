"""Suite-wide settings: deterministic hypothesis, so that a run on CI is the run you can repeat; the real
kube-apiserver of ``KUBEBUILDER_ASSETS`` for the suites that need one; Chromium for the browser test; and,
printed at the end, the tally of invariant checks the clusters' monitors made, how many tests ran against the
real server, and whether the browser test ran."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from scripts.controlplane import HOW_TO_GET, ControlPlane, assets_dir
from scripts.devtools import chromium
from tests.integration.support import install

settings.register_profile(
    "phalanx",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("phalanx")

#: The envtest binaries, or None: without them the real-server suite is not collected (and the summary says so).
ASSETS: Path | None = assets_dir()
collect_ignore = [] if ASSETS else ["integration"]
#: Chromium, or None: without it the browser test is not collected (and the summary says so). ``scripts/test``
#: installs Debian's package where it can (as root, with apt-get), so CI runs it.
BROWSER = chromium()
if BROWSER is None:
    collect_ignore.append("browser")
REAL = "real kube-apiserver"
#: The kube-controller-manager's controllers the suite runs: what makes and replaces pods and claims, as in a cluster
#: (the node lifecycle and pod GC controllers are left out: there is no kubelet to keep nodes Ready).
CONTROLLERS = (
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "garbage-collector-controller",
    "resourceclaim-controller",  # makes a pod's ResourceClaims from its templates (DRA)
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts or REAL in item.name:
            item.user_properties.append(("server", REAL))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver from KUBEBUILDER_ASSETS, shared by the whole session (about 3 s to start),
    with what every test finds installed: the CRDs, Phalanx's ServiceAccount and RBAC, and the nodes."""
    assert ASSETS is not None, HOW_TO_GET
    plane = ControlPlane.start(ASSETS, tmp_path_factory.mktemp("envtest"), controllers=CONTROLLERS)
    try:
        install(plane)
        yield plane
    finally:
        plane.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.scheduler.support import TALLY  # noqa: PLC0415  (only once the suite has run)

    if TALLY.checks:
        terminalreporter.write_line(TALLY.line())
    if BROWSER is None:
        terminalreporter.write_line("browser test not run: Chromium is not installed (apt-get install chromium)")
    if ASSETS is None:
        terminalreporter.write_line(f"{REAL} suite not run: KUBEBUILDER_ASSETS is not set; to run it, {HOW_TO_GET}")
        return
    reports = [
        report
        for outcome in ("passed", "failed", "error")
        for report in terminalreporter.stats.get(outcome, [])
        if getattr(report, "when", "call") == "call" and ("server", REAL) in getattr(report, "user_properties", [])
    ]
    passed = sum(1 for report in reports if report.passed)
    terminalreporter.write_line(f"{REAL} suite ({ASSETS}): {passed} of {len(reports)} tests passed against it")
