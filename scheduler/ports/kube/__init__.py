"""The cluster port on a real API server: JSON over the package's own aiohttp session."""

from scheduler.ports.kube.client import client_for, connect, user_of
from scheduler.ports.kube.cluster import KubeCluster, ReadOnlyViolation
from scheduler.ports.kube.connection import Connection, KubeConfigError

__all__ = ["Connection", "KubeCluster", "KubeConfigError", "ReadOnlyViolation", "client_for", "connect", "user_of"]
