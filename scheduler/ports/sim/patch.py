"""JSON merge patch (RFC 7386) and the part of strategic merge patch that Phalanx's writes use.

Both return a new object and leave the old one untouched (the store keeps old versions for watch
history). Strategic merge patch differs from merge patch in lists: lists whose elements have a merge
key (``conditions`` by ``type``, ``containers`` by ``name``, ...) are merged element by element, and
an element carrying ``$patch: delete`` is removed. Other lists are replaced, as in merge patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.ports.sim.status import ApiError

#: List fields merged by key in strategic merge patch (the ones in Kubernetes' core types and our CRDs).
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "tolerations": "key",
    "taints": "key",
    "addresses": "type",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, list):
        merge_key = MERGE_KEYS.get(field)
        if merge_key is None or not isinstance(target, list):
            return [item for item in patch if not (isinstance(item, Mapping) and item.get("$patch") == "delete")]
        return _merge_list(target, patch, merge_key)
    if not isinstance(patch, Mapping):
        return patch
    if patch.get("$patch") == "replace":
        return {key: value for key, value in patch.items() if key != "$patch"}
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            if key in ("$retainKeys", "$setElementOrder"):
                continue
            raise ApiError(400, f"unsupported strategic merge patch directive {key!r}")
        if key.startswith("$setElementOrder/") or key.startswith("$deleteFromPrimitiveList/"):
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def _merge_list(target: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    result = list(target)
    positions = {item.get(merge_key): i for i, item in enumerate(result) if isinstance(item, Mapping)}
    removed: set[int] = set()
    for item in patch:
        if not isinstance(item, Mapping) or merge_key not in item:
            raise ApiError(400, f"strategic merge patch: every element of this list needs the merge key {merge_key!r}")
        position = positions.get(item[merge_key])
        if item.get("$patch") == "delete":
            if position is not None:
                removed.add(position)
            continue
        if position is None:
            positions[item[merge_key]] = len(result)
            result.append({key: value for key, value in item.items() if key != "$patch"})
        else:
            result[position] = strategic_merge_patch(result[position], item)
    return [item for i, item in enumerate(result) if i not in removed]


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 ``add``, ``remove``, ``replace`` and ``test`` on a copy of ``target``."""
    if not isinstance(operations, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    result = _copy(target)
    for operation in operations:
        if not isinstance(operation, Mapping) or "op" not in operation or "path" not in operation:
            raise ApiError(400, f"malformed JSON patch operation {operation!r}")
        parent, key = _locate(result, str(operation["path"]))
        op = operation["op"]
        if op == "test":
            if _get(parent, key) != operation.get("value"):
                raise ApiError(422, f"JSON patch test failed at {operation['path']}")
        elif op == "remove":
            _get(parent, key)
            del parent[key if isinstance(parent, dict) else int(key)]
        elif op in ("add", "replace"):
            if op == "replace":
                _get(parent, key)
            if isinstance(parent, list):
                index = len(parent) if key == "-" else int(key)
                if op == "add":
                    parent.insert(index, operation.get("value"))
                else:
                    parent[index] = operation.get("value")
            else:
                parent[key] = operation.get("value")
        else:
            raise ApiError(400, f"unsupported JSON patch operation {op!r}")
    return result


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _locate(document: Any, pointer: str) -> tuple[Any, str]:
    if not pointer.startswith("/"):
        raise ApiError(400, f"JSON patch path {pointer!r} must start with '/'")
    parts = [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]
    current = document
    for part in parts[:-1]:
        current = _get(current, part)
    if not isinstance(current, dict | list):
        raise ApiError(422, f"JSON patch path {pointer!r} does not exist")
    return current, parts[-1]


def _get(container: Any, key: str) -> Any:
    try:
        if isinstance(container, list):
            return container[int(key)]
        return container[key]
    except (KeyError, IndexError, ValueError, TypeError):
        raise ApiError(422, f"JSON patch path element {key!r} does not exist") from None
