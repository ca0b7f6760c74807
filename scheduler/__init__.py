"""Phalanx's scheduler process, in four rooms (``tests/test_layers.py`` keeps them apart).

``ports/`` — how a cluster is reached: ``port`` (the protocol the engine speaks, plain JSON objects),
``errors``, ``kube/`` (JSON over its own HTTP/1.1 to a real API server), ``sim/`` (the in-memory emulator, also
served over HTTP). Nothing here imports the engine.

The engine — everything else at this level. Data flows through it in this order:

1. ``informers``: list and watch each resource through the port;
2. ``state/``: ``ClusterState``, an applier per kind of object, what is assumed, and the indexes (the nodes'
   arrays, every pod's requests), beside what it reads with them: ``devices/`` (DRA's slices and claims),
   ``budgets`` (PodDisruptionBudgets) and ``runtimes`` (how long kinds of pods run); the cycle and its
   stages hold it as a ``ClusterView``;
3. ``gangs/``: the sources' objects compiled into gang trees (``gangs/sources.py`` lists the sources);
4. ``queue``: which gang next, and when a failed one is tried again;
5. ``loop`` folds cluster news into the queue and runs ``cycle``: one scheduling cycle per gang, calling
   the stages ``registry`` registers at the extension points of ``stages`` (pre-filters, placement by
   ``topology``, post-filters, permit): ``permit/`` for gangs that lack members, ``vacancies`` for room
   kept for replacements, ``preemption/``, ``starvation``; ``whose_room`` says whose room a gang lacks.
   The answer, a ``decision.Outcome``, is recorded in one place and told to every stage;
6. ``binding`` binds placed gangs, ``preemption/evictor`` evicts, ``reporting`` writes conditions, Events
   and group status: each a task of its own, off the cycle;
7. ``leader``, ``httpd`` and ``health``, ``metrics``, ``settings``, ``app`` (which builds it all).

Imports follow :data:`ORDER` instead: each module imports only modules listed before it.

``simulation/`` — the simulated world around the scheduler in ``simulate``, ``dry-run`` and ``serve``: controllers,
kubelet, the driver that moves the simulated clock and its report, and the ``oracle`` of invariants the
tests and benchmarks share. It reads the engine; the engine and the ports never import it.

``frontends/`` — the ``phalanx`` command (``cli``) and what it runs: ``dryrun``, ``explain``, ``sandbox``
(serve), their output (``render``, ``plot``) and ``samples``. The engine never imports them.
"""

from scheduler import dataclass_cache

# Before any of the package's classes is defined: their dataclass methods compiled once, not at every start.
dataclass_cache.install()

#: The release (pyproject.toml reads it from here): the ``--version`` flag and the User-Agent of every request.
__version__ = "0.1.0"

#: The engine's modules from the bottom up: each imports only modules listed before it (a package stands
#: for all its modules; ``gangs`` and ``devices`` order theirs in their own ``ORDER``, as ``topology``,
#: ``ports/kube``, ``ports/sim`` and ``simulation`` do). ``tests/test_layers.py`` holds every module to them.
ORDER = (
    # what everything uses
    "dataclass_cache",
    "clock",
    "jobs",
    "logs",
    "ratelimit",
    "metrics",
    "strings",
    # the gang model, the settings, what a decision is
    "gangs",
    "settings",
    "decision",
    # what the cluster is
    "devices",
    "budgets",
    "runtimes",
    "state",
    "informers",
    # the stages of a cycle (their extension points first), and what they keep
    "stages",
    "queue",
    "vacancies",
    "permit.holds",
    "permit.missing",
    "permit.stage",
    "starvation",
    "preemption.units",
    "preemption.nominations",
    "preemption.evictions",
    "preemption.planner",
    "preemption.postfilter",
    "whose_room",
    "journal",
    "registry",
    # the writers, off the cycle
    "reporting",
    "binding",
    "preemption.evictor",
    # the cycle, and the loop that runs it
    "cycle",
    "loop",
    # what the live view shows
    "picture",
    # the process
    "leader",
    "httpd",
    "health",
    "app",
)
