"""Custom resources as the API server keeps them: the CRDs SimCluster serves, read from the same files the
real-server suite installs, and their structural schemas applied on every write.

A real API server *prunes* what a CRD's schema does not declare (unless the schema says
``x-kubernetes-preserve-unknown-fields``) and fills in declared *defaults*; it never looks inside
``apiVersion``, ``kind`` or ``metadata``. A Phalanx status field the published CRD lacks is therefore
dropped, silently, by the server: SimCluster drops it too, so that tests see what users see.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

_KEPT = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True, slots=True)
class CrdVersion:
    """One served version of a CRD: what SimCluster's catalog needs of it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str]
    short_names: tuple[str, ...]
    schema: Mapping[str, Any]
    columns: tuple[Mapping[str, Any], ...]


def crd_documents() -> Iterator[dict[str, Any]]:
    """The CustomResourceDefinitions shipped in ``scheduler/sim/crds`` (scheduler-plugins', Volcano's and
    Phalanx's, with the schemas their projects publish)."""
    folder = resources.files("scheduler.sim") / "crds"
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".yaml"):
            yield from (doc for doc in yaml.safe_load_all(entry.read_text()) if doc)


def crd_versions() -> list[CrdVersion]:
    found = []
    for crd in crd_documents():
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if not version.get("served"):
                continue
            found.append(
                CrdVersion(
                    group=spec["group"],
                    version=version["name"],
                    plural=names["plural"],
                    kind=names["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    subresources=frozenset((version.get("subresources") or {}).keys()),
                    short_names=tuple(names.get("shortNames") or ()),
                    schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
                    columns=tuple(version.get("additionalPrinterColumns") or ()),
                )
            )
    return found


def structural(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` pruned to what ``schema`` declares and with its defaults filled in (a new object)."""
    properties = schema.get("properties") or {}
    result = {key: obj[key] for key in _KEPT if key in obj}
    for key, value in obj.items():
        if key in _KEPT:
            continue
        if key in properties:
            result[key] = _default(_prune(value, properties[key]), properties[key])
        elif schema.get("x-kubernetes-preserve-unknown-fields"):
            result[key] = value
    return result


def _prune(value: Any, schema: Mapping[str, Any]) -> Any:
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if properties is None and extra is None:
            return dict(value) if preserve or schema.get("type") != "object" else {}
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if properties and key in properties:
                kept[key] = _prune(item, properties[key])
            elif isinstance(extra, Mapping):
                kept[key] = _prune(item, extra)
            elif extra is True or preserve:
                kept[key] = item
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_prune(item, schema["items"]) for item in value]
    return value


def _default(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, child in properties.items():
            if key not in value and "default" in child:
                value[key] = copy.deepcopy(child["default"])
            if key in value:
                value[key] = _default(value[key], child)
        return value
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_default(item, schema["items"]) for item in value]
    return value
