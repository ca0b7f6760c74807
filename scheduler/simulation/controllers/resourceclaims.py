"""kube-controller-manager's resourceclaim controller, as far as scheduling sees it.

- A pod that names a ResourceClaimTemplate gets a ResourceClaim made from it (``<pod>-<claim>-`` and five
  random letters, owned by the pod, annotated with the pod's claim name), and the claim's name in the
  pod's ``status.resourceClaimStatuses``; until then no scheduler can place the pod. A template that does
  not exist is said once (the real controller retries, and says it in an Event).
- An entry that is exactly one of its PodGroup's ``spec.resourceClaims`` (KEP-5729, the
  ``DRAWorkloadResourceClaims`` gate on) gets the group's claim instead: made once (``<group>-<claim>-``,
  owned by the PodGroup), named in the group's ``status.resourceClaimStatuses`` and in every member's.
- A claim's ``reservedFor`` loses the pods that are gone or have finished (a PodGroup it is reserved for
  keeps it while the group exists); a claim reserved for nobody that
  a scheduler allocated (its ``resource.kubernetes.io/delete-protection`` finalizer) is deallocated and
  the finalizer taken off, so that its devices are free again. (A claim made from a template goes with its
  pod, as the garbage collector deletes what a deleted pod owned.)

Beside it, the drivers of devices that must be attached first (``bindingConditions``) attach them at once, as a
healthy driver does: each such device of an allocated claim gets its conditions True in ``status.devices``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from scheduler.ports.sim.resources import Resource
from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import MERGE_PATCH, Obj
from scheduler.simulation.controllers.base import Api

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
_ENDED = ("Succeeded", "Failed")


def reconcile_claims(api: Api) -> None:
    """Make the claims pods' templates call for, and release those no pod uses any more."""
    make_claims(api)
    release_claims(api)
    attach_devices(api)


def attach_devices(api: Api) -> None:
    """Report every binding condition True of the devices allocated with some, as their driver would."""
    store = api.store
    claims = store.resource("resource.k8s.io/v1", "ResourceClaim")
    for claim in list(store.objects(claims)):
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        waiting = [result for result in results if result.get("bindingConditions")]
        reported = {(entry.get("driver"), entry.get("pool"), entry.get("device"))
                    for entry in status.get("devices") or ()}  # fmt: skip
        due = [result for result in waiting if (result["driver"], result["pool"], result["device"]) not in reported]
        if not due:
            continue
        now = datetime.fromtimestamp(api.now(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        devices = [*(status.get("devices") or []), *(
            {"driver": result["driver"], "pool": result["pool"], "device": result["device"],
             **({"shareID": result["shareID"]} if result.get("shareID") else {}),
             "conditions": [{"type": name, "status": "True", "reason": "Attached", "message": "",
                             "lastTransitionTime": now} for name in result["bindingConditions"]]}
            for result in due
        )]  # fmt: skip
        store.patch(claims, claim["metadata"]["namespace"], claim["metadata"]["name"], {"status": {"devices": devices}},
                    MERGE_PATCH, subresource="status")  # fmt: skip


def release_claims(api: Api) -> None:
    store = api.store
    pods = {
        pod["metadata"].get("uid"): pod
        for pod in store.objects(store.resource("v1", "Pod"))
        if (pod.get("status") or {}).get("phase") not in _ENDED
    }
    groups = {group["metadata"].get("uid") for group in store.objects(_pod_groups(api))}
    claims = store.resource("resource.k8s.io/v1", "ResourceClaim")
    for claim in list(store.objects(claims)):
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        using = [owner for owner in reserved if owner.get("uid") in (groups if owner.get("resource") == "podgroups"
                                                                     else pods)]  # fmt: skip
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        finalizers = claim["metadata"].get("finalizers") or []
        if not using and status.get("allocation") and DELETE_PROTECTION in finalizers:
            # Nobody uses it, and a scheduler allocated it: deallocated, unprotected.
            released = {"status": {"reservedFor": None, "allocation": None}}
            store.patch(claims, namespace, name, released, MERGE_PATCH, subresource="status")
            kept = [finalizer for finalizer in finalizers if finalizer != DELETE_PROTECTION]
            store.patch(claims, namespace, name, {"metadata": {"finalizers": kept or None}}, MERGE_PATCH)
        elif len(using) != len(reserved):
            store.patch(claims, namespace, name, {"status": {"reservedFor": using or None}}, MERGE_PATCH,
                        subresource="status")  # fmt: skip


def make_claims(api: Api) -> None:
    """Make the claims every pod's templates call for and that are not made yet."""
    store = api.store
    pods = store.resource("v1", "Pod")
    for pod in list(store.objects(pods)):
        wanted = [entry for entry in (pod.get("spec") or {}).get("resourceClaims") or []
                  if entry.get("resourceClaimTemplateName")]  # fmt: skip
        if not wanted or pod["metadata"].get("deletionTimestamp"):
            continue
        made = {entry.get("name") for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        group = _group_of(api, pod)
        for entry in wanted:
            if entry.get("name") in made:
                continue
            if group is not None and entry in ((group.get("spec") or {}).get("resourceClaims") or []):
                made_name = _group_claim(api, group, entry)
            else:
                made_name = _made(api, pod, entry)
            if made_name is not None:
                statuses.append({"name": entry["name"], "resourceClaimName": made_name})
        if len(statuses) > len(made):
            store.patch(pods, namespace, name, {"status": {"resourceClaimStatuses": statuses}}, MERGE_PATCH,
                        subresource="status")  # fmt: skip


def _pod_groups(api: Api) -> Resource:
    return api.store.resource("scheduling.k8s.io/v1alpha2", "PodGroup")


def _group_of(api: Api, pod: Obj) -> Obj | None:
    """The ``scheduling.k8s.io`` PodGroup the pod belongs to, when it exists."""
    name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if not name:
        return None
    try:
        return api.store.get(_pod_groups(api), pod["metadata"]["namespace"], name)
    except ApiError:
        return None


def _made(api: Api, owner: Obj, entry: Obj) -> str | None:
    """The name of a claim made from ``entry``'s template for ``owner`` (a pod or a PodGroup), or None."""
    metadata = owner["metadata"]
    namespace, template_name = metadata["namespace"], entry["resourceClaimTemplateName"]
    try:
        template = api.store.get(api.store.resource("resource.k8s.io/v1", "ResourceClaimTemplate"), namespace,
                                 template_name)  # fmt: skip
    except ApiError:
        api.refuse(f"{str(owner.get('kind', 'Pod')).lower()} {namespace}/{metadata['name']}: ResourceClaimTemplate "
                   f"{template_name!r} does not exist; its claim is not made")  # fmt: skip
        return None
    claim = api.create(_claim(owner, entry["name"], template))
    return None if claim is None else str(claim["metadata"]["name"])


def _group_claim(api: Api, group: Obj, entry: Obj) -> str | None:
    """The PodGroup's claim for ``entry``: the one its status names, else one made now and named there."""
    statuses = list((group.get("status") or {}).get("resourceClaimStatuses") or [])
    for status in statuses:
        if status.get("name") == entry["name"] and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    made = _made(api, group, entry)
    if made is not None:
        metadata = group["metadata"]
        api.store.patch(_pod_groups(api), metadata["namespace"], metadata["name"],
                        {"status": {"resourceClaimStatuses": [*statuses, {"name": entry["name"],
                                                                          "resourceClaimName": made}]}},
                        MERGE_PATCH, subresource="status")  # fmt: skip
    return made


def _claim(owner: Obj, claim_name: str, template: Obj) -> dict[str, Any]:
    metadata = owner["metadata"]
    spec = (template.get("spec") or {}).get("spec") or {}
    labels = ((template.get("spec") or {}).get("metadata") or {}).get("labels")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{metadata['name']}-{claim_name}-",
            "namespace": metadata["namespace"],
            "annotations": {POD_CLAIM_NAME: claim_name},
            **({"labels": labels} if labels else {}),
            "ownerReferences": [
                {
                    "apiVersion": owner.get("apiVersion", "v1"),
                    "kind": owner.get("kind", "Pod"),
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    **({"blockOwnerDeletion": True} if owner.get("kind", "Pod") == "Pod" else {}),
                }
            ],
        },
        "spec": spec,
    }
