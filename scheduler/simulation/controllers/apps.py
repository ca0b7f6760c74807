"""``apps/v1`` Deployment (through its ReplicaSet) and StatefulSet, as kube-controller-manager runs them.

- A Deployment's ReplicaSet is ``<deployment>-<pod-template-hash>``; its pods are
  ``<replicaset>-<5 random characters>`` with the ``pod-template-hash`` label, ``replicas`` (1) of them
  running at once: one that fails or is deleted is replaced.
- A StatefulSet's pods are ``<name>-<ordinal>`` from ``spec.ordinals.start`` (0), with the
  ``controller-revision-hash``, ``statefulset.kubernetes.io/pod-name`` and ``apps.kubernetes.io/pod-index``
  labels, ``hostname`` the pod's name and ``subdomain`` the ``serviceName``. ``OrderedReady`` (the default)
  creates each ordinal only once every lower one is Running and Ready; ``Parallel`` creates them all. A
  pod that ended is deleted and made again under the same name.

Not modelled: rollouts (a changed template), scaling after arrival, ``minReadySeconds``, volume claims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from scheduler.ports.sim.store import Obj
from scheduler.simulation.controllers.base import (
    Api,
    Controller,
    Manifest,
    WorkloadError,
    active,
    count,
    describe,
    ended,
    mapping,
    name_of,
    owner,
    pod_from,
    ready,
    template_hash,
    template_of,
)

POD_TEMPLATE_HASH = "pod-template-hash"
REVISION_HASH = "controller-revision-hash"
POD_NAME = "statefulset.kubernetes.io/pod-name"
POD_INDEX = "apps.kubernetes.io/pod-index"

#: ``decorate(ordinal, pod)``: the pod as a mutating webhook leaves it (LeaderWorkerSet's sets its labels).
Decorate = Callable[[int, Manifest], Manifest]


class ReplicaSetController(Controller):
    kind = "ReplicaSet"

    def __init__(
        self, *, namespace: str, name: str, uid: str, replicas: int, template: Manifest, owned_by: Mapping[str, str]
    ) -> None:
        self.namespace, self.name, self.uid = namespace, name, uid
        self.replicas = replicas
        self.template = template
        self.hash = name.rsplit("-", 1)[-1]
        self.owned_by = owned_by

    def start(self, api: Api) -> None:
        self.reconcile(api, {})

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        running = sum(1 for pod in owned.get(self.uid, ()) if active(pod))
        for _ in range(self.replicas - running):
            api.create(
                pod_from(
                    api,
                    self.template,
                    namespace=self.namespace,
                    generate_name=f"{self.name}-",
                    labels={POD_TEMPLATE_HASH: self.hash},
                    owned_by=owner("apps/v1", "ReplicaSet", self.name, self.uid),
                )
            )


class DeploymentController(Controller):
    kind = "Deployment"

    def __init__(self, deployment: Manifest, *, uid: str, replica_set_uid: str) -> None:
        where = describe(deployment)
        self.namespace, self.name = name_of(deployment)
        self.uid = uid
        spec = mapping(deployment, "spec", where=where, required=True)
        template = template_of(spec, "template", where=where)
        replicas = count(spec, "replicas", where=where, default=1) or 0
        self.replica_set = ReplicaSetController(
            namespace=self.namespace,
            name=f"{self.name}-{template_hash(template)}",
            uid=replica_set_uid,
            replicas=replicas,
            template=template,
            owned_by=owner("apps/v1", "Deployment", self.name, uid),
        )

    def children(self) -> Iterable[Controller]:
        return (self.replica_set,)

    def start(self, api: Api) -> None:
        self.replica_set.start(api)


class StatefulSetController(Controller):
    kind = "StatefulSet"

    def __init__(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        replicas: int,
        template: Manifest,
        service_name: str | None,
        ordered: bool,
        start_ordinal: int = 0,
        decorate: Decorate | None = None,
    ) -> None:
        self.namespace, self.name, self.uid = namespace, name, uid
        self.replicas, self.template, self.service_name = replicas, template, service_name
        self.ordered, self.start_ordinal, self.decorate = ordered, start_ordinal, decorate
        self.revision = f"{name}-{template_hash(template)}"

    @staticmethod
    def parse(statefulset: Manifest, *, uid: str) -> StatefulSetController:
        where = describe(statefulset)
        namespace, name = name_of(statefulset)
        spec = mapping(statefulset, "spec", where=where, required=True)
        policy = spec.get("podManagementPolicy", "OrderedReady")
        if policy not in ("OrderedReady", "Parallel"):
            raise WorkloadError(f"{where}: spec.podManagementPolicy must be OrderedReady or Parallel, got {policy!r}")
        service = spec.get("serviceName")
        return StatefulSetController(
            namespace=namespace,
            name=name,
            uid=uid,
            replicas=count(spec, "replicas", where=where, default=1) or 0,
            template=template_of(spec, "template", where=where),
            service_name=str(service) if service else None,
            ordered=policy == "OrderedReady",
            start_ordinal=count(mapping(spec, "ordinals", where=where), "start", where=where, default=0) or 0,
        )

    def start(self, api: Api) -> None:
        self.reconcile(api, {})

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        pods = {pod["metadata"]["name"]: pod for pod in owned.get(self.uid, ())}
        for ordinal in range(self.start_ordinal, self.start_ordinal + self.replicas):
            pod = pods.get(f"{self.name}-{ordinal}")
            if pod is not None and ended(pod) and not pod["metadata"].get("deletionTimestamp"):
                api.delete_pod(pod, grace_seconds=0)  # nothing runs in it: gone at once, and made again
                pod = None
            if pod is None:
                self._create(api, ordinal)
                if self.ordered:
                    return
            elif self.ordered and not ready(pod):
                return

    def _create(self, api: Api, ordinal: int) -> None:
        name = f"{self.name}-{ordinal}"
        spec = {"hostname": name, **({"subdomain": self.service_name} if self.service_name else {})}
        pod = pod_from(
            api,
            self.template,
            namespace=self.namespace,
            name=name,
            labels={REVISION_HASH: self.revision, POD_NAME: name, POD_INDEX: str(ordinal)},
            owned_by=owner("apps/v1", "StatefulSet", self.name, self.uid),
            spec=spec,
        )
        if self.decorate is not None:
            pod = self.decorate(ordinal, pod)
        api.create(pod)
