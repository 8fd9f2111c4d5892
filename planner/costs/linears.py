"""The linear layers of a transformer block: GEMM times on the roofline (FP8 at the recipe's rate),
the FP8 casts of the recipe, and the tensor-parallel collectives around a block's column-parallel
→ row-parallel pair of linears, less what they overlap and plus what overlapping costs the GEMMs
(planner.costs.communication.tp_pair_exposed_s)."""

from __future__ import annotations

import numpy as np

from planner.costs import Formula, compute, flops
from planner.costs import communication as comm
from planner.costs.letters import LAYER_KEY, Letters
from planner.hardware import userbuffers
from planner.hardware.collectives import all_gather_time_s, group_link, nvlink_nccl_time_s
from planner.plan import Context, CudaGraphImpl, CudaGraphModule, ParallelPlan, Recompute

BLACKWELL = 10.0  # compute capability from which one per-tensor FP8 copy serves both GEMM layouts
NORM_FED = ("qkv", "q_down", "kv_down", "q_proj", "fc1", "shared_fc1")  # GEMMs fed by the (fused) input norm


def gemm_times(gemms: dict, ctx: Context, *, fp8: bool) -> dict[str, np.ndarray]:
    """Each GEMM's time on the roofline; with ``fp8`` (the plan's linears quantised) the linear GEMMs in FP8 at
    η_fp8 (block-scaled recipes at the preset's ``mxfp8_gemm_ratio`` of it), or with --fp4-format in NVFP4 at the
    NVFP4 peak and η_fp8 · ``nvfp4_gemm_ratio`` (``low_precision_rate``); the attention core at the 16-bit law."""
    cal, gpu = ctx.hardware.calibration, ctx.hardware.gpu
    peak = gpu.peak_flops_per_s(ctx.precision)
    low_peak, low_eta = low_precision_rate(ctx)
    out = {}
    for name, g in gemms.items():
        if fp8 and name not in flops.ATTENTION_CORE:
            out[name] = compute.gemm_time_s(g, peak_flops_per_s=low_peak, eta_max=low_eta, half_dim=cal.gemm_half_dim)
        else:
            out[name] = compute.gemm_time_s(
                g, peak_flops_per_s=peak, eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim
            )
    return out


def low_precision_rate(ctx: Context) -> tuple[float, float]:
    """(P, η_max) of the quantised linear GEMMs: NVFP4 (--fp4-format, Transformer Engine NVFP4BlockScaling: fprop,
    dgrad and wgrad all in E2M1, recipe/__init__.py @d0067d0) at P_nvfp4 and η_fp8 · r_nvfp4; FP8 at P_fp8 and η_fp8,
    block-scaled recipes (MXFP8, blockwise) at η_fp8 · r_mxfp8. r: the preset's measured GEMM ratios."""
    cal, gpu, opts = ctx.hardware.calibration, ctx.hardware.gpu, ctx.options
    eta = cal.fp8_gemm_efficiency or 0
    if opts.fp4 is not None:
        return (gpu.peak_nvfp4_tflops or 0) * 1e12, eta * (cal.nvfp4_gemm_ratio or 0)
    block_scaled = opts.fp8_recipe.value in ("mxfp8", "blockwise")
    return (gpu.peak_fp8_tflops or 0) * 1e12, eta * ((cal.mxfp8_gemm_ratio or 1.0) if block_scaled else 1.0)


def activation_message(lt: Letters) -> np.ndarray:
    """ε·b·s·h/c: the activation tensor the TP collectives and the pipeline's sends move."""
    return comm.activation_message_bytes(lt.b, lt.s, lt.h, lt.c, activation_bytes=lt.act_bytes)


def tp_link(lt: Letters, ctx: Context):
    """``collectives.group_link`` of the tensor-parallel group (t consecutive ranks), once per grid
    (computed once per distinct shape: ``Letters.once``)."""
    cached = getattr(lt, "_tp_link", None)
    if cached is None:
        cached = lt._tp_link = lt.once(lambda v: group_link(ctx.hardware, v.t, 1), "tp_link", LAYER_KEY)
    return cached


def tp_collectives_s(lt: Letters, ctx: Context) -> np.ndarray:
    """One layer's forward TP collectives for one micro-batch on the tp group's link (once per grid,
    computed once per distinct shape)."""
    cached = getattr(lt, "_tp_collectives", None)
    if cached is None:

        def collectives(v: Letters) -> np.ndarray:
            return comm.tp_layer_comm_time_s(activation_message(v), v.t, tp_link(v, ctx), sequence_parallel=v.sp)

        cached = lt._tp_collectives = lt.once(collectives, "tp_collectives", LAYER_KEY)
    return cached


UB_COMPUTE_STREAMS = 3  # Transformer Engine comm_gemm_overlap.h NVTE_COMM_OVERLAP_MAX_STREAMS
# Chunks in flight at once (split_gemms_s ``concurrent``, on a GPU without a measured ``gemm_split_us``): TE
# issues chunk i on compute stream i mod min(3, n) (comm_gemm_overlap.cpp split_overlap_rs/_ag), on one hardware
# queue (CUDA_DEVICE_MAX_CONNECTIONS=1). Priced each alone (1); refitted with 2 or 3 the runs rejected the cheaper
# chunks (x½ 180 -> 277 / 418 on H100, MoE median 8.8 / 11.5 %): not identified (docs/cost-model.md §6.3.1).
UB_CONCURRENT_CHUNKS = 1


def split_gemm_extra_s(n, gemm_count: int, split_us: float) -> np.ndarray:
    """What running each of ``gemm_count`` GEMMs as n chunks adds to their whole time: (n − 1) more GEMMs,
    each t_split: extra = gemm_count · (n − 1) · t_split. t_split is measured (the GPU's ``gemm_split_us``:
    OpenXLA's matmul tables, a 2048-row GEMM as 4 of 512 rows at n = 4096, (4·t_512 − t_2048)/3, flat in k
    from 512 to 4096: a fixed cost per GEMM - its ramp-up, its last partial wave, its launch - not a share of
    its work, which the GEMM law's row term x½/(M/n) would charge, (n − 1)·2·x½·N·K/(peak·η): 12 times the
    measurement for a 512-row chunk of GPT-3 175B's fc1 at t = 4)."""
    return gemm_count * (np.asarray(n, dtype=float) - 1.0) * split_us * 1e-6


def split_gemms_s(gemms: list, n, ctx: Context, *, fp8: bool, dim: str = "M", concurrent: int = 1) -> np.ndarray:
    """GEMMs' time when each runs as n chunks of M/n rows (userbuffers' ring exchange: token blocks)
    or N/n columns (``dim`` "N": the pipelined reduce-scatter's output column blocks).

    On a GPU with a measured ``gemm_split_us``: the whole GEMMs' time + ``split_gemm_extra_s``. Else each
    chunk at the GEMM law's efficiency of its shape, ``concurrent`` chunks at once sharing the SMs (the
    efficiency of min(concurrent, n)/n of the GEMM): Transformer Engine issues the chunks round-robin on 3
    compute streams (comm_gemm_overlap.cpp, NVTE_COMM_OVERLAP_MAX_STREAMS); the tail wave of decomposed
    matmuls is the cost PyTorch's async TP names and works around the same way (Wang et al., 'Introducing
    Async Tensor Parallelism in PyTorch', 2024)."""
    split_us = ctx.hardware.gpu.gemm_split_us
    if split_us is not None:
        whole = sum(gemm_times({str(i): g for i, g in enumerate(gemms)}, ctx, fp8=fp8).values())
        return whole + split_gemm_extra_s(n, len(gemms), split_us)
    share = np.minimum(concurrent, n) / n

    def block(g):
        if dim == "N":
            return flops.Gemm(flops=g.flops * share, M=g.M, N=g.N * share, K=g.K)
        return flops.Gemm(flops=g.flops * share, M=g.M * share, N=g.N, K=g.K)

    blocks = {str(i): block(g) for i, g in enumerate(gemms)}
    return sum(gemm_times(blocks, ctx, fp8=fp8).values()) / share


def userbuffer_ops(lt: Letters, ctx: Context) -> tuple[list, np.ndarray, dict]:
    """The userbuffer config each plan of the grid runs (hardware.userbuffers.plan_configs: the
    user's, else Megatron-Bridge's preset for the GPU and shape, else Transformer Engine's
    defaults), the index of each plan's, and every overlapped GEMM's settings (once per grid)."""
    cached = getattr(lt, "_ub_ops", None)
    if cached is None:
        gpu = ctx.hardware.gpu
        configs, index = userbuffers.plan_configs(
            ctx.options.tp_comm_overlap_cfg, gpu.compute_capability, lt.fp8, lt.h, lt.s, lt.t, lt.b
        )
        cached = (configs, index, userbuffers.plan_ops(configs, index, lt.t))
        lt._ub_ops = cached
    return cached


PAIR_OPS = {  # the userbuffers GEMMs of a pair, by the row-parallel GEMM that closes it
    "projection": {"in_fprop": "qkv_fprop", "out_fprop": "proj_fprop", "out_dgrad": "proj_dgrad"}
    | {"in_dgrad": "qkv_dgrad", "in_wgrad": "qkv_wgrad"},
    "fc2": {"in_fprop": "fc1_fprop", "out_fprop": "fc2_fprop", "out_dgrad": "fc2_dgrad"}
    | {"in_dgrad": "fc1_dgrad", "in_wgrad": "fc1_wgrad"},
}


def overlap_times(lt: Letters, ctx: Context, gemms: dict, ins, outs, ub: dict) -> dict:
    """The chunked GEMMs userbuffers runs (``communication.tp_pair_ub_s``) and t: t token blocks, the
    pipeline's column blocks, and t/2 blocks where a ring-exchanged all-gather aggregates."""
    g_in, g_out = [gemms[k] for k in ins], [gemms[k] for k in outs]
    kw = {"fp8": lt.fp8, "concurrent": UB_CONCURRENT_CHUNKS}
    out = {
        "t": lt.t,
        "in_split_t": split_gemms_s(g_in, lt.t, ctx, **kw),
        "out_split_t": split_gemms_s(g_out, lt.t, ctx, **kw),
        "out_split_k": split_gemms_s(g_out, ub["out_fprop"]["splits"], ctx, dim="N", **kw),
    }
    half = np.maximum(np.asarray(lt.t) // 2, 1)
    for side, g, op in (("in", g_in, "in_fprop"), ("out", g_out, "out_dgrad")):
        if np.any(ub[op]["aggregate"]):  # TE's aggregate: the all-gather's GEMM in t/2 blocks of two pieces
            out[f"{side}_split_half"] = split_gemms_s(g, half, ctx, **kw)
    return out


def tp_pair_collectives(lt: Letters, ctx: Context, gather_width) -> tuple:
    """(the activation message, userbuffers' pieces of the all-gather of ``gather_width`` channels and of the
    message, NCCL's all-gather of those channels, reduce-scatter and all-reduce of the message) of a pair of
    ``tp_pair_s`` on the tensor-parallel group's link: the same for every pair of a grid that gathers as many
    channels (attention and MLP), so computed once per grid and width."""
    cache = lt.__dict__.setdefault("_tp_pair_collectives", {})
    hit = cache.get(gather_width)
    if hit is None:
        hw, link, msg = ctx.hardware, tp_link(lt, ctx), activation_message(lt)
        gathered = msg * gather_width / lt.h
        ub_comm = (all_gather_time_s(lt.t, gathered, link), all_gather_time_s(lt.t, msg, link))
        nccl = tuple(
            nvlink_nccl_time_s(hw, op, lt.t, m, link)
            for op, m in (("all_gather", gathered), ("reduce_scatter", msg), ("all_reduce", msg))
        )
        hit = cache[gather_width] = (msg, ub_comm, nccl)
    return hit


def tp_pair_s(lt: Letters, ctx: Context, gemms: dict, gtime: dict, ins, outs, gather_width=None) -> tuple:
    """(forward, backward) exposed TP time of one block's column-parallel GEMMs ``ins`` and
    row-parallel ``outs`` (communication.tp_pair_exposed_s): the SP all-gather before ``ins`` (of
    ``gather_width`` channels, MLA's latents, else h), the reduce-scatter after ``outs``, or the
    all-reduces without SP; with --tp-comm-overlap as the plan's userbuffer config runs them, the
    ring-exchanged reduce-scatter's final sum of t partial chunks at η_mem of HBM. Without userbuffers the
    collectives are NCCL's, at the hardware's measured times where it has them
    (collectives.nvlink_nccl_time_s); userbuffers' pieces travel at the link's bandwidth."""
    opts, hw = ctx.options, ctx.hardware
    msg, ub_comm, (ag_in, rs, ar) = tp_pair_collectives(lt, ctx, gather_width or lt.h)
    times = {"in": sum(gtime[k] for k in ins), "out": sum(gtime[k] for k in outs)}
    ub, reduce_s = None, 0.0
    if np.any(lt.tpo):
        ops = userbuffer_ops(lt, ctx)[2]
        ub = {role: ops[name] for role, name in PAIR_OPS["projection" if "projection" in outs else "fc2"].items()}
        times |= overlap_times(lt, ctx, gemms, ins, outs, ub)
        reduce_s = msg * (1 + 1 / lt.t) / (hw.gpu.hbm_bytes_per_s * hw.calibration.memory_efficiency)
    lost = comm.connection_limited(hw.gpu.compute_capability, lt.t, lt.c, lt.fsdp, lt.a2a_overlap & (lt.E > 0))
    fwd, bwd = comm.tp_pair_exposed_s(
        ag_in,
        rs,
        ar,
        times,
        sequence_parallel=lt.sp,
        async_backward=(opts.async_tp_comm | lt.tpo) & ~lost,
        overlap=lt.tpo,
        ub=ub,
        sm_count=hw.gpu.sm_count,
        reduce_s=reduce_s,
        rs_reordered=opts.ub_graph_reorders_rs and opts.graphs_launch(_graph_module(outs)),
        ub_comm=ub_comm,
    )
    t_one = np.asarray(lt.t) == 1
    return np.where(t_one, 0.0, fwd), np.where(t_one, 0.0, bwd)


def _graph_module(outs) -> CudaGraphModule:
    """The block whose graph holds the row-parallel GEMMs ``outs``: attention's projection, the MLP's fc2,
    else a MoE layer's shared experts."""
    if "projection" in outs:
        return CudaGraphModule.ATTN
    return CudaGraphModule.MLP if "fc2" in outs else CudaGraphModule.MOE


def plan_userbuffer_config(ctx: Context, plan: ParallelPlan) -> userbuffers.UbConfig | None:
    """The userbuffer config one plan runs (``userbuffers.plan_configs``; None: Transformer Engine's defaults)."""
    gpu = ctx.hardware.gpu
    t, b = np.array([plan.tp]), np.array([plan.micro_batch])
    fp8 = ctx.options.fp8 is not None
    configs, index = userbuffers.plan_configs(
        ctx.options.tp_comm_overlap_cfg, gpu.compute_capability, fp8, ctx.model.hidden_size, ctx.training.seq_len, t, b
    )
    return configs[int(index[0])]


def userbuffer_config_text(ctx: Context, plan: ParallelPlan) -> str:
    """The userbuffer config a plan runs, named, with its pipelined and bulk overlaps' SMs."""
    return "config " + userbuffers.describe(plan_userbuffer_config(ctx, plan), plan.tp)


def userbuffers_json(ctx: Context, plan: ParallelPlan) -> dict | None:
    """With --tp-comm-overlap-cfg, the config a plan running --tp-comm-overlap runs: its name (``config``) and
    ``bridge_fallback``: ``bridge`` was asked for and Megatron-Bridge has no preset for the plan's shape (its
    GPU generation, hidden size and t), so it runs Transformer Engine's defaults, as without the option. None
    without the option, or for a plan without the overlap (no SP, t = 1, or --tp-comm-overlap off)."""
    asked = ctx.options.tp_comm_overlap_cfg
    if asked is None or not (ctx.options.tp_comm_overlap and plan.sequence_parallel and plan.tp > 1):
        return None
    cfg = plan_userbuffer_config(ctx, plan)
    name = userbuffers.TE_DEFAULT if cfg is None else cfg.name
    return {"config": name, "bridge_fallback": asked.name == userbuffers.BRIDGE and cfg is None}


def tp_formula(ctx: Context, plan: ParallelPlan) -> Formula:
    """Formula and source of the TP communication term for one plan."""
    opts = ctx.options
    if not (plan.sequence_parallel and plan.tp > 1):
        collectives = "2 all-reduces forward; backward all-reduces beyond the weight-gradient GEMMs"
    elif opts.tp_comm_overlap:
        split_us = ctx.hardware.gpu.gemm_split_us
        chunked = (
            "the chunked GEMMs at their own efficiency"
            if split_us is None
            else f"a GEMM in n chunks the whole + (n − 1) × {split_us:g} µs (measured)"
        )
        collectives = (
            "userbuffers: each GEMM with its collective (ring exchange, pipeline or bulk) less the GEMM alone, "
            f"{chunked} (an atomic GEMM whole), "
            "the SMs the kernels take (the GEMM's share n/S); " + userbuffer_config_text(ctx, plan)
        )
        if opts.ub_graph_reorders_rs and opts.cuda_graph_impl is not CudaGraphImpl.NONE:
            collectives += (
                "; a ring-exchanged reduce-scatter that CUDA graphs launch sends its pieces after its GEMM "
                "chunks, G + C (Transformer Engine before v2.16, PR #2056)"
            )
    else:
        collectives = (
            "2 all-gathers + 2 reduce-scatters forward; backward: 2 synchronous output-gradient all-gathers, "
            "the input all-gathers and dgrad reduce-scatters beyond the GEMMs they overlap"
        )
    lost = comm.connection_limited(
        ctx.hardware.gpu.compute_capability,
        plan.tp,
        plan.cp,
        plan.fsdp,
        plan.overlap_moe_expert_parallel_comm and ctx.model.is_moe,
    )
    if bool(lost) and not opts.tp_comm_overlap:
        collectives += (
            "; the backward's overlaps lost: Megatron FSDP / the expert all-to-all overlap need "
            "CUDA_DEVICE_MAX_CONNECTIONS > 1, which on compute capability < 10 no longer queues the collectives "
            "ahead of the GEMMs (Megatron-LM arguments.py, layers.py)"
        )
    again = " (+ recompute)" if plan.recompute is Recompute.FULL else ""
    return Formula(
        f"m × layers × [{collectives}] of b·s·h/c{again}, on the tp group's link" if plan.tp > 1 else "0 (tp = 1)",
        "Narayanan et al. 2021 §4.1; Korthikanti et al. 2022 §4.2.2; Megatron-LM mappings.py, layers.py; "
        "Transformer Engine initialize_ub, comm_gemm_overlap.cpp; Megatron-Bridge comm_overlap.py; "
        "ring cost Thakur et al. 2005",
    )


ROW_INPUT = ("q_up", "kv_up", "projection", "fc2", "shared_fc2")  # inputs cast on their own
ROW_OUT = ("projection", "fc2", "shared_fc2")  # outputs whose gradient is the block's out_grad


def quant_recipe(opts) -> str:
    """The quantiser the plan's linears run: ``nvfp4`` with --fp4-format, else the --fp8-recipe."""
    return opts.fp4_recipe.value if opts.fp4 is not None else opts.fp8_recipe.value


def cast_bytes(ctx: Context) -> tuple[float, float]:
    """(per element, per element inside TE's fused LayerNorm) HBM bytes of the recipe's FP8 casts,
    counted at the memory-bound ops' efficiency η_mem: a recipe whose cast kernels are measured to
    reach η_cast of HBM (the GPU's ``fp8_cast_hbm_frac``) counts η_mem/η_cast of its bytes."""
    recipe = quant_recipe(ctx.options)
    gpu, eta_mem = ctx.hardware.gpu, ctx.hardware.calibration.memory_efficiency
    blackwell = gpu.compute_capability >= BLACKWELL
    slower = eta_mem / gpu.fp8_cast_hbm_frac.get(recipe, eta_mem)
    return (
        slower * compute.fp8_cast_bytes_per_element(recipe, one_copy_serves_both=blackwell),
        slower * compute.fp8_cast_bytes_per_element(recipe, one_copy_serves_both=blackwell, fused=True),
    )


def fp8_cast_bytes(lt: Letters, ctx: Context, gemms: dict, *, fused_in, out_grad, per_in=None, per_grad=None) -> tuple:
    """(forward, backward) HBM bytes of a block's FP8 quantisation for one micro-batch: the
    norm-fed input ``fused_in`` elements (cast inside TE's LayerNorm), the other linear GEMMs'
    inputs (M·K each, or ``per_in``), the output gradients in the backward (the row-parallel
    output's ``out_grad`` plus M·N of the others, or ``per_grad``), and the weights (N·K) once per
    iteration (TE caches them across micro-batches: is_first_microbatch), spread over m."""
    per, fused = cast_bytes(ctx)
    linear = {k: g for k, g in gemms.items() if k not in flops.ATTENTION_CORE}
    rows = [k for k in linear if k not in NORM_FED]
    inputs = per_in if per_in is not None else sum(linear[k].M * linear[k].K for k in rows if k in ROW_INPUT)
    grads = per_grad if per_grad is not None else sum(g.M * g.N for k, g in linear.items() if k not in ROW_OUT)
    weights = sum(g.N * g.K for g in linear.values())
    return fused * fused_in + per * inputs + per * weights / lt.m, per * (grads + out_grad)
