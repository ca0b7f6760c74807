"""The cluster port on a real API server, through kubernetes_asyncio (the only package that imports it)."""

from scheduler.ports.kube.client import KubeConfigError, client_for, connect, user_of
from scheduler.ports.kube.cluster import KubeCluster

__all__ = ["KubeCluster", "KubeConfigError", "client_for", "connect", "user_of"]
