#!/usr/bin/env python3
"""Write planner/fidelity/published_setups.py: per setup (``planner.fidelity.published.setup_key``: model, hardware
preset, GPUs, global batch, sequence, precision, capacity factor), every reference run that published a throughput
for it, fastest first: tokens/s per GPU, the run's id, its plan as search labels plans (and its CUDA graphs), the
model's total parameters, the GPU, a MoE run's expert load imbalance and whether validate sets the run apart
(``planner.fidelity.published``). A search
reads the written table instead of building every reference run (half a second a process). Run it after the
reference runs or the presets they name change; tests/test_published_setups.py checks the file equals the live
table.
Usage: python scripts/published_setups.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "planner" / "fidelity" / "published_setups.py"
HEADER = '''"""Written by scripts/published_setups.py (do not edit by hand): per setup
(``planner.fidelity.published.setup_key``: model, hardware preset, GPUs, global batch, sequence, precision, capacity
factor), every reference run that published a throughput for it, fastest first: (tokens/s per GPU, run id, plan
label, the model's total parameters, GPU name, a MoE run's load imbalance: 1.0 where the tables force-balance, and
whether megaplan validate reports the run apart from its bar).
tests/test_published_setups.py checks this table equals the live one."""

PUBLISHED = {
'''


def live_table() -> dict[tuple, tuple[tuple, ...]]:
    """The table from the reference runs: ``choice.published_by_setup``'s runs with each one's plan label (the plan
    the run published, as ``planner.plan.plan_label`` writes it), model parameters and GPU."""
    from planner.fidelity.choice import published_by_setup
    from planner.fidelity.moe_runs import load_moe_runs
    from planner.fidelity.published import graphs_word
    from planner.fidelity.runs import load_runs
    from planner.fidelity.validate import prepared
    from planner.plan import plan_label
    from planner.result import model_params

    runs = {r.id: r for r in [*load_runs(), *load_moe_runs()]}
    out = {}
    for key, measured in published_by_setup().items():
        rows = []
        for value, rid in measured:
            req = prepared(runs[rid])
            o = req.ctx.options
            par, moe = req.plan.model_dump(mode="json"), req.ctx.model.is_moe
            label = plan_label(par, moe=moe, options=o.model_dump(mode="json"))
            graphs = graphs_word(o.cuda_graph_impl.value, tuple(m.value for m in o.cuda_graph_modules))
            label += f" · {graphs}" if graphs else ""
            imbalance = o.moe_load_imbalance if req.ctx.model.is_moe else None  # the tables force-balance MoE routing
            params, gpu = model_params(req.ctx.model)["total"], req.ctx.hardware.gpu.name
            run = runs[rid]
            apart = not (run.fit or run.searched or run.held_out)  # validate reports it apart from the bar
            rows.append((round(value, 1), rid, label, params, gpu, imbalance, apart))
        out[key] = tuple(sorted(rows, key=lambda row: (-row[0], row[1])))
    return dict(sorted(out.items(), key=lambda kv: repr(kv[0])))


def table_text(table: dict[tuple, tuple[tuple, ...]]) -> str:
    lines = [HEADER]
    for key, rows in table.items():
        lines.append(f"    {key!r}: (\n")
        lines.extend(f"        {row!r},\n" for row in rows)
        lines.append("    ),\n")
    lines.append("}\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the table (no options: ``--help`` prints this script's use and writes nothing)."""
    import argparse

    argparse.ArgumentParser(
        description="Write planner/fidelity/published_setups.py from the reference runs "
        "(tests/test_published_setups.py checks)."
    ).parse_args(argv)
    TARGET.write_text(table_text(live_table()))
    # as the project formats Python (120 columns); the table's values do not depend on it
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", str(TARGET)], check=False)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
