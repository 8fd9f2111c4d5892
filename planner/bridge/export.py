"""A plan as Megatron-Bridge overrides: a Hydra dotlist for Bridge's run scripts, an override YAML, and a
Python recipe function (the one form that can carry a userbuffer config object).

Every field comes from the mapping table (``planner.bridge.table``) applied to the plan's Megatron-LM
flags (``planner.megatron.export``), so export and import read one table. Each value is written where it
survives Bridge's ``runtime_config_update``: precision fields on ``mixed_precision`` (the preset is copied
onto model/optimizer/ddp), overlap fields on ``comm_overlap`` (its setup overwrites the DDP and model
ones), and every field the plan decides, so nothing of the base recipe (its VPP, CP, recomputation)
leaks into the run.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.api import PlanRequest
from planner.bridge import recipes
from planner.bridge.table import MODEL_ROWS, MODEL_TAG_ROWS, PRESETS, ROWS, TAGS
from planner.bridge.values import to_bridge
from planner.errors import PlannerError
from planner.megatron.export import (
    DPA_FP8_RECIPE,
    contradiction_notes,
    cuda_device_max_connections,
    megatron_argv,
    model_flags,
    model_notes,
    nvfp4_fp8_attention,
    train_iterations,
)
from planner.megatron.flags import flag_table, parse_megatron_argv
from planner.plan import plan_label
from planner.presets import load_model

MOE_DESTS = {
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "moe_token_dispatcher_type",
    "moe_grouped_gemm",
    "moe_flex_dispatcher_backend",
    "overlap_moe_expert_parallel_comm",
    "moe_shared_expert_overlap",
    "use_transformer_engine_op_fuser",
    "moe_router_padding_for_quantization",
    "moe_permute_fusion",
    "moe_expert_capacity_factor",
}
TARGETS = {
    "comm_overlap": "megatron.bridge.training.comm_overlap.CommOverlapConfig",
    "mixed_precision": "megatron.bridge.training.mixed_precision.MixedPrecisionConfig",
}
OBJECT_KINDS = {"comm_overlap": "CommOverlapConfig", "mixed_precision": "MixedPrecisionConfig"}
# The dataclass defaults of the two sections an export may write whole (every field but CommOverlapConfig's
# tp_comm_overlap, which has none and the plan always writes): Megatron-Bridge training/mixed_precision.py
# MixedPrecisionConfig and training/comm_overlap.py CommOverlapConfig, the same at v0.2.1 (1c43b3928) and v0.6.0
# (51885cf13) but v0.2.1 has no fp4_param, fp4_param_gather (``class_defaults`` keeps the tag's own fields).
SECTION_DEFAULTS: dict[str, dict[str, object]] = {
    "mixed_precision": {
        "fp32": False,
        "fp16": False,
        "bf16": False,
        "params_dtype": None,
        "pipeline_dtype": None,
        "autocast_dtype": None,
        "autocast_enabled": False,
        "grad_reduce_in_fp32": True,
        "fp8": None,
        "fp8_recipe": "tensorwise",
        "first_last_layers_bf16": False,
        "fp8_margin": 0,
        "fp8_amax_history_len": 1,
        "fp8_amax_compute_algo": "most_recent",
        "fp8_wgrad": True,
        "fp8_dot_product_attention": False,
        "fp8_multi_head_attention": False,
        "fp8_param": None,
        "fp8_param_gather": False,
        "fp4": None,
        "fp4_recipe": "nvfp4",
        "fp4_param": None,
        "fp4_param_gather": False,
        "loss_scale": None,
        "initial_loss_scale": 4294967296,
        "min_loss_scale": 1.0,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "num_layers_at_start_in_bf16": 0,
        "num_layers_at_end_in_bf16": 0,
        "reuse_grad_buf_for_mxfp8_param_ag": False,
    },
    "comm_overlap": {
        "tp_comm_overlap_cfg": None,
        "tp_comm_bootstrap_backend": "nccl",
        "overlap_p2p_comm": None,
        "batch_p2p_comm": None,
        "overlap_grad_reduce": None,
        "overlap_param_gather": None,
        "overlap_param_gather_with_optimizer_step": None,
        "align_param_gather": None,
        "bucket_size": None,
        "defer_embedding_wgrad_compute": None,
        "wgrad_deferral_limit": None,
        "data_parallel_size": None,
        "overlap_moe_expert_parallel_comm": None,
        "delay_wgrad_compute": None,
    },
}
PARAMS_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


@dataclass(frozen=True)
class BridgeExport:
    """What an export writes: the fields in order, the base recipe, and what the user should know."""

    tag: str
    recipe: str
    module: str
    fields: dict[str, object]
    notes: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    header: tuple[str, ...] = field(default_factory=tuple)
    whole: tuple[str, ...] = ()  # sections the base recipe lacks as objects: written whole, with a _target_
    userbuffer: str | None = None
    preset: str | None = None  # Bridge's precision preset the fields equal
    ub_object: dict | None = None  # the priced preset written whole, where the base recipe holds another config


def check_tag(tag: str) -> str:
    if tag not in TAGS:
        raise PlannerError(f"--bridge-version {tag}: allowed {', '.join(TAGS)}")
    return tag


def plan_values(req: PlanRequest) -> dict:
    """The plan's Megatron-LM destinations, as Megatron-LM's parser types them."""
    return parse_megatron_argv(megatron_argv(req)).values


def model_overrides(req: PlanRequest, preset: str, tag: str) -> dict:
    """Architecture fields where the plan's model differs from the base recipe's (by their flags); a difference no
    provider field at ``tag`` carries is refused, naming the flag and why."""
    mine = parse_megatron_argv([str(x) for x in model_flags(req)]).values
    if req.ctx.model.name == preset:
        return {}
    base_req = PlanRequest(req.ctx.__class__(load_model(preset), *_rest(req)), req.plan, req.gpus)
    theirs = parse_megatron_argv([str(x) for x in model_flags(base_req)]).values
    tagged = {row.dest: row for row in MODEL_TAG_ROWS}
    out, missing, why = {}, [], []
    for dest in sorted(set(mine) | set(theirs)):
        if dest == "seq_length" or mine.get(dest) == theirs.get(dest):
            continue
        flag = "--" + dest.replace("_", "-")
        row = tagged.get(dest)
        path = row.path(tag, req.ctx.model.multi_latent_attention) if row else MODEL_ROWS.get(flag)
        if path is not None:
            out[path] = mine.get(dest, _megatron_default(row)) if row else mine.get(dest)
        else:
            missing.append(row.flag if row else flag)
            why += [row.why] if row and row.why and row.why not in why else []
    if missing:
        raise PlannerError(
            f"the plan's model differs from {preset} (the base recipe's) in {', '.join(missing)}, which a Bridge "
            f"{tag} override cannot set{''.join(f'; {w}' for w in why)}; allowed: a base recipe of the same model "
            "(--bridge-recipe)"
        )
    return out


def _megatron_default(row) -> object:
    """Megatron-LM's value of a model setting the plan's flags leave out, which the base recipe's model sets: a
    switch's other value, else the parser's default (arguments.py @ d98e8a64)."""
    if row.on is not None:
        return not row.on
    return flag_table()[row.flag].default


def _rest(req: PlanRequest):
    c = req.ctx
    return c.hardware, c.training, c.options


LAYOUT_VPP = (  # why a plan with a layout writes virtual_pipeline_model_parallel_size too
    "CommOverlapConfig asserts the size is set when EP A2A overlap is on and PP > 1 (comm_overlap.py:494 @ v0.6.0, "
    ":485 @ v0.2.1) in runtime_config_update, before Megatron-Core's TransformerConfig derives it from the layout; "
    "Megatron-Core asserts a given size equals the layout's (transformer_config.py @ d98e8a64, core_v0.15.2)"
)


def bridge_export(
    req: PlanRequest, tag: str, recipe: str | None = None, hardware_ref: str | None = None
) -> BridgeExport:
    """The Bridge fields for one plan at one tag, over a base recipe (default: the model's). ``hardware_ref``:
    the --hardware given; a YAML file is named in the ``megaplan-import`` line by its absolute path (its
    ``name:`` is no preset, and a relative path reads back only from the folder exported in)."""
    tag = check_tag(tag)
    gpu, named = recipes.bridge_gpu(req.ctx.hardware), recipe is not None
    name, module, preset = recipes.resolve(tag, recipe, req.ctx.model.name, gpu)
    values = plan_values(req)
    p, o = req.plan, req.ctx.options
    ctx = {"vpp": p.vpp, "flex": p.moe_token_dispatcher.value == "flex" and req.ctx.model.is_moe}
    fields: dict[str, object] = dict(model_overrides(req, preset, tag))
    for row in ROWS:
        if (row.dest in MOE_DESTS and not req.ctx.model.is_moe) or (row.dest == "ckpt_format" and not p.fsdp):
            continue  # MoE fields for a dense model; the checkpoint format only where FSDP needs its own
        default = True if row.kind == "off" else row.default
        value = values.get(row.dest, default)
        if row.convert == "vpp" and p.pipeline_layout:  # Megatron-LM's flags leave the size to the layout
            value = p.vpp  # Bridge's EP A2A overlap check reads it before Megatron-Core derives it (LAYOUT_VPP)
        fields.update(to_bridge(row, value, tag, ctx))
    _flex_backend_rule(req, tag, gpu, ctx["flex"])
    _flex_sms(req, tag, ctx["flex"], fields)
    notes = _graph_rules(req, tag, fields) + _run_length(req, recipes.defaults(tag, name), fields)
    notes += [f"not in any Bridge field either: {note}" for note in model_notes(req)]  # ModelSpec.not_in_megatron
    notes += _low_precision_fields(o, fields) + _fp4_fields(o, tag, fields)
    base = recipes.defaults(tag, name)
    kinds = base.get("_kinds", {})
    whole = tuple(k for k, cls in OBJECT_KINDS.items() if kinds.get(k) != cls)
    if "mixed_precision" in whole:  # a preset name or none: the object is written whole, with its dtypes
        dtype = PARAMS_DTYPE[req.ctx.precision]
        fields |= {"mixed_precision.params_dtype": dtype, "mixed_precision.pipeline_dtype": dtype}
    has_co = "comm_overlap" not in whole
    ub = priced_userbuffers(req) if o.tp_comm_overlap else None
    said, ub_object = _overlap_notes(req, tag, has_co, ub, base, fields)
    notes += said
    fmt, recipe = (o.fp4.value, o.fp4_recipe.value) if o.fp4 else (o.fp8.value if o.fp8 else None, _recipe(o))
    preset_name = PRESETS.get((req.ctx.precision, fmt, recipe))
    label = plan_label(p.model_dump(mode="json"), moe=req.ctx.model.is_moe)
    header = (
        f"megaplan: {label}",
        f"{req.ctx.model.name} on {req.gpus} GPUs of {req.ctx.hardware.name}; Megatron-Bridge {tag}, "
        f"base recipe {name}",
        f"precision as Bridge's {preset_name or 'custom'} preset, field by field (it survives runtime_config_update)",
        f"megaplan-import: --bridge-version {tag} --bridge-recipe {name} --gpus {req.gpus} "
        f"--hardware {shlex.quote(_hardware_word(req, hardware_ref))}",
    )
    if said := recipes.base_note(tag, name, req.ctx.model.name, gpu, named):
        said = tuple(textwrap.wrap(said, 110, subsequent_indent="  ", break_on_hyphens=False))
        header = (*header[:2], *said, *header[2:])
    for line in contradiction_notes(req):  # what NVIDIA measured against the plan's features on its GPU
        caution = tuple(textwrap.wrap(f"CAUTION: {line}", 110, subsequent_indent="  ", break_on_hyphens=False))
        header = (*header[:2], *caution, *header[2:])
    env = tuple(_env(req))
    if env:
        header += (f"megaplan-env: {' '.join(env)}",)
    return BridgeExport(tag, name, module, fields, tuple(notes), env, header, whole, ub, preset_name, ub_object)


def _flex_backend_rule(req: PlanRequest, tag: str, gpu: str | None, flex: bool) -> None:
    """Bridge's ``validate_flex_dispatcher_backend`` (training/flex_dispatcher_backend.py, v0.2.1 to 067f987, run by
    ``ConfigContainer.validate``): DeepEP on Ampere, Hopper, B200 and B300 only; on a GPU named "NVIDIA GB200" or
    "NVIDIA GB300" it raises, so the export refuses to write it (``planner.space.flex_backend``)."""
    from planner.space.flex_backend import BRIDGE_REFUSES_DEEPEP, REASON

    if flex and gpu in BRIDGE_REFUSES_DEEPEP and req.ctx.options.moe_flex_dispatcher_backend.value == "deepep":
        raise PlannerError(
            f"--moe-flex-dispatcher-backend deepep on {req.ctx.hardware.name}: Megatron-Bridge {tag}'s validate() "
            f'refuses it ("DeepEP is supported for Ampere, Hopper, and Blackwell (B200/B300) GPUs"); {REASON}; '
            "allowed: --moe-flex-dispatcher-backend hybridep, or --moe-token-dispatcher alltoall"
        )


def _flex_sms(req: PlanRequest, tag: str, flex: bool, fields: dict) -> None:
    """The flex dispatcher's SMs the estimate prices (--moe-flex-dispatcher-num-sms, else its backend's default:
    ``moe.COMM_SMS``), written where the tag's model has the field: a base recipe's moe_hybridep_num_sms or
    moe_deepep_num_sms (the GB200 library recipe sets HybridEP 32: recipes/qwen/gb200/qwen3_moe.py @ v0.6.0) is
    routed into moe_flex_dispatcher_num_sms unless that is set (transformer_config.py:1792-1797 @ d98e8a64)."""
    if not flex or "moe_flex_dispatcher_num_sms" not in recipes.section_fields(tag).get("model", ()):
        return
    from planner.costs.moe import COMM_SMS

    o = req.ctx.options
    fields["model.moe_flex_dispatcher_num_sms"] = (
        o.moe_flex_dispatcher_num_sms or COMM_SMS[o.moe_flex_dispatcher_backend.value]
    )
    # HybridEP's scan blocks, written for every HybridEP plan: a base recipe's 32 (the GB200 library recipe,
    # GPU_RECIPE_KEEPS) would otherwise run where the plan priced its own
    if o.moe_flex_dispatcher_backend.value == "hybridep" and "moe_hybridep_num_sms_preprocessing" in (
        recipes.section_fields(tag).get("model", ())
    ):
        fields["model.moe_hybridep_num_sms_preprocessing"] = o.moe_hybridep_num_sms_preprocessing


def _hardware_word(req: PlanRequest, hardware_ref: str | None) -> str:
    """The hardware an export's ``megaplan-import`` line names: the file given, by its absolute path, else the
    preset's name."""
    from planner.presets import command_ref, is_file_ref

    return command_ref(hardware_ref) if hardware_ref and is_file_ref(hardware_ref) else req.ctx.hardware.name


def _low_precision_fields(o, fields: dict) -> list[str]:
    """The FP8 options no row of the table writes, set in ``fields``, with a note each: MXFP8's gathered-parameter
    buffer reuse, FP8 attention, the BF16 end layers (MixedPrecisionConfig copies them onto the model: its
    defaults are 0 and 0, TransformerConfig's 1 and 1) and the MXFP8 output layer (a model field)."""
    notes = []
    if o.fp8 is not None and o.fp8_recipe.value == "mxfp8" and o.fp8_param_gather:
        fields["mixed_precision.reuse_grad_buf_for_mxfp8_param_ag"] = True
        notes.append("MXFP8 with fp8_param_gather: reuse_grad_buf_for_mxfp8_param_ag=true (Bridge's MXFP8 preset)")
    if (o.fp8 is not None or o.fp4 is not None) and o.fp8_dot_product_attention:  # no Megatron-LM flag for it
        fields["mixed_precision.fp8_dot_product_attention"] = True
        notes.append("attention in FP8: mixed_precision.fp8_dot_product_attention=true (no Megatron-LM flag for it)")
    if any(o.bf16_end_layers):
        start, end = o.bf16_end_layers
        fields |= {
            "mixed_precision.first_last_layers_bf16": True,
            "mixed_precision.num_layers_at_start_in_bf16": start,
            "mixed_precision.num_layers_at_end_in_bf16": end,
        }
    if o.fp8_output_proj:
        fields["model.fp8_output_proj"] = True
    return notes


def _fp4_fields(o, tag: str, fields: dict) -> list[str]:
    """NVFP4 as MixedPrecisionConfig fields (fp4, fp4_recipe at v0.2.1 and v0.6.0; fp4_param_gather, which Bridge keeps
    in step with fp4_param, at v0.6.0 only: mixed_precision.py), no FP8."""
    if o.fp4 is None:
        return []
    if o.fp4_param_gather and tag == "v0.2.1":
        raise PlannerError(
            "--fp4-param-gather: Megatron-Bridge v0.2.1's MixedPrecisionConfig has no fp4_param_gather; allowed: "
            "--bridge-version v0.6.0, or drop it"
        )
    fields |= {"mixed_precision.fp4": o.fp4.value, "mixed_precision.fp4_recipe": o.fp4_recipe.value}
    if tag != "v0.2.1":
        gather = o.fp4_param_gather
        fields |= {"mixed_precision.fp4_param_gather": gather, "mixed_precision.fp4_param": gather}
    return []


def _run_length(req: PlanRequest, base: dict, fields: dict) -> list[str]:
    """train.train_iters for the plan's tokens, rounded up to whole iterations, as the Slurm script's TRAIN_ITERS
    (planner.megatron.export.slurm_script): the run the estimate's days count, read back by an import; the base
    recipe's train_samples or num_epochs nulled where set (Bridge takes one of the three: TrainingConfig.finalize)."""
    from planner.report.layout import tokens_text

    tr = req.ctx.training
    iters = train_iterations(tr)
    fields["train.train_iters"] = iters
    for key in ("train.train_samples", "train.num_epochs"):
        if base.get(key) is not None:
            fields[key] = None
    return [
        f"train.train_iters={iters:,}: the plan's {tokens_text(tr.train_tokens)} tokens (--tokens) / "
        f"({tr.global_batch} × {tr.seq_len}) per iteration, rounded up"
    ]


def _graph_rules(req: PlanRequest, tag: str, fields: dict) -> list[str]:
    """CUDA graphs as each tag takes them: v0.6.0 runs cuda_graph_impl local only as a full-iteration graph
    (Bridge utils/cuda_graph.py validate_cuda_graph_configuration); core_v0.15.2 (v0.2.1) spells the full
    iteration as impl local with scope full_iteration, and allows recomputation with graphs only as
    selective recomputation, TE graphs of attn, no core_attn/mla_up_proj recomputed (TransformerConfig
    __post_init__)."""
    o, p = req.ctx.options, req.plan
    impl = o.cuda_graph_impl.value
    if impl == "none":
        return []
    if tag == "v0.6.0" and impl == "local":
        raise PlannerError(
            "--cuda-graph-impl local: Megatron-Bridge v0.6.0 runs the local implementation only as a full-iteration "
            "graph; allowed: transformer_engine, full_iteration"
        )
    if tag == "v0.6.0" and impl == "full_iteration":  # ConfigContainer.validate() asserts it
        fields["rerun_state_machine.check_for_nan_in_loss"] = False
        return [
            "full-iteration CUDA graph: rerun_state_machine.check_for_nan_in_loss=false (Bridge v0.6.0 requires it)"
        ]
    if tag != "v0.2.1":
        return []
    if impl == "full_iteration":
        fields |= {"model.cuda_graph_impl": "local", "model.cuda_graph_scope": "full_iteration"}
    if p.recompute.value != "none":
        modules = {m.value for m in o.recompute_modules} if p.recompute.value == "selective" else set()
        attn_only = impl == "transformer_engine" and tuple(m.value for m in o.cuda_graph_modules) == ("attn",)
        if p.recompute.value != "selective" or not attn_only or modules & {"core_attn", "mla_up_proj"}:
            raise PlannerError(
                "CUDA graphs with recomputation: Megatron-Bridge v0.2.1 (Megatron-Core core_v0.15.2) takes them only "
                "as transformer_engine graphs of attn with selective recomputation of neither core_attn nor "
                "mla_up_proj; allowed: no recomputation, those, or --bridge-version v0.6.0"
            )
    return []


def _recipe(o) -> str | None:
    return o.fp8_recipe.value if o.fp8 is not None else None


def _overlap_notes(
    req: PlanRequest, tag: str, has_co: bool, ub: str | None, base: dict, fields: dict
) -> tuple[list[str], dict | None]:
    """Which userbuffer config each form of the export runs: the one the estimate priced (``ub``: a Bridge preset;
    else the user's file or Transformer Engine's defaults), and the notes saying so. The Python recipe sets ``ub``.
    An override builds a preset as ``{_target_: comm_overlap.<preset>, _call_: false}``, which Bridge's
    apply_overrides instantiates (omegaconf_utils.py ``_apply_overrides``, v0.2.1 and v0.6.0); over a base recipe
    that holds another config the dotlist nulls it first (Hydra merges a dict into a dict node), the YAML writes the
    preset's every field (``ub_object``, returned; OmegaConf.merge keeps the base's other keys), and where it
    priced TE's defaults both null the base's (CommOverlapConfig.setup then runs TE's defaults)."""
    from planner.bridge.runtime import UB_FIELD, UB_MODULE, userbuffer_preset
    from planner.hardware.userbuffers import TE_DEFAULT, option_value

    notes = []
    p, o = req.plan, req.ctx.options
    if o.tp_comm_overlap and (p.tp < 2 or not p.sequence_parallel):
        notes.append("Bridge turns TP overlap off without a word when TP < 2 or sequence parallelism is off")
    if not o.tp_comm_overlap:
        return notes, None
    file = option_value(o.tp_comm_overlap_cfg) if ub is None and o.tp_comm_overlap_cfg is not None else None
    if file not in (None, BRIDGE_UB):
        notes.append(f"the userbuffer file {file} has no Bridge field: every form runs Transformer Engine's defaults")
    base_ub = userbuffer_preset(base)[0] if has_co else None
    base_cfg = next((v for k, v in base.items() if k == UB_FIELD and v is not None), None) if has_co else None
    base_set = has_co and any(k == UB_FIELD or k.startswith(UB_FIELD + ".") for k, v in base.items() if v is not None)
    if ub and base_ub == ub:
        notes.append(f"userbuffers: the estimate priced Bridge's {ub}, the base recipe's, which every form runs")
        return notes, None
    if ub:
        fields[UB_FIELD] = {"_target_": f"{UB_MODULE}.{ub}", "_call_": False}
        over = f" over the base recipe's {base_ub or 'config'}" if base_set else ""
        notes.append(f"userbuffers: the estimate priced Bridge's {ub}, which every form builds{over}")
        notes += _class_change_note(tag, ub, base_cfg) if base_set else []
        return notes, ub_object(ub) if base_set else None
    if base_set:
        fields[UB_FIELD] = None
    nulled = f" ({UB_FIELD}=null over the base recipe's {base_ub or 'config'})" if base_set else ""
    notes.append(f"userbuffers: the estimate priced {TE_DEFAULT}, which every form runs{nulled}")
    return notes + _fitting_preset(req), None


def _fitting_preset(req: PlanRequest) -> list[str]:
    from planner.hardware.userbuffers import UbConfig

    fits = priced_userbuffers(req, UbConfig(name=BRIDGE_UB))
    if fits and req.ctx.options.tp_comm_overlap_cfg is None:
        return [f"Bridge's {fits} fits this plan: --tp-comm-overlap-cfg bridge prices it"]
    return []


BRIDGE_UB = "bridge"  # planner.hardware.userbuffers.BRIDGE
UB_OPS = (  # TransformerLayerTPOverlapCfg's fields in its order (comm_overlap.py, the same at v0.2.1 and v0.6.0)
    "qkv_dgrad",
    "qkv_wgrad",
    "fc1_dgrad",
    "fc1_wgrad",
    "qkv_fprop",
    "proj_dgrad",
    "fc1_fprop",
    "fc2_dgrad",
    "proj_fprop",
    "fc2_fprop",
)
UB_CLASSES = {"bulk": "BulkOverlapCfg", "pipeline": "PipelineOverlapCfg", "ring_exchange": "RingExchangeOverlapCfg"}
# each class's fields with their defaults (comm_overlap.py @ v0.2.1 = v0.6.0); cga_size 2 where the class requires it:
# every non-LoRA preset gives 2 to its bulk and pipeline overlaps. PipelineOverlapCfg's fp8_buf default is the tuple
# (False,), which Bridge's own OmegaConf round trip of a recipe turns into [False]
UB_FIELDS = {
    "bulk": {"num_sm": None, "cga_size": 2, "set_sm_margin": None, "method": "bulk"},
    "pipeline": {
        "num_sm": None,
        "cga_size": 2,
        "num_splits": None,
        "set_sm_margin": None,
        "fp8_buf": [False],
        "atomic_gemm": False,
        "method": "pipeline",
    },
    "ring_exchange": {
        "aggregate": False,
        "method": "ring_exchange",
        "num_sm": 1,
        "cga_size": 1,
        "set_sm_margin": False,
        "fp8_buf": False,
        "atomic_gemm": False,
    },
}


def ub_object(name: str) -> dict:
    """Bridge's preset ``name`` as an override YAML writes it whole: ``_target_`` TransformerLayerTPOverlapCfg, each
    GEMM's overlap with the ``_target_`` of its class and every field of that class (presets/userbuffers/bridge.yaml
    over the class's defaults), so no key of the base recipe's config survives OmegaConf.merge."""
    from planner.bridge.runtime import UB_MODULE
    from planner.hardware.userbuffers import bridge_preset_named

    preset = bridge_preset_named(name)
    out: dict = {"_target_": f"{UB_MODULE}.TransformerLayerTPOverlapCfg"}
    for op in UB_OPS:
        given = preset.ops[op].model_dump(exclude_none=True)
        fields = UB_FIELDS[given["method"]]
        values = {k: given.get(k, list(v) if isinstance(v, list) else v) for k, v in fields.items()}  # no anchors
        out[op] = {"_target_": f"{UB_MODULE}.{UB_CLASSES[given['method']]}", **values}
    return out


def _class_change_note(tag: str, ub: str, base_cfg) -> list[str]:
    """Where the priced preset runs a GEMM's overlap with another class than the base recipe's config, the YAML's
    merge keeps the base's keys the class does not take (PipelineOverlapCfg's num_splits in a RingExchangeOverlapCfg):
    v0.6.0's instantiate drops them with a warning ("Dropping unexpected config keys"), v0.2.1's leaves that GEMM
    None ("Using None instead in lenient mode": TE's defaults for it). Checked with Bridge's own code."""
    import re

    from planner.hardware.userbuffers import bridge_preset_named

    theirs = dict(re.findall(r"(\w+)=(\w+OverlapCfg)\(", str(base_cfg or "")))
    mine = {op: UB_CLASSES[cfg.method] for op, cfg in bridge_preset_named(ub).ops.items() if op in UB_OPS}
    changed = [op for op in UB_OPS if op in theirs and theirs[op] != mine[op]]
    if not changed or tag != "v0.2.1":
        return []
    return [
        f"the YAML at v0.2.1 runs Transformer Engine's defaults for {', '.join(changed)} (its merge keeps the base "
        "recipe's keys of another overlap class, and Bridge v0.2.1 then drops the GEMM's config): use the dotlist "
        "or --format bridge-python"
    ]


def priced_userbuffers(req: PlanRequest, cfg=None) -> str | None:
    """The Bridge preset the estimate prices for this plan (its name; userbuffers.plan_configs, the one rule of
    which preset a shape takes), None for Transformer Engine's defaults or a user's file. ``cfg``: another
    --tp-comm-overlap-cfg than the plan's."""
    from planner.hardware import userbuffers

    ctx, p = req.ctx, req.plan
    configs, index = userbuffers.plan_configs(
        ctx.options.tp_comm_overlap_cfg if cfg is None else cfg,
        ctx.hardware.gpu.compute_capability,
        ctx.options.fp8 is not None,
        ctx.model.hidden_size,
        ctx.training.seq_len,
        np.array([p.tp]),
        np.array([p.micro_batch]),
    )
    chosen = configs[int(index[0])]
    if chosen is None or not chosen.name.startswith(userbuffers.BRIDGE_PREFIX):
        return None
    return chosen.name.removeprefix(userbuffers.BRIDGE_PREFIX)


def _env(req: PlanRequest) -> list[str]:
    env = []
    connections = cuda_device_max_connections(req)
    if connections is not None and connections[0] is not None:
        env.append(f"CUDA_DEVICE_MAX_CONNECTIONS={connections[0]}")
    if req.ctx.options.expandable_segments:
        env.append("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    if nvfp4_fp8_attention(req):
        env.append(DPA_FP8_RECIPE)
    return env


def _hydra(value) -> str:
    """A value as a Hydra override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if isinstance(value, dict):  # {_target_: comm_overlap.<preset>, _call_: false}
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if any(c in text for c in "|()*[]{},=' ") and not text.startswith("torch."):
        return "'" + text.replace("'", "\\'") + "'"
    return text


def _split(exp: BridgeExport) -> tuple[dict, dict]:
    """The fields set one by one, and the sections written whole ({section: {field: value}})."""
    single, whole = {}, {}
    for path, value in exp.fields.items():
        section, _, rest = path.partition(".")
        if section in exp.whole:
            whole.setdefault(section, {})[rest] = value
        else:
            single[path] = value
    return single, whole


def _hydra_dict(section: str, values: dict) -> str:
    body = {"_target_": TARGETS[section], **values}
    parts = []
    for k, v in body.items():
        dtype = isinstance(v, str) and v.startswith("torch.")
        parts.append(f"{k}:{{_target_:{v},_call_:false}}" if dtype else f"{k}:{_hydra(v)}")
    return "{" + ",".join(parts) + "}"


def dotlist(exp: BridgeExport) -> list[str]:
    """One Hydra override per field; a section the base recipe does not hold as an object is written whole."""
    from planner.bridge.runtime import UB_FIELD

    single, whole = _split(exp)
    lines = []
    for path, value in single.items():
        if path == UB_FIELD and exp.ub_object is not None:  # the base's config nulled first: Hydra merges dicts
            lines.append(f"{path}=null")
        lines.append(f"{path}={_hydra(value)}")
    kinds = recipes.defaults(exp.tag, exp.recipe).get("_kinds", {})
    for section, values in whole.items():
        if _may_hold_object(kinds.get(section)):  # Hydra merges a dict into an object's node: null it first
            lines.append(f"{section}=null")
        lines.append(f"{section}={_hydra_dict(section, values)}")
    return lines


def _may_hold_object(kind: str | None) -> bool:
    """Whether the base recipe may hold ``section`` as an object (its kind not dumped, or a class name). Hydra then
    refuses ``section={_target_:...}`` ("Could not override 'mixed_precision'": create_omegaconf_dict_config makes
    the object a structured node without a ``_target_`` key; Bridge v0.6.0 recipes/qwen/gb200/qwen3_moe.py holds
    both as objects), while ``section=null`` then the dict replaces it, as the userbuffer config is written."""
    return kind is None or not (kind == "null" or kind.startswith("str:"))


def dotlist_text(exp: BridgeExport) -> str:
    head = "".join(f"# {h}\n" for h in exp.header)
    return head + "".join(line + "\n" for line in dotlist(exp))


def nested(exp: BridgeExport) -> dict:
    from planner.bridge.runtime import UB_FIELD

    single, whole = _split(exp)
    if UB_FIELD in single and exp.ub_object is not None:  # OmegaConf.merge keeps the base's keys: every field
        single[UB_FIELD] = exp.ub_object
    out: dict = {}
    for path, value in single.items():
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    kinds = recipes.defaults(exp.tag, exp.recipe).get("_kinds", {})
    for section, values in whole.items():
        obj = {"_target_": TARGETS[section]}
        if _may_hold_object(kinds.get(section)):  # OmegaConf merges the mapping into the base's object: its own
            values = values | {k: v for k, v in class_defaults(exp.tag, section).items() if k not in values}
        for k, v in values.items():
            dtype = isinstance(v, str) and v.startswith("torch.")
            obj[k] = {"_target_": v, "_call_": False} if dtype else v
        out[section] = obj
    return out


def class_defaults(tag: str, section: str) -> dict[str, object]:
    """The section class's defaults (``SECTION_DEFAULTS``) for the fields it has at ``tag``. The YAML form writes
    them for the fields the plan leaves, where the section is written whole over a base that may hold it as an
    object: Bridge's YAML overrides are merged (OmegaConf.merge) into the base's object, which keeps every field
    the YAML leaves out (the GB200 library recipe's bf16_with_mxfp8_mixed() kept reuse_grad_buf_for_mxfp8_param_ag
    true over the plan's fp8_param_gather false: "Reuse grad buffer only when keeping params in MXFP8"), and a YAML
    cannot null a section first as the dotlist does; so each is written, as the dotlist's fresh object holds it."""
    fields = recipes.section_fields(tag).get(section)
    return {k: v for k, v in SECTION_DEFAULTS[section].items() if fields is None or k in fields}


def yaml_text(exp: BridgeExport) -> str:
    import yaml

    head = "".join(f"# {h}\n" for h in exp.header)
    return head + yaml.safe_dump(nested(exp), sort_keys=False, default_flow_style=None)


def python_text(exp: BridgeExport) -> str:
    """A recipe function: the base recipe, every field set, the precision preset, and comm_overlap with the
    userbuffer config the estimate assumes."""
    lines = [f"# {h}" for h in exp.header]
    lines += [
        "import torch  # noqa: F401  (torch.* dtypes below)",
        "",
        f"from {exp.module} import {exp.recipe} as base_recipe",
        "from megatron.bridge.training.comm_overlap import CommOverlapConfig",
    ]
    if exp.userbuffer:
        lines.append(f"from megatron.bridge.training.comm_overlap import {exp.userbuffer}")
    lines.append(
        "from megatron.bridge.training.mixed_precision import MixedPrecisionConfig, get_mixed_precision_config"
    )
    lines.append("from megatron.core.transformer.enums import AttnBackend")
    lines += ["", "", "def megaplan_recipe():", "    cfg = base_recipe()"]
    preset = f'get_mixed_precision_config("{exp.preset}")' if exp.preset else "MixedPrecisionConfig()"
    lines.append(f"    cfg.mixed_precision = {preset}")
    co = {}
    for path, value in exp.fields.items():
        if path.startswith("comm_overlap."):
            if not isinstance(value, dict):  # the preset the overrides build: imported and set below
                co[path.split(".", 1)[1]] = value
            continue
        text = f"AttnBackend.{value}" if path == "model.attention_backend" else _py(value)
        lines.append(f"    cfg.{path} = {text}")
    if co:
        args = ", ".join(f"{k}={_py(v)}" for k, v in co.items())
        ub = f", tp_comm_overlap_cfg={exp.userbuffer}" if exp.userbuffer else ""
        lines.append(f"    cfg.comm_overlap = CommOverlapConfig({args}{ub})")
    lines += ["    return cfg", ""]
    return "\n".join(lines)


def _py(value) -> str:
    if isinstance(value, str) and value.startswith("torch."):
        return value
    return json.dumps(value) if not isinstance(value, bool | type(None)) else repr(value)


def launch_line(exp: BridgeExport, req: PlanRequest, overrides_file: str = "megaplan.overrides") -> str:
    """The user's launch line for the dotlist (torchrun on every node): v0.6.0's scripts/training/run_recipe.py
    takes the recipe by name and trailing KEY=VALUE overrides; at v0.2.1 a pretraining script built like
    examples/recipes/llama/pretrain_llama3_8b.py takes the same overrides after its recipe."""
    gpn = req.ctx.hardware.gpus_per_node
    nodes, per_node = -(-req.gpus // gpn), min(gpn, req.gpus)
    env = " ".join(exp.env)
    run = (
        f"scripts/training/run_recipe.py --recipe {exp.recipe}"
        if exp.tag != "v0.2.1"
        else f"<a pretrain script calling {exp.recipe}, as examples/recipes/llama/pretrain_llama3_8b.py>"
    )
    return (
        f"{env + ' ' if env else ''}torchrun --nnodes {nodes} --nproc-per-node {per_node} {run} "
        f"$(grep -v '^#' {overrides_file})"
    )


def export_text(
    req: PlanRequest,
    fmt: str,
    tag: str | None,
    recipe: str | None,
    output: str | None = None,
    hardware_ref: str | None = None,
) -> tuple[str, list[str]]:
    """The text ``export --format`` writes for the Bridge, NeMo 2 and MODEL_ARGS formats, and its notes; the
    launch line reads ``output`` by its absolute path."""
    if fmt == "mlm-yaml":
        from planner.bridge.formats import mlm_yaml

        return mlm_yaml(req), [f"not in any Megatron-LM flag: {note}" for note in model_notes(req)]
    if fmt == "nemo2":
        from planner.bridge.formats import nemo2_text

        text, notes = nemo2_text(req)
        return text, notes + [f"not in any NeMo 2 field either: {note}" for note in model_notes(req)]
    exp = bridge_export(req, tag or TAGS[-1], recipe, hardware_ref)
    render = {"bridge": dotlist_text, "bridge-yaml": yaml_text, "bridge-python": python_text}[fmt]
    written = shlex.quote(str(Path(output).resolve())) if output else "megaplan.overrides"
    notes = [*exp.notes, "launch: " + launch_line(exp, req, written)]
    return render(exp), notes
