"""The layers of DESIGN section 2 hold: `topology` is pure, and only `scheduler/kube/` talks to Kubernetes."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Import):
            found.update(alias.name.split(".")[0] for alias in item.names)
        elif isinstance(item, ast.ImportFrom) and item.module and item.level == 0:
            found.add(item.module.split(".")[0])
    return found


def test_topology_imports_neither_scheduler_nor_kubernetes_nor_asyncio() -> None:
    forbidden = {"scheduler", "kubernetes_asyncio", "kubernetes", "asyncio", "anyio", "aiohttp"}
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & forbidden)
        for path in (ROOT / "topology").rglob("*.py")
        if imported_modules(path) & forbidden
    }
    assert offenders == {}


def test_only_scheduler_kube_imports_kubernetes_asyncio() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "scheduler").rglob("*.py")
        if "kubernetes_asyncio" in imported_modules(path)
        and "kube" not in path.relative_to(ROOT / "scheduler").parts[:1]
    ]
    assert offenders == []
