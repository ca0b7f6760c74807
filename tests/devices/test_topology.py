"""Topology from devices: a gang requires or prefers one domain of a device attribute (the NVLink clique its
GPUs are in) as it does of a node label, decided on the simulated clock."""

from __future__ import annotations

from scheduler.decision import Code
from scheduler.ports.port import RESOURCE_SLICES, Change
from tests.devices.support import node_slice
from tests.devices.test_placement import claiming, dra_loop
from tests.scheduler.loop import Loop

CLIQUE = "gpu.nvidia.com/cliqueId"
REQUIRED = "scheduling.phalanx.dev/topology-required"
PREFERRED = "scheduling.phalanx.dev/topology-preferred"

#: Two cliques that cut across the racks: the rack says nothing about which nodes share NVLink.
CLIQUES = {
    "b0-r0-n0": "A", "b0-r0-n1": "A", "b0-r1-n0": "A",
    "b0-r0-n2": "B", "b0-r1-n1": "B", "b0-r1-n2": "B", "b0-r1-n3": "B",
}  # fmt: skip


def clique_loop() -> Loop:
    """Two racks of four nodes; seven publish 8 GPUs each, in the cliques of :data:`CLIQUES`."""
    loop = dra_loop(device_nodes=())
    for node, clique in CLIQUES.items():
        loop.state.apply(RESOURCE_SLICES, Change("ADDED", node_slice(node, clique=clique)))
    return loop


def test_a_gang_that_requires_one_clique_lands_on_the_nodes_of_the_clique_that_holds_it() -> None:
    loop = clique_loop()
    pods = [claiming(loop, f"w-{i}", ("w", 4), annotations={REQUIRED: CLIQUE}) for i in range(4)]
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/w")
    assert outcome.code is Code.SCHEDULED
    assert {CLIQUES[loop.bound()[pod]] for pod in pods} == {"B"}  # A has three nodes of eight GPUs, B four


def test_a_gang_larger_than_every_clique_is_told_so_and_binds_nothing() -> None:
    loop = clique_loop()
    for i in range(5):
        claiming(loop, f"w-{i}", ("w", 5), annotations={REQUIRED: CLIQUE})
    loop.settle()
    (outcome,) = loop.outcomes("pfn:ml/w")
    assert outcome.code is Code.UNRESOLVABLE  # seven nodes have the devices, but no clique has five
    assert outcome.message.endswith(
        "Gang ml/w needs 5 pods (40 devices of class gpu.nvidia.com) in one gpu.nvidia.com/cliqueId; the largest "
        "cliqueId fits 4 (it has 32 devices of class gpu.nvidia.com free). No cliqueId could hold it even if it "
        "were empty (the largest holds 4)."
    )
    assert not loop.bound()


def test_a_gang_that_prefers_one_clique_is_kept_in_one() -> None:
    loop = clique_loop()
    pods = [claiming(loop, f"w-{i}", ("w", 3), annotations={PREFERRED: CLIQUE}) for i in range(3)]
    loop.settle()
    assert len({CLIQUES[loop.bound()[pod]] for pod in pods}) == 1


def test_a_node_whose_devices_disagree_is_in_no_clique_and_a_republished_slice_moves_it() -> None:
    loop = clique_loop()
    # b0-r1-n3's driver now reports two of its GPUs in another clique: B has three whole nodes left.
    mixed = node_slice("b0-r1-n3", clique="B", generation=2)
    for device in mixed["spec"]["devices"][:2]:
        device["attributes"]["cliqueId"] = {"string": "C"}
    loop.state.apply(RESOURCE_SLICES, Change("MODIFIED", mixed))
    for i in range(4):
        claiming(loop, f"w-{i}", ("w", 4), annotations={REQUIRED: CLIQUE})
    loop.settle()
    assert not loop.bound()
    # The driver publishes the node in clique A: A now has four nodes, and the gang goes there.
    loop.state.apply(RESOURCE_SLICES, Change("MODIFIED", node_slice("b0-r1-n3", clique="A", generation=3)))
    loop.settle()  # no waiting out the back-off: a change of domains wakes the gang
    assert set(loop.bound().values()) == {"b0-r0-n0", "b0-r0-n1", "b0-r1-n0", "b0-r1-n3"}
