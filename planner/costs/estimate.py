"""Compose the cost terms into one estimate per plan, for a grid of any length.

The adapter unpacks specs into the papers' letters and calls the pure functions of flops,
compute, memory and communication; ``explain`` and ``search`` both call ``evaluate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.costs import communication as comm
from planner.costs import compute, flops, memory
from planner.costs.schedule import bubble_time_s, stage_time_sum
from planner.grid import PlanGrid, stage_layers
from planner.hardware.collectives import all_reduce_time_s, group_link
from planner.hardware.spec import HardwareSpec
from planner.models.params import embedding_params, model_layer_params, norm_params, padded_vocab
from planner.models.spec import ModelSpec
from planner.plan import AttentionKernel, PlanOptions, TrainingSpec

CROSS_ENTROPY_FWD_BYTES = 2 + 4 + 4 + 8 + 8 + 4  # per logit: fp32 cast (r2 w4), max (r4), subtract (r4 w4), exp (r4 w4), sum (r4)
CROSS_ENTROPY_BWD_BYTES = 8 + 6                  # softmax − one-hot (r4 w4), cast to 16 bits (r4 w2)
EMBEDDING_FWD_BYTES_PER_SBH = 2 + 2 + 2 + 2 + 1  # gather rows (r2 w2), add positions (r2 w2), dropout mask (w1)
ADAM_BYTES_PER_PARAM = {  # HBM traffic of one Adam step per (sharded) parameter
    "bf16": 4 + 8 + 8 + 8 + 2 + 4,   # read fp32 grad; r/w master, m, v; write bf16 weight; zero the grad buffer
    "fp16": 2 + 4 + 8 + 8 + 8 + 2 + 4,  # plus reading the fp16 grad into the fp32 main grad
    "fp32": 4 + 8 + 8 + 8 + 4,
}
TIME_TERMS = ("forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "embedding_comm",
              "bubble", "optimizer")
MEMORY_TERMS = ("weights", "gradients", "optimizer", "activations", "reserve")


@dataclass(frozen=True)
class Context:
    model: ModelSpec
    hardware: HardwareSpec
    training: TrainingSpec
    options: PlanOptions

    @property
    def precision(self) -> str:
        return self.training.precision.value


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


def _col(x: np.ndarray) -> np.ndarray:
    return np.asarray(x)[:, None]


class _Letters:
    """The papers' letters for a grid, shaped (N, 1) so they broadcast against stage indices."""

    def __init__(self, grid: PlanGrid, ctx: Context):
        mo = ctx.model
        self.t, self.p, self.d, self.c = _col(grid.tp), _col(grid.pp), _col(grid.dp), _col(grid.cp)
        self.vpp, self.b = _col(grid.vpp), _col(grid.micro_batch)
        self.sp, self.rc, self.dopt = _col(grid.sequence_parallel), _col(grid.recompute), _col(grid.distributed_optimizer)
        self.s, self.B = ctx.training.seq_len, ctx.training.global_batch
        self.h, self.a, self.g, self.dh, self.f = mo.hidden_size, mo.num_attention_heads, mo.query_groups, mo.head_dim, mo.ffn
        self.L = mo.num_layers
        self.V = padded_vocab(mo.vocab_size, mo.make_vocab_size_divisible_by, self.t)
        self.m = self.B / (self.b * self.d)
        layers = stage_layers(self.L, self.p, _col(grid.split), _col(grid.first_layers), _col(grid.last_layers))
        self.layers = layers
        self.gated, self.dropout = mo.swiglu, mo.hidden_dropout > 0
        self.unfused = ctx.options.attention_kernel is AttentionKernel.UNFUSED
        self.act_bytes = memory.ACTIVATION_BYTES[ctx.precision]

    def stage_info(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(layers on stage i, is first stage, is last stage)."""
        first, last = i == 0, i == self.p - 1
        n = np.where(first, self.layers.first, np.where(last, self.layers.last, self.layers.middle))
        return n, first, last


def stage_memory_bytes(lt: _Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """Memory on the GPUs of pipeline stage i, term by term (bytes)."""
    mo, hw = ctx.model, ctx.hardware
    n, first, last = lt.stage_info(i)
    emb = embedding_params(mo, lt.t, lt.s)
    output = lt.V * lt.h / lt.t * np.where(mo.tied_embeddings, lt.p > 1, True)  # tied copy only when p > 1
    params = (n * model_layer_params(mo, lt.t) + first * (emb["word"] + emb["position"])
              + last * (norm_params(mo) + output))
    states = memory.param_state_bytes(params, lt.d * lt.c, precision=ctx.precision, distributed_optimizer=lt.dopt)
    split, replicated = memory.layer_activation_coeffs(lt.h, lt.a, lt.g, lt.dh, lt.f, gated=lt.gated, dropout=lt.dropout)
    per_layer = lt.act_bytes / 2 * memory.activation_bytes_per_layer(
        lt.s, lt.b, lt.h, lt.a, lt.t, lt.c, sequence_parallel=lt.sp, recompute=lt.rc, unfused_attention=lt.unfused,
        split_coeff=split, replicated_coeff=replicated, distribute_saved=ctx.options.distribute_saved_activations)
    whole_layer = lt.act_bytes / 2 * memory.activation_bytes_per_layer(
        lt.s, lt.b, lt.h, lt.a, lt.t, lt.c, sequence_parallel=lt.sp, recompute=np.zeros_like(lt.rc),
        unfused_attention=lt.unfused, split_coeff=split, replicated_coeff=replicated)
    in_flight = memory.in_flight_microbatches(lt.p, lt.m, lt.vpp, i)
    activations = (in_flight * n * per_layer
                   + np.where(lt.rc == 2, whole_layer, 0.0)  # the layer being recomputed holds all of its activations
                   + first * np.minimum(lt.p, lt.m) * memory.embedding_activation_bytes(
                       lt.s, lt.b, lt.h, lt.t, lt.c, sequence_parallel=lt.sp, dropout=lt.dropout)
                   + last * memory.output_layer_activation_bytes(lt.s, lt.b, lt.h, lt.V, lt.t, lt.c, sequence_parallel=lt.sp))
    reserve = np.broadcast_to(hw.calibration.reserve_bytes, np.shape(activations))
    out = {**states, "activations": activations, "reserve": reserve, "params": params}
    out["total"] = sum(out[k] for k in MEMORY_TERMS)
    return out


def _layer_times(lt: _Letters, ctx: Context) -> dict[str, np.ndarray]:
    """Per-layer, per-micro-batch times on one GPU (seconds), compute and TP communication."""
    cal, gpu = ctx.hardware.calibration, ctx.hardware.gpu
    peak = gpu.peak_flops_per_s(ctx.precision)
    gemms = flops.layer_gemms(lt.b, lt.s, lt.h, lt.a, lt.g, lt.dh, lt.f, lt.t, lt.c, gated=lt.gated)
    gtime = {k: compute.gemm_time_s(g, peak_flops_per_s=peak, eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim)
             for k, g in gemms.items()}
    dense = sum(v for k, v in gtime.items() if k not in flops.ATTENTION_CORE)
    hbm = gpu.hbm_bytes_per_s * cal.memory_efficiency
    elementwise = compute.elementwise_bytes(lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, sequence_parallel=lt.sp,
                                            gated=lt.gated, unfused_attention=False, dropout=lt.dropout) / hbm
    if lt.unfused:
        softmax = (compute.elementwise_bytes(lt.b, lt.s, lt.h, lt.a, lt.f, lt.t, lt.c, sequence_parallel=lt.sp,
                                             gated=lt.gated, unfused_attention=True, dropout=lt.dropout) / hbm - elementwise)
        core_fwd = sum(gtime[k] for k in flops.ATTENTION_CORE) + softmax
        core_bwd = compute.BACKWARD_GEMM_FACTOR * core_fwd
    else:
        core_fwd = compute.flash_attention_time_s(gemms, peak_flops_per_s=peak, efficiency=cal.flash_attention_efficiency)
        core_bwd = compute.FLASH_BACKWARD_FACTOR * core_fwd
    overhead = cal.layer_overhead_us * 1e-6  # host and launch time of one layer's kernels
    fwd = dense + core_fwd + elementwise + overhead
    bwd = (compute.BACKWARD_GEMM_FACTOR * dense + core_bwd + compute.BACKWARD_ELEMENTWISE_FACTOR * elementwise
           + compute.BACKWARD_GEMM_FACTOR * overhead)
    recompute = np.where(lt.rc == 2, fwd, np.where(lt.rc == 1, core_fwd, 0.0))
    tp_raw = comm.tp_layer_comm_time_s(lt.b, lt.s, lt.h, lt.t, lt.c, group_link(ctx.hardware, lt.t, 1),
                                       activation_bytes=lt.act_bytes, sequence_parallel=lt.sp)
    # --tp-comm-overlap pipelines the forward collectives with the GEMMs they feed (Transformer Engine
    # userbuffers); the backward's overlap the weight-gradient GEMMs (as many FLOPs as the forward's)
    hidden = np.maximum(tp_raw - dense, 0.0)
    tp_fwd = np.where(lt.sp, hidden, tp_raw) if ctx.options.tp_comm_overlap else tp_raw
    tp_bwd = hidden if ctx.options.async_tp_comm or ctx.options.tp_comm_overlap else tp_raw
    logits = compute.gemm_time_s(flops.logits_gemm(lt.b, lt.s, lt.h, lt.V, lt.t, lt.c), peak_flops_per_s=peak,
                                 eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim)
    logit_elems = lt.b * lt.s / lt.c * lt.V / lt.t
    sbh = lt.b * lt.s * lt.h / lt.c
    return {
        "fwd": fwd, "bwd": bwd, "recompute": recompute,
        # forward and backward collectives, and the forward ones again under full recompute (Korthikanti 2022 §5)
        "tp": tp_fwd * np.where(lt.rc == 2, 2.0, 1.0) + tp_bwd, "tp_fwd": tp_fwd, "tp_bwd": tp_bwd,
        "head_fwd": logits + CROSS_ENTROPY_FWD_BYTES * logit_elems / hbm,
        "head_bwd": compute.BACKWARD_GEMM_FACTOR * logits + CROSS_ENTROPY_BWD_BYTES * logit_elems / hbm,
        "embedding_fwd": EMBEDDING_FWD_BYTES_PER_SBH * sbh / hbm,
        "embedding_bwd": compute.BACKWARD_ELEMENTWISE_FACTOR * EMBEDDING_FWD_BYTES_PER_SBH * sbh / hbm,
    }


def _stage_step(lt: _Letters, ctx: Context, i: np.ndarray) -> dict[str, np.ndarray]:
    """One micro-batch through stage i: compute forward, backward, recomputation and TP communication."""
    n, first, last = lt.stage_info(i)
    times = _layer_times(lt, ctx)
    tp_edge = times["tp_fwd"] / 2  # one collective: the embedding's (first stage) or the output layer's (last stage)
    return {
        "fwd": n * times["fwd"] + first * times["embedding_fwd"] + last * times["head_fwd"],
        "bwd": n * times["bwd"] + first * times["embedding_bwd"] + last * times["head_bwd"],
        "recompute": n * times["recompute"],
        "tp": n * times["tp"] + (first.astype(float) + last) * tp_edge,
        "tp_fwd": n * times["tp_fwd"] + first * tp_edge,
    }


def stage_times_s(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """Per-micro-batch time of every pipeline stage of a one-plan grid, for drawing its schedule:
    ``forward`` (compute and TP communication), ``backward`` (with recomputation), each for the
    whole stage (a chunk of the interleaved schedule takes 1/vpp of it), and ``p2p`` for one
    transfer between neighbouring stages."""
    lt = _Letters(grid, ctx)
    i = np.arange(int(grid.pp[0]))[None, :]
    step = _stage_step(lt, ctx, i)
    tp_link = group_link(ctx.hardware, lt.t, 1)
    pp_link = group_link(ctx.hardware, 2, lt.t * lt.c * lt.d)
    p2p = comm.pp_p2p_time_s(lt.b, lt.s, lt.h, lt.t, lt.c, pp_link, tp_link, activation_bytes=lt.act_bytes,
                             sequence_parallel=lt.sp, scatter_gather=ctx.options.pp_scatter_gather)
    forward = step["fwd"] + step["tp_fwd"]
    backward = step["bwd"] + step["recompute"] + step["tp"] - step["tp_fwd"]
    return {"forward": forward[0], "backward": backward[0], "p2p": float(np.asarray(p2p).reshape(-1)[0])}


def layer_step_times_s(grid: PlanGrid, ctx: Context) -> dict[str, np.ndarray]:
    """One transformer layer's forward and backward time for one micro-batch, with its TP
    communication; the backward includes recomputation (as Korthikanti et al. 2022 Table 4 times it)."""
    lt = _Letters(grid, ctx)
    times = _layer_times(lt, ctx)
    forward = times["fwd"] + times["tp_fwd"]
    backward = times["bwd"] + times["recompute"] + times["tp"] - times["tp_fwd"]
    return {"forward": forward[:, 0], "backward": backward[:, 0]}


def _grad_bytes(ctx: Context) -> tuple[int, int]:
    """(bytes per gradient element reduced over DP, bytes per parameter all-gathered)."""
    prec = ctx.precision
    if prec == "fp32":
        return 4, 4
    if prec == "fp16" or ctx.options.grad_reduce_in_bf16:
        return 2, 2
    return 4, 2  # bf16: fp32 main grads reduced in fp32 (arguments.py:1204-1217)


def evaluate(grid: PlanGrid, ctx: Context) -> Evaluation:
    """Estimate every plan of ``grid``: memory of its most loaded stage and its iteration time."""
    lt = _Letters(grid, ctx)
    hw, opts = ctx.hardware, ctx.options
    rep = np.concatenate([np.zeros_like(lt.p), np.minimum(1, lt.p - 1), lt.p - 1], axis=1)  # first, a middle, last
    n, first, last = lt.stage_info(rep)

    mem = stage_memory_bytes(lt, ctx, rep)
    peak_col = np.argmax(mem["total"], axis=1)
    rows = np.arange(len(grid))
    peak_stage = rep[rows, peak_col]

    tp_link = group_link(hw, lt.t, 1)
    step = _stage_step(lt, ctx, rep)
    fwd, bwd, rec, tp = step["fwd"], step["bwd"], step["recompute"], step["tp"]
    per_mb = fwd + bwd + rec + tp
    slow_col = np.argmax(per_mb, axis=1)
    slowest = per_mb[rows, slow_col][:, None]
    mid_count = np.maximum(lt.p - 2, 0)
    total = stage_time_sum(per_mb[:, :1], per_mb[:, 1:2], per_mb[:, 2:3], lt.p, mid_count)
    bubble = bubble_time_s(total, slowest, lt.vpp)

    pp_link = group_link(hw, 2, lt.t * lt.c * lt.d)
    p2p = comm.pp_p2p_time_s(lt.b, lt.s, lt.h, lt.t, lt.c, pp_link, tp_link, activation_bytes=lt.act_bytes,
                             sequence_parallel=lt.sp, scatter_gather=opts.pp_scatter_gather)
    pp = comm.exposed_p2p_transfers(lt.p, lt.m, lt.vpp, overlap_p2p=opts.overlap_p2p_comm) * p2p

    grad_bytes, param_bytes = _grad_bytes(ctx)
    dp_link = group_link(hw, lt.d * lt.c, lt.t)
    dp_stage = comm.dp_grad_sync_time_s(mem["params"], lt.d * lt.c, dp_link, grad_bytes=grad_bytes,
                                        param_bytes=param_bytes, distributed_optimizer=lt.dopt,
                                        overlap_param_gather=opts.overlap_param_gather)
    bwd_mb = bwd + rec
    hidden = rep * bwd_mb + (bwd_mb if opts.overlap_grad_reduce else 0.0)  # stage i drains i backward steps early
    dp = np.max(np.maximum(dp_stage - hidden, 0.0), axis=1, keepdims=True)

    emb_link = group_link(hw, 2, (lt.p - 1) * lt.t * lt.c * lt.d)
    emb_grad = lt.V * lt.h / lt.t * grad_bytes
    embedding = np.where(ctx.model.tied_embeddings & (lt.p > 1), all_reduce_time_s(2, emb_grad, emb_link), 0.0)

    shard = np.where(lt.dopt, lt.d * lt.c, 1)
    adam = ADAM_BYTES_PER_PARAM[ctx.precision] * mem["params"] / shard / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    optimizer = np.max(adam, axis=1, keepdims=True)

    pick = lambda x: x[rows, slow_col][:, None]  # noqa: E731  (terms of the slowest stage)
    time = {"forward": lt.m * pick(fwd), "backward": lt.m * pick(bwd), "recompute": lt.m * pick(rec),
            "tp_comm": lt.m * pick(tp), "pp_comm": pp, "dp_comm": dp, "embedding_comm": embedding,
            "bubble": bubble, "optimizer": optimizer}
    time = {k: np.broadcast_to(v, (len(grid), 1))[:, 0].astype(float) for k, v in time.items()}
    iteration = sum(time[k] for k in TIME_TERMS)

    memory_terms = {k: mem[k][rows, peak_col] for k in (*MEMORY_TERMS, "total", "params")}
    flop_terms = _flop_terms(lt, ctx)
    return Evaluation(m=lt.m[:, 0], time=time, iteration_s=iteration, memory=memory_terms,
                      peak_memory_bytes=memory_terms["total"], peak_stage=peak_stage,
                      stage_layers_legal=lt.layers.legal[:, 0], flops=flop_terms,
                      bubble_frac=time["bubble"] / iteration)


def _flop_terms(lt: _Letters, ctx: Context) -> dict[str, np.ndarray]:
    """Model, hardware (with recomputation) and Megatron-logged FLOPs per iteration, all GPUs."""
    V = lt.V[:, 0]
    args = (lt.B, lt.s, lt.L, lt.h, lt.a, lt.g, lt.dh, lt.f)
    model = np.array([flops.model_flops(*args, int(v), gated=lt.gated) for v in np.unique(V)])
    logged = np.array([flops.model_flops(*args, int(v), gated=lt.gated, attention_frac=0.5) for v in np.unique(V)])
    idx = np.searchsorted(np.unique(V), V)
    rec = flops.recompute_flops(*args, gated=lt.gated, recompute=lt.rc[:, 0])
    return {"model": model[idx], "hardware": model[idx] + rec, "megatron": logged[idx]}
