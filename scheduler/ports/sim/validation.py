"""What the API server validates that SimCluster must refuse the same way: object names, Events, and the
pod rules a scheduler meets (scheduling gates may only be removed).

Each check returns the causes it found; :func:`invalid` turns them into the 422 ``Status`` a real server
sends (``<Kind> "<name>" is invalid: <field>: <message>``, one cause per problem). The wording follows the
API server's, so that a client (or a test) cannot tell the two apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduler.ports.sim.status import ApiError

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
    for field, shown in (("deprecatedFirstTimestamp", "firstTimestamp"), ("deprecatedLastTimestamp", "lastTimestamp"),
                         ("deprecatedCount", "count")):  # fmt: skip
        if event.get(field):  # the events.k8s.io API takes none of the legacy fields (the core API does)
            causes.append(bad(shown, "", "needs to be unset"))
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


def pod_status_causes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Cause]:
    """Status writes the API server forbids that a scheduler may make: naming a node for a bound pod."""
    nominated = (after.get("status") or {}).get("nominatedNodeName")
    if (after.get("spec") or {}).get("nodeName") and nominated:
        return [forbidden("status.nominatedNodeName", "may not be set on pods that are already bound to a node")]
    return []


#: How many consumers a claim may be reserved for (``ResourceClaimReservedForMaxSize``).
CLAIM_RESERVED_MAX = 256


def _device_id(entry: object) -> tuple[str, str, str, str]:
    """driver, pool, device and share: what names one allocated device (or one share of it) in a claim."""
    found = _mapping(entry)
    return str(found.get("driver")), str(found.get("pool")), str(found.get("device")), str(found.get("shareID") or "")


#: Devices one ResourceSlice may list, and the fewer when one uses taints or consumes counters.
SLICE_DEVICES_MAX, SLICE_SHARING_DEVICES_MAX = 128, 64
_WHERE = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def slice_causes(obj: Mapping[str, Any]) -> list[Cause]:
    """What kube-apiserver 1.36 refuses in a ResourceSlice (``validateResourceSliceSpec``): devices and counter
    sets in one slice, other than exactly one way to say where its devices are, too many devices."""
    spec = _mapping(obj.get("spec"))
    causes: list[Cause] = []
    devices = spec.get("devices") or []
    if devices and spec.get("sharedCounters"):
        causes.append(forbidden("spec.sharedCounters", "only one of devices and sharedCounters may be set"))
    where = [name for name in _WHERE if spec.get(name) not in (None, False, "")]
    if len(where) != 1:
        why = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
        causes.append({"reason": "FieldValueRequired" if not where else "FieldValueInvalid", "message": why,
                       "field": "spec"})  # fmt: skip
    sharing = any(_mapping(d).get("taints") or _mapping(d).get("consumesCounters") for d in devices)
    limit = SLICE_SHARING_DEVICES_MAX if sharing else SLICE_DEVICES_MAX
    if len(devices) > limit:
        causes.append({"reason": "FieldValueTooMany", "field": "spec.devices",
                       "message": f"Too many: {len(devices)}: must have at most {limit} items"})  # fmt: skip
    return causes


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def claim_status_causes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Cause]:
    """What kube-apiserver refuses in a ResourceClaim's status write (``validateResourceClaimStatusUpdate``):
    reservations without an allocation, one consumer twice, too many, an allocation changed in place (it may
    only be set or cleared), and a result for no request of the claim."""
    status, old = _mapping(after.get("status")), _mapping(before.get("status"))
    causes: list[Cause] = []
    reserved = status.get("reservedFor") or []
    seen: set[str] = set()
    for i, ref in enumerate(reserved):
        uid = str(_mapping(ref).get("uid", ""))
        if uid in seen:
            causes.append({"reason": "FieldValueDuplicate", "message": f"Duplicate value: {_quote(uid)}",
                           "field": f"status.reservedFor[{i}]"})  # fmt: skip
        seen.add(uid)
    if len(reserved) > CLAIM_RESERVED_MAX:
        too_many = f"Too many: {len(reserved)}: must have at most {CLAIM_RESERVED_MAX} items"
        causes.append({"reason": "FieldValueTooMany", "field": "status.reservedFor", "message": too_many})
    allocation = status.get("allocation")
    if reserved and not allocation:
        causes.append(forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
    if allocation and old.get("allocation") and allocation != old.get("allocation"):
        causes.append(bad("status.allocation", "", "field is immutable"))
    requests: set[str] = set()
    for request in _mapping(_mapping(after.get("spec")).get("devices")).get("requests") or []:
        name = str(_mapping(request).get("name", ""))
        requests.add(name)
        requests.update(
            f"{name}/{_mapping(sub).get('name', '')}" for sub in _mapping(request).get("firstAvailable") or []
        )
    results = _mapping(_mapping(allocation).get("devices")).get("results") or []
    given = {_device_id(result) for result in results}
    for i, entry in enumerate(status.get("devices") or []):
        device = _device_id(entry)
        if device not in given:
            causes.append(bad(f"status.devices[{i}]", "/".join(device), "must be an allocated device in the claim"))
    for i, result in enumerate(results):
        share = _mapping(result).get("shareID")
        if share is not None and not _UUID.fullmatch(str(share)):
            causes.append(bad(f"status.allocation.devices.results[{i}].shareID", share, "must be a lowercase UUID"))
        name = str(_mapping(result).get("request", ""))
        if name not in requests:
            causes.append(bad(f"status.allocation.devices.results[{i}].request", name,
                              "must be the name of a request in the claim or the name of a request and a "
                              "subrequest separated by '/'"))  # fmt: skip
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


_QUANTITY = re.compile(r"[+-]?[0-9.]+([eEinumkKMGTP]*[-+]?[0-9]*)")
_UNREADABLE_QUANTITY = (
    'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_POD_DEFAULTS = {"schedulerName": "default-scheduler", "restartPolicy": "Always"}
_READABLE: set[str] = set()  # quantities already found readable


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _amount_problem(name: str, amount: object, parse: Any) -> str | None:
    """What the API server says of a container's request or limit: a negative one, or a fraction of a
    resource counted in whole units (an extended resource such as ``nvidia.com/gpu``, or ``pods``)."""
    key = (name, str(amount))
    if key in _AMOUNTS:
        return _AMOUNTS[key]
    value = parse(str(amount))
    problem = None
    if value < 0:
        problem = "must be greater than or equal to 0"
    elif value != int(value) and (name == "pods" or _extended(name)):
        problem = "must be an integer"
    if len(_AMOUNTS) < 4096:  # most pods repeat a few
        _AMOUNTS[key] = problem
    return problem


_AMOUNTS: dict[tuple[str, str], str | None] = {}


def _extended(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): counted in whole units, never overcommitted."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def admit_pod(pod: Mapping[str, Any], parse: Any) -> tuple[dict[str, Any], str, list[Cause]]:
    """A new pod as the API server takes it, in one pass over its containers: its spec with the defaults a
    scheduler reads (schedulerName, restartPolicy, each container's requests from its limits), its
    ``status.qosClass``, and what is wrong with it (no containers; a GPU or other extended resource
    without a limit, or with a request that differs from it). A quantity that does not parse is the
    server's 400: it cannot decode the pod. ``parse`` compares quantities written differently
    (``topology.quantities.parse_quantity``)."""
    spec = pod.get("spec") or {}
    causes: list[Cause] = [] if spec.get("containers") else [required("spec.containers")]
    asks = False  # any request or limit at all (else BestEffort)
    guaranteed = True  # every container limits cpu and memory to what it requests
    admitted: dict[str, list[Any]] = {}
    for kind in ("containers", "initContainers"):
        admitted[kind] = []
        for i, container in enumerate(spec.get(kind) or []):
            found = container.get("resources") if isinstance(container, Mapping) else None
            resources: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            limits: Mapping[str, Any] = _mapping(resources.get("limits"))
            given: Mapping[str, Any] = _mapping(resources.get("requests"))
            for amount in (*limits.values(), *given.values()):
                if isinstance(amount, (int, float)) and not isinstance(amount, bool):
                    continue
                if not isinstance(amount, str):
                    raise ApiError(400, _UNREADABLE_QUANTITY)
                if amount not in _READABLE:  # most pods repeat a few quantities: each is checked once
                    if not _QUANTITY.fullmatch(amount):
                        raise ApiError(400, _UNREADABLE_QUANTITY)
                    if len(_READABLE) < 4096:
                        _READABLE.add(amount)
            where = f"spec.{kind}[{i}].resources"
            requests = {**limits, **given} if limits else given
            for which, amounts in (("limits", limits), ("requests", requests)):  # requests as defaulted, as checked
                for name, amount in amounts.items():
                    problem = _amount_problem(name, amount, parse)
                    if problem is not None:
                        causes.append(bad(f"{where}.{which}[{name}]", amount, problem))
            asks = asks or bool(requests)
            if guaranteed:
                cpu, memory = limits.get("cpu"), limits.get("memory")
                guaranteed = (
                    cpu is not None and memory is not None and cpu == requests["cpu"] and memory == requests["memory"]
                )
            for name, amount in given.items():
                if not _extended(name):
                    continue  # not an extended resource: it may be overcommitted
                if name not in limits:
                    causes.append(
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: Limit must be set for non overcommitable resources",
                            "field": f"{where}.limits",
                        }
                    )
                elif str(amount) != str(limits[name]) and parse(str(amount)) != parse(str(limits[name])):
                    causes.append(bad(f"{where}.requests", amount, f"must be equal to {name} limit of {limits[name]}"))
            defaulted = limits and requests is not given
            admitted[kind].append(
                {**container, "resources": {**resources, "requests": requests}} if defaulted else container
            )
    spec = {**_POD_DEFAULTS, **spec, **{kind: items for kind, items in admitted.items() if kind in spec}}
    qos = "BestEffort" if not asks else "Guaranteed" if guaranteed else "Burstable"
    return spec, qos, causes
