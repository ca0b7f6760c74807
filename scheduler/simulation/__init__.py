"""The simulated world: what runs around the scheduler in ``phalanx simulate`` and ``dry-run``.

- ``controllers/``: a Job, JobSet, LeaderWorkerSet, PyTorchJob, TrainJob, Deployment or StatefulSet
  becomes the pods and group objects its controller would create, written through the emulator's store
  as that controller writes them, and its controller keeps acting as pods change;
- ``kubelet``: bound pods start at once and end at their ``activeDeadlineSeconds`` or
  ``simulate.phalanx.dev/run-seconds``;
- ``timeline`` (``--workload FILE@WHEN``), ``history`` (when each pod was created, bound and ended);
- ``driver``: the real scheduler on the emulator, the simulated clock moved from one due moment to the
  next, and ``report``, what the run did;
- ``oracle``: the invariants every test and benchmark checks at every bind (no node beyond its
  allocatable, no gang left bound below its minimum because of Phalanx).

It reads the engine (the gang sources' words come from ``gangs/``, never copied) and the emulator in
``ports/sim``; neither of those imports it, and the front-ends use it.
"""

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
ORDER = (
    "controllers.base",
    "controllers.apps",
    "controllers.batch",
    "controllers.jobset",
    "controllers.kubeflow",
    "controllers.lws",
    "controllers.resourceclaims",
    "controllers",
    "device_checks",
    "history",
    "kubelet",
    "report",
    "timeline",
    "driver",
    "oracle",
)
