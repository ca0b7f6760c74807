"""The methods ``dataclasses`` writes for each class, compiled once and kept beside the bytecode (issue 40).

``@dataclass`` writes a class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` (and for a frozen class
``__setattr__`` and ``__delattr__``) as source text and compiles it with ``exec`` each time the class is
defined: for the 130 classes ``phalanx run`` imports, some 700 compiles and 50-90 ms of every start's CPU on
Python 3.11, more than half of what importing Phalanx's own modules costs. Python keeps a module's
bytecode in ``__pycache__``; nothing keeps these, so this module does, in the same place and by the same
rules:

- the key is the generated text itself, so an entry can only ever stand for the code it was compiled from:
  a class that changed writes other text, which is compiled as before;
- the file is named for the interpreter (``sys.implementation.cache_tag``) and starts with its bytecode's
  magic number and a checksum of the rest; a file of another interpreter, damaged, or that cannot be read
  is ignored (and replaced at exit);
- it is written at exit, only when something was compiled that it did not hold, never when
  ``sys.dont_write_bytecode`` is set (``PYTHONDONTWRITEBYTECODE``), into the directory Python gives this
  module's bytecode (``PYTHONPYCACHEPREFIX`` included), by an atomic rename, and silently not where that
  directory cannot be written (an image's installed package: the Dockerfile writes it at build).

``dataclasses`` calls ``exec`` by its global name (Python 3.11 to 3.13), so a function of that name in its
module's namespace is called instead of the builtin, with the same arguments; it compiles the text exactly
as the builtin would (``dont_inherit``: no ``__future__`` flag of this module leaks in).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import zlib
from pathlib import Path
from types import CodeType
from typing import Any

#: Past this many entries the file keeps only what the process writing it compiled or used: stale texts
#: of classes since edited would otherwise pile up in a checkout.
MAX_ENTRIES = 4000
_CHECKSUM = 4  # bytes: the CRC-32 of what follows it


def default_path() -> Path | None:
    """Where Python would put this module's bytecode, under a name of the cache's own; None where Python
    would put none (no ``cache_tag``)."""
    try:
        bytecode = Path(importlib.util.cache_from_source(__file__))
    except NotImplementedError:
        return None
    return bytecode.with_name(f"dataclass-methods.{sys.implementation.cache_tag}.marshal")


class MethodCache:
    """Generated methods' code by their text: read from ``path`` on first use, written back at exit when
    something new was compiled. Each entry stays marshalled until it is asked for: a process keeps the
    file's size, not every code object's (a writer process uses a tenth of them)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.kept: dict[str, bytes] | None = None  # read on first use
        self.used: set[str] = set()
        self.compiled = 0  # texts compiled here, not found in the file

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        """``exec(source, globals, locals)``, with ``source`` compiled only if no earlier process did."""
        if not isinstance(source, str):
            exec(source, globals, locals)
            return
        exec(self.code(source), globals, locals)

    def code(self, source: str) -> CodeType:
        kept = self.entries()
        code = _loaded(kept.get(source))
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)
            kept[source] = marshal.dumps(code)
            self.compiled += 1
        self.used.add(source)
        return code

    def entries(self) -> dict[str, bytes]:
        """Every entry, each text's code marshalled."""
        if self.kept is None:
            self.kept = read(self.path) if self.path is not None else {}
        return self.kept

    def save(self) -> bool:
        """Write the file if this process compiled something it lacked; True if written."""
        if self.path is None or self.compiled == 0 or sys.dont_write_bytecode or self.kept is None:
            return False
        kept = self.kept
        if len(kept) > MAX_ENTRIES:
            kept = {text: code for text, code in kept.items() if text in self.used}
        return write(self.path, kept)


def _loaded(entry: bytes | None) -> CodeType | None:
    if entry is None:
        return None
    try:
        code = marshal.loads(entry)
    except Exception:  # a damaged entry is compiled again, whatever marshal makes of it
        return None
    return code if isinstance(code, CodeType) else None


def read(path: Path) -> dict[str, bytes]:
    """The entries kept at ``path``; none if it is missing, of another interpreter, damaged or unreadable."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    magic = importlib.util.MAGIC_NUMBER
    payload = data[len(magic) + _CHECKSUM :]
    if data[: len(magic)] != magic or data[len(magic) : len(magic) + _CHECKSUM] != _crc(payload):
        return {}
    try:
        entries = marshal.loads(payload)
    except Exception:  # marshal raises SystemError and MemoryError too on bad input
        return {}
    if not isinstance(entries, dict):
        return {}
    return {text: code for text, code in entries.items() if isinstance(text, str) and isinstance(code, bytes)}


def write(path: Path, entries: dict[str, bytes]) -> bool:
    """Replace ``path`` by ``entries`` at once (a reader sees the old file or the new, never half of one)."""
    payload = marshal.dumps(entries)
    partial = path.with_name(f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: two processes never write one partial file, whatever their PIDs (in other PID namespaces).
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with open(descriptor, "wb") as stream:
            stream.write(importlib.util.MAGIC_NUMBER + _crc(payload) + payload)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return False
    return True


def _crc(payload: bytes) -> bytes:
    return zlib.crc32(payload).to_bytes(_CHECKSUM, "little")


#: The process's cache, installed by ``scheduler/__init__``.
cache = MethodCache(default_path())


def install() -> None:
    """Route ``dataclasses``' compiles through :data:`cache` from now on, and write it at exit."""
    if getattr(dataclasses, "exec", None) == cache.exec:  # (a bound method is made anew at each access)
        return
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    atexit.register(cache.save)
