"""PFN's configuration keys in both spellings, and the minResources fail-fast check."""

import pytest

from scheduler.gangs import GangSettings, SettingsError, beyond_cluster, min_resources_problem
from tests.builders import GI, cluster, fill, gpu_shape
from topology import GangRequest, Member, Snapshot, Topology


@pytest.mark.parametrize(
    "args",
    [
        {
            "gangScheduleTimeoutSecondLimit": 50,
            "gangScheduleDefaultTimeoutSecond": 10,
            "gangScheduleTimeoutJitterSecond": 5,
        },
        {
            "gangScheduleTimeoutSecondsLimit": 50,
            "gangScheduleDefaultTimeoutSeconds": 10,
            "gangScheduleTimeoutJitterSeconds": 5,
        },
        {
            "gangScheduleTimeoutSecondLimit": 50,
            "gangScheduleTimeoutSecondsLimit": 50,
            "gangScheduleDefaultTimeoutSeconds": 10,
            "gangScheduleTimeoutJitterSecond": 5,
        },
    ],
    ids=["plugin spelling", "README spelling", "both, agreeing"],
)
def test_timeouts_are_read_in_either_spelling(args: dict[str, object]) -> None:
    settings = GangSettings.from_plugin_args({"gangAnnotationPrefix": "example.com/gang", **args})
    assert (settings.timeout_limit_seconds, settings.default_timeout_seconds, settings.timeout_jitter_seconds) == (
        50,
        10,
        5,
    )
    assert settings.annotation_prefix == "example.com/gang"


def test_defaults_are_pfns() -> None:
    settings = GangSettings.from_plugin_args({})
    assert (settings.timeout_limit_seconds, settings.default_timeout_seconds, settings.timeout_jitter_seconds) == (
        100,
        30,
        30,
    )
    assert settings.annotation_prefix == "gang-scheduling.preferred.jp/gang"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"gangScheduleTimeoutSecondLimit": 50, "gangScheduleTimeoutSecondsLimit": 60},
            "gangScheduleTimeoutSecondLimit and gangScheduleTimeoutSecondsLimit are the same setting but were given "
            "different values",
        ),
        (
            {"gangScheduleDefaultTimeoutSeconds": "ten"},
            "gangScheduleDefaultTimeoutSeconds must be a number of seconds, got 'ten'",
        ),
        ({"gangScheduleTimeoutJitterSeconds": -1}, "gangScheduleTimeoutJitterSecond must not be negative, got -1"),
        (
            {"gangScheduleTimeoutSecondLimit": float("inf")},
            "gangScheduleTimeoutSecondLimit must be a finite number, got inf",
        ),
        ({"gangScheduleTimeoutLimit": 5}, "unknown gang plugin setting(s): gangScheduleTimeoutLimit"),
    ],
)
def test_bad_settings_name_the_key(args: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        GangSettings.from_plugin_args(args)
    assert str(raised.value) == message


def test_min_resources_beyond_the_clusters_free_capacity_fail_fast() -> None:
    snapshot = Snapshot(cluster(1, 1, 2))  # 16 GPUs, 128 cores, 1Ti
    fill(snapshot, "b0-r0-n00", 8)
    assert min_resources_problem("team/etl", {"nvidia.com/gpu": 8, "cpu": 64_000}, snapshot) is None
    assert min_resources_problem("team/etl", {"nvidia.com/gpu": 9, "memory": 2048 * GI}, snapshot) == (
        "Gang team/etl declares minResources the cluster does not have free in total: "
        "memory 2Ti (free: 1Ti), nvidia.com/gpu 9 (free: 8)."
    )
    assert "example.com/fpga 1 (free: 0)" in (min_resources_problem("x", {"example.com/fpga": 1}, snapshot) or "")
    # Beyond what is free, but not beyond what the nodes have: preemption or a reservation may still help.
    assert min_resources_problem("team/etl", {"nvidia.com/gpu": 9}, snapshot, at_all=True) is None
    assert min_resources_problem("team/etl", {"nvidia.com/gpu": 17}, snapshot, at_all=True) == (
        "Gang team/etl declares minResources more than the cluster's nodes have: nvidia.com/gpu 17 "
        "(allocatable: 16); it waits for more nodes."
    )


def test_members_already_placed_count_against_the_empty_cluster_check() -> None:
    """Nine members run (two on nodes since cordoned), one more is pending: the cluster, empty, holds
    eight of the shape, but only one more pod is needed."""
    from tests.builders import cluster  # noqa: PLC0415
    from topology import Snapshot  # noqa: PLC0415

    nodes = cluster(1, 1, 8)
    snapshot = Snapshot(nodes, topology=Topology(levels=("example.com/rack", "kubernetes.io/hostname")))
    shape = gpu_shape(8)
    running = [Member(key=f"r-{i}", shape=shape, node=f"gone-{i}") for i in range(9)]
    request = GangRequest.leaf("team/big", [*running, Member(key="new", shape=shape)], min_pods=10)
    assert beyond_cluster(request, snapshot) is None
    too_many = GangRequest.leaf("team/big", [*running[:1], *(Member(key=f"n-{i}", shape=shape) for i in range(9))])
    found = beyond_cluster(too_many, snapshot)
    assert found is not None and found.reason.startswith(
        "Gang team/big needs 9 more pods; the cluster could hold at most 8"
    )


def test_an_optional_part_beyond_the_cluster_does_not_make_its_gang_impossible() -> None:
    snapshot = Snapshot(cluster(1, 1, 2), topology=Topology(levels=("example.com/rack", "kubernetes.io/hostname")))
    shape = gpu_shape(4)

    def leaf(key: str, count: int) -> GangRequest:
        return GangRequest.leaf(key, [Member(key=f"{key}-{i}", shape=shape) for i in range(count)])

    two_of_three = GangRequest.group("ns/root", [leaf("ns/a", 5), leaf("ns/b", 1), leaf("ns/c", 1)], min_children=2)
    assert beyond_cluster(two_of_three, snapshot) is None  # a cannot fit (5 x 4 GPUs on 16), b and c can
    all_three = GangRequest.group("ns/root", [leaf("ns/a", 5), leaf("ns/b", 1), leaf("ns/c", 1)])
    found = beyond_cluster(all_three, snapshot)
    assert found is not None and found.reason.startswith("Part ns/a of gang ns/root needs 5 pods")
