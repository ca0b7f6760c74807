"""`phalanx dry-run` and `phalanx explain` against a cluster served over HTTP: what they say, and that
they never write to it."""

from __future__ import annotations

import errno
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
import yaml
from aiohttp import web

from scheduler.frontends.dryrun import dry_run, read_real_cluster
from scheduler.frontends.explain import explain
from scheduler.frontends.render import table
from scheduler.ports.kube import KubeCluster, ReadOnlyViolation, connect
from scheduler.ports.port import NODES, PODS, Binding
from scheduler.settings import Settings, StarvationSettings
from tests.scheduler.support import Cluster, cluster, free_port, gpu_pod, kubeconfig, pfn, served
from tests.scheduler.test_kube_connection import TLS, https_server, write_kubeconfig

SETTINGS = Settings(levels=("example.com/block", "example.com/rack", "kubernetes.io/hostname"))
RACKS = "blocks=1,racks=2,nodes=4,gpus=8"


def busy_cluster(where: Cluster) -> None:
    """Rack b0-r1 is half taken by another scheduler; a gang waits that needs five nodes in one rack, one
    that fits, and a pod of the default scheduler waits too."""
    for i in range(2):
        where.create(gpu_pod(f"theirs-{i}", scheduler="default-scheduler", nodeName=f"b0-r1-n{i}"))
    rack = {"scheduling.phalanx.dev/topology-required": "example.com/rack"}
    for i in range(5):
        where.create(gpu_pod(f"big-{i}", annotations={**pfn("big", 5), **rack}))
    for i in range(2):
        where.create(gpu_pod(f"small-{i}", namespace="other", gpus=4, annotations=pfn("small", 2)))
    where.create(gpu_pod("waiting", scheduler="default-scheduler", gpus=1))


async def test_a_read_only_connection_refuses_every_write_before_it_is_sent(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        connection = (await connect(str(kubeconfig(tmp_path / "kubeconfig", where.url)))).reading_only()
        port = KubeCluster(connection)
        try:
            assert (await port.list(NODES)).items
            for write in (
                port.create(PODS, "team", gpu_pod("x")),
                port.patch(NODES, "", "b0-r0-n0", {"metadata": {"labels": {"x": "y"}}}),
                port.update(NODES, "", "b0-r0-n0", {"metadata": {"name": "b0-r0-n0"}}),
                port.patch_status(PODS, "team", "x", {"status": {}}),
                port.delete(PODS, "team", "x"),
                port.bind("team", "x", "uid", "b0-r0-n0"),
                port.bind_all([Binding("team", "x", "uid", "b0-r0-n0")]),
            ):
                with pytest.raises(ReadOnlyViolation):
                    await write
        finally:
            await port.close()
        assert set(where.server.methods) == {"GET"}


async def test_dry_run_shows_where_pending_gangs_would_go_and_writes_nothing(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        busy_cluster(where)
        version = where.store.resource_version
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
        report = await dry_run(copy, SETTINGS)
        assert where.store.resource_version == version and set(where.server.methods) == {"GET"}
        assert not any(verb not in ("get", "list") for verb, _, _ in where.server.audit)
    states = {gang.key: (gang.state, gang.bound) for gang in report.gangs}
    assert states == {"pfn:team/big": ("Pending", 0), "pfn:other/small": ("Bound", 2)}
    # other/small sorts first among gangs created in the same second, and packs into the rack already in use
    assert report.pending["team/big-0"] == (
        "5/8 nodes are available: 3 Insufficient nvidia.com/gpu. "
        "Gang team/big needs 5 pods in one example.com/rack; the largest rack fits 4. "
        "No rack could hold it even if it were empty (the largest holds 4)."
    )
    assert "team/waiting" not in report.pending  # the default scheduler's pod is not Phalanx's business

    only_other = await dry_run(copy, SETTINGS, namespace="other")
    assert [gang.key for gang in only_other.gangs] == ["pfn:other/small"] and list(only_other.pending) == []
    every_pod = await dry_run(copy, SETTINGS, all_schedulers=True)
    assert "team/waiting" in every_pod.bound


def crowded_by_low_priority(where: Cluster) -> None:
    """Rack b0-r0 runs a low-priority gang on all four nodes; a production gang that must run there waits."""
    for name, value in (("batch", 10), ("production", 1000)):
        where.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                      "value": value})  # fmt: skip
    for i in range(4):
        where.create(gpu_pod(f"sweep-{i}", annotations=pfn("sweep", 4), priorityClassName="batch",
                             nodeName=f"b0-r0-n{i}"))  # fmt: skip
    for i in range(2):
        where.create(gpu_pod(f"llm-{i}", annotations=pfn("llm", 2), priorityClassName="production",
                             nodeSelector={"example.com/rack": "b0-r0"}))  # fmt: skip


async def test_dry_run_and_explain_say_what_would_be_preempted_and_preempt_nothing(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        crowded_by_low_priority(where)
        version = where.store.resource_version
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
        report = await dry_run(copy, SETTINGS)
        text = await explain(copy, SETTINGS, "team/llm-0")
        assert where.store.resource_version == version and set(where.server.methods) == {"GET"}
    assert report.preempted == {f"team/sweep-{i}": "pfn:team/llm" for i in range(4)}  # the whole gang, not two pods
    assert (
        "Preempting 4 pods of lower priority on 2 nodes (b0-r0-n0, b0-r0-n1) (4 of pfn:team/sweep); the gang is "
        "bound there once they have terminated." in report.pending["team/llm-0"]
    )
    lines = table(report, title="t", levels=SETTINGS.levels, would=True).splitlines()
    assert lines[lines.index("Would preempt (pod, and the gang it makes room for):") + 1] == (
        "  team/sweep-0  by pfn:team/llm"
    )
    assert (
        "It would preempt 4 pod(s) of lower priority, then bind once they have terminated:\n"
        "  pfn:team/sweep: team/sweep-0, team/sweep-1, team/sweep-2, team/sweep-3"
    ) in text


async def test_explain_gives_the_reason_and_the_room_per_rack(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        busy_cluster(where)
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    text = await explain(copy, SETTINGS, "team/big-3")
    lines = text.splitlines()
    # README's sample of explain is this very answer, line for line.
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    sample = readme.split("that it joins its gang once they are removed:\n\n```\n", 1)[1].split("```")[0]
    assert sample.splitlines() == [line.rstrip() for line in lines]
    assert lines[0] == (
        "Pod team/big-3 is in gang pfn:team/big: 5 pod(s), at least 5 together; "
        "{nvidia.com/gpu 8}; all in one example.com/rack."
    )
    assert lines[1].startswith("Pending: 5/8 nodes are available")
    table = [line.split() for line in lines[lines.index("") + 2 :]]
    assert [(row[0], row[1], row[2]) for row in table[1:]] == [("b0-r0", "4", "4"), ("b0-r1", "2", "4")]
    assert "would place it now: 2 pod(s) on 1 node(s)" in await explain(copy, SETTINGS, "other/small-0")
    assert "Phalanx does not schedule it" in await explain(copy, SETTINGS, "team/waiting")
    assert await explain(copy, SETTINGS, "team/theirs-0") == (
        "Pod team/theirs-0 names schedulerName 'default-scheduler': Phalanx does not schedule it "
        "(it schedules phalanx)."
    )


async def test_dry_run_and_explain_show_the_domain_a_gang_that_waited_too_long_holds(tmp_path: Path) -> None:
    settings = replace(SETTINGS, starvation=StarvationSettings(reserve_after_seconds=0))  # waited long enough
    async with cluster(RACKS) as where:
        for rack, gpus in (("b0-r0", 4), ("b0-r1", 2)):
            for i in range(4):
                where.create(gpu_pod(f"theirs-{rack}-{i}", gpus=gpus, scheduler="default-scheduler",
                                     nodeName=f"{rack}-n{i}"))  # fmt: skip
        rack = {"scheduling.phalanx.dev/topology-required": "example.com/rack"}
        for i in range(2):
            where.create(gpu_pod(f"big-{i}", annotations={**pfn("big", 2), **rack}))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
        report = await dry_run(copy, settings)
        text = await explain(copy, settings, "team/big-0")
    holds = "reserves rack b0-r1 for its 16 GPUs; 4 GPUs there are still in use"
    assert f"Reserved: it {holds}. The room freeing up on b0-r1-n0, b0-r1-n1 is kept for it." in text
    rendered = table(report, title="t", levels=SETTINGS.levels, would=True)
    assert f"  pfn:team/big {holds}: b0-r1-n0 b0-r1-n1" in rendered
    assert "  b0-r1  [##______] [##______] ##...... ##......" in rendered


async def phalanx_command(*argv: str) -> tuple[int, str, str]:
    result = await anyio.run_process([sys.executable, "-m", "scheduler.frontends.cli", *argv], check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_the_commands_exit_codes_and_messages(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        busy_cluster(where)
        config = str(kubeconfig(tmp_path / "kubeconfig", where.url))
        code, out, _ = await phalanx_command("dry-run", "--kubeconfig", config, "--output", "json", "-n", "other")
        assert code == 0 and [gang["key"] for gang in json.loads(out)["gangs"]] == ["pfn:other/small"]
        code, out, _ = await phalanx_command("dry-run", "--kubeconfig", config)
        assert code == 0 and "nothing was written" in out.splitlines()[0]
        # What it would bind is said as such, with its nodes, and never as bound.
        lines = out.splitlines()
        assert any(line.startswith("pfn:other/small") and " Would bind " in line for line in lines), out
        assert not any(" Bound " in line for line in lines), out
        heading = "Would bind (nothing was written; the gang and the nodes its pods would go to):"
        would = lines[lines.index(heading) + 1 :]
        assert any(line.startswith("  pfn:other/small: b0-r") for line in would), out
        assert any(" pod(s) would bind, " in line and "(nothing was written)" in line for line in lines), out
        code, _, err = await phalanx_command("explain", "team/nope", "--kubeconfig", config)
        assert (code, err) == (
            1,
            f"phalanx: no pod, group object or gang named team/nope in the cluster at {where.url}\n",
        )
        code, _, err = await phalanx_command("explain", "just-a-name", "--kubeconfig", config)
        assert (code, err) == (2, "phalanx: 'just-a-name': give the pod, group object or gang as <namespace>/<name>\n")
        assert set(where.server.methods) == {"GET"}
    unreachable = str(kubeconfig(tmp_path / "gone", f"http://127.0.0.1:{free_port()}"))
    code, _, err = await phalanx_command("dry-run", "--kubeconfig", unreachable)
    assert code == 1 and err.startswith("phalanx: the cluster did not answer: ") and err.count("\n") == 1
    code, _, err = await phalanx_command("explain", "a/b", "--kubeconfig", str(tmp_path / "missing"))
    assert (code, err) == (1, f"phalanx: kubeconfig {tmp_path / 'missing'}: no such file\n")
    socks = kubeconfig(tmp_path / "socks", "https://api.example:6443")
    config = yaml.safe_load(socks.read_text())
    config["clusters"][0]["cluster"]["proxy-url"] = "socks5://me:secret@proxy.example:1080"
    socks.write_text(yaml.safe_dump(config))
    code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(socks))
    assert (code, err) == (
        1,
        "phalanx: proxy 'socks5://proxy.example:1080' (the kubeconfig's proxy-url): only http:// and https:// "
        "proxies are supported\n",
    )


async def test_a_cluster_that_cannot_be_used_is_told_by_what_went_wrong(tmp_path: Path) -> None:
    """Each in one line, naming what to fix: "the cluster did not answer" was said of a server that answered
    404, of a certificate the kubeconfig does not trust, and of a proxy that was not there; a missing exec
    plugin was told twice, once bare."""
    untrusted = tmp_path / "untrusted"
    untrusted.mkdir()
    async with https_server() as (url, _):
        config = write_kubeconfig(untrusted, {"server": url, "certificate-authority": str(TLS / "other-ca.crt")}, {})
        code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(config))
    assert (code, err) == (
        1,
        "phalanx: the cluster's certificate is not trusted: self-signed certificate in certificate chain; the "
        "kubeconfig's certificate-authority (in a pod, the service account's ca.crt) must be the authority that "
        "signed it\n",
    )

    elsewhere = tmp_path / "elsewhere"  # the right authority, a certificate for kubernetes.default.svc only
    elsewhere.mkdir()
    async with https_server(TLS / "proxied") as (url, _):
        cluster_entry = {"server": url, "certificate-authority": str(TLS / "proxied" / "ca.crt")}
        code, _, err = await phalanx_command(
            "dry-run", "--kubeconfig", str(write_kubeconfig(elsewhere, cluster_entry, {}))
        )
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("phalanx: the cluster's certificate is not trusted: IP address mismatch")
    assert err.endswith(
        "; reach the server by a name its certificate lists, or name one in the kubeconfig's tls-server-name\n"
    )

    async with served(web.Application()) as url:  # answers 404 to everything
        config = kubeconfig(tmp_path / "not-kubernetes", url)
        code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(config))
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("phalanx: the cluster answered with an error: GET /api")
    assert err.endswith(f"HTTP 404: {url} is not a Kubernetes API server\n")

    async def sign_in(_: web.Request) -> web.Response:
        return web.Response(text="<html>sign in</html>", content_type="text/html")

    page = web.Application()  # a login page, or a web server's index, answered to everything
    page.router.add_get("/{path:.*}", sign_in)
    async with served(page) as url:
        config = kubeconfig(tmp_path / "a-web-page", url)
        code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(config))
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("phalanx: the cluster answered with an error: GET /api") and "unreadable response" in err
    assert err.endswith(f": {url} is not a Kubernetes API server\n")

    proxied = yaml.safe_load(kubeconfig(tmp_path / "proxied", "https://api.example:6443").read_text())
    proxy = f"127.0.0.1:{free_port()}"
    proxied["clusters"][0]["cluster"]["proxy-url"] = f"http://{proxy}"
    (tmp_path / "proxied").write_text(yaml.safe_dump(proxied))
    code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(tmp_path / "proxied"))
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("phalanx: the cluster did not answer: ") and f"the proxy {proxy} could not be reached" in err

    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(tmp_path / "no-helper")}}
    exec_folder = tmp_path / "exec"
    exec_folder.mkdir()
    config = write_kubeconfig(exec_folder, {"server": "https://api.example:6443"}, plugin)
    code, _, err = await phalanx_command("dry-run", "--kubeconfig", str(config))
    assert (code, err) == (
        1,
        f"phalanx: kubeconfig {config}: its exec plugin '{tmp_path / 'no-helper'}' failed: "
        f"{os.strerror(errno.ENOENT)}: {tmp_path / 'no-helper'}\n",
    )


async def test_explain_of_a_gang_of_two_shapes_names_the_one_no_node_takes(tmp_path: Path) -> None:
    """Its 8-GPU pods fit every node, its 1-GPU pod's selector matches none: the reason said "8/8 nodes are
    available", and two room tables were headed alike save the GPUs, neither naming the selector."""
    async with cluster(RACKS) as where:
        for i in range(2):
            where.create(gpu_pod(f"mixed-{i}", annotations=pfn("mixed", 3)))
        where.create(gpu_pod("mixed-2", gpus=1, annotations=pfn("mixed", 3), nodeSelector={"gpu-type": "h100"}))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    lines = (await explain(copy, SETTINGS, "team/mixed-0")).splitlines()
    assert lines[0].endswith("{nvidia.com/gpu 1; nodeSelector gpu-type=h100}; {nvidia.com/gpu 8}.")
    assert lines[1] == (
        "Pending: 0/8 nodes are available: 8 node(s) didn't match Pod's node affinity/selector. Gang team/mixed "
        "needs 3 pods of 2 shapes; the cluster fits 2 of them together."
    )
    heading = "Room per example.com/rack for pods of {nvidia.com/gpu 1; nodeSelector gpu-type=h100} (bound pods only, "
    assert f"{heading}before this pass):" in lines


async def test_explain_writes_a_required_node_affinity_as_kubectl_writes_selectors(tmp_path: Path) -> None:
    terms = [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100", "a100"]}]},
        {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}, {"key": "zone", "operator": "Exists"}]},
    ]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    async with cluster(RACKS) as where:
        where.create(gpu_pod("picky-0", affinity=affinity))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    first = (await explain(copy, SETTINGS, "team/picky-0")).splitlines()[0]
    assert first.endswith("{nvidia.com/gpu 8; node affinity (gpu-type in (h100, a100)) or (!spot and zone)}.")


async def test_explain_says_what_the_running_scheduler_said_when_it_says_otherwise(tmp_path: Path) -> None:
    """explain decides on a copy of the cluster: room the running scheduler holds (a timeout's cool-down, room kept
    for a replacement) is not in it, and its answer contradicted the pod's own condition without a word."""
    said = "Gang pfn:team/small waits for 1 member(s) that do not exist yet; it holds room again in 89 s."
    condition = {"type": "PodScheduled", "status": "False", "reason": "GangWaiting", "message": said,
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    async with cluster(RACKS) as where:
        where.create(gpu_pod("small-0", annotations=pfn("small", 1)))
        where.store.patch(where.store.resource("v1", "Pod"), "team", "small-0", {"status": {"conditions": [condition]}},
                          "application/strategic-merge-patch+json", subresource="status")  # fmt: skip
        where.create(gpu_pod("quiet-0", annotations=pfn("quiet", 1)))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    lines = (await explain(copy, SETTINGS, "team/small-0")).splitlines()
    told = next(line for line in lines if line.startswith("The running scheduler said"))
    assert told.startswith("The running scheduler said (GangWaiting, ") and told.endswith(f" ago): {said}")
    assert "explain decides on a copy of the cluster" in lines[lines.index(told) + 1]
    quiet = await explain(copy, SETTINGS, "team/quiet-0")  # no condition written yet: nothing to compare
    assert "The running scheduler said" not in quiet


async def test_explain_of_a_gang_already_bound_says_where_it_runs(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        where.create(gpu_pod("done-0", annotations=pfn("done", 2), nodeName="b0-r1-n0"))
        where.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "etl", "namespace": "team"},
                "spec": {"minMember": 1},
            }
        )
        where.create(gpu_pod("etl-0", labels={"scheduling.x-k8s.io/pod-group": "etl"}, nodeName="b0-r0-n3"))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    assert await explain(copy, SETTINGS, "team/done-0") == "Pod team/done-0 is bound to node b0-r1-n0."
    group = await explain(copy, SETTINGS, "team/etl")
    assert group.splitlines() == [
        "PodGroup team/etl is in gang scheduler-plugins:team/etl: 1 pod(s), at least 1 together; {nvidia.com/gpu 8}.",
        "Bound: 1 pod(s) on 1 node(s), in block b0, rack b0-r0 (b0-r0-n3). Nothing is pending.",
    ]


async def test_explain_takes_a_gang_by_the_name_messages_use_says_why_nothing_is_preempted_and_names_gates(
    tmp_path: Path,
) -> None:
    """Issue 25: explain of a gang by the name every message uses said "no pod or group object named"; a pod
    of a fully gated gang "belongs to no gang"; and nothing said why preemption could not help."""
    async with cluster(RACKS) as where:
        busy_cluster(where)
        for i in range(2):
            where.create(
                gpu_pod(
                    f"gated-{i}", annotations=pfn("gated", 2), schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]
                )
            )
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    by_key = await explain(copy, SETTINGS, "pfn:team/big")
    assert by_key == await explain(copy, SETTINGS, "team/big")  # the part's name, as "Gang team/big needs ..."
    assert by_key.splitlines()[0].startswith("Pod team/big-0 is in gang pfn:team/big: 5 pod(s)")
    assert "Preemption cannot help: no running pod has a priority below its 0." in by_key
    assert await explain(copy, SETTINGS, "team/gated-0") == (
        "Pod team/gated-0 is held by scheduling gates (kueue.x-k8s.io/admission): the API server refuses to bind "
        "it, so it is no member of its gang yet; the gang counts it as held and waits for it, and it joins as soon "
        "as the last gate is removed (by Kueue, or whatever added them)."
    )


async def test_a_dry_run_with_nothing_pending_says_so_not_that_no_pod_is_phalanx_s(tmp_path: Path) -> None:
    async with cluster(RACKS) as where:
        await where.create_bound(gpu_pod("running", gpus=8, annotations=pfn("running", 1), nodeName="b0-r0-n0"))
        copy = await read_real_cluster(str(kubeconfig(tmp_path / "kubeconfig", where.url)), None)
    rendered = table(await dry_run(copy, SETTINGS), title="t", levels=SETTINGS.levels, would=True)
    assert "(no pending gang: every pod Phalanx owns is bound)" in rendered
    assert "no pod with a schedulerName Phalanx owns" not in rendered
