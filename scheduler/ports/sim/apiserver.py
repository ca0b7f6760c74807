"""The emulator as an API server process of its own: ``python -m scheduler.ports.sim.apiserver``.

(``phalanx serve``, in ``frontends/sandbox.py``, is another thing: the sandbox for people with kubectl,
the emulator and Phalanx in one process.)

Prints one line, ``serving http://127.0.0.1:<port>``, once it listens, then serves until interrupted; with
``--tls-cert-file`` and ``--tls-private-key-file`` (kube-apiserver's flags), HTTPS, as every real one does.
Used by benchmarks that keep the API server off the scheduler's process (and core), and handy for
pointing ``phalanx run`` or ``kubectl`` at a throwaway cluster.
"""

from __future__ import annotations

import argparse
import signal
import ssl
import sys

import anyio

from scheduler.ports.sim.builders import ClusterShape, ManifestError, load, read_manifest_file
from scheduler.ports.sim.http import SimServer
from scheduler.ports.sim.store import Store


def bound_pods(count: int, nodes: list[str]) -> list[dict[str, object]]:
    """``count`` one-GPU pods of another scheduler, already running, spread over ``nodes``."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"running-{i:06d}", "namespace": "load", "labels": {"app": f"svc-{i % 997}"}},
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeName": nodes[i % len(nodes)],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {
                            "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
        for i in range(count)
    ]


async def serve(args: argparse.Namespace) -> None:
    store = Store(history=args.history)
    nodes = ClusterShape.parse(args.shape).node_manifests() if args.shape else []
    load(store, nodes)
    for path in args.manifests:
        load(store, read_manifest_file(path), assume_ready=True)
    if args.bound_pods:
        load(store, bound_pods(args.bound_pods, [node["metadata"]["name"] for node in nodes]))
    for namespace in ("default", "phalanx-system", "kube-system"):
        store.ensure_namespace(namespace)
    server = SimServer(store, bookmark_interval=args.bookmark_interval)
    tls = None
    if args.tls_cert_file:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert_file, args.tls_private_key_file)
    url = await server.start(args.host, args.port, tls=tls)
    print(f"serving {url}", flush=True)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            break
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.ports.sim.apiserver", description=__doc__)
    parser.add_argument("--shape", default="", help="a compact cluster, e.g. blocks=2,racks=4,nodes=8,gpus=8")
    parser.add_argument("--manifests", action="append", default=[], metavar="FILE", help="objects to load (repeatable)")
    parser.add_argument("--bound-pods", type=int, default=0, help="running pods of another scheduler to preload")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--history", type=int, default=100_000, help="watch events kept for resuming watches")
    parser.add_argument("--bookmark-interval", type=float, default=5.0)
    parser.add_argument("--tls-cert-file", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-private-key-file", metavar="FILE", help="and this key (PEM)")
    args = parser.parse_args(argv)
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        parser.error("--tls-cert-file and --tls-private-key-file go together")
    try:
        anyio.run(serve, args)
    except (ManifestError, OSError) as error:  # (a certificate that cannot be read is an ssl.SSLError, an OSError)
        sys.stderr.write(f"serve: {error}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
