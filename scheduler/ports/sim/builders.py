"""Clusters and workloads for SimCluster: from manifests as ``kubectl get -o yaml`` prints them, or from a
compact shape such as ``blocks=2,racks=4,nodes=8,gpus=8``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from scheduler.ports.sim.status import ApiError
from scheduler.ports.sim.store import Store
from topology import QuantityError, parse_quantity

BLOCK = "example.com/block"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"


#: The most nodes ``--cluster blocks=...,racks=...,nodes=...`` builds (documented in the README).
MAX_SHAPE_NODES = 50_000


class ManifestError(ValueError):
    """A manifest file that cannot be read; the message names the file and what is wrong."""


def read_manifests(text: str, *, source: str = "<manifest>") -> list[dict[str, Any]]:
    """Objects of a YAML or JSON text: several documents, and ``List`` kinds, are flattened."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ManifestError(f"{source}: not valid YAML or JSON{where}: {getattr(error, 'problem', error)}") from None
    objects: list[dict[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ManifestError(f"{source}: document {number} is not an object")
        if str(document.get("kind", "")).endswith("List") and isinstance(document.get("items"), list):
            objects.extend(item for item in document["items"] if isinstance(item, dict))
        else:
            objects.append(document)
    for obj in objects:
        if not obj.get("apiVersion") or not obj.get("kind"):
            name = (obj.get("metadata") or {}).get("name", "?") if isinstance(obj.get("metadata"), dict) else "?"
            raise ManifestError(f"{source}: object {name!r} has no apiVersion or kind")
    return objects


def read_manifest_file(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ManifestError(f"{path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not UTF-8 text (byte {error.start}); YAML and JSON files are text") from None
    return read_manifests(text, source=str(path))


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterShape:
    """A uniform GPU cluster: ``blocks x racks x nodes``, with the resources of each node.

    ``cpu`` and ``memory`` are Kubernetes quantities (``64``, ``500m``, ``512Gi``), as on a Node; a bare
    number for memory is GiB (bytes would make no sensible node). At most
    :data:`MAX_SHAPE_NODES` nodes: a shape is for trying Phalanx out, and a typo with three zeros too
    many should be refused at once, not build for minutes.
    """

    blocks: int = 2
    racks: int = 4
    nodes: int = 8
    gpus: int = 8
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    #: ``ephemeral-storage``: inference images (vLLM's LeaderWorkerSet examples) request it.
    storage: str = "1Ti"
    block_label: str = BLOCK
    rack_label: str = RACK
    #: ``<driver>:<count>[:mig|:shared]``, several joined by ``+``: each node also publishes ``count`` devices
    #: of each DRA driver (a ResourceSlice of its own, a pool per node), with a DeviceClass to select them (see
    #: :data:`DRIVERS`). Nodes that publish GPUs of NVIDIA's driver carry the clique label GPU Feature
    #: Discovery gives them (``nvidia.com/gpu.clique``; here, the rack). ``:mig`` publishes each GPU as MIG
    #: partitions that share its counters (:data:`MIG_PROFILES`: a slice of counter sets and one of partitions
    #: per GPU); ``:shared`` as one device that claims share by memory (``allowMultipleAllocations``).
    dra: str = ""

    @staticmethod
    def parse(text: str) -> ClusterShape:
        """``blocks=2,racks=4,nodes=8,gpus=8,memory=512Gi`` (any subset of the fields; the rest keep defaults)."""
        known = [field.name for field in fields(ClusterShape)]
        values: dict[str, Any] = {}
        for part in filter(None, (item.strip() for item in text.split(","))):
            name, sep, value = (item.strip() for item in part.partition("="))
            if name == "memory_gi" or (name == "memory" and value.isdigit()):
                name, value = "memory", f"{value}Gi"  # a bare number of GiB, as earlier versions took it
            if not sep or name not in known:
                raise ManifestError(
                    f"cluster shape {text!r}: {part!r} is not one of "
                    f"{', '.join(key for key in known if not key.endswith('label'))}=<value>"
                )
            if name.endswith("label"):
                values[name] = value
            elif name == "dra":
                for driver, _, rest in (item.partition(":") for item in value.split("+")):
                    count, _, how = rest.partition(":")
                    if not driver or not count.isdigit() or int(count) < 1 or how not in ("", "mig", "shared"):
                        raise ManifestError(f"cluster shape {text!r}: dra must be <driver>:<devices per node>, "
                                            "optionally :mig (partitioned GPUs) or :shared (GPUs shared by "
                                            f"memory), such as dra=gpu.nvidia.com:8:mig, got {value!r}")  # fmt: skip
                values[name] = value
            elif name in ("cpu", "memory", "storage"):
                try:
                    amount = parse_quantity(value, field=name)
                except QuantityError:
                    amount = None
                if amount is None or amount <= 0:
                    example = "64 or 500m" if name == "cpu" else "512Gi"
                    raise ManifestError(
                        f"cluster shape {text!r}: {name} must be a positive quantity such as {example}, got {value!r}"
                    ) from None
                values[name] = value
            else:
                try:
                    values[name] = int(value)
                except ValueError:
                    raise ManifestError(
                        f"cluster shape {text!r}: {name} must be a whole number, got {value!r}"
                    ) from None
                if values[name] < (0 if name == "gpus" else 1):
                    raise ManifestError(f"cluster shape {text!r}: {name} must be at least {0 if name == 'gpus' else 1}")
        shape = ClusterShape(**values)
        if shape.blocks * shape.racks * shape.nodes > MAX_SHAPE_NODES:
            raise ManifestError(
                f"cluster shape {text!r}: {shape.blocks * shape.racks * shape.nodes:,} nodes is more than the "
                f"{MAX_SHAPE_NODES:,} a shape may have; give a file of Node manifests for a larger cluster"
            )
        return shape

    def manifests(self) -> list[dict[str, Any]]:
        """The nodes, and with ``dra`` each driver's DeviceClass and each node's ResourceSlice of it."""
        nodes = self.node_manifests()
        found = []
        for driver, _, rest in (item.partition(":") for item in self.dra.split("+") if self.dra):
            count, _, how = rest.partition(":")
            kind, class_name, selector = DRIVERS.get(driver, ("gpu", driver, f'device.driver == "{driver}"'))
            found.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": class_name},
                    "spec": {"selectors": [{"cel": {"expression": selector}}]},
                }
            )
            if how == "mig":
                for node in nodes:
                    found += _partitioned_slices(node, driver, int(count), self.rack_label)
            else:
                found += [_node_slice(node, driver, kind, int(count), self.rack_label, shared=how == "shared")
                          for node in nodes]  # fmt: skip
        if any(driver.startswith(f"{NVIDIA_GPUS}:") for driver in self.dra.split("+")):
            for node in nodes:
                node["metadata"]["labels"][GPU_CLIQUE] = node["metadata"]["labels"][self.rack_label]
        return [*nodes, *found]

    def node_manifests(self) -> list[dict[str, Any]]:
        nodes = []
        for block in range(self.blocks):
            for rack in range(self.racks):
                for index in range(self.nodes):
                    name = f"b{block}-r{rack}-n{index}"
                    capacity = {
                        "cpu": self.cpu,
                        "memory": self.memory,
                        "ephemeral-storage": self.storage,
                        "pods": str(self.pods),
                    }
                    if self.gpus:
                        capacity["nvidia.com/gpu"] = str(self.gpus)
                    nodes.append(
                        node_manifest(
                            name,
                            labels={self.block_label: f"b{block}", self.rack_label: f"b{block}-r{rack}"},
                            capacity=capacity,
                        )
                    )
        return nodes


#: NVIDIA's driver for GPUs, and the label GPU Feature Discovery puts on nodes of a multi-node NVLink domain.
NVIDIA_GPUS, GPU_CLIQUE = "gpu.nvidia.com", "nvidia.com/gpu.clique"

#: Drivers whose devices are not GPUs: what they publish, and the DeviceClass their chart installs (name and
#: selector), here NVIDIA's ComputeDomain driver and its IMEX channels. Any other driver publishes GPUs, with
#: a DeviceClass of its own name.
DRIVERS = {
    "compute-domain.nvidia.com": (
        "channel",
        "compute-domain-default-channel.nvidia.com",
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == "
        "'channel' && device.attributes['compute-domain.nvidia.com'].id == 0",
    ),
}


#: The MIG profiles of an 80 GB GPU a ``:mig`` node publishes: (name, memory, compute slices, how many fit).
MIG_PROFILES = (("1g.10gb", 10, 1, 7), ("2g.20gb", 20, 2, 3), ("3g.40gb", 40, 3, 2), ("7g.80gb", 80, 7, 1))


def _partitioned_slices(node: Mapping[str, Any], driver: str, gpus: int, rack_label: str) -> list[dict[str, Any]]:
    """A node's GPUs as MIG partitions (``DRAPartitionableDevices``), as NVIDIA's driver publishes them: one
    slice of counter sets (each GPU's memory and compute slices), then one slice of partitions per GPU (a
    slice holds counters or devices, and at most 64 devices that consume counters): one pool of several
    slices."""
    name = node["metadata"]["name"]
    clique = node["metadata"]["labels"].get(rack_label, name)
    pool = {"name": name, "generation": 1, "resourceSliceCount": gpus + 1}
    counters = [{"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}}
                for g in range(gpus)]  # fmt: skip
    found = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
              "metadata": {"name": f"{name}-{driver}-counters"},
              "spec": {"driver": driver, "nodeName": name, "pool": pool, "sharedCounters": counters}}]  # fmt: skip
    for g in range(gpus):
        devices = [
            {"name": f"gpu-{g}-{profile.split('.')[0]}-{k}",
             "attributes": {"type": {"string": "mig"}, "profile": {"string": profile}, "parentIndex": {"int": g},
                            "cliqueId": {"string": clique}},
             "capacity": {"memory": {"value": f"{memory}Gi"}},
             "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {"memory": {"value": f"{memory}Gi"},
                                                                         "slices": {"value": str(slices)}}}]}
            for profile, memory, slices, fit in MIG_PROFILES
            for k in range(fit)
        ]  # fmt: skip
        found.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                      "metadata": {"name": f"{name}-{driver}-gpu-{g}"},
                      "spec": {"driver": driver, "nodeName": name, "pool": pool, "devices": devices}})  # fmt: skip
    return found


def _node_slice(
    node: Mapping[str, Any], driver: str, kind: str, count: int, rack_label: str, *, shared: bool = False
) -> dict[str, Any]:
    """A node's devices as a DRA driver publishes them: one pool per node. GPUs say their index and their
    NVLink clique (here the node's rack); IMEX channels their type and id, as NVIDIA's drivers do. ``shared``
    GPUs are shared by claims, each taking the memory it asks (in whole GiB; all of it when it asks none)."""
    name = node["metadata"]["name"]
    clique = node["metadata"]["labels"].get(rack_label, name)
    devices: list[dict[str, Any]]
    if kind == "channel":
        devices = [{"name": f"channel-{index}", "attributes": {"type": {"string": "channel"}, "id": {"int": index}}}
                   for index in range(count)]  # fmt: skip
    else:
        devices = [
            {"name": f"gpu-{index}",
             "attributes": {"type": {"string": "gpu"}, "index": {"int": index}, "cliqueId": {"string": clique}},
             "capacity": {"memory": {"value": "80Gi"}}}
            for index in range(count)
        ]  # fmt: skip
    for device in devices if shared else ():
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {"default": "80Gi",
                                                         "validRange": {"min": "1Gi", "step": "1Gi"}}  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}"},
        "spec": {"driver": driver, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }  # fmt: skip


def node_manifest(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str],
    taints: Iterable[Mapping[str, str]] = (),
    ready: bool = True,
) -> dict[str, Any]:
    """A Node as a kubelet registers it: hostname label, capacity and allocatable, a Ready condition."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": {"taints": [dict(taint) for taint in taints]} if taints else {},
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
        },
    }


def load(store: Store, objects: Iterable[Mapping[str, Any]], *, assume_ready: bool = False) -> list[dict[str, Any]]:
    """Put objects into the store as they are (``restore``), creating their namespaces first.

    With ``assume_ready``, a Node that reports no conditions at all is given ``Ready=True``, as its
    kubelet would once it starts (hand-written node manifests rarely carry status).
    """
    stored = []
    for given in objects:
        obj = dict(given)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        try:
            resource = store.resource(str(api_version), str(kind))
        except ApiError:
            name = (obj.get("metadata") or {}).get("name", "?")
            raise ManifestError(f"{kind} {name!r}: SimCluster does not serve {api_version} {kind}") from None
        if kind == "Node" and assume_ready and not (obj.get("status") or {}).get("conditions"):
            obj = {**obj, "status": {**(obj.get("status") or {}), "conditions": [{"type": "Ready", "status": "True"}]}}
        namespace = (obj.get("metadata") or {}).get("namespace")
        if resource.namespaced:
            namespace = namespace or "default"
            store.ensure_namespace(namespace)
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        try:
            stored.append(store.restore(resource, obj))
        except ApiError as error:
            raise ManifestError(f"{kind} {(obj.get('metadata') or {}).get('name', '?')!r}: {error.message}") from None
    return stored
