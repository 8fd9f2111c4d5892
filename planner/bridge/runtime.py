"""Bridge's runtime rules, applied to flat {path: value} fields before an import prices them.

Bridge's ``runtime_config_update`` (training/config.py, v0.2.1 through v0.6.0) runs before training:
1. ``mixed_precision`` (a preset name or its fields) is copied onto every same-named field of ``model``,
   ``optimizer`` and ``ddp`` (mixed_precision.py ``update_config_with_precision_overrides``), so a precision
   field written on ``model`` alone is lost;
2. with a ``comm_overlap``, ``CommOverlapConfig.setup`` (comm_overlap.py) sets ``model.tp_comm_overlap`` from
   it, and turns it off (a log line, no error) when TP < 2 or sequence parallelism is off; sets
   ``overlap_p2p_comm`` on for an interleaved pipeline, off otherwise; ``overlap_moe_expert_parallel_comm``
   off unless given; and, with the distributed optimizer, the DDP overlaps on when data-parallel size > 1;
   each unless the comm_overlap field itself is given.

What Bridge then runs that Megatron-LM's flags cannot say is brought to the nearest plan they can
(``megatron_lm_expressible``), with a warning.
"""

from __future__ import annotations

# the fields of Bridge's precision presets that the estimate reads (mixed_precision.py, v0.2.1 = v0.6.0 for these)
# MixedPrecisionConfig's own defaults of the BF16 end layers (0 and 0, where TransformerConfig's are 1 and 1), which
# every preset copies onto the model; the current-scaling preset keeps one BF16 layer at each end
_ENDS = {"first_last_layers_bf16": False, "num_layers_at_start_in_bf16": 0, "num_layers_at_end_in_bf16": 0}
_BF16 = {"bf16": True, "fp16": False, "grad_reduce_in_fp32": True, "fp8": None, "fp8_param_gather": False} | _ENDS
_FP16 = {"bf16": False, "fp16": True, "grad_reduce_in_fp32": False, "fp8": None, "fp8_param_gather": False} | _ENDS
_CS = {"fp8": "hybrid", "fp8_recipe": "tensorwise", "fp8_param_gather": True, "first_last_layers_bf16": True}
_CS |= {"num_layers_at_start_in_bf16": 1, "num_layers_at_end_in_bf16": 1}
_DS = {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_param_gather": True}
_MX = {"fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True, "reuse_grad_buf_for_mxfp8_param_ag": True}
_SC = {"fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": False}
# bf16_with_nvfp4_mixed: fp4_param_gather True from v0.4.2 (v0.3.0-v0.4.0 left it at False), kept in step with fp4_param
_NV = {"fp8": None, "fp4": "e2m1", "fp4_recipe": "nvfp4", "fp8_param_gather": False, "fp4_param_gather": True}
PRESET_FIELDS: dict[str, dict] = {
    "bf16_mixed": _BF16,
    "fp16_mixed": _FP16,
    "bf16_with_fp8_delayed_scaling_mixed": _BF16 | _DS,
    "fp16_with_fp8_delayed_scaling_mixed": _FP16 | _DS,
    "bf16_with_fp8_current_scaling_mixed": _BF16 | _CS,
    "fp16_with_fp8_current_scaling_mixed": _FP16 | _CS,
    "bf16_with_mxfp8_mixed": _BF16 | _MX,
    "fp16_with_mxfp8_mixed": _FP16 | _MX,
    "bf16_with_fp8_subchannel_scaling_mixed": _BF16 | _SC,
    "fp16_with_fp8_subchannel_scaling_mixed": _FP16 | _SC,
    "bf16_with_nvfp4_mixed": _BF16 | _NV,
}
MP_TARGETS = {  # a MixedPrecisionConfig field -> the fields it overwrites (those the estimate reads)
    "bf16": ("model.bf16",),
    "fp16": ("model.fp16",),
    "fp8": ("model.fp8",),
    "fp8_recipe": ("model.fp8_recipe",),
    "fp8_param": ("model.fp8_param",),
    "grad_reduce_in_fp32": ("ddp.grad_reduce_in_fp32",),
    "first_last_layers_bf16": ("model.first_last_layers_bf16",),
    "num_layers_at_start_in_bf16": ("model.num_layers_at_start_in_bf16",),
    "num_layers_at_end_in_bf16": ("model.num_layers_at_end_in_bf16",),
    "fp4": ("model.fp4",),
    "fp4_recipe": ("model.fp4_recipe",),
    "fp4_param_gather": ("ddp.fp4_param_gather",),
}


def preset_name(value) -> str | None:
    return value.replace("-", "_") if isinstance(value, str) else None


def apply_precision(fields: dict, given: set[str] = frozenset()) -> list[str]:
    """Step 1: the precision preset (by name, then its fields as given) onto model/optimizer/ddp; a note for
    each field the config gives (``given``) that the preset overwrites."""
    notes: list[str] = []
    name = preset_name(fields.get("mixed_precision"))
    mp = {}
    if name is not None:
        if name not in PRESET_FIELDS:
            from planner.errors import PlannerError

            raise PlannerError(
                f"mixed_precision={name}: not a Bridge precision preset megaplan prices; allowed: "
                + ", ".join(PRESET_FIELDS)
            )
        mp.update(PRESET_FIELDS[name])
    mp.update({k.split(".", 1)[1]: v for k, v in fields.items() if k.startswith("mixed_precision.")})
    if not mp:
        return notes
    mp_given = {k.split(".", 1)[1] for k in fields if k.startswith("mixed_precision.")}
    if "fp8_param_gather" in mp and "fp8_param" not in mp_given:
        mp["fp8_param"] = mp["fp8_param_gather"]  # MixedPrecisionConfig keeps the two in step
    for key, value in mp.items():
        for target in MP_TARGETS.get(key, ()):
            if target in given and fields.get(target, value) != value:
                notes.append(
                    f"{target}={fields[target]} is overwritten by mixed_precision.{key}={value}: Bridge copies the "
                    f"precision preset onto model, optimizer and ddp; give mixed_precision.{key}={fields[target]}"
                )
            fields[target] = value
    return notes


def apply_comm_overlap(fields: dict, dp: int, base_has_comm_overlap: bool) -> list[str]:
    """Step 2: CommOverlapConfig.setup, when the config has a comm_overlap."""
    co = {k.split(".", 1)[1]: v for k, v in fields.items() if k.startswith("comm_overlap.")}
    if fields.get("comm_overlap", "") is None or not (co or base_has_comm_overlap):
        return []
    notes = []
    tp, sp = int(fields.get("model.tensor_model_parallel_size") or 1), bool(fields.get("model.sequence_parallel"))
    tp_overlap = bool(co.get("tp_comm_overlap", fields.get("model.tp_comm_overlap", False)))
    if tp_overlap and (tp < 2 or not sp):
        why = "TP < 2" if tp < 2 else "sequence_parallel is off"
        notes.append(f"comm_overlap.tp_comm_overlap=true is turned off by Bridge ({why}), without an error")
        tp_overlap = False
    fields["model.tp_comm_overlap"] = tp_overlap
    pp, vpp = (
        int(fields.get("model.pipeline_model_parallel_size") or 1),
        fields.get("model.virtual_pipeline_model_parallel_size"),
    )
    interleaved = pp > 1 and (vpp or 1) > 1
    fields["model.overlap_p2p_comm"] = _given(co, "overlap_p2p_comm", interleaved)
    fields["model.overlap_moe_expert_parallel_comm"] = _given(co, "overlap_moe_expert_parallel_comm", False)
    if fields.get("ddp.use_distributed_optimizer"):
        for name in ("overlap_grad_reduce", "overlap_param_gather"):
            fields["ddp." + name] = _given(co, name, dp > 1)
    return notes


UB_FIELD = "comm_overlap.tp_comm_overlap_cfg"
UB_MODULE = "megatron.bridge.training.comm_overlap"  # where Bridge's userbuffer presets live (v0.2.1, v0.6.0)


def recipe_userbuffers(fields: dict) -> tuple[str | None, list[str]]:
    """The userbuffer config a (runtime-updated) Bridge config runs with TP overlap on, as the value of
    --tp-comm-overlap-cfg (``userbuffer_preset``), and notes; None without TP overlap."""
    if not fields.get("model.tp_comm_overlap"):
        return None, []
    return userbuffer_preset(fields)


def userbuffer_preset(fields: dict) -> tuple[str | None, list[str]]:
    """The name of the Bridge preset a config's ``comm_overlap.tp_comm_overlap_cfg`` is (a dumped recipe prints
    the dataclass, ``TransformerLayerTPOverlapCfg(qkv_dgrad=BulkOverlapCfg(num_sm=4, ...), ...)``; a saved
    ConfigContainer nests its fields; a performance recipe names the constant), and notes. None: TE's defaults,
    which Bridge runs when the field is None (CommOverlapConfig.setup, comm_overlap.py @ v0.6.0: "No overlap
    config provided"), and for a config no preset matches (said: megaplan prices presets and files)."""
    from planner.hardware.userbuffers import UbConfig, bridge_preset_named, ops_from_bridge_repr, preset_like

    value = fields.get(UB_FIELD)
    nested = {k[len(UB_FIELD) + 1 :]: v for k, v in fields.items() if k.startswith(UB_FIELD + ".")}
    if isinstance(value, str) and value.strip().startswith(UB_MODULE + "."):  # {_target_: <it>, _call_: false}
        value = value.strip().removeprefix(UB_MODULE + ".")  # (importer.flatten reads that object as its target)
    if isinstance(value, str) and bridge_preset_named(value.strip()) is not None:
        return value.strip(), [f"userbuffers: {value.strip()} (the config's {UB_FIELD})"]
    try:
        if isinstance(value, str) and value.strip():
            ops = ops_from_bridge_repr(value)
        elif nested:
            ops: dict[str, dict] = {}
            for path, v in nested.items():
                op, _, key = path.partition(".")
                if key and not key.startswith("_") and v is not None:
                    ops.setdefault(op, {})[key] = v
        else:
            return None, []
        preset = preset_like(UbConfig(name=UB_FIELD, ops=tuple(ops.items())))
    except ValueError as err:  # pydantic's ValidationError is a ValueError
        first = str(err).splitlines()[0]
        return None, [f"{UB_FIELD} not read ({first}): priced with Transformer Engine's default userbuffers"]
    if preset is None:
        return None, [
            f"{UB_FIELD} is none of Megatron-Bridge's userbuffer presets: priced with Transformer Engine's defaults "
            "(--tp-comm-overlap-cfg FILE prices a TE ub_cfgs YAML of it)"
        ]
    return preset.name, [f"userbuffers: {preset.name}, the Bridge preset the config's {UB_FIELD} is"]


def _given(co: dict, name: str, default: bool) -> bool:
    value = co.get(name)
    return bool(default if value is None else value)


def megatron_lm_expressible(fields: dict) -> list[str]:
    """The DDP parameter all-gather overlapped while gradient reduction is not: Megatron-Core runs it (its
    DistributedDataParallel registers the forward pre-hooks on ``overlap_param_gather`` alone,
    distributed_data_parallel.py:479 at d98e8a64), Bridge checks nothing more, but Megatron-LM's arguments.py
    (1024-1029) refuses ``--overlap-param-gather`` without ``--overlap-grad-reduce``. v0.6.0's DeepSeek-V3 H100 perf
    recipes run it (``cfg.ddp.overlap_grad_reduce = False`` beside the overlaps Bridge turns on for data-parallel
    size > 1). Priced with the all-gather not overlapped: slower than the run by at most that exposed gather."""
    if fields.get("ddp.overlap_param_gather") and fields.get("ddp.overlap_grad_reduce") is False:
        fields["ddp.overlap_param_gather"] = False
        return [
            "ddp.overlap_param_gather=true with overlap_grad_reduce=false runs in Megatron-Core but Megatron-LM "
            "refuses it (arguments.py); priced with the parameter all-gather not overlapped (an upper bound)"
        ]
    return []
