"""One mapping table: Megatron-LM flag <-> Megatron-Bridge ConfigContainer field <-> NeMo 2 recipe field.

Export (`planner.bridge.export`) and import (`planner.bridge.importer`) both read this table, so a field
written one way is read back the other way. A row names the Megatron-LM flag (as
``megatron/training/arguments.py`` at d98e8a64 spells it, with its destination), the Bridge fields per
supported tag, the NeMo 2 field, and where each comes from.

Bridge fields come in two kinds (``Row.read`` and ``Row.write``):
- ``read``: the field Megatron-Core finally reads, after Bridge's ``runtime_config_update``
  (``megatron/bridge/training/config.py``): the precision preset's fields copied onto ``model``,
  ``optimizer`` and ``ddp`` (``mixed_precision.py: update_config_with_precision_overrides``), then the
  ``comm_overlap`` setup onto ``model``, ``optimizer`` and ``ddp`` (``comm_overlap.py: setup``).
- ``write``: where an export must (also) write the value so it survives that update: the
  ``mixed_precision`` field a preset would otherwise overwrite, the ``comm_overlap`` field the overlap
  setup would otherwise overwrite.

Sources (Bridge at its tags, Megatron-Core at the commit each tag pins):
- Bridge v0.2.1 (Megatron-Core core_v0.15.2) and v0.6.0 (Megatron-LM d98e8a64): ``training/config.py``
  (ConfigContainer, TrainingConfig, GPTDatasetConfig, DistributedDataParallelConfig, OptimizerConfig),
  ``training/mixed_precision.py``, ``training/comm_overlap.py``, ``models/gpt_provider.py`` over
  Megatron-Core's ``TransformerConfig``/``ModelParallelConfig``. The field lists each tag has are
  ``planner/bridge/data/bridge_fields.json`` (how they were made: ``scripts/dump_bridge_fields.py``).
- NeMo 2 (``nemo.collections.llm`` recipes, NeMo 2.x): ``trainer.strategy`` is ``MegatronStrategy``
  (parallel sizes, ``ddp``), ``data`` is the data module (``seq_length``, batch sizes), ``model.config``
  the Megatron-Core ``TransformerConfig``; precision is ``trainer.plugins``, a factory of
  ``nemo/collections/llm/recipes/precision/mixed_precision.py`` (``bf16_mixed``, ``fp16_mixed``) with the
  ``MegatronMixedPrecision`` fields ``fp8``, ``fp8_recipe``, ``fp8_params``, ``grad_reduce_in_fp32``; TP
  overlap is the ``MegatronCommOverlapCallback`` in ``trainer.callbacks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.bridge_tags import NEWEST as NEWEST  # re-exported: the Bridge modules read the tags from here
from planner.bridge_tags import TAGS

TAG_MCORE = {"v0.2.1": "Megatron-Core core_v0.15.2", "v0.6.0": "Megatron-LM d98e8a64"}

MCORE = "Megatron-Core TransformerConfig/ModelParallelConfig"
DDP = "Megatron-Core DistributedDataParallelConfig"
OPT = "Megatron-Core OptimizerConfig"
MP = "Bridge training/mixed_precision.py MixedPrecisionConfig (copied onto model/optimizer/ddp by setup())"
CO = "Bridge training/comm_overlap.py CommOverlapConfig (setup() overwrites model/ddp overlap fields)"


@dataclass(frozen=True)
class Row:
    """One Megatron-LM flag and the Bridge and NeMo 2 fields that carry it.

    ``kind``: ``value`` (a flag with one value), ``list`` (nargs), ``on`` (store_true), ``off``
    (store_false, e.g. --no-overlap-p2p-communication: dest True unless given). ``default`` is the
    destination's value when the flag is absent (Megatron-LM's default). ``convert`` names how a
    Megatron value becomes a Bridge value (``planner.bridge.values``). A tag missing from ``tags``
    does not have the field: exporting a non-default value for it is refused.
    """

    flag: str
    dest: str
    kind: str
    read: str
    default: object = None
    write: tuple[str, ...] = ()
    nemo2: tuple[str, ...] = ()
    convert: str = "same"
    tags: tuple[str, ...] = TAGS
    source: str = MCORE
    renamed: dict[str, str] = field(default_factory=dict)  # tag -> the read field's name at that tag

    def read_at(self, tag: str) -> str:
        return self.renamed.get(tag, self.read)

    def paths(self, tag: str) -> tuple[str, ...]:
        """Every Bridge field an export at ``tag`` writes: the one Megatron-Core reads, then those that
        survive the runtime update."""
        return (self.read_at(tag), *self.write)


S = "trainer.strategy."
ROWS: tuple[Row, ...] = (
    # parallel sizes
    Row(
        "--tensor-model-parallel-size",
        "tensor_model_parallel_size",
        "value",
        "model.tensor_model_parallel_size",
        1,
        nemo2=(S + "tensor_model_parallel_size",),
    ),
    Row(
        "--pipeline-model-parallel-size",
        "pipeline_model_parallel_size",
        "value",
        "model.pipeline_model_parallel_size",
        1,
        nemo2=(S + "pipeline_model_parallel_size",),
    ),
    Row(
        "--num-virtual-stages-per-pipeline-rank",
        "num_virtual_stages_per_pipeline_rank",
        "value",
        "model.virtual_pipeline_model_parallel_size",
        None,
        nemo2=(S + "virtual_pipeline_model_parallel_size",),
        convert="vpp",
    ),
    Row(
        "--context-parallel-size",
        "context_parallel_size",
        "value",
        "model.context_parallel_size",
        1,
        nemo2=(S + "context_parallel_size",),
    ),
    Row(
        "--expert-model-parallel-size",
        "expert_model_parallel_size",
        "value",
        "model.expert_model_parallel_size",
        1,
        nemo2=(S + "expert_model_parallel_size",),
    ),
    Row(
        "--expert-tensor-parallel-size",
        "expert_tensor_parallel_size",
        "value",
        "model.expert_tensor_parallel_size",
        None,
        nemo2=(S + "expert_tensor_parallel_size",),
    ),
    Row(
        "--sequence-parallel",
        "sequence_parallel",
        "on",
        "model.sequence_parallel",
        False,
        nemo2=(S + "sequence_parallel",),
    ),
    Row(
        "--pipeline-model-parallel-layout",
        "pipeline_model_parallel_layout",
        "value",
        "model.pipeline_model_parallel_layout",
        None,
        nemo2=(S + "pipeline_model_parallel_layout",),
    ),
    Row(
        "--account-for-embedding-in-pipeline-split",
        "account_for_embedding_in_pipeline_split",
        "on",
        "model.account_for_embedding_in_pipeline_split",
        False,
        nemo2=(S + "account_for_embedding_in_pipeline_split",),
    ),
    Row(
        "--account-for-loss-in-pipeline-split",
        "account_for_loss_in_pipeline_split",
        "on",
        "model.account_for_loss_in_pipeline_split",
        False,
        nemo2=(S + "account_for_loss_in_pipeline_split",),
    ),
    Row(
        "--decoder-first-pipeline-num-layers",
        "decoder_first_pipeline_num_layers",
        "value",
        "model.num_layers_in_first_pipeline_stage",
        None,
        nemo2=(S + "num_layers_in_first_pipeline_stage",),
    ),
    Row(
        "--decoder-last-pipeline-num-layers",
        "decoder_last_pipeline_num_layers",
        "value",
        "model.num_layers_in_last_pipeline_stage",
        None,
        nemo2=(S + "num_layers_in_last_pipeline_stage",),
    ),
    # batch and sequence
    Row(
        "--micro-batch-size",
        "micro_batch_size",
        "value",
        "train.micro_batch_size",
        1,
        nemo2=("data.micro_batch_size",),
        source="Bridge training/config.py TrainingConfig",
    ),
    Row(
        "--global-batch-size",
        "global_batch_size",
        "value",
        "train.global_batch_size",
        None,
        nemo2=("data.global_batch_size",),
        source="Bridge training/config.py TrainingConfig",
    ),
    Row(
        "--seq-length",
        "seq_length",
        "value",
        "model.seq_length",
        None,
        write=("dataset.SEQ",),
        nemo2=("data.seq_length",),
        source="model.seq_length and the dataset's: GPTDatasetConfig.sequence_length (Megatron-Core's name, "
        "v0.2.1), .seq_length (v0.6.0); ConfigContainer.validate() asserts they agree",
    ),
    # recomputation
    Row(
        "--recompute-granularity",
        "recompute_granularity",
        "value",
        "model.recompute_granularity",
        None,
        nemo2=("model.config.recompute_granularity",),
    ),
    Row(
        "--recompute-method",
        "recompute_method",
        "value",
        "model.recompute_method",
        None,
        nemo2=("model.config.recompute_method",),
    ),
    Row(
        "--recompute-num-layers",
        "recompute_num_layers",
        "value",
        "model.recompute_num_layers",
        None,
        nemo2=("model.config.recompute_num_layers",),
    ),
    Row(
        "--recompute-modules",
        "recompute_modules",
        "list",
        "model.recompute_modules",
        None,
        nemo2=("model.config.recompute_modules",),
    ),
    Row(
        "--distribute-saved-activations",
        "distribute_saved_activations",
        "on",
        "model.distribute_saved_activations",
        False,
        nemo2=("model.config.distribute_saved_activations",),
    ),
    Row(
        "--cpu-offloading-num-layers",
        "cpu_offloading_num_layers",
        "value",
        "model.cpu_offloading_num_layers",
        0,
        write=("model.cpu_offloading",),
        nemo2=("model.config.cpu_offloading_num_layers",),
        convert="offload",
        source=MCORE + " (cpu_offloading must be true with a layer count; Megatron-LM sets it from the count)",
    ),
    # optimizer and data parallelism
    Row(
        "--use-distributed-optimizer",
        "use_distributed_optimizer",
        "on",
        "ddp.use_distributed_optimizer",
        False,
        write=("optimizer.use_distributed_optimizer",),
        nemo2=(S + "ddp.use_distributed_optimizer",),
        source=DDP,
    ),
    Row(
        "--use-megatron-fsdp",
        "use_megatron_fsdp",
        "on",
        "ddp.use_megatron_fsdp",
        False,
        nemo2=(S + "ddp.use_megatron_fsdp",),
        source="Bridge DistributedDataParallelConfig.use_megatron_fsdp",
    ),
    Row(
        "--data-parallel-sharding-strategy",
        "data_parallel_sharding_strategy",
        "value",
        "ddp.data_parallel_sharding_strategy",
        "no_shard",
        nemo2=(S + "ddp.data_parallel_sharding_strategy",),
        source=DDP,
    ),
    Row(
        "--num-distributed-optimizer-instances",
        "num_distributed_optimizer_instances",
        "value",
        "ddp.num_distributed_optimizer_instances",
        1,
        nemo2=(S + "ddp.num_distributed_optimizer_instances",),
        source=DDP + " (Megatron FSDP: HSDP when above 1)",
    ),
    Row(
        "--outer-dp-sharding-strategy",
        "outer_dp_sharding_strategy",
        "value",
        "ddp.outer_dp_sharding_strategy",
        "no_shard",
        nemo2=(S + "ddp.outer_dp_sharding_strategy",),
        source=DDP + " (Megatron FSDP's hybrid mode: no_shard HSDP, optim HFSDP)",
    ),
    Row(
        "--ckpt-format",
        "ckpt_format",
        "value",
        "checkpoint.ckpt_format",
        "torch_dist",
        nemo2=(S + "save_ckpt_format",),
        source="Bridge training/config.py CheckpointConfig",
    ),
    Row(
        "--use-precision-aware-optimizer",
        "use_precision_aware_optimizer",
        "on",
        "optimizer.use_precision_aware_optimizer",
        False,
        nemo2=("optim.config.use_precision_aware_optimizer",),
        source=OPT,
    ),
    Row(
        "--main-params-dtype",
        "main_params_dtype",
        "value",
        "optimizer.main_params_dtype",
        "fp32",
        nemo2=("optim.config.main_params_dtype",),
        convert="dtype",
        source=OPT,
    ),
    Row(
        "--main-grads-dtype",
        "main_grads_dtype",
        "value",
        "optimizer.main_grads_dtype",
        "fp32",
        nemo2=("optim.config.main_grads_dtype",),
        convert="dtype",
        source=OPT,
    ),
    Row(
        "--exp-avg-dtype",
        "exp_avg_dtype",
        "value",
        "optimizer.exp_avg_dtype",
        "fp32",
        nemo2=("optim.config.exp_avg_dtype",),
        convert="dtype",
        source=OPT,
    ),
    Row(
        "--exp-avg-sq-dtype",
        "exp_avg_sq_dtype",
        "value",
        "optimizer.exp_avg_sq_dtype",
        "fp32",
        nemo2=("optim.config.exp_avg_sq_dtype",),
        convert="dtype",
        source=OPT,
    ),
    # precision: the preset's fields are copied onto model/optimizer/ddp, so they are written there too
    Row(
        "--bf16",
        "bf16",
        "on",
        "model.bf16",
        False,
        write=("mixed_precision.bf16",),
        nemo2=("trainer.plugins",),
        convert="bf16",
        source=MP,
    ),
    Row(
        "--fp16",
        "fp16",
        "on",
        "model.fp16",
        False,
        write=("mixed_precision.fp16",),
        nemo2=("trainer.plugins",),
        convert="fp16",
        source=MP,
    ),
    Row(
        "--grad-reduce-in-bf16",
        "grad_reduce_in_bf16",
        "on",
        "ddp.grad_reduce_in_fp32",
        False,
        write=("mixed_precision.grad_reduce_in_fp32",),
        nemo2=("trainer.plugins.grad_reduce_in_fp32",),
        convert="not",
        source=MP + "; Megatron-LM's flag is its negation",
    ),
    Row(
        "--fp8-format",
        "fp8",
        "value",
        "model.fp8",
        None,
        write=("mixed_precision.fp8",),
        nemo2=("trainer.plugins.fp8",),
        source=MP,
    ),
    Row(
        "--fp8-recipe",
        "fp8_recipe",
        "value",
        "model.fp8_recipe",
        "delayed",
        write=("mixed_precision.fp8_recipe",),
        nemo2=("trainer.plugins.fp8_recipe",),
        source=MP + " (Bridge's default is tensorwise, Megatron-LM's delayed)",
    ),
    Row(
        "--fp8-param-gather",
        "fp8_param_gather",
        "on",
        "model.fp8_param",
        False,
        write=("mixed_precision.fp8_param_gather", "mixed_precision.fp8_param"),
        nemo2=("trainer.plugins.fp8_params",),
        source=MP + " (fp8_param and fp8_param_gather kept in step)",
    ),
    # attention, fusions, MoE
    Row(
        "--attention-backend",
        "attention_backend",
        "value",
        "model.attention_backend",
        "auto",
        nemo2=("model.config.attention_backend",),
        source=MCORE + " (AttnBackend; Bridge's recipes leave None)",
    ),
    Row(
        "--no-bias-swiglu-fusion",
        "bias_swiglu_fusion",
        "off",
        "model.bias_activation_fusion",
        True,
        nemo2=("model.config.bias_activation_fusion",),
        source=MCORE + " (Megatron-LM's --no-bias-swiglu-fusion clears bias_activation_fusion)",
    ),
    Row(
        "--moe-token-dispatcher-type",
        "moe_token_dispatcher_type",
        "value",
        "model.moe_token_dispatcher_type",
        "allgather",
        nemo2=("model.config.moe_token_dispatcher_type",),
    ),
    Row(
        "--moe-grouped-gemm",
        "moe_grouped_gemm",
        "on",
        "model.moe_grouped_gemm",
        False,
        nemo2=("model.config.moe_grouped_gemm",),
    ),
    Row(
        "--moe-flex-dispatcher-backend",
        "moe_flex_dispatcher_backend",
        "value",
        "model.moe_flex_dispatcher_backend",
        "deepep",
        nemo2=("model.config.moe_flex_dispatcher_backend",),
        convert="flex",
        renamed={"v0.2.1": "model.moe_enable_deepep"},
        source=MCORE + " (core_v0.15.2 has only moe_enable_deepep: DeepEP or nothing)",
    ),
    Row(
        "--overlap-moe-expert-parallel-comm",
        "overlap_moe_expert_parallel_comm",
        "on",
        "model.overlap_moe_expert_parallel_comm",
        False,
        write=("comm_overlap.overlap_moe_expert_parallel_comm",),
        nemo2=("model.config.overlap_moe_expert_parallel_comm",),
        source=CO + " (sets it False unless given there)",
    ),
    Row(
        "--moe-shared-expert-overlap",
        "moe_shared_expert_overlap",
        "on",
        "model.moe_shared_expert_overlap",
        False,
        nemo2=("model.config.moe_shared_expert_overlap",),
    ),
    Row(
        "--moe-router-padding-for-quantization",
        "moe_router_padding_for_quantization",
        "on",
        "model.moe_router_padding_for_quantization",
        False,
        nemo2=("model.config.moe_router_padding_for_fp8",),
        renamed={"v0.2.1": "model.moe_router_padding_for_fp8"},
        source=MCORE + " (core_v0.15.2 names it moe_router_padding_for_fp8; core_v0.16.0 on keeps that as an alias)",
    ),
    Row(
        "--moe-permute-fusion",
        "moe_permute_fusion",
        "on",
        "model.moe_permute_fusion",
        False,
        nemo2=("model.config.moe_permute_fusion",),
    ),
    Row(
        "--use-transformer-engine-op-fuser",
        "use_transformer_engine_op_fuser",
        "on",
        "model.use_transformer_engine_op_fuser",
        False,
        tags=("v0.6.0",),
        nemo2=("model.config.use_transformer_engine_op_fuser",),
        source=MCORE + " (not in core_v0.15.2)",
    ),
    Row(
        "--moe-expert-capacity-factor",
        "moe_expert_capacity_factor",
        "value",
        "model.moe_expert_capacity_factor",
        None,
        nemo2=("model.config.moe_expert_capacity_factor",),
    ),
    # CUDA graphs: core_v0.15.2 has cuda_graph_scope (one string: full or attn); d98e8a64 cuda_graph_modules (a list)
    Row(
        "--cuda-graph-impl",
        "cuda_graph_impl",
        "value",
        "model.cuda_graph_impl",
        "none",
        nemo2=("model.config.cuda_graph_impl",),
    ),
    Row(
        "--cuda-graph-modules",
        "cuda_graph_modules",
        "list",
        "model.cuda_graph_modules",
        None,
        nemo2=("model.config.cuda_graph_scope",),
        convert="graph_modules",
        renamed={"v0.2.1": "model.cuda_graph_scope"},
        source=MCORE + " (core_v0.15.2: cuda_graph_scope 'full'|'attn'; d98e8a64: cuda_graph_modules, a list)",
    ),
    # overlaps: comm_overlap.setup() overwrites the model/ddp fields, so they are written there too
    Row(
        "--overlap-grad-reduce",
        "overlap_grad_reduce",
        "on",
        "ddp.overlap_grad_reduce",
        False,
        write=("comm_overlap.overlap_grad_reduce",),
        nemo2=(S + "ddp.overlap_grad_reduce",),
        source=CO,
    ),
    Row(
        "--overlap-param-gather",
        "overlap_param_gather",
        "on",
        "ddp.overlap_param_gather",
        False,
        write=("comm_overlap.overlap_param_gather",),
        nemo2=(S + "ddp.overlap_param_gather",),
        source=CO,
    ),
    Row(
        "--tp-comm-overlap",
        "tp_comm_overlap",
        "on",
        "model.tp_comm_overlap",
        False,
        write=("comm_overlap.tp_comm_overlap",),
        nemo2=("trainer.callbacks.MegatronCommOverlapCallback.tp_comm_overlap",),
        source=CO + " (turned off without a word when TP < 2 or sequence_parallel is off)",
    ),
    Row(
        "--no-overlap-p2p-communication",
        "overlap_p2p_comm",
        "off",
        "model.overlap_p2p_comm",
        True,
        write=("comm_overlap.overlap_p2p_comm",),
        nemo2=("trainer.callbacks.MegatronCommOverlapCallback.overlap_p2p_comm",),
        convert="p2p",
        source=CO,
    ),
)

BY_DEST = {r.dest: r for r in ROWS}
BY_FLAG = {r.flag: r for r in ROWS}

# the dataset's sequence-length field per tag (GPTDatasetConfig)
DATASET_SEQ = {"v0.2.1": "dataset.sequence_length", "v0.6.0": "dataset.seq_length"}

# Megatron-LM's architecture flags (planner.megatron.export.model_flags) <-> TransformerConfig fields a
# Bridge override writes when the plan's model differs from the base recipe's
MODEL_ROWS: dict[str, str] = {
    "--num-layers": "model.num_layers",
    "--hidden-size": "model.hidden_size",
    "--num-attention-heads": "model.num_attention_heads",
    "--ffn-hidden-size": "model.ffn_hidden_size",
    "--num-query-groups": "model.num_query_groups",
    "--kv-channels": "model.kv_channels",
    "--max-position-embeddings": "model.max_position_embeddings",
    "--vocab-size": "model.vocab_size",
    "--make-vocab-size-divisible-by": "model.make_vocab_size_divisible_by",
    "--num-experts": "model.num_moe_experts",
    "--moe-router-topk": "model.moe_router_topk",
    "--moe-ffn-hidden-size": "model.moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "model.moe_shared_expert_intermediate_size",
    "--mtp-num-layers": "model.mtp_num_layers",
    "--rotary-base": "model.rotary_base",
    "--hidden-dropout": "model.hidden_dropout",
    "--attention-dropout": "model.attention_dropout",
}


@dataclass(frozen=True)
class ModelRow:
    """A model setting only some tags' providers carry, or a switch: ``paths`` per tag (a tag missing: no
    provider field takes it, said by ``why``), ``on``: the destination's value when a switch flag is given
    (None: a flag with a value)."""

    flag: str
    dest: str
    paths: dict[str, str]
    on: object = None
    why: str = ""

    def path(self, tag: str, mla: bool = False) -> str | None:
        return MLA_PATHS.get(self.dest) if mla and self.dest in MLA_PATHS else self.paths.get(tag)


_BOTH = TAGS
_NEW = "v0.6.0"
_YARN = "at v0.2.1 only GPTOSSProvider (models/gpt_oss/gpt_oss_provider.py) has the yarn_* fields"
# Position embedding and norm settings, Megatron-LM flag -> Bridge provider field: GPTModelProvider
# (models/gpt_provider.py) has rotary_percent at both tags, and rope_scaling, rope_scaling_factor and the yarn_*
# fields at v0.6.0 only; Megatron-Core's TransformerConfig has layernorm_epsilon and
# layernorm_zero_centered_gamma (--norm-epsilon, --apply-layernorm-1p). At v0.2.1 Llama 3.1's scaling lives in
# Llama31ModelProvider.provide() (scale_factor 8, low/high_freq_factor 1/4, old_context_len 8192), which only a
# Llama 3.1 base recipe runs.
MODEL_TAG_ROWS: tuple[ModelRow, ...] = (
    ModelRow("--rotary-percent", "rotary_percent", dict.fromkeys(_BOTH, "model.rotary_percent")),
    ModelRow("--norm-epsilon", "layernorm_epsilon", dict.fromkeys(_BOTH, "model.layernorm_epsilon")),
    ModelRow(
        "--apply-layernorm-1p",
        "layernorm_zero_centered_gamma",
        dict.fromkeys(_BOTH, "model.layernorm_zero_centered_gamma"),
        True,
    ),
    ModelRow(
        "--use-rope-scaling",
        "use_rope_scaling",
        {_NEW: "model.rope_scaling"},
        True,
        "at v0.2.1 only a Llama 3.1 base recipe (Llama31ModelProvider.scale_factor) scales RoPE",
    ),
    ModelRow(
        "--rope-scaling-factor",
        "rope_scaling_factor",
        {_NEW: "model.rope_scaling_factor"},
        why="at v0.2.1 only a Llama 3.1 base recipe (Llama31ModelProvider.scale_factor) scales RoPE",
    ),
    ModelRow("--rotary-scaling-factor", "rotary_scaling_factor", {_NEW: "model.yarn_rotary_scaling_factor"}, why=_YARN),
    ModelRow("--mscale", "mscale", {_NEW: "model.yarn_mscale"}, why=_YARN),
    ModelRow("--mscale-all-dim", "mscale_all_dim", {_NEW: "model.yarn_mscale_all_dim"}, why=_YARN),
    ModelRow(
        "--yarn-original-max-position-embeddings",
        "yarn_original_max_position_embeddings",
        {_NEW: "model.yarn_original_max_position_embeddings"},
        why=_YARN,
    ),
    ModelRow(
        "--no-yarn-correction-range-round-to-int",
        "yarn_correction_range_round_to_int",
        {_NEW: "model.yarn_correction_range_round_to_int"},
        False,
        _YARN,
    ),
)
# multi-latent attention's YaRN: MLATransformerConfig's own fields (Bridge's DeepSeek providers at both tags)
MLA_PATHS = {
    "rotary_scaling_factor": "model.rotary_scaling_factor",
    "mscale": "model.mscale",
    "mscale_all_dim": "model.mscale_all_dim",
}

# Bridge's precision presets (training/mixed_precision.py, the same names at v0.2.1 and v0.6.0):
# (precision, fp8 format, fp8 recipe) -> the preset whose fields an export starts from
PRESETS: dict[tuple[str, str | None, str | None], str] = {
    ("bf16", None, None): "bf16_mixed",
    ("fp16", None, None): "fp16_mixed",
    ("bf16", "hybrid", "delayed"): "bf16_with_fp8_delayed_scaling_mixed",
    ("fp16", "hybrid", "delayed"): "fp16_with_fp8_delayed_scaling_mixed",
    ("bf16", "hybrid", "tensorwise"): "bf16_with_fp8_current_scaling_mixed",
    ("fp16", "hybrid", "tensorwise"): "fp16_with_fp8_current_scaling_mixed",
    ("bf16", "e4m3", "mxfp8"): "bf16_with_mxfp8_mixed",
    ("fp16", "e4m3", "mxfp8"): "fp16_with_mxfp8_mixed",
    ("bf16", "hybrid", "blockwise"): "bf16_with_fp8_subchannel_scaling_mixed",
    ("fp16", "hybrid", "blockwise"): "fp16_with_fp8_subchannel_scaling_mixed",
    ("bf16", "e2m1", "nvfp4"): "bf16_with_nvfp4_mixed",  # v0.6.0: with fp4_param_gather (from v0.4.2)
}

# Base recipes megaplan knows per tag: name -> (module, the megaplan model preset it builds). Their fields
# (what an import assumes for what the overrides leave out) are planner/bridge/data/recipe_defaults.json,
# dumped by running each recipe through Bridge's own code (scripts/dump_bridge_fields.py).
_V021 = "megatron.bridge.recipes."
_V060 = "megatron.bridge.recipes."
RECIPES: dict[str, dict[str, tuple[str, str]]] = {
    "v0.2.1": {
        "llama2_7b_pretrain_config": (_V021 + "llama.llama2", "llama2-7b"),
        "llama3_8b_pretrain_config": (_V021 + "llama.llama3", "llama3-8b"),
        "llama3_70b_pretrain_config": (_V021 + "llama.llama3", "llama3-70b"),
        "llama31_405b_pretrain_config": (_V021 + "llama.llama3", "llama3.1-405b"),
        "qwen3_30b_a3b_pretrain_config": (_V021 + "qwen.qwen3_moe", "qwen3-30b-a3b"),
        "qwen3_235b_a22b_pretrain_config": (_V021 + "qwen.qwen3_moe", "qwen3-235b-a22b"),
        "deepseek_v3_pretrain_config": (_V021 + "deepseek.deepseek_v3", "deepseek-v3"),
        "gpt_oss_20b_pretrain_config": (_V021 + "gpt_oss.gpt_oss", "gpt-oss-20b"),
        "gpt_oss_120b_pretrain_config": (_V021 + "gpt_oss.gpt_oss", "gpt-oss-120b"),
    },
    "v0.6.0": {
        "llama2_7b_pretrain_2gpu_h100_bf16_config": (_V060 + "llama.h100.llama2", "llama2-7b"),
        "llama3_8b_pretrain_2gpu_h100_bf16_config": (_V060 + "llama.h100.llama3", "llama3-8b"),
        "llama3_70b_pretrain_32gpu_h100_bf16_config": (_V060 + "llama.h100.llama3", "llama3-70b"),
        "llama31_405b_pretrain_256gpu_h100_bf16_config": (_V060 + "llama.h100.llama3", "llama3.1-405b"),
        "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config": (_V060 + "qwen.h100.qwen3_moe", "qwen3-30b-a3b"),
        # the base of the H100 perf recipes (perf_recipes/qwen/h100/qwen3_moe.py)
        "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config": (_V060 + "qwen.h100.qwen3_moe", "qwen3-30b-a3b"),
        "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config": (_V060 + "qwen.h100.qwen3_moe", "qwen3-235b-a22b"),
        "deepseek_v3_pretrain_1024gpu_h100_bf16_config": (_V060 + "deepseek.h100.deepseek_v3", "deepseek-v3"),
        "gpt_oss_20b_pretrain_16gpu_h100_bf16_config": (_V060 + "gpt_oss.h100.gpt_oss", "gpt-oss-20b"),
        "gpt_oss_120b_pretrain_64gpu_h100_bf16_config": (_V060 + "gpt_oss.h100.gpt_oss", "gpt-oss-120b"),
        "gpt3_175b_pretrain_32gpu_h100_bf16_config": (_V060 + "gpt.h100.gpt3_175b", "gpt3-175b"),
        # GB200 (GPU_LIBRARY_RECIPES): the base of a GB200 plan's export
        "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config": (_V060 + "qwen.gb200.qwen3_moe", "qwen3-30b-a3b"),
    },
}

# Bridge v0.6.0's recipes for a Blackwell GPU (B200, B300, GB200, GB300) of the models above, from the tag's tree (``git
# ls-tree v0.6.0 src/megatron/bridge/recipes src/megatron/bridge/perf_recipes``; tests/test_ux18.py holds the list).
# Library recipes (recipes/<family>/<gpu>/): Qwen3-30B-A3B on GB200 alone (recipes/qwen/gb200/qwen3_moe.py: "a
# checkpointable ... config" over the 16-GPU H100 recipe with the GB200 performance recipe's topology, precision,
# dispatcher, overlap, kernels and batch); llama/, gpt/ and gpt_oss/ hold h100/ only, deepseek/gb200 and gb300
# DeepSeek-V4 only. An export for a plan on that GPU starts from it (``recipes.resolve``).
GPU_LIBRARY_RECIPES: dict[str, dict[tuple[str, str], str]] = {
    "v0.6.0": {("qwen3-30b-a3b", "gb200"): "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config"}
}
# What such a recipe sets that no plan setting decides, so the run keeps it (its source @ v0.6.0); its precision,
# overlaps, dispatcher, SMs, graphs and batch the export writes over
GPU_RECIPE_KEEPS = {
    "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config": "high_priority_a2a_comm_stream, "
    "moe_mlp_glu_interleave_size 32, moe_hybridep_num_sms_preprocessing 32 (a HybridEP plan writes its own), the "
    "router's natural load (no forced "
    "balancing), evaluation off (validation.eval_iters 0) and its env_vars, which Bridge's NeMo-Run launchers set "
    "and a torchrun launch does not"
}
# The performance recipes for the same GPUs (perf_recipes/<family>/<gpu>/<model>.py) are benchmarks, not a base for a
# run: _benchmark_common (perf_recipes/_common.py @ v0.6.0, "benchmark-mode defaults that prioritize throughput
# measurement over convergence ... for performance benchmark recipes only") sets train.eval_iters 0, checkpoint.save
# None, the NaN checks off and scheduler.lr_decay_iters to its 50 iterations (lr_warmup_iters 10), none of which an
# export writes: a run over them would save nothing and decay its learning rate in 50 steps. The export names them in
# its header where it keeps an H100 base.
GPU_PERF_FILES: dict[str, dict[tuple[str, str], str]] = {
    "v0.6.0": {
        ("deepseek-v3", "b200"): "perf_recipes/deepseek/b200/deepseek_v3.py",
        ("deepseek-v3", "b300"): "perf_recipes/deepseek/b300/deepseek_v3.py",
        ("deepseek-v3", "gb200"): "perf_recipes/deepseek/gb200/deepseek_v3.py",
        ("deepseek-v3", "gb300"): "perf_recipes/deepseek/gb300/deepseek_v3.py",
        ("gpt-oss-120b", "b200"): "perf_recipes/gpt_oss/b200/gpt_oss.py",
        ("gpt-oss-120b", "b300"): "perf_recipes/gpt_oss/b300/gpt_oss.py",
        ("gpt-oss-120b", "gb200"): "perf_recipes/gpt_oss/gb200/gpt_oss.py",
        ("gpt-oss-120b", "gb300"): "perf_recipes/gpt_oss/gb300/gpt_oss.py",
        ("gpt-oss-20b", "b300"): "perf_recipes/gpt_oss/b300/gpt_oss.py",
        ("gpt-oss-20b", "gb200"): "perf_recipes/gpt_oss/gb200/gpt_oss.py",
        ("gpt-oss-20b", "gb300"): "perf_recipes/gpt_oss/gb300/gpt_oss.py",
        ("llama3-70b", "b200"): "perf_recipes/llama/b200/llama3.py",
        ("llama3-70b", "b300"): "perf_recipes/llama/b300/llama3.py",
        ("llama3-70b", "gb200"): "perf_recipes/llama/gb200/llama3.py",
        ("llama3-70b", "gb300"): "perf_recipes/llama/gb300/llama3.py",
        ("llama3-8b", "b200"): "perf_recipes/llama/b200/llama3.py",
        ("llama3-8b", "b300"): "perf_recipes/llama/b300/llama3.py",
        ("llama3-8b", "gb200"): "perf_recipes/llama/gb200/llama3.py",
        ("llama3-8b", "gb300"): "perf_recipes/llama/gb300/llama3.py",
        ("llama3.1-405b", "b200"): "perf_recipes/llama/b200/llama31.py",
        ("llama3.1-405b", "b300"): "perf_recipes/llama/b300/llama31.py",
        ("llama3.1-405b", "gb200"): "perf_recipes/llama/gb200/llama31.py",
        ("llama3.1-405b", "gb300"): "perf_recipes/llama/gb300/llama31.py",
        ("qwen3-235b-a22b", "b200"): "perf_recipes/qwen/b200/qwen3_moe.py",
        ("qwen3-235b-a22b", "b300"): "perf_recipes/qwen/b300/qwen3_moe.py",
        ("qwen3-235b-a22b", "gb200"): "perf_recipes/qwen/gb200/qwen3_moe.py",
        ("qwen3-235b-a22b", "gb300"): "perf_recipes/qwen/gb300/qwen3_moe.py",
        ("qwen3-30b-a3b", "b200"): "perf_recipes/qwen/b200/qwen3_moe.py",
        ("qwen3-30b-a3b", "b300"): "perf_recipes/qwen/b300/qwen3_moe.py",
        ("qwen3-30b-a3b", "gb200"): "perf_recipes/qwen/gb200/qwen3_moe.py",
        ("qwen3-30b-a3b", "gb300"): "perf_recipes/qwen/gb300/qwen3_moe.py",
    }
}

# Bridge v0.6.0 keeps the v0.2.1 recipe names as aliases of its per-GPU recipes ("Compatibility aliases for
# legacy recipe names": recipes/llama/llama2.py, llama/llama3.py, qwen/qwen3_moe.py, deepseek/deepseek_v3.py,
# gpt_oss/gpt_oss.py, gpt/gpt3_175b.py at v0.6.0), so `--recipe llama3_8b_pretrain_config` runs there too.
LEGACY_NAMES: dict[str, dict[str, str]] = {
    "v0.6.0": {
        "llama2_7b_pretrain_config": "llama2_7b_pretrain_2gpu_h100_bf16_config",
        "llama3_8b_pretrain_config": "llama3_8b_pretrain_2gpu_h100_bf16_config",
        "llama3_70b_pretrain_config": "llama3_70b_pretrain_32gpu_h100_bf16_config",
        "llama31_405b_pretrain_config": "llama31_405b_pretrain_256gpu_h100_bf16_config",
        "qwen3_30b_a3b_pretrain_config": "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
        "qwen3_235b_a22b_pretrain_config": "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config",
        "deepseek_v3_pretrain_config": "deepseek_v3_pretrain_1024gpu_h100_bf16_config",
        "gpt_oss_20b_pretrain_config": "gpt_oss_20b_pretrain_16gpu_h100_bf16_config",
        "gpt_oss_120b_pretrain_config": "gpt_oss_120b_pretrain_64gpu_h100_bf16_config",
        "gpt3_175b_pretrain_config": "gpt3_175b_pretrain_32gpu_h100_bf16_config",
    }
}
