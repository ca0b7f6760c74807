"""Building a kubernetes_asyncio client from a kubeconfig or the in-cluster service account."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config


class KubeConfigError(ValueError):
    """No usable cluster configuration; the message says which file or context, and what is wrong."""


async def connect(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """A client for ``kubeconfig`` (and ``context``), or for the cluster this process runs in."""
    configuration = Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as error:
            raise KubeConfigError(f"in-cluster configuration: {error}") from None
    else:
        path = (
            kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
        )
        if not os.path.exists(path):
            raise KubeConfigError(f"kubeconfig {path}: no such file")
        _check_kubeconfig(path)
        try:
            await load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except Exception as error:
            where = f"kubeconfig {path}" + (f", context {context!r}" if context else "")
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise KubeConfigError(f"{where}: {reason}") from None
        server = urlsplit(str(configuration.host))
        if server.scheme not in ("http", "https") or not server.hostname:
            raise KubeConfigError(f"kubeconfig {path}: server {configuration.host!r} is not an http(s) URL")
    return ApiClient(configuration)


def client_for(url: str) -> ApiClient:
    """A client for an API server that asks for no credentials (the sandbox's, on loopback)."""
    return ApiClient(Configuration(host=url))


def _check_kubeconfig(path: str) -> None:
    """Refuse a kubeconfig that is not a YAML mapping, with the parser's own words for where it broke."""
    try:
        with open(path, "rb") as stream:
            document = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise KubeConfigError(f"kubeconfig {path}: not readable YAML: {first}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: expected a mapping with clusters, contexts and users")
