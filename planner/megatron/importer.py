"""An existing Megatron-LM command line or launch script, read into a plan.

The shell reader (planner.megatron.shell) finds the pretrain_gpt.py arguments without running anything;
the flag table (planner.megatron.flags) types them and maps old spellings; this module turns the
flags that change cost into a model spec and a plan. Flags that do not change cost (learning
rate, data paths, logging) are accepted and ignored.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from planner import api
from planner.errors import PlannerError
from planner.hardware.spec import HardwareSpec
from planner.megatron.deepspeed import ForkPlan, map_fork_flags
from planner.megatron.flags import MegatronArgError, MegatronArgs, parse_megatron_argv
from planner.megatron.low_precision import check_low_precision
from planner.megatron.option_flags import (
    cuda_graph_options,
    not_modelled,
    optimizer_options,
    recompute_fields,
    recompute_modules,
)
from planner.megatron.script import MODEL_FIELDS, SPEC_FIELDS, drop_unset, flag_dests, read_beside, world_unknown
from planner.megatron.shell import ShellParseError, extract_launch
from planner.megatron.shell.expand import MAX_DEPTH
from planner.megatron.tokenizers import tokenizer_vocab
from planner.models.spec import ModelSpec
from planner.plan import StageSplit
from planner.presets import format_validation_error, load_model
from planner.space.grid import stage_layers
from planner.whole import DIGITS

REFUSED = {  # dest -> what to say: a plan the planner cannot price at all
    "use_torch_fsdp2": "PyTorch FSDP2 (--use-torch-fsdp2) is not modelled; Megatron FSDP (--use-megatron-fsdp) is"
}
NOT_MODELLED = {  # dest -> what the estimate leaves out when the flag is on (said in a note, not an error)
    "hybrid_layer_pattern": "hybrid (Mamba) layer patterns",
    "moe_latent_size": "latent MoE (--moe-latent-size; priced as experts on the full hidden size)",
    "moe_shared_expert_gate": "the shared expert's gate",
}


class VocabUnknown(PlannerError):
    """A launch whose tokenizer's vocabulary megaplan cannot know (a Hugging Face tokenizer by path, say)."""

    def __init__(self, how: str) -> None:
        self.how = how
        super().__init__(
            f"the tokenizer's vocabulary is unknown ({how}): give --model PRESET whose tokenizer it is (e.g. "
            "llama2-7b for a Llama 2 tokenizer.model), or its size with --megatron-args '--vocab-size N'"
        )


@dataclass(frozen=True)
class Imported:
    request: api.PlanRequest
    warnings: tuple[str, ...]  # where the estimate departs from what the script would run, or old flags
    argv: list[str]
    script_gpus: int | None = None  # the world size the script's launcher gives, if it gives one
    notes: tuple[str, ...] = ()  # how the script was read: values dropped, tokenizer, fork flags mapped


def _model(v: dict, base: ModelSpec | None, fork: ForkPlan, fork_flags: dict, notes: list[str]) -> ModelSpec:
    fields = {MODEL_FIELDS[k]: val for k, val in v.items() if k in MODEL_FIELDS}
    fields |= {SPEC_FIELDS[k]: val for k, val in v.items() if k in SPEC_FIELDS and val is not None}
    if v.get("group_query_attention") and v.get("num_query_groups"):
        fields["num_query_groups"] = v["num_query_groups"]
    if v.get("use_rope_scaling"):  # --rope-scaling-factor counts only with it (arguments.py; default 8)
        fields["rope_scaling_factor"] = float(v.get("rope_scaling_factor") or 8.0)
    fields.update(fork.model)
    pattern = v.get("hybrid_layer_pattern") or v.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Megatron-LM derives --num-layers from the pattern: the main part (before '/'), '|' left out
        # (arguments.py, get_hybrid_total_layer_count in megatron/core/models/hybrid/hybrid_layer_allocation.py)
        fields["num_layers"] = len(pattern.split("/")[0].replace("|", ""))
        notes.append(f"{fields['num_layers']} layers from --hybrid-layer-pattern (as Megatron-LM counts them)")
    if "num_query_groups" in fields and fields["num_query_groups"] == fields.get("num_attention_heads"):
        fields.pop("num_query_groups")  # as many groups as heads: plain multi-head attention
    if "vocab_size" not in fields and base is None:
        vocab, how = tokenizer_vocab(v, fork_flags)
        if vocab is None:
            raise VocabUnknown(how)
        fields["vocab_size"] = vocab
        notes.append(f"vocabulary {vocab} from {how}")
    if base is not None:
        notes += _preset_over_defaults(base, fields)
        merged = {**base.model_dump(exclude={"training"}), **fields}
        merged.setdefault("max_position_embeddings", v.get("seq_length", base.max_position_embeddings))
        return _spec({**merged, "name": base.name, "training": base.training})
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
        if MODEL_FIELDS[k] not in fields
    ]
    if missing:
        source = "; it loads them from the checkpoint (--use-checkpoint-args)" if v.get("use_checkpoint_args") else ""
        raise PlannerError(
            f"the command line does not define the model: {', '.join(missing)} missing{source} "
            f"(give --model PRESET, or the flags with --megatron-args '{missing[0]} N')"
        )
    fields.setdefault("max_position_embeddings", v.get("seq_length", 2048))
    return _spec({"name": "imported", "source": "Megatron-LM command line", **fields})


def _preset_over_defaults(base: ModelSpec, fields: dict) -> list[str]:
    """A script that defines its model (layers, width, heads) beside --model PRESET (given for its tokenizer, say):
    the preset's values where the script leaves Megatron-LM's default, which is what the script would run (a
    preset's dropout 0.0 against Megatron-LM's 0.1 was taken without a word)."""
    if not {"num_layers", "hidden_size", "num_attention_heads"} <= set(fields):
        return []
    taken = []
    for name, value in base.model_dump(exclude={"training", "name", "source", "not_in_megatron"}).items():
        spec = ModelSpec.model_fields[name]
        default = None if spec.is_required() else spec.default
        shown = getattr(value, "value", value)
        if name in fields or value == default:
            continue
        megatron = getattr(default, "value", default)
        taken.append(f"{name} {shown}" + (f" (Megatron-LM: {megatron})" if default is not None else ""))
    if not taken:
        return []
    return [
        f"the preset {base.name} (--model) gives what the script leaves to Megatron-LM's defaults: {', '.join(taken)}"
    ]


def _spec(fields: dict) -> ModelSpec:
    """The model a command line describes, checked: a flag combination the model cannot have is one line."""
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as err:
        raise PlannerError(f"the command line's model: {format_validation_error(err)}") from err


def _stage_split(v: dict) -> StageSplit:
    return StageSplit.from_flags(
        v.get("account_for_embedding_in_pipeline_split"), v.get("account_for_loss_in_pipeline_split")
    )


def _vpp(v: dict, L: int, p: int) -> int:
    """Chunks per stage from --num-layers-per-virtual-pipeline-stage: the (middle) stage's layers over the
    layers per chunk (Megatron-LM arguments.py:927-980); with a layout, its stages over p."""
    given = [
        f
        for f, d in (
            ("--num-layers-per-virtual-pipeline-stage", "num_layers_per_virtual_pipeline_stage"),
            ("--num-virtual-stages-per-pipeline-rank", "num_virtual_stages_per_pipeline_rank"),
            ("--pipeline-model-parallel-layout", "pipeline_model_parallel_layout"),
        )
        if v.get(d) is not None
    ]
    if len(given) > 1:  # Megatron-LM arguments.py:928-939
        raise PlannerError(f"give only one of {' and '.join(given)} (Megatron-LM takes one)")
    if v.get("pipeline_model_parallel_layout"):
        return 1  # the plan derives it from the layout
    if v.get("num_virtual_stages_per_pipeline_rank"):
        return int(v["num_virtual_stages_per_pipeline_rank"])
    per_chunk = v.get("num_layers_per_virtual_pipeline_stage")
    if not per_chunk:
        return 1
    first, last = v.get("decoder_first_pipeline_num_layers") or 0, v.get("decoder_last_pipeline_num_layers") or 0
    layers = stage_layers(L, np.array([p]), np.array([_stage_split(v).code]), np.array([first]), np.array([last]))
    per_stage = int(layers.middle[0])
    if per_stage % per_chunk:
        raise PlannerError(
            f"--num-layers-per-virtual-pipeline-stage {per_chunk} does not divide the {per_stage} layers per stage"
        )
    return per_stage // per_chunk


def _attention(v: dict) -> str:
    backend = v.get("attention_backend")
    if backend in ("unfused", "local") or (v.get("transformer_impl") == "local" and backend not in ("flash", "fused")):
        return "unfused"
    return "flash"


def _on(value: object) -> bool:
    """Whether a flag's value turns its feature on: true, a positive count, a non-empty pattern or list."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, int | float):
        return value > 0
    return bool(value)


def _global_batch(v: dict, fork: ForkPlan, b: int, dp: int) -> tuple[int, str | None]:
    """The steady-state global batch: --global-batch-size, the last step of --step-batch-size-schedule, the
    DeepSpeed config's train_batch_size, else micro-batch × dp (Megatron's default)."""
    schedule = v.get("step_batch_size_schedule")
    if schedule and v.get("global_batch_size"):
        raise PlannerError(
            "--step-batch-size-schedule and --global-batch-size are both given; Megatron-LM takes one "
            "(its validate_args rejects both)"
        )
    if schedule:
        last = str(schedule).split()[-1].rpartition(":")[2]
        if not DIGITS.fullmatch(last):
            raise PlannerError(f"--step-batch-size-schedule {schedule!r}: expected steps like '0:16 1B:256'")
        return int(last), f"global batch {last}: the last step of --step-batch-size-schedule (the steady state)"
    if v.get("global_batch_size") is not None:  # 0 or less: the spec refuses it, as Megatron-LM asserts (> 0)
        return int(v["global_batch_size"]), None
    if "global_batch" in fork.training:
        return int(fork.training["global_batch"]), None
    return b * dp, f"no --global-batch-size: micro-batch × dp = {b * dp} (Megatron-LM's default)"


def _fp8_recipe(v: dict) -> str:
    recipe = v.get("fp8_recipe") or "delayed"
    if recipe == "custom":
        raise PlannerError(
            "--fp8-recipe custom loads a recipe of your own, which megaplan cannot cost; "
            "allowed: delayed, tensorwise, mxfp8, blockwise"
        )
    return recipe


# the sizes Megatron-LM divides by: 0 ended in a ZeroDivisionError traceback (tensor, pipeline) or was read as 1
# without a word (context, expert: ``or 1``)
SIZE_DESTS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "micro_batch_size",
    "train_iters",  # the run's length (err16): 0 would be a run of no tokens
    "train_samples",
)


def _refuse(v: dict) -> None:
    """Plans the planner cannot price at all: one line naming what is modelled instead."""
    for dest in SIZE_DESTS:
        if isinstance(v.get(dest), int) and v[dest] < 1:
            raise PlannerError(f"--{dest.replace('_', '-')} {v[dest]}; allowed: a whole number ≥ 1")
    for dest, message in REFUSED.items():
        if v.get(dest):
            raise PlannerError(message)
    strategy = v.get("data_parallel_sharding_strategy")
    if v.get("use_megatron_fsdp") and strategy == "no_shard":
        raise PlannerError(
            "--data-parallel-sharding-strategy no_shard is not modelled as Megatron FSDP; drop --use-megatron-fsdp "
            "for the same plan on Megatron's DDP (optim, optim_grads and optim_grads_params are modelled)"
        )


def _unmodelled(v: dict) -> list[str]:
    unmodelled = [what for dest, what in NOT_MODELLED.items() if _on(v.get(dest))]
    if getattr(v.get("position_embedding_type"), "original", None) == "alibi":
        unmodelled.append("ALiBi attention biases (no position embedding parameters, priced as none)")
    unmodelled += not_modelled(v)
    return [f"not modelled, the estimate leaves out: {'; '.join(unmodelled)}"] if unmodelled else []


def _options(v: dict, spec: ModelSpec, warnings: list[str], allocator_conf: str | None) -> dict:
    """The PlanOptions a command line sets (``allocator_conf``: PYTORCH_CUDA_ALLOC_CONF at the launch)."""
    return {
        "attention_kernel": _attention(v),
        "overlap_grad_reduce": bool(v.get("overlap_grad_reduce") or v.get("ddp_impl") == "torch"),
        "overlap_param_gather": bool(v.get("overlap_param_gather")),
        "grad_reduce_in_bf16": bool(v.get("grad_reduce_in_bf16")),
        "use_sharp": bool(v.get("use_sharp")),
        "ddp_bucket_size": v.get("ddp_bucket_size"),
        "tp_comm_overlap": bool(v.get("tp_comm_overlap")),
        "tp_comm_overlap_cfg": _ub_cfg_path(v, warnings),
        "overlap_p2p_comm": bool(v.get("overlap_p2p_comm", True)),
        "pp_scatter_gather": bool(v.get("scatter_gather_tensors_in_pipeline")),
        "distribute_saved_activations": bool(v.get("distribute_saved_activations")),
        # --no-bias-swiglu-fusion: the GLU op by op (mlp.py); GeLU and squared ReLU are one kernel either way
        "activation_fusion": not (spec.gated and v.get("bias_swiglu_fusion") is False),
        "async_tp_comm": v.get("async_tensor_model_parallel_allreduce") is not False,
        "fp8": v.get("fp8"),  # --fp8-format stores into args.fp8
        "fp8_recipe": _fp8_recipe(v),
        "fp8_param_gather": bool(v.get("fp8_param_gather")),
        "fp4": v.get("fp4"),  # --fp4-format stores into args.fp4 (checked: low_precision._fp4)
        "fp4_recipe": v.get("fp4_recipe") or "nvfp4",
        "fp4_param_gather": bool(v.get("fp4_param_gather")),
        **_bf16_ends(v),
        "moe_capacity_factor": v.get("moe_expert_capacity_factor"),
        "recompute_modules": recompute_modules(v),
        "cpu_offloading_num_layers": int(v.get("cpu_offloading_num_layers") or 0),
        "expandable_segments": "expandable_segments:true" in (allocator_conf or "").replace(" ", "").lower(),
        **cuda_graph_options(v, warnings),
        **optimizer_options(v, warnings),
        "moe_flex_dispatcher_backend": _flex_backend(v),
        "moe_shared_expert_overlap": bool(v.get("moe_shared_expert_overlap")),
        "delay_wgrad_compute": bool(v.get("delay_wgrad_compute")),
        # the unified knob wins over the deprecated per-backend ones (transformer_config.py __post_init__)
        "moe_flex_dispatcher_num_sms": v.get("moe_flex_dispatcher_num_sms")
        or v.get("moe_hybridep_num_sms")
        or v.get("moe_deepep_num_sms"),
        "moe_hybridep_num_sms_preprocessing": int(v.get("moe_hybridep_num_sms_preprocessing") or 108),
        "use_transformer_engine_op_fuser": bool(v.get("use_transformer_engine_op_fuser")),
        # Megatron-LM's default is off; a dense model has no permutation: the plan's default
        "moe_permute_fusion": bool(v.get("moe_permute_fusion")) if spec.is_moe else True,
        # the deprecated --moe-router-padding-for-fp8 turns the unified one on (transformer_config.py:2642-2647)
        "moe_router_padding_for_quantization": bool(
            v.get("moe_router_padding_for_quantization") or v.get("moe_router_padding_for_fp8")
        ),
    }


def _flex_backend(v: dict) -> str | None:
    """The flex dispatcher's library a launch script runs: Megatron-LM's default deepep where the script's flex
    dispatcher gives none (arguments.py, transformer_config.py @ d98e8a64), on every cluster: on GB200 it runs DeepEP,
    which the rules refuse there (space.flex_backend); None (the hardware's default) without the flex dispatcher."""
    if v.get("moe_enable_deepep"):
        return "deepep"
    given = v.get("moe_flex_dispatcher_backend")
    return given or ("deepep" if _dispatcher(v) == "flex" else None)


def _bf16_ends(v: dict) -> dict:
    """--first-last-layers-bf16 with its layer counts (TransformerConfig's defaults 1 and 1 when not given) and
    --fp8-output-proj: the PlanOptions they set. Without the switch Megatron-Core reads no count
    (fp8_utils.is_first_last_bf16_layer), so a count given alone (Bridge writes 0 and 0) keeps the defaults."""
    ends = {"num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1}
    on = bool(v.get("first_last_layers_bf16"))
    out = {dest: default if v.get(dest) is None or not on else int(v[dest]) for dest, default in ends.items()}
    return {"first_last_layers_bf16": on, **out, "fp8_output_proj": bool(v.get("fp8_output_proj"))}


def _parallel(v: dict, fork: ForkPlan, spec: ModelSpec) -> dict:
    """The ParallelPlan fields a command line sets (dp is derived when the plan is built)."""
    pp = int(fork.plan.get("pp", v.get("pipeline_model_parallel_size", 1)))
    fsdp = bool(v.get("use_megatron_fsdp") or fork.plan.get("fsdp"))
    return dict(
        tp=int(v.get("tensor_model_parallel_size", 1)),
        pp=pp,
        vpp=_vpp(v, spec.num_layers, pp),
        microbatch_group_size=v.get("microbatch_group_size_per_vp_stage"),
        micro_batch=int(fork.plan.get("micro_batch", v.get("micro_batch_size", 1))),
        cp=int(fork.plan.get("cp", v.get("context_parallel_size") or 1)),
        ep=int(fork.plan.get("ep", v.get("expert_model_parallel_size") or 1)),
        etp=v.get("expert_tensor_parallel_size"),
        fsdp=fsdp,
        # no_shard (Megatron-LM's default, which Bridge writes out) is plain DDP: no FSDP strategy to read
        fsdp_sharding=v.get("data_parallel_sharding_strategy")
        if fsdp and v.get("data_parallel_sharding_strategy")
        else "optim_grads_params",
        distributed_optimizer_instances=int(v.get("num_distributed_optimizer_instances") or 1),
        fsdp_outer_sharding=(v.get("outer_dp_sharding_strategy") or "no_shard") if fsdp else "no_shard",
        sequence_parallel=bool(v.get("sequence_parallel")),
        **recompute_fields(v),
        distributed_optimizer=bool(
            v.get("use_distributed_optimizer") or fsdp or fork.plan.get("distributed_optimizer")
        ),
        stage_split=fork.plan.get("stage_split") or _stage_split(v),
        first_stage_layers=v.get("decoder_first_pipeline_num_layers"),
        last_stage_layers=v.get("decoder_last_pipeline_num_layers"),
        pipeline_layout=v.get("pipeline_model_parallel_layout"),
        moe_token_dispatcher=_dispatcher(v),
        overlap_moe_expert_parallel_comm=bool(v.get("overlap_moe_expert_parallel_comm")),
    )


def _recompute_layers_unset(v: dict, parallel: dict) -> list[str]:
    """Full recomputation without --recompute-num-layers: Megatron-LM's default was 1 up to 23.06
    (megatron/arguments.py:712 there); from core_r0.4.0 it is None, which transformer_config.py rejects."""
    if parallel.get("recompute") != "full" or v.get("recompute_num_layers") is not None:
        return []
    return [
        f"--recompute-method {parallel['recompute_method']} without --recompute-num-layers: priced as 1 layer, "
        "Megatron-LM's default up to 23.06; Megatron-Core 0.4 and later reject the line (transformer_config.py: "
        "'recompute_num_layers must be between 1 and num_layers_per_pipeline_rank'): give --recompute-num-layers N"
    ]


def megatron_fields(
    args: MegatronArgs,
    *,
    gpus: int,
    model: str | None = None,
    hardware: str | HardwareSpec | None = None,
    files: dict[str, str] | None = None,
    allocator_conf: str | None = None,
    attention_env: dict[str, str] | None = None,
) -> tuple[dict, list[str], list[str]]:
    """The plan's fields a parsed Megatron-LM argv describes (the plan JSON's shape, checked when the plan
    is built, after any options given beside it), the notes on how it was read, and the warnings on where
    the estimate departs from what the command line runs (``allocator_conf``: PYTORCH_CUDA_ALLOC_CONF;
    ``attention_env``: Transformer Engine's NVTE_FLASH_ATTN and NVTE_FUSED_ATTN at the launch)."""
    v, notes = args.values, []
    if v.get("seq_length") is None and v.get("encoder_seq_length") is not None:
        v = {**v, "seq_length": v["encoder_seq_length"]}  # Megatron-LM's arguments.py (T5: --encoder-seq-length)
    _refuse(v)
    fork = map_fork_flags(args.fork, v, files or {})
    notes += fork.notes
    warnings = list(fork.warnings) + _unmodelled(v)
    spec = _model(v, load_model(model) if model else None, fork, args.fork, notes)
    parallel = _parallel(v, fork, spec)
    warnings += _recompute_layers_unset(v, parallel)
    warnings += check_low_precision(v, num_layers=spec.num_layers, pp=parallel["pp"])
    mp = parallel["tp"] * parallel["pp"] * parallel["cp"]
    B, how = _global_batch(v, fork, parallel["micro_batch"], gpus // mp if gpus % mp == 0 else 1)
    if how:
        notes.append(how)
    precision = _precision(v)
    training = {"global_batch": B, "seq_len": v.get("seq_length"), "precision": precision}
    notes += _run_length(v, training)
    data = {
        "model_spec": spec,
        "hardware": hardware,
        "gpus": gpus,
        "training": training,
        "parallel": parallel,
        "options": _options(v, spec, warnings, allocator_conf),
    }
    backend, said, departs = attention_env_options(
        attention_env or {}, hardware, data["options"]["attention_kernel"], v.get("attention_backend")
    )
    data["options"].update(backend)
    notes += said
    warnings += departs
    return data, notes, warnings


# The Transformer Engine switches each --attention-backend sets, (NVTE_FLASH_ATTN, NVTE_FUSED_ATTN): Megatron-Core's
# LanguageModule._set_attention_backend (language_module.py @ d98e8a64; since fa0dcc4872, 2024-12-07) sets them and
# asserts that the environment holds the same value or none
BACKEND_SWITCHES = {
    "auto": ("1", "1"),
    "flash": ("1", "0"),
    "fused": ("0", "1"),
    "unfused": ("0", "0"),
    "local": ("0", "0"),
}
TE_SWITCHES = ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN")


def attention_env_options(
    env: dict[str, str], hardware: str | HardwareSpec | None, kernel: str, backend: str | None = None
) -> tuple[dict, list[str], list[str]]:
    """(plan options, notes, warnings) of Transformer Engine's attention backend as the launch leaves it: the
    switches --attention-backend sets (``BACKEND_SWITCHES``), overridden by NVTE_FLASH_ATTN / NVTE_FUSED_ATTN at the
    launch (``env``; "0" turns a backend off: TE dot_product_attention/utils.py get_attention_backend). Both off:
    TE's unfused attention. cuDNN's fused attention off and flash-attn on, on Hopper: the flash-attn package,
    FlashAttention-2 (the NGC containers' flash-attn; flash-attn 3, installed apart, runs near cuDNN's law), priced at
    its measured time over the Hopper law (``fidelity.kernels.hopper_flash_attn_2_ratio``: the FA3 paper's FA2 rows,
    ×1.70); DGX Cloud's 2024 NeMo recipes export it (docs/cost-model.md §10.1). On Ampere TE prefers flash-attn
    anyway, and on Blackwell no kernel table measures flash-attn: the law, said. A variable that contradicts the
    backend is a warning: today's Megatron-LM asserts it away."""
    backend = backend or "auto"
    expected = dict(zip(TE_SWITCHES, BACKEND_SWITCHES.get(backend, ("1", "1")), strict=True))
    warnings = [
        f"the launch's environment sets {name}={env[name]}, which Megatron-LM's --attention-backend {backend} refuses "
        f"(language_module.py _set_attention_backend asserts {name} is unset or {expected[name]}, since Megatron-Core "
        "0.11): choose the backend with --attention-backend instead; priced as Transformer Engine runs the variable"
        for name in TE_SWITCHES
        if name in env and env[name] != expected[name]
    ]
    on = {name: env.get(name, expected[name]) != "0" for name in TE_SWITCHES}
    off = " and ".join(f"{n}={env[n]}" for n in TE_SWITCHES if n in env and env[n] == "0")
    said = f"the launch's environment sets {off}" if off else f"--attention-backend {backend}"
    if kernel != "flash" or on["NVTE_FUSED_ATTN"]:
        return {}, [], warnings
    if not on["NVTE_FLASH_ATTN"]:
        note = f"{said}: Transformer Engine runs its unfused attention (batched GEMMs, softmax and dropout passes)"
        return {"attention_kernel": "unfused"}, [note + ", priced so"], warnings
    from planner.fidelity.kernels import hopper_flash_attn_2_ratio
    from planner.presets import DEFAULT_HARDWARE, load_hardware

    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware or DEFAULT_HARDWARE)
    cc = hw.gpu.compute_capability
    if 9 <= cc < 10:
        ratio = hopper_flash_attn_2_ratio(hw.attention.model_dump())
        return (
            {"attention_time_ratio": ratio, "te_flash_attn": True},
            [
                f"{said}: Transformer Engine runs flash-attn, not cuDNN's fused attention, priced as FlashAttention-2 "
                f"(the containers' flash-attn) at its measured time over the Hopper law, ×{ratio:.2f} (the FA3 "
                "paper's FA2 rows); flash-attn 3, installed apart, runs near the law"
            ],
            warnings,
        )
    if cc < 9:
        return (
            {"te_flash_attn": True},
            [f"{said}: on Ampere Transformer Engine runs flash-attn anyway (the law)"],
            warnings,
        )
    note = f"{said}: Transformer Engine runs flash-attn, whose time on this GPU no kernel table measures: the law"
    return {"te_flash_attn": True}, [note + " (cuDNN's)"], warnings


def _run_length(v: dict, training: dict) -> list[str]:
    """The run's tokens from --train-iters or --train-samples (``run_length``), set in ``training``; the note
    saying so. Megatron-LM takes one of the two (arguments.py asserts it); without either the days are for
    --tokens (300B by default)."""
    iters, samples = v.get("train_iters"), v.get("train_samples")
    if iters is not None and samples is not None:
        raise PlannerError("--train-iters and --train-samples are both given; Megatron-LM takes one (validate_args)")
    return run_length(iters, samples, training)


def run_length(iters, samples, training: dict, names: tuple[str, str] = ("--train-iters", "--train-samples")):
    """The run's tokens from its iterations (iterations × global batch × sequence) or samples (samples × sequence;
    with --rampup-batch-size too), set as ``training["train_tokens"]``; the one note saying so, naming the
    setting as ``names`` spell it (Megatron-LM's flags; Bridge's train.train_iters, train.train_samples)."""
    from planner.report.layout import tokens_text

    s = training["seq_len"]
    if s is None or (iters is None and samples is None):
        return []
    if iters is not None:
        tokens, how = iters * training["global_batch"] * s, f"{names[0]} {iters:,} × global batch "
        how += f"{training['global_batch']:,} × seq {s:,}"
    else:
        tokens, how = samples * s, f"{names[1]} {samples:,} × seq {s:,}"
    training["train_tokens"] = float(tokens)
    return [f"the run's length: {how} = {tokens_text(tokens)} tokens (days and cost are for it; --tokens sets another)"]


def _dispatcher(v: dict) -> str:
    """--moe-token-dispatcher-type; --moe-enable-deepep (the old switch) needs the flex dispatcher, as
    Megatron-LM's TransformerConfig says (transformer_config.py:1744-1745)."""
    kind = v.get("moe_token_dispatcher_type") or "allgather"
    if v.get("moe_enable_deepep") and kind != "flex":
        raise PlannerError(
            "--moe-enable-deepep needs --moe-token-dispatcher-type flex "
            "(Megatron-LM: DeepEP backend is only supported with flex token dispatcher)"
        )
    return kind


GPT_ENTRY = re.compile(r"pretrain_gpt2?\.py")  # pretrain_gpt2.py: its name up to Megatron-LM v1.0
OTHER_ENTRIES = (  # (pattern on the entry point's name, what it trains that the GPT estimate leaves out)
    (r"bert", "BERT: a bidirectional encoder with a pooler and binary head"),
    (r"t5", "T5: an encoder-decoder, whose decoder layers also attend to the encoder"),
    (r"mamba|hybrid", "a Mamba hybrid: Mamba and MLP layers priced as transformer layers"),
    (r"vlm|vision|llava|multimodal|mimo|clip", "a multimodal model: the vision encoder and projector are not priced"),
    (r"retro|ict|realm", "a retrieval model: the retriever and its encoder are not priced"),
)


def entry_point_warning(entry: str | None) -> list[str]:
    """A warning naming an entry point other than pretrain_gpt.py: the estimate is a GPT decoder's."""
    import posixpath

    name = posixpath.basename(entry or "")
    if not name or GPT_ENTRY.fullmatch(name if name.endswith(".py") else name.rpartition(".")[2] + ".py"):
        return []  # pretrain_gpt.py, or the module pretrain_gpt (python -m pretrain_gpt)
    unread = any(c in (entry or "") for c in "$`") or (entry or "").startswith("/")
    path = name if unread else entry or name  # `pwd`/x.py or /abs/path/x.py: the name alone
    what = next((w for p, w in OTHER_ENTRIES if re.search(p, path, re.IGNORECASE)), None)
    kind = f" ({what})" if what else ""
    return [f"the script runs {path}{kind}, not pretrain_gpt.py: the estimate prices a GPT decoder of its flags"]


@dataclass(frozen=True)
class ImportedFields:
    """A command line read into the plan's fields, before options beside it and before it is checked."""

    data: dict
    warnings: tuple[str, ...]
    argv: list[str]
    script_gpus: int | None
    notes: tuple[str, ...]
    world_text: str  # how the launch gives its world size, for errors ("the script's 8 GPUs (nproc 8)")
    unset: dict[str, str] = field(default_factory=dict)  # option -> the unset value it overrides, as written


BESIDE_FLAGS = {  # a plan option given beside a script -> the Megatron-LM flag whose value it overrides
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "vpp": "--num-virtual-stages-per-pipeline-rank",
    "micro_batch": "--micro-batch-size",
    "global_batch": "--global-batch-size",
    "seq_len": "--seq-length",
    "recompute": "--recompute-granularity",
    "moe_token_dispatcher": "--moe-token-dispatcher-type",
}


def import_megatron(text: str, **kw) -> Imported:
    """Read a command line or launch script and build its plan (nothing in it is executed); the
    arguments are ``import_fields``'."""
    from planner.plan_sources import build

    read = import_fields(text, **kw)
    request = build(read.data, f"--gpus {kw['gpus']}" if kw.get("gpus") else read.world_text)
    return Imported(request, read.warnings, read.argv, read.script_gpus, read.notes)


def import_fields(
    text: str,
    *,
    gpus: int | None = None,
    model: str | None = None,
    hardware: str | HardwareSpec | None = None,
    env: dict[str, str] | None = None,
    base_dir: str | None = None,
    extra: str | None = None,
    script_path: str | None = None,
    given: frozenset[str] = frozenset(),
) -> ImportedFields:
    """Read a command line or launch script into the plan's fields (nothing in it is executed). Files the
    script sources or submits are read beside it, in ``base_dir``; ``extra`` flags follow the script's;
    ``given``: the plan options given beside it (tp, micro_batch ...), which override what it leaves unset."""
    import shlex

    from planner.megatron.modelzoo import modelzoo_command

    zoo = modelzoo_command(text, env or {})
    try:
        launch = extract_launch(zoo or text, env, read_file=read_beside(base_dir, script_path))
    except ShellParseError as err:
        raise ShellParseError(_other_kind(text) or str(err)) from None
    with _unevaluated_said(launch):
        try:
            beside = shlex.split(extra or "")
        except ValueError as err:
            raise PlannerError(f"--megatron-args {extra!r}: {err}") from err
        overridden = flag_dests(beside) | flag_dests([BESIDE_FLAGS[n] for n in given if n in BESIDE_FLAGS])
        argv, dropped, lone, unset = drop_unset(launch.argv, launch.argv_unresolved, overridden)
        argv += beside
        try:
            args = parse_megatron_argv(argv, extra_flags_allowed=bool(entry_point_warning(launch.entry_point)))
        except MegatronArgError as err:
            if "is missing its value" not in str(err) or extra_has_flag(extra, str(err).split()[0]):
                raise
            raise MegatronArgError(
                f"{err} (the script gives it none, an empty variable perhaps, and Megatron-LM would stop there too: "
                "set that variable with --env NAME=VALUE, or give the flag with --megatron-args)"
            ) from None
        world = gpus or launch.world_size
        if world is None:
            raise PlannerError(world_unknown(launch))
        launch = _zoo_env_read(launch, text) if zoo else launch
        warnings, notes = _launch_notes(launch, args, dropped, lone, read_zoo=bool(zoo), gpus_given=gpus is not None)
        data, read, departs = megatron_fields(
            args,
            gpus=world,
            model=model,
            hardware=hardware,
            files=launch.files,
            allocator_conf=launch.allocator_conf,
            attention_env=launch.attention_env,
        )
    counts = ", ".join(f"{k} {v}" for k, v in launch.counts.items())
    world_text = f"the script's {world} GPUs" + (f" ({counts})" if counts else "")
    warned, said = tuple(warnings + departs), tuple(notes + _extra_overrides(launch.argv, extra) + read)
    dests = {d: n for n, f in BESIDE_FLAGS.items() for d in flag_dests([f])}
    unset = {dests[d]: v for d, v in unset.items() if d in dests}  # --megatron-args' own note says the rest
    return ImportedFields(data, warned, launch.argv, launch.world_size, said, world_text, unset)


UNEVALUATED = "megaplan runs no command and reads no standard input"


@contextmanager
def _unevaluated_said(launch):
    """An error reading a launch whose script holds what megaplan did not evaluate (``mapfile -t A < <(cmd)``,
    arithmetic on a command's output) says so: the flags it would have set are what is missing (fresh user trial
    8: an array read with mapfile was empty and the error blamed the model's flags alone)."""
    try:
        yield
    except PlannerError as err:
        passed = [n for n in launch.from_submitter if f"--env {n}=" in str(err)]
        if passed:  # sbatch --export=TP: TP is the submitting shell's, not the script's default (ux12)
            raise PlannerError(
                f"{err} (sbatch --export passes {', '.join(passed)} from the shell that submits the job, "
                "which megaplan cannot see)"
            ) from None
        if not launch.unevaluated:
            raise
        raise PlannerError(
            f"{err}; the script's {'; '.join(launch.unevaluated)} was not evaluated ({UNEVALUATED}), so what it "
            "sets is missing here"
        ) from None


def _other_kind(text: str) -> str | None:
    """What a file that is no Megatron-LM launch is, and the option that reads it (fresh user trial 7: a plan
    JSON was "not a shell script bashlex can parse", Bridge's and NeMo 2's launch lines had "no entry point")."""
    head = text.lstrip()[:1]
    if head in "{[" and head and '"parallel"' in text:
        return "this is a megaplan plan file (JSON), not a launch script: read it with --plan FILE"
    if re.search(r"(?:^|[\s/])run_recipe\.py\b", text):
        return (
            "this is Megatron-Bridge's run_recipe.py launch line, not Megatron-LM's: read it with --bridge-config FILE"
        )
    if re.search(r"\bnemo\s+llm\b", text):
        return "this is a NeMo 2 command line, not a Megatron-LM launch: read it with --bridge-config FILE"
    return None


def _zoo_env_read(launch, text: str):
    """A moe-modelzoo config's ${VARIABLES} are filled in from --env before its launch line is read: those
    names were read, by the config."""
    from dataclasses import replace

    from planner.megatron.modelzoo import VARIABLE

    used = {m.group(1) or m.group(2) for m in VARIABLE.finditer(text)}
    return replace(launch, env_unread=[n for n in launch.env_unread if n not in used])


def _lone_notes(lone: list[str], unfilled: dict[str, str]) -> list[str]:
    """What the words that expand to nothing are: unset (as bash expands them), or an array a mapfile/readarray
    megaplan did not evaluate would fill (ux9 listed those as "unset" too)."""
    by_command: dict[str, list[str]] = {}
    for word in lone:
        names = re.findall(r"\$\{?([A-Za-z_]\w*)", word)
        by_command.setdefault(next((unfilled[n] for n in names if n in unfilled), ""), []).append(word)
    notes = [
        f"filled by {command}, not evaluated, so empty here: {' '.join(words)}"
        for command, words in by_command.items()
        if command
    ]
    if by_command.get(""):
        notes.append(f"unset, so expanding to nothing (as in bash): {' '.join(by_command[''])}")
    return notes


def _launch_notes(launch, args, dropped, lone, *, read_zoo: bool, gpus_given: bool) -> tuple[list[str], list[str]]:
    """The warnings and notes of reading a launch: what was ignored or unset, how many launches the script
    holds, the defaults it fills (when --gpus is not given), its entry point, and the files it could not read."""
    from planner.megatron.modelzoo import READ_NOTE
    from planner.megatron.unpriced import unpriced_note

    warnings, notes = list(args.warnings), [READ_NOTE] if read_zoo else []
    notes += unpriced_note(args)
    if args.values.get("rampup_batch_size"):
        notes.append("--rampup-batch-size ignored: the estimate is for the full global batch of the steady state")
    if dropped:
        notes.append(f"ignored flags set from unset values (they do not change the estimate): {'; '.join(dropped)}")
    notes += _lone_notes(lone, launch.unfilled)
    notes += launch.notes
    if launch.launches > 1:
        notes.append(
            f"the script launches Megatron-LM {launch.launches} times; this plan is its first launch's (to read "
            "another, give that launch's line alone)"
        )
    if not gpus_given:
        notes += launch.defaults
    warnings += entry_point_warning(launch.entry_point)
    if launch.env_unread:
        given = ", ".join(f"--env {name}" for name in launch.env_unread)
        warnings.append(
            f"{given}: the script never reads it before its launch, so it changes nothing (a flag goes in "
            "--megatron-args '--flag VALUE', a plan size in --tp/--pp/--gpus ...)"
        )
    if launch.unevaluated:
        warnings.append(
            f"did not evaluate {'; '.join(launch.unevaluated)} ({UNEVALUATED}): the variables it sets are unknown, "
            "or empty for an array"
        )
    if launch.too_deep:
        warnings.append(
            f"stopped reading {', '.join(launch.too_deep)} after {MAX_DEPTH} nested levels: files that source or run "
            "each other (or themselves) without end; bash would repeat them until it fails"
        )
    if launch.unread:
        warnings.append(
            f"did not read {', '.join(launch.unread)} (not on this machine where the script's path leads, beside it or "
            "above it); if it sets values the launch uses, pass them with --env NAME=VALUE"
        )
    return warnings, notes


def _ub_cfg_path(v: dict, warnings: list[str]) -> str | None:
    """--tp-comm-overlap-cfg: the userbuffer YAML, read where it is; one that is not here is said and
    left out (Transformer Engine's defaults, as Megatron-LM without a file)."""
    path = v.get("tp_comm_overlap_cfg")
    if not path or not v.get("tp_comm_overlap"):
        return None
    if not Path(str(path)).expanduser().is_file():
        warnings.append(
            f"--tp-comm-overlap-cfg {path} is not on this machine: Transformer Engine's default userbuffers are "
            "assumed (--tp-comm-overlap-cfg bridge: Megatron-Bridge's preset for the GPU and shape)"
        )
        return None
    return str(path)


def _precision(v: dict) -> str:
    """--fp16, --bf16 or neither (fp32); both is what Megatron-LM refuses ('if args.fp16: assert not args.bf16',
    arguments.py), not one of them taken silently (fresh user trial 5 read --bf16 --fp16 as fp16)."""
    if v.get("fp16") and v.get("bf16"):
        raise PlannerError(
            "Megatron-LM would reject this: --fp16 and --bf16 together (arguments.py asserts one); give one"
        )
    return "fp16" if v.get("fp16") else "bf16" if v.get("bf16") else "fp32"


def _flag_values(argv: list[str]) -> dict[str, str]:
    """Each --flag of an argv with the words after it up to the next flag ('' for a switch); the last wins."""
    out, flag = {}, None
    for word in argv:
        if word.startswith("--"):
            flag, _, value = word.partition("=")
            out[flag] = value
        elif flag is not None:
            out[flag] = f"{out[flag]} {word}".strip()
    return out


def _extra_overrides(script_argv: list[str], extra: str | None) -> list[str]:
    """The note that --megatron-args beside a script replaces the script's value of a flag (read after it, as
    argparse takes the last); it was applied without a word (fresh user trial 5: --num-layers 48 over 32)."""
    import shlex

    if not extra:
        return []
    script, given = _flag_values(script_argv), _flag_values(shlex.split(extra))
    changed = [
        f"{f} {v}".strip() + f" (the script's {script[f] or 'switch'})"
        for f, v in given.items()
        if f in script and script[f] != v
    ]
    return [f"--megatron-args overrides the script: {', '.join(changed)}"] if changed else []


def extra_has_flag(extra: str | None, flag: str) -> bool:
    """Whether the options given beside the script (--megatron-args) hold ``flag``."""
    return bool(extra) and any(word.split("=")[0] == flag for word in extra.split())
