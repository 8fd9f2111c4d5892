"""The cross-entropy's memory traffic on the last stage, counted op by op from Megatron's
VocabParallelCrossEntropy (megatron/core/tensor_parallel/cross_entropy.py, core_r0.8.0 and d98e8a64)."""

import pytest

from planner import api
from planner.costs import compute, flops
from planner.costs.layer_time import CROSS_ENTROPY_BWD_BYTES, CROSS_ENTROPY_FWD_BYTES, head_times
from planner.costs.letters import Letters
from planner.space.grid import PlanGrid


def test_bytes_per_logit_by_hand():
    # forward: cast (2 + 4), max (4), subtract (4 + 4), exp (4 + 4), sum (4), softmax by div_ (4 + 4) = 38;
    # backward: mul_ by the loss gradient (4 + 4), cast to bf16 (4 + 2) = 14
    assert CROSS_ENTROPY_FWD_BYTES == 38
    assert CROSS_ENTROPY_BWD_BYTES == 14


def test_head_time_is_the_logits_gemm_plus_the_loss_bytes():
    """The README 1.7B row's last stage at b 1: b·s·V/t = 4096 · 131,072 = 536,870,912 logits; the forward
    moves 38 bytes each, 20.4 GB, at 3.35 TB/s · η_mem 0.89 = 2.98 TB/s: 6.84 ms beside the logits GEMM."""
    req = api.make_request(
        hardware="dgx-h100-superpod",
        model=_readme_model(),
        gpus=8,
        tp=1,
        pp=1,
        global_batch=8,
        micro_batch=1,
        seq_len=4096,
    )
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    heads = head_times(lt, req.ctx)
    cal, gpu = req.ctx.hardware.calibration, req.ctx.hardware.gpu
    gemm = compute.gemm_time_s(
        flops.logits_gemm(1, 4096, 2048, 131072, 1, 1),
        peak_flops_per_s=gpu.peak_flops_per_s("bf16"),
        eta_max=cal.gemm_efficiency,
        half_dim=cal.gemm_half_dim,
    )
    logits = 4096 * 131072
    hbm = 3.35e12 * cal.memory_efficiency
    fwd, bwd, g = (float(x.ravel()[0]) for x in (heads["head_fwd"], heads["head_bwd"], gemm))
    assert fwd - g == pytest.approx(38 * logits / hbm, rel=1e-9)
    assert 38 * logits / (3.35e12 * 0.89) == pytest.approx(6.84e-3, rel=1e-3)
    assert bwd - 2 * g == pytest.approx(14 * logits / hbm, rel=1e-9)


def _readme_model():
    from planner.fidelity.runs import MLM, load_runs

    return next(r for r in load_runs() if r.source == MLM and r.id.endswith("1.7B")).request["model"]
