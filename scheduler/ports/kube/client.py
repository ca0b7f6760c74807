"""Building a kubernetes_asyncio client from a kubeconfig or the in-cluster service account."""

from __future__ import annotations

import os
import re
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
            # kubernetes_asyncio's words for a certificate or key file the kubeconfig names that is not there.
            reason = re.sub(r"^File does not exists?: ?", "no such file: ", reason)
            raise KubeConfigError(f"{where}: {reason}") from None
        server = urlsplit(str(configuration.host))
        if server.scheme not in ("http", "https") or not server.hostname:
            raise KubeConfigError(f"kubeconfig {path}: server {configuration.host!r} is not an http(s) URL")
    return ApiClient(configuration)


def user_of(kubeconfig: str | None, context: str | None) -> str:
    """Who the client is to the API server, in words: the kubeconfig's user, or the in-cluster service account."""
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "the pod's service account"
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    try:
        with open(path, "rb") as stream:
            document = yaml.safe_load(stream)
        named = context or document.get("current-context")
        entry = next(item for item in document.get("contexts") or [] if item.get("name") == named)
        return f"user {entry['context']['user']!r} of kubeconfig {path}"
    except (OSError, yaml.YAMLError, AttributeError, KeyError, StopIteration, TypeError):
        return f"the user of kubeconfig {path}"


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
