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
