"""One table of the options that describe a plan, shared by explain, export, compare, search and sweep,
and turning them into a plan request (or search pins).

A row of ``PLAN_OPTIONS`` is one option. Commands on one plan (explain, export, compare) give it
its plan default; search and sweep give the rows marked ``searched`` no default, so an option left
out is searched and one given pins that knob.
"""

from __future__ import annotations

import click

from planner import api
from planner.bridge_tags import TAGS as BRIDGE_TAGS
from planner.cli.memory_options import MEMORY_OPTIONS
from planner.cli.option_spec import POSITIVE, SIZE, FiniteRange, IntRange, Option, TokenCount
from planner.errors import PlannerError
from planner.plan import DFA_BUCKET_MIN_MB, Recompute, RecomputeMethod
from planner.plan_options import KNOBS, LISTS, OVERLAP_PINS, search_inputs

__all__ = ["KNOBS", "LISTS", "OVERLAP_PINS", "PLAN_OPTIONS", "plan_options", "search_inputs", "search_options"]

PLAN_OPTIONS: tuple[Option, ...] = (
    Option(("--model",), "Model preset name or YAML path (megaplan presets models)."),
    Option(("--hardware",), "Hardware preset name or YAML path [default: dgx-a100-superpod, or the plan's]."),
    Option(
        ("--plan", "plan_file"),
        "A plan saved by explain/search --json (FILE or FILE#RANK; - reads it from a pipe).",
        type=click.Path(dir_okay=False),
        plan_only=True,
    ),
    Option(("--rank",), "Which plan of a search --json file (default 1).", type=POSITIVE, plan_only=True),
    Option(
        ("--megatron-args",),
        "An existing Megatron-LM command line (quote it); with --megatron-args-file, flags added to the script's.",
        plan_only=True,
    ),
    Option(
        ("--megatron-args-file",),
        "A Megatron-LM launch script to read (never run; - reads it from a pipe).",
        type=click.Path(dir_okay=False),
        plan_only=True,
    ),
    Option(
        ("--bridge-config",),
        "A Megatron-Bridge override YAML/dotlist or ConfigContainer YAML to read.",
        type=click.Path(dir_okay=False),
        plan_only=True,
    ),
    Option(
        ("--bridge-override",),
        "A Bridge override KEY=VALUE over --bridge-recipe (repeatable).",
        plan_only=True,
        extra={"multiple": True, "metavar": "KEY=VALUE"},
    ),
    Option(("--bridge-recipe",), "Megatron-Bridge base recipe (import: its fields; export: the base).", plan_only=True),
    Option(
        ("--bridge-version",),
        f"Megatron-Bridge tag [default: {BRIDGE_TAGS[-1]}].",
        type=click.Choice(BRIDGE_TAGS),
        plan_only=True,
    ),
    Option(
        ("--env", "env_pairs"),
        "Set a variable of the launch script (e.g. --env MODEL_SIZE=76B); repeatable.",
        plan_only=True,
        extra={"multiple": True, "metavar": "VAR=VALUE"},
    ),
    Option(("--gpus",), "N = tp·cp·pp·dp (default: tp·pp·dp).", type=POSITIVE, plan_only=True),
    Option(("--global-batch",), "Global batch B (default: the model preset's).", type=SIZE),
    Option(("--seq-len",), "Sequence length s (default: the model preset's).", type=SIZE),
    Option(("--precision",), "Training precision.", "bf16", click.Choice(["bf16", "fp16", "fp32"])),
    Option(
        ("--tokens",),
        "Tokens to train on, for days, GPU-hours, cost and energy (e.g. 300e9, 1.4T) [default: 300e9].",
        type=TokenCount(),
    ),
    Option(
        ("--gpu-hour-price",),
        "Price of one GPU-hour (any currency) for estimate.cost.",
        type=FiniteRange(min=0, min_open=True),
    ),
    # the parallel plan: searched by search and sweep
    Option(("--tp",), "Tensor-parallel size t.", 1, SIZE, searched=True),
    Option(("--pp",), "Pipeline-parallel size p.", 1, SIZE, searched=True),
    Option(("--dp",), "Data-parallel size d (derived from --gpus if omitted).", None, SIZE, searched=True),
    Option(("--vpp",), "Interleaved chunks per stage (1: plain 1F1B).", 1, SIZE, searched=True),
    Option(
        ("--microbatch-group-size-per-virtual-pipeline-stage", "microbatch_group_size"),
        "Interleaving: micro-batches each virtual stage runs at a time, G (pp ≤ G ≤ m, m mod G = 0 or ≥ pp; "
        "default: pp; search: the smallest legal).",
        None,
        SIZE,
        searched=True,
    ),
    Option(("--cp",), "Context-parallel size c (search: while s/c ≥ 4096).", 1, SIZE, searched=True),
    Option(("--ep",), "Expert-parallel size (MoE).", 1, SIZE, searched=True),
    Option(("--etp",), "Expert tensor-parallel size (MoE; default: --tp).", None, SIZE, searched=True),
    Option(
        ("--fsdp",),
        "Megatron FSDP: shard weights, gradients and optimizer states.",
        False,
        flag=True,
        solo=True,
        searched=True,
    ),
    Option(
        ("--num-distributed-optimizer-instances", "distributed_optimizer_instances"),
        "Distributed optimizer: R instances, each sharding the optimizer over d·c/R ranks (gradients all-reduced "
        "across instances); with Megatron FSDP, HSDP: R replicas of d·c/R ranks.",
        1,
        SIZE,
        searched=True,
        derived="1, and for Megatron FSDP also the R whose replica fills an NVLink domain",
    ),
    Option(
        ("--data-parallel-sharding-strategy", "fsdp_sharding"),
        "Megatron FSDP: optim (optimizer states), optim_grads (and gradients) or optim_grads_params (and weights).",
        "optim_grads_params",
        click.Choice(["optim", "optim_grads", "optim_grads_params"]),
        searched=True,
    ),
    Option(
        ("--outer-dp-sharding-strategy", "fsdp_outer_sharding"),
        "Megatron FSDP with R > 1 instances (HSDP): no_shard (replicas) or optim (HFSDP: optimizer states "
        "sharded across the replicas too; needs optim_grads_params).",
        "no_shard",
        click.Choice(["no_shard", "optim"]),
        searched=True,
    ),
    Option(("--micro-batch",), "Micro-batch size b.", 1, SIZE, searched=True),
    Option(("--sequence-parallel",), "Sequence parallelism (with tp > 1).", False, flag=True, searched=True),
    Option(
        ("--recompute",), "Activation recomputation.", "none", click.Choice([r.value for r in Recompute]), searched=True
    ),
    Option(
        ("--recompute-method",),
        "Full recomputation: uniform (every layer, in groups) or block (the first N layers of each model chunk; "
        "search: the fewest that fit).",
        "uniform",
        click.Choice([m.value for m in RecomputeMethod]),
        searched=True,
    ),
    Option(
        ("--recompute-num-layers",),
        "Full recomputation: group size (uniform) or layers per model chunk (block).",
        None,
        SIZE,
        searched=True,
    ),
    Option(
        ("--distributed-optimizer",), "Shard optimizer states over data parallelism.", False, flag=True, searched=True
    ),
    Option(
        ("--account-for-embedding-in-pipeline-split",),
        "Count the embedding as a layer (Megatron).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--account-for-loss-in-pipeline-split",), "Count the loss as a layer (Megatron).", False, flag=True, solo=True
    ),
    Option(("--decoder-first-pipeline-num-layers",), "Layers on the first stage.", None, SIZE),
    Option(("--decoder-last-pipeline-num-layers",), "Layers on the last stage.", None, SIZE),
    Option(
        ("--pipeline-model-parallel-layout", "pipeline_layout"),
        "Megatron's layout of the virtual stages, e.g. 'Et*4|(t*4|)*14tmL' (search: tries balanced layouts).",
    ),
    # Megatron-LM behaviour: PlanOptions
    Option(
        ("--attention-kernel",),
        "Attention core: flash (Transformer Engine) or unfused (2021-22 papers).",
        "flash",
        click.Choice(["flash", "unfused"]),
    ),
    Option(
        ("--overlap-grad-reduce",),
        "Overlap the gradient reduction with the backward.",
        False,
        flag=True,
        searched=True,
        derived="on, as today's recipes set it; off is never faster: overlapped, the reduction costs only the "
        "SMs and HBM it takes while hidden, off it is all exposed",
        plan_derived="on, as in search's plans and today's recipes (Megatron-LM's own default is off; a launch "
        "script keeps its flags)",
    ),
    Option(
        ("--overlap-param-gather",),
        "Overlap the distributed optimizer's (or FSDP's) parameter all-gather.",
        False,
        flag=True,
        searched=True,
        derived="on with the distributed optimizer or FSDP, as today's recipes set it; off is never faster",
        plan_derived="on with --distributed-optimizer or --fsdp and the gradient overlap, as in search's plans; "
        "else off",
    ),
    Option(("--grad-reduce-in-bf16",), "Reduce gradients in bf16 instead of fp32.", False, flag=True, solo=True),
    Option(
        ("--use-sharp",),
        "--use-sharp: data-parallel collectives reduced in the switches (SHARP), where the cluster has it.",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--dp-max-ctas",),
        "The DP communicator's max_ctas (--nccl-communicator-config-path): SMs its hidden collectives take.",
        None,
        SIZE,
    ),
    Option(
        ("--ddp-bucket-size",),
        "Megatron-Core DDP's gradient bucket in parameters (--ddp-bucket-size): each bucket its own collective.",
        None,
        SIZE,
    ),
    Option(
        ("--dfa-bucket-mb",),
        "NeMo 1's Apex DistributedFusedAdam: its bucket_cap_mb, every chunk synced in buckets of that many MB.",
        None,
        FiniteRange(min=DFA_BUCKET_MIN_MB),
    ),
    Option(
        ("--pp-scatter-gather",), "Model the 2021 pipeline scatter/gather optimisation.", False, flag=True, solo=True
    ),
    Option(("--overlap-p2p-comm",), "Interleaved schedule overlaps p2p (Megatron default).", True, flag=True),
    Option(
        ("--async-tp-comm",),
        "Backward TP collectives overlap the weight-gradient GEMMs (off in the 2021 code).",
        True,
        flag=True,
    ),
    Option(
        ("--tp-comm-overlap",),
        "--tp-comm-overlap: TP collectives overlapped with GEMMs by userbuffers (needs SP).",
        False,
        flag=True,
        solo=True,
        searched=True,
        derived="with SP, both ways (userbuffers take memory and SMs); without SP, off",
    ),
    Option(
        ("--tp-comm-overlap-cfg",),
        "Transformer Engine userbuffer YAML (Megatron-LM's flag) for --tp-comm-overlap; 'bridge': Megatron-Bridge's "
        "preset for the GPU and shape, as NVIDIA's recipes run; or one of those presets by name "
        "(userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192) [default: Transformer Engine's defaults].",
        type=click.Path(dir_okay=False),
    ),
    Option(
        ("--fp8",),
        "--fp8-format: linear GEMMs in FP8 (MFU still against the BF16 peak).",
        None,
        click.Choice(["e4m3", "hybrid"]),
    ),
    Option(
        ("--fp8-recipe",),
        "FP8 scaling (blockwise: Hopper, Blackwell by MXFP8 emulation from Transformer Engine 2.9; mxfp8: Blackwell).",
        "delayed",
        click.Choice(["delayed", "tensorwise", "blockwise", "mxfp8"]),
    ),
    Option(
        ("--fp8-param-gather",), "Keep and all-gather FP8 weights (no 16-bit weight copy).", False, flag=True, solo=True
    ),
    Option(
        ("--fp4",),
        "--fp4-format: linear GEMMs in NVFP4 (Transformer Engine NVFP4BlockScaling; compute capability ≥ 10; not "
        "with --fp8; dense models).",
        None,
        click.Choice(["e2m1"]),
    ),
    Option(
        ("--fp4-param-gather",),
        "With --fp4: keep and all-gather NVFP4 weights (no 16-bit weight copy).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--first-last-layers-bf16",),
        "With --fp8: the first N and last M decoder layers' GEMMs in BF16 (not with --fp8-recipe delayed).",
        False,
        flag=True,
        solo=True,
    ),
    Option(("--num-layers-at-start-in-bf16",), "N of --first-last-layers-bf16 (at most L/pp).", 1, IntRange(min=0)),
    Option(("--num-layers-at-end-in-bf16",), "M of --first-last-layers-bf16 (at most L/pp).", 1, IntRange(min=0)),
    Option(
        ("--fp8-dot-product-attention",),
        "The attention core in FP8 (Megatron-Core fp8_dot_product_attention, no Megatron-LM flag): MXFP8 under "
        "--fp8-recipe mxfp8, else cuDNN's per-tensor FP8 kernel (with --fp4: current scaling, the export sets "
        "NVTE_DPA_FP8_RECIPE).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--fp8-output-proj",),
        "The output layer's logits GEMM in MXFP8 (with --fp8-recipe mxfp8).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--moe-token-dispatcher",),
        "MoE token dispatcher (flex: DeepEP/HybridEP).",
        "allgather",
        click.Choice(["allgather", "alltoall", "flex"]),
        searched=True,
    ),
    Option(
        ("--overlap-moe-expert-parallel-comm",),
        "Hide the expert all-to-all behind another micro-batch (MoE, alltoall/flex).",
        False,
        flag=True,
        solo=True,
        searched=True,
    ),
    Option(
        ("--moe-flex-dispatcher-backend",),
        "Library behind the flex dispatcher (default: hybridep on a multi-node NVLink domain, GB200/GB300 NVL72, "
        "where DeepEP does not run; else deepep).",
        None,
        click.Choice(["deepep", "hybridep", "ncclep"]),
    ),
    Option(
        ("--moe-shared-expert-overlap",),
        "Run the shared experts while tokens are dispatched (alltoall/flex).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--moe-flex-dispatcher-num-sms",),
        "SMs the flex dispatcher's kernels hold (default: the backend's, DeepEP 20, HybridEP 16).",
        None,
        IntRange(min=1),
    ),
    Option(
        ("--moe-hybridep-num-sms-preprocessing",),
        "SMs of HybridEP's metadata scan kernel, one block an SM (flex with hybridep; default 108, Megatron-Core's).",
        108,
        IntRange(min=1),
    ),
    Option(
        ("--delay-wgrad-compute",),
        "With --overlap-moe-expert-parallel-comm: the experts' weight gradients run beside the backward dispatch.",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--use-transformer-engine-op-fuser",),
        "MoE experts as Transformer Engine's fused grouped MLP (expert TP 1; dense MLPs: not modelled).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--moe-permute-fusion",),
        "MoE: Transformer Engine's fused token permutation (every Megatron-Bridge MoE recipe; off: Megatron-Core's "
        "index_select / scatter_add_ path, a launch script's default).",
        True,
        flag=True,
    ),
    Option(
        ("--moe-router-padding-for-quantization",),
        "MoE with FP8: the router pads each expert's tokens to the quantisation alignment (alltoall/flex).",
        False,
        flag=True,
        solo=True,
    ),
    Option(
        ("--moe-capacity-factor",),
        "Expert capacity factor (default: dropless).",
        None,
        FiniteRange(min=0, min_open=True),
    ),
    Option(
        ("--moe-load-imbalance",),
        "Busiest expert's load over the mean, for dropless routing.",
        1.1,
        FiniteRange(min=1.0),
    ),
    *MEMORY_OPTIONS,
    Option(
        ("--memory-headroom",),
        "Share of the GPU memory PyTorch can allocate kept free against the memory model's error "
        f"[default: {api.DEFAULT_MEMORY_HEADROOM:g}].",
        None,
        FiniteRange(0, 0.9),
    ),
)


def _apply(f, options):
    for opt in reversed(options):
        f = opt(f)
    return f


def plan_options(f):
    """The options that describe one configuration (explain, export, compare)."""
    return _apply(f, [o.decorator(search=False) for o in PLAN_OPTIONS])


def search_options(f):
    """The same options for search and sweep: a searched knob given is pinned, left out is searched."""
    return _apply(f, [o.decorator(search=True) for o in PLAN_OPTIONS if not o.plan_only])


BRIDGE_SOURCE = ("bridge_recipe", "bridge_version", "bridge_config", "bridge_override")


def bridge_source_options(f):
    """search: a Megatron-Bridge recipe (with overrides or a config file) as the model, batch and precision."""
    return _apply(f, [o.decorator(search=False) for o in PLAN_OPTIONS if dest(o) in BRIDGE_SOURCE])


def with_run(req: api.PlanRequest, kw: dict) -> api.PlanRequest:
    """A plan from a file or a command line, with the run's --tokens and --gpu-hour-price when given."""
    run = {k: v for k, v in (("train_tokens", kw.get("tokens")), ("gpu_hour_price", kw.get("gpu_hour_price"))) if v}
    if not run:
        return req
    training = req.ctx.training.model_copy(update=run)
    return api.PlanRequest(
        ctx=api.Context(req.ctx.model, req.ctx.hardware, training, req.ctx.options), plan=req.plan, gpus=req.gpus
    )


def refuse_method_without_full(kw: dict, given: set[str] | None = None) -> None:
    """--recompute-method or --recompute-num-layers given with --recompute none/selective: Megatron-LM asserts the
    method is unset with selective recomputation (arguments.py: 'recompute method is not yet supported for
    selective recomputing granularity'), Megatron-Core the number ("recompute_num_layers must be None",
    transformer_config.py:1926-1932 @ d98e8a64), and both use them with full only; megaplan read `--recompute
    selective --recompute-method uniform` as if the method had not been given (fresh user trial 5), and search
    noted of `--recompute selective --recompute-num-layers 3` that plans with selective recomputation were searched
    as well (qa21)."""
    from planner.cli.resolve import given_options

    given = given_options() if given is None else given
    recompute = kw.get("recompute")
    if "recompute" not in given or recompute not in ("none", "selective"):
        return
    if "recompute_method" in given:
        raise PlannerError(
            f"--recompute-method {kw.get('recompute_method')} goes with --recompute full only (Megatron-LM refuses a "
            f"method with selective recomputation and ignores it without one); drop it or give --recompute full"
        )
    if "recompute_num_layers" in given and kw.get("recompute_num_layers") is not None:
        raise PlannerError(
            f"--recompute-num-layers {kw['recompute_num_layers']} goes with --recompute full only (Megatron-Core "
            f"refuses it with selective recomputation and ignores it without one); drop it or give --recompute full"
        )


def note_beyond_chunks(kw: dict, plans: list[dict]) -> None:
    """A pinned --recompute-num-layers larger than some plans' model chunks: Megatron-LM accepts it and
    recomputes the whole chunk; each such plan's label gives the count that runs, which this says."""
    given = kw.get("recompute_num_layers")
    runs = {p["parallel"]["recompute_num_layers"] or 1 for p in plans if p["parallel"]["recompute"] == "full"}
    less = sorted(n for n in runs if n < (given or 0))
    if less:
        click.echo(
            f"megaplan: note: --recompute-num-layers {given} is more than the layers of a model chunk in "
            f"{'some' if len(less) < len(runs) else 'the'} plans shown; Megatron-LM accepts it and recomputes "
            f"the whole chunk, so their labels give the layers that run ({', '.join(map(str, less))})",
            err=True,
        )


def dest(opt: Option) -> str:
    """The parameter name an option sets."""
    return (
        opt.decls[1] if len(opt.decls) > 1 and not opt.decls[1].startswith("-") else opt.decls[0][2:].replace("-", "_")
    )
