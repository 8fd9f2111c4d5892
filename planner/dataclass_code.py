"""The methods ``dataclasses`` writes for each dataclass (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
a frozen class's ``__setattr__`` and ``__delattr__``), compiled once per text and kept in ``__pycache__`` as
Python keeps a module's bytecode (``marshal_cache``).

``dataclasses`` writes each method as Python source and runs it with ``exec``, which compiles it: every
process that imports a dataclass compiles its methods again. A search imports 76 dataclasses (328 methods);
compiling them was 175 M of the 1,188 M instructions of importing the command line and the search
(callgrind, `python -m planner search ...`'s imports), about 18 ms of CPU a process. While ``compiled_once``
is active, ``dataclasses``' ``exec`` takes the code compiled from the same text: the same code object
``exec`` would compile (the text is the key, compiled with no inherited ``__future__`` flag, as
``dataclasses``' own ``exec`` does), so every class is the class it was.
"""

import builtins
import dataclasses
import marshal
import sys
import types
from contextlib import contextmanager
from pathlib import Path

from planner import marshal_cache

CACHE_FORMAT = 1
MAX_KEPT = 4096  # methods kept: beyond this (code edited many times), only those this process used are kept
CACHE_FILE = Path(__file__).parent / "__pycache__" / f"dataclass_code.{sys.implementation.cache_tag}.marshal"


@contextmanager
def compiled_once(file: Path = CACHE_FILE):
    """While active, dataclasses' methods are compiled once per text: taken from ``file``, or compiled and
    written to it when the block ends (unless Python writes no caches: ``-B``, PYTHONDONTWRITEBYTECODE)."""
    codes, used, misses = _read(file), set(), []

    def exec_(source, globals=None, locals=None, /):
        if type(source) is str:
            code = codes.get(source)
            if code is None:
                code = codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
                misses.append(source)
            used.add(source)
            source = code
        return builtins.exec(source, globals, locals)

    dataclasses.exec = exec_  # found before the builtin by dataclasses' own calls (module globals first)
    try:
        yield
    finally:
        if dataclasses.__dict__.get("exec") is exec_:
            del dataclasses.exec
        if misses:
            kept = codes if len(codes) <= MAX_KEPT else {text: codes[text] for text in used}
            marshal_cache.keep(file, (CACHE_FORMAT, kept))


def _read(file: Path) -> dict:
    """The kept methods by their text; none where the file is absent, unreadable or of another format."""
    try:
        fmt, codes = marshal.loads(file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if fmt != CACHE_FORMAT or type(codes) is not dict:
        return {}
    if not all(type(k) is str and type(v) is types.CodeType for k, v in codes.items()):
        return {}
    return codes
