#!/usr/bin/env python3
"""Start benchmark (issue 40): how long ``phalanx run`` takes from exec to its first bind, and where it goes.

The emulator's API server runs in a process of its own over HTTP (``--tls``: HTTPS, as every real server
speaks, with the tests' throwaway certificate; each new connection is then a TLS handshake), holding 256
nodes of 8 GPUs (32 per rack) and 2,000 pending pods in PFN gangs of 8. Each run execs a fresh
``phalanx run --no-leader-elect`` against it and reads the process's own log lines that mark its start
(``logs.since_start``: wall seconds since the process started, and the CPU seconds it had used):

  imports     exec to the command's first line of code (the interpreter, then every import of the run path)
  discovered  the API's discovery read: which resources are served
  synced      every watched resource listed and applied
  leading     the scheduling loop starts (no election: at once)
  first bind  the first pod bound, as the process logs it (when the binding's answer is read)
  bound seen  the first pod bound, as the benchmark's own watch on the server sees it, and the process's
              CPU then (from /proc): how kube-scheduler's first bind is measured too, and the target's figure
  last bind   every pod bound (seen by the benchmark's own watch on the server)

and, from the first bind to the last, the process's CPU per pod bound (``per pod ms``: the deciding
process's cost of a pod, placement, binding POST, Event and status writes and watch events together).
With writer processes (``--writers``, ``binding.writerProcesses``, auto by default) the writes are theirs:
``all processes per pod ms`` adds their whole CPU, start included, spread over every pod. Gangs placed
before the first bind are not in ``per pod ms``; ``per pod from leading ms`` counts every pod's decisions
and writes, from the loop's start (the first compile of every gang included) to the last bind.

The package's bytecode is compiled first (``__pycache__``, which git ignores), as an installed wheel has it,
and so are its dataclasses' methods (``scheduler/dataclass_cache.py``), as the image's build does: a checkout
run with ``PYTHONDONTWRITEBYTECODE`` compiles 89 modules from source at every start, about 0.37 s of CPU
here, and 700 generated methods, 0.08 s more, that no deployment pays.

Figures are medians over the runs. Wall time is what a busy host blurs; CPU time is what it does not.
Targets on this 2-core machine (issue 40): CPU from exec to first bind <= 0.6 s; CPU of the deciding
process per bound pod <= 0.35 ms.

--json prints one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.benchinfo import machine  # noqa: E402

SHAPE = "blocks=1,racks=8,nodes=32,gpus=8"
GANGS, SIZE = 250, 8
MARKS = ("discovered", "informers synced", "leading", "first bind")


def pending_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}]
    for gang in range(GANGS):
        for member in range(SIZE):
            pods.append(
                {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"g{gang}-{member}", "namespace": "bench",
                              "annotations": {"gang-scheduling.preferred.jp/gang-name": f"g{gang}",
                                              "gang-scheduling.preferred.jp/gang-size": str(SIZE)}},
                 "spec": {"schedulerName": "phalanx",
                          "containers": [{"name": "main", "image": "pause",
                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            )  # fmt: skip
    return pods


def kubeconfig(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    cluster = {"server": url}
    if url.startswith("https://"):
        cluster |= {"certificate-authority": str(TLS / "ca.crt"), "tls-server-name": "kubernetes.default.svc"}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": cluster}],
        "users": [{"name": "sim", "user": {}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
    }))  # fmt: skip
    return path


def compiled() -> dict[str, str]:
    """The environment of a process that reads the package's bytecode, compiled once beside its sources,
    and the methods its dataclasses generate (``scheduler/dataclass_cache.py``), as the image's build does."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "scheduler", "topology"], cwd=ROOT, env=env, check=True)
    prime = "import anyio, scheduler.frontends.cli; anyio.run(anyio.sleep, 0)"  # as the Dockerfile does
    subprocess.run([sys.executable, "-c", prime], cwd=ROOT, env=env, check=True)
    return dict(os.environ)


def cpu_seconds(pid: int) -> float:
    """CPU time a process has used (user and system, from /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds(pid: int) -> float:
    """CPU time the live child processes of ``pid`` have used: its writer processes."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


#: ``--tls``: the emulator serves HTTPS with the tests' throwaway certificate (``tests/data/tls``: it names
#: ``kubernetes.default.svc``, which the kubeconfig gives as ``tls-server-name``), as every real server does.
TLS = ROOT / "tests" / "data" / "tls"


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    """The benchmark's own connection to the server (its authority checked, not its name: 127.0.0.1)."""
    where = urlsplit(url)
    if where.scheme != "https":
        return http.client.HTTPConnection(where.hostname or "", where.port, timeout=timeout)
    context = ssl.create_default_context(cafile=str(TLS / "ca.crt"))
    context.check_hostname = False
    return http.client.HTTPSConnection(where.hostname or "", where.port, timeout=timeout, context=context)


class LastBind(threading.Thread):
    """Watches the server's pods until every one is bound, then notes the scheduler's CPU and the time."""

    def __init__(self, url: str, version: str, started: float) -> None:
        super().__init__(daemon=True)
        self.url, self.version, self.started = url, version, started
        self.pid = 0
        self.found: dict[str, float] = {}

    def run(self) -> None:
        connection = connect(self.url, timeout=120)
        connection.request("GET", f"/api/v1/namespaces/bench/pods?watch=true&resourceVersion={self.version}")
        response, bound = connection.getresponse(), set()
        for line in response:
            pod = json.loads(line).get("object") or {}
            if (pod.get("spec") or {}).get("nodeName"):
                bound.add(pod["metadata"]["name"])
                if not self.found:  # the first pod the API shows bound, and the scheduler's CPU by then
                    self.found = {
                        "bound seen wall": time.monotonic() - self.started,
                        "bound seen cpu": cpu_seconds(self.pid),
                    }
            if len(bound) == GANGS * SIZE:
                self.found |= {
                    "last bind wall": time.monotonic() - self.started,
                    "last bind cpu": cpu_seconds(self.pid),
                    "writers cpu": children_cpu_seconds(self.pid),
                }
                break
        connection.close()


def resource_version(url: str) -> str:
    connection = connect(url, timeout=30)
    connection.request("GET", "/api/v1/namespaces/bench/pods?limit=1")
    version = str(json.loads(connection.getresponse().read())["metadata"]["resourceVersion"])
    connection.close()
    return version


def one_run(
    folder: Path, env: dict[str, str], writers: str, profile: str | None = None, *, tls: bool = False
) -> dict[str, float]:
    """A fresh server (so that every run finds the pods pending) and a fresh ``phalanx run``."""
    manifest = folder / "pods.yaml"
    if not manifest.exists():
        manifest.write_text(yaml.safe_dump_all(pending_pods()))
    serving = ["--tls-cert-file", str(TLS / "server.crt"), "--tls-private-key-file", str(TLS / "server.key")]
    server = subprocess.Popen(
        [sys.executable, "-m", "scheduler.ports.sim.apiserver", "--shape", SHAPE, "--manifests", str(manifest),
         *(serving if tls else [])],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("serving "):
            raise RuntimeError(f"the emulator's server did not start: {line!r}")
        url = line.split()[1]
        config = kubeconfig(folder, url)
        runner = ["-m", "scheduler.frontends.cli"] if profile is None else ["scripts/sampled.py", profile]
        command = [sys.executable, *runner, "run", "--kubeconfig", str(config),
                   "--no-leader-elect", "--metrics-address", "127.0.0.1:0", "--log-level", "info",
                   "--set", f"binding.writerProcesses={writers}"]  # fmt: skip
        watcher = LastBind(url, resource_version(url), time.monotonic())
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        watcher.pid = process.pid
        watcher.start()
        found: dict[str, float] = {}
        try:
            assert process.stderr is not None
            deadline = time.monotonic() + 120
            for raw in process.stderr:
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                name = event.get("event")
                if name in MARKS and "since_start_s" in event:
                    found[f"{name} wall"] = event["since_start_s"]
                    found[f"{name} cpu"] = event["cpu_s"]
                if name == "first bind" or time.monotonic() > deadline:
                    break
            # Read on, so that the process never blocks on a full pipe while it binds the rest.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            watcher.join(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait()
        if "first bind wall" not in found or "last bind wall" not in watcher.found:
            raise RuntimeError("phalanx run did not bind every pod within two minutes")
        found.update(watcher.found)
        found["per pod ms"] = (found["last bind cpu"] - found["first bind cpu"]) / (GANGS * SIZE - SIZE) * 1000
        # Every decision's CPU: how much of it falls after the first bind depends on how soon that bind goes out.
        found["per pod from leading ms"] = (found["last bind cpu"] - found["leading cpu"]) / (GANGS * SIZE) * 1000
        # Every process of Phalanx's, per pod: the writers' whole CPU (their start included) over all pods.
        found["all processes per pod ms"] = found["per pod ms"] + found["writers cpu"] / (GANGS * SIZE) * 1000
        return found
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()


def imports_cpu(env: dict[str, str]) -> float:
    """CPU seconds of a fresh interpreter that imports the run path and stops (the ``imports`` phase)."""
    code = "import time, scheduler.frontends.cli, scheduler.ports.kube; print(time.process_time())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the lines")
    parser.add_argument("--repeat", type=int, default=5, help="runs (default 5)")
    parser.add_argument("--quick", action="store_true", help="one run")
    parser.add_argument("--profile", metavar="FILE", help="one more run, sampled (scripts/sampled.py), to FILE")
    parser.add_argument("--writers", default="auto", help="binding.writerProcesses (default auto)")
    parser.add_argument("--tls", action="store_true", help="the server speaks HTTPS, as a real one does")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    print(f"command: scripts/bench_start.py {' '.join(sys.argv[1:])}".rstrip(), file=sys.stderr)
    print(f"machine: {machine()}", file=sys.stderr)
    print(f"cluster: {SHAPE} (256 nodes), {GANGS * SIZE:,} pending pods in gangs of {SIZE}, over "
          f"{'HTTPS' if args.tls else 'plain HTTP'}; runs: {repeat} "
          "(figures are medians)", file=sys.stderr)  # fmt: skip
    runs, imports = [], []
    with tempfile.TemporaryDirectory() as folder:
        env = compiled()
        for _ in range(repeat):
            runs.append(one_run(Path(folder), env, args.writers, tls=args.tls))
            imports.append(imports_cpu(env))
        if args.profile:
            profiled = {**env, "PYTHONPATH": str(ROOT)}
            one_run(Path(folder), profiled, args.writers, str(Path(args.profile).resolve()), tls=args.tls)
    result = {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}
    result["imports cpu"] = round(statistics.median(imports), 3)
    result["targets"] = "first bind cpu <= 0.6 s; per pod <= 0.35 ms"
    result["met"] = {"first bind": result["bound seen cpu"] <= 0.6, "per pod": result["per pod ms"] <= 0.35}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'phase':<18}{'wall s':>8}{'cpu s':>8}")
    print(f"{'imports':<18}{'':>8}{result['imports cpu']:>8.3f}")
    for mark in (*MARKS, "bound seen", "last bind"):
        if f"{mark} wall" in result:
            print(f"{mark:<18}{result[f'{mark} wall']:>8.3f}{result[f'{mark} cpu']:>8.3f}")
    print(f"CPU per pod bound after the first: {result['per pod ms']:.3f} ms (the deciding process), "
          f"{result['all processes per pod ms']:.3f} ms (with its writers' {result['writers cpu']:.2f} s)")  # fmt: skip
    print(f"CPU of the deciding process per pod, leading to last bind: {result['per pod from leading ms']:.3f} ms")
    met = result["met"]
    print(
        f"targets: CPU from exec to first bind <= 0.6 s: {'met' if met['first bind'] else 'missed'}; "
        f"CPU per bound pod <= 0.35 ms: {'met' if met['per pod'] else 'missed'}"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
