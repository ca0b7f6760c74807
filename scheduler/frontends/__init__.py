"""The front-ends: the ``phalanx`` command (``cli``) and what its sub-commands run (``simulate``,
``dry-run``, ``explain``, ``serve``), with their output (``render``, ``plot``) and the embedded samples.
They use the engine, the simulated world and the ports; nothing of the engine uses them."""

import os

# numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin: 0.2 s of CPU at every
# start on two cores (half the CPU of all the imports), for nothing, since Phalanx decides on one thread
# and its arrays are too small for BLAS's threads to pay. Set before anything imports numpy (the
# ``phalanx`` command comes through here first); an operator's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
