"""The rooms of ``scheduler/`` (its ``__init__`` says the order) and of the repository hold:

- ``topology`` is pure: it imports nothing of the scheduler, of Kubernetes or of asyncio;
- the ports (``scheduler/ports``) import nothing of the engine or the front-ends, and only
  ``scheduler/ports/kube`` talks to Kubernetes through kubernetes_asyncio;
- the engine (the rest of ``scheduler``) never imports the front-ends (``scheduler/frontends``).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEDULER = ROOT / "scheduler"


def imported_modules(path: Path) -> set[str]:
    return imports_in(path.read_text(), path)


def imports_in(source: str, path: Path) -> set[str]:
    """Every module ``source`` (the file ``path``) imports, by its full dotted name (``from x import y``
    gives ``x`` and ``x.y``; relative imports are resolved against the file's package;
    ``import_module("x")`` counts as ``x``)."""
    tree = ast.parse(source, filename=str(path))
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Import):
            found.update(alias.name for alias in item.names)
        elif isinstance(item, ast.ImportFrom):
            base = package[: len(package) - item.level + 1] if item.level else []
            module = ".".join([*base, *(item.module.split(".") if item.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in item.names)
        elif (
            isinstance(item, ast.Call)
            and isinstance(item.func, ast.Attribute | ast.Name)
            and (item.func.attr if isinstance(item.func, ast.Attribute) else item.func.id) == "import_module"
            and item.args
            and isinstance(item.args[0], ast.Constant)
            and isinstance(item.args[0].value, str)
        ):
            found.add(item.args[0].value)
    return found


def test_the_import_reader_sees_relative_and_dynamic_imports() -> None:
    source = "from ..cycle import x\nfrom . import store\nimportlib.import_module('scheduler.frontends.cli')\n"
    found = imports_in(source, ROOT / "scheduler" / "ports" / "sim" / "probe.py")
    assert {"scheduler.ports.cycle", "scheduler.ports.sim.store", "scheduler.frontends.cli"} <= found


def room(path: Path) -> str:
    parts = path.relative_to(SCHEDULER).parts
    return parts[0] if parts[0] in ("ports", "frontends") else "engine"


def offenders(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        bad = sorted(name for name in imported_modules(path) if name.startswith(forbidden))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_topology_imports_neither_scheduler_nor_kubernetes_nor_asyncio() -> None:
    forbidden = ("scheduler", "kubernetes_asyncio", "kubernetes", "asyncio", "anyio", "aiohttp")
    modules = list((ROOT / "topology").rglob("*.py"))
    assert modules, "no topology modules found: the layout changed"
    assert offenders(modules, forbidden) == {}


def test_the_ports_import_nothing_of_the_engine_or_the_front_ends() -> None:
    ports = [path for path in SCHEDULER.rglob("*.py") if room(path) == "ports"]
    allowed_prefix = "scheduler.ports"
    found = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in imported_modules(path)
            if name.startswith("scheduler") and not name.startswith(allowed_prefix) and name != "scheduler"
        )
        for path in ports
    }
    assert {path: names for path, names in found.items() if names} == {}
    assert ports, "no port modules found: the layout changed"


def test_the_engine_never_imports_the_front_ends_nor_a_port_but_through_the_protocol() -> None:
    """The engine speaks ``ports.port`` (and ``ports.errors``): which cluster is behind it, the real one or
    the emulator, is the front-ends' choice (``app`` is given a port)."""
    engine = [path for path in SCHEDULER.rglob("*.py") if room(path) == "engine"]
    assert len(engine) > 10, "no engine modules found: the layout changed"
    assert offenders(engine, ("scheduler.frontends", "scheduler.ports.sim", "scheduler.ports.kube")) == {}


def test_only_the_kube_port_imports_kubernetes_asyncio() -> None:
    outside = [path for path in SCHEDULER.rglob("*.py") if path.relative_to(SCHEDULER).parts[:2] != ("ports", "kube")]
    assert offenders(outside, ("kubernetes_asyncio",)) == {}
