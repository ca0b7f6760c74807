"""`kubectl apply -k manifests/` deploys what the code needs and nothing more, in a restricted pod."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.gangs.sources import SOURCES, SourceApi
from scheduler.ports.sim import Faults, read_manifest_file
from scheduler.ports.sim.store import MERGE_PATCH
from scheduler.settings import LeaderSettings, Settings, load_settings
from tests.devices.support import claim, device_class, node_slice
from tests.gangs.support import EXAMPLES, EXPANDED_EXAMPLES
from tests.scheduler.support import FAST, cluster, create_manifests, eventually, gpu_pod, pfn, phalanx

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document is not None]


def kustomization() -> dict[str, Any]:
    return documents(MANIFESTS / "kustomization.yaml")[0]


def deployed() -> list[dict[str, Any]]:
    return [obj for name in kustomization()["resources"] for obj in documents(MANIFESTS / name)]


def one(kind: str) -> dict[str, Any]:
    (found,) = [obj for obj in deployed() if obj["kind"] == kind]
    return found


def test_every_manifest_is_a_kubernetes_object_and_kustomize_lists_every_one() -> None:
    files = sorted(path.name for path in MANIFESTS.glob("*.yaml"))
    assert sorted(kustomization()["resources"]) == [
        name for name in files if name not in ("kustomization.yaml", "phalanx.yaml")
    ]
    for path in [*MANIFESTS.glob("*.yaml"), *MANIFESTS.glob("optional/*.yaml")]:
        if path.name in ("kustomization.yaml", "phalanx.yaml"):
            continue
        for obj in documents(path):
            assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), path
    (generated,) = kustomization()["configMapGenerator"]
    assert generated["files"] == ["phalanx.yaml"] and load_settings(MANIFESTS / "phalanx.yaml") == Settings()


def test_the_deployment_runs_two_replicas_with_probes_on_the_served_endpoints() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == 2 and Settings().leader_election.enabled
    port = int(Settings().server.address.rsplit(":", 1)[1])
    assert container["ports"][0]["containerPort"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys() <= container["resources"]["limits"].keys()
    assert container["args"] == ["run", "--config", "/etc/phalanx/phalanx.yaml"]
    # Nothing to set: in_cluster() reads the service account's authority itself.
    assert "env" not in container
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == kustomization()["configMapGenerator"][0]["name"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert one("Service")["spec"]["ports"][0]["port"] == port


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the `restricted` Pod Security Standard (its checks that apply to this pod) would refuse."""
    found = []
    pod_context = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            found.append(flag)
    allowed_volumes = {
        "configMap",
        "secret",
        "emptyDir",
        "projected",
        "downwardAPI",
        "persistentVolumeClaim",
        "csi",
        "ephemeral",
    }
    for volume in pod.get("volumes") or []:
        if not set(volume) - {"name"} <= allowed_volumes:
            found.append(f"volume {volume['name']}")
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        context = container.get("securityContext") or {}
        name = container["name"]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []) or set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities must drop ALL")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot must be true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


def test_the_pod_meets_the_restricted_pod_security_standard() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert one("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    loosened = copy.deepcopy(pod)
    loosened["securityContext"].pop("seccompProfile")
    loosened["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    assert restricted_violations(loosened) == [
        "phalanx: capabilities must drop ALL",
        "phalanx: seccompProfile must be RuntimeDefault or Localhost",
    ]


def test_the_image_is_slim_multi_stage_and_runs_as_a_numeric_non_root_user() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip()]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) == 2 and all(stage.split()[1].endswith("-slim") for stage in stages)
    final = lines[lines.index(stages[-1]) :]
    user = next(line.split()[1] for line in final if line.startswith("USER "))
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    assert not any(tool in line for line in final for tool in ("apt-get", "gcc", "build-essential"))
    # The dataclass methods are compiled at build, while the package's directory can still be written.
    built = final[: final.index(f"USER {user}")]
    assert any('python -c "import anyio, scheduler.frontends.cli; anyio.run(anyio.sleep, 0)"' in line for line in built)


def granted() -> set[tuple[str, str, str]]:
    rules = [rule for obj in deployed() if obj["kind"] in ("ClusterRole", "Role") for rule in obj["rules"]]
    return {
        (verb, group, resource)
        for rule in rules
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def example_files() -> Iterator[Path]:
    """Every example of objects the API serves (not those of what controllers expand)."""
    yield from sorted(path for path in EXAMPLES.rglob("*.yaml") if path.parent.name not in EXPANDED_EXAMPLES)


async def test_rbac_allows_exactly_the_calls_the_scheduler_makes() -> None:
    """The scheduler runs every example, with leader election, a bind conflict and repeated Events; the
    emulated API server's audit of its requests must equal the ClusterRole and Role, rule for rule."""
    settings = replace(
        FAST,
        leader_election=LeaderSettings(
            enabled=True,
            identity="rbac",
            lease_duration_seconds=1.0,
            renew_deadline_seconds=0.5,
            retry_period_seconds=0.1,
        ),
    )
    faults = Faults(seed=3)
    # Phalanx's cache lags the store, as on a loaded host: a pod it binds after pods bound by others arrive
    # races with them unless the test lets it see them first (as it does), and the monitor would say so.
    faults.watch_lag["pods"] = (0.0002, 0.004)
    async with cluster("blocks=2,racks=4,nodes=8,gpus=8", faults=faults) as where:
        where.store.ensure_namespace("phalanx-system")
        async with phalanx(where, settings) as app:
            # A preemption: a low-priority pod of another scheduler holds the one node a gang may use (one where
            # no example arrives bound).
            taken = {(obj.get("spec") or {}).get("nodeName") for path in example_files()
                     for obj in read_manifest_file(path)}  # fmt: skip
            nodes = sorted(node["metadata"]["name"] for node in where.store.objects(where.store.resource("v1", "Node")))
            node = next(name for name in nodes if name not in taken)
            await where.create_bound(gpu_pod("squatter", scheduler="default-scheduler", nodeName=node))
            await create_manifests(where, *example_files())
            faults.bind_failures["team/conflicted"] = 409
            where.create(gpu_pod("conflicted", annotations=pfn("conflicted", 1)))
            await eventually(lambda: faults.injected["bind 409"] >= 1, what="a bind conflict")
            faults.bind_failures.clear()
            for i in range(2):  # never fits: its FailedScheduling Event repeats (a series patch)
                where.create(gpu_pod(f"huge-{i}", gpus=16, annotations=pfn("huge", 2)))
            where.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": "vip"}, "value": 1000})  # fmt: skip
            where.create(gpu_pod("vip", annotations=pfn("vip", 1), priorityClassName="vip",
                                 nodeSelector={"kubernetes.io/hostname": node}))  # fmt: skip
            # A pod that claims devices (DRA): its claim is allocated before it binds.
            where.create(device_class())
            where.create(node_slice(node))
            where.create({**claim("dra-gpus", 1), "metadata": {"name": "dra-gpus", "namespace": "team"}})
            where.create(gpu_pod("dra", gpus=0, annotations=pfn("dra", 1),
                                 resourceClaims=[{"name": "gpus", "resourceClaimName": "dra-gpus"}]))  # fmt: skip
            # A pod asking an extended resource a DeviceClass serves (KEP-5004) gets a claim made for it; a
            # claim an earlier attempt made for it is deleted first.
            served = device_class("dra-gpu")
            served["spec"]["extendedResourceName"] = "example.com/dra-gpu"
            where.create(served)
            extended = gpu_pod("extended", gpus=0, annotations=pfn("extended", 1), schedulingGates=[{"name": "wait"}],
                               nodeSelector={"kubernetes.io/hostname": node})  # fmt: skip
            extended["spec"]["containers"][0]["resources"]["limits"]["example.com/dra-gpu"] = "1"
            uid = where.create(extended)["metadata"]["uid"]
            stale = claim("extended-extended-resources-old", 1)
            stale["metadata"] = {"name": "extended-extended-resources-old", "namespace": "team",
                                 "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "extended",
                                                      "uid": uid, "controller": True}]}  # fmt: skip
            where.create(stale)
            await eventually(lambda: "team/extended" in app.state.devices.extended_of, what="the stale claim seen")
            pods = where.store.resource("v1", "Pod")
            where.store.patch(pods, "team", "extended", {"spec": {"schedulingGates": None}}, MERGE_PATCH)
            lease_updates = lambda: where.server.audit["update", "coordination.k8s.io", "leases"]  # noqa: E731
            await eventually(lambda: lease_updates() >= 2, what="the lease renewed")
            expected = granted()
            await eventually(
                lambda: set(where.server.audit) >= expected,
                what=lambda: f"every granted call made; missing {sorted(expected - set(where.server.audit))}",
            )
            assert app.leading
        assert set(where.server.audit) == expected, sorted(set(where.server.audit) ^ expected)


#: The optional CRDs (``<plural>.<group>.yaml``); the Grafana dashboard and the alerts beside them are
#: checked in ``tests/test_dashboards.py``.
OPTIONAL_CRDS = sorted(path for path in MANIFESTS.glob("optional/*.yaml") if path.name.count(".") > 1)


def test_the_optional_manifests_are_crds_a_dashboard_and_alerts() -> None:
    names = sorted(path.name for path in MANIFESTS.glob("optional/*.yaml"))
    assert names == sorted([*(path.name for path in OPTIONAL_CRDS), "grafana-dashboard.yaml", "prometheus-rules.yaml"])
    assert OPTIONAL_CRDS


@pytest.mark.parametrize("path", OPTIONAL_CRDS, ids=lambda path: path.name)
def test_optional_crds_define_a_served_storage_version_with_a_status_subresource(path: Path) -> None:
    (crd,) = documents(path)
    assert crd["kind"] == "CustomResourceDefinition"
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    assert version["served"] and "status" in version["subresources"]
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"


@pytest.mark.parametrize(
    ("deployed_file", "served_file"),
    [
        ("optional/podgroups.scheduling.x-k8s.io.yaml", "podgroups.scheduling.x-k8s.io.yaml"),
        ("crd-compositepodgroups.yaml", "compositepodgroups.scheduling.phalanx.dev.yaml"),
    ],
)
def test_the_crds_deployed_are_the_ones_the_emulator_serves_and_the_real_suite_installs(
    deployed_file: str, served_file: str
) -> None:
    assert documents(MANIFESTS / deployed_file) == documents(
        ROOT / "scheduler" / "ports" / "sim" / "crds" / served_file
    )


def test_rbac_grants_each_gang_source_exactly_what_its_row_in_the_sources_table_needs() -> None:
    """Adding a source is a row in ``gangs/sources.py``: the role must grant what the row says, no more."""
    groups = {api.group for api in SOURCES}
    given = {(group, resource, verb) for verb, group, resource in granted() if group in groups}
    needed = set().union(*(api.rbac() for api in SOURCES))
    assert given == needed, sorted(given ^ needed)


def test_the_rbac_a_row_needs_follows_its_status() -> None:
    plain = SourceApi(group="g", kind="K", plural="ks", versions=("v1",), role=SOURCES[0].role)
    with_status = replace(plain, status=lambda status: {})
    assert plain.rbac() == {("g", "ks", "list"), ("g", "ks", "watch")}
    assert with_status.rbac() - plain.rbac() == {("g", "ks/status", "patch")}
    assert replace(with_status, status_in_object=True).rbac() - plain.rbac() == {("g", "ks", "patch")}


@pytest.mark.parametrize("api", [api for api in SOURCES if api.crd], ids=lambda api: f"{api.kind}.{api.group}")
def test_each_source_s_crd_defines_the_group_kind_versions_and_status_its_row_says(api: SourceApi) -> None:
    assert api.crd is not None
    (crd,) = documents(ROOT / "scheduler" / "ports" / "sim" / "crds" / api.crd)
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"]) == (api.group, api.kind, api.plural)
    assert (spec["scope"] == "Namespaced") == api.namespaced
    served = {version["name"]: version for version in spec["versions"] if version["served"]}
    assert set(api.versions) <= set(served)
    for name in api.versions:
        assert ("status" in (served[name].get("subresources") or {})) == (not api.status_in_object)


def test_every_crd_the_emulator_serves_belongs_to_a_row_of_the_sources_table() -> None:
    served = {path.name for path in (ROOT / "scheduler" / "ports" / "sim" / "crds").glob("*.yaml")}
    assert served == {api.crd for api in SOURCES if api.crd}


def test_the_readme_stands_alone_every_file_it_names_is_in_the_repository() -> None:
    """A newcomer has the repository and nothing else: no path the README names may lead outside it."""
    text = (ROOT / "README.md").read_text()
    assert "../" not in text
    linked = re.findall(r"\]\(((?!https?://)[^)#]+)\)", text)
    missing = [link for link in linked if not (ROOT / link).exists()]
    assert linked and not missing, missing
