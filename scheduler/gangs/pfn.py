"""PFN-style gangs: pods annotated ``<prefix>-name``, ``<prefix>-size`` and
``<prefix>-schedule-timeout-seconds`` (prefix ``gang-scheduling.preferred.jp/gang`` by default).

The gang is ``namespace/name``. It compiles to one leaf whose minimum is the size: all members or
none. Every member states the size, and all must agree; so must their timeouts. The timeout is
``min(annotation, limit)``, or the default when the annotation is absent or not an integer (as PFN's
plugin does); a zero or negative annotation is an error rather than "no wait".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.gangs.common import Context, earliest, member_topology, topology
from scheduler.gangs.fields import SpecProblem, integer_text, missing
from scheduler.gangs.model import GangKey, GangSpec, PodKey, Source
from scheduler.gangs.pods import PodInfo
from topology import GangRequest


def compile_pfn(key: GangKey, namespace: str, name: str, pods: Sequence[PodInfo], context: Context) -> GangSpec:
    prefix = context.settings.annotation_prefix
    size_key, timeout_key = f"{prefix}-size", f"{prefix}-schedule-timeout-seconds"
    sizes = {pod.key: _size(pod, size_key) for pod in pods}
    # Members agree on the timeout they get, so "abc" (the default) agrees with the default written out.
    timeouts = {pod.key: _whole(context.timeout(_timeout(pod, timeout_key, context)).seconds) for pod in pods}
    _agree(pods, sizes, f"metadata.annotations[{size_key}]", "size")
    _agree(pods, timeouts, f"metadata.annotations[{timeout_key}]", "schedule timeout (in effect, seconds)")
    size = next(iter(sizes.values()))
    on_pods_required, on_pods_preferred = member_topology(pods)
    required, preferred = topology(pods[0].ref, required=on_pods_required, preferred=on_pods_preferred)
    request = GangRequest.leaf(
        f"{namespace}/{name}", context.members(pods), min_pods=size, required=required, preferred=preferred
    )
    return GangSpec(
        key=key,
        source=Source.PFN,
        request=request,
        priority=max(pod.priority for pod in pods),
        created=earliest(*(pod.created for pod in pods)),
        timeout=context.timeout(next(iter(timeouts.values()))),
    )


def _whole(seconds: float) -> float | int:
    return int(seconds) if seconds.is_integer() else seconds


def _size(pod: PodInfo, annotation: str) -> int:
    field = f"metadata.annotations[{annotation}]"
    raw = pod.annotations.get(annotation)
    if raw is None:
        raise SpecProblem(pod.ref, field, missing(), "a gang member must state the gang size, an integer of at least 1")
    size = integer_text(raw)
    if size is None or size < 1:
        raise SpecProblem(pod.ref, field, raw, "the gang size must be an integer of at least 1")
    return size


def _timeout(pod: PodInfo, annotation: str, context: Context) -> float | None:
    raw = pod.annotations.get(annotation)
    seconds = None if raw is None else integer_text(raw)
    if seconds is None:
        return None  # absent or unparsable: the default applies, as in PFN's plugin
    if seconds < 1:
        raise SpecProblem(
            pod.ref,
            f"metadata.annotations[{annotation}]",
            raw,
            f"the timeout must be a positive number of seconds (at most {context.settings.timeout_limit_seconds:g} "
            "is used); leave it out for the default",
        )
    return float(seconds)


def _agree(pods: Sequence[PodInfo], values: Mapping[PodKey, object], field: str, what: str) -> None:
    first = pods[0]
    for pod in pods[1:]:
        if values[pod.key] != values[first.key]:
            raise SpecProblem(
                pod.ref,
                field,
                values[pod.key],
                f"pod {first.key} of the same gang has {values[first.key]!r}; all members must give the same {what}",
            )
