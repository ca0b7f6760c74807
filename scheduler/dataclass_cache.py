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
  magic number; a file of another interpreter, or one that cannot be read, is ignored;
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
from pathlib import Path
from types import CodeType
from typing import Any

#: Past this many entries the file keeps only what the process writing it compiled or used: stale texts
#: of classes since edited would otherwise pile up in a checkout.
MAX_ENTRIES = 4000


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
    something new was compiled."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.codes: dict[str, CodeType] | None = None  # read on first use
        self.used: set[str] = set()
        self.compiled = 0  # texts compiled here, not found in the file

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None) -> None:
        """``exec(source, globals, locals)``, with ``source`` compiled only if no earlier process did."""
        if not isinstance(source, str):
            exec(source, globals, locals)
            return
        codes = self._codes()
        code = codes.get(source)
        if code is None:
            code = codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used.add(source)
        exec(code, globals, locals)

    def _codes(self) -> dict[str, CodeType]:
        if self.codes is None:
            self.codes = read(self.path) if self.path is not None else {}
        return self.codes

    def save(self) -> bool:
        """Write the file if this process compiled something it lacked; True if written."""
        if self.path is None or self.compiled == 0 or sys.dont_write_bytecode or self.codes is None:
            return False
        codes = self.codes
        if len(codes) > MAX_ENTRIES:
            codes = {text: code for text, code in codes.items() if text in self.used}
        return write(self.path, codes)


def read(path: Path) -> dict[str, CodeType]:
    """The codes kept at ``path``; none if it is missing, of another interpreter, or unreadable."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    magic = importlib.util.MAGIC_NUMBER
    if not data.startswith(magic):
        return {}
    try:
        codes = marshal.loads(data[len(magic) :])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {text: code for text, code in codes.items() if isinstance(text, str) and isinstance(code, CodeType)}


def write(path: Path, codes: dict[str, CodeType]) -> bool:
    """Replace ``path`` by ``codes`` at once (a reader sees the old file or the new, never half of one)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(importlib.util.MAGIC_NUMBER + marshal.dumps(codes))
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return False
    return True


#: The process's cache, installed by ``scheduler/__init__``.
cache = MethodCache(default_path())


def install() -> None:
    """Route ``dataclasses``' compiles through :data:`cache` from now on, and write it at exit."""
    if getattr(dataclasses, "exec", None) is cache.exec:
        return
    dataclasses.exec = cache.exec  # type: ignore[attr-defined]
    atexit.register(cache.save)
