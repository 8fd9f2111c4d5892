"""Memory per GPU against Korthikanti et al. 2022 (Table 2, §4.2.3, §4.3) and Megatron-LM's
distributed-optimizer document (bytes per parameter)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.api import explain, make_request
from planner.costs.memory import (
    activation_bytes_per_layer,
    embedding_activation_bytes,
    layer_activation_parts,
    output_layer_activation_bytes,
    param_state_bytes,
)
from planner.costs.pipeline import in_flight_microbatches
from planner.costs.stage_memory import stage_max

from conftest import GIB, a100, gpt_model, stage_memory_gib

# GPT-3 175B with the Korthikanti et al. 2022 Table 3 setting: s = 2048, b = 1, h = 12288, a = 96, t = 8
s, b, h, a, t = 2048, 1, 12288, 96, 8
sbh = s * b * h
five_as_h = 5 * a * s / h  # = 80 for GPT-3 (K22 §5)

NONE, SELECTIVE, FULL = 0, 1, 2


def act(t=t, *, sp, rc, unfused=True, **kw):
    return float(
        activation_bytes_per_layer(
            s, b, h, a, t, sequence_parallel=np.array(sp), recompute=np.array(rc), unfused_attention=unfused, **kw
        )
    )


def test_gpt3_attention_score_coefficient():
    # Korthikanti et al. 2022 §5: "GPT-3 has 5as/h = 80"
    assert five_as_h == 80


# Korthikanti et al. 2022 Table 2, activation bytes per transformer layer (unfused attention)
def test_table2_no_parallelism():
    # sbh(34 + 5as/h)  (Eq. 1)
    assert act(1, sp=False, rc=NONE) == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)
    assert act(1, sp=False, rc=NONE) == 114 * sbh


def test_table2_tensor_parallel():
    # sbh(10 + 24/t + 5as/(ht))  (Eq. 2) = sbh(10 + 3 + 10) = 23·sbh at t = 8
    assert act(sp=False, rc=NONE) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert act(sp=False, rc=NONE) == 23 * sbh


def test_table2_tensor_and_sequence_parallel():
    # sbh(34/t + 5as/(ht)) = (sbh/t)(34 + 5as/h)  (Eq. 4) = 14.25·sbh at t = 8
    assert act(sp=True, rc=NONE) == pytest.approx(sbh / t * (34 + 5 * a * s / h), rel=1e-12)
    assert act(sp=True, rc=NONE) == 14.25 * sbh


def test_table2_tensor_parallel_selective():
    # sbh(10 + 24/t) = 13·sbh at t = 8
    assert act(sp=False, rc=SELECTIVE) == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert act(sp=False, rc=SELECTIVE) == 13 * sbh


def test_table2_tensor_sequence_parallel_selective():
    # sbh·34/t = 4.25·sbh at t = 8
    assert act(sp=True, rc=SELECTIVE) == pytest.approx(sbh * 34 / t, rel=1e-12)


def test_table2_full_recompute():
    # 2·sbh: only the layer input is kept (K22 Table 2); sharded to 2sbh/t by SP or by
    # --distribute-saved-activations (Megatron-LM arguments.py:1410-1421)
    assert act(sp=False, rc=FULL) == 2 * sbh
    assert act(sp=True, rc=FULL) == 2 * sbh / t
    assert act(sp=False, rc=FULL, distribute_saved=True) == 2 * sbh / t


def test_korthikanti_selective_saves_70_percent_for_gpt3():
    # Korthikanti et al. 2022 §5: selective recomputation saves 70 % of the activation memory for GPT-3
    # (with SP: 34 of 114 sbh kept, 1 − 34/114 = 0.702)
    saved = 1 - act(sp=True, rc=SELECTIVE) / act(sp=True, rc=NONE)
    assert round(100 * saved) == 70


def test_korthikanti_selective_saves_65_percent_for_mt_nlg():
    # Korthikanti et al. 2022 §5: MT-NLG (h = 20480, a = 128) has 5as/h = 64; selective saves 65 %
    h530, a530 = 20480, 128
    assert 5 * a530 * s / h530 == 64
    kw = dict(sequence_parallel=np.array(True), unfused_attention=True)
    keep = activation_bytes_per_layer(s, b, h530, a530, 8, recompute=np.array(SELECTIVE), **kw)
    whole = activation_bytes_per_layer(s, b, h530, a530, 8, recompute=np.array(NONE), **kw)
    assert round(100 * (1 - float(keep / whole))) == 65


def test_flash_attention_drops_the_score_term():
    # no s×s tensor is kept by a flash kernel: Table 2 without 5as/(ht)
    assert act(sp=False, rc=NONE, unfused=False) == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert act(sp=True, rc=NONE, unfused=False) == pytest.approx(sbh * 34 / t, rel=1e-12)
    # ... which leaves selective recompute nothing to save (docs/cost-model.md §5.2)
    assert act(sp=True, rc=SELECTIVE, unfused=False) == act(sp=True, rc=NONE, unfused=False)


def test_activation_bytes_broadcast_over_t_and_b():
    got = activation_bytes_per_layer(
        s,
        np.array([[1], [2]]),
        h,
        a,
        np.array([[1, 2, 4, 8]]),
        sequence_parallel=np.array(False),
        recompute=np.array(NONE),
        unfused_attention=True,
    )
    want = [[bb * sbh * (10 + (24 + 80) / tt) for tt in (1, 2, 4, 8)] for bb in (1, 2)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def layer_activation_coeffs(*args, **kw) -> tuple[float, float]:
    """The attention and MLP parts summed: Table 2's split and replicated coefficients."""
    parts = layer_activation_parts(*args, **kw)
    return parts["attention"][0] + parts["mlp"][0], parts["attention"][1] + parts["mlp"][1]


def test_layer_activation_coeffs_gpt_shapes():
    # Korthikanti et al. 2022 §4.1: split over t: Q, K 4sbh + V 2sbh + projection input 2sbh +
    # fc1 output 8sbh + GeLU output 8sbh = 24; replicated: two LayerNorm inputs 4sbh, attention
    # and MLP inputs 4sbh, two dropout masks 2sbh = 10.
    assert layer_activation_coeffs(12288, 96, 96, 128, 4 * 12288, gated=False, dropout=True) == (24, 10)
    assert layer_activation_coeffs(6144, 64, 64, 96, 4 * 6144, gated=False, dropout=True) == (24, 10)
    # without dropout the two 1-byte masks go: 8
    assert layer_activation_coeffs(6144, 64, 64, 96, 4 * 6144, gated=False, dropout=False)[1] == 8


def test_layer_activation_coeffs_gqa_swiglu():
    # Llama-3-8B: Q 2ad/h = 2, K and V 4gd/h = 1, projection input 2, SwiGLU 6f/h = 6·14336/4096 = 21
    split, _ = layer_activation_coeffs(4096, 32, 8, 128, 14336, gated=True, dropout=False)
    assert split == pytest.approx(2 + 1 + 2 + 6 * 14336 / 4096, rel=1e-12)


# Megatron-LM docs/user-guide/features/dist_optimizer.md: bytes per parameter
@pytest.mark.parametrize(
    "precision, plain, sharded",
    [("bf16", 18, lambda d: 6 + 12 / d), ("fp16", 20, lambda d: 4 + 16 / d), ("fp32", 16, lambda d: 8 + 8 / d)],
)
@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_bytes_per_parameter(precision, plain, sharded, d):
    n = 1_000_000
    without = param_state_bytes(n, d, precision=precision, distributed_optimizer=np.array(False))
    assert sum(float(v) for v in without.values()) == pytest.approx(plain * n, rel=1e-12)
    with_dist = param_state_bytes(n, d, precision=precision, distributed_optimizer=np.array(True))
    assert sum(float(v) for v in with_dist.values()) == pytest.approx(sharded(d) * n, rel=1e-12)


def test_bf16_state_split():
    # bf16 weight 2, fp32 main grad 4, fp32 master weight + Adam m + v 12 (sharded over d)
    st = param_state_bytes(10, 4, precision="bf16", distributed_optimizer=np.array(True))
    assert (float(st["weights"]), float(st["gradients"]), float(st["optimizer"])) == (20, 40, 30)


@pytest.mark.parametrize("p, m", [(8, 64), (8, 3), (16, 16), (4, 1), (1, 10)])
def test_in_flight_1f1b(p, m):
    # 1F1B: stage i holds min(p − i, m) micro-batches (Megatron schedules.py: warm-up p − i − 1, plus one)
    got = in_flight_microbatches(p, m, 1, np.arange(p))
    np.testing.assert_array_equal(got, [min(p - i, m) for i in range(p)])


@pytest.mark.parametrize("p, vpp", [(8, 2), (8, 3), (16, 4), (4, 6)])
def test_in_flight_interleaved_stage0(p, vpp):
    # Korthikanti et al. 2022 §4.2.3: the interleaved schedule's first stage holds
    # p·(1 + (p − 1)/(p·vpp)) micro-batches' worth of its layers (m large)
    m = 16 * p
    assert float(in_flight_microbatches(p, m, vpp, 0)) == pytest.approx(p * (1 + (p - 1) / (p * vpp)), rel=1e-12)


def test_in_flight_interleaved_few_microbatches():
    # with m·vpp chunks in total fewer than the warm-up, all m micro-batches are in flight
    assert float(in_flight_microbatches(8, 8, 2, 0)) == pytest.approx(8.0)  # min(16, 14 + 8 + 1)/2
    assert float(in_flight_microbatches(8, 64, 2, 7)) == pytest.approx(4.5)  # (0 + 8 + 1)/2 on the last stage


def test_in_flight_with_the_a2a_overlap_by_hand():
    """--overlap-moe-expert-parallel-comm: one more warm-up chunk when interleaved (schedules.py: p = 8,
    v = 2, stage 7 warms up 0 + 8 + 1 + 1 = 10 chunks of 1/2), one more layer without pipelining (the
    next micro-batch's forward runs layer by layer beside this one's backward: 1 + 1/4 with 4 layers)."""
    assert float(in_flight_microbatches(8, 64, 2, 7, a2a_overlap=True)) == pytest.approx(5.0)
    assert float(in_flight_microbatches(1, 8, 1, 0, a2a_overlap=True, layers=4)) == pytest.approx(1.25)
    assert float(in_flight_microbatches(1, 1, 1, 0, a2a_overlap=True, layers=4)) == pytest.approx(1.0)


def test_embedding_and_output_layer_activations():
    # Korthikanti et al. 2022 §4.3: embedding dropout mask sbh (÷t with SP); Megatron adds the int64
    # token ids 8sb. Output layer: final LayerNorm input 2sbh + output-layer input 2sbh (÷t with SP)
    # and fp32 logits 4sbV/t: with SP, 4sbh/t·(1 + V/h).
    Vp = 51200
    emb = embedding_activation_bytes(s, b, h, t, sequence_parallel=np.array(True), dropout=True)
    assert float(emb) == sbh / t + 8 * s * b
    emb_no_sp = embedding_activation_bytes(s, b, h, t, sequence_parallel=np.array(False), dropout=True)
    assert float(emb_no_sp) == sbh + 8 * s * b
    out = output_layer_activation_bytes(s, b, h, Vp, t, sequence_parallel=np.array(True))
    assert float(out) == pytest.approx(4 * sbh / t * (1 + Vp / h), rel=1e-12)


def _stage0_activations(model, *, tp, pp, recompute, sp, vpp=1, B=64, unfused=True):
    req = make_request(
        model=model,
        hardware=a100(),
        gpus=tp * pp,
        global_batch=B,
        seq_len=2048,
        precision="bf16",
        tp=tp,
        pp=pp,
        vpp=vpp,
        micro_batch=1,
        sequence_parallel=sp,
        recompute=recompute,
        options={"attention_kernel": "unfused" if unfused else "flash"},
    )
    stages = stage_memory_gib(req.plan, req.ctx)
    return stages[0]["activations"] * GIB


def test_first_stage_activations_korthikanti_eq5_and_eq6():
    # 175B shape, t = 8, p = 8, m = 64 ≥ p, 1F1B: the first stage holds p micro-batches × L/p layers
    # (K22 §4.2.3), plus the embedding's p micro-batches of (sbh/t + 8sb) (§4.3 and Megatron's 8sbp).
    model = gpt_model(96, h, a)
    L, p = 96, 8
    embedding = p * (sbh / t + 8 * s * b)
    # Eq. 5, TP + SP: (sbhL/t)(34 + 5as/h)
    eq5 = sbh * L / t * (34 + 5 * a * s / h)
    assert _stage0_activations(model, tp=8, pp=p, recompute="none", sp=True) == pytest.approx(eq5 + embedding, rel=1e-9)
    # Eq. 6, TP + SP + selective: 34·sbhL/t
    eq6 = 34 * sbh * L / t
    assert _stage0_activations(model, tp=8, pp=p, recompute="selective", sp=True) == pytest.approx(
        eq6 + embedding, rel=1e-9
    )


def test_first_stage_activations_interleaved_factor():
    # K22 §4.2.3: the interleaved schedule multiplies the first stage's Eq. 6 by (1 + (p − 1)/(p·vpp))
    model = gpt_model(96, h, a)
    L, p, vpp = 96, 8, 3
    eq6 = 34 * sbh * L / t * (1 + (p - 1) / (p * vpp))
    got = _stage0_activations(model, tp=8, pp=p, vpp=vpp, recompute="selective", sp=True)
    embedding = p * (sbh / t + 8 * s * b)
    assert got == pytest.approx(eq6 + embedding, rel=1e-9)


def test_full_recompute_stage_holds_inputs_plus_one_whole_layer():
    # full recompute: 2sbh/t per layer kept (SP) for p micro-batches × L/p layers, plus one layer's
    # full activations while it is recomputed, (sbh/t)(34 + 5as/h) (docs/cost-model.md §5.2), less that
    # layer's input, which is already among the kept ones (2sbh/t)
    model = gpt_model(96, h, a)
    L, p = 96, 8
    expected = 2 * sbh / t * L + sbh / t * (34 + 80 - 2) + p * (sbh / t + 8 * s * b)
    assert _stage0_activations(model, tp=8, pp=p, recompute="full", sp=True) == pytest.approx(expected, rel=1e-9)


def test_gpt3_stage_weights_and_states_fp16():
    # Narayanan 2021 GPT-3 plan (t = 8, p = 16, fp16): stage 0 holds 6 layers of (12h² + 7h)/8 + 6h
    # parameters, the word embedding 51200·h/8 and the position table 2048·h. fp16: weights 2,
    # gradients 2, optimizer 16 bytes per parameter (Megatron dist_optimizer.md).
    req = make_request(
        model="gpt3-175b",
        gpus=1024,
        tp=8,
        pp=16,
        micro_batch=1,
        global_batch=1536,
        recompute="full",
        precision="fp16",
        options={"attention_kernel": "unfused"},
    )
    out = explain(req)
    stage0 = next(st for st in out["stages"] if st["stage"] == 0)
    P0 = 6 * ((12 * h**2 + 7 * h) / 8 + 6 * h) + 51200 * h / 8 + 2048 * h
    assert P0 == 1_463_270_400
    assert stage0["layers"] == 6
    assert stage0["weights"] * GIB == pytest.approx(2 * P0, rel=1e-12)
    assert stage0["gradients"] * GIB == pytest.approx(2 * P0, rel=1e-12)
    assert stage0["optimizer"] * GIB == pytest.approx(16 * P0, rel=1e-12)
    # last stage: 6 layers, the final LayerNorm 2h and, tied with p > 1, its own copy of the word
    # embedding (Megatron finalize_model_grads.py)
    last = next(st for st in out["stages"] if st["stage"] == 15)
    P15 = 6 * ((12 * h**2 + 7 * h) / 8 + 6 * h) + 2 * h + 51200 * h / 8
    assert last["weights"] * GIB == pytest.approx(2 * P15, rel=1e-12)


def test_process_memory_comes_from_the_hardware_preset():
    """GPT 1.7B on 8 A100s, data parallel only (d = 8): one NCCL communicator moves bulk data (DP), so
    0.64 GiB of NCCL buffers (nccl issue #964); 1 GiB of CUDA context; two 4 MiB GEMM workspaces (sm80);
    3 % of the activations lost to fragmentation; no CUDA graphs."""
    req = make_request(model="gpt-1.7b", gpus=8, global_batch=64, seq_len=2048)
    mem = explain(req)["estimate"]["memory"]
    hw = a100().memory
    assert mem["nccl"] == pytest.approx(1 * hw.nccl_communicator_gib)
    assert mem["cuda_context"] == pytest.approx(hw.cuda_context_gib)
    assert mem["workspaces"] * 2**30 == pytest.approx(2 * 4 * 2**20)
    assert mem["fragmentation"] == pytest.approx(0.03 * mem["activations"])
    assert mem["cuda_graphs"] == 0


def test_fragmentation_by_architecture_by_hand():
    """10 GiB of activations on a stage of 4 layers, 3 of them MoE: 10·(¼·0.03 + ¾·0.20) = 1.575 GiB;
    a dense stage 0.3 GiB; expandable segments none."""
    from planner.costs.process_memory import fragmentation_bytes

    gib = 2**30
    got = fragmentation_bytes(10 * gib, 0.03, expandable_segments=False, moe_share=0.75, moe_frac=0.20)
    assert float(got) / gib == pytest.approx(1.575)
    assert float(fragmentation_bytes(10 * gib, 0.03, expandable_segments=False)) / gib == pytest.approx(0.3)
    assert float(fragmentation_bytes(10 * gib, 0.03, expandable_segments=True, moe_share=1.0, moe_frac=0.2)) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 5),
    st.booleans(),
    st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e300]), min_size=1, max_size=200),
)
def test_stage_max_is_the_largest_stage_of_each_plan_as_numpy_max(n, stages, column_major, values):
    """``stage_max`` gives ``np.max(x, axis=1)`` number for number: NaN wins, infinities as the reduction keeps them,
    whatever the layout. The sign of a zero maximum is the order's: numpy 2.4's reduction over five columns
    [-0.0, 0.0, 0.0, 0.0, -3.0] gives -0.0 where the pairwise maxima in column order give 0.0 (no byte count is
    negative zero), so the sign is compared where the maximum is not zero."""
    x = np.resize(np.array(values), (n, stages))
    x = np.asfortranarray(x) if column_major else np.ascontiguousarray(x)
    got, want = stage_max(x), np.max(x, axis=1)
    assert got.shape == want.shape == (n,)
    assert np.array_equal(got, want, equal_nan=True)
    nonzero = want != 0
    assert np.array_equal(np.signbit(got[nonzero]), np.signbit(want[nonzero]))
    if stages == 1:
        got[:] = 7.0  # a new array, not a view of x
        assert not np.any(x == 7.0)
