"""Gang- and topology-aware preemption (docs/architecture.md, "Preemption").

What the engine's victim search (``topology.preemption``) needs from the cluster, and what follows its
decision (PodDisruptionBudgets are read beside the state, ``scheduler/budgets.py``):

- ``units``: running pods grouped into units of eviction (a whole gang, a gang's surplus pod, a plain
  pod), with the rules on who may be a victim of whom;
- ``nominations``: the room a preemptor waits for while its victims terminate, hidden from gangs of
  lower priority;
- ``evictions``: the victims whose eviction has begun (never chosen again until the API shows them
  going), and the evictions an earlier leader began that this one must finish;
- ``planner``: whether a gang may preempt, and whom (the victim search, with the room others hold taken);
- ``postfilter``: the stage (``stages.py``): the pre-filter that hides nominated room, the post-filter the
  cycle calls when a gang does not fit, answering with an ``Outcome``, and what follows once the cycle
  recorded it (the nomination, the ledger, the evictor's job, the Event); the cycle imports none of it;
- ``evictor``: the API writes (``DisruptionTarget`` condition, DELETE with the pod's grace period,
  ``status.nominatedNodeName``) and the Events, off the scheduling cycle, retried until they pass.
"""
