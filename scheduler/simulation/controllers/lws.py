"""``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet, as kubernetes-sigs/lws (v0.7, v0.8) runs it.

- A leader StatefulSet named after the LeaderWorkerSet (``Parallel``) makes one leader per group,
  ``<lws>-<group>``, from ``leaderTemplate`` (else ``workerTemplate``); once a leader exists (or is Ready,
  with ``startupPolicy: LeaderReady``) a worker StatefulSet ``<lws>-<group>`` makes its ``size - 1``
  workers ``<lws>-<group>-<1..size-1>``.
- Pods carry the labels and annotations LWS's controller and pod webhook set: ``name``, ``group-index``,
  ``worker-index``, ``group-key`` (sha1 of ``<namespace>/<leader>``), ``template-revision-hash``; ``size``
  and, on workers, ``leader-name``; subgroup labels with a ``subGroupPolicy``; the ``LWS_*`` variables.
- With gang scheduling configured (``gangSchedulingManagement.schedulerProvider: volcano``, which
  ``phalanx simulate`` assumes unless told ``--controller-gangs off``), each group gets a Volcano PodGroup
  ``<lws>-<group>-<revision>`` with ``minMember: size`` (1 with ``LeaderReady``), owned by its leader,
  and every pod of the group the ``scheduling.k8s.io/group-name`` annotation naming it: Phalanx reads
  Volcano PodGroups, so each group is placed whole.

Not modelled: ``RecreateGroupOnPodRestart`` (a failed pod is made again alone), rollouts, the exclusive
topology's affinity terms (the annotations are copied).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.gangs.pods import VOLCANO_GROUP_ANNOTATION
from scheduler.ports.sim.store import Obj
from scheduler.simulation.controllers.apps import StatefulSetController
from scheduler.simulation.controllers.base import (
    Api,
    Controller,
    Manifest,
    WorkloadError,
    count,
    describe,
    mapping,
    min_resources,
    name_of,
    owner,
    ready,
    template_hash,
    template_of,
)

PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME, GROUP_INDEX, WORKER_INDEX = f"{PREFIX}name", f"{PREFIX}group-index", f"{PREFIX}worker-index"
GROUP_KEY, REVISION = f"{PREFIX}group-key", f"{PREFIX}template-revision-hash"
SIZE, LEADER_NAME = f"{PREFIX}size", f"{PREFIX}leader-name"
SUBGROUP_INDEX, SUBGROUP_KEY = f"{PREFIX}subgroup-index", f"{PREFIX}subgroup-key"
SUBGROUP_SIZE, SUBGROUP_TYPE = f"{PREFIX}subgroup-size", f"{PREFIX}subgroup-policy-type"
#: LeaderWorkerSet annotations its pods inherit.
EXCLUSIVE, SUBGROUP_EXCLUSIVE = f"{PREFIX}exclusive-topology", f"{PREFIX}subgroup-exclusive-topology"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"


class LeaderWorkerSetController(Controller):
    kind = "LeaderWorkerSet"

    def __init__(self, lws: Manifest, *, api: Api, gangs: bool) -> None:
        where = describe(lws)
        self.namespace, self.name = name_of(lws)
        self.uid = api.uid()
        self.gangs = gangs
        self.annotations = dict((lws.get("metadata") or {}).get("annotations") or {})
        spec = mapping(lws, "spec", where=where, required=True)
        self.replicas = count(spec, "replicas", where=where, default=1) or 0
        template = mapping(spec, "leaderWorkerTemplate", where=where, required=True)
        self.size = count(template, "size", where=where, default=1, least=1) or 1
        field = "spec.leaderWorkerTemplate."
        self.worker_template = template_of(template, "workerTemplate", where=where, field=field + "workerTemplate")
        self.leader_template = (
            template_of(template, "leaderTemplate", where=where, field=field + "leaderTemplate")
            if template.get("leaderTemplate")
            else None
        )
        self.startup = spec.get("startupPolicy", "LeaderCreated")
        if self.startup not in ("LeaderCreated", "LeaderReady"):
            raise WorkloadError(f"{where}: spec.startupPolicy must be LeaderCreated or LeaderReady")
        network = mapping(spec, "networkConfig", where=where)
        self.unique_subdomains = network.get("subdomainPolicy", "Shared") == "UniquePerReplica"
        subgroups = mapping(template, "subGroupPolicy", where=where)
        self.subgroup_size = count(subgroups, "subGroupSize", where=where, default=None, least=1)
        self.subgroup_type = str(subgroups.get("subGroupPolicyType", "LeaderWorker"))
        self.revision = template_hash({"leaderWorkerTemplate": template, "networkConfig": network})
        leader = self._leader_template()
        self.leaders = StatefulSetController(
            namespace=self.namespace,
            name=self.name,
            uid=api.uid(),
            replicas=self.replicas,
            template=leader,
            service_name=self.name,
            ordered=False,
            decorate=self._leader_pod,
        )
        self.workers: dict[int, StatefulSetController] = {}
        self.groups: set[int] = set()

    def children(self) -> Iterable[Controller]:
        return (self.leaders, *self.workers.values())

    def start(self, api: Api) -> None:
        self.leaders.start(api)

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        super().reconcile(api, owned)
        for leader in owned.get(self.leaders.uid, ()):
            group = int(leader["metadata"]["labels"][GROUP_INDEX])
            if group in self.workers or leader["metadata"].get("deletionTimestamp"):
                continue
            if self.gangs and group not in self.groups:
                # Before anything else, as LWS does: the leader's scheduler waits for this object to place it.
                self.groups.add(group)
                self._pod_group(api, leader)
            if self.size == 1 or (self.startup == "LeaderReady" and not ready(leader)):
                continue
            workers = self.workers[group] = StatefulSetController(
                namespace=self.namespace,
                name=leader["metadata"]["name"],
                uid=api.uid(),
                replicas=self.size - 1,
                template=self._worker_template(leader),
                service_name=leader["metadata"]["name"] if self.unique_subdomains else self.name,
                ordered=False,
                start_ordinal=1,
                decorate=self._worker_pod,
            )
            workers.start(api)

    # -- templates, and what the webhook adds per pod ---------------------------------------------------

    def _inherited(self, *keys: str) -> dict[str, str]:
        """The LeaderWorkerSet's own annotations of ``keys`` that its pods carry too."""
        return {key: self.annotations[key] for key in keys if key in self.annotations}

    def _leader_template(self) -> Manifest:
        base = self.leader_template or self.worker_template
        annotations = {
            SIZE: str(self.size),
            **self._inherited(EXCLUSIVE),
        }
        if self.subgroup_size is not None:
            annotations[SUBGROUP_SIZE] = str(self.subgroup_size)
            annotations[SUBGROUP_TYPE] = self.subgroup_type
            annotations.update(self._inherited(SUBGROUP_EXCLUSIVE))
        labels = {WORKER_INDEX: "0", NAME: self.name, REVISION: self.revision}
        return _with_metadata(base, labels, annotations)

    def _worker_template(self, leader: Obj) -> Manifest:
        labels = {
            NAME: self.name,
            GROUP_INDEX: leader["metadata"]["labels"][GROUP_INDEX],
            GROUP_KEY: leader["metadata"]["labels"][GROUP_KEY],
            REVISION: self.revision,
        }
        annotations = {SIZE: str(self.size), LEADER_NAME: leader["metadata"]["name"]}
        annotations.update(self._inherited(EXCLUSIVE, SUBGROUP_EXCLUSIVE))
        if self.subgroup_size is not None:
            annotations[SUBGROUP_SIZE] = str(self.subgroup_size)
        gang = (leader["metadata"].get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
        if gang:
            annotations[VOLCANO_GROUP_ANNOTATION] = gang
        return _with_metadata(self.worker_template, labels, annotations)

    def _leader_pod(self, group: int, pod: Manifest) -> Manifest:
        name = pod["metadata"]["name"]
        labels = {GROUP_INDEX: str(group), GROUP_KEY: _sha1(f"{self.namespace}/{name}")}
        if self.subgroup_size is not None and self.subgroup_type != "LeaderExcluded":
            labels.update({SUBGROUP_INDEX: "0", SUBGROUP_KEY: _sha1(f"{name}/0")})
        annotations = {VOLCANO_GROUP_ANNOTATION: f"{self.name}-{group}-{self.revision}"} if self.gangs else {}
        spec = {"subdomain": name} if self.unique_subdomains else {}
        return self._with_variables(_decorated(pod, labels, annotations, spec), name, worker=0)

    def _worker_pod(self, worker: int, pod: Manifest) -> Manifest:
        labels = {WORKER_INDEX: str(worker)}
        leader = pod["metadata"]["annotations"][LEADER_NAME]
        if self.subgroup_size is not None:
            size = self.subgroup_size
            # LWS's getSubGroupIndex: the leader takes a place in the first subgroup unless the workers
            # alone fill whole subgroups.
            leader_apart = (self.size - 1) % size == 0 and self.size % size != 0
            index = (worker - 1) // size if leader_apart else worker // size
            labels.update({SUBGROUP_INDEX: str(index), SUBGROUP_KEY: _sha1(f"{leader}/{index}")})
        return self._with_variables(_decorated(pod, labels, {}, {}), leader, worker=worker)

    def _with_variables(self, pod: Manifest, leader: str, *, worker: int) -> Manifest:
        subdomain = leader if self.unique_subdomains else self.name
        variables = [
            {"name": "LWS_LEADER_ADDRESS", "value": f"{leader}.{subdomain}.{self.namespace}"},
            {"name": "LWS_GROUP_SIZE", "value": str(self.size)},
            {"name": "LWS_WORKER_INDEX", "value": str(worker)},
        ]
        spec = dict(pod["spec"])
        spec["containers"] = [
            {**container, "env": [*variables, *(container.get("env") or [])]}
            for container in spec.get("containers", [])
        ]
        return {**pod, "spec": spec}

    def _pod_group(self, api: Api, leader: Obj) -> None:
        """The Volcano PodGroup LWS's volcano provider creates for a group before its workers."""
        labels = leader["metadata"]["labels"]
        worker = self.worker_template
        group: dict[str, Any] = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": leader["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION],
                "namespace": self.namespace,
                "labels": {NAME: self.name, GROUP_INDEX: labels[GROUP_INDEX], REVISION: labels[REVISION]},
                "ownerReferences": [owner("v1", "Pod", leader["metadata"]["name"], leader["metadata"]["uid"])],
            },
            "spec": {
                "minMember": 1 if self.startup == "LeaderReady" else self.size,
                "minResources": min_resources([(self.leader_template or worker, 1), (worker, self.size - 1)]),
            },
        }
        if VOLCANO_QUEUE in self.annotations:
            group["spec"]["queue"] = self.annotations[VOLCANO_QUEUE]
        api.create(group)


def _with_metadata(template: Manifest, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Manifest:
    metadata = template.get("metadata") or {}
    return {
        **template,
        "metadata": {
            **metadata,
            "labels": {**(metadata.get("labels") or {}), **labels},
            "annotations": {**(metadata.get("annotations") or {}), **annotations},
        },
    }


def _decorated(
    pod: Manifest, labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]
) -> Manifest:
    decorated = _with_metadata(pod, labels, annotations)
    return {**decorated, "spec": {**pod["spec"], **spec}}


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()
