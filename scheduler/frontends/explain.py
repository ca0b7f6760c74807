"""``phalanx explain <ns>/<pod-or-group>``: why one gang is pending, in words and numbers.

The answer comes from the same pass as ``dry-run`` (the gangs ahead of it in the queue take their room
first), plus the room every candidate domain has now for the gang's pods: the numbers behind the
sentence.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from scheduler.frontends.dryrun import ClusterCopy
from scheduler.gangs import GangError, GangSpec
from scheduler.gangs.fields import timestamp
from scheduler.settings import Settings
from scheduler.simulation.driver import Simulation
from scheduler.simulation.report import BOUND, GangReport, Report
from topology import (
    HOSTNAME,
    DomainCapacity,
    GangRequest,
    NodeSelectorRequirement,
    PodShape,
    Snapshot,
    SpecError,
    Topology,
    capacity_by_domain,
    node_record,
    pod_demand,
)
from topology.quantities import WHOLE_NODE, amount_words, counts_devices
from topology.reasons import short_name

#: Domains listed per table; the roomiest come first.
ROWS = 10
_FINISHED = frozenset({"Succeeded", "Failed"})


class ExplainError(ValueError):
    """The target cannot be explained (malformed, or not in the cluster); the message says which."""


def parse_target(target: str) -> tuple[str, str]:
    """``<namespace>/<name>``, or a gang as messages name it (``pfn:research/sweep``): (namespace, name)."""
    _, _, path = target.rpartition(":") if ":" in target.partition("/")[0] else ("", "", target)
    namespace, sep, name = path.partition("/")
    if not sep or not namespace or not name:
        raise ExplainError(f"{target!r}: give the pod, group object or gang as <namespace>/<name>")
    return namespace, name


async def explain(copy: ClusterCopy, settings: Settings, target: str) -> str:
    namespace, name = parse_target(target)
    found = [obj for obj in copy.objects if _ns_name(obj) == (namespace, name) and obj.get("kind") != "PriorityClass"]
    subject: Mapping[str, Any] | None = (
        next((obj for obj in found if obj.get("kind") == "Pod"), found[0]) if found else None
    )
    if subject is not None and subject.get("kind") == "Pod":
        opening = _pod_opening(subject, settings)
        if opening is not None:
            return opening
    simulation = Simulation(settings, kubelets=False)
    simulation.add_nodes(copy.nodes)
    simulation.add_objects(copy.objects, default_scheduler=False)
    report = await simulation.run(advance_time=False)
    if subject is None:
        # The gang as every message names it (``pfn:research/sweep``, or the part ``research/sweep``).
        gang_key = _gang_named(report, target, f"{namespace}/{name}")
        if gang_key is None:
            raise ExplainError(f"no pod, group object or gang named {target} in the cluster at {copy.server}")
        subject = _gang_subject(copy, report, gang_key)
    if subject.get("kind") == "Pod":
        gang_key = report.gang_of.get("/".join(_ns_name(subject)))
    else:
        gang_key = _gang_of_group(report, subject)
    if gang_key is None:
        named = "/".join(_ns_name(subject))
        return f"{subject.get('kind')} {named} belongs to no gang Phalanx schedules (no pod of Phalanx's names it)."
    gang = next(gang for gang in report.gangs if gang.key == gang_key)
    lines = [_describe(subject, gang, report.results[gang_key])]
    members = [pod for pod, key in report.gang_of.items() if key == gang_key]
    running = _bound_now(copy, members)
    if members and len(running) == len(members):
        return "\n".join([*lines, _where_bound(copy, settings, running)])
    lines += _verdict(gang, report)
    lines += _running_scheduler_said(copy, subject, members, gang)
    result = report.results[gang_key]
    lines += _preemption(gang_key, report) or _no_preemption(gang, result, settings, copy)
    lines += _reservations(gang_key, gang.reason, report)
    if isinstance(result, GangSpec) and gang.state != BOUND:
        lines += _room(copy, settings, result, report)
    return "\n".join(lines)


def _ns_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _pod_opening(pod: Mapping[str, Any], settings: Settings) -> str | None:
    """The whole answer for a pod that is not Phalanx's, or not pending; None otherwise."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    namespace, name = _ns_name(pod)
    scheduler = spec.get("schedulerName") or "default-scheduler"
    if scheduler not in settings.scheduler_names:
        return (
            f"Pod {namespace}/{name} names schedulerName {scheduler!r}: Phalanx does not schedule it "
            f"(it schedules {', '.join(settings.scheduler_names)})."
        )
    if status.get("phase") in _FINISHED:
        return f"Pod {namespace}/{name} has finished ({status['phase']}); it is not scheduled again."
    if spec.get("nodeName"):
        return f"Pod {namespace}/{name} is bound to node {spec['nodeName']}."
    gates = [str((gate or {}).get("name")) for gate in spec.get("schedulingGates") or [] if isinstance(gate, dict)]
    if gates:
        return (
            f"Pod {namespace}/{name} is held by scheduling gates ({', '.join(gates)}): the API server refuses to "
            "bind it, so it is no member of its gang yet; the gang counts it as held and waits for it, and it "
            "joins as soon as the last gate is removed (by Kueue, or whatever added them)."
        )
    return None


def _gang_named(report: Report, target: str, path: str) -> str | None:
    """The gang whose key is ``target``, or ends with it, or one of whose parts is ``path``."""
    for key, result in report.results.items():
        if key == target or key.endswith(f":{path}"):
            return key
        if isinstance(result, GangSpec) and any(part.key == path for part in result.request.walk()):
            return key
    return None


def _gang_subject(copy: ClusterCopy, report: Report, gang_key: str) -> Mapping[str, Any]:
    """What to explain a gang by: its (root) group object, else its first pod."""
    result = report.results[gang_key]
    refs = [result.subject] if isinstance(result, GangError) else list(result.objects)
    pods = sorted(pod for pod, key in report.gang_of.items() if key == gang_key)
    for obj in copy.objects:
        ns, name = _ns_name(obj)
        if any((ref.kind, ref.namespace, ref.name) == (obj.get("kind"), ns, name) for ref in refs[:1]):
            return obj
        if obj.get("kind") == "Pod" and pods and f"{ns}/{name}" == pods[0]:
            return obj
    raise ExplainError(f"gang {gang_key} has no object left in the cluster")


def _no_preemption(gang: GangReport, result: GangSpec | GangError, settings: Settings, copy: ClusterCopy) -> list[str]:
    """Why a pending gang would preempt nothing, when its reason does not say so already."""
    if gang.state == BOUND or not isinstance(result, GangSpec) or "Preemption cannot help" in gang.reason:
        return []
    if not settings.preemption.enabled:
        return ["Preemption: off (preemption.enabled: false)."]
    if "member(s)" in gang.reason and ("do not exist" in gang.reason or "held by scheduling gates" in gang.reason):
        return ["Preemption: not while members are missing (evicting pods would free room it cannot use yet)."]
    lower = sum(
        1
        for obj in copy.objects
        if obj.get("kind") == "Pod"
        and (obj.get("spec") or {}).get("nodeName")
        and (obj.get("status") or {}).get("phase") not in _FINISHED
        and int((obj.get("spec") or {}).get("priority") or 0) < result.priority
    )
    if not lower:
        return [f"Preemption cannot help: no running pod has a priority below its {result.priority}."]
    return []


def _gang_of_group(report: Report, group: Mapping[str, Any]) -> str | None:
    kind, (namespace, name) = group.get("kind"), _ns_name(group)
    for key, result in report.results.items():
        refs = [result.subject] if isinstance(result, GangError) else list(result.objects)
        if any((ref.kind, ref.namespace, ref.name) == (kind, namespace, name) for ref in refs):
            return key
    return None


def _describe(subject: Mapping[str, Any], gang: GangReport, result: GangSpec | GangError) -> str:
    namespace, name = _ns_name(subject)
    head = f"{subject.get('kind')} {namespace}/{name} is in gang {gang.key}"
    if isinstance(result, GangError):
        return head + "."
    request = result.request
    pods = list(request.members())
    shapes = sorted({_shape_text(member.shape) for member in pods})
    words = f"{head}: {len(pods)} pod(s), at least {request.minimum_pods()} together; "
    words += "; ".join(shapes) if len(shapes) <= 3 else f"{len(shapes)} pod shapes"
    keys = _constraints(request)
    if keys:
        words += "; " + ", ".join(keys)
    return words + "."


def _constraints(request: GangRequest) -> list[str]:
    found = []
    for part in request.walk():
        if part.required and f"all in one {part.required}" not in found:
            found.append(f"{'each part ' if part is not request else 'all '}in one {part.required}")
        if part.preferred:
            found.append(f"{'each part' if part is not request else 'all'} preferably in one {part.preferred}")
    return list(dict.fromkeys(found))


def _bound_now(copy: ClusterCopy, pods: list[str]) -> dict[str, str]:
    """The node each of ``pods`` is bound to in the cluster as read (pods not bound are left out)."""
    wanted = set(pods)
    found = {}
    for obj in copy.objects:
        if obj.get("kind") != "Pod" or "/".join(_ns_name(obj)) not in wanted:
            continue
        node = (obj.get("spec") or {}).get("nodeName")
        if node and (obj.get("status") or {}).get("phase") not in _FINISHED:
            found["/".join(_ns_name(obj))] = str(node)
    return found


def _where_bound(copy: ClusterCopy, settings: Settings, placement: dict[str, str]) -> str:
    """``Bound: 4 pod(s) on 4 node(s), in block b0, rack b0-r1 (b0-r1-n0, ...).``"""
    nodes = sorted(set(placement.values()))
    labels = {
        str((node.get("metadata") or {}).get("name")): (node.get("metadata") or {}).get("labels") or {}
        for node in copy.nodes
    }
    shared = []
    for level in settings.levels:
        if level == HOSTNAME:
            continue
        values = {labels.get(node, {}).get(level) for node in nodes}
        if len(values) == 1 and None not in values:
            shared.append(f"{short_name(level)} {values.pop()}")
    listed = ", ".join(nodes[:8]) + (f", ... {len(nodes) - 8} more" if len(nodes) > 8 else "")
    inside = f", in {', '.join(shared)}" if shared else ""
    return f"Bound: {len(placement)} pod(s) on {len(nodes)} node(s){inside} ({listed}). Nothing is pending."


def _verdict(gang: GangReport, report: Report) -> list[str]:
    where = ", ".join(f"{key}={value}" for key, value in gang.domains.items())
    if gang.state == BOUND:
        nodes = sorted({report.placement[pod] for pod, key in report.gang_of.items() if key == gang.key})
        return [
            f"Phalanx would place it now: {gang.bound} pod(s) on {len(nodes)} node(s)"
            + (f" in {where}" if where else "")
            + ".",
            "If it is still pending, the scheduler has not tried it since the room appeared (it backs off up to "
            "queue.maxBackoffSeconds), or is not running: see `kubectl -n phalanx-system logs deploy/phalanx`.",
        ]
    state = {"Partial": "runs with its minimum; extras wait", "Invalid": "cannot be scheduled as written"}
    return [f"{state.get(gang.state, 'Pending')}: {gang.reason}"]


def _running_scheduler_said(
    copy: ClusterCopy, subject: Mapping[str, Any], members: list[str], gang: GangReport
) -> list[str]:
    """What the running scheduler last wrote on the pod (its ``PodScheduled`` condition), when it says otherwise:
    explain decides on a copy of the cluster, and does not see what the running scheduler keeps in memory (room
    held for members, a timeout's cool-down, room kept for a failed member's replacement)."""
    pod: Mapping[str, Any] | None = subject if subject.get("kind") == "Pod" else None
    if pod is None and members:
        first = tuple(sorted(members)[0].split("/", 1))
        pod = next((obj for obj in copy.objects if obj.get("kind") == "Pod" and _ns_name(obj) == first), None)
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    said = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "PodScheduled"), None)
    if said is None or said.get("status") != "False" or not said.get("message") or said["message"] == gang.reason:
        return []
    since = timestamp(said.get("lastTransitionTime"))
    age = f", {_age(time.time() - since)} ago" if since is not None else ""
    return [
        f"The running scheduler said ({said.get('reason')}{age}): {said['message']}",
        "(explain decides on a copy of the cluster: room the running scheduler holds for missing members, a "
        "timeout's cool-down, or room it keeps for a failed member's replacement are not in the copy.)",
    ]


def _age(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


def _preemption(gang_key: str, report: Report) -> list[str]:
    """The pods Phalanx would evict for the gang, by the gang (or plain pod) they belong to."""
    victims = sorted(pod for pod, preemptor in report.preempted.items() if preemptor == gang_key)
    if not victims:
        return []
    by_owner: dict[str, list[str]] = {}
    for pod in victims:
        by_owner.setdefault(report.victim_gangs.get(pod) or f"pod {pod}", []).append(pod)
    lines = [f"It would preempt {len(victims)} pod(s) of lower priority, then bind once they have terminated:"]
    lines += [f"  {owner}: {', '.join(pods)}" for owner, pods in sorted(by_owner.items())]
    return lines


def _reservations(gang_key: str, reason: str, report: Report) -> list[str]:
    """The domain reservation the gang has (it waited too long), and the ones that kept room from it."""
    lines = []
    for held in report.reservations:
        nodes = ", ".join(held.nodes[:8]) + (f", ... {len(held.nodes) - 8} more" if len(held.nodes) > 8 else "")
        if held.gang == gang_key:
            lines.append(f"Reserved: it {held.reserves}. The room freeing up on {nodes} is kept for it.")
        elif f"reserved for gang {held.gang}," in reason or f"held for gang {held.gang}," in reason:  # (older words)
            lines.append(f"Reserved for gang {held.gang}, which waited too long: it {held.reserves} ({nodes}).")
    return lines


def _room(copy: ClusterCopy, settings: Settings, spec: GangSpec, report: Report) -> list[str]:
    """Tables of room per candidate domain, one per distinct shape of the gang's unplaced pods."""
    key = _table_level(spec.request, settings.levels)
    if key is None:
        return []
    snapshot = _snapshot_now(copy, settings)
    shapes: list[PodShape] = []
    for member in spec.request.members():
        if member.key not in report.placement and member.shape not in shapes:
            shapes.append(member.shape)
    lines = []
    for shape in shapes[:3]:
        rooms = capacity_by_domain(snapshot, shape, key)
        lines += ["", f"Room per {key} for pods of {_shape_text(shape)} (bound pods only, before this pass):"]
        lines += _room_table(rooms, key)
    return lines


def _table_level(request: GangRequest, levels: tuple[str, ...]) -> str | None:
    for part in request.walk():
        if part.required or part.preferred:
            return part.required or part.preferred
    above = [level for level in levels if level != HOSTNAME]
    return above[-1] if above else None


def _snapshot_now(copy: ClusterCopy, settings: Settings) -> Snapshot:
    records = []
    for node in copy.nodes:
        try:
            records.append(node_record(node))
        except SpecError:
            continue  # a node the scheduler cannot read is not room either
    snapshot = Snapshot(records, topology=Topology(levels=settings.levels))
    for obj in copy.objects:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if obj.get("kind") != "Pod" or not spec.get("nodeName") or status.get("phase") in _FINISHED:
            continue
        try:
            snapshot.assume("/".join(_ns_name(obj)), spec["nodeName"], pod_demand(obj))
        except (SpecError, KeyError):
            continue
    return snapshot


def _room_table(rooms: list[DomainCapacity], key: str) -> list[str]:
    if not rooms:
        return [f"  no node carries the label {key}"]
    resources = [name for name, _ in rooms[0].free]
    header = [short_name(key), "pods that fit", "usable nodes", *(f"free {name}" for name in resources)]
    rows = [
        [room.value, str(room.pods), str(room.nodes), *(amount_text(name, amount) for name, amount in room.free)]
        for room in rooms[:ROWS]
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  " + "  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True))]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    if len(rooms) > ROWS:
        lines.append(f"  ... and {len(rooms) - ROWS} more, each with room for at most {rooms[ROWS].pods} pod(s)")
    return lines


def amount_text(resource: str, amount: int) -> str:
    """Base units as a person reads them: cores for cpu, Gi for memory and storage, plain counts else."""
    if resource == "cpu":
        return f"{amount / 1000:g}"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{amount / (1 << 30):.4g}Gi"
    return str(amount)


def _requirement_text(requirement: NodeSelectorRequirement) -> str:
    """``gpu-type in (h100, a100)``, ``spot notin (true)``, ``zone exists``: as ``kubectl`` writes selectors."""
    if requirement.operator in ("Exists", "DoesNotExist"):
        return f"{'!' if requirement.operator == 'DoesNotExist' else ''}{requirement.key}"
    values = ", ".join(requirement.values)
    if requirement.operator in ("In", "NotIn"):
        return f"{requirement.key} {requirement.operator.lower()} ({values})"
    return f"{requirement.key} {'>' if requirement.operator == 'Gt' else '<'} {values}"


def _shape_text(shape: PodShape) -> str:
    shown = [
        amount_words(amount, name) if counts_devices(name) else f"{name} {amount_text(name, amount)}"
        for name, amount in shape.requests
        if name != "pods" and not name.endswith(WHOLE_NODE)
    ]
    # Two shapes that ask the same differ by where they may go: said, so that their tables can be told apart.
    constraints = shape.constraints
    where = []  # (a nodeName is where a bound pod runs, said elsewhere)
    if constraints.node_selector:
        where.append("nodeSelector " + ",".join(f"{key}={value}" for key, value in constraints.node_selector))
    if constraints.affinity is not None:
        terms = [
            " and ".join(
                _requirement_text(requirement) for requirement in (*term.match_expressions, *term.match_fields)
            )
            for term in constraints.affinity
        ]
        where.append("node affinity " + " or ".join(f"({term})" if len(terms) > 1 else term for term in terms))
    asked = ", ".join(shown) if shown else "no requests"
    return "{" + "; ".join([asked, *where]) + "}"
