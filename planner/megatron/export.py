"""Megatron-LM launch flags, a Slurm launch script and the plan JSON for one plan.

Flags are spelled as Megatron-LM's megatron/training/arguments.py spells them (the table in
planner/megatron/data/megatron_arguments.json); `megaplan explain --megatron-args` reads them back.
"""

from __future__ import annotations

import shlex
import textwrap

from planner.api import PlanRequest
from planner.hardware.userbuffers import BRIDGE, BRIDGE_PREFIX, option_value
from planner.models.patterns import pattern_text
from planner.models.spec import Normalization, PositionEmbedding, SoftmaxType
from planner.plan import (
    DEFAULT_TRAIN_TOKENS,
    AttentionKernel,
    CudaGraphImpl,
    FlexBackend,
    Fp8Recipe,
    FsdpOuterSharding,
    PlanOptions,
    Recompute,
    TokenDispatcher,
    plan_label,
    plan_label_legend,
)
from planner.whole import number_word

DEFAULT_RECOMPUTE_MODULES = PlanOptions.model_fields["recompute_modules"].default
NORM_EPSILON = 1e-5  # Megatron-LM's --norm-epsilon default (arguments.py @ d98e8a64)


def model_flags(req: PlanRequest) -> list[str]:
    m, tr = req.ctx.model, req.ctx.training
    flags = [
        "--num-layers",
        m.num_layers,
        "--hidden-size",
        m.hidden_size,
        "--num-attention-heads",
        m.num_attention_heads,
        "--ffn-hidden-size",
        m.ffn,
        "--seq-length",
        tr.seq_len,
        "--max-position-embeddings",
        max_position_embeddings(req),
        "--vocab-size",
        m.vocab_size,
        "--make-vocab-size-divisible-by",
        m.make_vocab_size_divisible_by,
    ]
    if m.num_query_groups is not None and m.num_query_groups != m.num_attention_heads:
        flags += ["--group-query-attention", "--num-query-groups", m.num_query_groups]
    if m.kv_channels is not None:
        flags += ["--kv-channels", m.kv_channels]
    if m.multi_latent_attention:
        flags += ["--multi-latent-attention", "--kv-lora-rank", m.kv_lora_rank, "--qk-head-dim", m.qk_head_dim]
        flags += ["--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim, "--v-head-dim", m.v_head_dim]
        if m.q_lora_rank is not None:
            flags += ["--q-lora-rank", m.q_lora_rank]
    for on, flag in ((m.swiglu, "--swiglu"), (m.squared_relu, "--squared-relu"), (m.quick_geglu, "--quick-geglu")):
        if on:
            flags.append(flag)
    if m.glu_linear_offset:
        flags += ["--glu-linear-offset", m.glu_linear_offset]
    if m.activation_func_clamp_value is not None:
        flags += ["--activation-func-clamp-value", m.activation_func_clamp_value]
    flags += _norm_flags(m) + _position_flags(m)
    if m.untie_embeddings_and_output_weights:
        flags.append("--untie-embeddings-and-output-weights")
    if not m.add_bias_linear:
        flags.append("--disable-bias-linear")
    flags += ["--hidden-dropout", m.hidden_dropout, "--attention-dropout", m.attention_dropout]
    if m.softmax_type is not SoftmaxType.VANILLA:
        flags += ["--softmax-type", m.softmax_type.value]
    if m.window_size is not None:
        flags += ["--window-size", ",".join(str(x) for x in m.window_size)]
        if m.window_attn_skip_freq is not None:
            flags += ["--window-attn-skip-freq", _freq(m.window_attn_skip_freq)]
    if m.mtp_num_layers:
        flags += ["--mtp-num-layers", m.mtp_num_layers]
    if m.is_moe:
        flags += moe_model_flags(m)
    return flags


def _norm_flags(m) -> list:
    """The norms: LayerNorm or RMSNorm, its ε, LayerNorm's zero-centred γ (Nemotron-4) and per-head q/k norms."""
    flags = []
    if m.normalization is not Normalization.LAYERNORM:
        flags += ["--normalization", m.normalization.value]
    if m.norm_epsilon != NORM_EPSILON:
        flags += ["--norm-epsilon", m.norm_epsilon]
    if m.apply_layernorm_1p:
        flags.append("--apply-layernorm-1p")
    if m.qk_layernorm:
        flags.append("--qk-layernorm")
    return flags


def _position_flags(m) -> list:
    """The position embedding: its type, RoPE's θ, the rotated fraction of each head (--rotary-percent),
    Llama 3.x's frequency scaling (Megatron-LM rope_utils.apply_rope_scaling, the factor read only with
    --use-rope-scaling) and YaRN's scale s, mscale coefficients, pre-extension context and correction-range
    rounding (Megatron-LM argument_utils._apply_yarn_config_from_args, and MLATransformerConfig for multi-latent
    attention, whose RoPE is YaRN by default: without --rotary-scaling-factor either runs at s = 1)."""
    flags = []
    if m.position_embedding_type is not PositionEmbedding.LEARNED:
        flags += ["--position-embedding-type", m.position_embedding_type.value]
    if m.rotary_base is not None:
        flags += ["--rotary-base", m.rotary_base]
    if m.rotary_percent != 1.0:
        flags += ["--rotary-percent", m.rotary_percent]
    if m.rope_scaling_factor is not None:
        flags += ["--use-rope-scaling", "--rope-scaling-factor", m.rope_scaling_factor]
    if m.rotary_scaling_factor is not None:
        flags += ["--rotary-scaling-factor", m.rotary_scaling_factor]
    if m.mscale != 1.0:
        flags += ["--mscale", m.mscale]
    if m.mscale_all_dim != 0.0:
        flags += ["--mscale-all-dim", m.mscale_all_dim]
    if m.yarn_original_max_position_embeddings is not None:
        flags += ["--yarn-original-max-position-embeddings", m.yarn_original_max_position_embeddings]
    if not m.yarn_correction_range_round_to_int:
        flags.append("--no-yarn-correction-range-round-to-int")
    return flags


def _freq(value: int | tuple[int, ...]) -> int | str:
    return value if isinstance(value, int) else pattern_text(value)


def moe_model_flags(m) -> list:
    """The mixture-of-experts architecture and router, in Megatron-LM's flag names."""
    flags = ["--num-experts", m.num_experts, "--moe-router-topk", m.moe_router_topk]
    flags += ["--moe-ffn-hidden-size", m.expert_ffn]
    if m.moe_layer_freq != 1:
        flags += ["--moe-layer-freq", _freq(m.moe_layer_freq)]
    if m.moe_shared_expert_intermediate_size:
        flags += ["--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size]
    if m.moe_router_score_function.value != "softmax":
        flags += ["--moe-router-score-function", m.moe_router_score_function.value]
    if m.moe_router_pre_softmax:
        flags.append("--moe-router-pre-softmax")
    if m.moe_router_num_groups:
        flags += [
            "--moe-router-num-groups",
            m.moe_router_num_groups,
            "--moe-router-group-topk",
            m.moe_router_group_topk,
        ]
    if m.moe_router_topk_scaling_factor is not None:
        flags += ["--moe-router-topk-scaling-factor", m.moe_router_topk_scaling_factor]
    if m.moe_router_enable_expert_bias:
        flags.append("--moe-router-enable-expert-bias")
    if m.moe_router_dtype:
        flags += ["--moe-router-dtype", m.moe_router_dtype]
    return flags


def parallel_flags(req: PlanRequest) -> list[str]:
    """The plan's Megatron-LM flags: sizes and batches, experts, the pipeline's shape, recomputation, data
    parallelism, precision, memory options, attention and the overlaps, in that order."""
    p, tr = req.plan, req.ctx.training
    flags = [
        "--tensor-model-parallel-size",
        p.tp,
        "--pipeline-model-parallel-size",
        p.pp,
        "--micro-batch-size",
        p.micro_batch,
        "--global-batch-size",
        tr.global_batch,
    ]
    if p.cp > 1:
        flags += ["--context-parallel-size", p.cp]
    if req.ctx.model.is_moe:
        flags += _expert_flags(req)
    flags += _pipeline_flags(req)
    flags += recompute_flags(req)
    flags += _data_parallel_flags(req)
    flags += _precision_flags(req)
    flags += memory_option_flags(req)
    flags.append({"bf16": "--bf16", "fp16": "--fp16"}.get(tr.precision.value, "") or None)
    flags += _overlap_flags(req)
    return [f for f in flags if f is not None]


def _expert_flags(req: PlanRequest) -> list:
    p, o = req.plan, req.ctx.options
    flags = ["--expert-model-parallel-size", p.ep, "--expert-tensor-parallel-size", p.etp]
    flags += ["--moe-token-dispatcher-type", p.moe_token_dispatcher.value, "--moe-grouped-gemm"]
    if p.moe_token_dispatcher is TokenDispatcher.FLEX:
        flags += ["--moe-flex-dispatcher-backend", o.moe_flex_dispatcher_backend.value]
        if o.moe_flex_dispatcher_num_sms is not None:
            flags += ["--moe-flex-dispatcher-num-sms", o.moe_flex_dispatcher_num_sms]
        if o.moe_flex_dispatcher_backend.value == "hybridep" and o.moe_hybridep_num_sms_preprocessing != 108:
            flags += ["--moe-hybridep-num-sms-preprocessing", o.moe_hybridep_num_sms_preprocessing]
    if p.overlap_moe_expert_parallel_comm:
        flags.append("--overlap-moe-expert-parallel-comm")
        if o.delay_wgrad_compute:
            flags.append("--delay-wgrad-compute")
    if o.moe_shared_expert_overlap:
        flags.append("--moe-shared-expert-overlap")
    if o.use_transformer_engine_op_fuser:
        flags.append("--use-transformer-engine-op-fuser")
    if o.moe_router_padding_for_quantization:
        flags.append("--moe-router-padding-for-quantization")
    if o.moe_permute_fusion:  # Megatron-LM's default is off: the unfused index_select / scatter_add_ path
        flags.append("--moe-permute-fusion")
    if o.moe_capacity_factor is not None:
        flags += ["--moe-expert-capacity-factor", o.moe_capacity_factor]
    return flags


def _pipeline_flags(req: PlanRequest) -> list:
    """The pipeline's shape (layout or virtual stages, micro-batch group, split) and sequence parallelism."""
    p, flags = req.plan, []
    if p.pipeline_layout is not None:
        flags += ["--pipeline-model-parallel-layout", p.pipeline_layout]
    elif p.vpp > 1:
        flags += ["--num-virtual-stages-per-pipeline-rank", p.vpp]
    if p.microbatch_group_size is not None:
        flags += ["--microbatch-group-size-per-virtual-pipeline-stage", p.microbatch_group_size]
    if p.stage_split.embedding_counted:
        flags.append("--account-for-embedding-in-pipeline-split")
    if p.stage_split.loss_counted:
        flags.append("--account-for-loss-in-pipeline-split")
    if p.first_stage_layers:
        flags += ["--decoder-first-pipeline-num-layers", p.first_stage_layers]
    if p.last_stage_layers:
        flags += ["--decoder-last-pipeline-num-layers", p.last_stage_layers]
    if p.sequence_parallel and p.tp > 1:
        flags.append("--sequence-parallel")
    return flags


def _data_parallel_flags(req: PlanRequest) -> list:
    """The distributed optimizer, its instances, and Megatron FSDP with its own checkpoint format (arguments.py)."""
    p, flags = req.plan, []
    if p.distributed_optimizer or p.fsdp:
        flags.append("--use-distributed-optimizer")
    if p.distributed_optimizer_instances > 1:
        flags += ["--num-distributed-optimizer-instances", p.distributed_optimizer_instances]
    if p.fsdp:
        flags += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", p.fsdp_sharding.value]
        flags += ["--ckpt-format", "fsdp_dtensor"]
        if p.fsdp_outer_sharding is not FsdpOuterSharding.NO_SHARD:
            flags += ["--outer-dp-sharding-strategy", p.fsdp_outer_sharding.value]
    return flags


def _precision_flags(req: PlanRequest) -> list:
    o, flags = req.ctx.options, []
    if o.fp8 is not None:
        flags += ["--fp8-format", o.fp8.value]
        if o.fp8_recipe is not Fp8Recipe.DELAYED:
            flags += ["--fp8-recipe", o.fp8_recipe.value]
        if o.fp8_param_gather:
            flags.append("--fp8-param-gather")
    if o.fp4 is not None:  # --fp4-recipe nvfp4 is Megatron-LM's default
        flags += ["--fp4-format", o.fp4.value]
        if o.fp4_param_gather:
            flags.append("--fp4-param-gather")
    if o.first_last_layers_bf16 and (o.fp8 is not None or o.fp4 is not None):  # read only under FP8 or FP4
        flags.append("--first-last-layers-bf16")
        flags += ["--num-layers-at-start-in-bf16", o.num_layers_at_start_in_bf16]
        flags += ["--num-layers-at-end-in-bf16", o.num_layers_at_end_in_bf16]
    if o.fp8 is not None and o.fp8_output_proj:
        flags.append("--fp8-output-proj")
    return flags


def _overlap_flags(req: PlanRequest) -> list:
    """The attention backend and the overlap and fusion switches."""
    o = req.ctx.options
    # auto (Megatron's default) lets Transformer Engine pick flash or cuDNN fused attention, which keep no
    # s×s tensor; "flash" rules out cuDNN's kernel on Hopper and any kernel in fp32: only where the plan asks for it
    backend = "flash" if o.te_flash_attn else "auto"
    flags = ["--attention-backend", "unfused" if o.attention_kernel is AttentionKernel.UNFUSED else backend]
    for enabled, flag in (
        (o.overlap_grad_reduce, "--overlap-grad-reduce"),
        (o.overlap_param_gather, "--overlap-param-gather"),
        (o.grad_reduce_in_bf16, "--grad-reduce-in-bf16"),
        (o.use_sharp, "--use-sharp"),
        (o.tp_comm_overlap, "--tp-comm-overlap"),
        # without interleaving Megatron-LM turns the overlap off itself; the flag keeps the plan's own setting
        (not o.overlap_p2p_comm, "--no-overlap-p2p-communication"),
        # Megatron-LM compiles squared ReLU and fuses GeLU either way; only the GLU can run op by op
        (req.ctx.model.gated and not o.activation_fusion, "--no-bias-swiglu-fusion"),
    ):
        if enabled:
            flags.append(flag)
    if o.tp_comm_overlap and o.tp_comm_overlap_cfg is not None and not _bridge_userbuffers(o.tp_comm_overlap_cfg):
        flags += ["--tp-comm-overlap-cfg", o.tp_comm_overlap_cfg.name]  # a file's path
    if o.ddp_bucket_size is not None:
        flags += ["--ddp-bucket-size", str(o.ddp_bucket_size)]
    return flags


def max_position_embeddings(req: PlanRequest) -> int:
    """--max-position-embeddings: the model's, raised to --seq-length where the run is longer (Megatron
    asserts max_position_embeddings >= seq_length for every position-embedding type; RoPE has no table
    to outgrow, learned positions are refused by the rule table before export)."""
    return max(req.ctx.model.max_position_embeddings, req.ctx.training.seq_len)


def recompute_flags(req: PlanRequest) -> list:
    """--recompute-granularity with its method and layer count (full) or modules (selective). Selective
    recomputation of no module recomputes nothing, and Megatron's --recompute-modules takes at least one
    value (argparse nargs='+': "expected at least one argument"), so that plan is written as no
    recomputation, which is what runs and what it costs."""
    p, o = req.plan, req.ctx.options
    if p.recompute is Recompute.SELECTIVE and not o.recompute_modules:
        return []
    if p.recompute is Recompute.SELECTIVE:
        flags: list = ["--recompute-granularity", "selective"]
        if o.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
            flags += ["--recompute-modules", *(m.value for m in o.recompute_modules)]
        return flags
    if p.recompute is Recompute.FULL:
        flags = ["--recompute-granularity", "full", "--recompute-method", p.recompute_method.value]
        flags += ["--recompute-num-layers", p.recomputed_layers]
        if o.distribute_saved_activations:  # the rule table keeps it to tp > 1 without SP, as Megatron-LM does
            flags.append("--distribute-saved-activations")
        return flags
    return []


def memory_option_flags(req: PlanRequest) -> list:
    """CPU offloading, the precision-aware optimizer and its dtypes, the gradient buffer's dtype and CUDA graphs
    (a full-iteration graph with the NaN check off, which Megatron-LM's validate_args requires)."""
    o, flags = req.ctx.options, []
    if o.cpu_offloading_num_layers:
        flags += ["--cpu-offloading-num-layers", o.cpu_offloading_num_layers]
    if o.use_precision_aware_optimizer:
        flags.append("--use-precision-aware-optimizer")
        for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
            if getattr(o, name) != "fp32":
                flags += ["--" + name.replace("_", "-"), getattr(o, name)]
    if o.main_grads_dtype != "fp32":
        flags += ["--main-grads-dtype", o.main_grads_dtype]
    if o.cuda_graph_impl is not CudaGraphImpl.NONE:
        flags += ["--cuda-graph-impl", o.cuda_graph_impl.value]
        if o.cuda_graph_modules:
            flags += ["--cuda-graph-modules", *(m.value for m in o.cuda_graph_modules)]
    if o.cuda_graph_impl is CudaGraphImpl.FULL_ITERATION:
        # validate_args: "--no-check-for-nan-in-loss-and-grad should be set with --cuda-graph-impl=full_iteration
        # for training" (the check reads the loss on the host, inside the graph)
        flags.append("--no-check-for-nan-in-loss-and-grad")
    return flags


def nccl_graph_register_off(req: PlanRequest) -> bool:
    """Whether the launch needs NCCL_GRAPH_REGISTER=0: Transformer Engine's CUDA graphs with expandable segments,
    which Megatron-LM's validate_args refuses otherwise ("Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory
    access when using CUDA Graph with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", arguments.py @ d98e8a64)."""
    o = req.ctx.options
    return o.expandable_segments and o.cuda_graph_impl is CudaGraphImpl.TRANSFORMER_ENGINE


# Transformer Engine runs NVFP4 linears with FP8 attention only when told which FP8 recipe the attention takes
# (dot_product_attention.py's recipe table @ d0067d0, "NVFP4 | FP8CS"); MLPerf v5.1's NVFP4 configs export this
# (config_common_fp4.sh).
DPA_FP8_RECIPE = "NVTE_DPA_FP8_RECIPE=Float8CurrentScaling"
DPA_FP8_RECIPE_WHY = "NVFP4 linears with attention in per-tensor FP8 (Transformer Engine's NVFP4 | FP8CS recipe)"


def nvfp4_fp8_attention(req: PlanRequest) -> bool:
    """Whether the plan runs NVFP4 linears with its attention in FP8 (``--fp8-dot-product-attention``), which
    Transformer Engine needs NVTE_DPA_FP8_RECIPE for."""
    o = req.ctx.options
    return o.fp4 is not None and o.fp8_dot_product_attention


def environment_lines(req: PlanRequest) -> list[str]:
    """Environment the plan needs that no flag sets: CUDA_DEVICE_MAX_CONNECTIONS, the allocator and NCCL's graph
    registration."""
    lines = []
    connections = cuda_device_max_connections(req)
    if connections is not None:
        value, why = connections
        lines.append(
            f"unset CUDA_DEVICE_MAX_CONNECTIONS  # {why}"
            if value is None
            else f"export CUDA_DEVICE_MAX_CONNECTIONS={value}  # {why}"
        )
    if req.ctx.options.expandable_segments:
        lines.append("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # no allocator fragmentation")
    if nvfp4_fp8_attention(req):
        lines.append(f"export {DPA_FP8_RECIPE}  # {DPA_FP8_RECIPE_WHY}")
    if nccl_graph_register_off(req):
        lines.append(
            "export NCCL_GRAPH_REGISTER=0  # Megatron-LM requires it for TE CUDA graphs with expandable segments"
        )
    return lines


DEFAULT_LOAD_IMBALANCE = PlanOptions.model_fields["moe_load_imbalance"].default


def _bridge_userbuffers(cfg) -> bool:
    """A userbuffer config of Megatron-Bridge's (``bridge`` or a preset by name), not a file Megatron-LM reads."""
    return cfg.name == BRIDGE or cfg.name.startswith(BRIDGE_PREFIX)


def unwritten_settings(req: PlanRequest) -> list[tuple[list[str], str]]:
    """The plan's settings that change its estimate but that no Megatron-LM flag or launch environment can
    carry, each as (the megaplan options that restore it when the flags are read back, none for a setting only a
    plan file keeps; why no flag says it). Read back without them, the flags give another estimate."""
    o, out = req.ctx.options, []
    if o.pp_scatter_gather:
        out.append(
            (["--pp-scatter-gather"], "the 2021 pipeline scatter/gather, which today's Megatron-LM has no flag for")
        )
    if not o.async_tp_comm:
        out.append(
            (["--no-async-tp-comm"], "the 2021 TP all-reduce without overlap; today's Megatron-LM always overlaps")
        )
    if o.tp_comm_overlap and o.tp_comm_overlap_cfg is not None and _bridge_userbuffers(o.tp_comm_overlap_cfg):
        out.append(
            (
                ["--tp-comm-overlap-cfg", option_value(o.tp_comm_overlap_cfg)],
                "Megatron-Bridge's userbuffer preset; Megatron-LM reads userbuffer settings only from a YAML file "
                "(--tp-comm-overlap-cfg FILE) and without one runs Transformer Engine's defaults",
            )
        )
    if o.dp_max_ctas is not None:
        out.append(
            (
                ["--dp-max-ctas", str(o.dp_max_ctas)],
                "the DP communicators' max_ctas, which Megatron-LM reads from a YAML file (--nccl-communicator-config-"
                f"path: max_ctas: {o.dp_max_ctas} under its dp and dp_cp groups)",
            )
        )
    if o.dfa_bucket_mb is not None:
        out.append((["--dfa-bucket-mb", f"{o.dfa_bucket_mb:g}"], "NeMo 1's Apex optimizer buckets, not in Megatron-LM"))
    if req.ctx.model.is_moe and o.moe_load_imbalance != DEFAULT_LOAD_IMBALANCE:
        out.append(
            (
                ["--moe-load-imbalance", f"{o.moe_load_imbalance:g}"],
                "the busiest expert's load over the mean: the estimate's assumption about the router, no setting",
            )
        )
    for on, restore, what in (
        (
            o.fp8_dot_product_attention and o.quantised,
            ["--fp8-dot-product-attention"],
            "attention in FP8 (Megatron-Core fp8_dot_product_attention",
        ),
        (o.tp_only_amax_red, [], "FP8 amaxes reduced over TP×CP only (Megatron-Core tp_only_amax_red"),
    ):
        if on:
            out.append((restore, f"{what}: set it in the model's TransformerConfig, or export for Megatron-Bridge)"))
    if o.ub_graph_reorders_rs:
        out.append(([], "Transformer Engine before v2.16 under CUDA graphs (the version, not a setting)"))
    if o.attention_time_ratio != 1.0 and not o.te_flash_attn:
        out.append(
            (
                [],
                f"attention kernels at {o.attention_time_ratio:.3g}x the law's time: an older release's kernels (the "
                "software, not a setting)",
            )
        )
    if o.fp8 is not None and o.fp8_recipe.value == "blockwise" and req.ctx.hardware.gpu.compute_capability >= 10:
        out.append(([], BLOCKWISE_ON_BLACKWELL))
    return out


# Transformer Engine quantization.py _compute_fp8_block_scaling_support: 9.0 <= capability < 10.0 in v2.3-v2.8,
# >= 9.0 from v2.9 (TE #2157, gemm.cpp's MXFP8 emulation); the version, not a setting
BLOCKWISE_ON_BLACKWELL = (
    "Transformer Engine ≥ 2.9, which runs --fp8-recipe blockwise on Blackwell as MXFP8 (2.3-2.8 stop at the first "
    "step: 'FP8 block scaled GEMM requires Hopper and CUDA >= 12.9.')"
)


def model_notes(req: PlanRequest) -> list[str]:
    """What of the published model no Megatron-LM flag carries (``ModelSpec.not_in_megatron``): the flags, like the
    estimate, train without it."""
    m = req.ctx.model
    return [f"the published {m.name}: {m.not_in_megatron}"] if m.not_in_megatron else []


def megatron_argv(req: PlanRequest) -> list[str]:
    """The pretrain_gpt.py arguments that set up this plan (architecture, parallelism, batch,
    recomputation, precision, sequence length), as strings."""
    return [str(x) for x in model_flags(req) + parallel_flags(req)]


def flags_text(req: PlanRequest) -> str:
    """The flags one per line, each with all its values (--recompute-modules takes several), with
    continuations, ready to paste after pretrain_gpt.py."""
    lines: list[str] = []
    for arg in megatron_argv(req):
        if arg.startswith("--") or not lines:
            lines.append(arg)
        else:
            lines[-1] += " " + shlex.quote(arg)
    return " \\\n".join(lines) + "\n"


BLACKWELL_COMPUTE_CAPABILITY = 10.0


def cuda_device_max_connections(req: PlanRequest) -> tuple[int | None, str] | None:
    """What the launch sets CUDA_DEVICE_MAX_CONNECTIONS to, and why: (1, ...), (8 or 32, ...), (None, ...) to unset
    it; None: nothing to say (Megatron-LM's default serves).

    Before Blackwell with TP or CP > 1, Megatron-LM asserts 1 (arguments.py validate_args: TP/CP communication
    kernels queued ahead of the GEMMs), except with Megatron FSDP, which needs more than one connection (unset,
    on any GPU), and with --overlap-moe-expert-parallel-comm, where it only warns ("you can set
    CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32"): the estimate prices that plan with more than one connection (the TP
    overlaps lost, communication.connection_limited), as Megatron-Bridge's performance scripts launch it: 32 with
    the DeepEP or HybridEP flex dispatcher, else 8 (scripts/performance/utils/overrides.py). It said 1 (ux15)."""
    if req.plan.fsdp:
        return None, "Megatron FSDP needs more than one CUDA connection"
    pre_blackwell = req.ctx.hardware.gpu.compute_capability < BLACKWELL_COMPUTE_CAPABILITY
    if not pre_blackwell or (req.plan.tp == 1 and req.plan.cp == 1):
        return None
    if req.plan.overlap_moe_expert_parallel_comm and req.ctx.model.is_moe:
        backend = req.ctx.options.moe_flex_dispatcher_backend
        deep = req.plan.moe_token_dispatcher is TokenDispatcher.FLEX and backend in (
            FlexBackend.DEEPEP,
            FlexBackend.HYBRIDEP,
        )
        return (32 if deep else 8), "the expert all-to-all overlap wants more than one connection (as Bridge sets)"
    return 1, "TP/CP communication ordering before Blackwell"


GPT2_VOCAB = 50257


def tokenizer_lines(req: PlanRequest) -> tuple[str, str]:
    """The Slurm script's tokenizer: GPT-2 BPE for the GPT-2 vocabulary, else a Hugging Face tokenizer
    (Megatron reads --vocab-size only for its Null and TikToken tokenizers, build_tokenizer.py)."""
    if req.ctx.model.vocab_size == GPT2_VOCAB:
        return (
            (
                ': "${VOCAB_FILE:?set VOCAB_FILE to the GPT-2 vocabulary (PLACEHOLDER)}"\n'
                ': "${MERGE_FILE:?set MERGE_FILE to the GPT-2 merges (PLACEHOLDER)}"\n'
            ),
            'TOKENIZER_ARGS=(--tokenizer-type GPT2BPETokenizer --vocab-file "$VOCAB_FILE" --merge-file "$MERGE_FILE")',
        )
    return (
        (
            f': "${{TOKENIZER_MODEL:?set TOKENIZER_MODEL to the {req.ctx.model.vocab_size}-token tokenizer '
            f'(a Hugging Face name or path; PLACEHOLDER)}}"\n'
        ),
        'TOKENIZER_ARGS=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER_MODEL")',
    )


def _comment(text: str) -> str:
    """``text`` as shell comment lines of at most 100 columns."""
    return textwrap.fill(text, 100, initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False) + "\n"


def readback_args(
    req: PlanRequest, flags_only: bool = False, model_ref: str | None = None, hardware_ref: str | None = None
) -> list[str]:
    """What `megaplan explain --megatron-args-file` needs beside the script to rebuild the plan: the model preset
    (the script has its architecture, not its name), the hardware, the settings no flag carries and the tokens and
    price the days and cost count; for the flags alone (``flags_only``), the allocator setting a script exports
    too. ``model_ref``/``hardware_ref``: the --model/--hardware the export was given; a YAML file is written by its
    absolute path (the read-back runs from any folder), a hardware file not given stays YOUR_HARDWARE.yaml."""
    from planner.presets import command_ref, is_file_ref, preset_names

    model_file = model_ref is not None and is_file_ref(model_ref)
    if model_file:
        args = ["--model", command_ref(model_ref)]
    else:
        args = ["--model", req.ctx.model.name] if req.ctx.model.name in preset_names("models") else []
    hw = req.ctx.hardware.name
    if hardware_ref is not None and is_file_ref(hardware_ref):
        hw = command_ref(hardware_ref)
    elif hw not in preset_names("hardware"):
        hw = "YOUR_HARDWARE.yaml"
    args += ["--hardware", hw]
    args += [a for restore, _ in unwritten_settings(req) for a in restore]
    tr = req.ctx.training
    if tr.train_tokens != DEFAULT_TRAIN_TOKENS:  # days, GPU-hours, cost and energy count them
        args += ["--tokens", number_word(tr.train_tokens)]
    if tr.gpu_hour_price is not None:
        args += ["--gpu-hour-price", number_word(tr.gpu_hour_price)]
    return args + (["--expandable-segments"] if flags_only and req.ctx.options.expandable_segments else [])


def _sbatch_header(
    req: PlanRequest, nodes: int, per_node: int, warning: str | None, refs: dict, iteration_s: float | None = None
) -> str:
    """The script's first lines: what it launches, the plan's label, what its flags cannot say, what was published
    for its setup against the plan's estimate (``iteration_s``), how to read it back, and the #SBATCH directives."""
    label = plan_label(
        req.plan.model_dump(mode="json"), moe=req.ctx.model.is_moe, options=req.ctx.options.model_dump(mode="json")
    )
    legend = textwrap.fill(
        plan_label_legend(label), 100, initial_indent="# (", subsequent_indent="# ", break_on_hyphens=False
    )
    legend += ")"
    warn = f"# WARNING: megaplan predicts this plan does NOT fit in GPU memory: {warning}\n" if warning else ""
    unwritten = unwritten_settings(req)
    if unwritten:
        warn += "# NOTE: the estimate counts settings no flag below can carry:\n"
        warn += "".join(
            _comment(f"- {shlex.join(restore) + ': ' if restore else ''}{why}") for restore, why in unwritten
        )
    warn += "".join(_comment(f"CAUTION: {line}") for line in contradiction_notes(req))
    warn += "".join(_comment(f"NOTE: {line}") for line in published_notes(req, iteration_s))
    model = "".join(_comment(f"NOTE: not in any Megatron-LM flag: {note}") for note in model_notes(req))
    split = (
        f" ({nodes} nodes of {per_node}: torchrun starts as many on every node)"
        if nodes > 1 and (per_node < req.ctx.hardware.gpus_per_node)
        else ""
    )
    return f"""#!/bin/bash
{warn}# Generated by megaplan for {req.ctx.model.name} on {req.gpus} GPUs of {req.ctx.hardware.name}{split}:
# {label}
{legend}
# Read it back (the model, the hardware and the settings above are not in the script):
#   megaplan explain --megatron-args-file THIS_SCRIPT {shlex.join(readback_args(req, **refs))}
# Replace every PLACEHOLDER before submitting; the paths below must be set or the script stops.
{model}#SBATCH --job-name=megaplan-{req.ctx.model.name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={per_node}
#SBATCH --exclusive
#SBATCH --time=PLACEHOLDER_HH:MM:SS
#SBATCH --partition=PLACEHOLDER_PARTITION
#SBATCH --account=PLACEHOLDER_ACCOUNT
{_segment_lines(req, nodes)}"""


def contradiction_notes(req: PlanRequest) -> list[str]:
    """What NVIDIA measured against the plan's features on its GPU (``evidence.contradicted``), one line per finding,
    for the person who submits the script: the features, the GPU, the source and how far the rows that ran them
    are predicted ("all-to-all overlap and interleaved pipeline: slower on dgx-b300-superpod by NVIDIA's own
    measure, ...")."""
    from planner.fidelity import evidence
    from planner.report.memory import by_finding, contradiction_text, held_out_miss
    from planner.space.grid import PlanGrid

    found = evidence.contradicted(req.ctx)
    if not found:
        return []
    ev = evidence.plan_evidence(PlanGrid.from_plans([req.plan]), req.ctx, req.gpus)
    out = []
    for group in by_finding(evidence.contradicted_json(ev, 0)):
        names = " and ".join(f["feature"] for f in group)
        miss = held_out_miss(group[0])
        out.append(f"{names}: {contradiction_text(group)}; the runs that used them ran slower than estimated ({miss})")
    return out


def published_notes(req: PlanRequest, iteration_s: float | None) -> list[str]:
    """What was published for the plan's setup (``planner.fidelity.published``) and the plan's estimate against the
    fastest, for the person who submits the script; nothing without runs or an estimate."""
    from planner.fidelity.published import plan_load_imbalance, published_json, published_runs, published_text

    tr = req.ctx.training
    if not iteration_s or not (runs := published_runs(req.ctx, req.gpus)):
        return []
    per_gpu = tr.global_batch * tr.seq_len / iteration_s / req.gpus
    return [published_text(published_json(runs, per_gpu, plan_load_imbalance(req.ctx)))]


def _segment_lines(req: PlanRequest, nodes: int) -> str:
    """Where the NVLink domain spans nodes (GB200/GB300 NVL72: 18 trays of 4 GPUs), ``#SBATCH --segment``: Slurm's
    topology/block then places the job in blocks of that many nodes, so the nodes the estimate prices as one
    NVLink domain share one rack (otherwise Slurm may spread them over racks, their traffic on InfiniBand). The
    size as Megatron-Bridge's scripts/performance/utils/executors.py @ 067f987 picks it for 4-GPU nodes: the node
    count up to a rack's, else its largest divisor up to a rack's."""
    hw = req.ctx.hardware
    per_domain = hw.nvlink_domain_gpus // hw.gpus_per_node
    if per_domain <= 1:
        return ""
    segment = next(k for k in range(min(nodes, per_domain), 0, -1) if nodes % k == 0)
    return (
        f"# the NVLink domain is {per_domain} nodes ({hw.nvlink_domain_gpus} GPUs): keep the job in blocks of "
        f"{segment} (Slurm topology/block)\n#SBATCH --segment={segment}\n"
    )


def launch_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) that launch exactly ``gpus`` processes: torchrun starts --nproc-per-node on every
    node, so the fewest nodes whose equal share fits a node (12 GPUs of 8-GPU nodes: 2 nodes of 6; a rounded-up
    2 × 8 would start 16 ranks, another data-parallel size)."""
    nodes = -(-gpus // gpus_per_node)
    while gpus % nodes:
        nodes += 1
    return nodes, gpus // nodes


SAVE_EVERY_S = 3600.0  # the default checkpoint spacing: about an hour of training lost at most to a failure
SAVE_MARGIN_MINS = 15  # minutes kept before the job's time limit for the final checkpoint


def save_interval(iteration_s: float | None) -> int:
    """Iterations between checkpoints: about ``SAVE_EVERY_S`` of training at the estimated step time,
    round(3600 s / t_iter), at least 1; Megatron-LM's example value 1,000 without an estimate."""
    if not iteration_s or iteration_s <= 0:
        return 1000
    return max(1, round(SAVE_EVERY_S / iteration_s))


def _exit_lines() -> str:
    """Save and stop before the time limit: Megatron-LM's --exit-duration-in-mins saves a checkpoint when the
    training time passes it (training.py, exit_duration_in_mins); Slurm ≥ 23.02 exports the job's projected end
    as SLURM_JOB_END_TIME (sbatch(1)), so the minutes left less a margin for that checkpoint."""
    return f"""# save and stop before the time limit: Megatron-LM --exit-duration-in-mins, Slurm >= 23.02's end time
if [[ -z "${{EXIT_DURATION_MINS:-}}" && -n "${{SLURM_JOB_END_TIME:-}}" ]]; then
    EXIT_DURATION_MINS=$(( (SLURM_JOB_END_TIME - $(date +%s)) / 60 - ${{SAVE_MARGIN_MINS:-{SAVE_MARGIN_MINS}}} ))
fi
EXIT_ARGS=()
if [[ -n "${{EXIT_DURATION_MINS:-}}" ]]; then
    EXIT_ARGS=(--exit-duration-in-mins "$EXIT_DURATION_MINS")
fi
"""


def train_iterations(tr) -> int:
    """The iterations that train the plan's tokens, T / (B · s) rounded up (the Slurm script's TRAIN_ITERS, the Bridge
    export's train.train_iters, the NeMo 2 export's trainer.max_steps): ``tr`` a TrainingSpec."""
    return -(-int(tr.train_tokens) // (tr.global_batch * tr.seq_len))


def slurm_script(
    req: PlanRequest,
    warning: str | None = None,
    iteration_s: float | None = None,
    model_ref: str | None = None,
    hardware_ref: str | None = None,
) -> str:
    """A complete sbatch script launching pretrain_gpt.py with torchrun on every node.

    What only the user knows (paths, account, run length, learning rate) is marked PLACEHOLDER;
    the paths are required variables, so the script stops with a message if one is left unset.
    ``warning`` (a plan written although it does not fit) heads the script. ``iteration_s`` (the estimate)
    spaces the checkpoints (``save_interval``); the run saves and stops before the job's time limit.
    ``model_ref``/``hardware_ref``: the --model/--hardware given, for the read-back line (``readback_args``).
    """
    from planner.report.layout import tokens_text

    nodes, per_node = launch_shape(req.gpus, req.ctx.hardware.gpus_per_node)
    env = "".join(line + "\n" for line in environment_lines(req))
    plan_args = "\n".join("    " + line.removesuffix(" \\") for line in flags_text(req).rstrip().splitlines())
    tokenizer_vars, tokenizer = tokenizer_lines(req)
    tr = req.ctx.training
    tokens = tr.train_tokens
    iters = train_iterations(tr)  # the run the estimate's days count
    shown = tokens_text(tokens)
    interval = save_interval(iteration_s)
    spacing = (
        f"iterations between checkpoints: about an hour at the estimated {iteration_s:.3g} s/iteration"
        if iteration_s
        else "iterations between checkpoints"
    )
    return (
        _sbatch_header(
            req, nodes, per_node, warning, {"model_ref": model_ref, "hardware_ref": hardware_ref}, iteration_s
        )
        + f"""
set -euo pipefail
{env}
: "${{MEGATRON_DIR:?set MEGATRON_DIR to your Megatron-LM checkout (PLACEHOLDER)}}"
: "${{DATA_PATH:?set DATA_PATH to your tokenized data prefix, e.g. /data/corpus_text_document (PLACEHOLDER)}}"
{tokenizer_vars}: "${{CHECKPOINT_DIR:?set CHECKPOINT_DIR to where checkpoints go (PLACEHOLDER)}}"
TRAIN_ITERS=${{TRAIN_ITERS:-{iters}}}  # {shown} tokens (--tokens) / ({tr.global_batch} × {tr.seq_len}) per iteration
LR=${{LR:-3.0e-4}}                    # PLACEHOLDER: your learning rate
SAVE_INTERVAL=${{SAVE_INTERVAL:-{interval}}}  # {spacing}
{_exit_lines()}
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_PORT=${{MASTER_PORT:-6000}}

PLAN_ARGS=(
{plan_args}
)

{tokenizer}

TRAINING_ARGS=(
    --train-iters "$TRAIN_ITERS"
    --lr "$LR" --min-lr 3.0e-5 --lr-decay-style cosine --lr-warmup-fraction 0.01
    --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0
    --data-path "$DATA_PATH" --split 949,50,1
    --save "$CHECKPOINT_DIR" --load "$CHECKPOINT_DIR"
    --save-interval "$SAVE_INTERVAL" ${{EXIT_ARGS[@]+"${{EXIT_ARGS[@]}}"}}
    --log-interval 10 --eval-interval 1000 --eval-iters 10
)

srun --ntasks-per-node=1 torchrun \\
    --nproc-per-node {per_node} --nnodes {nodes} \\
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" \\
    "$MEGATRON_DIR/pretrain_gpt.py" \\
    "${{PLAN_ARGS[@]}}" "${{TOKENIZER_ARGS[@]}}" "${{TRAINING_ARGS[@]}}"
"""
    )
