"""Media types, as the API server negotiates them: what a request body may be, and what an answer is
written as (``Accept``).

Bodies: JSON (and the three JSON patch types), YAML (``application/yaml`` and server-side apply's
``application/apply-patch+yaml``), and the one protobuf body kubectl sends before anything else, a
Namespace (``scheduler.ports.sim.protobuf``). Anything else is a 415 that names what is read.

Answers: JSON, YAML, or a ``meta.k8s.io/v1`` Table (``as=Table``, what ``kubectl get`` asks for),
whichever comes first in ``Accept`` that the request can have; 406 when none can. Errors are always
JSON ``Status`` objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from scheduler.ports.sim.protobuf import NotANamespace, read_namespace
from scheduler.ports.sim.status import ApiError

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_BODIES = frozenset(
    {JSON, "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"}
)
UNKNOWN_FORMAT = (
    "the body of the request was in an unknown format - accepted media types include: application/json, "
    "application/yaml, application/vnd.kubernetes.protobuf"
)


@dataclass(frozen=True, slots=True)
class Wanted:
    """The representation an answer is written in: ``json``, ``yaml`` or ``table`` (with ``full`` rows)."""

    form: str
    full: bool = False


def wanted(request: web.Request, *, table_possible: bool) -> Wanted:
    """The first representation in ``Accept`` this request can have (406 when there is none)."""
    accept = request.headers.get("Accept", "").strip()
    if not accept:
        return Wanted("json")
    for offer in accept.split(","):
        media, *parameters = (part.strip() for part in offer.split(";"))
        options = dict(parameter.partition("=")[::2] for parameter in parameters)
        shape = options.get("as")
        if shape == "Table" and options.get("g") == "meta.k8s.io" and table_possible:
            if media in (JSON, "application/*", "*/*"):
                return Wanted("table", request.query.get("includeObject") == "Object")
            continue
        if shape is not None:
            continue  # PartialObjectMetadata and other shapes: not served, a later offer may be
        if media in (JSON, "application/*", "*/*"):
            return Wanted("json")
        if media == YAML:
            return Wanted("yaml")
    raise ApiError(406, f"406: Not Acceptable\n\nAvailable representations: {JSON}, {YAML}")


def answer(data: Any, wanted_form: Wanted, status: int = 200) -> web.Response:
    if wanted_form.form == "yaml":
        return web.Response(text=yaml.safe_dump(data, sort_keys=False), status=status, content_type=YAML)
    return web.Response(text=json.dumps(data), status=status, content_type=JSON)


async def body(request: web.Request, *, namespace_create: bool = False, any_json: bool = False) -> Any:
    """The request body in whichever format its Content-Type says ("{}" when there is none)."""
    raw = await request.read()
    media = request.content_type
    if not raw:
        return {}
    if media == PROTOBUF:
        try:
            if namespace_create:
                return read_namespace(raw)
        except NotANamespace:
            pass
        raise ApiError(415, UNKNOWN_FORMAT.replace(PROTOBUF, f"{PROTOBUF} (SimCluster: only for a Namespace)"))
    if media in (YAML, APPLY_PATCH):
        try:
            parsed = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ApiError(400, f"the request body is not valid YAML: {str(error).splitlines()[0]}") from None
    elif media in JSON_BODIES or media == "application/octet-stream":
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
    else:
        raise ApiError(415, UNKNOWN_FORMAT)
    if not any_json and not isinstance(parsed, Mapping):
        raise ApiError(400, "the request body must be an object")
    return parsed
