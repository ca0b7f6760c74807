"""``batch/v1`` Job, as kube-controller-manager's Job controller runs it (``pkg/controller/job``).

- Pods are named ``<job>-<5 random characters>``, or ``<job>-<index>-<5 characters>`` when the Job is
  ``Indexed`` (which also sets the pod's ``hostname`` to ``<job>-<index>`` and the completion index
  label and annotation); every pod carries the labels the API server gives the Job's template
  (``batch.kubernetes.io/job-name``, ``batch.kubernetes.io/controller-uid`` and their legacy twins).
- At most ``parallelism`` pods run at once, and no more than the completions still missing; when one
  succeeds the next starts; a pod that fails (or is deleted while it runs) is replaced until more than
  ``backoffLimit`` (6) have failed, and then the Job fails and its running pods are deleted, as they are
  when the Job's own ``activeDeadlineSeconds`` pass. A suspended Job creates nothing.
- ``podFailurePolicy`` rules on pod conditions: the first rule whose ``onPodConditions`` a failed pod
  carried decides: ``Ignore`` (not counted against ``backoffLimit``: what a preemption's
  ``DisruptionTarget`` should be), ``FailJob``, or ``Count``; a pod no rule matches counts.

Not modelled: the exponential delay before replacing a failed pod, ``podFailurePolicy`` rules on exit
codes (simulated containers have none), ``backoffLimitPerIndex``, ``successPolicy``, the pods'
``batch.kubernetes.io/job-tracking`` finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    owner,
    pod_from,
    template_of,
)

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
_PREFIX_LIMIT = 58


class JobController(Controller):
    kind = "Job"

    def __init__(self, job: Manifest, *, uid: str, where: str | None = None, field: str = "spec.template") -> None:
        self.where = where or describe(job)
        self.namespace, self.name = name_of(job)
        self.uid = uid
        self.job = job
        spec = mapping(job, "spec", where=self.where, required=True)
        self.completions = count(spec, "completions", where=self.where, default=None)
        self.parallelism = count(spec, "parallelism", where=self.where, default=1) or 0
        if spec.get("completions") is None and spec.get("parallelism") is None:
            self.completions = 1  # the API server's default: one pod that must succeed once
        mode = spec.get("completionMode", "NonIndexed")
        if mode not in ("NonIndexed", "Indexed"):
            raise WorkloadError(f"{self.where}: spec.completionMode must be NonIndexed or Indexed")
        self.indexed = mode == "Indexed"
        if self.indexed and self.completions is None:
            raise WorkloadError(f"{self.where}: an Indexed Job needs spec.completions")
        self.backoff_limit = count(spec, "backoffLimit", where=self.where, default=6) or 0
        self.deadline = count(spec, "activeDeadlineSeconds", where=self.where, default=None, least=1)
        self.suspended = bool(spec.get("suspend"))
        self.template = template_of(spec, "template", where=self.where, field=field)
        if self.template["spec"].get("restartPolicy") not in ("Never", "OnFailure"):
            raise WorkloadError(
                f"{self.where}: spec.template.spec.restartPolicy must be Never or OnFailure, as the API server requires"
            )
        self.rules = _condition_rules(spec, self.where)
        self.started: float | None = None
        #: ``Complete`` or ``Failed`` once the Job has ended.
        self.condition: str | None = None
        self._failed: set[str] = set()
        self._running: set[str] = set()

    def labels(self) -> dict[str, str]:
        """The labels the API server adds to a Job's template (from its generated selector)."""
        return {CONTROLLER_UID: self.uid, JOB_NAME: self.name, "controller-uid": self.uid, "job-name": self.name}

    def start(self, api: Api) -> None:
        self.started = api.now()
        if not self.suspended:
            self.reconcile(api, {})

    def next_due(self) -> float | None:
        if self.deadline is None or self.started is None or self.condition or self.suspended:
            return None
        return self.started + self.deadline

    def reconcile(self, api: Api, owned: Mapping[str, Sequence[Obj]]) -> None:
        if self.condition or self.suspended:
            return
        pods = owned.get(self.uid, ())
        running = [pod for pod in pods if active(pod)]
        uids = {pod["metadata"]["uid"] for pod in running}
        # A pod that was running and is going or gone (deleted, preempted) failed, as far as the Job can tell.
        succeeded_uids = {
            pod["metadata"]["uid"] for pod in pods if (pod.get("status") or {}).get("phase") == "Succeeded"
        }
        failed = self._running - uids - succeeded_uids
        failed |= {pod["metadata"]["uid"] for pod in pods if (pod.get("status") or {}).get("phase") == "Failed"}
        last = {pod["metadata"]["uid"]: pod for pod in pods}
        fail_job = False
        for uid in failed - self._failed:
            seen = _conditions_of(last.get(uid) or api.gone.get(uid) or {})
            action = next((rule for wanted, rule in self.rules if wanted & seen), "Count")
            fail_job |= action == "FailJob"
            if action != "Ignore":
                self._failed.add(uid)
        self._running = uids
        deadline = self.next_due()
        too_many = len(self._failed) > self.backoff_limit
        if too_many or fail_job or (deadline is not None and api.now() >= deadline):
            self._end(api, "Failed", running)
            return
        succeeded = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Succeeded"]
        if self.indexed:
            self._indexed(api, running, succeeded)
        else:
            self._non_indexed(api, running, succeeded)

    def _non_indexed(self, api: Api, running: list[Obj], succeeded: list[Obj]) -> None:
        if self.completions is None:
            # A work queue: once one pod has succeeded no new ones start, and the Job completes when all are done.
            if succeeded:
                if not running:
                    self.condition = "Complete"
                return
            missing = self.parallelism
        else:
            if len(succeeded) >= self.completions:
                self._end(api, "Complete", running)
                return
            missing = min(self.parallelism, self.completions - len(succeeded))
        for _ in range(missing - len(running)):
            self._create(api, None)

    def _indexed(self, api: Api, running: list[Obj], succeeded: list[Obj]) -> None:
        assert self.completions is not None
        done = {_index(pod) for pod in succeeded}
        if len(done & set(range(self.completions))) >= self.completions:
            self._end(api, "Complete", running)
            return
        busy = {_index(pod) for pod in running}
        waiting = [index for index in range(self.completions) if index not in done and index not in busy]
        for index in waiting[: max(0, self.parallelism - len(running))]:
            self._create(api, index)

    def _create(self, api: Api, index: int | None) -> None:
        labels, annotations, spec = self.labels(), {}, {}
        # The API server cuts a generateName to 58 characters before adding its 5; for an Indexed pod
        # the Job controller cuts the Job's name instead, so that the index survives.
        prefix = f"{self.name}-"[:_PREFIX_LIMIT]
        if index is not None:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
            spec["hostname"] = f"{self.name}-{index}"
            suffix = f"-{index}-"
            prefix = self.name[: _PREFIX_LIMIT - len(suffix)] + suffix
        pod = pod_from(
            api,
            self.template,
            namespace=self.namespace,
            generate_name=prefix,
            labels=labels,
            annotations=annotations,
            owned_by=owner("batch/v1", "Job", self.name, self.uid),
            spec=spec,
        )
        created = api.create(pod)
        if created is not None:
            self._running.add(created["metadata"]["uid"])

    def _end(self, api: Api, condition: str, running: list[Obj]) -> None:
        self.condition = condition
        for pod in running:
            api.delete_pod(pod)


def _condition_rules(spec: Mapping[str, Any], where: str) -> list[tuple[set[tuple[str, str]], str]]:
    """``podFailurePolicy.rules`` on pod conditions, in order: the (type, status) pairs each matches, and its
    action (rules on exit codes are left out: simulated containers exit with none)."""
    rules = mapping(spec, "podFailurePolicy", where=where).get("rules", [])
    if not isinstance(rules, list):
        raise WorkloadError(f"{where}: spec.podFailurePolicy.rules must be a list")
    found = []
    for i, rule in enumerate(rules):
        action = rule.get("action") if isinstance(rule, Mapping) else None
        if action not in ("Ignore", "FailJob", "Count", "FailIndex"):
            raise WorkloadError(
                f"{where}: spec.podFailurePolicy.rules[{i}].action must be Ignore, FailJob, Count or FailIndex"
            )
        wanted = {
            (str(item.get("type")), str(item.get("status", "True")))
            for item in rule.get("onPodConditions") or []
            if isinstance(item, Mapping)
        }
        if wanted:
            found.append((wanted, "FailJob" if action == "FailIndex" else action))
    return found


def _conditions_of(pod: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {
        (str(condition.get("type")), str(condition.get("status")))
        for condition in (pod.get("status") or {}).get("conditions") or []
        if isinstance(condition, Mapping)
    }


def _index(pod: Mapping[str, Any]) -> int:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX, "-1")
    try:
        return int(value)
    except ValueError:
        return -1
