"""What a command imports: `megaplan --version` none of the libraries, `search --json` no rendering
(rich, planner.report) and nothing of the other commands (fidelity runs' fits, Megatron import/export,
Bridge). Each import is time every process pays; tested in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from planner.cli import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
modules = sorted(sys.modules)
print(" ".join(modules), file=sys.stderr)
"""


def imported(args: list[str]) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return set(done.stderr.strip().splitlines()[-1].split())


def _under(modules: set[str], *roots: str) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


def test_version_imports_no_library():
    assert _under(imported(["--version"]), "numpy", "pydantic", "rich", "yaml", "json", "planner.cli.runs") == []


@pytest.mark.parametrize("output", ["--json", "--csv"])
def test_search_to_a_file_format_draws_nothing_and_loads_no_other_command(output):
    modules = imported(["search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "2", output])
    assert "planner.search" in modules  # it did search
    unwanted = ("rich", "planner.report.layout", "planner.megatron", "planner.bridge", "planner.runs", "scipy")
    assert _under(modules, *unwanted) == []
    assert "numpy.ma" not in modules  # np.unique's plain call imports it (~50 ms in each process of a search)


FAST = """
import sys
sys.argv = ["megaplan", "--version"]
from planner.__main__ import main
main()
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_version_alone_is_answered_before_click_as_click_words_it():
    from conftest import run_cli

    done = subprocess.run([sys.executable, "-c", FAST], capture_output=True, text=True, check=True)
    assert done.stdout == run_cli(["--version"]).stdout  # "megaplan, version X" either way
    assert _under(set(done.stderr.split()), "click", "planner.cli") == []


BLAS = """
import os, sys
sys.argv = ["megaplan", "--version"]
from planner.__main__ import main
main()
import numpy
print(os.environ.get("OPENBLAS_NUM_THREADS"), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("3", "3")])
def test_the_command_line_runs_numpy_blas_on_one_thread_unless_the_user_set_it(given, seen):
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True, check=True, env=env)
    assert done.stderr.split()[-1] == seen


PLUGINS = """
import os, sys
sys.argv = ["megaplan", "search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "1", "--json"]
from planner.__main__ import main
try:
    main()
except SystemExit:
    pass
from pydantic.plugin._loader import get_plugins
seen = (os.environ.get("PYDANTIC_DISABLE_PLUGINS"), "importlib.metadata" in sys.modules, list(get_plugins()))
print(*seen, file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "1 False []"), ("true", "true False []"), ("0", "0 True []")])
def test_the_command_line_turns_pydantic_plugins_off_unless_the_user_set_it(given, seen):
    """Off, pydantic's plugin loader (and importlib.metadata behind it) is never imported; a user's value
    wins, and with plugins on the real loader runs (this environment has no plugin: none either way)."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if given:
        env["PYDANTIC_DISABLE_PLUGINS"] = given
    done = subprocess.run([sys.executable, "-c", PLUGINS], capture_output=True, text=True, check=True, env=env)
    assert '"evaluated"' in done.stdout  # it searched: pydantic built its models with the stand-in loader
    assert done.stderr.strip().splitlines()[-1] == seen


def test_the_stand_in_plugin_loader_answers_as_pydantics_does_when_plugins_are_off(monkeypatch):
    """pydantic reads only ``get_plugins`` from its loader, and with plugins off it returns none, as the
    stand-in's does."""
    import importlib
    import pathlib
    import re

    import pydantic

    from planner.__main__ import PLUGIN_LOADER, PLUGINS_OFF, PYDANTIC_PLUGINS

    real = importlib.import_module(PLUGIN_LOADER)
    for off in PLUGINS_OFF:
        monkeypatch.setenv(PYDANTIC_PLUGINS, off)
        assert tuple(real.get_plugins()) == ()
    names = set()
    for path in pathlib.Path(pydantic.__file__).parent.rglob("*.py"):
        for found in re.findall(r"from (?:\.|pydantic\.plugin\.)_loader import ([\w, ]+)", path.read_text()):
            names |= {n.strip() for n in found.split(",")}
    assert names == {"get_plugins"}


GC = """
import gc, sys
from planner.cli import cli
before = gc.get_freeze_count()
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(before, gc.get_freeze_count() > 10000, gc.isenabled(), "numpy" in sys.modules, file=sys.stderr)
"""


def test_a_commands_modules_load_with_the_collector_paused_then_frozen_out_of_its_generations():
    """The command's imports (numpy, pydantic, the planner) end frozen (``gc.freeze``), and the collector runs
    again for the command itself."""
    done = subprocess.run(
        [sys.executable, "-c", GC, "search", "--model", "gpt-1.7b", "--gpus", "8", "--top", "1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"evaluated"' in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "0 True True True"


ENDS = """
import atexit, sys
atexit.register(lambda: print("finalized", file=sys.stderr))
sys.argv = ["megaplan", *sys.argv[1:]]
from planner.__main__ import run
run()
"""


@pytest.mark.parametrize(
    ("args", "code"), [(["presets"], 0), (["search", "--model", "gpt3-175b", "--gpus", "10000000"], 2)]
)
def test_the_command_line_ends_without_finalization_once_its_output_is_out(args, code):
    """Freeing a search's objects one by one took 27-62 ms after the answer: the process ends with its status
    once stdout and stderr are flushed (the whole output there), without Python's finalization (atexit)."""
    done = subprocess.run([sys.executable, "-c", ENDS, *args], capture_output=True, text=True)
    assert done.returncode == code
    assert "finalized" not in done.stderr
    if code == 0:
        assert "dgx-h100-superpod" in done.stdout  # the preset list, whole
    else:
        assert done.stderr.startswith("megaplan: error: no legal plan for gpt3-175b on 10,000,000 GPUs")
