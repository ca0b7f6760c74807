"""The real control plane's audit log is read while kube-apiserver writes it (tests/integration)."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.controlplane import ControlPlane


def _plane(workdir: Path) -> ControlPlane:
    return ControlPlane(
        workdir=workdir, url="", admin_token="", ca_file=workdir / "ca.crt", tokens={}, audit_log=workdir / "audit.log"
    )


def test_an_event_the_server_is_still_writing_is_read_once_it_is_whole(tmp_path: Path) -> None:
    plane = _plane(tmp_path)
    first, second = json.dumps({"auditID": "1"}), json.dumps({"auditID": "2"})
    plane.audit_log.write_text(f"{first}\n{second[:10]}")

    assert [event["auditID"] for event in plane.audit()] == ["1"]

    with plane.audit_log.open("a") as log:
        log.write(f"{second[10:]}\n")
    assert [event["auditID"] for event in plane.audit()] == ["1", "2"]


def test_an_offset_taken_in_the_middle_of_an_event_reads_from_the_next_one(tmp_path: Path) -> None:
    plane = _plane(tmp_path)
    first, second = json.dumps({"auditID": "1"}), json.dumps({"auditID": "2"})
    plane.audit_log.write_text(f"{first}\n{second}\n")

    assert [event["auditID"] for event in plane.audit(offset=5)] == ["2"]
    assert [event["auditID"] for event in plane.audit(offset=len(first) + 1)] == ["2"]
    assert [event["auditID"] for event in plane.audit(offset=0)] == ["1", "2"]
