"""The dataclass methods kept beside the bytecode (``scheduler/dataclass_cache.py``): a class built from
them is the class Python builds, a start after the first compiles none of them, and a file that cannot be
used or written costs nothing but the compile."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from scheduler import dataclass_cache
from scheduler.dataclass_cache import MethodCache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def bytecode_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """As where PYTHONDONTWRITEBYTECODE is not set (this machine's environment sets it)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def define() -> type[Any]:
    """A class with every kind of field the package uses: defaults, a factory, a field left out of
    comparison, a class variable; frozen, with slots."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Shape:
        """A pod's shape."""

        name: str
        gpus: int = 0
        labels: tuple[str, ...] = dataclasses.field(default_factory=tuple)
        note: str = dataclasses.field(default="", compare=False)
        KIND: ClassVar[str] = "shape"

    return Shape


def built_through(cache: MethodCache, monkeypatch: pytest.MonkeyPatch) -> type[Any]:
    with monkeypatch.context() as patch:
        patch.setattr(dataclasses, "exec", cache.exec)
        return define()


def behaviour(cls: type[Any]) -> list[Any]:
    """What a user of the class sees: construction, repr, equality, hashing, immutability, signature."""
    one, same, other = cls("a", 2, ("x",), note="n"), cls("a", 2, ("x",)), cls("b")
    frozen: Callable[[], None] = lambda: setattr(one, "gpus", 3)  # noqa: E731
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen()
    return [
        repr(one).replace(cls.__qualname__, "Shape"),
        one == same,
        one == other,
        hash(cls("a")) == hash(cls("a")),
        str(inspect.signature(cls)),
        cls.__init__.__annotations__,
        cls.__slots__,
        [field.name for field in dataclasses.fields(cls)],
    ]


def test_a_class_built_from_kept_methods_is_the_class_python_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "methods.marshal"
    first = MethodCache(path)
    fresh = built_through(first, monkeypatch)
    assert first.compiled > 0 and first.save() and path.exists()

    second = MethodCache(path)
    kept = built_through(second, monkeypatch)
    assert second.compiled == 0, "a second start compiles what the first kept"
    assert not second.save(), "nothing new: the file is not written again"

    with monkeypatch.context() as patch:
        patch.delattr(dataclasses, "exec")  # the builtin, as without the cache
        plain = define()
    assert behaviour(kept) == behaviour(fresh) == behaviour(plain)


def damaged(content: bytes) -> bytes:
    """A whole file of kept methods with one byte changed in its middle."""
    middle = len(content) // 2
    return content[:middle] + bytes([content[middle] ^ 0x40]) + content[middle + 1 :]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda _: b"",
        lambda _: b"not a cache",
        lambda whole: b"\x00\x00\r\n" + whole[4:],  # another interpreter's
        lambda whole: whole[: len(whole) // 2],
        damaged,  # (unchecked, one such byte made marshal raise SystemError at every start)
    ],
    ids=["empty", "garbage", "another interpreter", "cut short", "a byte changed"],
)
def test_a_file_that_cannot_be_used_is_ignored_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: Callable[[bytes], bytes]
) -> None:
    path = tmp_path / "methods.marshal"
    built_through(whole := MethodCache(path), monkeypatch)
    assert whole.save()
    path.write_bytes(spoil(path.read_bytes()))
    cache = MethodCache(path)
    built = built_through(cache, monkeypatch)
    assert cache.compiled > 0 and built("a").gpus == 0
    assert cache.save() and MethodCache(path).entries().keys() == cache.used


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "methods.marshal"
    cache = MethodCache(path)
    built_through(cache, monkeypatch)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert not cache.save() and not path.exists()


def test_a_directory_that_cannot_be_written_costs_only_the_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "package"
    blocker.write_text("a file where the cache's directory would be")
    cache = MethodCache(blocker / "__pycache__" / "methods.marshal")
    built = built_through(cache, monkeypatch)
    assert built("a").name == "a"
    assert not cache.save()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["package"]


def test_past_its_limit_the_file_keeps_only_what_the_writing_process_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "methods.marshal"
    stale = {f"x = {n}": marshal.dumps(compile(f"x = {n}", "<string>", "exec")) for n in range(5)}
    assert dataclass_cache.write(path, stale)
    monkeypatch.setattr(dataclass_cache, "MAX_ENTRIES", 5)
    cache = MethodCache(path)
    built_through(cache, monkeypatch)
    assert cache.save()
    assert MethodCache(path).entries().keys() == cache.used


def test_the_run_path_compiles_its_dataclass_methods_only_at_its_first_start(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path)  # bytecode and the cache in here, not beside the sources
    probe = "import scheduler.frontends.cli; from scheduler.dataclass_cache import cache; print(cache.compiled)"

    def compiled() -> int:
        done = subprocess.run(
            [sys.executable, "-c", probe], check=False, capture_output=True, text=True, cwd=ROOT, env=env
        )
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    assert compiled() > 100
    assert list(tmp_path.rglob("dataclass-methods.*.marshal"))
    assert compiled() == 0
