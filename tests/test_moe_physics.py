"""The MoE physics anchored to published measurements: sliding-window attention on the kernel law
(cuDNN's GPT-OSS window tables), the all-to-all overlap as Megatron-Core's combined 1F1B schedule
pairs it, the host time of a MoE layer's per-expert eager ops, the fused grouped MLP of Transformer
Engine's op fuser and the unfused path's clamp and bias bytes; each against a hand computation."""

from __future__ import annotations

import csv
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner.api import explain, make_request
from planner.costs import blocks, compute, moe
from planner.costs.letters import Letters
from planner.errors import InfeasibleError
from planner.fidelity import moe_fit
from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.validate import predict, prepare
from planner.megatron.export import megatron_argv
from planner.megatron.importer import import_megatron
from planner.presets import load_hardware
from planner.space.grid import PlanGrid

WINDOW_ROWS = Path(__file__).parent / "data" / "window_attention_kernels.csv"


def test_window_band_flops_by_hand():
    """GPT-OSS's window of 128 keys at s = 4096: pairs = s·W − W(W−1)/2 = 524,288 − 8,128 = 516,160;
    forward 2·bh·pairs·(d_qk + d_v) for bh = 4 sequences × 64 heads and 64-wide heads."""
    fwd, bwd = compute.flash_attention_flops(256, 4096, 4096, 64, 64, causal=True, window=128)
    assert float(fwd) == 2 * 256 * 516_160 * 128
    assert float(bwd) == 2 * 256 * 516_160 * (3 * 64 + 2 * 64)
    # a window as long as the sequence is full causal attention
    full = compute.flash_attention_flops(256, 128, 128, 64, 64, causal=True, window=128)[0]
    assert float(full) == 2 * 256 * 128 * 128 / 2 * 128


def test_window_law_against_cudnn_gpt_oss_tables():
    """cuDNN's GPT-OSS sliding-window benchmarks (GB200 and GB300 at 128 keys, H200 at 1,024; 2k-16k):
    each row walks W keys with its fixed work and one masked diagonal once. The law was fitted to
    full-attention rows only; the window rows are a check, within 30 % (median 15 %)."""
    errors = []
    for row in csv.DictReader(WINDOW_ROWS.open()):
        hw = load_hardware(row["hardware"])
        bh, s, d, W = (
            int(row["batch"]) * int(row["q_heads"]),
            int(row["seq_len"]),
            int(row["head_dim"]),
            int(row["window"]),
        )
        times = compute.flash_attention_time_s(
            bh, s, s, d, d, causal=True, kernel=hw.attention, peak_flops_per_s=hw.gpu.peak_flops_per_s("bf16"), window=W
        )
        model = float(times[0 if row["pass"] == "fwd" else 1]) * 1e3
        errors.append(model / float(row["time_ms"]) - 1)
    assert len(errors) == 24
    assert max(abs(e) for e in errors) < 0.30
    assert np.median(np.abs(errors)) < 0.15


def test_overlap_pairs_each_all_to_all_with_its_partner_by_hand():
    """Dispatch + combine 2 ms each way (each all-to-all 1 ms); attention-side forward 0.5 ms, experts
    forward 3 ms, attention-side backward 4 ms, experts backward 6 ms (dgrad 3, wgrad 3); the
    dispatcher holds f = 1/4 of the SMs. Forward all-to-alls: dispatch beside dgrad,
    max(1, 3 + 0.25) − 3 = 0.25, combine beside the attention backward, max(1, 4.25) − 4 = 0.25.
    Backward: combine beside the attention forward, max(1, 0.75) − 0.5 = 0.5, dispatch beside wgrad
    and the experts' forward, max(1, 6.25) − 6 = 0.25."""
    fwd, bwd = moe.overlapped_exposure_s(2.0, 2.0, 0.5, 3.0, 4.0, 6.0, overlap=True, sm_share=0.25)
    assert (float(fwd), float(bwd)) == pytest.approx((0.5, 0.75))
    fwd0, bwd0 = moe.overlapped_exposure_s(2.0, 2.0, 0.5, 3.0, 4.0, 6.0, overlap=True, sm_share=0.0)
    assert (float(fwd0), float(bwd0)) == pytest.approx((0.0, 0.5))  # only the 0.5 ms attention forward is short
    plain = moe.overlapped_exposure_s(2.0, 2.0, 0.5, 3.0, 4.0, 6.0, overlap=False, sm_share=0.25)
    assert tuple(map(float, plain)) == (2.0, 2.0)


def test_comm_sm_share_by_dispatcher():
    assert float(moe.comm_sm_share(2, "hybridep", 148)) == 16 / 148
    assert float(moe.comm_sm_share(2, "deepep", 132)) == 20 / 132
    assert float(moe.comm_sm_share(1, "deepep", 132)) == 32 / 132  # alltoall: NCCL's channels


@pytest.mark.parametrize(
    "recipe, biased, ops",
    [
        (None, False, (2, 4)),  # fc1, fc2; backward dgrad and wgrad of each
        ("delayed", False, (4, 6)),  # + one cast of each expert's fc1 and fc2 input / output gradients
        ("mxfp8", False, (6, 8)),  # + quantise and swizzle each
        ("tensorwise", False, (6, 8)),  # + amax pass and cast each
        (None, True, (4, 7)),  # GPT-OSS in bf16: fc2's bias expert by expert
    ],
)
def test_expert_host_ops_by_recipe(recipe, biased, ops):
    assert moe.expert_host_ops(recipe, biased=biased) == ops


def test_expert_host_time_by_hand():
    """16 local experts × 6 ops × 10 µs = 0.96 ms; nothing when graphs capture the experts."""
    assert float(moe.expert_host_time_s(16, 6, op_us=10.0, captured=0.0)) == pytest.approx(0.96e-3)
    assert float(moe.expert_host_time_s(16, 6, op_us=10.0, captured=1.0)) == 0.0


def _moe_block(**options):
    req = make_request(
        model="gpt-oss-120b",
        hardware="gb200-nvl72",
        gpus=64,
        ep=8,
        micro_batch=1,
        global_batch=64,
        options={"moe_load_imbalance": 1.0, **options},
    )
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    return lt, req.ctx, {k: float(np.ravel(v)[0]) for k, v in blocks.moe_mlp_block(lt, req.ctx).items()}


def test_op_fuser_drops_the_per_expert_launches_and_the_unfused_bytes_by_hand():
    """GPT-OSS-120B at EP 8 (16 local experts), one 4,096-token sequence: A = 16,384 pairs. Unfused,
    the forward pays the activation 2·3·A·f_e, the clamp 16·A·f_e and fc2's bias 28·A·h bytes at
    HBM speed, and 16 experts × 4 ops × t_op on the host; TE's fused grouped MLP none of them."""
    lt, ctx, unfused = _moe_block()
    _, _, fused = _moe_block(use_transformer_engine_op_fuser=True)
    A, f_e, h = 16_384, 2880, 2880
    hw = ctx.hardware
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    bytes_ = (2 * 3 + 16) * A * f_e + 28 * A * h
    host = 16 * 4 * hw.calibration.moe_host_op_us * 1e-6
    assert unfused["fwd"] - fused["fwd"] == pytest.approx(bytes_ / hbm + host, rel=1e-9)
    assert unfused["bwd"] - fused["bwd"] == pytest.approx(
        2 * bytes_ / hbm + 16 * 7 * hw.calibration.moe_host_op_us * 1e-6
    )


def explain_request(**kw):
    return explain(make_request(**kw))


def test_op_fuser_needs_expert_tp_1_and_round_trips():
    with pytest.raises(InfeasibleError, match="--use-transformer-engine-op-fuser"):
        explain_request(
            model="qwen3-30b-a3b",
            gpus=16,
            tp=2,
            ep=8,
            etp=2,
            sequence_parallel=True,
            options={"use_transformer_engine_op_fuser": True},
        )
    req = make_request(model="qwen3-30b-a3b", gpus=16, ep=8, options={"use_transformer_engine_op_fuser": True})
    argv = megatron_argv(req)
    assert "--use-transformer-engine-op-fuser" in argv
    back = import_megatron(shlex.join(argv), gpus=16, hardware=req.ctx.hardware.name).request
    assert back.ctx.options.use_transformer_engine_op_fuser


def test_moe_fit_recovers_a_known_host_time():
    """Rows whose published throughput is the model's own at t_op = 14 µs give back 14 µs."""
    runs = [r for r in load_moe_runs() if r.id in ("MB-26.04-B200-QWEN3-30B-8", "MB-26.04-H100-QWEN3-30B-16")]
    truth = {name: moe_fit.with_host_op(load_hardware(name), 14.0) for name in moe_fit.FIT_PRESETS}
    synthetic = [replace(r, published=predict(r, req=prepare(r, truth[r.hardware]))) for r in runs]
    fit = moe_fit.fit(synthetic)
    assert fit.value == pytest.approx(14.0, abs=0.05) and fit.sigma < 0.05
