"""The cluster port on a real API server: JSON over the package's own HTTP/1.1 connections (``http1.py``)."""

from scheduler.ports.kube.client import client_for, connect, user_of
from scheduler.ports.kube.cluster import KubeCluster, ReadOnlyViolation
from scheduler.ports.kube.connection import Connection, KubeConfigError

#: The modules from the bottom up: each imports only modules listed before it (``tests/test_layers.py``).
#: This ``__init__`` is the package's face: it may import any of them, and none of them imports it.
ORDER = ("connection", "http1", "cluster", "client", "writer", "writers")

__all__ = ["Connection", "KubeCluster", "KubeConfigError", "ReadOnlyViolation", "client_for", "connect", "user_of"]
