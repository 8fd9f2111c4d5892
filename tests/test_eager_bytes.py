"""PyTorch's eager, op-by-op kernels on Blackwell: their bytes at the fraction of HBM they are measured to reach
(GPUSpec ``eager_hbm_frac``, compute.eager_bytes_ratio), each against a hand computation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.api import make_request
from planner.costs import blocks, compute, moe
from planner.costs.letters import Letters
from planner.presets import load_hardware
from planner.space.grid import PlanGrid


def test_ratio_by_hand():
    """B200: PyTorch's clone of 128 MB in 45.13 µs (pytorch/pytorch PR 174553), read and written, 2 × 2^27 B:
    2 × 134,217,728 / 45.13e-6 s = 5.948e12 B/s, 0.744 of the 8 TB/s spec. Against the law's η_mem 0.89 the eager
    bytes take r = 0.89 / 0.744 = 1.19624 times as long; without a measurement, or measured above the law, 1."""
    assert 2 * 134_217_728 / 45.13e-6 / 8e12 == pytest.approx(0.744, abs=5e-4)
    assert compute.eager_bytes_ratio(0.89, 0.744) == pytest.approx(1.196237, rel=1e-6)
    assert compute.eager_bytes_ratio(0.89, None) == 1.0
    assert compute.eager_bytes_ratio(0.89, 0.90) == 1.0  # H100's eager BF16 relu, 0.90 of 3.35 TB/s: the law's


@given(eta_mem=st.floats(0.6, 0.95), eager=st.floats(0.3, 1.0))
def test_eager_bytes_never_run_faster_than_the_law(eta_mem, eager):
    r = compute.eager_bytes_ratio(eta_mem, eager)
    assert r >= 1.0
    assert r == pytest.approx(max(1.0, eta_mem / eager))


@pytest.mark.parametrize(
    ("preset", "frac"),
    [("dgx-b200-superpod", 0.744), ("gb200-nvl72", 0.744), ("gb300-nvl72", 0.744), ("dgx-h100-superpod", None)],
)
def test_presets_carry_the_measurement(preset, frac):
    """B200 measured, GB200 (the same GPU) and GB300 (the same HBM3e, no B300 measurement) carry it; Hopper none:
    PyTorch's eager BF16 relu at 2^28 elements on H100 moves 3.01 TB/s, 0.90 of 3.35 (PR 145746), the law's 0.89."""
    gpu = load_hardware(preset).gpu
    assert gpu.eager_hbm_frac == frac
    assert (frac is None) == ("eager_hbm_frac" not in gpu.sources)


def _routed(hardware: str):
    req = make_request(
        model="gpt-oss-120b", hardware=hardware, gpus=64, ep=64, micro_batch=4, global_batch=1280,
        moe_token_dispatcher="alltoall", options={"moe_load_imbalance": 1.0},
    )  # fmt: skip
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    return req.ctx, {k: np.ravel(np.asarray(v, dtype=float))[0] for k, v in blocks._routed_experts(lt, req.ctx).items()
                     if k != "unfused" and k != "casts"}  # fmt: skip


def test_gpt_oss_bias_on_gb300_by_hand():
    """GPT-OSS-120B's 26.02 GB300 shape: b 4 × 4,096 tokens, top-4, no token dropped: A = 65,536 pairs at each of
    64 ranks (EP 64), h = 2,880. fc2's per-expert bias runs eagerly in fp32 (TEGroupedMLP._apply_bias, 28 B per h
    channel): 28 × 65,536 × 2,880 = 5,284,823,040 B; at W_HBM·η_mem = 8e12 × 0.89 = 7.12e12 B/s 0.742 ms, and at the
    eager kernels' 0.744 of HBM 1.1962 × that, 0.888 ms. The clamp's 16 × 65,536 × 2,880 B the same way."""
    ctx, r = _routed("gb300-nvl72")
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    assert hbm == pytest.approx(7.12e12)
    assert r["A"] == 65_536
    assert r["bias"] == pytest.approx(5_284_823_040 * 0.89 / 0.744, rel=1e-9)
    assert r["bias"] / hbm == pytest.approx(0.888e-3, abs=1e-6)
    fused_activation = 2 * 3 * 65_536 * 2880  # the fused quick-GeGLU's bytes stay at the law
    assert r["act"] == pytest.approx(fused_activation + 16 * 65_536 * 2880 * 0.89 / 0.744, rel=1e-9)


def test_only_the_eager_bytes_move():
    """Without the measurement the same plan's clamp and bias fall back to the law, 1/1.1962 of their time, and
    nothing else in the routed experts changes: the grouped GEMMs, the permutations (TE's fused kernels)."""
    ctx, measured = _routed("gb300-nvl72")
    spec = ctx.hardware.model_copy(update={"gpu": ctx.hardware.gpu.model_copy(update={"eager_hbm_frac": None})})
    req = make_request(
        model="gpt-oss-120b", hardware=spec, gpus=64, ep=64, micro_batch=4, global_batch=1280,
        moe_token_dispatcher="alltoall", options={"moe_load_imbalance": 1.0},
    )  # fmt: skip
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    law = {k: np.ravel(np.asarray(v, dtype=float))[0] for k, v in blocks._routed_experts(lt, req.ctx).items()
           if k not in ("unfused", "casts")}  # fmt: skip
    assert measured["bias"] / law["bias"] == pytest.approx(0.89 / 0.744, rel=1e-9)
    for key in ("A", "experts", "permute"):
        assert measured[key] == law[key]


def test_a_fused_dense_model_on_blackwell_does_not_move():
    """Llama 3 70B's SwiGLU is one fused kernel (--bias-swiglu-fusion, the default): no eager bytes, so its step on
    64 GB200 is the same with or without the measurement."""
    hw = load_hardware("gb200-nvl72")
    law = hw.model_copy(update={"gpu": hw.gpu.model_copy(update={"eager_hbm_frac": None})})

    def step(spec):
        from planner.api import explain_plan

        req = make_request(model="llama3-70b", hardware=spec, gpus=64, tp=4, pp=4, micro_batch=1, global_batch=128)
        return explain_plan(req).plan_json["estimate"]["iteration_s"]

    assert step(hw) == step(law)
    assert moe.CLAMP_BYTES_PER_F == 16 and moe.EXPERT_BIAS_BYTES_PER_H == 28


def test_explain_names_the_eager_share_where_it_prices_it():
    """explain's formulas say which bytes run at PyTorch's eager share of HBM and by how much: GPT-OSS's clamp and bias
    on GB300 (× 0.89/0.744 = 1.196), NeMo's op-by-op squared ReLU on GB200 (+4 B forward, +12 B backward an element,
    the same ratio); on H100 the same bytes with no ratio (the law)."""
    from planner.api import explain_plan

    def formulas(model, hardware, **kw):
        est = explain_plan(make_request(model=model, hardware=hardware, gpus=64, **kw)).plan_json["estimate"]
        return est["formulas"]

    def forward(model, hardware, **kw):
        return formulas(model, hardware, **kw)["time"]["forward"]["formula"]

    def experts(hardware):
        oss = dict(ep=64, micro_batch=4, global_batch=1280, moe_token_dispatcher="alltoall")
        return formulas("gpt-oss-120b", hardware, **oss)["time_parts"]["fwd+bwd: routed-expert GEMMs"]["formula"]

    text = experts("gb300-nvl72")
    assert "fc2's bias 28·A·h (eager ops: × η_mem/η_eager = 1.196, PyTorch's kernels at 0.744 of HBM)" in text
    assert "fc2's bias 28·A·h" in experts("dgx-h100-superpod") and "η_eager" not in experts("dgx-h100-superpod")
    relu = forward("nemotron-4-15b", "gb200-nvl72", options={"activation_fusion": False})
    assert (
        "the MLP activation op by op: +4 B forward, +12 B backward per b·s·f/t element, × η_mem/η_eager = 1.196" in relu
    )
    assert "op by op" not in forward("nemotron-4-15b", "gb200-nvl72")
