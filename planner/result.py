"""One plan's estimate as the plan JSON of DESIGN.md, with every term's formula and source."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.costs.estimate import (
    MEMORY_TERMS,
    TIME_TERMS,
    Evaluation,
    _Letters,
    stage_memory_bytes,
)
from planner.costs.train_cost import train_cost_terms
from planner.hardware.spec import GIB
from planner.plan import Context, ParallelPlan
from planner.space.grid import PlanGrid

MEMORY_INFO = {
    "weights": ("P_stage × 2 bytes (4 in fp32)", "Megatron-LM dist_optimizer.md; parameter count Narayanan 2021 Eq. 2"),
    "gradients": ("P_stage × 4 bytes fp32 main grads under bf16 (2 under fp16)", "Megatron-LM dist_optimizer.md"),
    "optimizer": ("P_stage × 12 bytes (16 under fp16, 8 fp32), ÷ d with the distributed optimizer", "Megatron-LM dist_optimizer.md"),
    "activations": ("in-flight micro-batches × layers × per-layer bytes (Table 2) + embedding / logits terms",
                    "Korthikanti et al. 2022 Table 2, §4.2.3, §4.3"),
    "reserve": ("CUDA context, NCCL/cuBLAS workspaces, fragmentation", "hardware preset calibration.reserve_gib"),
}
TIME_INFO = {
    "forward": ("m × Σ_GEMM F/(peak·η(M,N,K)) + attention core + elementwise bytes/HBM, slowest stage",
                "Narayanan 2021 App. (GEMM FLOPs); roofline with calibrated η"),
    "backward": ("m × (2 × forward GEMMs + attention-core backward + 2 × elementwise)", "Narayanan 2021 App.: backward = 2 × forward"),
    "recompute": ("m × (one more layer forward under full; attention core under selective)", "Korthikanti 2022 §5"),
    "tp_comm": ("m × layers × (2 fwd + 2 bwd [+2 recompute]) all-reduces (AG+RS with SP) of b·s·h on NVLink, less overlap",
                "Narayanan 2021 §4.1; Korthikanti 2022 §4.2.2; ring cost Thakur et al. 2005"),
    "cp_comm": ("m × layers × (c−1) ring steps of K,V chunks, each beyond its attention compute",
                "Ring Attention (Liu et al. 2023); Megatron-Core context parallelism"),
    "moe_comm": ("m × MoE layers × token dispatch + combine (all-to-all over ep, or all-gather), fwd and bwd",
                 "Megatron-Core moe/token_dispatcher.py"),
    "pp_comm": ("exposed p2p transfers × (b·s·h[/t] bytes / β + α)", "Narayanan 2021 §4.1, §2.2"),
    "dp_comm": ("gradient all-reduce (or RS + AG) of the stage's parameters over d·c (experts over expert-DP), "
                "minus what overlap hides; Megatron FSDP: per-layer gathers beyond compute",
                "Megatron-LM distributed optimizer; reference/formulas.md §10"),
    "embedding_comm": ("all-reduce of tied word-embedding grads between first and last stage",
                       "Megatron-LM finalize_model_grads.py"),
    "bubble": ("(Σ stage times − slowest stage time)/vpp", "Narayanan 2021 §2.2.1-2.2.2: (p−1)(t_f+t_b)/v"),
    "optimizer": ("Adam HBM traffic per (sharded) parameter / HBM bandwidth", "memory-bound estimate"),
}


@dataclass(frozen=True)
class PlanResult:
    """Everything explain and search say about one plan."""

    ctx: Context
    gpus: int
    plan: ParallelPlan
    broken: list[str]
    data: dict

    def to_json(self) -> dict:
        return self.data


def _f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0]) if np.ndim(x) else float(x)


def plan_json(ctx: Context, gpus: int, grid: PlanGrid, ev: Evaluation, i: int, broken: list[str],
              memory_headroom: float = 0.0) -> dict:
    """The plan JSON of DESIGN.md for plan i of an evaluated grid."""
    plan = grid.plan(i)
    it = float(ev.iteration_s[i])
    peak = ctx.hardware.gpu.peak_flops_per_s(ctx.precision)
    tokens = ctx.training.global_batch * ctx.training.seq_len
    cap = ctx.hardware.gpu.hbm_bytes * (1 - memory_headroom)
    layers = stage_layer_list(grid.take(np.array([i])), ctx)
    per_gpu = lambda f: float(ev.flops[f][i]) / it / gpus  # noqa: E731
    estimate = {
        "iteration_s": it,
        "tokens_per_s": tokens / it,
        "tflops_per_gpu": per_gpu("model") / 1e12,
        "hw_tflops_per_gpu": per_gpu("hardware") / 1e12,
        "megatron_tflops_per_gpu": per_gpu("megatron") / 1e12,
        "mfu": per_gpu("model") / peak,
        "hfu": per_gpu("hardware") / peak,
        "peak_memory_gib": float(ev.peak_memory_bytes[i]) / GIB,
        "capacity_gib": cap / GIB,
        "fits": bool(ev.peak_memory_bytes[i] <= cap),
        "peak_stage": int(ev.peak_stage[i]),
        "bubble_frac": float(ev.bubble_frac[i]),
        "num_microbatches": float(ev.m[i]),
        "memory": {k: float(ev.memory[k][i]) / GIB for k in (*MEMORY_TERMS, "total")},
        "time": {k: float(ev.time[k][i]) for k in TIME_TERMS},
        **train_cost_terms(tokens / it, gpus, tokens=ctx.training.train_tokens, gpu_hour_price=ctx.training.gpu_hour_price,
                           tdp_watts=ctx.hardware.gpu.tdp_watts),
    }
    return {
        "model": ctx.model.name,
        "hardware": ctx.hardware.name,
        "gpus": gpus,
        "training": ctx.training.model_dump(mode="json"),
        "parallel": {**plan.model_dump(mode="json"), "stage_layers": layers},
        "options": ctx.options.model_dump(mode="json"),
        "legal": not broken,
        "broken_rules": broken,
        "estimate": estimate,
        "model_spec": ctx.model.model_dump(mode="json"),
    }


def stage_layer_list(grid: PlanGrid, ctx: Context) -> list[int]:
    """Layers on each pipeline stage of a one-plan grid, first to last."""
    lt = _Letters(grid, ctx)
    i = np.arange(int(grid.pp[0]))[None, :]
    n, _, _ = lt.stage_info(i)
    return [int(x) for x in n[0]]


def stage_memory_gib(grid: PlanGrid, ctx: Context) -> list[dict[str, float]]:
    """Memory of every pipeline stage of a one-plan grid, term by term, in GiB (explain)."""
    lt = _Letters(grid, ctx)
    i = np.arange(int(grid.pp[0]))[None, :]
    mem = stage_memory_bytes(lt, ctx, i)
    n, _, _ = lt.stage_info(i)
    return [{"stage": int(k), "layers": int(n[0, k]), **{t: float(mem[t][0, k]) / GIB for t in (*MEMORY_TERMS, "total")}}
            for k in range(i.shape[1])]
