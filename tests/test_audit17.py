"""audit17: what a new user trips on in their first two days (their own model YAML, their own launch script and
sbatch, export, compare, calibrate, bad input)."""

from __future__ import annotations

import io
import re

from conftest import run_cli


def _compare_names(a: dict, b: dict) -> list[str]:
    from rich.console import Console

    from planner.report.runs import compare_view
    from planner.runs.compare import compare_plans

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(compare_view(compare_plans(a, b)))
    lines = [re.sub(r"^(plan|memory|time|throughput) {2,}", "", line.strip()) for line in out.getvalue().splitlines()]
    return [line.split("  ")[0] for line in lines]


def test_compare_leaves_out_a_dense_plans_etp_even_when_it_differs():
    # etp follows tp when not given, so two dense plans at tp 2 and tp 4 listed "etp 2 4 +2 ×2.000" in yellow (a
    # plan field that differs) though no dense layer has an expert; ux15 left out only rows equal on both sides
    from planner import api

    base = dict(model="gpt-1.7b", gpus=8, pp=1, micro_batch=1)
    a = api.explain(api.make_request(**base, tp=2))
    b = api.explain(api.make_request(**base, tp=4))
    assert (a["parallel"]["etp"], b["parallel"]["etp"]) == (2, 4)
    names = _compare_names(a, b)
    assert "tp" in names and "etp" not in names, names
