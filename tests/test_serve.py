"""`phalanx serve`: a sandbox a person uses with kubectl. Driven here with the requests kubectl sends
(protobuf for `create namespace`, JSON for `apply`, Tables for `get`, core/v1 Events for `describe`)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import yaml

from scheduler.ports.sim import read_manifest_file
from tests.contract.conftest import Answer
from tests.scheduler.support import free_port

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE_PROTOBUF = (ROOT / "tests" / "contract" / "data" / "kubectl-create-namespace-labelled.pb").read_bytes()
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


async def send(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    content_type: str = "",
    accept: str = "application/json",
) -> Answer:
    import aiohttp  # noqa: PLC0415

    headers = {"Accept": accept, **({"Content-Type": content_type} if content_type else {})}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url + path, data=body, headers=headers) as answer,
    ):
        return Answer(answer.status, answer.headers.get("Content-Type", ""), await answer.read())


@contextlib.asynccontextmanager
async def sandbox(*argv: str) -> AsyncIterator[str]:
    """``phalanx serve`` with ``argv``, once it says it is ready: its banner; SIGINT stops it, which must exit 0."""
    command = [sys.executable, "-m", "scheduler.frontends.cli", "serve", *argv, "--log-level", "warning"]
    process = await anyio.open_process(command, cwd=ROOT)
    try:
        assert process.stdout is not None
        banner = b""
        with anyio.fail_after(60):
            while b"Ctrl-C stops it" not in banner:
                banner += await process.stdout.receive()
        yield banner.decode()
    finally:
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(60):
            code = await process.wait()
        await process.aclose()
    assert code == 0


async def test_serve_writes_a_kubeconfig_and_schedules_what_kubectl_applies(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "sandbox.kubeconfig"
    address = f"127.0.0.1:{free_port()}"
    shape = "blocks=1,racks=2,nodes=4,gpus=8"
    async with sandbox("--address", address, "--write-kubeconfig", str(kubeconfig), "--cluster", shape) as text:
        assert text.startswith(f"Phalanx sandbox: an emulated Kubernetes API at http://{address} with 8 nodes")
        config = yaml.safe_load(kubeconfig.read_text())
        url = config["clusters"][0]["cluster"]["server"]
        assert url == f"http://{address}" and config["current-context"] == "phalanx-sandbox"

        created = await send(
            url, "POST", "/api/v1/namespaces", NAMESPACE_PROTOBUF, content_type="application/vnd.kubernetes.protobuf"
        )
        assert created.status == 201  # kubectl create namespace labelled
        for obj in read_manifest_file(str(ROOT / "examples" / "pfn" / "training-gang.yaml"))[1:]:  # its Pods
            obj["metadata"]["namespace"] = "labelled"
            answer = await send(
                url,
                "POST",
                "/api/v1/namespaces/labelled/pods",
                json.dumps(obj).encode(),
                content_type="application/json",
            )
            assert answer.status == 201, answer.body  # kubectl apply -f

        async def wide() -> list[list[object]]:
            table = (await send(url, "GET", "/api/v1/namespaces/labelled/pods", accept=TABLE)).json
            return [row["cells"] for row in table["rows"]]

        with anyio.fail_after(60):
            while not all(cells[6] != "<none>" for cells in await wide()):
                await anyio.sleep(0.05)
        nodes = {cells[0]: cells[6] for cells in await wide()}  # kubectl get pods -o wide
        assert nodes == {f"resnet-worker-{i}": f"b0-r0-n{i}" for i in range(4)}
        selector = "involvedObject.name=resnet-worker-0,involvedObject.namespace=labelled"

        async def described() -> list[str]:  # the Events under kubectl describe pod
            events = (await send(url, "GET", f"/api/v1/namespaces/labelled/events?fieldSelector={selector}")).json
            return [event["message"] for event in events["items"]]

        with anyio.fail_after(60):
            while "Successfully assigned labelled/resnet-worker-0 to b0-r0-n0" not in await described():
                await anyio.sleep(0.05)


def test_serve_refuses_a_bad_address_in_one_line(tmp_path: Path) -> None:
    for address in ("nowhere", "127.0.0.1:99999"):
        result = subprocess.run(
            [sys.executable, "-m", "scheduler.frontends.cli", "serve", "--address", address,
             "--write-kubeconfig", str(tmp_path / "k")],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (
            2,
            f"phalanx: --address {address}: give it as HOST:PORT, e.g. 127.0.0.1:8080 (a port up to 65535)\n",
        )


async def test_serve_expands_a_job_given_with_workload_and_its_controller_replaces_a_deleted_pod(
    tmp_path: Path,
) -> None:
    workload = tmp_path / "job.yaml"
    annotations = {"gang-scheduling.preferred.jp/gang-name": "train", "gang-scheduling.preferred.jp/gang-size": "2"}
    container = {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    workload.write_text(yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"parallelism": 2, "completions": 2, "template": {"metadata": {"annotations": annotations},
                                                                   "spec": {"restartPolicy": "Never",
                                                                            "containers": [container]}}},
    }))  # fmt: skip
    address = f"127.0.0.1:{free_port()}"
    url = f"http://{address}"
    argv = ("--address", address, "--write-kubeconfig", str(tmp_path / "k"),
            "--cluster", "blocks=1,racks=1,nodes=4,gpus=8", "--workload", str(workload))  # fmt: skip
    async with sandbox(*argv):

        async def bound() -> dict[str, str]:
            listed = (await send(url, "GET", "/api/v1/namespaces/ml/pods")).json
            return {pod["metadata"]["name"]: pod["spec"].get("nodeName", "") for pod in listed["items"]}

        with anyio.fail_after(60):
            while len(first := await bound()) != 2 or not all(first.values()):
                await anyio.sleep(0.05)
        assert all(name.startswith("train-") and len(name) == len("train-") + 5 for name in first)
        gone = sorted(first)[0]
        deleted = await send(url, "DELETE", f"/api/v1/namespaces/ml/pods/{gone}?gracePeriodSeconds=0")
        assert deleted.status == 200
        with anyio.fail_after(60):  # the Job controller makes a new pod, and Phalanx binds it
            while len(now := await bound()) != 2 or gone in now or not all(now.values()):
                await anyio.sleep(0.05)


async def test_serve_places_a_dra_job_from_workload_and_a_claim_kubectl_applies(tmp_path: Path) -> None:
    """``--cluster ...,dra=`` publishes devices; the Job of examples/dra/ gets its claims from its template (the
    simulated resourceclaim controller) and binds with them allocated; a claim and a pod applied with kubectl
    afterwards take devices that are still free."""
    address = f"127.0.0.1:{free_port()}"
    url = f"http://{address}"
    argv = ("--address", address, "--write-kubeconfig", str(tmp_path / "k"),
            "--cluster", "blocks=1,racks=2,nodes=4,gpus=0,dra=gpu.nvidia.com:8",
            "--workload", str(ROOT / "examples" / "dra" / "job.yaml"))  # fmt: skip
    async with sandbox(*argv):

        async def allocated() -> dict[str, str]:
            listed = (await send(url, "GET", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims")).json
            return {
                claim["metadata"]["name"]: claim["status"]["allocation"]["devices"]["results"][0]["pool"]
                for claim in listed["items"]
                if (claim.get("status") or {}).get("allocation")
            }

        with anyio.fail_after(60):
            while len(await allocated()) != 4:
                await anyio.sleep(0.05)
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "notebook-gpu", "namespace": "ml"},
                 "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "ml"},
               "spec": {"schedulerName": "phalanx", "containers": [{"name": "main", "image": "jupyter:1"}],
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": "notebook-gpu"}]}}  # fmt: skip
        for path, obj in (("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims", claim),
                          ("/api/v1/namespaces/ml/pods", pod)):  # fmt: skip
            answer = await send(url, "POST", path + "?fieldValidation=Strict", json.dumps(obj).encode(),
                                content_type="application/json")  # fmt: skip
            assert answer.status == 201, answer.body
        with anyio.fail_after(60):
            while "notebook-gpu" not in (given := await allocated()):
                await anyio.sleep(0.05)
        used_by_job = {node for name, node in given.items() if name != "notebook-gpu"}
        assert given["notebook-gpu"] not in used_by_job  # the Job's nodes have none of their 8 left

        async def notebook_node() -> str:
            return str((await send(url, "GET", "/api/v1/namespaces/ml/pods/notebook")).json["spec"].get("nodeName", ""))

        with anyio.fail_after(60):  # PreBind allocated its claim; the bind follows
            while not (node := await notebook_node()):
                await anyio.sleep(0.05)
        assert node == given["notebook-gpu"]


def test_the_readme_s_sandbox_steps_do_not_create_a_namespace_a_file_they_apply_creates_too() -> None:
    """``kubectl create namespace X`` then ``kubectl apply -f`` a file that holds Namespace X makes kubectl warn
    about a missing last-applied-configuration: the steps a new user follows must not do both."""
    root = Path(__file__).resolve().parents[1]
    steps = [line.split("#", 1)[0].split() for line in (root / "README.md").read_text().splitlines()
             if line.startswith("kubectl ")]  # fmt: skip
    created = {words[3] for words in steps if words[:3] == ["kubectl", "create", "namespace"] and len(words) > 3}
    for words in steps:
        if words[:3] == ["kubectl", "apply", "-f"]:
            documents = yaml.safe_load_all((root / words[3]).read_text())
            names = {doc["metadata"]["name"] for doc in documents if doc and doc.get("kind") == "Namespace"}
            assert not names & created, f"README creates namespace {names & created} that {words[3]} creates too"


async def test_serve_with_view_shows_the_sandbox_s_cluster_live(tmp_path: Path) -> None:
    shape = "blocks=1,racks=2,nodes=4,gpus=8"
    address = f"127.0.0.1:{free_port()}"
    workload = str(ROOT / "examples" / "pfn" / "training-gang.yaml")
    argv = ("--address", address, "--write-kubeconfig", str(tmp_path / "k"), "--cluster", shape, "--workload", workload)
    async with sandbox(*argv, "--view", "127.0.0.1:0") as text:
        view = text.split("Phalanx's live view: open ", 1)[1].split("\n", 1)[0]

        async def running() -> bool:
            shown = json.loads((await send(view.rstrip("/"), "GET", "/api/cluster")).body)
            return any(gang["state"] == "running" for gang in shown["gangs"]) and shown["totals"]["nodes"] == 8

        with anyio.fail_after(60):
            while not await running():
                await anyio.sleep(0.1)
        page = await send(view.rstrip("/"), "GET", "/")
        assert page.status == 200 and "view/view.js" in page.body.decode()


def test_serve_refuses_a_view_address_it_cannot_listen_on_in_one_line(tmp_path: Path) -> None:
    taken = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        held.listen()
        result = subprocess.run(
            [sys.executable, "-m", "scheduler.frontends.cli", "serve", "--address", f"127.0.0.1:{free_port()}",
             "--view", f"127.0.0.1:{taken}", "--write-kubeconfig", str(tmp_path / "k"), "--log-level", "warning"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert (result.returncode, result.stderr) == (1, f"phalanx: --view 127.0.0.1:{taken}: Address already in use\n")
