"""The host's pacing on Grace (GB200/GB300 NVL72): ρ, the host CPU's time per eager PyTorch op over the x86 DGX
hosts' (TransformerEngine issue 2053), scales the MoE layer's host work H (planner/costs/moe.py ``combined_host_s``);
without the A2A overlap a recipe that makes the host wait for the GPU in both directions every layer (GPT-OSS's
quick-GeGLU recomputed: ``host_levelled_both_ways``) lasts max(G, H) a layer (``levelled_layer_excess_s``).
docs/cost-model.md §13.7, item (q)."""

import numpy as np
import pytest

from planner.costs import blocks, moe
from planner.costs.letters import Letters
from planner.fidelity import moe_runs
from planner.fidelity import validate as V
from planner.presets import load_hardware
from planner.space.grid import PlanGrid


def test_rho_is_the_published_host_time_ratio():
    """TE issue 2053: one torch.nn.Linear forward's host time 37.08 µs on GB200, 13.48 µs on a DGX H100 (Xeon 8480C):
    37.08 / 13.48 = 2.7507 → 2.75, on GB200 and (the same Grace CPUs) GB300; the x86 DGX presets keep 1."""
    assert 37.08 / 13.48 == pytest.approx(2.75, abs=0.001)
    for name in ("gb200-nvl72", "gb300-nvl72"):
        assert load_hardware(name).node.host_op_time_ratio == 2.75
    for name in ("dgx-b200-superpod", "dgx-h100-superpod", "dgx-a100-superpod"):
        assert load_hardware(name).node.host_op_time_ratio == 1.0


def test_combined_host_on_grace_by_hand():
    """GPT-OSS on GB200, EP 64: 2 local experts, BF16 with biases 4 + 7 eager ops each at t_op 7.61 µs: h_e = 2·11·7.61
    = 167.42 µs; H = 2.75·(9,437.2 + 167.42) = 2.75·9,604.62 = 26,412.705 µs; ρ = 1 gives the x86 9,604.62 µs; with
    the attention, router and preprocess graphed (g = 1) only ρ·h_e = 460.405 µs is left."""
    h_e = 2 * 11 * 7.61e-6
    assert float(moe.combined_host_s(9437.2, 0.0, h_e, 2.75)) == pytest.approx(26412.705e-6, abs=1e-9)
    assert float(moe.combined_host_s(9437.2, 0.0, h_e)) == pytest.approx(9604.62e-6, abs=1e-9)
    assert float(moe.combined_host_s(9437.2, 1.0, h_e, 2.75)) == pytest.approx(460.405e-6, abs=1e-9)


@pytest.mark.parametrize(
    "quick_geglu, moe_act, unfused, dropless, levelled",
    [
        (True, True, True, True, True),  # GPT-OSS BF16, layernorm + moe_act recomputed (the GB200/B200/H100 recipes)
        (True, False, True, True, False),  # no recompute (the GB300 BF16 recipe): the backward runs ahead
        (True, True, False, True, False),  # TE's fused grouped MLP: the activation in its epilogue, no tensor copy
        (True, True, True, False, False),  # token drop: the counts are known on the host, no forward sync
        (False, True, True, True, False),  # SwiGLU (Qwen3, DeepSeek-V3): no host copy in the activation
    ],
)
def test_levelled_both_ways_truth_table(quick_geglu, moe_act, unfused, dropless, levelled):
    got = moe.host_levelled_both_ways(
        quick_geglu=quick_geglu, moe_act_recomputed=moe_act, unfused=unfused, dropless=dropless
    )
    assert got is levelled


def test_levelled_excess_by_hand():
    """X = max(0, H − G) where levelled: H 26.41 ms, G 23.80 ms → 2.61 ms; G 27 ms → 0; not levelled → 0."""
    ms = 1e-3
    got = moe.levelled_layer_excess_s(np.array([23.80, 27.0, 23.80]) * ms, 26.41 * ms, np.array([True, True, False]))
    assert got == pytest.approx(np.array([2.61, 0.0, 0.0]) * ms, abs=1e-12)


def _full_moe_layer_s(run_id: str) -> tuple[float, float]:
    """(one full-attention MoE layer's time per micro-batch - forward, backward, selective recomputation, exposed
    dispatch, the host's excess - and H, the host's work for it) of a validation row's plan."""
    run = next(r for r in moe_runs.load_moe_runs() if r.id == run_id)
    req = V.prepare(run)
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    parts = blocks.layer_parts(lt, req.ctx)
    attn, block = parts["attention"], parts["moe"]
    layer = sum(float(np.ravel(attn[k] + block[k])[0]) for k in ("fwd", "bwd", "sel"))
    layer += float(np.ravel(block["moe_fwd"] + block["moe_bwd"] + block["host_excess"])[0])  # selective: charged
    host = moe.combined_host_s(
        moe.COMBINED_HOST_US, 0.0, float(np.ravel(block["expert_host"])[0]), req.ctx.hardware.node.host_op_time_ratio
    )
    return layer, float(host)


def test_gb200_eager_gpt_oss_layer_lasts_the_hosts_work():
    """MB-26.02-GB200-GPTOSS120B-64 (alltoall, no overlap, no graphs, layernorm + moe_act recomputed): the
    full-attention MoE layer's GPU time (24.57 ms a micro-batch, 2026-12-04, with the eager clamp and bias at B200's
    eager fraction of HBM; 23.80 ms at the law) is under the host's (26.41 ms; 25.84 ms since H_L's solve at DGX B200's
    fabric and t_op's with GPT-OSS in its fit, 9,222.8 and 7.96 µs; 25.65 ms since t_op pools only the families within
    2 σ of each other, 9,124.3 and 9.23 µs; 25.66 ms since GB300's stragglers left their floor, 9,128.2 and 9.18 µs,
    since graphed CP ring steps are priced, 9,131.6 and 9.06 µs, and since Megatron-Bridge 25.09's cuDNN 9.11 is
    priced, 9,131.0 and 9.07 µs, since Megatron-Core's FP8-parameter bucket groups are counted, 9,130.1 and
    9.06 µs, and since GB300 takes CUDA's 152 SMs, 9,129.3 and 9.07 µs),
    so the layer lasts H exactly; the same plan with
    the A2A overlap (26.04.01), paced by the combined schedule in its paired steps, four of the five micro-batches
    (``unpaired_share`` 1/m), runs 25.95 ms, 0.4 % over H (26.58 ms, 0.6 % over, before; 26.36 ms, 0.2 % under, at the
    law)."""
    layer, host = _full_moe_layer_s("MB-26.02-GB200-GPTOSS120B-64")
    assert host == pytest.approx(25654.31e-6, rel=1e-6)  # 2.75·(9,129.3 + 2·11·9.07) µs at the shipped t_op
    assert layer == pytest.approx(host, rel=1e-9)
    layer, host = _full_moe_layer_s("MB-26.04.01-GB200-GPTOSS120B-64")
    assert host < layer < 1.01 * host


def test_rows_the_host_does_not_pace():
    """GB300 BF16 (no recompute: the backward runs ahead; attention, router and preprocess graphed) and B200 BF16 (x86,
    ρ = 1: H = 9,129.3 + 16·11·9.07 = 10,725.6 µs against a GPU layer of over 20 ms) are GPU-paced: no excess."""
    for run_id in ("MB-26.02-GB300-GPTOSS120B-64", "MB-26.04.01-B200-GPTOSS120B-64"):
        run = next(r for r in moe_runs.load_moe_runs() if r.id == run_id)
        req = V.prepare(run)
        lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
        parts = blocks.layer_parts(lt, req.ctx)
        host = moe.combined_host_s(moe.COMBINED_HOST_US, 0.0, parts["moe"]["expert_host"], 1.0)
        assert float(np.ravel(blocks._levelled_excess(lt, req.ctx, parts["attention"], parts["moe"], host))[0]) == 0.0
    layer, host = _full_moe_layer_s("MB-26.04.01-B200-GPTOSS120B-64")
    assert host == pytest.approx((9129.3 + 16 * 11 * 9.07) * 1e-6, rel=1e-9)
    assert layer > 2 * host


def _gpt_oss_gb200_step_s(recompute: str, modules: tuple[str, ...]) -> float:
    """The 26.02 GB200 plan (TP1 PP1 EP64 b4, alltoall, no overlap, no graphs) with the given recomputation."""
    from planner.api import explain, make_request

    opts = {"recompute_modules": modules} if modules else {}
    req = make_request(
        model="gpt-oss-120b", hardware=load_hardware("gb200-nvl72"), gpus=64, tp=1, pp=1, ep=64, micro_batch=4,
        global_batch=1280, seq_len=4096, recompute=recompute, moe_token_dispatcher="alltoall", options=opts,
    )  # fmt: skip
    return explain(req, suggest=False)["estimate"]["iteration_s"]


def test_only_selective_recomputation_paces():
    """The modules name what --recompute-granularity selective recomputes: with recompute none the listed moe_act is not
    run again, there is no backward sync, and the step is the one without modules. Selective pays the recompute
    and the host's pace on top: moe_act's fused activation 2·3·A·f_e bytes and the eager clamp's 16·A·f_e at B200's
    eager fraction of HBM (r = 0.89/0.744), A = 65,536, f_e = 2,880, at W_HBM·η_mem = 7.12e12 B/s: (6 + 16·r)·A·f_e
    = 4.744e9 B, 0.666 ms a layer and micro-batch, 0.120 s over 36 layers × 5 micro-batches; the step grows 0.176 s,
    the host's pace the rest (2026-12-04; 0.31 s at the law, 2026-12-03; this plan's defaults are not the row's)."""
    none = _gpt_oss_gb200_step_s("none", ())
    assert _gpt_oss_gb200_step_s("none", ("layernorm", "moe_act")) == pytest.approx(none, rel=1e-12)
    selective = _gpt_oss_gb200_step_s("selective", ("layernorm", "moe_act"))
    recompute_s = 36 * 5 * (6 + 16 * 0.89 / 0.744) * 65_536 * 2880 / 7.12e12
    assert recompute_s == pytest.approx(0.120, abs=5e-4)
    assert selective - none > recompute_s + 0.04
