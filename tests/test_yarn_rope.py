"""YaRN positions run Megatron-Core's op-by-op RoPE (compute.unfused_rope_extra_bytes): its bytes by hand,
and in GPT-OSS's attention block exactly those bytes over HBM - at the GPU's measured eager elementwise
bandwidth where the preset has one (Blackwell: pytorch/pytorch PR 176223), else at the HBM law."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costs import compute
from planner.costs.blocks import attention_block, unfused_rope
from planner.costs.letters import Letters
from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.validate import prepare
from planner.models.spec import PositionEmbedding
from planner.presets import load_model
from planner.space.grid import PlanGrid


def test_unfused_rope_bytes_by_hand():
    # forward 4+2+4+4+6+4 = 24 B, backward 4+2+4+4+6+6 = 26 B per element; the fused kernel's 4 and 2·4 are
    # already charged, so 1,000 elements add 20,000 and 18,000 bytes
    fwd, bwd = compute.unfused_rope_extra_bytes(1000)
    assert float(fwd) == 20_000.0 and float(bwd) == 18_000.0


def test_unfused_rope_at_the_eager_bandwidth_by_hand():
    # GB200: B_m = 8 TB/s × 0.89 = 7.12 TB/s against the measured eager 1.55 TB/s: r = 4.5935; 1,000 elements move
    # 24·r·1000 − 4·1000 = 106,245 and 26·r·1000 − 8·1000 = 111,432 HBM-rate bytes beyond the fused kernel's
    r = compute.eager_rope_slowdown(8.0e12, 0.89, 1.55e12)
    assert r == pytest.approx(7.12 / 1.55, rel=1e-12)
    fwd, bwd = compute.unfused_rope_extra_bytes(1000, r)
    assert float(fwd) == pytest.approx(106_245.2, rel=1e-5) and float(bwd) == pytest.approx(111_432.3, rel=1e-5)
    # no measurement, or an eager rate at or above the HBM law: the bytes law (r = 1)
    assert compute.eager_rope_slowdown(3.35e12, 0.89, None) == 1.0
    assert compute.eager_rope_slowdown(3.35e12, 0.89, 5e12) == 1.0


def test_only_yarn_outside_mla_runs_op_by_op():
    assert unfused_rope(load_model("gpt-oss-120b"))
    assert not unfused_rope(load_model("qwen3-30b-a3b"))  # rope: TE's fused kernel
    assert not unfused_rope(load_model("deepseek-v3"))


@pytest.mark.parametrize(
    ("run_id", "extra_per_element"),
    [
        # GB200 row of 26.04: the 24 + 26 B of the op-by-op path at the eager 1.55 TB/s, less the fused kernel's
        # 4 + 8 B at the HBM law: 50·(7.12/1.55) − 12 = 217.68 HBM-rate bytes an element (5.0× the bytes law's 38)
        ("MB-26.04-GB200-GPTOSS120B-64", 50 * 8.0 * 0.89 / 1.55 - 12),
        # H100 (no eager measurement): 20 + 18 = 38 B an element at the HBM law
        ("MB-26.04-H100-GPTOSS120B-64", 38.0),
    ],
)
def test_gpt_oss_attention_pays_the_unfused_rope_bytes(run_id, extra_per_element):
    # GB200: b 4, s 4096, t 1: N = 16,384 tokens × (64 + 8) heads × 64 = 75,497,472 elements a layer and
    # micro-batch; H100: b 1, N = 4,096 × 72 × 64 = 18,874,368
    req = prepare({r.id: r for r in load_moe_runs()}[run_id])
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    with_rope = attention_block(lt, req.ctx)["mem"]
    n = req.plan.micro_batch * 4096 * (64 + 8) * 64
    assert n in (75_497_472, 18_874_368)
    hw = req.ctx.hardware
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    fused = req.ctx.__class__(
        load_model("gpt-oss-120b").model_copy(update={"position_embedding_type": PositionEmbedding.ROPE}),
        req.ctx.hardware,
        req.ctx.training,
        req.ctx.options,
    )
    without = attention_block(Letters(PlanGrid.from_plans([req.plan]), fused), fused)["mem"]
    assert float(np.ravel(with_rope - without)[0]) == pytest.approx(extra_per_element * n / hbm, rel=1e-9)
