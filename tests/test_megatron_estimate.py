"""What Megatron-LM's report_theoretical_memory prints for a plan (theoretical_memory_usage.py at
d98e8a64), by hand, and the reasons explain gives for megaplan's different figure. The values in MB
were also printed by Megatron-LM itself (its parse_args/validate_args and report_theoretical_memory,
run on the exported flags outside this suite): GPT-3 175B 10284.62 + 9840.03 MB; with VPP 4 from 3
layers per virtual stage, 14452.55 MB of activations."""

import pytest

from planner.api import explain, make_request
from planner.costs.megatron_memory import differences, report_theoretical_memory

MB = 2**20
GPT3 = dict(model="gpt3-175b", gpus=1024, tp=8, pp=16, global_batch=1536, distributed_optimizer=True)


def megatron(**kw):
    req = make_request(**{**GPT3, **kw})
    return report_theoretical_memory(req.ctx.model, req.ctx.training, req.plan, req.gpus), req


def test_gpt3_175b_weights_and_optimizer_by_hand():
    mm, _ = megatron(sequence_parallel=True, recompute="selective")
    h, L, V, t, p, d = 12288, 96, 51200, 8, 16, 8
    # attention 2h²(1 + g/a)(ad/h) = 4h², MLP 2h·4h = 8h², two LayerNorms 2·2h; final LayerNorm 2h
    shard = (L * 12 * h**2 / p + h * V) / t + (L * 4 * h + 2 * h) / p
    assert mm.weight_and_optimizer_mib == pytest.approx(shard * (6 + 12 / d) / MB, rel=1e-12)
    assert round(mm.weight_and_optimizer_mib, 2) == 10284.62  # Megatron-LM's own print


def test_gpt3_175b_activations_with_sp_by_hand():
    mm, _ = megatron(sequence_parallel=True, recompute="selective")
    s, b, h, L, p, t = 2048, 1, 12288, 96, 16, 8
    # (sbh(18 + 4·4h/h)·L + 8sbp + sbhp)·min(1, m/p) / t with m = 1536/8 = 192 ≥ p
    act = (s * b * h * (18 + 16) * L + 8 * s * b * p + s * b * h * p) / t
    assert mm.activation_mib == pytest.approx(act / MB, rel=1e-12)
    assert round(mm.activation_mib, 2) == 9840.03 and mm.formula == "with SP"
    interleaved, _ = megatron(sequence_parallel=True, recompute="selective", vpp=2)
    assert interleaved.activation_mib == pytest.approx(act * (1 + 15 / 32) / MB, rel=1e-12)


def test_without_sp_formula_ignores_sequence_parallelism_and_full_recompute():
    no_recompute, _ = megatron(sequence_parallel=True)
    full, req = megatron(sequence_parallel=True, recompute="full")
    s, b, h, L, p, t = 2048, 1, 12288, 96, 16, 8
    # SP without selective recompute falls back to sbh(10 + 24/t)·L + 8sbp + sbhp, × 1.05
    act = (s * b * h * (10 + 24 / t) * L + 8 * s * b * p + s * b * h * p) * 1.05
    assert no_recompute.activation_mib == pytest.approx(act / MB, rel=1e-12)
    assert full.activation_mib == no_recompute.activation_mib and full.formula == "without SP"
    why = " ".join(differences(req.ctx.model, req.ctx.training, req.plan, req.ctx.options))
    assert "sequence parallelism is ignored" in why and "full recomputation is ignored" in why


def test_context_parallelism_and_the_log_line():
    req = make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, cp=2, global_batch=128, distributed_optimizer=True
    )
    mm = report_theoretical_memory(req.ctx.model, req.ctx.training, req.plan, req.gpus)
    # D is data_parallel_size = 8/(t·p·c) = 4, not the d·c = 8 the distributed optimizer shards over
    N = 8.0301e9  # all parameters on one GPU (t = p = 1), the output layer included
    assert mm.weight_and_optimizer_mib * MB == pytest.approx(N * (6 + 12 / 4), rel=1e-4)
    assert mm.log_line().startswith("Theoretical memory footprints: weight and optimizer=")
    pj = explain(req)
    assert any("context parallelism is ignored" in d for d in pj["megatron_estimate"]["differences"])
    assert pj["megatron_estimate"]["log_line"] == mm.log_line()
