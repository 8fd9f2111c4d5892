"""The plan options for what takes memory besides the parallel layout: selective recomputation's
modules, CPU offloading, the precision-aware optimizer's dtypes, CUDA graphs and the allocator
(rows of ``planner.cli.options.PLAN_OPTIONS``)."""

from __future__ import annotations

import click

from planner.cli.option_spec import CommaChoices, IntRange, Option
from planner.plan import CudaGraphModule, RecomputeModule

MEMORY_OPTIONS: tuple[Option, ...] = (
    Option(
        ("--recompute-modules",),
        "Selective recomputation's modules, comma-separated: core_attn, mlp, layernorm, moe_act, moe, "
        "mla_up_proj, shared_experts [default: core_attn].",
        type=CommaChoices(tuple(m.value for m in RecomputeModule), "module"),
    ),
    Option(
        ("--cpu-offloading-num-layers",),
        "Layers whose activations wait in host memory (pp 1, no recomputation).",
        0,
        IntRange(min=0),
    ),
    Option(
        ("--use-precision-aware-optimizer",),
        "Transformer Engine's FusedAdam with the dtypes below (needs the distributed optimizer).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--main-params-dtype",), "Master weights (precision-aware optimizer).", "fp32", click.Choice(["fp32", "fp16"])
    ),
    Option(
        ("--main-grads-dtype",),
        "The gradient buffer (precision-aware optimizer; bf16: as --grad-reduce-in-bf16).",
        "fp32",
        click.Choice(["fp32", "bf16"]),
    ),
    Option(
        ("--exp-avg-dtype",),
        "Adam m (precision-aware optimizer).",
        "fp32",
        click.Choice(["fp32", "fp16", "bf16", "fp8"]),
    ),
    Option(
        ("--exp-avg-sq-dtype",),
        "Adam v (precision-aware optimizer).",
        "fp32",
        click.Choice(["fp32", "fp16", "bf16", "fp8"]),
    ),
    Option(
        ("--cuda-graph-impl",),
        "CUDA graphs: none, local, transformer_engine (per layer) or full_iteration.",
        "none",
        click.Choice(["none", "local", "transformer_engine", "full_iteration"]),
    ),
    Option(
        ("--cuda-graph-modules",),
        "Per-layer graphs' modules, comma-separated: attn, mlp, moe, moe_router, moe_preprocess "
        "[default: the whole layer].",
        type=CommaChoices(tuple(m.value for m in CudaGraphModule), "module"),
    ),
    Option(
        ("--expandable-segments",),
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no allocator fragmentation.",
        False,
        flag=True,
        solo=True,
    ),
)
