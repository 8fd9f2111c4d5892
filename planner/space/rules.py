"""Megatron-LM's own rules for a parallel configuration, as named masks over a plan grid.

Each mask is True where the rule holds; the names are what ``explain`` and ``search`` report.
Sources: Megatron-LM megatron/training/arguments.py (validate_args) at commit d98e8a64, as listed
in reference/formulas.md §10 and DESIGN.md.
"""

from __future__ import annotations

import numpy as np

from planner.space.grid import PlanGrid, stage_layers
from planner.models.spec import ModelSpec
from planner.plan import PlanOptions, TrainingSpec


def rule_masks(grid: PlanGrid, model: ModelSpec, training: TrainingSpec, options: PlanOptions,
               num_gpus: int) -> dict[str, np.ndarray]:
    """Named masks, True where the rule holds, for every plan of the grid."""
    t, p, d, c, v, b = grid.tp, grid.pp, grid.dp, grid.cp, grid.vpp, grid.micro_batch
    s, B = training.seq_len, training.global_batch
    a, g, f, L = model.num_attention_heads, model.query_groups, model.ffn, model.num_layers
    layers = stage_layers(L, p, grid.split, grid.first_layers, grid.last_layers)
    m = B // np.maximum(b * d, 1)
    explicit = (grid.first_layers > 0) | (grid.last_layers > 0)
    per_stage = np.where(grid.split > 0, (L + np.isin(grid.split, (1, 3)) + np.isin(grid.split, (2, 3))) // p, L // p)
    interleaved = v > 1
    ep, etp, E = grid.ep, grid.etp, model.num_experts or 1
    off = np.full(len(grid), True)
    return {
        "world size = tp·cp·pp·dp": t * c * p * d == num_gpus,
        "attention heads divisible by tp": a % t == 0,
        "query groups divisible by tp": np.where(g >= t, g % t == 0, t % g == 0),
        "ffn hidden size divisible by tp": f % t == 0,
        "sequence length divisible by tp with sequence parallelism": ~grid.sequence_parallel | (s % t == 0),
        "sequence length divisible by 2·cp with context parallelism": (c == 1) | (s % (2 * c) == 0),
        "experts divisible by ep": (E % ep == 0) if model.is_moe else (ep == 1),
        "expert grid etp·ep·pp divides the world": (num_gpus % (etp * ep * p) == 0) if model.is_moe else off,
        "expert tensor parallelism divides expert MLP width": (model.expert_ffn % etp == 0) if model.is_moe else off,
        "mixture of experts with tp > 1 needs sequence parallelism": (t == 1) | grid.sequence_parallel if model.is_moe else off,
        "Megatron FSDP modelled without pipeline parallelism": ~grid.fsdp | (p == 1),
        "sequence length within max_position_embeddings": np.full(len(grid), s <= model.max_position_embeddings
                                                                   or model.position_embedding_type.value != "learned_absolute"),
        "global batch divisible by micro-batch × dp": B % (b * d) == 0,
        "layers split over pipeline stages": layers.legal,
        "interleaving needs pp > 1 (pp > 2 without p2p overlap)": ~interleaved | (p > (1 if options.overlap_p2p_comm else 2)),
        # accounted splits: (L + e + l)/p per stage (arguments.py:953-979); explicit first/last stage sizes:
        # each of the first, middle and last counts (transformer_config.py:2296-2340)
        "layers per stage divisible by interleaved chunks": ~interleaved | np.where(
            explicit, (layers.first % v == 0) & (layers.middle % v == 0) & (layers.last % v == 0), per_stage % v == 0),
        "interleaving needs micro-batches divisible by pp": ~interleaved | ((m >= p) & (m % p == 0)),
        "tp-comm-overlap needs sequence parallelism": np.full(len(grid), True) if not options.tp_comm_overlap
        else grid.sequence_parallel,
        "fp8-param-gather needs the distributed optimizer or Megatron FSDP": np.full(len(grid), True)
        if not options.fp8_param_gather else (grid.distributed_optimizer | grid.fsdp),
        "overlap-param-gather needs distributed optimizer and overlap-grad-reduce": np.full(len(grid), True)
        if not options.overlap_param_gather else ((grid.distributed_optimizer | grid.fsdp) & options.overlap_grad_reduce),
        "fp8 needs bf16 or fp16 training": np.full(len(grid), options.fp8 is None or training.precision.value != "fp32"),
    }


def broken_rules(masks: dict[str, np.ndarray], i: int = 0) -> list[str]:
    """Names of the rules plan i breaks."""
    return [name for name, ok in masks.items() if not bool(np.asarray(ok)[i])]


def rule_detail(name: str, plan, model: ModelSpec, training: TrainingSpec, num_gpus: int) -> str:
    """A broken rule with the values that break it and what would be allowed."""
    t, p, d, b, v = plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.vpp  # noqa: F841
    a, g, f, L = model.num_attention_heads, model.query_groups, model.ffn, model.num_layers
    s, B = training.seq_len, training.global_batch
    m = B / (b * d)
    detail = {
        "world size = tp·cp·pp·dp": f"tp·cp·pp·dp = {t * plan.cp * p * d} but there are {num_gpus} GPUs",
        "attention heads divisible by tp": f"{a} attention heads are not divisible by tp {t}; allowed tp: {_divisors(a)}",
        "query groups divisible by tp": f"{g} query groups and tp {t} do not divide one another",
        "ffn hidden size divisible by tp": f"ffn hidden size {f} is not divisible by tp {t}",
        "sequence length divisible by tp with sequence parallelism": f"seq_len {s} is not divisible by tp {t} (needed with sequence parallelism)",
        "sequence length within max_position_embeddings": f"seq_len {s} exceeds max_position_embeddings {model.max_position_embeddings}",
        "global batch divisible by micro-batch × dp": f"global batch {B} is not divisible by micro-batch {b} × dp {d} = {b * d}",
        "layers split over pipeline stages": f"{L} layers do not split over pp {p} with the {plan.stage_split.value} split"
        f"{'' if L % p == 0 else f'; allowed pp for an even split: {_divisors(L)}'}",
        "interleaving needs pp > 1 (pp > 2 without p2p overlap)": f"vpp {v} needs pp > 1, or pp > 2 with "
        f"--no-overlap-p2p-comm (pp is {p})",
        "layers per stage divisible by interleaved chunks": (
            f"first/middle/last stage layers must each divide into vpp {v} chunks"
            if plan.first_stage_layers or plan.last_stage_layers else
            f"{_per_stage(plan, L)} layers per stage do not divide into vpp {v} chunks; "
            f"allowed vpp: {_divisors(_per_stage(plan, L))}"),
        "interleaving needs micro-batches divisible by pp": f"interleaving needs m = B/(b·d) = {m:g} to be a multiple of pp {p}",
        "tp-comm-overlap needs sequence parallelism": "--tp-comm-overlap needs --sequence-parallel (and tp > 1)",
        "sequence length divisible by 2·cp with context parallelism": f"seq_len {s} is not divisible by 2·cp = {2 * plan.cp}",
        "experts divisible by ep": (f"{model.num_experts} experts are not divisible by ep {plan.ep}" if model.is_moe
                                    else f"ep {plan.ep} needs a mixture-of-experts model (num_experts)"),
        "expert grid etp·ep·pp divides the world": f"etp·ep·pp = {plan.etp}·{plan.ep}·{p} does not divide {num_gpus} GPUs",
        "expert tensor parallelism divides expert MLP width": f"expert ffn {model.expert_ffn} is not divisible by etp {plan.etp}",
        "mixture of experts with tp > 1 needs sequence parallelism": f"tp {t} with experts needs --sequence-parallel",
        "Megatron FSDP modelled without pipeline parallelism": f"Megatron FSDP with pp {p} is not modelled; use pp 1",
        "fp8 needs bf16 or fp16 training": "--fp8-format needs --bf16 or --fp16",
        "fp8-param-gather needs the distributed optimizer or Megatron FSDP": "--fp8-param-gather needs "
        "--use-distributed-optimizer or --use-megatron-fsdp (arguments.py)",
        "overlap-param-gather needs distributed optimizer and overlap-grad-reduce": "--overlap-param-gather needs --use-distributed-optimizer and --overlap-grad-reduce",
    }
    return f"{name}: {detail.get(name, name)}"


def _per_stage(plan, L: int) -> int:
    return (L + int(plan.stage_split.embedding_counted) + int(plan.stage_split.loss_counted)) // plan.pp


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0 and k <= 64)
