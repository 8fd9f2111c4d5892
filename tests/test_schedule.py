"""Pipeline schedule (Narayanan et al. 2021 §2.2), stage layer splits and Megatron-LM's legality rules."""

from __future__ import annotations

import numpy as np
import pytest

from planner.api import explain, make_request
from planner.costs.pipeline import bubble_time_s, stage_time_sum
from planner.errors import InfeasibleError
from planner.plan import ParallelPlan, PlanOptions, TrainingSpec
from planner.space.grid import PlanGrid, stage_layers
from planner.space.rules import broken_rules, rule_masks

from conftest import gpt_model


@pytest.mark.parametrize(
    "p, m, v, expected",
    [
        (16, 192, 1, 15 / 192),  # Narayanan 2021 GPT-3 run: B = 1536, b = 1, d = 8 -> m = 192
        (8, 64, 3, 7 / 192),  # interleaved: (p − 1)/(v·m)
        (4, 4, 1, 3 / 4),
        (1, 32, 1, 0.0),
    ],
)
def test_bubble_fraction(p, m, v, expected):
    # Narayanan et al. 2021 §2.2.1: (p − 1)/m; §2.2.2 interleaved: (1/v)·(p − 1)/m of the ideal time m·(t_f + t_b),
    # here with equal stages of t_f + t_b = 1 s
    bubble = bubble_time_s(stage_time_sum(1.0, 1.0, 1.0, p, max(p - 2, 0)), 1.0, v)
    assert float(bubble) / m == pytest.approx(expected, rel=1e-12)


def test_bubble_time_of_equal_stages():
    # equal stages of t_f + t_b = 1 s: bubble (p − 1)(t_f + t_b)/v (Narayanan 2021 §2.2)
    p, v = 8, 2
    total = stage_time_sum(1.0, 1.0, 1.0, p, p - 2)
    assert float(total) == 8.0
    assert float(bubble_time_s(total, 1.0, v)) == pytest.approx((p - 1) / v)
    assert float(stage_time_sum(3.0, 1.0, 2.0, 1, 0)) == 3.0  # one stage: only itself


def _layers(L, p, split=0, first=0, last=0):
    sl = stage_layers(L, np.array([p]), np.array([split]), np.array([first]), np.array([last]))
    return int(sl.first[0]), int(sl.middle[0]), int(sl.last[0]), bool(sl.legal[0])


def test_even_split():
    assert _layers(96, 16) == (6, 6, 6, True)  # GPT-3: 96 layers over 16 stages
    assert _layers(96, 1) == (96, 96, 96, True)


def test_llama_405b_split_accounting_for_embedding_and_loss():
    # Llama 3.1 405B: 126 layers, pp 16, --account-for-embedding-in-pipeline-split and
    # --account-for-loss-in-pipeline-split: (126 + 2)/16 = 8 per stage, the first and last stage
    # give one slot each to the embedding and the loss (Megatron arguments.py:984-998)
    assert _layers(126, 16, split=3) == (7, 8, 7, True)
    assert _layers(126, 16, split=0)[3] is False  # 126 % 16 != 0: an even split is illegal
    assert _layers(127, 16, split=1) == (7, 8, 8, True)  # embedding only: (127 + 1)/16
    assert _layers(127, 16, split=2) == (8, 8, 7, True)  # loss only
    assert _layers(126, 16, split=1)[3] is False  # (126 + 1) % 16 != 0


def test_explicit_first_and_last_stage_layers():
    # --decoder-first/last-pipeline-num-layers: the rest split evenly over the other stages
    assert _layers(126, 16, first=6) == (6, 8, 8, True)  # 120 over 15
    assert _layers(126, 16, first=7, last=7) == (7, 8, 7, True)  # 112 over 14
    assert _layers(126, 16, first=5)[3] is False  # 121 over 15
    assert _layers(10, 4, first=8, last=8)[3] is False  # more layers than the model has
    assert _layers(96, 1, first=4)[3] is False  # nothing to split with one stage


def _masks(model, training, plan, gpus, options=None):
    return broken_rules(
        rule_masks(PlanGrid.from_plans([plan]), model, training, options or PlanOptions(), gpus, hardware=None)
    )


def test_legality_rules_by_name():
    model = gpt_model(96, 12288, 96)
    tr = TrainingSpec(global_batch=1536, seq_len=2048)
    ok = ParallelPlan(tp=8, pp=16, dp=8)
    assert _masks(model, tr, ok, 1024) == []
    assert _masks(model, tr, ParallelPlan(tp=8, pp=16, dp=8), 1000) == ["world size = tp·cp·pp·dp"]
    assert "layers split over pipeline stages" in _masks(model, tr, ParallelPlan(tp=8, pp=5, dp=1), 40)
    assert "attention heads divisible by tp" in _masks(model, tr, ParallelPlan(tp=5, dp=1), 5)
    assert "global batch divisible by micro-batch × dp" in _masks(
        model, tr, ParallelPlan(tp=8, pp=16, dp=8, micro_batch=5), 1024
    )
    # interleaving: pp > 1; per-stage layers (12) divisible by vpp; m a multiple of p
    assert "interleaving needs pp > 1 (pp > 2 without p2p overlap)" in _masks(model, tr, ParallelPlan(tp=8, vpp=2), 8)
    assert "layers per stage divisible by interleaved chunks" in _masks(model, tr, ParallelPlan(tp=8, pp=8, vpp=5), 64)
    # m = 12 over pp 8: the default group G = pp leaves a last group of 4 < pp (schedules.py); G = 12 is legal,
    # G = 10 leaves 2, G = 13 exceeds m
    small = TrainingSpec(global_batch=12, seq_len=2048)
    rule = "interleaving needs a legal micro-batch group"
    assert rule in _masks(model, small, ParallelPlan(tp=8, pp=8, vpp=3), 64)
    assert rule not in _masks(model, small, ParallelPlan(tp=8, pp=8, vpp=3, microbatch_group_size=12), 64)
    for bad in (10, 13, 4):
        assert rule in _masks(model, small, ParallelPlan(tp=8, pp=8, vpp=3, microbatch_group_size=bad), 64)
    assert "sequence length divisible by tp with sequence parallelism" in _masks(
        model, TrainingSpec(global_batch=8, seq_len=2047), ParallelPlan(tp=8, sequence_parallel=True), 8
    )
    assert "sequence length within max_position_embeddings" in _masks(
        model, TrainingSpec(global_batch=8, seq_len=4096), ParallelPlan(tp=8), 8
    )


def test_query_groups_rule():
    # query groups divisible by t when there are at least t of them; otherwise t divisible by g
    gqa = gpt_model(32, 4096, 32, num_query_groups=8)
    tr = TrainingSpec(global_batch=8, seq_len=2048)
    assert _masks(gqa, tr, ParallelPlan(tp=8), 8) == []
    mqa = gpt_model(32, 4096, 32, num_query_groups=2)
    assert _masks(mqa, tr, ParallelPlan(tp=8), 8) == []
    odd = gpt_model(32, 4128, 48, num_query_groups=12)
    assert "query groups divisible by tp" in _masks(odd, tr, ParallelPlan(tp=8), 8)


def test_explain_refuses_an_illegal_plan_naming_the_rule_and_values():
    req = make_request(model=gpt_model(96, 12288, 96), gpus=64, tp=8, pp=8, vpp=5, global_batch=64, seq_len=2048)
    with pytest.raises(InfeasibleError, match=r"vpp 5"):
        explain(req)


def test_explain_reports_the_stage_layer_list():
    req = make_request(
        model=gpt_model(126, 4096, 32), gpus=16, pp=16, global_batch=64, seq_len=2048, stage_split="embedding+loss"
    )
    out = explain(req)
    assert out["parallel"]["stage_layers"] == [7] + [8] * 14 + [7]
