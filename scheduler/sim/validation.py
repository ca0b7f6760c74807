"""What the API server validates that SimCluster must refuse the same way: object names, Events, and the
pod rules a scheduler meets (scheduling gates may only be removed).

Each check returns the causes it found; :func:`invalid` turns them into the 422 ``Status`` a real server
sends (``<Kind> "<name>" is invalid: <field>: <message>``, one cause per problem). The wording follows the
API server's, so that a client (or a test) cannot tell the two apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from scheduler.sim.errors import ApiError

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
Cause = dict[str, str]


def _quote(value: Any) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def bad(field: str, value: Any, why: str) -> Cause:
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {_quote(value)}: {why}", "field": field}


def required(field: str) -> Cause:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def forbidden(field: str, why: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {why}", "field": field}


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """The 422 for ``causes`` (at least one) on an object of ``kind`` (``group`` "" for built-in kinds)."""
    what = f"{kind}.{group}" if group else kind
    said = [f"{cause['field']}: {cause['message']}" for cause in causes]
    summary = said[0] if len(said) == 1 else "[" + ", ".join(said) + "]"
    return ApiError(
        422, f"{what} {_quote(name)} is invalid: {summary}", name=name, group=group, kind=kind, causes=causes
    )


def name_causes(kind: str, name: str, field: str = "metadata.name", *, prefix: bool = False) -> list[Cause]:
    """An object's name (or ``generateName``, with ``prefix``, where a trailing '-' is allowed) as the API
    server checks it: namespaces are RFC 1123 labels, everything else RFC 1123 subdomains."""
    checked = name[:-1] if prefix and name.endswith("-") else name
    if kind == "Namespace":
        if "." in checked:
            return [bad(field, name, "must not contain dots")]
        if len(checked) > 63:
            return [bad(field, name, "must be no more than 63 characters")]
        return [] if _LABEL.fullmatch(checked) else [bad(field, name, LABEL_RULE)]
    causes = [] if _SUBDOMAIN.fullmatch(checked) else [bad(field, name, SUBDOMAIN_RULE)]
    if len(checked) > 253:
        causes.append(bad(field, name, "must be no more than 253 characters"))
    return causes


def event_causes(event: Mapping[str, Any], namespace: str, *, modern: bool) -> list[Cause]:
    """An Event at creation. ``modern`` is events.k8s.io/v1, which requires the fields its recorder sets;
    core/v1 Events (``modern`` False, already converted to the stored form) are checked more loosely."""
    causes: list[Cause] = []
    regarding = event.get("regarding") if isinstance(event.get("regarding"), Mapping) else {}
    regarding_namespace = str((regarding or {}).get("namespace") or "")
    if not regarding_namespace:
        if namespace not in ("default", "kube-system"):
            causes.append(bad("involvedObject.namespace", "", "does not match event.namespace"))
    elif not modern and regarding_namespace != namespace:
        causes.append(bad("involvedObject.namespace", regarding_namespace, "does not match event.namespace"))
    if not modern:
        return causes
    if not event.get("eventTime"):
        causes.append(required("eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(bad("type", "", f"has invalid value: {event.get('type') or ''}"))
    controller = event.get("reportingController")
    if not controller:
        causes.append(required("reportingController"))
    elif not _QUALIFIED_NAME.fullmatch(str(controller).rsplit("/", 1)[-1]):
        causes.append(
            bad(
                "reportingController",
                controller,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character",
            )
        )
    for field in ("reportingInstance", "action", "reason"):
        value = event.get(field)
        if not value:
            causes.append(required(field))
        elif len(str(value)) > 128:
            causes.append(bad(field, "", "can have at most 128 characters"))
    if len(str(event.get("note") or "").encode()) > 1024:
        causes.append(bad("message", "", "can have at most 1024 characters"))
    series = event.get("series")
    if isinstance(series, Mapping):
        if not isinstance(series.get("count"), int) or series["count"] < 2:
            causes.append(bad("series.count", "", "should be at least 2"))
        if not series.get("lastObservedTime"):
            causes.append(required("series.lastObservedTime"))
    return causes


def pod_update_causes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Cause]:
    """Changes to a pod's spec the API server forbids that a scheduler may meet: adding a scheduling gate."""
    old = {gate.get("name") for gate in (before.get("spec") or {}).get("schedulingGates") or []}
    causes = []
    for i, gate in enumerate((after.get("spec") or {}).get("schedulingGates") or []):
        if gate.get("name") not in old:
            causes.append(
                forbidden(
                    f"spec.schedulingGates[{i}].name",
                    f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
                )
            )
    return causes


#: The fields a 1.36 API server knows in a Pod's spec and containers (and the 1.35 ``workloadRef``, which
#: SimCluster's 1.35 Workload API still serves): ``fieldValidation=Strict`` refuses any other.
POD_SPEC_FIELDS = frozenset(
    [
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "schedulingGroup",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
        "workloadRef",
    ]
)
CONTAINER_FIELDS = frozenset(
    [
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "name",
        "ports",
        "readinessProbe",
        "resizePolicy",
        "resources",
        "restartPolicy",
        "restartPolicyRules",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    ]
)
OBJECT_META_FIELDS = frozenset(
    [
        "annotations",
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "generation",
        "labels",
        "managedFields",
        "name",
        "namespace",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
        "uid",
    ]
)


def unknown_pod_fields(pod: Mapping[str, Any]) -> list[str]:
    """Misspelt fields of a pod's metadata, spec and containers (the places people type by hand)."""
    found = [f"metadata.{key}" for key in (pod.get("metadata") or {}) if key not in OBJECT_META_FIELDS]
    spec = pod.get("spec") or {}
    found += [f"spec.{key}" for key in spec if key not in POD_SPEC_FIELDS]
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            if isinstance(container, Mapping):
                found += [f"spec.{kind}[{i}].{key}" for key in container if key not in CONTAINER_FIELDS]
    return found


def strict(kind: str, version: str, unknown: list[str]) -> ApiError:
    """``fieldValidation=Strict``'s 400 for fields the server does not know."""
    fields = ", ".join(f'unknown field "{field}"' for field in unknown)
    return ApiError(
        400, f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {fields}'
    )


def _extended(resource: str) -> bool:
    """A resource the node cannot overcommit: any with a domain other than kubernetes.io (nvidia.com/gpu)."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests."))


def _resources(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, resources) of every container and init container."""
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            found = container.get("resources") if isinstance(container, Mapping) else None
            yield f"spec.{kind}[{i}].resources", found if isinstance(found, Mapping) else {}


def refuse_unreadable_quantities(pod: Mapping[str, Any]) -> None:
    """A quantity that does not parse is the API server's 400 (it cannot even decode the pod)."""
    for _, resources in _resources(pod.get("spec") or {}):
        for amounts in (resources.get("requests"), resources.get("limits")):
            for amount in (amounts or {}).values() if isinstance(amounts, Mapping) else ():
                if not isinstance(amount, (int, float)) and not _QUANTITY.fullmatch(str(amount)):
                    raise ApiError(
                        400,
                        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
                        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )


_QUANTITY = re.compile(r"[+-]?[0-9.]+([eEinumkKMGTP]*[-+]?[0-9]*)")


def pod_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the API server fills into a new pod's spec that a scheduler reads: the scheduler's name, the
    restart policy, and each container's requests from its limits where none is given."""
    containers = []
    for container in spec.get("containers") or []:
        resources = dict(container.get("resources") or {}) if isinstance(container, Mapping) else {}
        limits = resources.get("limits")
        if isinstance(limits, Mapping) and limits:
            resources["requests"] = {**limits, **(resources.get("requests") or {})}
            containers.append({**container, "resources": resources})
        else:
            containers.append(container)
    defaults = {"schedulerName": "default-scheduler", "restartPolicy": "Always"}
    return {**defaults, **spec, **({"containers": containers} if "containers" in spec else {})}


def qos_class(spec: Mapping[str, Any]) -> str:
    """Guaranteed when every container limits CPU and memory to what it requests, BestEffort when none
    asks for anything, Burstable otherwise (``status.qosClass``)."""
    everything = list(_resources(spec))
    if not any(resources.get("requests") or resources.get("limits") for _, resources in everything):
        return "BestEffort"
    guaranteed = all(
        all(
            (resources.get("limits") or {}).get(name) is not None
            and (resources.get("limits") or {}).get(name) == (resources.get("requests") or {}).get(name)
            for name in ("cpu", "memory")
        )
        for _, resources in everything
    )
    return "Guaranteed" if guaranteed else "Burstable"


def pod_causes(pod: Mapping[str, Any], parse: Any) -> list[Cause]:
    """A pod needs containers; extended resources (GPUs) must have a limit, and a request equal to it.
    ``parse`` turns a quantity string into a comparable number (``topology.resources.parse_quantity``)."""
    causes: list[Cause] = []
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        causes.append(required("spec.containers"))
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            resources = (container or {}).get("resources") or {} if isinstance(container, Mapping) else {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            where = f"spec.{kind}[{i}].resources"
            for name, amount in requests.items():
                if not _extended(str(name)):
                    continue
                if name not in limits:
                    causes.append(
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: Limit must be set for non overcommitable resources",
                            "field": f"{where}.limits",
                        }
                    )
                elif parse(str(amount)) != parse(str(limits[name])):
                    causes.append(bad(f"{where}.requests", amount, f"must be equal to {name} limit of {limits[name]}"))
    return causes
