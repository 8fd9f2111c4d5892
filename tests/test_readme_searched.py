"""The Megatron-LM README H100 weak-scaling rows publish their model, GPUs, TP, PP, DP and global batch
but not micro-batch, VPP or recomputation: each is validated with the fastest plan that keeps every
published setting (``planner.fidelity.validate.plan_request``)."""

import numpy as np
import pytest

from planner import api
from planner.costs.estimate import evaluate
from planner.fidelity.runs import MLM, MLM_SEARCHED, MLM_SERIES_PINS, MLM_STRONG_177B, load_runs
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
    assert {r.id for r in runs} == set(TABLE) and len(runs) == 9  # TFLOP/s; the MFU column is it over 989, rounded
    for run in runs:
        pinned = MLM_SERIES_PINS.get(run.id.split(":")[0], {})  # 177B: the strong-scaling series' micro-batch 1
        assert run.searched == tuple(k for k in MLM_SEARCHED if k not in pinned) and not run.fit
        assert MLM_SEARCHED == ("micro_batch", "vpp", "recompute")
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


# the README's model sizes (images/model_table.png), in billions, as printed
PUBLISHED_SIZE_B = {
    "MLM-README-H100-1.7B": 1.7,
    "MLM-README-H100-7.1B": 7.1,
    "MLM-README-H100-16B": 16,
    "MLM-README-H100-32B": 32,
    "MLM-README-H100-70B": 70,
    "MLM-README-H100-119B": 119,
    "MLM-README-H100-177B": 177,
    "MLM-README-H100-314B": 314,
    "MLM-README-H100-462B": 462,
}


def test_the_published_sizes_are_the_untied_parameter_counts():
    """GPT with learned positions and 4h GeLU MLP, V = 131,072, s = 4,096: per layer 12h² + 13h (QKV, projection,
    fc1, fc2 with biases; two layer norms), plus the final norm 2h and the position table s·h, plus V·h once
    (tied) or twice (untied). By hand for 1.7B (L 24, h 2048): 24·(12·2048² + 13·2048) = 1,208,598,528;
    + 2·2048 + 4096·2048 = 8,392,704; + 2·131,072·2048 = 536,870,912 -> 1.754 B untied (printed '1.7B'),
    1.486 B tied. Every row's untied count rounds (or truncates) to its printed size; the tied one does not."""
    from planner.models.params import total_params

    for run in _readme_runs():
        rid = run.id.split(":")[0]
        L, h, *_ = TABLE[rid]
        V, s = 131072, 4096
        by_hand = L * (12 * h * h + 13 * h) + 2 * h + s * h + 2 * V * h
        model = run.request["model"]
        assert model.untie_embeddings_and_output_weights
        assert total_params(model) == pytest.approx(by_hand, rel=1e-6)
        size = PUBLISHED_SIZE_B[rid]
        digits = 1 if size < 10 else 0
        untied, tied = by_hand / 1e9, (by_hand - V * h) / 1e9
        assert size in (round(untied, digits), np.floor(untied * 10**digits) / 10**digits)
        assert size not in (round(tied, digits), np.floor(tied * 10**digits) / 10**digits)
    assert round(1.754, 1) != 1.7 and np.floor(17.54) / 10 == 1.7  # 1.7B: the untied count, truncated


def test_r080_interleaving_keeps_m_a_multiple_of_p():
    """177B: TP 8, PP 6, DP 48, batch 1152 -> 24 sequences per rank. r0.8.0 has no micro-batch group option and
    refuses interleaving unless m = 24/b is a multiple of p = 6: b 1 (m 24), 2 (12) and 4 (6) may interleave,
    b 3 (m 8) may not (a later Megatron's G = 8 would allow it)."""
    from planner.fidelity.validate import _published_plans, _ReqKey

    run = next(r for r in _readme_runs() if r.id == "MLM-README-H100-177B")
    free = {k: v for k, v in run.request.items() if k != "micro_batch"}  # the series' b 1 left free here
    assert published_pins(free).microbatch_group_size == 6 and published_pins(free).micro_batch is None
    plans = _published_plans(run.id, run.hardware, _ReqKey(free))
    interleaved = {p["parallel"]["micro_batch"] for p in plans if p["parallel"]["vpp"] > 1}
    assert 3 not in interleaved and {1, 2} <= interleaved
    assert all((24 // p["parallel"]["micro_batch"]) % 6 == 0 for p in plans if p["parallel"]["vpp"] > 1)


def test_readme_rows_run_transformer_engine_1x_userbuffers():
    """r0.8.0 (July 2024) ran Transformer Engine 1.x, whose initialize_ub (@ v1.8) registers every overlap
    with add_ub's defaults: num_sm 16, set_sm_margin 0, the pipeline in 4 chunks. TE 2.0 turned the margin
    on for the pipelined and bulk overlaps. By hand, a 1 ms GEMM chunk beside a 0.5 ms reduce-scatter kernel
    on 16 of 132 SMs: with the margin cuBLAS runs on 116 SMs the whole chunk, 1 · 16/116 = 0.1379 ms more;
    without it the GEMM loses the 16 SMs only while the kernel runs, 0.5 · 16/132 = 0.0606 ms."""
    from planner.costs.communication import ub_sm_charge_s
    from planner.hardware.userbuffers import AG_RING_OPS, OPS, RS_OPS, resolved_op

    for run in _readme_runs():
        cfg = run.request["options"]["tp_comm_overlap_cfg"]
        if run.request["tp"] == 1:
            assert cfg is None
            continue
        assert "Transformer Engine 1.x" in cfg.name
        for name in OPS:
            op = resolved_op(cfg, name, np.array([8]))
            assert not op["margin"][0] and op["num_sm"][0] == 16
            if name in AG_RING_OPS + RS_OPS:  # ring exchanges in t = 8 chunks, the pipeline in 4
                assert op["splits"][0] == (4 if name in RS_OPS else 8) and op["pipeline"][0] == (name in RS_OPS)
    kw = dict(sm_comm=True)
    assert float(ub_sm_charge_s(1e-3, 0.5e-3, 16, 132, margin=True, **kw)) == pytest.approx(1e-3 * 16 / 116)
    assert float(ub_sm_charge_s(1e-3, 0.5e-3, 16, 132, margin=False, **kw)) == pytest.approx(0.5e-3 * 16 / 132)
    assert 1e-3 * 16 / 116 == pytest.approx(0.1379e-3, rel=1e-3) and 0.5e-3 * 16 / 132 == pytest.approx(
        0.0606e-3, rel=1e-3
    )


def test_readme_tflops_count_r080_formula_with_the_whole_attention_square():
    """The README's TFLOP/s and MFU are Megatron-Core r0.8.0's logged throughput: num_floating_point_operations
    (megatron/training/training.py @ core_v0.8.0) = 12·B·s·L·h²·[(1 + g/a + s/h)·(d·a/h) + f/h + V/(2·L·h)],
    the attention square counted whole (core_v0.12.0 first halves it, s/h/2) and the logits in. GPT (g = a, d·a = h,
    f = 4h) reduces it to 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)). By hand for 1.7B (B 192, s 4096, L 24,
    h 2048, V 131,072): 72·192·4096·24·2048² = 5.6999e15, times 1 + 1/3 + 131072/589824 = 1.5556 ->
    8.8667e15 FLOPs; at 408.8 TFLOP/s on 48 GPUs the iteration is 0.4519 s, and 408.8/989.4 = 41.3 %
    (the table's 41 %). validate divides exactly this count by the predicted time: the convention is not
    what the rows miss (the ratio is 1 on every row)."""
    from planner.fidelity.validate import evaluated

    B, s, L, h, V = 192, 4096, 24, 2048, 131072
    base = 72 * B * s * L * h**2
    assert base == pytest.approx(5.6999e15, rel=1e-4)
    assert 1 + s / (6 * h) + V / (12 * L * h) == pytest.approx(1.5556, rel=1e-4)
    assert base * 1.5556 / (408.8e12 * 48) == pytest.approx(0.4519, rel=1e-3)
    assert 408.8 / 989.4 == pytest.approx(0.413, abs=5e-4)
    for run in _readme_runs():
        req, ev = evaluated(run)
        m, tr = req.ctx.model, req.ctx.training
        B, s, L, h, a, V = tr.global_batch, tr.seq_len, m.num_layers, m.hidden_size, m.num_attention_heads, m.vocab_size
        g, f, d = a, 4 * h, h // a
        r080 = 12 * B * s * L * h**2 * ((1 + g / a + s / h) * (d * a / h) + f / h + V / (2 * L * h))
        assert float(ev.flops["model"][0]) == pytest.approx(r080, rel=1e-9)


def _strong_point(run, gpus: int, b: int, v: int) -> dict:
    """The 177B row's plan (TP 8, PP 6) at another GPU count of the strong-scaling series (batch 1,152)."""
    q = dict(run.request, gpus=gpus, global_batch=1152, micro_batch=b, vpp=v, recompute="none")
    return api.explain(api.make_request(hardware="dgx-h100-superpod", **q), suggest=False)["estimate"]


def test_the_strong_scaling_series_fixes_the_177b_rows_micro_batch_at_1():
    """The README's strong-scaling figure runs the 177B model at batch 1,152 from 96 to 4,608 GPUs. Read off the
    figure: every count is a multiple of TP 8 · PP 6 = 48, the endpoints are the text's 47 % and 42 % MFU, and
    the 2,304-GPU point is the table's row (997.2 PFLOP/s). At 96 GPUs (DP 2: 1,152 / 2 = 576 sequences per rank,
    the optimizer sharded over 2 only) b 2 does not fit without recomputation, b 1 does. So the row is predicted
    at b 1 (VPP and recomputation searched)."""
    peak = 989.4  # H100 SXM dense BF16, TFLOP/s
    gpus = [g for g, _ in MLM_STRONG_177B]
    assert gpus == [96, 144, 288, 576, 1152, 2304, 3072, 4608] and all(g % (8 * 6) == 0 for g in gpus)
    mfu = {g: pf * 1e3 / (g * peak) for g, pf in MLM_STRONG_177B}
    assert round(mfu[96], 2) == 0.47 and round(mfu[4608], 2) == 0.42
    assert dict(MLM_STRONG_177B)[2304] == pytest.approx(997.2, rel=0.01)
    run = next(r for r in _readme_runs() if r.id == "MLM-README-H100-177B")
    assert run.request["micro_batch"] == 1 and run.searched == ("vpp", "recompute")
    assert published_pins(run.request).micro_batch == 1 and plan_request(run)["micro_batch"] == 1
    assert any("strong-scaling series" in a for a in run.assumptions)
    assert _strong_point(run, 96, 1, 8)["fits"]
    assert not _strong_point(run, 96, 2, 8)["fits"] and not _strong_point(run, 96, 2, 1)["fits"]
    # and b 1 is the one micro-batch r0.8.0 can run interleaved (the README overlaps PP communication, which
    # r0.8.0 does only when interleaving) at every point: b divides the d-rank's 1,152/d sequences and
    # m = 1152/(d·b) is a multiple of p = 6. By hand: d 64 leaves 18 sequences, m 18/b: b 1 (18) and 3 (6) only;
    # d 48 (the row) 24: b 3 gives m 8, so b 1 alone.
    legal = [
        b for b in range(1, 25) if all((1152 // (g // 48)) % b == 0 and (1152 // (g // 48) // b) % 6 == 0 for g in gpus)
    ]
    assert legal == [1]
    # the other rows keep their micro-batch searched
    assert all("micro_batch" in r.searched for r in _readme_runs() if not r.id.startswith("MLM-README-H100-177B"))


def test_at_b1_the_model_keeps_one_offset_along_the_strong_scaling_series():
    """What the series says of the model: at the row's plan with b 1 (v 16) the predicted MFU over the figure's is
    the same at every point, 1.10-1.12 from 96 to 4,608 GPUs (DP 2 to 96): the data-parallel and pipeline
    terms follow the published loss (46.7 -> 41.8 %), and what the model misses of the 177B row (its +11-12 %)
    is there at DP 2 already, where the settings left out barely matter (576 sequences per rank)."""
    run = next(r for r in _readme_runs() if r.id == "MLM-README-H100-177B")
    ratios = [_strong_point(run, g, 1, 16)["mfu"] * g * 989.4 / (pf * 1e3) for g, pf in MLM_STRONG_177B]
    assert 1.08 < min(ratios) and max(ratios) < 1.14
    assert max(ratios) / min(ratios) < 1.025
