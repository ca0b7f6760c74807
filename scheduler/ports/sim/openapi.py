"""OpenAPI v3 documents for the resources SimCluster serves, enough for the clients that read them.

``kubectl apply`` reads ``/openapi/v3`` to learn whether the server validates fields itself (a
``fieldValidation`` query parameter on the write operations of the object's group/version/kind); when it
does, kubectl sends ``fieldValidation=Strict`` and needs no schema of its own. Each resource is listed
with its operations and group/version/kind; custom resources carry their CRD's schema, built-in kinds an
open object schema (SimCluster keeps what it is given of them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from scheduler.ports.sim.resources import Catalog, Resource

_WRITE_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(resource: Resource) -> str:
    group = ".".join(reversed(resource.group.split("."))) if resource.group else "io.k8s.api.core"
    return f"{group}.{resource.version}.{resource.kind}"


def _operations(resource: Resource, actions: dict[str, str]) -> dict[str, Any]:
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    found = {}
    for method, action in actions.items():
        operation: dict[str, Any] = {
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": kind,
            "responses": {
                "200": {
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{_schema_name(resource)}"}}
                    }
                }
            },
        }
        if method in ("post", "put", "patch"):
            operation["parameters"] = list(_WRITE_PARAMETERS)
        found[method] = operation
    return found


def document(catalog: Catalog, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group/version, or None when it is not served."""
    resources = [r for r in catalog.resources if (r.group, r.version) == (group, version)]
    if not resources:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for resource in resources:
        base = "/" + _prefix(group, version) + ("/namespaces/{namespace}" if resource.namespaced else "")
        collection, item = f"{base}/{resource.plural}", f"{base}/{resource.plural}/{{name}}"
        paths[collection] = _operations(resource, {"get": "list", "post": "post"})
        paths[item] = _operations(resource, {"get": "get", "put": "put", "patch": "patch", "delete": "delete"})
        for sub in sorted(resource.subresources - {"binding"}):
            paths[f"{item}/{sub}"] = _operations(resource, {"get": "get", "put": "put", "patch": "patch"})
        schema = (
            dict(resource.schema)
            if resource.schema
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        schemas[_schema_name(resource)] = {**schema, "x-kubernetes-group-version-kind": [kind]}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (SimCluster)", "version": "v1.36.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def root(catalog: Catalog) -> dict[str, Any]:
    """``/openapi/v3``: where each group/version's document is, with a hash of its content."""
    paths = {}
    for group, version in sorted({(r.group, r.version) for r in catalog.resources}):
        text = json.dumps(document(catalog, group, version), sort_keys=True).encode()
        digest = hashlib.sha512(text).hexdigest()[:64].upper()
        prefix = _prefix(group, version)
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest}"}
    return {"paths": paths}
