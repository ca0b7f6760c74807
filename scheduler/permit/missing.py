"""What a gang waits for when members it needs do not exist yet, in the words of its own objects.

Missing members of a leaf that has some are placeholders (``permit``): their shape is known, so room
can be held for them. A leaf with no member at all (a Volcano subgroup none of whose pods exist, a
group's ``minMember`` above the pods its parts have) says nothing about what its pods will need: no
room can be held, and no placement could say whether they would fit. Such a gang is *waiting*, not
unschedulable: :func:`split_unknown` takes those parts out of the request, so that what exists can still
be checked for room, and lists what is missing, part by part.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scheduler.gangs import GangSpec
from topology import GangRequest


@dataclass(frozen=True, slots=True)
class Shortfall:
    """``pods`` members of the part ``part`` (its key, as the user's objects name it) do not exist yet."""

    part: str
    pods: int


def split_unknown(request: GangRequest) -> tuple[GangRequest | None, list[Shortfall]]:
    """``request`` without the parts whose members are all missing, and what those parts lack.

    Minimums that counted on the removed parts are lowered to what is left, so that the rest can be
    placed on trial; the shortfalls say what was taken away. None when nothing is left to place.
    """
    if request.is_leaf:
        if request.pods or request.placeholders or not request.min_pods:
            return request, []
        return None, [Shortfall(request.key, request.min_pods)]
    kept: list[GangRequest] = []
    dropped: list[list[Shortfall]] = []
    shortfalls: list[Shortfall] = []
    for child in request.children:
        rest, missing = split_unknown(child)
        if rest is not None:
            kept.append(rest)
            shortfalls += missing  # a part of the child is missing: the child still needs it
        else:
            dropped.append(missing)
    short_children = request.min_children - len(kept)
    if short_children > 0:  # the fewest missing members that would make up the children it lacks
        dropped.sort(key=lambda missing: sum(item.pods for item in missing))
        shortfalls += [item for missing in dropped[:short_children] for item in missing]
    if not kept:
        return None, shortfalls
    unchanged = not dropped and all(rest is child for rest, child in zip(kept, request.children, strict=True))
    if unchanged and not request.min_pods:
        return request, shortfalls  # nothing taken out: the request as it is (the common case)
    relaxed = GangRequest.group(
        request.key,
        kept,
        min_children=min(request.min_children, len(kept)),
        min_pods=request.min_pods,
        required=request.required,
        preferred=request.preferred,
    )
    if request.min_pods:
        present = sum(1 for _ in relaxed.members()) + sum(part.placeholders for part in relaxed.walk())
        if request.min_pods > present:
            if not shortfalls:
                shortfalls.append(Shortfall(request.key, request.min_pods - present))
            relaxed = replace(relaxed, min_pods=present)
    return relaxed, shortfalls


def describe(shortfalls: list[Shortfall]) -> str:
    """``4 pods of infer/llm/prefill (subgroup 2 of 2), 2 pods of infer/llm/decode``."""
    return ", ".join(f"{item.pods} pod{'s' if item.pods != 1 else ''} of {item.part}" for item in shortfalls)


def absent(spec: GangSpec, missing: int) -> str:
    """``missing`` members a gang lacks, in words: not created yet, or held by scheduling gates."""
    gated = min(spec.gated, missing)
    if not gated:
        return f"{missing} member(s) that do not exist yet"
    if gated == missing:
        return f"{missing} member(s) held by scheduling gates"
    return f"{missing} member(s) ({missing - gated} not created yet, {gated} held by scheduling gates)"


def gated(spec: GangSpec) -> str:
    """`` 3 of 4 members are held by scheduling gates: example.com/quota.`` (empty when none is)."""
    if not spec.gated:
        return ""
    total = sum(1 for _ in spec.request.members()) + spec.gated
    return f" {spec.gated} of {total} members are held by scheduling gates: {', '.join(spec.gates)}."
