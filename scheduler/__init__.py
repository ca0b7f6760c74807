"""Phalanx's scheduler process, in three rooms (``tests/test_layers.py`` keeps them apart).

``ports/`` — how a cluster is reached: ``port`` (the protocol the engine speaks, plain JSON objects),
``errors``, ``kube/`` (kubernetes_asyncio to a real API server), ``sim/`` (the in-memory emulator, also
served over HTTP). Nothing here imports the engine.

The engine — everything at this level, in the order data flows through it:

1. ``informers``: list and watch each resource through the port;
2. ``state``: ``ClusterState``, the nodes' arrays, every pod's requests and what is assumed;
3. ``gangs/``: the sources' objects compiled into gang trees (``gangs/sources.py`` lists the sources);
4. ``queue``: which gang next, and when a failed one is tried again;
5. ``cycle``: one scheduling cycle per gang (placement by ``topology``), its ``outcome`` recorded once;
   ``waiting`` and ``permit`` for gangs that lack members, ``vacancies`` for room kept for a lost
   member's replacement, ``whose_room`` to name the gang that holds room a failed placement lacks;
   ``preemption/`` for gangs that do not fit (units of eviction, nominations, the evictor);
6. ``binding``: binds placed gangs (through ``jobs``, off the cycle); ``reporting``: conditions, Events and
   group status;
7. ``leader``, ``health``, ``metrics``, ``settings``, ``app`` (which wires it all together).

``frontends/`` — the ``phalanx`` command (``cli``) and what it runs: ``simulation``, ``dryrun``,
``explain``, ``sandbox`` (serve), their output (``render``, ``plot``), ``samples``, and the
``invariants`` checker the tests and benchmarks share. The engine never imports them.
"""
