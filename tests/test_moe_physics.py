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
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import explain, make_request
from planner.costs import blocks, compute, moe, process_memory
from planner.costs.letters import Letters
from planner.errors import InfeasibleError
from planner.fidelity import moe_fit
from planner.fidelity.connection_fit import PHI, measured_gain, solve_phi, zoo_ab_step_s, zoo_gain
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


def test_combined_step_pairs_by_the_schedule_dependencies_by_hand():
    """Dispatch + combine 2 ms each way (each all-to-all c = 1 ms); pre-dispatch forward P_f 0.5 ms,
    experts forward M_f 3 ms, pre-dispatch backward P_b 4 ms, experts backward 6 ms (dgrad 3, wgrad 3);
    the dispatcher holds f = 1/4 of the SMs.
    A = max(c_b, P_f + f·c_b) = max(1, 0.75) = 1 (C_b beside P_f).
    Middle, X = 3 + 3 + 3 = 9: max(max(6, 1) + 3, max(1, 6) + 1, 9 + 0.25·min(2, 9)) = max(9, 7, 9.5) = 9.5.
    C = max(c_f, P_b + f·c_f) = max(1, 4.25) = 4.25. Step 14.75 against 13.5 of work: 1.25 exposed,
    split by the directions' communication, 0.625 each."""
    fwd, bwd = moe.overlapped_exposure_s(2.0, 2.0, 0.5, 3.0, 4.0, 6.0, overlap=True, sm_share=0.25)
    assert (float(fwd), float(bwd)) == pytest.approx((0.625, 0.625))
    plain = moe.overlapped_exposure_s(2.0, 2.0, 0.5, 3.0, 4.0, 6.0, overlap=False, sm_share=0.25)
    assert tuple(map(float, plain)) == (2.0, 2.0)


def test_delayed_wgrad_and_the_unpaired_warm_up_by_hand():
    """All-to-alls of c = 4 ms (8 ms each way), P_f 0.5, M_f 3, P_b 4, dgrad = wgrad = 3, f = 0.
    D_b waits for the whole expert backward without --delay-wgrad-compute: the middle is
    max(max(6, 4) + 3, max(4, 6) + 4, 9) = 10, A = max(4, 0.5) = 4, C = max(4, 4) = 4: step 18, 4.5
    exposed. Delayed, D_b waits for dgrad only: max(9, max(4, 3) + 4, 9) = 9, step 17, 3.5 exposed.
    A quarter of the steps unpaired (warm-up, cool-down): 0.75·3.5 + 0.25·16 = 6.625."""
    args = (8.0, 8.0, 0.5, 3.0, 4.0, 6.0)
    plain = sum(moe.overlapped_exposure_s(*args, overlap=True, sm_share=0.0))
    delayed = sum(moe.overlapped_exposure_s(*args, overlap=True, sm_share=0.0, delay_wgrad=True))
    assert (float(plain), float(delayed)) == pytest.approx((4.5, 3.5))
    warm = sum(moe.overlapped_exposure_s(*args, overlap=True, sm_share=0.0, delay_wgrad=True, unpaired=0.25))
    assert float(warm) == pytest.approx(6.625)


def test_unpaired_share_of_the_combined_schedule():
    """Without pipelining the first forward and the last backward of m run alone: 1/m. Interleaved, rank
    i warms up 2(p − i − 1) + (v − 1)·p + 1 chunks (the overlap's +1): p = 4, v = 2, m = 16 gives 11, 9,
    7, 5 of m·v = 32 chunks, on average 8 = v·p, a share 8/32 = p/m = 1/4; never more than all."""
    assert float(moe.unpaired_share(1, 5)) == pytest.approx(0.2)
    warmups = [2 * (4 - i - 1) + (2 - 1) * 4 + 1 for i in range(4)]
    assert np.mean(warmups) / (16 * 2) == pytest.approx(float(moe.unpaired_share(4, 16)))
    assert float(moe.unpaired_share(8, 4)) == 1.0


@settings(max_examples=60, deadline=None)
@given(
    c=st.floats(0, 10), pf=st.floats(0, 10), mf=st.floats(0, 10), pb=st.floats(0, 10), d=st.floats(0, 10),
    f=st.floats(0, 1), delay=st.booleans(),
)  # fmt: skip
def test_combined_step_never_longer_than_back_to_back(c, pf, mf, pb, d, f, delay):
    """Each pair of the combined step is at most its two parts run one after the other, and at least
    the longer of them: the overlap never costs time and never hides more than there is."""
    step = float(moe.combined_step_s(c, c, pf, mf, pb, d, d, sm_share=f, delay_wgrad=delay))
    work = pf + mf + pb + 2 * d
    assert max(work, 4 * c) - 1e-9 <= step <= work + 4 * c + 1e-9


def test_comm_sm_share_by_dispatcher():
    assert float(moe.comm_sm_share(2, "hybridep", 148)) == 16 / 148
    assert float(moe.comm_sm_share(2, "deepep", 132)) == 20 / 132
    assert float(moe.comm_sm_share(1, "deepep", 132)) == 32 / 132  # alltoall: NCCL's channels
    # --moe-flex-dispatcher-num-sms 32, as Megatron-Bridge's performance runs give HybridEP
    assert float(moe.comm_sm_share(2, "hybridep", 148, 32)) == 32 / 148
    assert float(moe.comm_sm_share(1, "hybridep", 148, 32)) == 32 / 148  # NCCL's, whatever the flex knob


def test_comm_hbm_share_by_hand():
    """An all-to-all moving M = 100 MB per GPU in c = 0.25 ms reads and writes 200 MB: 0.8 TB/s, a tenth
    of 8 TB/s of HBM; over the rail (45 GB/s: M/c), 2 × 45 GB/s of 3.35 TB/s = 2.7 %."""
    assert float(moe.comm_hbm_share(100e6, 0.25e-3, 8e12)) == pytest.approx(0.1)
    assert float(moe.comm_hbm_share(45e6, 1e-3, 3.35e12)) == pytest.approx(0.0269, abs=1e-4)
    assert float(moe.comm_hbm_share(1e9, 1e-6, 8e12)) == 1.0  # never more than all of it
    assert float(moe.comm_hbm_share(1e9, 0.0, 8e12)) == 0.0  # nothing to hide


def test_contention_mixes_sms_and_hbm_by_the_memory_bound_share():
    """Qwen3-30B on 8 GB200 (EP 8, HybridEP with 32 SMs, the A2A overlap): f = 32/148; the MoE layer's
    share f_eff = (1 − μ)·f + μ·g lies between the two and the layer runs no faster for it."""
    req = make_request(
        model="qwen3-30b-a3b", hardware=load_hardware("gb200-nvl72"), gpus=8, ep=8, micro_batch=4,
        global_batch=512, moe_token_dispatcher="flex", overlap_moe_expert_parallel_comm=True,
        options=dict(moe_flex_dispatcher_backend="hybridep", moe_flex_dispatcher_num_sms=32),
    )  # fmt: skip
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    parts = blocks.layer_parts(lt, req.ctx)
    attn, block = parts["attention"], parts["moe"]
    mu = (attn["mem"] + block["mem"]) / (attn["fwd"] + attn["bwd"] + block["fwd"] + block["bwd"])
    hw = req.ctx.hardware
    dispatch = blocks._dispatch_s(lt, req.ctx, block["a2a_bytes"] / (lt.act_bytes * lt.h))
    g = moe.comm_hbm_share(
        block["a2a_bytes"], 0.25 * dispatch, hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    )
    f = 32 / hw.gpu.sm_count
    got = blocks._comm_share(lt, req.ctx, dispatch, block["a2a_bytes"], mu)
    got, mu, g = (float(np.ravel(x)[0]) for x in (got, mu, g))
    assert got == pytest.approx((1 - mu) * f + mu * g)
    assert 0 < mu < 1 and min(f, g) <= got <= max(f, g)


@pytest.mark.parametrize(
    "recipe, biased, ops",
    [
        (None, False, (2, 4)),  # fc1, fc2; backward dgrad and wgrad of each
        ("delayed", False, (4, 6)),  # + one cast of each expert's fc1 and fc2 input / output gradients
        # + one quantise kernel each (nvte_quantize_v2, scales written swizzled: GroupedLinear's
        # optimize_for_gemm, TE v2.12-v2.16); the swizzle of the weights' scales is per layer (below)
        ("mxfp8", False, (4, 6)),
        # + zero the amax, reduce it, compute the scale, cast: 4 kernels per expert and tensor (TE v2.14.1
        # quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl): 2 + 2·4 forward, 4 + 2·4 backward
        ("tensorwise", False, (10, 12)),
        (None, True, (4, 7)),  # GPT-OSS in bf16: fc2's bias expert by expert
    ],
)
def test_expert_host_ops_by_recipe(recipe, biased, ops):
    assert moe.expert_host_ops(recipe, biased=biased) == ops


@pytest.mark.parametrize(
    "recipe, per_expert, per_layer",
    [
        # delayed: one nvte_multi_cast_transpose for all experts' inputs (TE v2.12-v2.16 cast.cpp
        # multi_tensor_quantize_impl, fused when both layouts are allocated: Hopper), none per expert
        ("delayed", (2, 4), (2, 2)),
        ("blockwise", (4, 6), (0, 0)),  # nvte_quantize_v2 alone; no swizzle, no MXFP8 conversion on sm90
        ("tensorwise", (10, 12), (0, 0)),  # as on Blackwell: four kernels, one expert at a time
    ],
)
def test_hopper_host_ops_by_recipe(recipe, per_expert, per_layer):
    assert moe.expert_host_ops(recipe, biased=False, hopper=True) == per_expert
    assert moe.expert_layer_host_ops(recipe, hopper=True) == per_layer


def _qwen3_at_10us(hardware: str, ep: int, global_batch: int, **fp8):
    """Qwen3-30B-A3B at EP = GPUs, b 1, balanced routing, with the preset's per-op host time set to 10 µs."""
    req = make_request(
        model="qwen3-30b-a3b", hardware=hardware, gpus=ep, ep=ep, micro_batch=1, global_batch=global_batch,
        options={"moe_load_imbalance": 1.0, **fp8},
    )  # fmt: skip
    return replace(req.ctx, hardware=moe_fit.with_host_op(req.ctx.hardware, 10.0))


def test_delayed_scaling_on_h100_casts_all_experts_at_once_by_hand():
    """Qwen3-30B-A3B on 16 H100 at EP 16 with delayed scaling: 8 local experts, t_op = 10 µs: forward
    (8·2 + 2)·10 µs = 0.18 ms, backward (8·4 + 2)·10 µs = 0.34 ms (was 8·4 and 8·6 ops: 0.32 and 0.48 ms)."""
    ctx = _qwen3_at_10us("dgx-h100-superpod", 16, 1024, fp8="hybrid", fp8_recipe="delayed")
    fwd, bwd = (float(np.ravel(x)[0]) for x in moe.expert_host_s(8, ctx, captured=0.0))
    assert (fwd, bwd) == pytest.approx((0.18e-3, 0.34e-3))


def test_mxfp8_swizzles_the_weight_scales_once_per_grouped_gemm_not_per_expert():
    """TE v2.12-v2.16 te_general_grouped_gemm swizzles the scales of all experts' weights in one
    multi-tensor kernel (nvte_multi_tensor_swizzle_scaling_factors) per grouped GEMM reading them: fc1 and
    fc2 forward, their dgrads backward; the inputs' and gradients' scales come swizzled from the quantiser.
    Qwen3-30B-A3B on 8 B200 at EP 8: 16 local experts, t_op = 10 µs: forward (16·4 + 2)·10 µs = 0.66 ms,
    backward (16·6 + 2)·10 µs = 0.98 ms (was 16·6 and 16·8 ops: 0.96 and 1.28 ms)."""
    assert moe.expert_layer_host_ops("mxfp8") == (2, 2)
    assert moe.expert_layer_host_ops("tensorwise") == moe.expert_layer_host_ops(None) == (0, 0)
    ctx = _qwen3_at_10us("dgx-b200-superpod", 8, 512, fp8="e4m3", fp8_recipe="mxfp8")
    fwd, bwd = (float(np.ravel(x)[0]) for x in moe.expert_host_s(16, ctx, captured=0.0))
    assert (fwd, bwd) == pytest.approx((0.66e-3, 0.98e-3))
    gap_fwd, _ = moe.expert_graph_gap_s(16, ctx, graphed=1.0)
    # graphed: 16 × (2 GEMMs × 0.58 µs + 2 quantisations × 2.0 µs) + 2 swizzles × 2.0 µs = 86.56 µs
    assert float(gap_fwd) == pytest.approx(86.56e-6)


def test_current_scaling_host_time_of_qwen3_30b_on_h100_by_hand():
    """Qwen3-30B-A3B on 16 H100 at EP 16 (the Bridge H100 FP8-CS recipe): 128/16 = 8 local experts; per
    expert 2 GEMMs + 2 current-scaling quantisations × 4 kernels forward (10), 4 + 8 backward (12), each
    at t_op; in bf16 2 and 4. So FP8 adds 8 × 8 = 64 host ops each way per layer and micro-batch."""

    def host(**fp8):
        req = make_request(
            model="qwen3-30b-a3b", hardware="dgx-h100-superpod", gpus=16, ep=16, micro_batch=1,
            global_batch=1024, options={"moe_load_imbalance": 1.0, **fp8},
        )  # fmt: skip
        return [float(np.ravel(x)[0]) for x in moe.expert_host_s(8, req.ctx, captured=0.0)]

    t_op = load_hardware("dgx-h100-superpod").calibration.moe_host_op_us * 1e-6
    assert host(fp8="e4m3", fp8_recipe="tensorwise") == pytest.approx([8 * 10 * t_op, 8 * 12 * t_op])
    assert host() == pytest.approx([8 * 2 * t_op, 8 * 4 * t_op])


def test_expert_host_time_by_hand():
    """16 local experts × 6 ops × 10 µs = 0.96 ms; nothing when graphs capture the experts."""
    assert float(moe.expert_host_time_s(16, 6, op_us=10.0, captured=0.0)) == pytest.approx(0.96e-3)
    assert float(moe.expert_host_time_s(16, 6, op_us=10.0, captured=1.0)) == 0.0


def test_graph_kernel_floor_is_a_real_kernels_time_in_a_graph():
    """vLLM's one-kernel static per-tensor FP8 cast of a 1 × 2048 tensor runs 0.002 ms on H100 under
    do_bench_cudagraph (vllm PR 33918; 1 µs resolution), its two-step dynamic per-tensor quantisation 0.007 ms
    (PR 33867); a one-kernel FP8 quantisation of 4 × 2048 on B200 1.74-2.82 µs (pytorch/helion PR 3073). The
    floor sits inside both, above the no-op chain's 0.58 µs gap per node."""
    assert 1.74 <= moe.GRAPH_KERNEL_FLOOR_US <= 2.82 and moe.GRAPH_KERNEL_FLOOR_US > moe.GRAPH_NODE_GAP_US
    assert 3 * moe.GRAPH_KERNEL_FLOOR_US <= 7.0 + 0.5  # the dynamic quantisation's kernels fit its 7 µs


def test_graph_node_gap_by_hand():
    """A graph replays its kernels with ≈ 0.58 µs of GPU time per node between them (ahrefs/ocannl issue
    488: 15 µs + 0.58 µs·N for N no-op kernels). 16 local experts × 22 kernels (FP8 current scaling:
    10 forward + 12 backward) × 0.58 µs = 204.16 µs per layer and micro-batch; nothing outside a graph."""
    assert moe.GRAPH_NODE_GAP_US == 0.58
    fwd = float(moe.graph_node_gap_s(16, 10, gap_us=0.58, graphed=1.0))
    bwd = float(moe.graph_node_gap_s(16, 12, gap_us=0.58, graphed=1.0))
    assert fwd + bwd == pytest.approx(204.16e-6)
    assert float(moe.graph_node_gap_s(16, 10, gap_us=0.58, graphed=0.0)) == 0.0


def _qwen3_b200_block(**options):
    """Qwen3-30B-A3B on 8 B200 at EP 8 (the 25.09 Bridge plan: 128/8 = 16 local experts), FP8 current scaling."""
    req = make_request(
        model="qwen3-30b-a3b", hardware="dgx-b200-superpod", gpus=8, ep=8, micro_batch=1, global_batch=512,
        options={"moe_load_imbalance": 1.0, "fp8": "e4m3", "fp8_recipe": "tensorwise", **options},
    )  # fmt: skip
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    return req.ctx, {k: float(np.ravel(v)[0]) for k, v in blocks.moe_mlp_block(lt, req.ctx).items()}


def test_whole_layer_graphs_trade_host_time_for_the_kernels_gpu_floor_by_hand():
    """Megatron-Core's whole-layer graphs (cuda_graph_impl local, no scope) take the 16 experts' 10 forward
    and 12 backward ops off the host (t_op each) and half a layer's overhead τ/2 off the MoE block, but the
    GPU still pays each replayed kernel: 0.58 µs per GEMM node, 2.0 µs per quantisation kernel (FP8 current
    scaling: 2 GEMMs + 8 kernels forward, 4 + 8 backward). Forward eager − graphed = 16·10·t_op + τ/2 −
    16·(2·0.58 + 8·2.0) µs; graphed 274.56 µs forward, 16·(4·0.58 + 8·2.0) = 293.12 µs backward."""
    ctx, eager = _qwen3_b200_block()
    _, graphed = _qwen3_b200_block(cuda_graph_impl="local")
    cal = ctx.hardware.calibration
    half_tau = 0.5 * cal.layer_overhead_us * 1e-6
    t_op = cal.moe_host_op_us * 1e-6
    assert eager["fwd"] - graphed["fwd"] == pytest.approx(16 * 10 * t_op + half_tau - 274.56e-6, rel=1e-9)
    assert moe.expert_graph_gap_s(16, ctx, graphed=1.0) == pytest.approx((274.56e-6, 293.12e-6))
    assert moe.expert_graph_gap_s(16, ctx, graphed=0.0) == pytest.approx((0.0, 0.0))


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
    the forward pays the activation 2·3·A·f_e at HBM speed, the eager clamp 16·A·f_e and fc2's bias
    28·A·h bytes at the fraction of HBM PyTorch's eager kernels reach on B200 (0.744 against the law's
    0.89: r = 0.89/0.744 = 1.1962), and 16 experts × 4 ops × t_op on the host; TE's fused grouped MLP
    none of them."""
    lt, ctx, unfused = _moe_block()
    _, _, fused = _moe_block(use_transformer_engine_op_fuser=True)
    A, f_e, h = 16_384, 2880, 2880
    hw = ctx.hardware
    hbm = hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency
    r = 0.89 / 0.744
    assert (hw.calibration.memory_efficiency, hw.gpu.eager_hbm_frac) == (0.89, 0.744)
    bytes_ = 2 * 3 * A * f_e + r * (16 * A * f_e + 28 * A * h)
    host = 16 * 4 * hw.calibration.moe_host_op_us * 1e-6
    assert unfused["fwd"] - fused["fwd"] == pytest.approx(bytes_ / hbm + host, rel=1e-9)
    assert unfused["bwd"] - fused["bwd"] == pytest.approx(
        2 * bytes_ / hbm + 16 * 7 * hw.calibration.moe_host_op_us * 1e-6
    )


def test_alltoall_sorts_by_local_expert_by_hand():
    """The alltoall dispatcher sorts the copies it received by local expert and back
    (sort_chunks_by_idxs, Megatron-Core token_dispatcher.py core_r0.16.0): 2·(2 + 2) = 8 bytes per element
    of the A·h copies when E/ep > 1. GPT-OSS-120B's 26.04 GB200 shape, b 4 × 4,096 tokens, top-4:
    A = 65,536 pairs, h = 2,880 -> 8 × 65,536 × 2,880 = 1,509,949,440 bytes a forward; none with one local
    expert (EP 128) or with the flex dispatcher, which permutes once after the exchange."""
    assert float(moe.sort_chunks_bytes(65_536, 2880, 128 / 64, moe.DISPATCHER_KINDS["alltoall"])) == 1_509_949_440
    kinds = np.array([moe.DISPATCHER_KINDS[k] for k in ("allgather", "alltoall", "flex", "alltoall")])
    local = np.array([2.0, 2.0, 2.0, 1.0])
    assert moe.sort_chunks_bytes(65_536, 2880, local, kinds).tolist() == [0.0, 1_509_949_440.0, 0.0, 0.0]

    def block(dispatcher):
        req = make_request(
            model="gpt-oss-120b", hardware="gb200-nvl72", gpus=64, ep=64, micro_batch=4, global_batch=1280,
            moe_token_dispatcher=dispatcher, options={"moe_load_imbalance": 1.0},
        )  # fmt: skip
        lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
        return req.ctx, {k: float(np.ravel(v)[0]) for k, v in blocks.moe_mlp_block(lt, req.ctx).items()}

    ctx, alltoall = block("alltoall")
    _, flex = block("flex")
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    # the same bytes forward, twice in the backward (compute.BACKWARD_ELEMENTWISE_FACTOR): 3 × 0.212 ms on GB200
    assert alltoall["mem"] - flex["mem"] == pytest.approx(3 * 1_509_949_440 / hbm, rel=1e-9)


def test_fp8_padding_copies_by_hand():
    """TE's Fp8Padding / Fp8Unpadding around TEGroupedMLP's grouped GEMMs with FP8 (Megatron-Core
    moe/experts.py core_r0.14-0.18; TE pytorch/module/fp8_padding.py): when an expert's rows are not a
    multiple of 16 (32 for MXFP8) the routed input is copied into a padded buffer and the output back,
    2·(2 + 2) = 8 bytes per element of the A·h copies a forward, as many in the backward. Qwen3-235B-A22B
    on 256 H100 (TP 2, EP 32, b 1): A = 4,096/2 tokens × 8 = 16,384 pairs, h = 4,096 ->
    8 × 16,384 × 4,096 = 536,870,912 bytes. None in BF16, none behind the flex dispatcher (HybridEP
    and DeepEP hand over aligned counts), none under drop-and-pad when capacity·etp·ep is aligned."""
    kind = moe.DISPATCHER_KINDS
    pad = moe.fp8_padding_bytes(16_384, 4096, kind["alltoall"], recipe="tensorwise", counts_per_expert=None)
    assert float(pad) == 536_870_912
    assert float(moe.fp8_padding_bytes(16_384, 4096, kind["flex"], recipe="tensorwise", counts_per_expert=None)) == 0
    assert float(moe.fp8_padding_bytes(16_384, 4096, kind["alltoall"], recipe=None, counts_per_expert=None)) == 0
    # drop-and-pad, Qwen3-30B-A3B on 8 B200 at b 1 (25.09): capacity = ⌈4,096 × 8 / 128⌉ = 256, 256 × 1 × 8 = 2,048
    rows = moe.drop_and_pad_rows(4096, 8, 128, 1, 8, 1.0)
    assert float(rows) == 2048  # a multiple of 16 and of 32: no copy
    assert float(moe.fp8_padding_bytes(32_768, 2048, kind["alltoall"], recipe="mxfp8", counts_per_expert=rows)) == 0
    # capacity factor 1.1: ⌈256 × 1.1⌉ = 282 rows a rank, 2,256 = 16 × 141 (aligned for tensorwise), not 32 × k
    rows = moe.drop_and_pad_rows(4096, 8, 128, 1, 8, 1.1)
    assert float(rows) == 2256
    assert float(moe.fp8_padding_bytes(1, 1, kind["alltoall"], recipe="tensorwise", counts_per_expert=rows)) == 0
    assert float(moe.fp8_padding_bytes(1, 1, kind["alltoall"], recipe="mxfp8", counts_per_expert=rows)) == 8

    def block(dispatcher, **opts):
        req = make_request(
            model="qwen3-235b-a22b", hardware="dgx-h100-superpod", gpus=256, tp=2, pp=8, vpp=4, ep=32,
            sequence_parallel=True, micro_batch=1, global_batch=2048, moe_token_dispatcher=dispatcher,
            options={"moe_load_imbalance": 1.0, "fp8": "e4m3", "fp8_recipe": "tensorwise", **opts},
        )  # fmt: skip
        lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
        return req.ctx, {k: float(np.ravel(v)[0]) for k, v in blocks.moe_mlp_block(lt, req.ctx).items()}

    ctx, alltoall = block("alltoall")
    hbm = ctx.hardware.gpu.hbm_bytes_per_s * ctx.hardware.calibration.memory_efficiency
    # the experts' forward carries the 536,870,912 bytes (0.18 ms on H100 at 0.89 × 3.35 TB/s), the backward as many
    assert alltoall["experts_fwd"] - block("flex")[1]["experts_fwd"] == pytest.approx(536_870_912 / hbm, rel=1e-9)
    assert alltoall["mem"] - block("flex")[1]["mem"] == pytest.approx(
        2 * 536_870_912 / hbm + 3 * float(moe.sort_chunks_bytes(16_384, 4096, 256 / 32, kind["alltoall"])) / hbm,
        rel=1e-9,
    )
    # TE's fused grouped MLP (the op fuser) runs no Fp8Padding
    fused = {k: block(k, use_transformer_engine_op_fuser=True)[1]["experts_fwd"] for k in ("alltoall", "flex")}
    assert fused["alltoall"] == pytest.approx(fused["flex"], rel=1e-12)


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


def test_consistency_sigmas_by_hand(monkeypatch):
    """|v_a − v_b| / √(σ_a² + σ_b²): 11.7 ± 2.1 against 7.66 ± 0.63 is 4.04 / 2.19 = 1.84 σ, within
    CONSISTENT_SIGMAS (2) (GPT-OSS-120B against the other three families on 2026-12-04: pooled)."""
    fits = {("gpt-oss-120b",): moe_fit.MoeFit(11.7, 2.1, 20, 0.045)}
    rest = moe_fit.MoeFit(7.66, 0.63, 63, 0.048)
    monkeypatch.setattr(
        moe_fit, "fit", lambda runs, base=None: fits.get(tuple({r.request["model"] for r in runs}), rest)
    )
    assert moe_fit.consistency_sigmas("gpt-oss-120b") == pytest.approx(4.04 / (2.1**2 + 0.63**2) ** 0.5, rel=1e-9)
    assert moe_fit.consistency_sigmas("gpt-oss-120b") == pytest.approx(1.84, abs=0.005)


def _inverse_variance_fit(alone: dict):
    """A stand-in for moe_fit.fit: the families' own values pooled by inverse variance, v = Σ(v/σ²)/Σ(1/σ²),
    σ = 1/√Σ(1/σ²) (what a least-squares fit of one shared value gives when each family's rows pin their own)."""

    def fit(runs, base=None):
        models = sorted({r.request["model"] for r in runs})
        w = {m: 1.0 / alone[m][1] ** 2 for m in models}
        value = sum(alone[m][0] * w[m] for m in models) / sum(w.values())
        return moe_fit.MoeFit(value, sum(w.values()) ** -0.5, len(runs), 0.0)

    return fit


def test_pooled_models_drops_the_family_beyond_two_sigma_and_retests_the_rest_by_hand(monkeypatch):
    """Families alone: DeepSeek-V3 9.0 ± 1.0, Qwen3-235B 5.0 ± 1.0, Qwen3-30B 8.8 ± 1.0, GPT-OSS 11.7 ± 2.0 µs.
    Round 1, each against the other three pooled by inverse variance (weights 1, 1, 1, ¼):
      Qwen3-235B against (9.0 + 8.8 + 11.7/4)/2.25 = 9.2111 ± 1/√2.25 = 0.6667: 4.2111/√(1 + 0.4444) = 3.504 σ;
      DeepSeek-V3 against (5.0 + 8.8 + 2.925)/2.25 = 7.4333: 1.5667/1.2019 = 1.304 σ;
      Qwen3-30B against (9.0 + 5.0 + 2.925)/2.25 = 7.5222: 1.2778/1.2019 = 1.063 σ;
      GPT-OSS against (9.0 + 5.0 + 8.8)/3 = 7.6 ± 0.5774: 4.1/√(4 + 0.3333) = 1.970 σ.
    Qwen3-235B is furthest and beyond 2 σ: predicted. Round 2 without it:
      DeepSeek-V3 against (8.8 + 2.925)/1.25 = 9.38 ± 0.8944: 0.38/√1.8 = 0.283 σ;
      Qwen3-30B against (9.0 + 2.925)/1.25 = 9.54: 0.74/1.3416 = 0.552 σ;
      GPT-OSS against 8.9 ± 0.7071: 2.8/√4.5 = 1.320 σ - all within: pooled over three, and Qwen3-235B is
    3.504 σ from their fit (9.2111 ± 0.6667, as in round 1). GPT-OSS at 1.97 σ in round 1 would have stayed even
    beside Qwen3-235B: the test is the furthest family first, then the rest again."""
    alone = {
        "deepseek-v3": (9.0, 1.0),
        "qwen3-235b-a22b": (5.0, 1.0),
        "qwen3-30b-a3b": (8.8, 1.0),
        "gpt-oss-120b": (11.7, 2.0),
    }
    monkeypatch.setattr(moe_fit, "fit", _inverse_variance_fit(alone))
    pooling = moe_fit.pooled_models(load_moe_runs())
    assert pooling.pooled == ("deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b")
    assert pooling.left_out() == ("qwen3-235b-a22b",)
    expected = {"deepseek-v3": 0.283, "qwen3-235b-a22b": 3.504, "qwen3-30b-a3b": 0.552, "gpt-oss-120b": 1.320}
    assert pooling.sigmas == pytest.approx(expected, abs=0.001)
    text = moe_fit.pooling_text(pooling)
    assert "pooled over DeepSeek-V3, Qwen3-30B-A3B, GPT-OSS-120B" in text
    assert "Qwen3-235B-A22B predicted, not pooled: its rows alone give 5.00 ± 1.00 µs (the band's floor), 3.5 σ" in text
    # every family far from every other: the test stops at MIN_POOLED, never with one family "pooled" alone
    apart = {m: (5.0 + 4.0 * i, 0.1) for i, m in enumerate(moe_fit.FIT_MODELS)}
    monkeypatch.setattr(moe_fit, "fit", _inverse_variance_fit(apart))
    assert len(moe_fit.pooled_models(load_moe_runs()).pooled) == moe_fit.MIN_POOLED


def test_the_shipped_t_op_pools_three_families_and_predicts_qwen3_235b():
    """On the shipped presets: Qwen3-235B-A22B's rows alone reach the band's floor, 5.0 ± 1.0 µs, against the other
    three's 9.2 ± 0.7: beyond CONSISTENT_SIGMAS, so it is predicted, not pooled (its rows where t_op does not enter,
    whole-step CUDA graphs, read −4.9..+4.9 %: the family's residuals are not its host time's); GPT-OSS-120B, the
    furthest pooled family, within it (11.7 ± 2.1 µs alone)."""
    pooled = ("deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b")
    note = load_hardware("gb200-nvl72").calibration.factors["moe_host_op_us"].source
    assert "Qwen3-235B-A22B predicted, not pooled" in note and "(DeepSeek-V3, Qwen3-30B-A3B, GPT-OSS-120B on" in note
    assert moe_fit.consistency_sigmas("qwen3-235b-a22b", pooled=pooled) > moe_fit.CONSISTENT_SIGMAS
    assert moe_fit.consistency_sigmas("gpt-oss-120b", pooled=pooled) < moe_fit.CONSISTENT_SIGMAS


def test_a2a_fit_recovers_a_known_all_to_all_efficiency():
    """H100 MoE rows whose all-to-all crosses nodes (Qwen3-30B EP 16, Qwen3-235B EP 32), 'published' as
    the model's own with η_a2a = 0.55 and t_op at the preset's: fit_a2a gives back 0.55, σ ~ 0."""
    from planner.fidelity.calibrate import with_calibration

    ids = ("MB-26.04-H100-QWEN3-30B-16", "MB-26.04-H100-QWEN3-235B-256")
    runs = [r for r in load_moe_runs() if r.id in ids]
    truth = with_calibration(load_hardware("dgx-h100-superpod"), {"a2a_network_efficiency": 0.55})
    synthetic = [replace(r, published=predict(r, req=prepare(r, truth))) for r in runs]
    f = moe_fit.fit_a2a("dgx-h100-superpod", synthetic)
    a2a = f.factors["a2a_network_efficiency"]
    assert len(synthetic) == 2 and a2a.status == "fitted"
    assert a2a.value == pytest.approx(0.55, abs=0.002) and a2a.sigma < 0.01


def _qwen3_30b_h100_ab(dispatcher: str, overlap: bool, *, delay_wgrad: bool = False, graphs: tuple = ()) -> float:
    opts = dict(
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,
        grad_reduce_in_bf16=True,
        delay_wgrad_compute=delay_wgrad,
    )
    if graphs:
        opts |= dict(cuda_graph_impl="transformer_engine", cuda_graph_modules=graphs)
    if dispatcher == "flex":
        opts |= dict(
            moe_flex_dispatcher_backend="hybridep",
            moe_flex_dispatcher_num_sms=32,
            cuda_graph_impl="transformer_engine",
            cuda_graph_modules=("moe_router", "moe_preprocess"),
        )
    req = make_request(
        model="qwen3-30b-a3b", hardware=load_hardware("dgx-h100-superpod"), gpus=16, ep=16, micro_batch=1,
        global_batch=1024, seq_len=4096,
        recompute="none", distributed_optimizer=True, moe_token_dispatcher=dispatcher,
        overlap_moe_expert_parallel_comm=overlap, options=opts,
    )  # fmt: skip
    return explain(req)["estimate"]["iteration_s"]


@pytest.mark.parametrize(
    "dispatcher, overlap, delay_wgrad, measured_s, within",
    [
        ("flex", False, False, 24.71, 0.08),  # HybridEP, overlap off
        ("flex", True, False, 20.99, 0.08),  # HybridEP, overlap on (independent validation)
        ("alltoall", False, False, 41.25, 0.08),
        # the overlapped alltoall step: 11.6 % fast after the 2026-12-01 recalibration (t_op 7.84 -> 6.51 µs, refitted
        # once FP8 current scaling's four kernels per expert quantisation were counted; η_a2a refitted 0.643 -> 0.755
        # earlier on the H100 MoE rows in the bar), 8.1 % since the alltoall dispatcher's sort by local expert
        # (moe.sort_chunks_bytes; the non-overlapped step -1.8 -> +2.3 %). This BF16 step pays per-expert host time
        # the fit now prices lower
        # 10.0 % fast after the 2026-12-02 refit (η_a2a 0.779 -> 0.807: the all-to-all itself is priced cheaper)
        # 10.3 % fast after the second 2026-12-02 refit (t_op 7.38 -> 7.71 µs, η_a2a 0.807 -> 0.815, GB300 rows in);
        # +3.4 % (32.37 s) since the combined schedule's host pacing (moe.host_paced_step_s, hostov20): this step is
        # host-paced, and this A/B is one of the two that give H_L (9,061.3 µs alone; the shipped mean 9,222.8 µs)
        ("alltoall", True, False, 31.31, 0.06),
        ("alltoall", True, True, 31.20, 0.06),  # + --delay-wgrad-compute: no separate gain, measured or predicted
    ],
)
def test_a2a_overlap_against_the_bridge_a_b_runs(dispatcher, overlap, delay_wgrad, measured_s, within):
    """Megatron-Bridge skill nemo-mbridge-perf-moe-comm-overlap (SKILL.md @ 067f987): Qwen3-30B-A3B on 16
    H100, BF16, EP 16, b 1, GBS 1024, force-balanced; one knob toggled at a time. Predicted within 8 %
    of each step time, the overlapped alltoall within 6 % (2026-12-03, the combined schedule's host pacing: HybridEP
    −0.4 / −1.2 %, alltoall −0.9 / +3.4 / +3.8 %; docs/cost-model.md §13.3)."""
    assert _qwen3_30b_h100_ab(dispatcher, overlap, delay_wgrad=delay_wgrad) == pytest.approx(measured_s, rel=within)


@pytest.mark.parametrize("graphs, measured_s", [((), 41.36), (("attn", "moe_router", "moe_preprocess"), 42.00)])
def test_te_scoped_graphs_against_the_bridge_eager_a_b(graphs, measured_s):
    """Megatron-Bridge docs/training/cuda-graphs.md (v0.5.0 l.147-152, v0.6.0 the same; PR 3868): Qwen3-30B-A3B
    on 16 H100, BF16, EP 16, b 1, GBS 1024, alltoall dispatcher, no A2A overlap: eager 41.36 s against
    TE-scoped attn + moe_router + moe_preprocess graphs 42.00 s a step (replay iterations 5-8). Predicted
    40.83 s (-1.3 %) and 39.24 s (-6.6 %): the model credits the attention graph with half of τ (3·τ/2 a
    layer and micro-batch, 1.6 s a step) where the A/B measures no gain (+0.64 s); within 8 % each."""
    assert _qwen3_30b_h100_ab("alltoall", False, graphs=graphs) == pytest.approx(measured_s, rel=0.08)


def _qwen3_30b_mcore_recipe_tflops(fp8_recipe: str | None) -> float:
    """Megatron-LM examples/moe_recipes/qwen3_30b/h100 (PR 5728 @ refs/pull/5728/head): 32 H100, TP1 PP1 EP8, b 1,
    GBS 256, HybridEP, force-balanced; FP8 blockwise adds TE-scoped attn + moe_router + moe_preprocess graphs,
    FP8 weights and bf16 Adam moments (the recipes' only differences)."""
    opts = dict(
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        moe_load_imbalance=1.0,
        moe_flex_dispatcher_backend="hybridep",
    )
    if fp8_recipe:
        opts |= dict(
            fp8="e4m3", fp8_recipe=fp8_recipe, fp8_param_gather=True, use_precision_aware_optimizer=True,
            exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16", cuda_graph_impl="transformer_engine",
            cuda_graph_modules=("attn", "moe_router", "moe_preprocess"),
        )  # fmt: skip
    req = make_request(
        model="qwen3-30b-a3b", hardware=load_hardware("dgx-h100-superpod"), gpus=32, ep=8, micro_batch=1,
        global_batch=256, seq_len=4096, recompute="none", distributed_optimizer=True,
        moe_token_dispatcher="flex", options=opts,
    )  # fmt: skip
    return explain(req)["estimate"]["megatron_tflops_per_gpu"]


@pytest.mark.parametrize("fp8_recipe, measured", [(None, 240.5), ("blockwise", 242.9)])
def test_mcore_qwen3_30b_h100_recipes(fp8_recipe, measured):
    """Megatron-LM PR 5728 (examples/moe_recipes/README.md, median model TFLOP/s per GPU over iterations 30-45):
    Qwen3-30B-A3B on 32 H100 BF16 240.5, FP8 blockwise 242.9 (×1.010). Predicted 222.3 (−7.6 %; its fp32
    gradient reduce-scatter 0.31 s a step) and 227.0 (−6.5 %), ×1.021: the blockwise casts at H100's measured
    0.34 of HBM (fp8_cast_hbm_frac, TE gemm_profiling's H200 FP8Block column; before it, at η_mem, 240.4 and
    ×1.081); the FP8 side's gain includes the attention graph's τ/2, which the Bridge A/B on 16 H100 does not
    measure either (test_te_scoped_graphs_against_the_bridge_eager_a_b). Within 10 %."""
    assert _qwen3_30b_mcore_recipe_tflops(fp8_recipe) == pytest.approx(measured, rel=0.10)


def test_yarn_rotates_q_and_k_as_rope_does():
    """GPT-OSS's YaRN positions are RoPE with scaled frequencies (Megatron-Core YarnRotaryEmbedding feeds
    the same apply_rotary_pos_emb), run op by op (concentration factor 1.347 ≠ 1; Bridge disables the fusion
    for non-'rope' embeddings): its attention half pays RoPE's fused bytes, 4·(s·b)·(a + g)·d_h per layer
    forward, and the unfused path's 24 per element at GB200's measured eager bandwidth, 1.55 TB/s against the
    HBM law's 8 × 0.89 = 7.12 (r = 4.594: (24·r − 4)/4 = 26.56 times the fused kernel's forward); without
    positions it pays none."""
    from planner.presets import load_model

    req = make_request(model="gpt-oss-120b", hardware=load_hardware("gb200-nvl72"), gpus=64, ep=64, micro_batch=4)
    grid = PlanGrid.from_plans([req.plan])

    def attention_fwd(kind):
        from planner.models.spec import PositionEmbedding

        model = load_model("gpt-oss-120b").model_copy(update={"position_embedding_type": PositionEmbedding(kind)})
        ctx = replace(req.ctx, model=model)
        return float(np.ravel(blocks.attention_block(Letters(grid, ctx), ctx)["fwd"])[0])

    yarn, rope, none = attention_fwd("yarn"), attention_fwd("rope"), attention_fwd("none")
    hw = req.ctx.hardware
    rope_s = 4.0 * 4 * 4096 * (64 + 8) * 64 / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    r = 8.0 * 0.89 / 1.55
    assert rope - none == pytest.approx(rope_s) and yarn - rope == pytest.approx((24 * r - 4) / 4 * rope_s)


def test_connection_limited_share_by_hand():
    """f = max(f_SM, φ) where the plan meets Hopper's connection limit, f_SM elsewhere: DeepEP's 20 of 132
    SMs (0.152) against φ = 0.77 → 0.77; NCCL's 32 of 132 (0.242) unlimited → 0.242; no φ (Blackwell) → f_SM."""
    got = moe.connection_limited_share(np.array([20 / 132, 32 / 132]), np.array([True, False]), 0.77)
    assert got.tolist() == pytest.approx([0.77, 32 / 132])
    assert float(moe.connection_limited_share(0.3, True, None)) == 0.3
    assert float(moe.connection_limited_share(0.9, True, 0.77)) == 0.9  # never below the SMs it holds
    assert load_hardware("gb200-nvl72").calibration.persistent_gemm_comm_share is None


def _qwen3_235b_h100_zoo_s(overlap: bool, hardware=None) -> float:
    return zoo_ab_step_s(hardware or load_hardware("dgx-h100-superpod"), overlap)


@pytest.mark.parametrize("overlap, measured_s", [(False, 19.7), (True, 17.6)])
def test_a2a_overlap_at_tp_2_on_h100_against_the_model_zoo_a_b(overlap, measured_s):
    """yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md @ e865051: Qwen3-235B-A22B on 256 H100,
    TP2 PP8 VPP4 EP32, DeepEP, BF16, MBS 1, GBS 2048, recompute layernorm and moe_act: 19.7 s, 17.6 s with
    the 1F1B A2A overlap (x1.119). Each step within 8 % (the step times are the throughput fit's; φ is
    anchored to their ratio, below)."""
    assert _qwen3_235b_h100_zoo_s(overlap) == pytest.approx(measured_s, rel=0.08)


def test_the_a_b_step_is_the_one_explain_shows():
    # φ's solve reads the A/B's step from the plan's evaluation, not from explain (about 30 of them a solve):
    # the same number, at the shipped φ and at another
    from planner.api import explain
    from planner.fidelity.connection_fit import with_phi, zoo_ab_request

    h100 = load_hardware("dgx-h100-superpod")
    for hw in (h100, with_phi(h100, 0.8)):
        for overlap in (False, True):
            shown = explain(zoo_ab_request(hw, overlap))["estimate"]["iteration_s"]
            assert zoo_ab_step_s(hw, overlap) == shown


def test_model_zoo_gain_and_its_rounding_by_hand():
    """G = 19.7/17.6 = 1.11932; times rounded to 0.1 s: σ_t = 0.05/√3 = 0.028868 s each,
    σ_G = G·√((0.028868/19.7)² + (0.028868/17.6)²) = 1.11932 × 0.0021994 = 0.0024618."""
    gain, sigma = measured_gain()
    assert gain == pytest.approx(1.11932, abs=1e-5) and sigma == pytest.approx(0.0024618, abs=1e-6)


def test_shipped_phi_reproduces_the_model_zoo_gain():
    """The preset's φ is solved (calibrate --moe) so that the A/B's predicted gain is the measured one,
    within 2 σ_G (0.005); with the dispatcher's SM share alone the overlap would gain x1.150 (x1.134 at H_L 9,437.2 µs,
    before DGX B200 took DGX H100's fabric factors, 2026-12-04; x1.34 before the combined schedule's host pacing,
    2026-12-03: the host, 9,222.8 + 4·6·7.96 = 9,413.8 µs a paired layer, paces the overlapped step below φ ≈ 0.62;
    x1.37 before the 2026-12-02 refit; Hopper's connection limit takes the rest)."""
    hw = load_hardware("dgx-h100-superpod")
    assert zoo_gain(hw) == pytest.approx(19.7 / 17.6, abs=0.005)
    no_phi = hw.model_copy(update={"calibration": hw.calibration.model_copy(update={PHI: None})})
    assert zoo_gain(no_phi) == pytest.approx(1.150, abs=0.003)


def test_solve_phi_recovers_a_share_and_never_parks_at_a_bound():
    """The gain predicted at φ = 0.8 solved back gives 0.8 (Brent, xtol 1e-4); a gain no φ in the band
    [0.15, 1] gives (x2.0: the band spans about x1.02-x1.13, the host's pacing flattening it below φ ≈ 0.62) is not
    identifiable and φ keeps the preset's value, no bound."""
    hw = load_hardware("dgx-h100-superpod")
    got = solve_phi(hw, gain=zoo_gain(hw, 0.8))
    assert got.status == "measured" and got.value == pytest.approx(0.8, abs=1e-3) and 0 < got.sigma < 0.05
    far = solve_phi(hw, gain=2.0)
    assert far.status == "not identifiable" and far.value == hw.calibration.persistent_gemm_comm_share
    assert "the band [0.15, 1] gives" in far.why


def test_explain_names_the_connection_limit_share_where_it_applies():
    def formula(hardware, tp):
        req = make_request(
            model="qwen3-30b-a3b", hardware=load_hardware(hardware), gpus=16, tp=tp, ep=8, etp=1,
            micro_batch=1, global_batch=256, sequence_parallel=tp > 1, moe_token_dispatcher="alltoall",
            overlap_moe_expert_parallel_comm=True, options=dict(delay_wgrad_compute=True),
        )  # fmt: skip
        return explain(req)["estimate"]["formulas"]["time"]["moe_comm"]["formula"]

    phi = load_hardware("dgx-h100-superpod").calibration.persistent_gemm_comm_share
    assert f"at least φ = {phi:g}" in formula("dgx-h100-superpod", 2)
    assert "φ" not in formula("dgx-h100-superpod", 1) and "φ" not in formula("gb200-nvl72", 2)


@pytest.mark.parametrize(
    "modules, moe_layer, shared_out, tensors",
    [
        ((), True, False, 4),  # the whole layer: input and output, forward and backward
        (("attn",), False, False, 4),  # attention only: its output
        (("attn", "moe_router", "moe_preprocess"), True, True, 8),  # DeepSeek-V3: hidden, residual, shared out
        (("attn", "moe_router", "moe_preprocess"), True, False, 6),  # Qwen3: hidden, residual
        (("attn", "moe_router", "moe_preprocess"), False, False, 4),  # its dense layers: the attention
        (("moe_router", "moe_preprocess"), False, False, 0),  # nothing of a dense layer in scope
        (("moe_router", "moe_preprocess"), True, False, 6),
        (("attn", "moe"), True, True, 4),  # the whole MoE captured: the layer output
    ],
)
def test_te_graph_static_tensors_by_scope(modules, moe_layer, shared_out, tensors):
    """One Transformer Engine graph per layer (Megatron-LM transformer_layer.py _te_cuda_graph_capture
    @ core_r0.17.0): 2 · (1 input + its outputs) h-wide static tensors, outputs by scope."""
    got = process_memory.te_graph_static_tensors(modules, moe_layer=moe_layer, shared_out=shared_out)
    assert got == tensors


def test_phi_carried_over_says_so_once_however_often_it_is_written():
    from planner.fidelity.connection_fit import PhiFit, phi_factor

    fit = PhiFit(0.73, 0.007, (0.15, 1.0), "measured", 1.119, 1.119)
    entry = load_hardware("dgx-h200-superpod").calibration.factors[PHI]
    for _ in range(2):
        entry = phi_factor(fit, entry, carried_from="dgx-h100-superpod")
    assert entry.source.count("carried over from") == 1 and entry.source.count("band:") == 1
    assert entry.status == "carried over" and "x1.119 at 0.730" in entry.source


def test_qk_norms_by_hand():
    """Qwen3's per-head query and key norms (Megatron-Core SelfAttention's q_layernorm/k_layernorm) move
    4·(s·b)·(a + g)·d_h bytes a forward: Qwen3-30B-A3B at b 1, s 4,096, t 1 (a 32, g 4, d_h 128) 4 · 4,096
    · 36 · 128 = 75,497,472 B, twice that in the backward (``compute.BACKWARD_ELEMENTWISE_FACTOR``); at
    t 2 half; a model without the norms pays none."""
    assert float(compute.qk_norm_bytes(1, 4096, 32, 4, 128, 1)) == 75_497_472
    assert float(compute.qk_norm_bytes(1, 4096, 32, 4, 128, 2)) == 75_497_472 / 2
    req = make_request(model="qwen3-30b-a3b", hardware=load_hardware("dgx-b200-superpod"), gpus=8, ep=8, micro_batch=1)
    grid = PlanGrid.from_plans([req.plan])

    def attention(qk: bool):
        ctx = replace(req.ctx, model=req.ctx.model.model_copy(update={"qk_layernorm": qk}))
        block = blocks.attention_block(Letters(grid, ctx), ctx)
        return float(np.ravel(block["fwd"])[0]), float(np.ravel(block["bwd"])[0])

    (fwd, bwd), (fwd0, bwd0) = attention(True), attention(False)
    hw = req.ctx.hardware
    norm_s = 75_497_472 / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    assert fwd - fwd0 == pytest.approx(norm_s) and bwd - bwd0 == pytest.approx(2 * norm_s)


def test_shared_experts_keep_no_attention_scores_with_unfused_attention():
    """The shared experts' MLP keeps what a dense MLP of width f_s keeps (Korthikanti et al. 2022 §4.1), whatever the
    attention kernel: the unfused core's 5·a·s/h scores term belongs to the attention block alone (it was counted in
    the shared experts too: 241 GiB over a stage of dgxc-benchmarking's 25.04 GB200 DeepSeek-V3 plan, which ran on
    184 GiB GPUs). DeepSeek-V3, TP 2 with SP, b 1, s 4,096: the SwiGLU activation's three tensors of f_s = 2,048
    channels, 2 bytes each, split over t: s·b·6·f_s/t = 4,096·6·2,048/2 = 25,165,824 bytes a layer and micro-batch,
    with either kernel (the scores would be 5·a·s²·b/t = 5,368,709,120 bytes more)."""
    from planner.costs.layer_memory import kept_parts
    from planner.space.grid import PlanGrid

    def shared_bytes(kernel: str) -> float:
        req = make_request(
            model="deepseek-v3",
            hardware=load_hardware("gb200-nvl72"),
            gpus=128,
            tp=2,
            ep=64,
            global_batch=1024,
            seq_len=4096,
            sequence_parallel=True,
            distributed_optimizer=True,
            recompute="selective",
            options={"attention_kernel": kernel, "recompute_modules": ("core_attn",)},
        )
        lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
        return float(np.ravel(kept_parts(lt, req.ctx)["shared"])[0])

    assert shared_bytes("flash") == shared_bytes("unfused") == 4096 * 6 * 2048 / 2 == 25_165_824
