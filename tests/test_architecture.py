"""The architecture's import rules (docs/architecture.md): the CLI calls the library's front door and
the report reads the typed plan result; neither reaches into the cost functions."""

from __future__ import annotations

import ast
from pathlib import Path

PLANNER = Path(__file__).resolve().parents[1] / "planner"


def _imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in sorted((PLANNER / folder).glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        out[path.name] = names
    return out


def test_cli_and_report_never_import_the_cost_functions():
    for folder in ("cli", "report"):
        reaching = {f: sorted(m for m in mods if m.startswith("planner.costs")) for f, mods in _imports(folder).items()}
        assert {f: m for f, m in reaching.items() if m} == {}, folder


def test_the_cli_decides_no_plan_source_itself():
    """Where a plan comes from and how the options beside it override it is planner.plan_sources' one
    function: the CLI never reads a plan file's fields or imports a script itself."""
    for name, mods in _imports("cli").items():
        assert "planner.megatron.importer" not in mods, name
