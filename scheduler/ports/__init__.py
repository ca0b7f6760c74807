"""The ports: how the engine reaches a cluster (``port``: the protocol, ``errors``: what goes wrong),
over HTTP to a real API server (``kube``), or to the in-memory emulator (``sim``).
Nothing here imports the engine."""
