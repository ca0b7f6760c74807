"""``jobset.x-k8s.io/v1alpha2`` JobSet, as kubernetes-sigs/jobset (v0.8 to v0.10) runs it.

- Each replicated job makes ``replicas`` (1) Jobs ``<jobset>-<replicatedJob>-<index>``, run by the Job
  controller (:mod:`.batch`); its webhook's defaults apply first: ``completionMode: Indexed``, pods'
  ``restartPolicy: OnFailure``, DNS hostnames on (pods' ``subdomain`` is ``network.subdomain``, else the
  JobSet's name), so pods are ``<jobset>-<replicatedJob>-<index>-<podIndex>-<5 characters>``.
- The Jobs and their pods carry JobSet's labels, also as annotations: ``jobset-name``,
  ``replicatedjob-name``, ``replicatedjob-replicas``, ``global-replicas``, ``job-index``, ``job-key`` (sha1
  of ``<namespace>/<job>``), ``job-global-index``, ``restart-attempt``, ``jobset-uid``, ``group-name``,
  ``group-replicas``, ``job-group-index``.
- ``startupPolicy: InOrder`` creates a replicated job's Jobs once every Job of the one before has its
  pods ready (or done); ``dependsOn`` once every Job of each replicated job it names is Ready (its pods
  ready or done) or Complete; ``suspend`` suspends every Job.

Not modelled: failure and success policies (restarting the whole JobSet), the exclusive placement's
affinity terms (its annotation is copied), the headless Service.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.ports.sim.store import Obj
from scheduler.simulation.controllers.base import (
    Api,
    Controller,
    Manifest,
    WorkloadError,
    active,
    count,
    describe,
    mapping,
    name_of,
    ready,
)
from scheduler.simulation.controllers.batch import JobController

PREFIX = "jobset.sigs.k8s.io/"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


class JobSetController(Controller):
    kind = "JobSet"

    def __init__(self, jobset: Manifest, *, api: Api) -> None:
        where = describe(jobset)
        self.namespace, self.name = name_of(jobset)
        self.uid = api.uid()
        spec = mapping(jobset, "spec", where=where, required=True)
        replicated = spec.get("replicatedJobs")
        if not isinstance(replicated, list) or not replicated:
            raise WorkloadError(f"{where}: spec.replicatedJobs must list at least one replicated job")
        network = mapping(spec, "network", where=where)
        subdomain = str(network.get("subdomain") or self.name) if network.get("enableDNSHostnames", True) else None
        self.in_order = mapping(spec, "startupPolicy", where=where).get("startupPolicyOrder", "AnyOrder") == "InOrder"
        suspended = bool(spec.get("suspend"))
        exclusive = ((jobset.get("metadata") or {}).get("annotations") or {}).get(EXCLUSIVE)
        parsed = [self._replicated(entry, where) for entry in replicated]
        names = [name for name, _, _, _ in parsed]
        self.depends = [self._depends_on(entry, names[:index], where) for index, entry in enumerate(replicated)]
        total = sum(replicas for _, replicas, _, _ in parsed)
        groups: dict[str, int] = {}
        for _, replicas, _, group in parsed:
            groups[group] = groups.get(group, 0) + replicas
        self.steps: list[list[JobController]] = []
        global_index, group_index = 0, dict.fromkeys(groups, 0)
        for name, replicas, template, group in parsed:
            step = []
            for index in range(replicas):
                job_name = f"{self.name}-{name}-{index}"
                keys = {
                    f"{PREFIX}jobset-name": self.name,
                    f"{PREFIX}replicatedjob-name": name,
                    f"{PREFIX}restart-attempt": "0",
                    f"{PREFIX}replicatedjob-replicas": str(replicas),
                    f"{PREFIX}global-replicas": str(total),
                    f"{PREFIX}job-index": str(index),
                    f"{PREFIX}job-key": hashlib.sha1(f"{self.namespace}/{job_name}".encode()).hexdigest(),
                    f"{PREFIX}job-global-index": str(global_index),
                    f"{PREFIX}jobset-uid": self.uid,
                    f"{PREFIX}group-name": group,
                    f"{PREFIX}group-replicas": str(groups[group]),
                    f"{PREFIX}job-group-index": str(group_index[group]),
                }
                global_index += 1
                group_index[group] += 1
                job = _job(
                    template,
                    job_name,
                    self.namespace,
                    keys,
                    subdomain=subdomain,
                    suspended=suspended,
                    exclusive=exclusive,
                )
                inside = f"{where} replicated job {name!r}"
                step.append(JobController(job, uid=api.uid(), where=inside, field="template.spec.template"))
            self.steps.append(step)
        self._started: set[int] = set()

    @staticmethod
    def _replicated(entry: object, where: str) -> tuple[str, int, Mapping[str, Any], str]:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise WorkloadError(f"{where}: every spec.replicatedJobs entry needs a name")
        inside = f"{where} replicated job {entry['name']!r}"
        replicas = count(entry, "replicas", where=inside, default=1) or 0
        template = mapping(entry, "template", where=inside, required=True)
        if not isinstance(template.get("spec"), Mapping) or not isinstance(template["spec"].get("template"), Mapping):
            raise WorkloadError(f"{inside}: template.spec.template is required (the pod template of its Jobs)")
        if template.get("metadata") is not None and not isinstance(template["metadata"], Mapping):
            raise WorkloadError(f"{inside}: template.metadata must be an object")
        return entry["name"], replicas, template, str(entry.get("groupName") or "default")

    @staticmethod
    def _depends_on(entry: Mapping[str, Any], earlier: list[str], where: str) -> list[tuple[int, str]]:
        """``dependsOn``: (index of an earlier replicated job, Ready or Complete) pairs."""
        given = entry.get("dependsOn") or []
        inside = f"{where} replicated job {entry['name']!r}"
        if not isinstance(given, list):
            raise WorkloadError(f"{inside}: dependsOn must be a list")
        depends = []
        for item in given:
            name = item.get("name") if isinstance(item, Mapping) else None
            status = item.get("status") if isinstance(item, Mapping) else None
            if name not in earlier or status not in ("Ready", "Complete"):
                raise WorkloadError(
                    f"{inside}: dependsOn entries need the name of an earlier replicated job and a status of "
                    f"Ready or Complete, got {item!r}"
                )
            depends.append((earlier.index(str(name)), str(status)))
        return depends

    def jobs(self) -> list[JobController]:
        return [job for step in self.steps for job in step]

    def children(self) -> Iterable[Controller]:
        return [job for index, step in enumerate(self.steps) if index in self._started for job in step]

    def start(self, api: Api) -> None:
        self._start_next(api, {})

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        super().reconcile(api, owned)
        self._start_next(api, owned)

    def _start_next(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        """Create the Jobs of every replicated job whose turn has come: with ``InOrder``, once the one before
        is ready; with ``dependsOn``, once each job it names is Ready (or Complete)."""
        for index, step in enumerate(self.steps):
            if index in self._started:
                continue
            if (
                self.in_order
                and index
                and not (index - 1 in self._started and all(_ready(job, owned) for job in self.steps[index - 1]))
            ):
                return
            if not all(self._met(earlier, status, owned) for earlier, status in self.depends[index]):
                continue
            for job in step:
                job.start(api)
            self._started.add(index)

    def _met(self, earlier: int, status: str, owned: Mapping[str, Sequence[Obj]]) -> bool:
        if earlier not in self._started:
            return False
        jobs = self.steps[earlier]
        if status == "Complete":
            return all(job.condition == "Complete" for job in jobs)
        return all(_ready(job, owned) for job in jobs)


def _job(
    template: Mapping[str, Any],
    name: str,
    namespace: str,
    keys: Mapping[str, str],
    *,
    subdomain: str | None,
    suspended: bool,
    exclusive: str | None,
) -> Manifest:
    """A child Job as JobSet's controller writes it, after its webhook's defaults."""
    metadata = template.get("metadata") or {}
    spec = dict(template.get("spec") or {})
    spec.setdefault("completionMode", "Indexed")
    if suspended:
        spec["suspend"] = True
    pod = dict(spec.get("template") or {})
    pod_metadata = pod.get("metadata") or {}
    annotations = {**keys, **({EXCLUSIVE: exclusive} if exclusive else {})}
    pod["metadata"] = {
        **pod_metadata,
        "labels": {**(pod_metadata.get("labels") or {}), **keys},
        "annotations": {**(pod_metadata.get("annotations") or {}), **annotations},
    }
    pod_spec = dict(pod.get("spec") or {})
    pod_spec.setdefault("restartPolicy", "OnFailure")
    if subdomain:
        pod_spec["subdomain"] = subdomain
    pod["spec"] = pod_spec
    spec["template"] = pod
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(metadata.get("labels") or {}), **keys},
            "annotations": {**(metadata.get("annotations") or {}), **annotations},
        },
        "spec": spec,
    }


def _ready(job: JobController, owned: Mapping[str, Sequence[Obj]]) -> bool:
    """JobSet's "ready" for InOrder: pods ready or succeeded at least ``min(parallelism, completions)``."""
    pods = owned.get(job.uid, ())
    done = sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Succeeded")
    running = sum(1 for pod in pods if active(pod) and ready(pod))
    wanted = min(job.parallelism, job.completions if job.completions is not None else job.parallelism)
    return job.condition is not None or done + running >= wanted
