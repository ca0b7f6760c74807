"""Custom resources as the API server keeps them: the CRDs SimCluster serves, read from the same files the
real-server suite installs, and their structural schemas applied on every write.

A real API server *prunes* what a CRD's schema does not declare (unless the schema says
``x-kubernetes-preserve-unknown-fields``), fills in declared *defaults*, then *validates* what is left
(types, minimums, enums, patterns, lengths, required fields); it never looks inside ``apiVersion``,
``kind`` or ``metadata``. A Phalanx status field the published CRD lacks is therefore dropped, silently,
by the server, and a PodGroup with ``minMember: 0`` is refused: SimCluster does the same, so that tests
see what users see. With ``fieldValidation=Strict`` (what kubectl sends) the fields that would be pruned
are an error instead (:func:`unknown_fields`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from scheduler.ports.sim.validation import Cause, bad, required

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
    """The CustomResourceDefinitions shipped in ``scheduler/ports/sim/crds`` (scheduler-plugins', Volcano's and
    Phalanx's, with the schemas their projects publish)."""
    folder = resources.files("scheduler.ports.sim") / "crds"
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


def unknown_fields(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The fields of ``obj`` that pruning would drop, as dotted paths (``spec.extra``)."""
    properties = schema.get("properties") or {}
    found: list[str] = []
    for key, value in obj.items():
        if key in _KEPT:
            continue
        if key in properties:
            found += _unknown(value, properties[key], key)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            found.append(key)
    return found


def _unknown(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, Mapping) and schema.get("type") == "object":
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        found: list[str] = []
        for key, item in value.items():
            if properties and key in properties:
                found += _unknown(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, Mapping):
                found += _unknown(item, extra, f"{path}.{key}")
            elif extra is not True:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [field for i, item in enumerate(value) for field in _unknown(item, schema["items"], f"{path}[{i}]")]
    return []


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Cause]:
    """What the API server's OpenAPI validation says of a (pruned and defaulted) custom resource."""
    properties = schema.get("properties") or {}
    return [
        cause
        for key, value in obj.items()
        if key in properties and key not in _KEPT
        for cause in _check(value, properties[key], key)
    ]


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def _type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array"):
        if isinstance(value, _TYPES[name]) and not (name in ("integer", "number") and isinstance(value, bool)):
            return name
    return "null"


def _check(value: Any, schema: Mapping[str, Any], path: str) -> list[Cause]:
    if value is None and schema.get("nullable"):
        return []
    wanted = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if _type_name(value) not in ("integer", "string"):
            return [
                bad(path, _type_name(value), f"{path} in body must be of type int-or-string: {_type_name(value)!r}")
            ]
    elif wanted and _type_name(value) != wanted and not (wanted == "number" and _type_name(value) == "integer"):
        found = _type_name(value)
        return [bad(path, found, f'{path} in body must be of type {wanted}: "{found}"')]
    causes: list[Cause] = []
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(json.dumps(item) for item in schema["enum"])
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "message": f"Unsupported value: {json.dumps(value)}: supported values: {allowed}",
                "field": path,
            }
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(bad(path, value, f"{path} in body should be greater than or equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(bad(path, value, f"{path} in body should be less than or equal to {schema['maximum']}"))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(bad(path, value, f"{path} in body should be at most {schema['maxLength']} chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append(bad(path, value, f"{path} in body should match '{schema['pattern']}'"))
    if isinstance(value, dict):
        for key in schema.get("required") or ():
            if key not in value:
                causes.append(required(f"{path}.{key}"))
        properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key) or (extra if isinstance(extra, Mapping) else None)
            if child is not None:
                causes += _check(item, child, f"{path}.{key}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(
                {
                    "reason": "FieldValueTooMany",
                    "message": f"Too many: {len(value)}: must have at most {schema['maxItems']} items",
                    "field": path,
                }
            )
        if isinstance(schema.get("items"), Mapping):
            for i, item in enumerate(value):
                causes += _check(item, schema["items"], f"{path}[{i}]")
    return causes
