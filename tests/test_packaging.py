"""The installed `megaplan` command works from any directory: the presets and reference data ship
inside the package (a plain `pip install .` then `megaplan ...` elsewhere, as the README says)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MEGAPLAN = shutil.which("megaplan") or str(Path(sys.executable).parent / "megaplan")


@pytest.mark.skipif(not Path(MEGAPLAN).exists(), reason="the megaplan console script is not installed")
def test_installed_command_runs_from_another_directory(tmp_path):
    out = subprocess.run([MEGAPLAN, "presets", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listing = json.loads(out.stdout)
    assert "gpt3-175b" in listing["models"] and "dgx-a100-superpod" in listing["hardware"]
    run = subprocess.run(
        [MEGAPLAN, "search", "--model", "gpt3-175b", "--gpus", "1024", "--top", "1", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    best = json.loads(run.stdout)["plans"][0]
    assert best["parallel"]["tp"] * best["parallel"]["pp"] * best["parallel"]["dp"] * best["parallel"]["cp"] == 1024


def test_every_package_and_data_file_of_the_planner_is_installed():
    # the fresh-venv trial: `pip install .` left out planner.bridge, so every Bridge option ended in
    # "ModuleNotFoundError: No module named 'planner.bridge'" (the editable install hid it)
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[1]
    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, data = set(tool["packages"]), tool["package-data"]
    packages = {".".join(p.parent.relative_to(root).parts) for p in (root / "planner").rglob("__init__.py")}
    assert packages - listed == set()
    for path in (root / "planner").rglob("*"):
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts:
            package = ".".join(path.parent.relative_to(root).parts)
            assert any(fnmatch.fnmatch(path.name, pattern) for pattern in data.get(package, [])), path
