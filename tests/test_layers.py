"""The rooms of ``scheduler/`` (its ``__init__`` says the order) and of the repository hold:

- ``topology`` is pure: it imports nothing of the scheduler, of Kubernetes or of asyncio;
- the ports (``scheduler/ports``) import nothing of the engine or the front-ends, and only
  ``scheduler/ports/kube`` talks to Kubernetes through kubernetes_asyncio;
- the engine (the rest of ``scheduler``) never imports the front-ends (``scheduler/frontends``), and
  inside it each module imports only modules below it in ``scheduler.ORDER``;
- inside each package with an order of its own (``ORDER`` in its ``__init__``: ``topology``, ``gangs``,
  ``devices``, ``state``, ``ports/kube``, ``ports/sim``, ``simulation``), each module imports only modules before it,
  never a name its package's ``__init__`` re-exports, and every module is in the order.
"""

import ast
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler import ORDER

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
    return parts[0] if parts[0] in ("ports", "simulation", "frontends") else "engine"


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


def test_the_engine_never_imports_the_front_ends_the_simulated_world_nor_a_port_but_through_the_protocol() -> None:
    """The engine speaks ``ports.port`` (and ``ports.errors``): which cluster is behind it, the real one or
    the emulator, is the front-ends' choice (``app`` is given a port)."""
    engine = [path for path in SCHEDULER.rglob("*.py") if room(path) == "engine"]
    assert len(engine) > 10, "no engine modules found: the layout changed"
    forbidden = ("scheduler.frontends", "scheduler.simulation", "scheduler.ports.sim", "scheduler.ports.kube")
    assert offenders(engine, forbidden) == {}


def test_the_simulated_world_never_imports_the_front_ends_nor_the_real_cluster_s_port() -> None:
    simulation = [path for path in SCHEDULER.rglob("*.py") if room(path) == "simulation"]
    assert len(simulation) > 5, "no simulation modules found: the layout changed"
    assert offenders(simulation, ("scheduler.frontends", "scheduler.ports.kube", "kubernetes_asyncio")) == {}


def test_no_two_modules_share_a_file_name() -> None:
    """A name says which module it is: ``errors.py`` in three rooms said nothing."""
    modules = [*SCHEDULER.rglob("*.py"), *(ROOT / "topology").rglob("*.py")]
    seen: dict[str, list[str]] = {}
    for path in modules:
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert len(seen) > 50, "no modules found: the layout changed"
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_script_imports_the_tests() -> None:
    """Benchmarks and tools stand on their own: what both need lives in ``scripts/`` or the package."""
    scripts = list((ROOT / "scripts").rglob("*.py"))
    assert scripts, "no scripts found: the layout changed"
    assert offenders(scripts, ("tests",)) == {}


def test_only_the_kube_port_imports_kubernetes_asyncio() -> None:
    outside = [path for path in SCHEDULER.rglob("*.py") if path.relative_to(SCHEDULER).parts[:2] != ("ports", "kube")]
    assert offenders(outside, ("kubernetes_asyncio",)) == {}


def engine_name(path: Path) -> str:
    """``scheduler/preemption/units.py`` -> ``preemption.units``; a package's ``__init__`` is the package."""
    parts = path.relative_to(SCHEDULER).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def place_in_order(name: str) -> int | None:
    """Where ``name`` (an engine module, relative to ``scheduler``) stands in ``scheduler.ORDER``: its own
    entry or its package's; a package split into entries stands where its first one does."""
    for position, entry in enumerate(ORDER):
        if name == entry or name.startswith(entry + ".") or entry.startswith(name + "."):
            return position
    return None


def upward(name: str, imported: set[str]) -> list[str]:
    """The engine modules among ``imported`` that stand after ``name`` in the order."""
    mine = place_in_order(name)
    assert mine is not None, f"{name} is missing from scheduler.ORDER"
    found = []
    for module in sorted(imported):
        if not module.startswith("scheduler.") or room(SCHEDULER / module.split(".")[1]) != "engine":
            continue
        target = module.removeprefix("scheduler.")
        theirs = place_in_order(target)
        if theirs is None and "." in target:  # ``from scheduler.x import Name`` also reads as ``x.Name``
            theirs = place_in_order(target.rsplit(".", 1)[0])
        if theirs is not None and theirs > mine:
            found.append(target)
    return found


def test_the_engine_imports_only_down_its_order() -> None:
    """Each engine module imports only modules before it in ``scheduler.ORDER`` (or of its own entry, as
    the modules of ``gangs``), and every engine module is in the order."""
    engine = [path for path in SCHEDULER.rglob("*.py") if room(path) == "engine" and path != SCHEDULER / "__init__.py"]
    modules = {engine_name(path): path for path in engine}
    assert len(modules) > 20, "no engine modules found: the layout changed"
    assert sorted(name for name in modules if place_in_order(name) is None) == []
    found = {name: upward(name, imported_modules(path)) for name, path in modules.items()}
    assert {name: targets for name, targets in found.items() if targets} == {}


def test_the_order_check_finds_an_upward_import_and_allows_a_downward_one() -> None:
    state, cycle = SCHEDULER / "state" / "cluster_state.py", SCHEDULER / "cycle.py"
    assert upward("state", imports_in("from scheduler.cycle import Cycle\n", state)) == ["cycle", "cycle.Cycle"]
    assert upward("cycle", imports_in("from scheduler.state import ClusterState\n", cycle)) == []
    assert upward("gangs.index", imports_in("from scheduler.gangs.model import GangKey\n", state)) == []


#: The packages that keep an order of their own: an import inside one of them in either direction is checked.
ORDERED = (
    "topology",
    "scheduler.gangs",
    "scheduler.devices",
    "scheduler.state",
    "scheduler.ports.kube",
    "scheduler.ports.sim",
    "scheduler.simulation",
)


def package_modules(package: str) -> dict[str, Path]:
    """The modules of a package by their names inside it (``controllers.base``), its ``__init__`` left out;
    a subpackage's ``__init__`` is the subpackage (``controllers``)."""
    folder = ROOT / package.replace(".", "/")
    found = {}
    for path in folder.rglob("*.py"):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts == ("__init__",):
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def out_of_order(package: str, order: tuple[str, ...], name: str, imported: set[str]) -> list[str]:
    """What module ``name`` of ``package`` imports from the same package that is not before it in ``order``:
    a module listed after it (or not at all), or a name the package's ``__init__`` re-exports."""
    modules = set(order)
    mine = order.index(name)
    found = []
    for module in sorted(imported):
        if not module.startswith(package + "."):
            continue  # the package itself is the base of ``from package import module``: its names follow
        target = module.removeprefix(package + ".")
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target:
            found.append(f"{module} (a name of the package's __init__)")
        elif order.index(target) >= mine and target != name:
            found.append(module)
    return found


@pytest.mark.parametrize("package", ORDERED)
def test_inside_each_ordered_package_modules_import_only_down_its_order(package: str) -> None:
    order = importlib.import_module(package).ORDER
    modules = package_modules(package)
    assert len(modules) > 3, f"no modules found in {package}: the layout changed"
    assert sorted(set(modules) - set(order)) == [], f"modules of {package} missing from its ORDER"
    assert sorted(set(order) - set(modules)) == [], f"{package}.ORDER names modules that do not exist"
    found = {name: out_of_order(package, order, name, imported_modules(path)) for name, path in modules.items()}
    assert {name: targets for name, targets in found.items() if targets} == {}


def test_the_package_order_check_finds_upward_imports_and_names_of_the_package_s_face() -> None:
    order = ("model", "pods", "index")
    path = ROOT / "scheduler" / "gangs" / "pods.py"
    assert (
        out_of_order("scheduler.gangs", order, "pods", imports_in("from scheduler.gangs.model import X\n", path)) == []
    )
    upward = imports_in("from scheduler.gangs.index import GangIndex\n", path)
    assert out_of_order("scheduler.gangs", order, "pods", upward) == [
        "scheduler.gangs.index",
        "scheduler.gangs.index.GangIndex",
    ]
    face = imports_in("from scheduler.gangs import GangKey\n", path)
    assert out_of_order("scheduler.gangs", order, "pods", face) == [
        "scheduler.gangs.GangKey (a name of the package's __init__)"
    ]
    submodule = imports_in("from scheduler.gangs import model\n", path)
    assert out_of_order("scheduler.gangs", order, "pods", submodule) == []


def project_module(name: str, modules: set[str]) -> str | None:
    """The module of the project ``name`` (an imported dotted name) is, or is in: ``x.y.Name`` is ``x.y``."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def fan(
    paths: list[Path], imports: Callable[[Path], set[str]] = imported_modules
) -> dict[str, tuple[set[str], set[str]]]:
    """For each module: the project's modules it imports, and those that import it (a package's ``__init__``
    is the package: its names are imported from it)."""
    names = {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path for path in paths}
    modules = set(names)
    out = {name: set() for name in names}
    into: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        for imported in imports(path):
            target = project_module(imported, modules)
            if target is not None and target != name and not name.startswith(target + "."):
                out[name].add(target)
                into[target].add(name)
    return {name: (out[name], into[name]) for name in names}


#: Past this many modules both ways a module is a hub: every change to it touches a dozen others.
HUB = 12


def test_no_module_both_imports_and_is_imported_by_a_dozen_others() -> None:
    paths = [*SCHEDULER.rglob("*.py"), *(ROOT / "topology").rglob("*.py")]
    found = fan(paths)
    assert len(found) > 100, "no modules found: the layout changed"
    hubs = {name: (len(out), len(into)) for name, (out, into) in found.items() if min(len(out), len(into)) >= HUB}
    assert hubs == {}


def test_the_hub_check_finds_a_module_that_imports_and_is_imported_by_a_dozen() -> None:
    hub, others = "scheduler.hub", [f"scheduler.m{i}" for i in range(HUB)]
    # A module importing ``HUB`` modules that each import it back is the hub; the spokes are not.
    source = {hub: "".join(f"import {other}\n" for other in others), **{other: f"import {hub}\n" for other in others}}
    paths = [ROOT / (name.replace(".", "/") + ".py") for name in [hub, *others]]
    found = fan(paths, lambda path: imports_in(source[_dotted(path)], path))
    assert min(len(found[hub][0]), len(found[hub][1])) >= HUB
    assert all(len(found[other][0]) == 1 for other in others)


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_only_the_builders_and_the_informers_hold_the_whole_cluster_state() -> None:
    """The cycle, its stages, the binder and the reporter read ``ClusterView``; the appliers and the informers'
    side of ``ClusterState`` are the informers' (and the loop's, which folds their news, and the process's,
    which builds it)."""
    engine = [path for path in SCHEDULER.rglob("*.py") if room(path) == "engine"]
    holders = sorted(
        engine_name(path)
        for path in engine
        if {"scheduler.state.ClusterState", "scheduler.state.cluster_state"} & imported_modules(path)
        and path.parent != SCHEDULER / "state"
    )
    assert holders == ["app", "informers", "loop"]


def test_the_cycle_calls_extension_points_never_a_stage_by_its_module() -> None:
    """The cycle reaches the stages through ``registry.Stages`` and ``stages.py``'s points; only the permit
    stage's helpers (``permit.holds``, ``permit.missing``) are its own to call."""
    imported = {name.removeprefix("scheduler.") for name in imported_modules(SCHEDULER / "cycle.py")}
    stage_modules = ("preemption", "starvation", "vacancies", "whose_room", "permit.stage")
    assert sorted(name for name in imported if name.startswith(stage_modules)) == []
    assert "registry.Stages" in imported and "stages" in imported
