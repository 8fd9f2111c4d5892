"""Compose the cost terms into one estimate per plan, for a grid of any length.

``explain`` evaluates a one-plan grid and ``search`` millions; both call ``evaluate``, which unpacks
the specs into the papers' letters (planner.costs.letters) and composes memory
(planner.costs.stage_memory), per-stage step times (planner.costs.layer_time), pipeline and
data-parallel communication and the schedule into named terms that add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.costs import communication as comm
from planner.costs import flops, memory
from planner.costs.layer_time import layer_times, stage_step
from planner.costs.letters import Letters
from planner.costs.pipeline import bubble_time_s, stage_time_sum
from planner.costs.stage_memory import MEMORY_TERMS, stage_memory_bytes
from planner.hardware.collectives import (
    all_gather_time_s,
    all_reduce_time_s,
    group_link,
    reduce_scatter_time_s,
)
from planner.plan import Context
from planner.space.grid import PlanGrid

__all__ = ["ADAM_BYTES_PER_PARAM", "Context", "Evaluation", "Letters", "MEMORY_TERMS", "TIME_TERMS", "evaluate",
           "layer_step_times_s", "stage_memory_bytes", "stage_times_s"]

ADAM_BYTES_PER_PARAM = {  # HBM traffic of one Adam step per (sharded) parameter
    "bf16": 4 + 8 + 8 + 8 + 2 + 4,   # read fp32 grad; r/w master, m, v; write bf16 weight; zero the grad buffer
    "fp16": 2 + 4 + 8 + 8 + 8 + 2 + 4,  # plus reading the fp16 grad into the fp32 main grad
    "fp32": 4 + 8 + 8 + 8 + 4,
}
TIME_TERMS = ("forward", "backward", "recompute", "tp_comm", "cp_comm", "moe_comm", "pp_comm", "dp_comm",
              "embedding_comm", "bubble", "optimizer")
_Letters = Letters  # the name earlier code and tests use


@dataclass(frozen=True)
class Evaluation:
    """Arrays over the plans of a grid (most loaded stage for memory, slowest for time)."""

    m: np.ndarray
    time: dict[str, np.ndarray]
    iteration_s: np.ndarray
    memory: dict[str, np.ndarray]
    peak_memory_bytes: np.ndarray
    peak_stage: np.ndarray
    stage_layers_legal: np.ndarray
    flops: dict[str, np.ndarray]
    bubble_frac: np.ndarray


def _grad_bytes(ctx: Context) -> tuple[int, int]:
    """(bytes per gradient element reduced over DP, bytes per parameter all-gathered)."""
    prec = ctx.precision
    if prec == "fp32":
        return 4, 4
    if prec == "fp16" or ctx.options.grad_reduce_in_bf16:
        return 2, 2
    return 4, 2  # bf16: fp32 main grads reduced in fp32 (arguments.py:1204-1217)


def _dp_sync(lt: Letters, ctx: Context, mem: dict, bwd_mb: np.ndarray, rep: np.ndarray) -> np.ndarray:
    """Exposed gradient synchronisation at the end of the iteration (DDP or distributed optimizer):
    dense gradients over d·c, expert gradients over the expert data-parallel group; stage i drains
    i backward steps before stage 0, and --overlap-grad-reduce hides it behind the last backward."""
    opts = ctx.options
    grad_bytes, param_bytes = _grad_bytes(ctx)
    if opts.fp8 is not None and opts.fp8_param_gather:
        param_bytes = 1
    kw = dict(grad_bytes=grad_bytes, param_bytes=param_bytes, distributed_optimizer=lt.dopt,
              overlap_param_gather=opts.overlap_param_gather)
    dense = comm.dp_grad_sync_time_s(mem["dense_params"], lt.d * lt.c, group_link(ctx.hardware, lt.d * lt.c, lt.t), **kw)
    expert = comm.dp_grad_sync_time_s(mem["expert_params"], lt.edp, group_link(ctx.hardware, lt.edp, lt.etp * lt.ep), **kw)
    hidden = rep * bwd_mb + (bwd_mb if opts.overlap_grad_reduce else 0.0)
    return np.max(np.maximum(dense + expert - hidden, 0.0), axis=1, keepdims=True)


def _fsdp_exposed(lt: Letters, ctx: Context, step: dict, mem: dict, n: np.ndarray) -> np.ndarray:
    """Megatron FSDP, per micro-batch on a stage: each layer all-gathers its weights for the forward
    and again for the backward and reduce-scatters its gradients, prefetched one layer ahead, so only
    what exceeds the layer's own compute is exposed (ZeRO-3; Rajbhandari et al. 2020)."""
    w_bytes, _, _ = memory.BYTES_PER_PARAM[ctx.precision]
    link = group_link(ctx.hardware, lt.d * lt.c, lt.t)
    per_layer_params = mem["params"] / np.maximum(n, 1)
    gather = all_gather_time_s(lt.d * lt.c, w_bytes * per_layer_params, link)
    # reduce-scatter of the 16-bit gradients (Megatron FSDP's grad comm dtype follows the model's by default)
    scatter = reduce_scatter_time_s(lt.d * lt.c, w_bytes * per_layer_params, link)
    fwd_layer = step["fwd"] / np.maximum(n, 1)
    bwd_layer = (step["bwd"] + step["recompute"]) / np.maximum(n, 1)
    return n * (np.maximum(gather - fwd_layer, 0.0) + np.maximum(gather + scatter - bwd_layer, 0.0))


def _p2p_time_s(lt: Letters, ctx: Context) -> np.ndarray:
    """One pipeline transfer between neighbouring stages, tp·c·d ranks apart (rank order tp, cp, dp, pp)."""
    tp_link = group_link(ctx.hardware, lt.t, 1)
    pp_link = group_link(ctx.hardware, 2, lt.t * lt.c * lt.d)
    return comm.pp_p2p_time_s(lt.b, lt.s, lt.h, lt.t, lt.c, pp_link, tp_link, activation_bytes=lt.act_bytes,
                              sequence_parallel=lt.sp, scatter_gather=ctx.options.pp_scatter_gather)


def evaluate(grid: PlanGrid, ctx: Context) -> Evaluation:
    """Estimate every plan of ``grid``: memory of its most loaded stage and its iteration time."""
    lt = Letters(grid, ctx)
    hw, opts = ctx.hardware, ctx.options
    rep = np.concatenate([np.zeros_like(lt.p), np.minimum(1, lt.p - 1), lt.p - 1], axis=1)  # first, a middle, last
    n, first, last = lt.stage_info(rep)
    rows = np.arange(len(grid))

    mem = stage_memory_bytes(lt, ctx, rep)
    peak_col = np.argmax(mem["total"], axis=1)
    peak_stage = rep[rows, peak_col]

    step = stage_step(lt, ctx, rep)
    fsdp = np.where(lt.fsdp, _fsdp_exposed(lt, ctx, step, mem, n), 0.0)
    fwd, bwd, rec, tp, cp, mo = step["fwd"], step["bwd"], step["recompute"], step["tp"], step["cp"], step["moe"]
    per_mb = fwd + bwd + rec + tp + cp + mo + fsdp
    slow_col = np.argmax(per_mb, axis=1)
    slowest = per_mb[rows, slow_col][:, None]
    total = stage_time_sum(per_mb[:, :1], per_mb[:, 1:2], per_mb[:, 2:3], lt.p, np.maximum(lt.p - 2, 0))
    bubble = bubble_time_s(total, slowest, lt.vpp)

    pp = comm.exposed_p2p_transfers(lt.p, lt.m, lt.vpp, overlap_p2p=opts.overlap_p2p_comm) * _p2p_time_s(lt, ctx)

    dp = np.where(lt.fsdp, 0.0, _dp_sync(lt, ctx, mem, bwd + rec, rep))
    grad_bytes, _ = _grad_bytes(ctx)
    emb_link = group_link(hw, 2, (lt.p - 1) * lt.t * lt.c * lt.d)
    emb_grad = lt.V * lt.h / lt.t * grad_bytes
    embedding = np.where(ctx.model.tied_embeddings & (lt.p > 1), all_reduce_time_s(2, emb_grad, emb_link), 0.0)

    shard_dense = np.where(lt.dopt | lt.fsdp, lt.d * lt.c, 1)
    shard_expert = np.where(lt.dopt | lt.fsdp, lt.edp, 1)
    adam_params = mem["dense_params"] / shard_dense + mem["expert_params"] / shard_expert
    adam = ADAM_BYTES_PER_PARAM[ctx.precision] * adam_params / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    optimizer = np.max(adam, axis=1, keepdims=True)

    def pick(x):  # the slowest stage's term
        return np.broadcast_to(x, per_mb.shape)[rows, slow_col][:, None]

    time = {"forward": lt.m * pick(fwd), "backward": lt.m * pick(bwd), "recompute": lt.m * pick(rec),
            "tp_comm": lt.m * pick(tp), "cp_comm": lt.m * pick(cp), "moe_comm": lt.m * pick(mo), "pp_comm": pp, "dp_comm": dp + lt.m * pick(fsdp),
            "embedding_comm": embedding, "bubble": bubble, "optimizer": optimizer}
    time = {k: np.broadcast_to(v, (len(grid), 1))[:, 0].astype(float) for k, v in time.items()}
    iteration = sum(time[k] for k in TIME_TERMS)

    memory_terms = {k: mem[k][rows, peak_col] for k in (*MEMORY_TERMS, "total", "params")}
    return Evaluation(m=lt.m[:, 0], time=time, iteration_s=iteration, memory=memory_terms,
                      peak_memory_bytes=memory_terms["total"], peak_stage=peak_stage,
                      stage_layers_legal=lt.layers.legal[:, 0], flops=_flop_terms(lt, ctx),
                      bubble_frac=time["bubble"] / iteration)


def _flop_terms(lt: Letters, ctx: Context) -> dict[str, np.ndarray]:
    """Model, hardware (with recomputation) and Megatron-logged FLOPs per iteration, all GPUs."""
    mo = ctx.model
    V = lt.V[:, 0]
    args = (lt.B, lt.s, lt.L, lt.h, lt.a, lt.g, lt.dh, lt.f)
    moe_kw = dict(moe_layers=mo.num_moe_layers, topk=mo.moe_router_topk if mo.is_moe else 0, f_e=mo.expert_ffn)
    vocab = np.unique(V)
    model = np.array([flops.model_flops(*args, int(v), gated=lt.gated, **moe_kw) for v in vocab])
    logged = np.array([flops.model_flops(*args, int(v), gated=lt.gated, attention_frac=0.5, **moe_kw) for v in vocab])
    idx = np.searchsorted(vocab, V)
    rec = flops.recompute_flops(*args, gated=lt.gated, recompute=lt.rc[:, 0], **moe_kw)
    return {"model": model[idx], "hardware": model[idx] + rec, "megatron": logged[idx]}


def stage_times_s(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """Per-micro-batch time of every pipeline stage of a one-plan grid, for drawing its schedule:
    ``forward`` (compute and TP communication), ``backward`` (with recomputation), each for the
    whole stage (a chunk of the interleaved schedule takes 1/vpp of it), and ``p2p`` for one
    transfer between neighbouring stages."""
    lt = Letters(grid, ctx)
    i = np.arange(int(grid.pp[0]))[None, :]
    step = stage_step(lt, ctx, i)
    p2p = _p2p_time_s(lt, ctx)
    comm_all = step["tp"] + step["cp"] + step["moe"]
    forward = step["fwd"] + step["comm_fwd"]
    backward = step["bwd"] + step["recompute"] + comm_all - step["comm_fwd"]
    return {"forward": forward[0], "backward": backward[0], "p2p": float(np.asarray(p2p).reshape(-1)[0])}


def layer_step_times_s(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """One transformer layer's forward and backward time for one micro-batch, with its TP
    communication; the backward includes recomputation (as Korthikanti et al. 2022 Table 4 times it)."""
    lt = Letters(grid, ctx)
    times = layer_times(lt, ctx)
    forward = times["fwd"] + times["tp_fwd"] + times["cp_fwd"] + times["moe_fwd"]
    backward = (times["bwd"] + times["recompute"] + times["tp"] + times["cp"] + times["moe"]
                - times["tp_fwd"] - times["cp_fwd"] - times["moe_fwd"])
    return {"forward": forward[:, 0], "backward": backward[:, 0]}
