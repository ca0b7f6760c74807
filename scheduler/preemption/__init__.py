"""Gang- and topology-aware preemption (docs/architecture.md, "Preemption").

What the engine's victim search (``topology.preemption``) needs from the cluster, and what follows its
decision:

- ``budgets``: PodDisruptionBudgets, read from their informer, and which pods each one selects;
- ``units``: running pods grouped into units of eviction (a whole gang, a gang's surplus pod, a plain
  pod), with the rules on who may be a victim of whom;
- ``nominations``: the room a preemptor waits for while its victims terminate, hidden from gangs of
  lower priority;
- ``evictions``: the victims whose eviction has begun (never chosen again until the API shows them
  going), and the evictions an earlier leader began that this one must finish;
- ``evictor``: the API writes (``DisruptionTarget`` condition, DELETE with the pod's grace period,
  ``status.nominatedNodeName``) and the Events, off the scheduling cycle, retried until they pass.
"""
