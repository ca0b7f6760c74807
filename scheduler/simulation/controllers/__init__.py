"""The controllers a simulated cluster runs, so that ``phalanx simulate`` takes what people deploy.

Dispatch is on API group and version as well as kind (several projects' kinds share names). Each
expansion follows its project's own controller; see the module of each kind for what is and is not
modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.ports.sim.store import Obj
from scheduler.simulation.controllers.apps import DeploymentController, StatefulSetController
from scheduler.simulation.controllers.base import Api, Controller, Manifest, WorkloadError
from scheduler.simulation.controllers.batch import JobController
from scheduler.simulation.controllers.jobset import JobSetController
from scheduler.simulation.controllers.kubeflow import (
    RUNTIME_KINDS,
    TRAINER,
    PyTorchJobController,
    Runtimes,
    TrainJobController,
)
from scheduler.simulation.controllers.lws import LeaderWorkerSetController
from scheduler.simulation.controllers.resourceclaims import reconcile_claims

__all__ = ["EXPANDED", "Api", "Controller", "Controllers", "WorkloadError"]

#: What ``simulate`` expands, by (apiVersion, kind), in the words its messages use.
EXPANDED = {
    ("batch/v1", "Job"): "Job",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "JobSet",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "LeaderWorkerSet",
    ("kubeflow.org/v1", "PyTorchJob"): "PyTorchJob",
    (TRAINER, "TrainJob"): "TrainJob",
    ("apps/v1", "Deployment"): "Deployment",
    ("apps/v1", "StatefulSet"): "StatefulSet",
}


class Controllers:
    """Every controller started so far; ``gangs``: the controllers that can create group objects for their
    pods (LeaderWorkerSet's volcano provider, the training-operator's gang scheduling) are set up to."""

    def __init__(self, api: Api, *, gangs: bool = True) -> None:
        self.api = api
        self.gangs = gangs
        self.runtimes = Runtimes()
        self.running: list[Controller] = []
        self._seen_version = -1
        self._builders: dict[tuple[str, str], Callable[[Manifest], Controller]] = {
            ("batch/v1", "Job"): lambda obj: JobController(obj, uid=api.uid()),
            ("apps/v1", "Deployment"): lambda obj: DeploymentController(obj, uid=api.uid(), replica_set_uid=api.uid()),
            ("apps/v1", "StatefulSet"): lambda obj: StatefulSetController.parse(obj, uid=api.uid()),
            ("jobset.x-k8s.io/v1alpha2", "JobSet"): lambda obj: JobSetController(obj, api=api),
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): lambda obj: LeaderWorkerSetController(
                obj, api=api, gangs=self.gangs
            ),
            ("kubeflow.org/v1", "PyTorchJob"): lambda obj: PyTorchJobController(obj, api=api, gangs=self.gangs),
            (TRAINER, "TrainJob"): lambda obj: TrainJobController(obj, api=api, runtimes=self.runtimes),
        }

    @staticmethod
    def is_runtime(obj: Mapping[str, Any]) -> bool:
        return obj.get("apiVersion") == TRAINER and obj.get("kind") in RUNTIME_KINDS

    def expands(self, obj: Mapping[str, Any]) -> bool:
        return (str(obj.get("apiVersion")), str(obj.get("kind"))) in self._builders

    def parse(self, obj: Manifest) -> Controller:
        """The controller of ``obj``, not started; :class:`WorkloadError` when it cannot be expanded."""
        return self._builders[(str(obj.get("apiVersion")), str(obj.get("kind")))](obj)

    def start(self, controller: Controller) -> None:
        if self._safely(controller, controller.start, self.api):
            self.running.append(controller)

    def reconcile(self) -> None:
        """Let every controller act on the pods as they are now (when pods changed, or one is due)."""
        store = self.api.store
        due = self.next_due()
        seen = store.resource_version
        if seen == self._seen_version and (due is None or due > self.api.now()):
            return
        owned: dict[str, list[Obj]] = {}
        for pod in store.objects(store.resource("v1", "Pod")):
            for reference in pod["metadata"].get("ownerReferences") or ():
                if reference.get("controller"):
                    owned.setdefault(str(reference.get("uid")), []).append(pod)
        for controller in list(self.running):
            if not self._safely(controller, controller.reconcile, self.api, owned):
                self.running.remove(controller)
        reconcile_claims(self.api)  # kube-controller-manager's resourceclaim controller, for pods of any owner
        # What they wrote just now may call for more (a leader made, its workers next): not marked seen.
        self._seen_version = seen
        self.api.gone.clear()

    def next_due(self) -> float | None:
        return min((due for controller in self.running if (due := controller.next_due()) is not None), default=None)

    def _safely(self, controller: Controller, act: Callable[..., None], *args: Any) -> bool:
        """Run one step of a controller; a field of a shape parsing did not foresee stops that controller
        alone, with a line saying so, never the run."""
        try:
            act(*args)
        except (TypeError, ValueError, AttributeError, KeyError) as error:
            self.api.refuse(
                f"{controller.kind} {controller.name!r}: stopped expanding it: {type(error).__name__}: {error}"
            )
            return False
        return True
