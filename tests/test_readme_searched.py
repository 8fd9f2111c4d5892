"""The Megatron-LM README H100 weak-scaling rows publish their model, GPUs, TP, PP, DP and global batch
but not micro-batch, VPP or recomputation: each is validated with the fastest plan that keeps every
published setting (``planner.fidelity.validate.plan_request``)."""

import numpy as np
import pytest

from planner import api
from planner.costs.estimate import evaluate
from planner.fidelity.runs import MLM, MLM_SEARCHED, load_runs
from planner.fidelity.validate import plan_request, prepare, published_pins
from planner.search import search
from planner.space.grid import PlanGrid

# images/model_table.png (Megatron-LM commit f2e5db402c): layers, hidden, heads, TP, PP, DP, GPUs, batch
TABLE = {
    "MLM-README-H100-1.7B": (24, 2048, 16, 1, 1, 48, 48, 192),
    "MLM-README-H100-7.1B": (30, 4096, 32, 2, 1, 48, 96, 192),
    "MLM-README-H100-16B": (32, 6144, 48, 4, 1, 48, 192, 192),
    "MLM-README-H100-32B": (48, 7168, 56, 8, 1, 48, 384, 192),
    "MLM-README-H100-70B": (84, 8192, 64, 8, 2, 48, 768, 384),
    "MLM-README-H100-119B": (92, 10240, 80, 8, 4, 48, 1536, 768),
    "MLM-README-H100-177B": (96, 12288, 96, 8, 6, 48, 2304, 1152),
    "MLM-README-H100-314B": (96, 16384, 128, 8, 8, 48, 3072, 1536),
    "MLM-README-H100-462B": (112, 18432, 144, 8, 16, 48, 6144, 3072),
}


def _readme_runs():
    return [r for r in load_runs() if r.source == MLM]


def _iteration_s(req: api.PlanRequest) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).iteration_s[0])


def test_every_readme_row_is_predicted_with_a_plan_keeping_its_published_fields():
    runs = _readme_runs()
    assert {r.id.split(":")[0] for r in runs} == set(TABLE) and len(runs) == 18
    for run in runs:
        assert run.searched == MLM_SEARCHED == ("micro_batch", "vpp", "recompute") and not run.fit
        L, h, a, t, p, d, n, B = TABLE[run.id.split(":")[0]]
        req = prepare(run)
        m, tr, plan, o = req.ctx.model, req.ctx.training, req.plan, req.ctx.options
        assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size) == (L, h, a, 131072)
        assert (plan.tp, plan.pp, plan.dp, plan.cp, req.gpus, tr.global_batch, tr.seq_len) == (t, p, d, 1, n, B, 4096)
        # the README's overlap flags, and what r0.8.0's checks make them imply (SP, distributed optimizer)
        assert o.overlap_grad_reduce and o.overlap_param_gather and o.tp_comm_overlap == (t > 1)
        assert plan.sequence_parallel == (t > 1) and plan.distributed_optimizer and not plan.fsdp
        # the searched knobs are legal: b divides the B/d sequences of a rank, v divides a stage's layers
        assert (B // d) % plan.micro_batch == 0 and (L // p) % plan.vpp == 0


def test_the_32b_row_takes_the_fastest_micro_batch_of_its_pins():
    # 32B: TP 8, PP 1, DP 48 on 384 GPUs, batch 192 -> 192 / 48 = 4 sequences per rank, so b in {1, 2, 4};
    # PP 1 leaves no interleaving (v = 1). The pins fix every published field and leave b, v, recompute free.
    run = next(r for r in _readme_runs() if r.id == "MLM-README-H100-32B")
    pins = published_pins(run.request)
    assert (pins.tp, pins.pp, pins.cp, pins.dp) == (8, 1, 1, 48)
    assert pins.micro_batch is None and pins.vpp is None and pins.recompute is None
    assert pins.sequence_parallel and pins.distributed_optimizer and pins.fsdp is False
    assert pins.overlap_grad_reduce and pins.overlap_param_gather and pins.tp_comm_overlap
    q = plan_request(run)
    assert (q["micro_batch"], q["vpp"], q["recompute"]) == (4, 1, "none")
    chosen = _iteration_s(prepare(run))
    # by hand: each micro-batch the 4 sequences allow, without recomputation, is no faster than the choice
    for b in (1, 2, 4):
        alt = api.make_request(hardware="dgx-h100-superpod", **dict(q, micro_batch=b))
        assert chosen <= _iteration_s(alt) * (1 + 1e-12)
    assert chosen < _iteration_s(api.make_request(hardware="dgx-h100-superpod", **dict(q, micro_batch=1)))


@pytest.mark.parametrize("rid", ["MLM-README-H100-70B"])
def test_the_prepared_plan_is_the_search_fastest(rid):
    # the request rebuilt from the search's plan predicts the search's own least iteration time
    run = next(r for r in _readme_runs() if r.id == rid)
    base = api.make_request(hardware="dgx-h100-superpod", **run.request)
    plans = search(base.ctx, base.gpus, published_pins(run.request), top=10_000, suggest_sizes=False).plans
    fastest = min(p["estimate"]["iteration_s"] for p in plans)
    assert _iteration_s(prepare(run)) == pytest.approx(fastest, rel=1e-9)
    assert len(plans) > 1  # the search had a choice (b and v)


def test_the_note_says_how_far_the_settings_left_out_move_a_row():
    """The 32B row's note names its plan and the slowest plan that fits without recomputation: of
    b ∈ {1, 2, 4} (PP 1, so v = 1) the slowest is b = 1, and its time over b = 4's is the ratio printed."""
    from planner.fidelity.validate import _searched_note, searched_spread

    run = next(r for r in _readme_runs() if r.id == "MLM-README-H100-32B")
    q = plan_request(run)
    times = {b: _iteration_s(api.make_request(hardware="dgx-h100-superpod", **dict(q, micro_batch=b))) for b in (1, 4)}
    ratio, slow = searched_spread(run)
    assert (slow["micro_batch"], slow["vpp"]) == (1, 1) and ratio == pytest.approx(times[1] / times[4], rel=1e-9)
    note = _searched_note(run)[0]
    assert "micro_batch 4, vpp 1, recompute none" in note and f"takes {ratio - 1:.0%} longer" in note
