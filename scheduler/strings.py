"""One copy of each string the cluster's objects repeat.

A JSON parser makes a new string for every value it reads: each of 500,000 pods brings its own copy of its
node's name, its image, its namespace, ``Running``, ``nvidia.com/gpu``... and, read from a watch, of every
key. The pods and group objects ClusterState keeps are rebuilt here with one shared copy of each, which
took a third off the memory a pod costs (3.8 to 2.6 KB with the scale benchmark's pods). The names and
uids in ``metadata`` are left out, being each object's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Past this many distinct strings the table starts again (a week of gangs brings new names; what was
#: shared stays shared, only later copies are not).
MAX_STRINGS = 2_000_000
#: Longer strings are rarely repeated (a message, a manifest annotation): kept as they are.
MAX_LENGTH = 96
_OWN = frozenset({"name", "uid", "resourceVersion", "generateName"})


class SharedStrings:
    def __init__(self) -> None:
        self._table: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._table)

    def share(
        self, obj: Mapping[str, Any], before: Mapping[str, Any] | None = None, alike: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """A copy of ``obj`` (an object as the API server sent it) whose keys and short string values are
        the shared copies; the metadata's name, uid and resource version are the object's own. ``before``:
        what this made of an earlier version of the same object, whose parts still equal are taken as they
        are (a pod's bind changes its ``nodeName``, status and resource version; comparing the rest costs a
        fraction of sharing it again). ``alike``: what this made of another object of the same kind (the pod
        read before this one), whose ``spec`` is taken whole when equal: the pods of a gang or a Job mostly
        have one spec, which then costs one copy, not one per pod. Nothing that keeps these copies changes
        them."""
        if len(self._table) > MAX_STRINGS:
            self._table.clear()
        table = self._table
        copy: dict[str, Any] = {}
        for given, value in obj.items():
            key = table.setdefault(given, given)
            old = before.get(key) if before is not None else None
            if type(old) is not dict and key == "spec" and alike is not None and (same := alike.get(key)) == value:
                copy[key] = same
            elif type(old) is not dict or type(value) is not dict:  # nothing to take from before: most events
                if key == "metadata" and type(value) is dict:
                    copy[key] = {table.setdefault(k, k): (v if k in _OWN else self._value(v)) for k, v in value.items()}
                else:
                    copy[key] = self._value(value)
            elif key == "metadata":
                copy[key] = {
                    table.setdefault(k, k): (v if k in _OWN else _kept(old, k, v) or self._value(v))
                    for k, v in value.items()
                }
            else:
                copy[key] = {table.setdefault(k, k): _kept(old, k, v) or self._value(v) for k, v in value.items()}
        return copy

    def _value(self, value: Any) -> Any:
        # Exact types, not isinstance: a JSON parser makes only these, and the checks run for every value.
        kind = type(value)
        if kind is str:
            return self._table.setdefault(value, value) if len(value) <= MAX_LENGTH else value
        if kind is dict:
            table = self._table
            return {table.setdefault(k, k): self._value(v) for k, v in value.items()}
        if kind is list:
            return [self._value(v) for v in value]
        return value


def _kept(before: Mapping[str, Any], key: str, value: Any) -> Any:
    """``before[key]`` when it equals ``value`` and is not empty (an empty value is as cheap to share)."""
    old = before.get(key)
    return old if old and old == value else None
