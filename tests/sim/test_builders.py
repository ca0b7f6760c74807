"""Clusters from manifests as kubectl prints them, and from a compact shape."""

import json

import pytest

from scheduler.ports.sim.builders import ClusterShape, ManifestError, load, read_manifests
from tests.sim.support import store
from topology import node_record

NODE_LIST = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-1, labels: {example.com/rack: r1}}
  status:
    allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-2}
  status: {capacity: {cpu: "32", pods: "110"}}
"""


def test_a_kubectl_list_and_multi_document_yaml_and_json_all_read() -> None:
    assert [obj["metadata"]["name"] for obj in read_manifests(NODE_LIST)] == ["gpu-1", "gpu-2"]
    multi = (
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n"
    )
    assert [obj["metadata"]["name"] for obj in read_manifests(multi)] == ["a", "b"]
    as_json = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "NodeList",
            "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "c"}}],
        }
    )
    assert [obj["metadata"]["name"] for obj in read_manifests(as_json)] == ["c"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Node\nmetadata: {name: [", "nodes.yaml: not valid YAML or JSON at line 2"),
        ("- just\n- a list\n", "nodes.yaml: document 1 is not an object"),
        ("metadata: {name: x}\n", "nodes.yaml: object 'x' has no apiVersion or kind"),
    ],
)
def test_unreadable_manifests_say_where(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as raised:
        read_manifests(text, source="nodes.yaml")
    assert str(raised.value).startswith(message)


def test_loading_restores_objects_and_creates_namespaces() -> None:
    sim = store()
    running = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"nodeName": "gpu-1", "containers": []},
        "status": {"phase": "Running"},
    }
    loaded = load(sim, [*read_manifests(NODE_LIST), running], assume_ready=True)
    assert [obj["metadata"]["name"] for obj in loaded] == ["gpu-1", "gpu-2", "p"]
    pod = sim.get(sim.resource("v1", "Pod"), "team", "p")
    assert pod["status"] == {"phase": "Running"} and pod["spec"]["nodeName"] == "gpu-1"  # kept as they were
    assert node_record(sim.get(sim.resource("v1", "Node"), None, "gpu-2")).ready  # given Ready=True
    with pytest.raises(ManifestError) as unknown:
        load(sim, [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}])
    assert str(unknown.value) == "Job 'j': SimCluster does not serve batch/v1 Job"


def test_a_compact_shape_builds_labelled_ready_gpu_nodes() -> None:
    shape = ClusterShape.parse("blocks=2,racks=3,nodes=4,gpus=8,memory=256,storage=2Ti")
    nodes = shape.node_manifests()
    assert len(nodes) == 24
    record = node_record(nodes[-1])
    assert record.name == "b1-r2-n3"
    assert record.labels == {
        "kubernetes.io/hostname": "b1-r2-n3",
        "example.com/block": "b1",
        "example.com/rack": "b1-r2",
    }
    assert record.allocatable == {
        "cpu": 64000,
        "memory": 256 << 30,
        "ephemeral-storage": 2 << 40,
        "pods": 110,
        "nvidia.com/gpu": 8,
    }
    assert record.ready


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("blocks=two", "cluster shape 'blocks=two': blocks must be a whole number, got 'two'"),
        ("racks=0", "cluster shape 'racks=0': racks must be at least 1"),
        (
            "dra=8",
            "cluster shape 'dra=8': dra must be <driver>:<devices per node>, optionally :mig (partitioned GPUs) or "
            ":shared (GPUs shared by memory), such as dra=gpu.nvidia.com:8:mig, got '8'",
        ),
        (
            "floors=3",
            "cluster shape 'floors=3': 'floors=3' is not one of blocks, racks, nodes, gpus, cpu, memory, pods, "
            "storage, dra=<value>",
        ),
        (
            "memory=lots",
            "cluster shape 'memory=lots': memory must be a positive quantity such as 512Gi, got 'lots'",
        ),
        (
            "blocks=100000,racks=100,nodes=100",
            "cluster shape 'blocks=100000,racks=100,nodes=100': 1,000,000,000 nodes is more than the 50,000 a "
            "shape may have; give a file of Node manifests for a larger cluster",
        ),
    ],
)
def test_a_bad_shape_is_one_readable_line(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as raised:
        ClusterShape.parse(text)
    assert str(raised.value) == message


def test_a_shape_takes_memory_and_cpu_as_quantities_as_the_readme_says() -> None:
    node = ClusterShape.parse("blocks=1,racks=1,nodes=1,memory=256Gi,cpu=500m").node_manifests()[0]
    assert node["status"]["allocatable"]["memory"] == "256Gi"
    assert node["status"]["allocatable"]["cpu"] == "500m"
    legacy = ClusterShape.parse("blocks=1,racks=1,nodes=1,memory_gi=128").node_manifests()[0]
    assert legacy["status"]["allocatable"]["memory"] == "128Gi"
