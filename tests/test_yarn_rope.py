"""YaRN positions run Megatron-Core's op-by-op RoPE (compute.unfused_rope_extra_bytes): its bytes by hand,
and in GPT-OSS's attention block exactly those bytes over HBM."""

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


def test_only_yarn_outside_mla_runs_op_by_op():
    assert unfused_rope(load_model("gpt-oss-120b"))
    assert not unfused_rope(load_model("qwen3-30b-a3b"))  # rope: TE's fused kernel
    assert not unfused_rope(load_model("deepseek-v3"))


def test_gpt_oss_attention_pays_the_unfused_rope_bytes():
    # GB200 row of 26.04: b 4, s 4096, t 1: N = 16,384 tokens × (64 + 8) heads × 64 = 75,497,472 elements,
    # 20·N + 18·N = 2.869 GB more HBM traffic per layer and micro-batch than the fused kernel's
    req = prepare({r.id: r for r in load_moe_runs()}["MB-26.04-GB200-GPTOSS120B-64"])
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    with_rope = attention_block(lt, req.ctx)["mem"]
    n = 16_384 * (64 + 8) * 64
    assert n == 75_497_472
    hw = req.ctx.hardware
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    fused = req.ctx.__class__(
        load_model("gpt-oss-120b").model_copy(update={"position_embedding_type": PositionEmbedding.ROPE}),
        req.ctx.hardware,
        req.ctx.training,
        req.ctx.options,
    )
    without = attention_block(Letters(PlanGrid.from_plans([req.plan]), fused), fused)["mem"]
    assert float(np.ravel(with_rope - without)[0]) == pytest.approx(38 * n / hbm, rel=1e-9)
