"""Loading manifests into a gang index, and an outline of compiled trees that reads like the YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scheduler.frontends.samples import pod as sample_pod
from scheduler.gangs import GangIndex, GangSettings
from topology import GangRequest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: Examples of what controllers expand (Jobs, LeaderWorkerSets, claims made from templates): the simulate
#: tests run them; the API alone serves the rest.
EXPANDED_EXAMPLES = ("timeline", "preemption-jobs", "dra")
LEVELS = ("topology.kubernetes.io/zone", "example.com/block", "example.com/rack", "kubernetes.io/hostname")


def documents(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for document in yaml.safe_load_all(path.read_text()):
        if not document:
            continue
        if str(document.get("kind", "")).endswith("List"):
            found.extend(document.get("items") or [])
        elif document.get("kind") != "Namespace":  # the examples create theirs, for kubectl apply -f examples/x/
            found.append(document)
    return found


def index_of(*paths: Path, settings: GangSettings | None = None) -> GangIndex:
    index = GangIndex(settings or GangSettings(levels=LEVELS))
    for path in paths:
        for files in sorted(path.rglob("*.yaml")) if path.is_dir() else [path]:
            for document in documents(files):
                feed(index, document)
    index.take_changed()
    return index


def feed(index: GangIndex, document: dict[str, Any]) -> None:
    if document.get("kind") == "Pod":
        index.upsert_pod(document)
    else:
        assert index.upsert_group(document), f"not a gang source: {document.get('apiVersion')} {document.get('kind')}"


def outline(request: GangRequest, depth: int = 0) -> list[str]:
    """One line per node: key, minimums, topology; leaves list their pods' names."""
    words = []
    if request.is_leaf:
        words.append(f"{request.min_pods} of {len(request.pods)} pods")
    else:
        words.append(f"{request.min_children} of {len(request.children)} parts")
        if request.min_pods:
            words.append(f"{request.min_pods} pods in all")
    if request.required:
        words.append(f"required {request.required}")
    if request.preferred:
        words.append(f"preferred {request.preferred}")
    line = f"{'  ' * depth}{request.key} ({', '.join(words)})"
    if request.is_leaf and request.pods:
        line += ": " + " ".join(member.key.split("/", 1)[1] for member in request.pods)
    return [line] + [text for child in request.children for text in outline(child, depth + 1)]


def pod(
    name: str,
    namespace: str = "ns",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    gpus: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return sample_pod(namespace, name, gpus, annotations=annotations, labels=labels, limits=limits, **spec)


PFN = "gang-scheduling.preferred.jp/gang"


def pfn_pod(
    name: str, size: str | None = "2", timeout: str | None = None, gang: str = "g", **kwargs: Any
) -> dict[str, Any]:
    annotations = {f"{PFN}-name": gang}
    if size is not None:
        annotations[f"{PFN}-size"] = size
    if timeout is not None:
        annotations[f"{PFN}-schedule-timeout-seconds"] = timeout
    return pod(name, annotations={**annotations, **kwargs.pop("annotations", {})}, **kwargs)


def _object(
    api_version: str, kind: str, name: str, annotations: dict[str, str] | None, spec: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations or {}},
        "spec": spec,
    }


def plugins_group(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return _object("scheduling.x-k8s.io/v1alpha1", "PodGroup", name, annotations, spec)


def volcano_group(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return _object("scheduling.volcano.sh/v1beta1", "PodGroup", name, annotations, spec)


def upstream_group(
    name: str, version: str = "v1beta1", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return _object(f"scheduling.k8s.io/{version}", "PodGroup", name, annotations, spec)


def composite(
    name: str, api_version: str = "scheduling.k8s.io/v1alpha3", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return _object(api_version, "CompositePodGroup", name, annotations, spec)


def workload(name: str, version: str = "v1alpha1", **spec: Any) -> dict[str, Any]:
    return _object(f"scheduling.k8s.io/{version}", "Workload", name, None, spec)


def plugins_pod(name: str, group: str, **kwargs: Any) -> dict[str, Any]:
    return pod(name, labels={"scheduling.x-k8s.io/pod-group": group, **kwargs.pop("labels", {})}, **kwargs)


def volcano_pod(name: str, group: str, **kwargs: Any) -> dict[str, Any]:
    return pod(name, annotations={"scheduling.k8s.io/group-name": group, **kwargs.pop("annotations", {})}, **kwargs)


def upstream_pod(name: str, group: str, **kwargs: Any) -> dict[str, Any]:
    return pod(name, schedulingGroup={"podGroupName": group}, **kwargs)


def indexed(*documents_in: dict[str, Any], settings: GangSettings | None = None) -> GangIndex:
    index = GangIndex(settings or GangSettings(levels=LEVELS))
    for document in documents_in:
        feed(index, document)
    index.take_changed()
    return index
