"""Code the imports compile from text in every process, compiled once per text and kept in ``__pycache__`` as
Python keeps a module's bytecode (``marshal_cache``): the methods ``dataclasses`` writes for each dataclass
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, a frozen class's ``__setattr__`` and ``__delattr__``)
and the string annotations ``typing.ForwardRef`` compiles (pydantic_core's schema TypedDicts: about 800).

``dataclasses`` writes each method as Python source and runs it with ``exec``, which compiles it; ``typing``
compiles each forward reference with ``compile``. A search imports 76 dataclasses (328 methods): compiling
them was 175 M of the 1,188 M instructions of importing the command line and the search (callgrind), about
18 ms of CPU a process. While ``compiled_once`` is active, those two modules' ``exec`` and ``compile`` take
the code compiled from the same text in the same mode: the code object they would compile (the text is the
key, compiled with no inherited ``__future__`` flag, as their own calls do), so every class is the class it was.
"""

import builtins
import dataclasses
import marshal
import sys
import types
import typing
from contextlib import contextmanager
from pathlib import Path

from planner import marshal_cache

CACHE_FORMAT = 2
MAX_KEPT = 8192  # texts kept: beyond this (code edited many times), only those this process used are kept
CACHE_FILE = Path(__file__).parent / "__pycache__" / f"dataclass_code.{sys.implementation.cache_tag}.marshal"


class _Codes:
    """Code objects by (mode, text): read from the kept file, compiled where missing."""

    def __init__(self, codes: dict) -> None:
        self.codes, self.used, self.misses = codes, set(), 0

    def code(self, text: str, mode: str) -> types.CodeType:
        key = (mode, text)
        found = self.codes.get(key)
        if found is None:
            found = self.codes[key] = builtins.compile(text, "<string>", mode, dont_inherit=True)
            self.misses += 1
        self.used.add(key)
        return found

    def exec(self, source, globals=None, locals=None, /):
        """``exec`` as dataclasses calls it: a text is run from its kept code."""
        return builtins.exec(self.code(source, "exec") if type(source) is str else source, globals, locals)

    def compile(self, source, filename, mode, *args, **kwargs):
        """``compile`` as typing.ForwardRef calls it, ``(text, "<string>", "eval")``, from the kept code."""
        if args or kwargs or type(source) is not str or filename != "<string>":
            return builtins.compile(source, filename, mode, *args, **kwargs)
        return self.code(source, mode)

    def kept(self) -> dict:
        return self.codes if len(self.codes) <= MAX_KEPT else {key: self.codes[key] for key in self.used}


@contextmanager
def compiled_once(file: Path = CACHE_FILE):
    """While active, dataclasses' methods and typing's forward references are compiled once per text: taken
    from ``file``, or compiled and written to it when the block ends (unless Python writes no caches: ``-B``,
    PYTHONDONTWRITEBYTECODE)."""
    codes = _Codes(_read(file))
    shadows = ((dataclasses, "exec", codes.exec), (typing, "compile", codes.compile))
    for module, name, fn in shadows:  # found before the builtin by the module's own calls (globals first)
        setattr(module, name, fn)
    try:
        yield
    finally:
        for module, name, fn in shadows:
            if module.__dict__.get(name) is fn:
                delattr(module, name)
        if codes.misses:
            marshal_cache.keep(file, (CACHE_FORMAT, codes.kept()))


def _read(file: Path) -> dict:
    """The kept code by (mode, text); none where the file is absent, unreadable or of another format."""
    try:
        fmt, codes = marshal.loads(file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if fmt != CACHE_FORMAT or type(codes) is not dict:
        return {}
    if not all(type(k) is tuple and type(v) is types.CodeType for k, v in codes.items()):
        return {}
    return codes
