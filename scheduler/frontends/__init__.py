"""The front-ends: the ``phalanx`` command (``cli``) and what its sub-commands run (``simulate``,
``dry-run``, ``explain``, ``serve``), with their output (``render``, ``plot``) and the embedded samples.
They use the engine, the simulated world and the ports; nothing of the engine uses them."""
