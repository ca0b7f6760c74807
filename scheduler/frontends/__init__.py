"""The front-ends: the ``phalanx`` command (``cli``) and what its sub-commands run (``simulate``,
``dry-run``, ``explain``, ``serve``), with their output (``render``, ``plot``), the embedded samples,
and the invariant checker the tests and benchmarks share. They use the engine and the ports; nothing
of the engine uses them."""
