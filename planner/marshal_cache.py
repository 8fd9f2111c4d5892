"""A value kept in a marshal file beside what it was computed from (``__pycache__``, as Python keeps
bytecode): shipped presets' parsed YAML (``presets``) and bashlex's parser tables (``megatron.bashlex_tables``)."""

import contextlib
import marshal
import os
import sys
from pathlib import Path


def keep(file: Path, value) -> None:
    """Writes ``value`` to ``file`` unless Python writes no caches (``-B``, PYTHONDONTWRITEBYTECODE). A value
    marshal cannot hold, or a folder that cannot be written (or is a file), keeps nothing: the caller computes
    it again next time. Written whole under another name, then renamed, so a reader never sees half a file."""
    if sys.dont_write_bytecode:
        return
    try:
        blob = marshal.dumps(value)
    except ValueError:
        return
    part = file.with_name(f"{file.name}.{os.getpid()}.part")
    try:
        file.parent.mkdir(exist_ok=True)
        part.write_bytes(blob)
        os.replace(part, file)
    except OSError:
        with contextlib.suppress(OSError):  # the part file, if it was written (not in a folder that is a file)
            part.unlink(missing_ok=True)
