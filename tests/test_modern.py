"""Issue 5: grouped-query attention, SwiGLU, MoE, context parallelism, FP8 and Megatron FSDP,
each term against a published number or a hand computation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import explain, make_request
from planner.costs import moe
from planner.costs.estimate import Letters, evaluate
from planner.costs.flops import Shape, model_flops
from planner.costs.stage_memory import stage_memory_bytes
from planner.hardware.collectives import group_link
from planner.models.params import active_params, total_params
from planner.presets import load_hardware, load_model
from planner.space.grid import PlanGrid

GIB = 2**30


def _stage0(req):
    lt = Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    mem = stage_memory_bytes(lt, req.ctx, np.zeros((1, 1), dtype=int))
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in mem.items()}


def test_mixtral_parameter_counts_match_the_paper():
    # Jiang et al. 2024, Mixtral of Experts: 46.7B parameters in all, 12.9B active per token
    m = load_model("mixtral-8x7b")
    assert total_params(m) / 1e9 == pytest.approx(46.7, abs=0.05)
    assert active_params(m) / 1e9 == pytest.approx(12.9, abs=0.05)


def test_llama3_405b_parameter_count():
    # Llama 3 paper Table 3: 405B; by hand 126·(2·16384·(16384 + 8·128·2)/… ) - written out:
    h, a, g, d, f, L, V = 16384, 128, 8, 128, 53248, 126, 128256
    per_layer = h * (a + 2 * g) * d + a * d * h + 3 * h * f + 2 * h  # QKV, proj, SwiGLU, two RMSNorms
    by_hand = L * per_layer + 2 * V * h + h  # untied embeddings, final norm
    assert total_params(load_model("llama3.1-405b")) == by_hand
    assert by_hand / 1e9 == pytest.approx(405.85, abs=0.01)


def test_moe_model_flops_match_megatron_formula():
    """Megatron-LM num_floating_point_operations (megatron/training/training.py at commit d98e8a64) for
    Mixtral, causal-halved:
    F = 6T[h(e·f_e·k·L) + L(h(q + 2k_v) + q·h)] + 6Bs²qL + 6T·h·V with e = 3 (SwiGLU)."""
    m = load_model("mixtral-8x7b")
    B, s = 8, 4096
    T = B * s
    h, L, a, g, d, f_e, k, V = 4096, 32, 32, 8, 128, 14336, 2, 32000
    q, kv = a * d, g * d
    megatron = 6 * T * (h * (3 * f_e * k * L) + L * (h * (q + 2 * kv) + q * h)) + 6 * B * s**2 * q * L + 6 * T * h * V
    ours = model_flops(B, s, V, Shape(L, h, a, g, d, m.ffn, True, moe_layers=L, topk=k, f_e=f_e), attention_frac=0.5)
    assert ours == pytest.approx(megatron, rel=1e-12)


def test_expert_state_shards_over_ep_and_expert_data_parallel():
    # Mixtral, 256 GPUs, tp 2 (etp 1), pp 1: the 8 experts' MLPs split over ep GPUs, the dense part over t
    base = dict(model="mixtral-8x7b", hardware="dgx-h100-superpod", gpus=256, tp=2, etp=1, sequence_parallel=True)
    m = load_model("mixtral-8x7b")
    h, f = 4096, 14336
    expert_mlp = 3 * h * f  # one SwiGLU expert, no biases
    for ep in (1, 2, 4, 8):
        mem = _stage0(make_request(ep=ep, **base))
        assert mem["expert_params"] == pytest.approx(m.num_layers * 8 / ep * expert_mlp)
    # optimizer states of experts shard over the expert data-parallel group 256/(etp·ep·pp)
    dopt = _stage0(make_request(ep=8, distributed_optimizer=True, **base))
    edp = 256 // 8
    dense_opt = 12 * dopt["dense_params"] / 128  # d·c = 128
    assert dopt["optimizer"] == pytest.approx(dense_opt + 12 * dopt["expert_params"] / edp)


def test_alltoall_dispatcher_time_by_hand():
    hw = load_hardware("dgx-h100-superpod")
    link = group_link(hw, 8, 1)  # ep 8 inside one node: NVLink
    A = 4096 * 2 * 1.1  # tokens × top-2 × imbalance
    send = 2 * A * 4096  # bf16 token copies
    nvlink = 450e9 * hw.calibration.nvlink_bus_efficiency
    one = 7 / 8 * send / nvlink + hw.node.nvlink_latency_us * 1e-6  # every peer posted in one NCCL group
    got = moe.dispatcher_time_s(A, 4096, 4096, 8, 1, link, group_link(hw, 1, 1), activation_bytes=2, kind="alltoall")
    assert float(got) == pytest.approx(2 * one)  # dispatch + combine


def test_context_parallel_ring_is_hidden_when_attention_is_long_enough():
    # Llama 3 8B, s = 32768, cp 4 in one node: each of the 3 ring steps moves b·(s/c)·2·g·d/t bf16 values
    kw = dict(
        model="llama3-8b",
        hardware="dgx-h100-superpod",
        gpus=8,
        tp=2,
        sequence_parallel=True,
        seq_len=32768,
        global_batch=8,
    )
    req = make_request(cp=4, **kw)
    chunk = 2 * 1 * (32768 / 4) * 2 * 8 * 128 / 2
    hw = req.ctx.hardware
    step = chunk / (450e9 * hw.calibration.nvlink_bus_efficiency) + hw.node.nvlink_latency_us * 1e-6
    assert step < 1e-3  # 33.6 MB… no: 16.8 MB over NVLink, ~47 µs
    one = evaluate(PlanGrid.from_plans([make_request(cp=1, **kw).plan]), make_request(cp=1, **kw).ctx)
    four = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    # splitting the sequence 4 ways quarters the activations per GPU (the layer terms scale with s/c)
    assert four.memory["activations"][0] < 0.3 * one.memory["activations"][0]


@settings(max_examples=30, deadline=None)
@given(cp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4]), b=st.sampled_from([1, 2]))
def test_activation_memory_falls_with_cp(cp, tp, b):
    kw = dict(
        model="llama3-8b",
        hardware="dgx-h100-superpod",
        tp=tp,
        sequence_parallel=tp > 1,
        micro_batch=b,
        seq_len=65536,
        global_batch=64,
    )
    small = _stage0(make_request(gpus=tp * cp, cp=cp, **kw))["activations"]
    large = _stage0(make_request(gpus=tp * cp * 2, cp=cp * 2, **kw))["activations"]
    assert large < small


@settings(max_examples=30, deadline=None)
@given(ep=st.sampled_from([1, 2, 4]), etp=st.sampled_from([1, 2]), dopt=st.booleans())
def test_expert_memory_falls_with_ep(ep, etp, dopt):
    kw = dict(
        model="mixtral-8x7b",
        hardware="dgx-h100-superpod",
        gpus=64,
        tp=2,
        etp=etp,
        sequence_parallel=True,
        distributed_optimizer=dopt,
    )
    a, b = _stage0(make_request(ep=ep, **kw)), _stage0(make_request(ep=ep * 2, **kw))
    assert b["expert_params"] == pytest.approx(a["expert_params"] / 2)
    assert b["weights"] + b["gradients"] + b["optimizer"] < a["weights"] + a["gradients"] + a["optimizer"]


def test_fp8_keeps_weight_copies_and_halves_linear_inputs():
    kw = dict(model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, tp=8, sequence_parallel=True)
    bf16 = _stage0(make_request(**kw))
    fp8 = _stage0(make_request(options={"fp8": "hybrid"}, **kw))
    gather = _stage0(make_request(options={"fp8": "hybrid", "fp8_param_gather": True}, **kw))
    h, a, g, d, f, t = 4096, 32, 8, 128, 14336, 8
    layer = (h * (a + 2 * g) * d + a * d * h + 3 * h * f) / t + 2 * h  # one Llama-3-8B layer on one of 8 TP ranks
    # Transformer Engine's FP8 copy and its transpose: 2 more bytes per transformer-layer parameter
    assert fp8["weights"] - bf16["weights"] == pytest.approx(2 * 32 * layer)
    assert gather["weights"] == pytest.approx(bf16["weights"])  # --fp8-param-gather: no 16-bit weight copy
    # linear inputs saved in FP8: the (replicated) 4sbh of attention and MLP inputs, projection and fc2 inputs halved
    assert fp8["activations"] < bf16["activations"]


def test_fp8_speeds_up_but_mfu_stays_on_the_bf16_peak():
    kw = dict(model="llama3-70b", hardware="dgx-h100-superpod", gpus=64, tp=8, pp=4, sequence_parallel=True)
    bf16, fp8 = (
        explain(make_request(**kw))["estimate"],
        explain(make_request(options={"fp8": "hybrid"}, **kw))["estimate"],
    )
    assert fp8["iteration_s"] < bf16["iteration_s"]
    peak = 989.4e12  # H100 dense BF16
    assert fp8["mfu"] == pytest.approx(fp8["tflops_per_gpu"] * 1e12 / peak)


def test_fp8_needs_fp8_tensor_cores():
    from planner.errors import PlannerError

    with pytest.raises(PlannerError, match="FP8 tensor cores"):
        make_request(model="gpt3-175b", gpus=64, tp=8, pp=8, options={"fp8": "e4m3"})


def test_fsdp_shards_weights_gradients_and_optimizer():
    kw = dict(model="llama3-8b", hardware="dgx-h100-superpod", gpus=64, tp=1, distributed_optimizer=True)
    ddp, fsdp = _stage0(make_request(**kw)), _stage0(make_request(fsdp=True, **kw))
    P = ddp["params"]
    assert ddp["weights"] == pytest.approx(2 * P) and ddp["gradients"] == pytest.approx(4 * P)
    one_layer = (P - 2 * 128256 * 4096 - 4096) / 32  # a transformer layer's parameters
    assert fsdp["weights"] == pytest.approx(2 * P / 64 + 2 * 2 * one_layer, rel=1e-6)  # + two layers gathered
    # Megatron FSDP keeps 16-bit main grads by default (--megatron-fsdp-main-grads-dtype auto)
    assert fsdp["gradients"] == pytest.approx(2 * P / 64 + 2 * 2 * one_layer, rel=1e-6)
    assert fsdp["optimizer"] == pytest.approx(ddp["optimizer"])


def test_meta_llama3_405b_plan_is_legal_and_explained_stage_by_stage():
    """Meta's layout for Llama 3.1 405B as P. Balaji presented it ("Herding Llamas", SC'24, the
    hyperparameter slide): TP 8, CP 1, PP 16, DP 128 on 16,384 H100s, 16M-token batches of 8192,
    126 layers over 16 stages with the embedding and the loss each counted as a layer."""
    pj = explain(
        make_request(
            model="llama3.1-405b",
            hardware="dgx-h100-superpod",
            gpus=16384,
            tp=8,
            pp=16,
            stage_split="embedding+loss",
            sequence_parallel=True,
            distributed_optimizer=True,
        )
    )
    assert pj["legal"] and pj["parallel"]["dp"] == 128
    assert pj["parallel"]["stage_layers"] == [7] + [8] * 14 + [7]
    assert len(pj["stages"]) == 16 and 0 < pj["estimate"]["mfu"] < 0.6
    if not pj["estimate"]["fits"]:  # Megatron's layout without recomputation: say by how much and what fits
        assert pj["estimate"]["peak_memory_gib"] > 80
        assert pj["fit_suggestions"] and all(s["peak_memory_gib"] <= 80 for s in pj["fit_suggestions"])


def test_context_parallel_ring_exposure_by_hand():
    """Llama 3 8B at s = 8192 with t = 8 and c = 8: the ring crosses nodes (t·c = 64 > 8 GPUs), so each
    of the c − 1 = 7 transfers sends a b·(s/c)·2·g·d/t chunk over one 400 Gb/s NIC while one unmasked
    step of attention runs - half the steps s/c queries × s/(2c) keys, half s/(2c) × s/c (Megatron's
    load-balanced chunks) - and only what a transfer takes beyond that step is exposed."""
    from planner.costs.blocks import _cp_ring_exposed, attention_core_s
    from planner.costs.compute import flash_attention_time_s

    req = make_request(
        model="llama3-8b", hardware="dgx-h100-superpod", gpus=64, tp=8, cp=8, sequence_parallel=True, global_batch=8
    )
    hw, lt = req.ctx.hardware, Letters(PlanGrid.from_plans([req.plan]), req.ctx)
    chunk = 2 * 1 * (8192 / 8) * 2 * 8 * 128 / 8  # bytes: bf16, K and V, g·d/t channels
    nic = 400e9 / 8 * hw.calibration.network_bus_efficiency  # one rail NIC, NCCL efficiency
    step = chunk / nic + hw.network.tiers[0].latency_us * 1e-6  # two nodes, one leaf switch
    kw = dict(causal=False, kernel=hw.attention, peak_flops_per_s=989.4e12, scale=hw.calibration.attention_scale)
    early = flash_attention_time_s(32 / 8, 1024, 512, 128, 128, **kw)  # b·a/t = 4 query heads
    late = flash_attention_time_s(32 / 8, 512, 1024, 128, 128, **kw)
    step_f, step_b = (float(early[0]) + float(late[0])) / 2, (float(early[1]) + float(late[1])) / 2
    core = attention_core_s(lt, req.ctx, {}, np.zeros((1, 1)), 128, 128)
    assert core["step_fwd"].item() == pytest.approx(step_f) and core["step_bwd"].item() == pytest.approx(step_b)
    fwd, bwd = _cp_ring_exposed(lt, req.ctx, core)
    # the part that hides still holds NCCL's 2 send/receive SMs of 132 (tests/test_fabric.py)
    share = hw.network.nccl_p2p_sms / hw.gpu.sm_count
    assert np.asarray(fwd).item() == pytest.approx(7 * (max(step - step_f, 0.0) + share * min(step, step_f)))
    assert np.asarray(bwd).item() == pytest.approx(7 * (max(2 * step - step_b, 0.0) + share * min(2 * step, step_b)))
    assert np.asarray(fwd).item() > 7 * share * step_f  # at this length the ring is not hidden


def test_expert_work_per_gpu_by_hand():
    """Mixtral on t = 2 with SP: each GPU enters the MoE layer with b·s/(c·t) = 2048 tokens and routes
    each to 2 experts; dropless routing waits for the busiest expert at 1.1 × the mean, a capacity
    factor of 1.0 caps it there."""
    A = moe.expert_token_assignments(1, 4096, 2, 1, 2, imbalance=1.1, capacity_factor=None)
    assert float(A) == pytest.approx(2048 * 2 * 1.1)
    assert float(moe.expert_token_assignments(1, 4096, 2, 1, 2, imbalance=1.1, capacity_factor=1.0)) == pytest.approx(
        4096
    )
    gemms = moe.expert_gemms(A, 4096, 14336, 8, 8, 1, gated=True)  # ep 8: one local expert, whole width
    assert float(gemms["expert_fc1"].flops + gemms["expert_fc2"].flops) == pytest.approx(2 * A * 4096 * 14336 * 3)
    assert float(gemms["expert_fc1"].M) == pytest.approx(A)  # all of this GPU's pairs hit its one expert
    four = moe.expert_gemms(A, 4096, 14336, 8, 2, 1, gated=True)  # ep 2: four local experts share them
    assert float(four["expert_fc1"].M) == pytest.approx(A / 4)
    assert float(four["expert_fc1"].flops) == pytest.approx(float(gemms["expert_fc1"].flops))
    # kept for the backward: routed inputs 2·A·h, SwiGLU internals 6·A·f_e, router/combine 2·T·h
    kept = moe.moe_mlp_activation_bytes(A, 2048, 4096, 14336, 1, gated=True)
    assert float(kept) == pytest.approx(2 * A * 4096 + 6 * A * 14336 + 2 * 2048 * 4096)
