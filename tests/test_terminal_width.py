"""Every view fits the terminal: search, sweep, explain and compare at 80, 100 and 120 columns, for a
dense and a mixture-of-experts model, print no line wider than the terminal and keep every plan's
label whole (the plan column is never dropped, cut or wrapped)."""

from __future__ import annotations

import io
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from planner import api
from planner.cli import cli
from planner.plan import plan_label
from planner.report.layout import console_width, plan_text
from planner.report.plan import explain_view, verdict
from planner.report.runs import compare_view, sweep_view
from planner.report.search import search_view
from planner.runs.compare import compare_plans
from planner.runs.sweep import sweep
from planner.search import search

WIDTHS = (80, 100, 120)
CASES = {
    "dense": dict(model="gpt3-175b", gpus=1024, hardware="dgx-a100-superpod", sizes=[512, 1024]),
    "moe": dict(model="mixtral-8x7b", gpus=64, hardware="dgx-h100-superpod", sizes=[32, 64]),
}


def render(renderable, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue().splitlines()


@pytest.fixture(scope="module", params=list(CASES))
def views(request):
    case = CASES[request.param]
    req = api.make_request(model=case["model"], hardware=case["hardware"])
    result = search(req.ctx, case["gpus"], top=10)
    swept = sweep(req.ctx, case["sizes"])
    best, second = (api.explain(api.make_request(**_plan_args(pj, case))) for pj in result.plans[:2])
    return {
        "search": (search_view(result, req.ctx, case["gpus"]), result.plans),
        "sweep": (sweep_view(swept, "sweep"), [r["plan"] for r in swept["rows"]]),
        "explain": (explain_view(best, "search's best"), [best]),
        "compare": (compare_view(compare_plans(best, second)), [best, second]),
    }


def _plan_args(pj: dict, case: dict) -> dict:
    par = {k: v for k, v in pj["parallel"].items() if k != "stage_layers"}
    return dict(model=case["model"], hardware=case["hardware"], gpus=pj["gpus"], options=pj["options"], **par)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", ["search", "sweep", "explain", "compare"])
def test_no_line_wider_than_the_terminal_and_the_plan_is_whole(views, view, width):
    renderable, plans = views[view]
    lines = render(renderable, width)
    assert max(len(line) for line in lines) <= width, "\n".join(line for line in lines if len(line) > width)
    for pj in plans:
        label = plan_text(pj)
        assert any(label in line for line in lines), f"{label!r} not whole at {width} columns"


def test_verdict_is_at_most_15_lines_at_80_columns(views):
    pj = views["explain"][1][0]
    assert len(render(verdict(pj, "search's best plan of 1,341 plans that fit (no --tp/--pp given)"), 80)) <= 15


def test_plan_label_shows_cp_ep_etp_fsdp_and_recompute():
    par = dict(tp=2, pp=1, dp=8, cp=2, ep=4, etp=1, micro_batch=1, vpp=1, sequence_parallel=True)
    par |= dict(distributed_optimizer=True, fsdp=True, recompute="full", stage_split="even")
    assert plan_label(par, moe=True) == "TP2 PP1 DP8 CP2 EP4 ETP1 b1 · SP FSDP rc-full allgather"
    # a MoE plan names its token dispatcher (+ov: the all-to-all overlap) and a pipeline layout
    moe = par | dict(moe_token_dispatcher="flex", overlap_moe_expert_parallel_comm=True, pipeline_layout="Et|tL")
    assert plan_label(moe, moe=True).endswith("rc-full flex+ov layout Et|tL")
    dense = dict(par, cp=1, ep=1, etp=2, fsdp=False, recompute="selective", vpp=4, stage_split="embedding")
    assert plan_label(dense) == "TP2 PP1 DP8 b1 V4 · SP DO rc-sel acc-emb"


@pytest.mark.parametrize(
    ("is_terminal", "environ", "width"),
    [(True, {"COLUMNS": "80"}, None), (False, {"COLUMNS": "80"}, 80), (False, {}, 160), (False, {"COLUMNS": "x"}, 160)],
)
def test_console_width_follows_the_terminal_then_columns_then_160(is_terminal, environ, width):
    assert console_width(is_terminal, environ) == width


def test_search_through_the_cli_honours_columns_when_piped():
    result = CliRunner().invoke(cli, ["search", "--model", "gpt3-175b", "--gpus", "1024"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and re.search(r"TP\d+ PP\d+ DP\d+ b\d+", result.stdout)  # whole plan labels
