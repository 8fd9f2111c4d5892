"""The flags of a launch script megaplan reads but does not price, said in one note; and those it knows change
neither an iteration's time nor its memory, accepted without a word (each kind with its reason).

A flag falls in one of three sets:

- read: its value goes into the plan (``script.COST_DESTS``, and the dests ``READ_ELSEWHERE`` names), or it
  has its own warning or refusal (``importer.NOT_MODELLED``, ``importer.REFUSED``, the old flags of
  ``aliases``, the fork flags of ``deepspeed``);
- irrelevant (``IRRELEVANT``): an optimizer's or a schedule's values, logging, checkpoints, data loading,
  evaluation, run control, inference settings: what they change is not the training iteration megaplan prices;
- everything else. Set away from Megatron-LM's default, it changes something megaplan does not model (a fused
  kernel turned off, --use-tp-pp-dp-mapping, --cross-entropy-loss-fusion, an RL rollout), and the importer says
  so in one note: "read, not priced (what they change is not modelled): --no-gradient-accumulation-fusion,
  --manual-gc". A flag given at its default changes nothing and is not named.

The sets were drawn up from the flags of Megatron-LM's own launch scripts and CI model configs (examples/**/*.sh
and tests/functional_tests/**/model_config.yaml at d98e8a64: 380 of the parser's 838 flags appear there) and
BigScience's Megatron-DeepSpeed scripts; a flag in none of them is said, not silently dropped (err16)."""

from __future__ import annotations

OPTIMIZER = "an optimizer or learning-rate setting: it changes the values computed, not the work or the memory"
LOGGING = "logging and monitoring (a pass over the gradients at most, well under 1 % of an iteration)"
CHECKPOINT = "checkpoint saving and loading, between iterations (megaplan prices the training iterations)"
DATA = "data loading and tokenizer files, on the CPU beside the iterations"
EVALUATION = "evaluation, between training iterations"
RUN = "run control (seeds, timeouts, exits, fault handling): an iteration runs the same"
NUMERIC = "a numeric setting of the model: the same operations on the same shapes"
INFERENCE = "inference and serving settings: a training iteration does not use them"
FP8_SCALING = "FP8 delayed-scaling settings: the same FP8 GEMMs"
AS_PRICED = "what megaplan prices already"

IRRELEVANT_BY_REASON: dict[str, tuple[str, ...]] = {
    OPTIMIZER: (
        "lr",
        "min_lr",
        "lr_decay_style",
        "lr_decay_iters",
        "lr_decay_samples",
        "lr_warmup_fraction",
        "lr_warmup_iters",
        "lr_warmup_samples",
        "lr_warmup_init",
        "lr_wsd_decay_style",
        "lr_wsd_decay_iters",
        "lr_wsd_decay_samples",
        "decoupled_lr",
        "decoupled_min_lr",
        "weight_decay",
        "start_weight_decay",
        "end_weight_decay",
        "weight_decay_incr_style",
        "apply_wd_to_qk_layernorm",
        "clip_grad",
        "adam_beta1",
        "adam_beta2",
        "adam_eps",
        "sgd_momentum",
        "muon_momentum",
        "muon_scale_mode",
        "muon_extra_scale_factor",
        "init_method_std",
        "init_method_xavier_uniform",
        "use_checkpoint_opt_param_scheduler",
        "override_opt_param_scheduler",
        "loss_scale",
        "initial_loss_scale",
        "min_loss_scale",
        "loss_scale_window",
        "hysteresis",
        "moe_aux_loss_coeff",
        "moe_z_loss_coeff",
        "moe_router_bias_update_rate",
        "moe_router_load_balancing_type",
        "mtp_loss_scaling_factor",
        "calculate_per_token_loss",
        "use_mup",
        "mup_base_hidden_size",
    ),
    LOGGING: (
        "log_interval",
        "log_params_norm",
        "log_num_zeros_in_grad",
        "log_throughput",
        "log_progress",
        "log_energy",
        "log_straggler",
        "log_memory_interval",
        "log_timers_to_tensorboard",
        "log_memory_to_tensorboard",
        "log_validation_ppl_to_tensorboard",
        "log_loss_scale_to_tensorboard",
        "log_world_size_to_tensorboard",
        "logging_level",
        "timing_log_level",
        "timing_log_option",
        "tensorboard_dir",
        "tensorboard_log_interval",
        "tensorboard_queue_size",
        "wandb_project",
        "wandb_exp_name",
        "wandb_save_dir",
        "wandb_entity",
        "moe_per_layer_logging",
        "straggler_minmax_count",
        "disable_straggler_on_startup",
        "check_weight_hash_across_dp_replicas_interval",
        "profile",
        "profile_step_start",
        "profile_step_end",
        "profile_ranks",
        "memory_snapshot_path",
    ),
    CHECKPOINT: (
        "save",
        "load",
        "save_interval",
        "save_retain_interval",
        "pretrained_checkpoint",
        "finetune",
        "no_load_optim",
        "no_load_rng",
        "no_save_optim",
        "no_save_rng",
        "ckpt_format",
        "ckpt_fully_parallel_save",
        "ckpt_fully_parallel_load",
        "ckpt_assume_constant_structure",
        "ckpt_fully_parallel_load_per_rank_objects",
        "ckpt_drop_redundant_extra_state",
        "ckpt_load_validate_sharding_integrity",
        "dist_ckpt_strictness",
        "dist_ckpt_optim_fully_reshardable",
        "auto_detect_ckpt_format",
        "async_save",
        "async_strategy",
        "async_ckpt_use_cpu_shm",
        "use_persistent_ckpt_worker",
        "verify_integrity",
        "exit_on_missing_checkpoint",
        "use_tokenizer_model_from_checkpoint_args",
    ),
    DATA: (
        "split",
        "data_cache_path",
        "mock_data",
        "num_workers",
        "dataloader_type",
        "mmap_bin_files",
        "eod_mask_loss",
        "reset_position_ids",
        "reset_attention_mask",
        "create_attention_mask_in_dataloader",
        "per_split_data_args_path",
        "train_data_path",
        "valid_data_path",
        "test_data_path",
        "tiktoken_pattern",
        "fim_data",
        "fim_rate",
        "fim_spm_rate",
    ),
    EVALUATION: ("eval_interval", "eval_iters", "eval_global_batch_size", "skip_train"),
    RUN: (
        "seed",
        "data_parallel_random_init",
        "exit_interval",  # stops one job of a run (a chunk under a time limit); the run's length is --train-iters
        "exit_duration_in_mins",
        "exit_signal_handler",
        "distributed_timeout_minutes",
        "rerun_mode",
        "error_injection_type",
        "error_injection_rate",
        "check_for_large_grads",
        "enable_experimental",
        "te_rng_tracker",
        "init_model_with_meta_device",  # the model's first build only
        "cuda_graph_warmup_steps",  # the first steps only
        "use_gloo_process_groups",  # CPU-side groups for checkpointing
        "test_mode",
    ),
    NUMERIC: (
        "layernorm_epsilon",
        "layernorm_zero_centered_gamma",
        "apply_query_key_layer_scaling",
        "attention_softmax_in_fp32",  # the fused attention kernels megaplan prices keep the softmax in fp32
        "rotary_interleaved",
        "rotary_scaling_factor",
        "mscale",
        "mscale_all_dim",
        "rope_type",
    ),
    INFERENCE: (
        "inference_max_seq_length",
        "inference_max_requests",
        "inference_logging_step_interval",
        "inference_dynamic_batching_buffer_size_gb",
        "inference_dynamic_batching_num_cuda_graphs",
        "inference_dynamic_batching_unified_memory_level",
        "inference_dynamic_batching_cuda_graph_sizing_distribution",
        "inference_dynamic_batching_max_requests",
        "inference_dynamic_batching_max_tokens",
        "max_tokens_to_oom",
        "moe_pad_experts_for_cuda_graph_inference",
        "decode_only_cuda_graphs",
    ),
    FP8_SCALING: ("fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo"),
    AS_PRICED: ("moe_grouped_gemm",),  # experts priced as grouped GEMMs (export writes --moe-grouped-gemm)
}
IRRELEVANT = {dest: why for why, dests in IRRELEVANT_BY_REASON.items() for dest in dests}

READ_ELSEWHERE = {  # dests the importer reads beside script.COST_DESTS (tokenizer files, schedules, old settings)
    "data_path",
    "vocab_file",
    "merge_file",
    "tokenizer_model",
    "use_checkpoint_args",
    "encoder_seq_length",
    "hybrid_layer_pattern",
    "hybrid_override_pattern",
    "check_for_nan_in_loss_and_grad",
    "step_batch_size_schedule",
    "rampup_batch_size",
    "use_rope_scaling",
    "rope_scaling_factor",
    "bias_swiglu_fusion",
    "train_iters",
    "train_samples",
}


def unpriced_flags(args) -> list[str]:
    """The flags of ``args`` (a parsed argv, ``flags.MegatronArgs``) set away from Megatron-LM's default that
    megaplan neither reads nor knows to be irrelevant, as given, each once."""
    from planner.megatron.flags import ALIASES, flag_table
    from planner.megatron.importer import NOT_MODELLED, REFUSED
    from planner.megatron.script import COST_DESTS

    read = COST_DESTS | READ_ELSEWHERE | set(NOT_MODELLED) | set(REFUSED)
    out = []
    for flag in dict.fromkeys(args.given):
        spec = flag_table().get(flag)
        if flag in ALIASES or spec is None or spec.dest in read or spec.dest in IRRELEVANT:
            continue
        value = args.values.get(spec.dest, spec.default)
        if value != spec.default and str(value) != str(spec.default):
            out.append(flag)
    return out


SEQUENTIAL_EXPERTS = (
    "no --moe-grouped-gemm: Megatron-Core runs each GPU's experts one by one (SequentialMLP: "
    "transformer_engine_spec_provider.py grouped_mlp_modules @ d98e8a64), which megaplan prices as grouped GEMMs"
)


def unpriced_note(args) -> list[str]:
    """One note naming the flags ``unpriced_flags`` finds, and one for a mixture of experts launched without
    grouped GEMMs (a flag left out, so not among them); none when there is nothing to say."""
    flags = unpriced_flags(args)
    notes = [f"read, not priced (what they change is not modelled): {', '.join(flags)}"] if flags else []
    if args.values.get("num_experts") and not args.values.get("moe_grouped_gemm"):
        notes.append(SEQUENTIAL_EXPERTS)
    return notes
