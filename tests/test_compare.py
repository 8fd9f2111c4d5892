"""Two plans side by side (`megaplan compare`)."""

from __future__ import annotations

import os

import pytest
from rich.console import Console

from planner import api
from planner.errors import PlannerError
from planner.plan_sources import override_request
from planner.report.runs import compare_view
from planner.runs.compare import compare_plans

BASE = dict(model="gpt3-175b", gpus=1024, tp=8, pp=16, micro_batch=1)


@pytest.fixture(scope="module")
def full_vs_selective():
    a = api.explain(api.make_request(**BASE, recompute="full"))
    b = api.explain(api.make_request(**BASE, recompute="selective", sequence_parallel=True))
    return compare_plans(a, b)


def _row(cmp: dict, section: str, name: str) -> dict:
    return next(r for r in cmp["rows"] if r["section"] == section and r["name"] == name)


def test_rows_carry_values_differences_and_winner(full_vs_selective):
    cmp = full_vs_selective
    ea, eb = cmp["a"]["estimate"], cmp["b"]["estimate"]
    rec = _row(cmp, "time", "recompute")
    assert rec["a"] == ea["time"]["recompute"] and rec["b"] == eb["time"]["recompute"]
    assert rec["delta"] == pytest.approx(eb["time"]["recompute"] - ea["time"]["recompute"])
    assert rec["better"] == "b"  # selective recomputes only the attention core (Korthikanti 2022 §5)
    act = _row(cmp, "memory", "activations")
    assert act["better"] == "a"  # full keeps only the layer inputs: 2sbh per layer (Korthikanti 2022 Table 2)
    assert act["ratio"] == pytest.approx(eb["memory"]["activations"] / ea["memory"]["activations"])
    tps = _row(cmp, "throughput", "tokens/s")
    assert tps["better"] == "b" and tps["ratio"] > 1.2
    assert cmp["summary"]["faster"] == "b"
    assert cmp["summary"]["speedup_b_over_a"] == pytest.approx(ea["iteration_s"] / eb["iteration_s"])


def test_plan_fields_differ_without_a_winner(full_vs_selective):
    rc = _row(full_vs_selective, "plan", "recompute")
    assert (rc["a"], rc["b"], rc["differs"], rc["better"]) == ("full", "selective", True, None)
    tp = _row(full_vs_selective, "plan", "tp")
    assert (tp["a"], tp["b"], tp["differs"]) == (8, 8, False)
    same = _row(full_vs_selective, "memory", "weights")
    assert same["better"] is None and same["delta"] == 0.0


def test_view_highlights(full_vs_selective):
    console = Console(width=120, record=True, file=open(os.devnull, "w"), force_terminal=True, color_system="standard")
    console.print(compare_view(full_vs_selective))
    text = console.export_text(clear=False)
    assert "B is faster" in text and "activations (GiB)" in text and "recompute" in text
    styled = console.export_text(styles=True)
    assert "\x1b[1;32m" in styled and "\x1b[1;31m" in styled  # green (better) and red (worse) cells


def test_each_plan_says_what_the_published_runs_say_of_it():
    # explain's runs line under each plan: GPT-3 175B on A100 with flash attention, which no published Ampere run
    # used (the 2021-22 runs are unfused), against the same plan with the unfused kernel, validated by those runs
    a = api.explain(api.make_request(**BASE, recompute="selective", sequence_parallel=True))
    b = api.explain(
        api.make_request(**BASE, recompute="selective", sequence_parallel=True, options={"attention_kernel": "unfused"})
    )
    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(compare_view(compare_plans(a, b)))
    lines = [" ".join(line.split()) for line in console.export_text().splitlines()]
    runs = [line for line in lines if line.startswith("runs ")]
    assert len(runs) == 2
    assert runs[0].startswith("runs extrapolated: flash attention on Ampere, 0 runs")
    assert runs[1].startswith("runs validated by") and "flash attention" not in runs[1]


def test_override_request_derives_dp_and_gpus():
    base = api.make_request(**BASE)
    b = override_request(base, {"tp": 4})
    assert (b.plan.tp, b.plan.pp, b.plan.dp, b.gpus) == (4, 16, 16, 1024)  # dp = 1024/(4·16)
    c = override_request(base, {"dp": 4})
    assert (c.plan.dp, c.gpus) == (4, 512)  # N = 8·16·4
    d = override_request(
        base,
        {
            "recompute": "selective",
            "attention_kernel": "unfused",
            "precision": "fp16",
            "account_for_embedding_in_pipeline_split": True,
            "pp": 8,
        },
    )
    assert d.plan.recompute.value == "selective" and d.ctx.options.attention_kernel.value == "unfused"
    assert d.ctx.training.precision.value == "fp16" and d.plan.stage_split.value == "embedding" and d.plan.dp == 16
    assert base.plan.recompute.value == "none"  # the base is unchanged


def test_override_request_errors():
    base = api.make_request(**BASE)
    with pytest.raises(PlannerError, match="not divisible by tp·pp·cp = 48"):
        override_request(base, {"tp": 3})
    with pytest.raises(PlannerError, match="does not describe the plan"):
        override_request(base, {"memory_headroom": 0.1})
