"""The linear layers of a transformer block: GEMM times on the roofline (FP8 at the recipe's rate),
the FP8 casts of the recipe, and the tensor-parallel collectives around a block's column-parallel
→ row-parallel pair of linears, less what they overlap and plus what overlapping costs the GEMMs
(planner.costs.communication.tp_pair_exposed_s)."""

from __future__ import annotations

import numpy as np

from planner.costs import communication as comm
from planner.costs import compute, flops
from planner.costs.letters import Letters
from planner.hardware.collectives import all_gather_time_s, all_reduce_time_s, group_link
from planner.plan import Context

BLACKWELL = 10.0  # compute capability from which one per-tensor FP8 copy serves both GEMM layouts
NORM_FED = ("qkv", "q_down", "kv_down", "q_proj", "fc1", "shared_fc1")  # GEMMs fed by the (fused) input norm


def gemm_times(gemms: dict, ctx: Context, *, fp8: bool) -> dict[str, np.ndarray]:
    """Each GEMM's time on the roofline; linear GEMMs in FP8 at η_fp8 (block-scaled recipes at the
    preset's ``mxfp8_gemm_ratio`` of it)."""
    cal, gpu, opts = ctx.hardware.calibration, ctx.hardware.gpu, ctx.options
    peak = gpu.peak_flops_per_s(ctx.precision)
    fp8_peak = (gpu.peak_fp8_tflops or 0) * 1e12
    block_scaled = opts.fp8_recipe.value in ("mxfp8", "blockwise")
    fp8_eta = (cal.fp8_gemm_efficiency or 0) * ((cal.mxfp8_gemm_ratio or 1.0) if block_scaled else 1.0)
    out = {}
    for name, g in gemms.items():
        if fp8 and name not in flops.ATTENTION_CORE:
            out[name] = compute.gemm_time_s(g, peak_flops_per_s=fp8_peak, eta_max=fp8_eta, half_dim=cal.gemm_half_dim)
        else:
            out[name] = compute.gemm_time_s(
                g, peak_flops_per_s=peak, eta_max=cal.gemm_efficiency, half_dim=cal.gemm_half_dim
            )
    return out


def activation_message(lt: Letters) -> np.ndarray:
    """ε·b·s·h/c: the activation tensor the TP collectives and the pipeline's sends move."""
    return comm.activation_message_bytes(lt.b, lt.s, lt.h, lt.c, activation_bytes=lt.act_bytes)


def tp_collectives_s(lt: Letters, ctx: Context) -> np.ndarray:
    """One layer's forward TP collectives for one micro-batch on the tp group's link (once per grid)."""
    cached = getattr(lt, "_tp_collectives", None)
    if cached is None:
        link = group_link(ctx.hardware, lt.t, 1)
        cached = comm.tp_layer_comm_time_s(activation_message(lt), lt.t, link, sequence_parallel=lt.sp)
        lt._tp_collectives = cached
    return cached


def split_gemms_s(gemms: list, n, ctx: Context, *, fp8: bool) -> np.ndarray:
    """GEMMs' time when each runs as n blocks of M/n rows (userbuffers' ring exchange and pipeline)."""
    blocks = {str(i): flops.Gemm(flops=g.flops, M=g.M / n, N=g.N, K=g.K) for i, g in enumerate(gemms)}
    return sum(gemm_times(blocks, ctx, fp8=fp8).values())


def tp_pair_s(lt: Letters, ctx: Context, gemms: dict, gtime: dict, ins, outs, gather_width=None) -> tuple:
    """(forward, backward) exposed TP time of one block's column-parallel GEMMs ``ins`` and
    row-parallel ``outs`` (communication.tp_pair_exposed_s): the SP all-gather before ``ins`` (of
    ``gather_width`` channels, MLA's latents, else h), the reduce-scatter after ``outs``, or the
    all-reduces without SP."""
    opts, link = ctx.options, group_link(ctx.hardware, lt.t, 1)
    msg = activation_message(lt)
    ag_in = all_gather_time_s(lt.t, msg * (gather_width or lt.h) / lt.h, link)
    rs, ar = all_gather_time_s(lt.t, msg, link), all_reduce_time_s(lt.t, msg, link)
    g_in, g_out = [gemms[k] for k in ins], [gemms[k] for k in outs]
    times = {"in": sum(gtime[k] for k in ins), "out": sum(gtime[k] for k in outs)}
    if opts.tp_comm_overlap:
        times |= {
            "in_split_t": split_gemms_s(g_in, lt.t, ctx, fp8=lt.fp8),
            "out_split_4": split_gemms_s(g_out, 4, ctx, fp8=lt.fp8),
            "out_split_t": split_gemms_s(g_out, lt.t, ctx, fp8=lt.fp8),
        }
    fwd, bwd = comm.tp_pair_exposed_s(
        ag_in,
        rs,
        ar,
        times,
        sequence_parallel=lt.sp,
        async_backward=opts.async_tp_comm or opts.tp_comm_overlap,
        overlap=opts.tp_comm_overlap,
        sm_slowdown=comm.ub_sm_slowdown(ctx.hardware.gpu.sm_count),
    )
    t_one = np.asarray(lt.t) == 1
    return np.where(t_one, 0.0, fwd), np.where(t_one, 0.0, bwd)


ROW_INPUT = ("q_up", "kv_up", "projection", "fc2", "shared_fc2")  # inputs cast on their own
ROW_OUT = ("projection", "fc2", "shared_fc2")  # outputs whose gradient is the block's out_grad


def cast_bytes(ctx: Context) -> tuple[float, float]:
    """(per element, per element inside TE's fused LayerNorm) HBM bytes of the recipe's FP8 casts,
    counted at the memory-bound ops' efficiency η_mem: a recipe whose cast kernels are measured to
    reach η_cast of HBM (the GPU's ``fp8_cast_hbm_frac``) counts η_mem/η_cast of its bytes."""
    recipe = ctx.options.fp8_recipe.value
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
