"""kube-controller-manager's resourceclaim controller, as far as scheduling sees it.

- A pod that names a ResourceClaimTemplate gets a ResourceClaim made from it (``<pod>-<claim>-`` and five
  random letters, owned by the pod, annotated with the pod's claim name), and the claim's name in the
  pod's ``status.resourceClaimStatuses``; until then no scheduler can place the pod. A template that does
  not exist is said once (the real controller retries, and says it in an Event).
- A claim's ``reservedFor`` loses the pods that are gone or have finished; a claim reserved for nobody that
  a scheduler allocated (its ``resource.kubernetes.io/delete-protection`` finalizer) is deallocated and
  the finalizer taken off, so that its devices are free again. (A claim made from a template goes with its
  pod, as the garbage collector deletes what a deleted pod owned.)"""

from __future__ import annotations

from typing import Any

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


def release_claims(api: Api) -> None:
    store = api.store
    pods = {
        pod["metadata"].get("uid"): pod
        for pod in store.objects(store.resource("v1", "Pod"))
        if (pod.get("status") or {}).get("phase") not in _ENDED
    }
    claims = store.resource("resource.k8s.io/v1", "ResourceClaim")
    for claim in list(store.objects(claims)):
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        using = [owner for owner in reserved if owner.get("uid") in pods]
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        finalizers = claim["metadata"].get("finalizers") or []
        if not using and status.get("allocation") and DELETE_PROTECTION in finalizers:
            # Nobody uses it, and a scheduler allocated it: deallocated, unprotected.
            store.patch(claims, namespace, name, {"status": {"reservedFor": None, "allocation": None}}, MERGE_PATCH,
                        subresource="status")  # fmt: skip
            kept = [finalizer for finalizer in finalizers if finalizer != DELETE_PROTECTION]
            store.patch(claims, namespace, name, {"metadata": {"finalizers": kept or None}}, MERGE_PATCH)
        elif len(using) != len(reserved):
            store.patch(claims, namespace, name, {"status": {"reservedFor": using or None}}, MERGE_PATCH,
                        subresource="status")  # fmt: skip


def make_claims(api: Api) -> None:
    """Make the claims every pod's templates call for and that are not made yet."""
    store = api.store
    pods, templates = store.resource("v1", "Pod"), store.resource("resource.k8s.io/v1", "ResourceClaimTemplate")
    for pod in list(store.objects(pods)):
        wanted = [entry for entry in (pod.get("spec") or {}).get("resourceClaims") or []
                  if entry.get("resourceClaimTemplateName")]  # fmt: skip
        if not wanted or pod["metadata"].get("deletionTimestamp"):
            continue
        made = {entry.get("name") for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for entry in wanted:
            if entry.get("name") in made:
                continue
            try:
                template = store.get(templates, namespace, entry["resourceClaimTemplateName"])
            except ApiError:
                api.refuse(f"pod {namespace}/{name}: ResourceClaimTemplate {entry['resourceClaimTemplateName']!r} "
                           "does not exist; its claim is not made")  # fmt: skip
                continue
            claim = api.create(_claim(pod, entry["name"], template))
            if claim is not None:
                statuses.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
        if len(statuses) > len(made):
            store.patch(pods, namespace, name, {"status": {"resourceClaimStatuses": statuses}}, MERGE_PATCH,
                        subresource="status")  # fmt: skip


def _claim(pod: Obj, claim_name: str, template: Obj) -> dict[str, Any]:
    metadata = pod["metadata"]
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
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
