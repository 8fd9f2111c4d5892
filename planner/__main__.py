"""`python -m planner` and the `megaplan` script: the megaplan command line. ``megaplan --version``
alone is answered here, before click and the commands load (as click's ``version_option`` says it)."""

from __future__ import annotations

import os
import sys
import types

# numpy's OpenBLAS starts a thread per core when numpy is imported, each spinning a while: the planner does
# no large linear algebra (calibration's least squares are a few dozen unknowns, below OpenBLAS's threading
# sizes), so the command line runs it on one thread unless the user set it. Measured on 2 cores: numpy's
# import 115-190 ms of CPU with the threads, 68-90 ms without (python -c "import numpy", 5 processes each).
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}
# pydantic looks for plugins (entry points of its "pydantic" group) when it builds its first model, and its
# plugin loader imports importlib.metadata with email, zipfile, socket, tempfile ... to do it: 113 M of the
# 2,058 M instructions of `megaplan search --model gpt3-175b --gpus 1024 --json` (callgrind). The planner uses
# no pydantic plugin, so the command line turns them off with pydantic's own switch unless the user set it,
# and while it is off stands in for the loader with one that answers as pydantic's does when off: no plugins.
PYDANTIC_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"
PLUGINS_OFF = ("__all__", "1", "true")  # the values pydantic's plugin/_loader.py get_plugins reads as "none"
PLUGIN_LOADER = "pydantic.plugin._loader"


def no_pydantic_plugins() -> None:
    """Plugins off (``PYDANTIC_PLUGINS``) unless the user said otherwise; while off, pydantic's plugin
    loader is a module whose ``get_plugins()`` returns none, so importlib.metadata is never imported."""
    os.environ.setdefault(PYDANTIC_PLUGINS, "1")
    if os.environ[PYDANTIC_PLUGINS] in PLUGINS_OFF and PLUGIN_LOADER not in sys.modules:
        loader = types.ModuleType(PLUGIN_LOADER, "pydantic plugins are off (PYDANTIC_DISABLE_PLUGINS): none")
        loader.get_plugins = tuple  # type: ignore[attr-defined]  # get_plugins() -> ()
        sys.modules[PLUGIN_LOADER] = loader


def main() -> None:
    for name, value in BLAS_THREADS.items():
        os.environ.setdefault(name, value)  # before numpy is imported: it reads it once, at its import
    no_pydantic_plugins()
    if sys.argv[1:] == ["--version"]:
        from planner import __version__

        print(f"megaplan, version {__version__}")
        return
    from planner.dataclass_code import compiled_once

    with compiled_once():  # dataclasses' methods compiled once, not in every process (planner.dataclass_code)
        from planner.cli import main as cli_main

        cli_main()


def run() -> None:
    """``main`` as the `megaplan` script and `python -m planner` run it, then the process ends (``_exit_now``)."""
    try:
        main()
    except SystemExit as done:
        _exit_now(done)
        raise
    _exit_now(SystemExit(0))


def _exit_now(done: SystemExit) -> None:
    """Ends the process with ``done``'s status once its output is flushed, without Python's finalization:
    freeing every object and array of a search one by one took 27-62 ms of wall time after the command had
    answered (`megaplan search --model deepseek-v3 --gpus 1024 --hardware dgx-h100-superpod --json`, measured
    from atexit to the process's end). Returns (and Python exits as usual) where the status is not a number
    (a message to print), an output cannot be flushed (a closed pipe: Python reports it as it always does),
    or another thread runs (it would be cut short)."""
    import threading

    code = done.code if done.code is not None else 0
    if not isinstance(code, int) or threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


if __name__ == "__main__":
    run()
