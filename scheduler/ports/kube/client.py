"""Choosing the connection: a kubeconfig if one is named, else the pod's service account; and who it is."""

from __future__ import annotations

import os

import yaml

from scheduler.ports.kube.connection import Connection, default_kubeconfig, from_kubeconfig, in_cluster, plain


def _in_cluster(kubeconfig: str | None, context: str | None) -> bool:
    return kubeconfig is None and context is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


async def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """The connection of ``kubeconfig`` (and ``context``), or of the cluster this process runs in."""
    if _in_cluster(kubeconfig, context):
        return in_cluster()
    return await from_kubeconfig(kubeconfig or default_kubeconfig(), context)


def user_of(kubeconfig: str | None, context: str | None) -> str:
    """Who the client is to the API server, in words: the kubeconfig's user, or the in-cluster service account."""
    if _in_cluster(kubeconfig, context):
        return "the pod's service account"
    path = kubeconfig or default_kubeconfig()
    try:
        with open(path, "rb") as stream:
            document = yaml.safe_load(stream)
        named = context or document.get("current-context")
        entry = next(item for item in document.get("contexts") or [] if item.get("name") == named)
        return f"user {entry['context']['user']!r} of kubeconfig {path}"
    except (OSError, yaml.YAMLError, AttributeError, KeyError, StopIteration, TypeError):
        return f"the user of kubeconfig {path}"


def client_for(url: str) -> Connection:
    """A connection to an API server that asks for no credentials (the sandbox's, on loopback)."""
    return plain(url)
