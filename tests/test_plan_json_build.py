"""The plan JSON built for many plans at once (``result.Shared``, ``result._estimate_json``) says what the typed
``PlanEstimate`` says, key for key and type for type, and every plan JSON owns its containers."""

from __future__ import annotations

import json

import numpy as np

from planner import api
from planner.costs import estimate
from planner.costs.estimate import TIME_TERMS, evaluate
from planner.plan import ParallelPlan
from planner.plan_file import request_from_plan
from planner.result import PlanEstimate, plan_band, plan_estimate, plan_json
from planner.search import search
from planner.space.grid import PlanGrid


def _typed(req, grid, ev, headroom) -> dict:
    eps = plan_band(req.ctx, req.gpus, req.plan)[0]
    return plan_estimate(req.ctx, req.gpus, req.plan, ev, 0, headroom, band=eps).model_dump(mode="json")


def test_the_estimate_is_the_typed_models_json_dump():
    # an MoE plan with a price (cost a float, not None) and every stage (parts), and a dense fp32 plan; the headroom
    # given as the integer 0 (PlanEstimate makes it 0.0: json writes "0.0", not "0")
    cases = [
        (dict(model="mixtral-8x7b", gpus=64, tp=2, pp=4, ep=8, sequence_parallel=True, gpu_hour_price=3), 0.05),
        (dict(model="gpt3-175b", gpus=64, tp=8, pp=8, micro_batch=1, precision="fp32"), 0),
    ]
    for kw, headroom in cases:
        req = api.make_request(**kw)
        grid = PlanGrid.from_plans([req.plan])
        for stages in (True, False):
            with np.errstate(divide="ignore", invalid="ignore"):
                ev = evaluate(grid, req.ctx, stages=stages)
            est = plan_json(req.ctx, req.gpus, grid, ev, 0, [], headroom)["estimate"]
            typed = _typed(req, grid, ev, headroom)
            assert list(est) == list(PlanEstimate.model_fields)
            assert json.dumps(est) == json.dumps(typed)
            assert (est["parts"] is not None) == stages
            assert json.dumps(est["memory_headroom"]) == ("0.0" if headroom == 0 else "0.05")
            assert (est["cost"] is not None) == (kw["model"] == "mixtral-8x7b")


def test_each_shown_plan_owns_its_json():
    req = api.make_request(model="gpt3-175b", gpus=64, global_batch=64)
    plans = search(req.ctx, 64, top=3).plans
    before = json.dumps(plans[1])
    first = plans[0]
    first["model_spec"]["training"]["seq_len"] = 1  # a nested dict of the model's dump
    first["options"]["recompute_modules"].append("mlp")  # a list of the options' dump
    first["training"]["global_batch"] = 1
    first["estimate"]["formulas"]["time"]["forward"]["formula"] = "x"
    assert json.dumps(plans[1]) == before
    assert plans[1]["model_spec"] == plans[2]["model_spec"] and plans[1]["model_spec"] is not plans[2]["model_spec"]


def test_the_shown_plans_carry_the_time_terms_the_search_timed_them_with(monkeypatch):
    """A search keeps the time terms of every row it times (``search._Kept``): building the shown plans' JSON
    computes no time term again, and each term is the one explain's one-plan evaluation gives, float for float,
    the iteration time their sum; over rows as they are, twins kept without --tp-comm-overlap, block-recomputation
    variants and Megatron FSDP hybrid variants (top 100 of Llama 3 70B on 32 H100 holds each kind)."""
    req = api.make_request(model="llama3-70b", gpus=32, hardware="dgx-h100-superpod")
    result = search(req.ctx, 32, top=100)

    def computed_again(*args, **kwargs):
        raise AssertionError("a shown plan's time terms computed again")

    monkeypatch.setattr(estimate, "_time_terms", computed_again)
    plans = result.plans
    monkeypatch.undo()
    par = [pj["parallel"] for pj in plans]
    assert any(p["recompute_method"] == "block" for p in par)
    assert any(p["distributed_optimizer_instances"] > 1 for p in par)
    assert any(
        p["sequence_parallel"] and not pj["options"]["tp_comm_overlap"] for p, pj in zip(par, plans, strict=True)
    )
    for pj in plans:
        r = request_from_plan(pj)
        with np.errstate(divide="ignore", invalid="ignore"):
            alone = evaluate(PlanGrid.from_plans([r.plan]), r.ctx)
        assert pj["estimate"]["time"] == {k: float(alone.time[k][0]) for k in TIME_TERMS}
        assert pj["estimate"]["iteration_s"] == float(alone.iteration_s[0])


def test_formulas_of_many_plans_read_the_context_once_and_say_what_each_alone_says():
    # a search's shown plans share what the formulas read of the context alone (context_formulas: the forward,
    # backward and offload texts, the bytes per parameter, a layer's activation coefficients): each plan's text
    # is the one it gets alone, whatever plans came before (none, full in blocks, selective, CP, no SP)
    req = api.make_request(
        model="llama3-70b", gpus=64, hardware="dgx-h100-superpod", options={"recompute_modules": ["core_attn"]}
    )
    plans = [
        dict(tp=8, pp=4, sequence_parallel=True),
        dict(tp=8, pp=4, recompute="full", recompute_method="block", recompute_num_layers=2),
        dict(tp=4, pp=4, cp=2, recompute="selective"),
        dict(tp=2, pp=8, recompute="full", recompute_num_layers=4),
        dict(tp=8, pp=2, sequence_parallel=True, recompute="selective"),
    ]
    fixed = estimate.context_formulas(req.ctx)
    plans = [ParallelPlan(**{**dict(req.plan), **p}) for p in plans]
    together = [estimate.formulas(req.ctx, plan, fixed) for plan in plans]
    alone = [estimate.formulas(req.ctx, plan) for plan in plans]
    assert together == alone
    activations = [f["memory"]["activations"].text for f in alone]
    assert "(selective: core_attn)" in activations[2] and "first 2 layers keep their input" in activations[1]
    assert "every group of 4 layers keeps its input" in activations[3] and "selective" not in activations[0]
