"""The one protobuf body SimCluster reads: a Namespace, as ``kubectl create namespace`` sends it.

kubectl's typed clients send built-in objects as Kubernetes protobuf (``application/vnd.kubernetes.protobuf``):
the magic ``k8s\\0``, then a ``runtime.Unknown`` envelope (type meta, the object's bytes). The API server
reads every built-in kind that way; SimCluster reads only what a person creates with kubectl on a sandbox
before applying manifests, a Namespace, and answers 415 to any other protobuf body, naming the media types
it reads (``kubectl apply`` sends JSON).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scheduler.ports.sim.status import ApiError

MAGIC = b"k8s\x00"


class NotANamespace(ValueError):
    """A protobuf body of another kind: the caller answers 415."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message: varints as ints, length-delimited fields as bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated field")
            yield number, data[at : at + size]
            at += size
        else:
            raise ValueError(f"wire type {wire} is not used by these messages")


def _bytes(value: int | bytes | None) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, bytes):
        raise ValueError("expected a length-delimited field")
    return value


def _text(value: int | bytes | None) -> str:
    return _bytes(value).decode()


def _entry(value: int | bytes) -> tuple[str, str]:
    """A map<string, string> entry: key is field 1, value field 2."""
    found = {number: _text(item) for number, item in fields(_bytes(value))}
    return found.get(1, ""), found.get(2, "")


def _object_meta(data: bytes) -> dict[str, Any]:
    """The ObjectMeta fields a new object carries (k8s.io/apimachinery generated.proto numbering)."""
    meta: dict[str, Any] = {}
    for number, value in fields(data):
        if number == 1 and value:
            meta["name"] = _text(value)
        elif number == 2 and value:
            meta["generateName"] = _text(value)
        elif number in (11, 12):
            key, item = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item
    return meta


def read_namespace(body: bytes) -> dict[str, Any]:
    """The Namespace in a protobuf body; :class:`NotANamespace` for any other kind, a 400 for bytes that are
    not protobuf."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = dict(fields(body[len(MAGIC) :]))
        type_meta = {number: _text(value) for number, value in fields(_bytes(envelope.get(1)))}
        if (type_meta.get(1), type_meta.get(2)) != ("v1", "Namespace"):
            raise NotANamespace(f"{type_meta.get(1)} {type_meta.get(2)}")
        parts = dict(fields(_bytes(envelope.get(2))))
        metadata = _object_meta(_bytes(parts.get(1)))
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the protobuf body could not be read: {error}") from None
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata, "spec": {}}
