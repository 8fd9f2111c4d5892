"""The follow-up physics of today's GPUs, each by hand: an MLP activation run op by op, the word
table's dense gradient, the FP8 cast kernels' measured bandwidth, the kernel priors of a fit and
the validation's GPU generations."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from planner import api
from planner.costs import compute
from planner.costs.estimate import evaluate
from planner.costs.layer_time import embedding_grad_bytes
from planner.costs.linears import cast_bytes
from planner.fidelity.calibrate import RUN_NOISE, _prior_residuals
from planner.fidelity.validate import generation
from planner.hardware.calibration import Calibration, Factor, Prior
from planner.hardware.spec import GPUSpec
from planner.megatron.export import flags_text
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

LLAMA = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 --vocab-size 128256 --swiglu "
    "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
    "--micro-batch-size 1 --global-batch-size 128 --bf16 "
)


def test_fused_activation_moves_nothing_extra():
    for kind in ("gelu", "gated", "squared_relu"):
        assert compute.activation_extra_bytes(kind, fused=True) == (0, 0)
    assert compute.activation_extra_bytes("gelu", fused=False) == (0, 0)  # F.gelu is one kernel either way


def test_squared_relu_op_by_op_by_hand():
    # forward: relu (read 2, write 2), pow (read 2, write 2) = 8 against the fused kernel's 4 -> 4 more;
    # backward: copy 4, scale 4, product 6, threshold_backward 6 = 20 against the fused 8 -> 12 more
    assert compute.activation_extra_bytes("squared_relu", fused=False) == (8 - 4, 20 - 8)


def test_unfused_glu_by_hand():
    # forward: silu 4, product 6 = 10 against 6 fused; backward 6 + 6 + 6 + 8 = 26 against 12
    assert compute.activation_extra_bytes("gated", fused=False) == (4, 14)


def test_word_table_gradient_bytes_by_hand():
    # Llama 3's 128,256 x 4,096 table on one TP rank, bf16 activations, fp32 main grads:
    # zero-fill 2 + read 2 + main_grad read 4 + write 4 = 12 bytes per element
    got = embedding_grad_bytes(128256, 4096, 1, grad_bytes=4, act_bytes=2)
    assert got == pytest.approx(12 * 128256 * 4096) and got == pytest.approx(6.304e9, rel=1e-3)
    assert embedding_grad_bytes(128256, 4096, 8, grad_bytes=2, act_bytes=2) == pytest.approx(8 * 128256 * 4096 / 8)


def test_cast_kernels_at_their_measured_bandwidth():
    # H100 preset: TE's delayed-scaling casts reach 0.94 of HBM, current (tensorwise) scaling 0.89,
    # against the memory-bound ops' 0.89: their bytes count 0.89/0.94 and 0.89/0.89 as much
    hw = load_hardware("dgx-h100-superpod")
    eta = hw.calibration.memory_efficiency
    req = api.make_request(model="llama3-8b", gpus=8, hardware=hw, options={"fp8": "hybrid", "fp8_recipe": "delayed"})
    bare = compute.fp8_cast_bytes_per_element("delayed", one_copy_serves_both=False)
    assert cast_bytes(req.ctx)[0] == pytest.approx(bare * eta / hw.gpu.fp8_cast_hbm_frac["delayed"])
    req = api.make_request(
        model="llama3-8b", gpus=8, hardware=hw, options={"fp8": "hybrid", "fp8_recipe": "tensorwise"}
    )
    bare = compute.fp8_cast_bytes_per_element("tensorwise", one_copy_serves_both=False)
    assert cast_bytes(req.ctx)[0] == pytest.approx(bare * eta / hw.gpu.fp8_cast_hbm_frac["tensorwise"])


def test_cast_fractions_are_checked():
    gpu = load_hardware("dgx-h100-superpod").gpu.model_dump()
    with pytest.raises(ValidationError, match="unknown recipes"):
        GPUSpec(**(gpu | {"fp8_cast_hbm_frac": {"hybrid": 0.9}}))
    with pytest.raises(ValidationError, match=r"\(0, 1\]"):
        GPUSpec(**(gpu | {"fp8_cast_hbm_frac": {"delayed": 1.2}}))


def test_prior_residual_is_one_run_noise_at_one_sigma():
    priors = [("fp8_gemm_efficiency", "gemm_efficiency", 0.9, 0.04)]
    at = {"gemm_efficiency": 0.8, "fp8_gemm_efficiency": 0.72}
    assert _prior_residuals(priors, at) == pytest.approx([0.0])
    off = dict(at, fp8_gemm_efficiency=0.72 * np.exp(0.04))
    assert _prior_residuals(priors, off) == pytest.approx([RUN_NOISE])


def test_a_prior_per_a_factor_the_calibration_lacks_is_refused():
    cal = load_hardware("dgx-h100-superpod").calibration
    factors = dict(cal.factors)
    factors["fp8_gemm_efficiency"] = Factor(
        **(factors["fp8_gemm_efficiency"].model_dump() | {"prior": Prior(value=0.9, sigma=0.04, per="no_such")})
    )
    with pytest.raises(ValidationError, match="no_such"):
        Calibration(**(cal.model_dump() | {"factors": {k: f.model_dump() for k, f in factors.items()}}))


def test_presets_tie_fp8_to_bf16_gemms_by_their_measured_ratio():
    # GB200's runs pull the ratio 3.3 σ below its kernels (0.88 against 0.971; docs/cost-model.md §9.3)
    for name in ("dgx-h100-superpod", "gb300-nvl72"):
        cal = load_hardware(name).calibration
        prior = cal.factors["fp8_gemm_efficiency"].prior
        assert prior is not None and prior.per == "gemm_efficiency"
        ratio = cal.fp8_gemm_efficiency / cal.gemm_efficiency
        assert abs(np.log(ratio / prior.value)) < 3 * prior.sigma  # the fit stays within 3 σ of the kernels


def test_generations_by_compute_capability():
    assert generation("dgx-a100-superpod") == "Ampere (A100)"
    assert generation("dgx-h100-superpod") == generation("dgx-h200-superpod") == "Hopper (H100, H200)"
    assert {generation(n) for n in ("dgx-b200-superpod", "gb200-nvl72", "gb300-nvl72")} == {
        "Blackwell (B200, B300, GB200, GB300)"
    }


def test_unfused_swiglu_round_trips_through_the_launch_flags():
    imported = import_megatron(LLAMA + "--no-bias-swiglu-fusion", gpus=8).request
    assert imported.ctx.options.activation_fusion is False
    assert "--no-bias-swiglu-fusion" in flags_text(imported)
    fused = import_megatron(LLAMA, gpus=8).request
    assert fused.ctx.options.activation_fusion and "--no-bias-swiglu-fusion" not in flags_text(fused)


def _compute_s(req) -> float:
    ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    return float(ev.time["forward"][0] + ev.time["backward"][0])


def test_unfused_swiglu_costs_its_extra_bytes():
    fused = import_megatron(LLAMA, gpus=8).request
    eager = import_megatron(LLAMA + "--no-bias-swiglu-fusion", gpus=8).request
    t_fused, t_eager = _compute_s(fused), _compute_s(eager)
    # per layer and micro-batch b·s·f = 8192 x 14336 elements (TP 1): 4 bytes more forward, 14 backward
    hbm = fused.ctx.hardware.gpu.hbm_bytes_per_s * fused.ctx.hardware.calibration.memory_efficiency
    m, L = 128 // 8, 32
    extra_s = m * L * (4 + 14) * 8192 * 14336 / hbm
    got = t_eager - t_fused
    assert got == pytest.approx(extra_s, rel=0.02)
