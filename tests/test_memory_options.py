"""The Megatron-LM options that change memory and time, each against a hand computation: the gradient
buffer's dtype, partial (block) and grouped (uniform) full recomputation, selective recomputation's
modules, CPU offloading, the precision-aware optimizer, CUDA graphs' static buffers, userbuffers,
NCCL communicators, fragmentation and Megatron FSDP with pipeline parallelism."""

import numpy as np
import pytest

from planner.api import explain, make_request
from planner.costs.estimate import evaluate
from planner.costs.layer_time import layer_times
from planner.costs.letters import Letters
from planner.costs.process_memory import nccl_communicators
from planner.space.grid import PlanGrid

GIB = 2**30
# Llama 3 8B at s = 8192, b = 1, bf16, flash attention, no dropout (presets/models/llama3-8b.yaml)
S, H, L = 8192, 4096, 32
SBH = S * H
# per layer and micro-batch (Korthikanti et al. 2022 §4.1, GQA and SwiGLU): split Q 2ad/h = 2, K and V
# 4gd/h = 1, projection input 2, SwiGLU input and output 2·3f/h = 21; replicated: two norm inputs and
# the QKV and fc1 inputs, 2 each: 34 bytes per sbh element with t = 1
WHOLE = 34 * SBH
INPUT = 2 * SBH  # full recomputation keeps the layer's input


def llama8b(**kw):
    base = dict(model="llama3-8b", hardware="dgx-h100-superpod", gpus=8, global_batch=64, distributed_optimizer=True)
    return make_request(**{**base, **kw})


def memory(req) -> dict:
    return explain(req, memory_headroom=0.0)["estimate"]["memory"]


def time(req) -> dict:
    return explain(req, memory_headroom=0.0)["estimate"]["time"]


def test_grad_reduce_in_bf16_halves_the_gradient_buffer():
    fp32 = memory(llama8b())["gradients"]
    bf16 = memory(llama8b(options={"grad_reduce_in_bf16": True}))["gradients"]
    grads_dtype = memory(llama8b(options={"use_precision_aware_optimizer": True, "main_grads_dtype": "bf16"}))[
        "gradients"
    ]
    # Llama 3 8B: 8.03e9 parameters, 4 bytes per fp32 main grad (32.12 GB = 29.92 GiB), 2 in bf16
    assert fp32 == pytest.approx(8.0301e9 * 4 / GIB, rel=1e-4)
    assert bf16 == pytest.approx(fp32 / 2, rel=1e-12)
    assert grads_dtype == pytest.approx(bf16, rel=1e-12)


def test_block_recompute_of_5_of_32_layers_costs_5_32_of_full():
    full = llama8b(recompute="full")
    block = llama8b(recompute="full", recompute_method="block", recompute_num_layers=5)
    # time: 5 of the 32 layers run their forward again, with their TP collectives (none at t = 1)
    assert time(block)["recompute"] == pytest.approx(5 / 32 * time(full)["recompute"], rel=1e-12)
    # memory: the other 27 layers keep everything instead of their input
    # full:  32·2sbh + (34 − 2)sbh while one layer is recomputed; block: 5·2sbh + 27·34sbh + the same
    extra = (memory(block)["activations"] - memory(full)["activations"]) * GIB
    assert extra == pytest.approx(27 * (WHOLE - INPUT) * 1.0, rel=1e-9)


def test_uniform_recompute_keeps_one_input_per_group():
    one = llama8b(recompute="full")
    four = llama8b(recompute="full", recompute_num_layers=4)
    # groups of 4: 8 inputs kept, and 4 layers whole while a group is recomputed
    # (8·2 + 4·34 − 2) − (32·2 + 34 − 2) = 54 sbh more
    extra = (memory(four)["activations"] - memory(one)["activations"]) * GIB
    assert extra == pytest.approx(54 * SBH, rel=1e-9)
    assert time(four)["recompute"] == pytest.approx(time(one)["recompute"], rel=1e-12)  # every layer again


def test_block_recompute_counts_layers_per_model_chunk():
    # pp 2, vpp 2: 16 layers per stage in 2 chunks of 8; block 3 recomputes 3 of each chunk, 6 of 16
    kw = dict(pp=2, vpp=2, recompute="full")
    full = llama8b(**kw)
    block = llama8b(**kw, recompute_method="block", recompute_num_layers=3)
    assert time(block)["recompute"] == pytest.approx(6 / 16 * time(full)["recompute"], rel=1e-12)


def test_selective_mlp_keeps_the_attention_block_only():
    none = llama8b()
    mlp = llama8b(recompute="selective", options={"recompute_modules": ["mlp"]})
    # selective mlp: per layer the attention block's 2 + 1 + 2 split and 2 + 2 + 2 replicated = 11 sbh,
    # instead of 34: the MLP's 21 and its fc1 input 2 are recomputed
    saved = (memory(none)["activations"] - memory(mlp)["activations"]) * GIB
    assert saved == pytest.approx(L * (34 - 11) * SBH, rel=1e-9)
    assert time(mlp)["recompute"] > 0 and time(none)["recompute"] == 0


def test_selective_core_attn_under_flash_saves_nothing():
    none, core = llama8b(), llama8b(recompute="selective")
    assert memory(core)["activations"] == pytest.approx(memory(none)["activations"], rel=1e-12)
    assert time(core)["recompute"] > 0


def test_cpu_offloading_moves_layers_to_host_at_the_host_link_cost():
    base = llama8b(global_batch=8)
    off = llama8b(global_batch=8, options={"cpu_offloading_num_layers": 10})
    saved = (memory(base)["activations"] - memory(off)["activations"]) * GIB
    assert saved == pytest.approx(10 * WHOLE, rel=1e-9)
    # each offloaded layer's activations cross the 55.1 GB/s PCIe link out and back, each copy hidden
    # behind one layer's forward (backward): exposed = m·10·[max(0, A/W − t_f) + max(0, A/W − t_b)]
    lt = Letters(PlanGrid.from_plans([off.plan]), off.ctx)
    per = layer_times(lt, off.ctx)
    copy = WHOLE / 55.1e9
    exposed = max(copy - float(per["fwd"][0, 0]), 0) + max(copy - float(per["bwd"][0, 0]), 0)
    assert time(off)["offload"] == pytest.approx(1 * 10 * exposed, rel=1e-9)  # m = 8/(1·8) = 1


def test_precision_aware_optimizer_dtypes():
    plain = memory(llama8b())["optimizer"]
    aware = memory(
        llama8b(options={"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"})
    )["optimizer"]
    # 12 bytes (fp32 master, m, v) become 2 (the master weight's 16-bit remainder) + 2 + 2, over d = 8
    assert plain == pytest.approx(8.0301e9 * 12 / 8 / GIB, rel=1e-4)
    assert aware == pytest.approx(plain * 6 / 12, rel=1e-12)


def test_per_layer_cuda_graphs_keep_static_buffers():
    graphs = memory(llama8b(options={"cuda_graph_impl": "local"}))["cuda_graphs"]
    # pp = 1: one set of graphs reused by every micro-batch; each layer's graph keeps its input and output,
    # forward and backward: 4 tensors of b·s·h bf16 values, 32 layers
    assert graphs * GIB == pytest.approx(4 * 2 * SBH * 32, rel=1e-12)
    # Transformer Engine's scopes are one captured callable per layer (Megatron-LM transformer_layer.py
    # _te_cuda_graph_capture @ core_r0.17.0): attn + mlp keeps the layer's input and output, as the whole layer
    modules = memory(llama8b(options={"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn", "mlp"]}))
    assert modules["cuda_graphs"] == pytest.approx(graphs, rel=1e-12)
    assert memory(llama8b(options={"cuda_graph_impl": "full_iteration"}))["cuda_graphs"] == 0


def test_tp_comm_overlap_registers_userbuffers():
    kw = dict(tp=8, sequence_parallel=True)
    ub = memory(llama8b(**kw, options={"tp_comm_overlap": True}))["workspaces"]
    plain = memory(llama8b(**kw))["workspaces"]
    # 10 userbuffers of [s·b, h] in bf16, and the 32 MiB TE workspace repeated for its 3 streams
    assert (ub - plain) * GIB == pytest.approx(10 * 2 * SBH + 2 * 32 * 2**20, rel=1e-12)


def test_nccl_communicators_a_plan_creates():
    # GPT-3 style TP 8, PP 16, DP 8, tied embeddings: TP, DP×CP, two PP neighbours, the embedding group
    assert float(nccl_communicators(8, 1, 16, 8, tied_embeddings=True, moe=False)) == 5
    assert float(nccl_communicators(1, 1, 1, 1, tied_embeddings=True, moe=False)) == 0  # one GPU
    assert float(nccl_communicators(1, 2, 2, 4, tied_embeddings=False, moe=False)) == 3  # CP, DP×CP, one PP peer


def test_expandable_segments_remove_fragmentation():
    default = memory(llama8b())
    expandable = memory(llama8b(options={"expandable_segments": True}))
    assert default["fragmentation"] == pytest.approx(0.03 * default["activations"], rel=1e-12)
    assert expandable["fragmentation"] == 0


def test_megatron_fsdp_with_pipeline_parallelism():
    req = llama8b(pp=2, fsdp=True)
    est = explain(req, memory_headroom=0.0)["estimate"]
    assert est["fits"]
    ev = evaluate(PlanGrid.from_plans([req.plan]), req.ctx)
    assert np.all(np.isfinite(ev.iteration_s))
    # 16 layers a stage, each 218.1M parameters: 2 whole layers and the stage's share of d·c = 4
    layer = 4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    first = next(s for s in explain(req, memory_headroom=0.0)["stages"] if s["stage"] == 0)
    stage = 16 * layer + 128256 * 4096
    assert first["weights"] * GIB == pytest.approx(2 * (stage / 4 + 2 * layer), rel=1e-9)


def test_recomputed_flops_follow_the_recomputed_layers_and_modules():
    def recomputed(req):  # hardware FLOPs beyond the model's, per iteration, all GPUs
        est = explain(req, memory_headroom=0.0)["estimate"]
        return (est["hw_tflops_per_gpu"] - est["tflops_per_gpu"]) * 1e12 * est["iteration_s"] * req.gpus

    full = recomputed(llama8b(recompute="full"))
    block = recomputed(llama8b(recompute="full", recompute_method="block", recompute_num_layers=5))
    assert block == pytest.approx(5 / 32 * full, rel=1e-9)
    # selective mlp: one more forward of fc1 (2·s·h·2f for SwiGLU) and fc2 (2·s·f·h) per layer and sequence
    mlp = recomputed(llama8b(recompute="selective", options={"recompute_modules": ["mlp"]}))
    assert mlp == pytest.approx(64 * L * (2 * S * H * 2 * 14336 + 2 * S * 14336 * H), rel=1e-9)
