"""Phalanx reads the upstream gang API as the 1.36 server serves it: every field it reads in each served
``scheduling.k8s.io`` version is in that version's OpenAPI schema (a rename in the next release fails
here, as ``topologyConstraints`` once should have)."""

from __future__ import annotations

from typing import Any

from scheduler.gangs.upstream import FIELDS_READ
from scripts.controlplane import ControlPlane

GROUP = "scheduling.k8s.io"


def field_paths(schemas: dict[str, Any], name: str, prefix: str = "", depth: int = 0) -> set[str]:
    """The dotted field paths of an OpenAPI v3 component (``[]`` after an array), following ``$ref``s."""
    found: set[str] = set()
    for field, schema in (schemas[name].get("properties") or {}).items():
        path = f"{prefix}.{field}" if prefix else field
        target = schema.get("items", schema) if schema.get("type") == "array" else schema
        path += "[]" if schema.get("type") == "array" else ""
        found.add(path)
        ref = target.get("$ref") or next((item["$ref"] for item in target.get("allOf", []) if "$ref" in item), None)
        if ref and depth < 6 and not ref.endswith("ObjectMeta"):
            found |= field_paths(schemas, ref.rsplit("/", 1)[1], path, depth + 1)
    return found


def test_every_field_phalanx_reads_is_in_the_served_schema_of_its_version(plane: ControlPlane) -> None:
    served = {v["version"] for v in plane.call("GET", f"/apis/{GROUP}")["versions"]} - {"v1"}
    assert served <= set(FIELDS_READ), f"served versions Phalanx has no field list for: {served - set(FIELDS_READ)}"
    for version in sorted(served):
        schemas = plane.call("GET", f"/openapi/v3/apis/{GROUP}/{version}")["components"]["schemas"]
        for kind, paths in FIELDS_READ[version].items():
            known = field_paths(schemas, f"io.k8s.api.scheduling.{version}.{kind}")
            missing = [path for path in paths if path not in known]
            assert not missing, f"{version} {kind}: {missing} are not in the served schema"
    core = plane.call("GET", "/openapi/v3/api/v1")["components"]["schemas"]
    assert "spec.schedulingGroup.podGroupName" in field_paths(core, "io.k8s.api.core.v1.Pod")


def test_the_check_would_catch_a_rename(plane: ControlPlane) -> None:
    schemas = plane.call("GET", f"/openapi/v3/apis/{GROUP}/v1alpha2")["components"]["schemas"]
    known = field_paths(schemas, "io.k8s.api.scheduling.v1alpha2.PodGroup")
    assert "spec.schedulingConstraints.topology[].key" in known
    assert "spec.schedulingConstraints.topologyConstraints[].topologyKey" not in known
