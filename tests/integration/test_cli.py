"""``phalanx dry-run`` and ``phalanx explain`` against a real API server: what they say, and that they only read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.controlplane import ControlPlane
from tests.integration.support import ROOT, PhalanxProcess, ensure_namespace, requests_by
from tests.scheduler.support import gpu_pod, pfn

#: Pods for a scheduler name nobody runs: they stay pending for the commands to look at.
NAME = "phalanx-dry"
RACK = {"scheduling.phalanx.dev/topology-required": "example.com/rack"}


def phalanx(*argv: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.frontends.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def test_dry_run_and_explain_read_the_real_cluster_and_write_nothing(
    plane: ControlPlane, scheduler: PhalanxProcess, workdir: Path
) -> None:
    ensure_namespace(plane, "dry")
    for i in range(2):
        plane.apply(gpu_pod(f"fits-{i}", "dry", scheduler=NAME, annotations={**pfn("fits", 2), **RACK}))
    for i in range(9):
        plane.apply(gpu_pod(f"wide-{i}", "dry", scheduler=NAME, annotations={**pfn("wide", 9), **RACK}))
    reader = str(plane.kubeconfig(workdir / "reader.kubeconfig", token=plane.tokens["reader"], user="reader"))
    audit_from = plane.audit_offset()

    code, out, err = phalanx(
        "dry-run", "--kubeconfig", reader, "--scheduler-name", NAME, "--output", "json", "-n", "dry"
    )
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert {gang["key"]: gang["state"] for gang in report["gangs"]} == {
        "pfn:dry/fits": "Bound",
        "pfn:dry/wide": "Pending",
    }
    assert report["bound"] == {"dry/fits-0": "b0-r0-n0", "dry/fits-1": "b0-r0-n1"}
    assert report["pending"]["dry/wide-0"] == (  # after dry/fits took two GPU nodes of rack b0-r0
        "62/64 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "Gang dry/wide needs 9 pods in one example.com/rack; the largest rack fits 8. "
        "No rack could hold it even if it were empty (the largest holds 8)."
    )

    code, out, err = phalanx("explain", "dry/wide-3", "--kubeconfig", reader, "--scheduler-name", NAME)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        "Pod dry/wide-3 is in gang pfn:dry/wide: 9 pod(s), at least 9 together; "
        "{nvidia.com/gpu 8}; all in one example.com/rack."
    )
    assert lines[1].startswith("Pending: ") and lines[1].endswith(
        "Gang dry/wide needs 9 pods in one example.com/rack; the largest rack fits 8. "
        "No rack could hold it even if it were empty (the largest holds 8)."
    )

    code, out, err = phalanx("explain", "dry/nope", "--kubeconfig", reader)
    assert (code, err) == (1, f"phalanx: no pod, group object or gang named dry/nope in the cluster at {plane.url}\n")

    verbs = {event["verb"] for event in requests_by(plane, "reader", audit_from)}
    assert verbs and verbs <= {"get", "list", "watch"}, verbs  # reader may write anything; the commands did not
