"""docs/architecture.md is the map of the code: every file it names exists, and every ``Class.member`` it
names is a member of a class of that name (a method, a property, a field or an attribute set in
``__init__``). A rename that forgets the map fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "architecture.md"
CODE = ("scheduler", "topology", "scripts", "tests")


def python_files() -> list[Path]:
    return [path for folder in CODE for path in (ROOT / folder).rglob("*.py")]


def members_by_class() -> dict[str, set[str]]:
    """Each class name in the code, with every name its classes of that name define."""
    found: dict[str, set[str]] = {}
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            names = found.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names.update(target.id for target in item.targets if isinstance(target, ast.Name))
                if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    names.add(item.attr)
    return found


def test_every_file_the_map_names_exists() -> None:
    named = set(re.findall(r"`([\w/.]+\.py)`", MAP.read_text()))
    assert len(named) > 30, "the map names no files: its form changed"
    files = [str(path.relative_to(ROOT)) for path in python_files()]
    missing = sorted(name for name in named if not any(file == name or file.endswith("/" + name) for file in files))
    assert missing == []


def test_every_class_member_the_map_names_exists() -> None:
    named = set(re.findall(r"`([A-Z]\w+)\.(\w+)(?:\(\))?`", MAP.read_text()))
    assert len(named) > 10, "the map names no members: its form changed"
    members = members_by_class()
    missing = sorted(f"{owner}.{name}" for owner, name in named if name not in members.get(owner, set()))
    assert missing == []
