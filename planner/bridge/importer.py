"""Megatron-Bridge configs read into a plan: an override dotlist or YAML over a named base recipe, or a saved
ConfigContainer YAML (``ConfigContainer.to_yaml``, a dry run's output).

The fields become Megatron-LM flags through the mapping table (``planner.bridge.table``) after Bridge's
runtime rules (``planner.bridge.runtime``), and the flags are priced by the Megatron-LM importer, so a
Bridge config and the Megatron-LM command line it stands for are one plan.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import yaml

from planner.bridge import recipes
from planner.bridge.runtime import apply_comm_overlap, apply_precision, megatron_lm_expressible, recipe_userbuffers
from planner.bridge.table import MLA_PATHS, MODEL_ROWS, MODEL_TAG_ROWS, NEWEST, ROWS, TAGS
from planner.bridge.values import to_flags
from planner.errors import PlannerError
from planner.megatron.export import DPA_FP8_RECIPE
from planner.whole import typed_int

HEADER = re.compile(r"^#\s*megaplan-import:\s*(.*)$", re.M)
ENV_HEADER = re.compile(r"^#\s*megaplan-env:\s*(.*)$", re.M)
SCALAR_PATHS = {"mixed_precision", "comm_overlap"}


@dataclass(frozen=True)
class BridgeImport:
    request: object  # api.PlanRequest
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    argv: tuple[str, ...]


def header_options(text: str) -> dict:
    """What an export's ``# megaplan-import:`` line says: tag, recipe, GPUs and hardware."""
    m, out = HEADER.search(text), {}
    words = shlex.split(m.group(1)) if m else []
    for flag, value in zip(words[::2], words[1::2], strict=False):
        out[flag.lstrip("-").replace("-", "_")] = value
    env = ENV_HEADER.search(text)
    out["env"] = tuple(shlex.split(env.group(1))) if env else ()
    return out


def flatten(node, prefix: str = "") -> dict:
    """A nested YAML mapping as {dotted path: value}. A node with a ``_target_`` (an object written whole) keeps
    it as ``path._target_``; a dtype written as ``{_target_: torch.bfloat16, _call_: false}`` is its name."""
    out = {}
    for key, value in (node or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value.get("_call_") is False and "_target_" in value:
            out[path] = value["_target_"]
        elif isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def merge_over(base: dict, fields: dict) -> dict:
    """``fields`` over a base recipe's: a section given whole (with a ``_target_``) replaces the base's."""
    whole = {k.removesuffix("._target_") for k in fields if k.endswith("._target_")}
    whole |= {k for k, v in fields.items() if "." not in k and isinstance(v, str)}  # mixed_precision=PRESET
    kept = {k: v for k, v in base.items() if k.split(".", 1)[0] not in whole and k not in whole}
    return {**kept, **fields}


def parse_dotlist(lines: list[str]) -> dict:
    """Hydra-style overrides (``a.b=value``, ``+a.b=value``, ``~a.b``) as {path: value}."""
    out = {}
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("~"):
            out[line[1:]] = None
            continue
        path, eq, text = line.lstrip("+").partition("=")
        if not eq or not path.strip():  # '=1' was read as a key '' and ignored
            raise PlannerError(f"Bridge override {line!r}: expected KEY=VALUE (a Hydra-style dotlist)")
        if path != path.rstrip():  # fresh user trial 10: "no 'tensor_model_parallel_size ' in Bridge v0.6.0"
            raise PlannerError(
                f"Bridge override {line!r}: spaces around '=' (the shell passes KEY, =, VALUE as three words); "
                f"write {path.strip()}={text.strip()}"
            )
        value = _hydra_value(text.strip(), line)
        if isinstance(value, dict):
            out.update(flatten({path: value}))
            out.setdefault(path, None) if not value else None
        else:
            out[path] = value
    return out


def _hydra_value(text: str, line: str):
    if text.startswith("{") and text.endswith("}"):
        body = text[1:-1]
        pairs = [p.partition(":") for p in _split_top(body)] if body else []
        return {k.strip(): _hydra_value(v.strip(), line) for k, _, v in pairs}
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError as err:
        raise PlannerError(f"Bridge override {line!r}: cannot read the value ({err.problem})") from None
    return typed_int(value, text, f"Bridge override {line!r}")


def _split_top(body: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += ch in "[{(" and 1 or (ch in "]})" and -1 or 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur] if cur else parts


def read_bridge_text(text: str) -> dict:
    """A Bridge config file: a YAML mapping (override YAML, ConfigContainer YAML) or a dotlist, one per line."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and not all(isinstance(k, str) and "=" in k for k in data):
        return flatten(data)
    return parse_dotlist(text.splitlines())


def _context(fields: dict, is_moe: bool) -> dict:
    return {
        "vpp": fields.get("model.virtual_pipeline_model_parallel_size") or 1,
        "flex": is_moe and fields.get("model.moe_token_dispatcher_type") == "flex",
        "fp8": fields.get("model.fp8"),
        "recompute": fields.get("model.recompute_granularity"),
        "layout": bool(fields.get("model.pipeline_model_parallel_layout")),
        "fsdp": bool(fields.get("ddp.use_megatron_fsdp")),
        "precision": "bf16" if fields.get("model.bf16") else "fp16" if fields.get("model.fp16") else "fp32",
    }


def _full_iteration(fields: dict) -> None:
    """A full-iteration CUDA graph as Megatron-LM names it: core_v0.15.2 (v0.2.1) writes impl local with scope
    full_iteration, Bridge v0.6.0's recipes impl local with cuda_graph_scope ["full_iteration"]."""
    scopes = fields.get("model.cuda_graph_scope"), fields.get("model.cuda_graph_modules")
    named = [str(s) for v in scopes for s in ([v] if isinstance(v, str) else v or ())]
    if fields.get("model.cuda_graph_impl") == "local" and any(s.endswith("full_iteration") for s in named):
        fields |= {"model.cuda_graph_impl": "full_iteration", "model.cuda_graph_scope": None}
        fields["model.cuda_graph_modules"] = [] if "model.cuda_graph_modules" in fields else None


def _scope_to_modules(fields: dict, tag: str) -> None:
    """v0.6.0 (Megatron-Core d98e8a64): a ``cuda_graph_scope`` set (as the perf recipes still do) becomes
    ``cuda_graph_modules`` in TransformerConfig.__post_init__ (transformer_config.py:2716-2739) when the modules are
    not given; core_v0.15.2 (v0.2.1) reads the scope itself."""
    scope, modules = fields.get("model.cuda_graph_scope"), fields.get("model.cuda_graph_modules")
    if tag != "v0.2.1" and scope not in (None, "") and modules in (None, [], "full"):
        fields |= {"model.cuda_graph_modules": [scope] if isinstance(scope, str) else list(scope)}
        fields["model.cuda_graph_scope"] = None


def to_argv(fields: dict, tag: str, is_moe: bool) -> list[str]:
    """The Megatron-LM flags the (runtime-updated) Bridge fields stand for, through the mapping table."""
    _full_iteration(fields)
    _scope_to_modules(fields, tag)
    ctx = _context(fields, is_moe)
    argv: list[str] = []
    for flag, path in MODEL_ROWS.items():
        value = fields.get(path)
        if value is not None:
            argv += [
                flag,
                str(int(value) if isinstance(value, float) and value.is_integer() and "dropout" not in flag else value),
            ]
    argv += _model_tag_flags(fields, tag)
    for row in ROWS:
        argv += to_flags(row, fields, tag, ctx)
    return argv + _low_precision_flags(fields) + (_flex_sms_flags(fields) if ctx.get("flex") else [])


# The flex dispatcher's SM counts (TransformerConfig fields of the same names; Megatron-Core routes the deprecated
# per-backend ones into moe_flex_dispatcher_num_sms unless it is set, transformer_config.py:1792-1797 @ d98e8a64,
# which the Megatron-LM importer follows) and HybridEP's scan blocks, as Megatron-LM flags
FLEX_SMS_FIELDS = {
    "model.moe_flex_dispatcher_num_sms": "--moe-flex-dispatcher-num-sms",
    "model.moe_hybridep_num_sms": "--moe-hybridep-num-sms",
    "model.moe_deepep_num_sms": "--moe-deepep-num-sms",
    "model.moe_hybridep_num_sms_preprocessing": "--moe-hybridep-num-sms-preprocessing",
}


def _flex_sms_flags(fields: dict) -> list[str]:
    """The SM fields a flex plan's Bridge config gives, as flags. A moe_flex_dispatcher_num_sms equal to the SMs the
    estimate prices for its backend when none is given (``moe.COMM_SMS``: what ``export._flex_sms`` writes for a plan
    without one, to override a base recipe's) reads as not given, so an exported plan reads back equal."""
    from planner.costs.moe import COMM_SMS

    backend = "deepep" if fields.get("model.moe_enable_deepep") else fields.get("model.moe_flex_dispatcher_backend")
    backend = backend or "deepep"  # TransformerConfig.moe_flex_dispatcher_backend default
    given = {path: fields.get(path) for path in FLEX_SMS_FIELDS if fields.get(path) is not None}
    flex = given.get("model.moe_flex_dispatcher_num_sms")
    if flex is not None and int(flex) == COMM_SMS.get(str(backend)):
        given.pop("model.moe_flex_dispatcher_num_sms")
        given.pop("model.moe_hybridep_num_sms", None)  # overridden by the unified field in Megatron-Core
        given.pop("model.moe_deepep_num_sms", None)
    return [word for path, value in given.items() for word in (FLEX_SMS_FIELDS[path], str(int(value)))]


# TransformerConfig's low-precision fields no row of the table reads (Bridge's finalize() runs its __post_init__):
# given as Megatron-LM flags to the importer, which checks them (planner.megatron.low_precision) and carries the BF16
# end layers and the MXFP8 output layer into the plan's options
LOW_PRECISION_FIELDS = {
    "model.fp4": "--fp4-format",
    "model.fp4_recipe": "--fp4-recipe",
    "ddp.fp4_param_gather": "--fp4-param-gather",
    "model.first_last_layers_bf16": "--first-last-layers-bf16",
    "model.num_layers_at_start_in_bf16": "--num-layers-at-start-in-bf16",
    "model.num_layers_at_end_in_bf16": "--num-layers-at-end-in-bf16",
    "model.fp8_output_proj": "--fp8-output-proj",
}


def _low_precision_flags(fields: dict) -> list[str]:
    out: list[str] = []
    for path, flag in LOW_PRECISION_FIELDS.items():
        value = fields.get(path)
        if value is None or value is False:
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


def _model_tag_flags(fields: dict, tag: str) -> list[str]:
    """The position-embedding and norm settings (``MODEL_TAG_ROWS``) among the fields, as Megatron-LM flags: a value
    flag with its value, a switch where the field holds the switch's value (the other value is the flag left out)."""
    argv: list[str] = []
    for row in MODEL_TAG_ROWS:
        for path in dict.fromkeys((row.paths.get(tag), MLA_PATHS.get(row.dest))):
            value = None if path is None else fields.get(path)
            if value is None:
                continue
            if row.on is None:
                argv += [row.flag, str(value)]
            elif bool(value) == row.on:
                argv.append(row.flag)
    return argv


def bridge_import_fields(
    fields: dict,
    *,
    tag: str = NEWEST,
    recipe: str | None = None,
    gpus: int | None = None,
    hardware=None,
    model: str | None = None,
    env: tuple[str, ...] = (),
    post=None,
    spelled: dict | None = None,
):
    """The plan's fields a Bridge config describes (``ImportedFields`` of the Megatron-LM importer): the base
    recipe's fields (if one is named), the given fields over them, Bridge's runtime rules, then the
    Megatron-LM importer on the flags they stand for. ``env``: NAME=VALUE the launch sets; ``post``: what a
    launcher sets over the merged fields, (fields, notes) of them (``workloads.post_overrides``); ``spelled``: the
    run-length fields as the source names them (a NeMo 2 line's trainer.max_steps for train.train_iters)."""
    from planner.megatron.importer import import_fields

    if tag not in TAGS:
        raise PlannerError(f"--bridge-version {tag}: allowed {', '.join(TAGS)}")
    notes: list[str] = []
    base = {}
    if recipe:
        base, model, gpus, hardware = _base_recipe(tag, recipe, fields, model, gpus, hardware, notes)
    merged = merge_over(base, fields)
    if post is not None:
        extra, said = post(merged)
        merged |= extra
        notes += said
    if model is None and (model := preset_for(merged)) is not None:
        notes.append(f"model {model}: the megaplan preset whose architecture the config's model fields match")
    base_has_co = any(k.startswith("comm_overlap.") for k in merged)
    if gpus is None:
        raise PlannerError("the world size is unknown: pass --gpus N (a Bridge config does not hold it)")
    t, p, c = (_size(merged, f"model.{k}_parallel_size") for k in ("tensor_model", "pipeline_model", "context"))
    dp = gpus // (t * p * c) if gpus % (t * p * c) == 0 else 1
    warnings = apply_precision(merged, set(fields)) + apply_comm_overlap(merged, dp, base_has_co)
    warnings += megatron_lm_expressible(merged)
    from planner.presets import load_model

    is_moe = bool(merged.get("model.num_moe_experts")) or (load_model(model).is_moe if model else False)
    argv = to_argv(merged, tag, is_moe)
    exports = "".join(f"export {shlex.quote(e)}\n" for e in env)
    read = import_fields(exports + shlex.join(argv), gpus=gpus, model=model, hardware=hardware)
    notes += _unflagged(read.data, merged, fields, base, spelled or {})
    return replace(read, notes=tuple(notes) + read.notes, warnings=tuple(warnings) + read.warnings, argv=argv)


# --moe-permute-fusion in every MoE recipe megaplan reads (DeepSeek-V3, Qwen3 MoE, GPT-OSS), at both tags, through
# the model provider or the recipe: v0.2.1 deepseek_provider.py:115 (on with TE >= 2.1) and recipes/deepseek/
# deepseek_v3.py:259, qwen_provider.py:396, gpt_oss_provider.py:73; v0.6.0 deepseek_v3_bridge.py:76 and
# recipes/deepseek/h100/deepseek_v3.py:171, qwen3_moe_bridge.py:68, gpt_oss_bridge.py:70. The dumped recipe fields
# (data/recipe_defaults.json) predate the row that reads it.
RECIPE_PERMUTE_FUSION = True
# NeMo 2's model configs at NEMO2_TAG (v2.4.0): Qwen3 moe_permute_fusion = True (nemo/collections/llm/gpt/model/
# qwen3.py:65), DeepSeek is_te_min_version("2.1.0") (deepseek.py:127); Mixtral, Llama 4 and Grok-1 keep
# Megatron-Core's False (llama.py:408)
NEMO2_PERMUTE_FUSION_MODELS = ("qwen3", "deepseek")


def _base_recipe(tag: str, recipe: str, fields: dict, model, gpus, hardware, notes: list[str]):
    """The base recipe's fields at ``tag`` (how it holds its precision and overlap configs among them), the model,
    GPUs and hardware its name states where not given, and the note of what is assumed from it."""
    name, _, preset = recipes.resolve(tag, recipe, model or "")
    base = dict(recipes.defaults(tag, name))
    if base.get("model.num_moe_experts"):  # not in the dumped fields: every MoE recipe sets it (RECIPE_PERMUTE_FUSION)
        base.setdefault("model.moe_permute_fusion", RECIPE_PERMUTE_FUSION)
    kinds = base.pop("_kinds", {})
    if str(kinds.get("mixed_precision", "")).startswith("str:"):
        base["mixed_precision"] = kinds["mixed_precision"][4:]
    if kinds.get("comm_overlap") == "null":
        base["comm_overlap"] = None
    gpus, hardware = _cluster_from_name(name, gpus, hardware, notes)
    assumed = sorted(k for k in base if k not in fields and k in _READ_PATHS)
    if assumed:
        notes.append(f"assumed from base recipe {name} ({tag}): {_shown(base, assumed)}")
    elif not base:
        notes.append(f"base recipe {name}: its fields were not dumped; only the given fields are read")
    return base, model or preset, gpus, hardware


def _unflagged(data: dict, merged: dict, given: dict, base: dict, spelled: dict) -> list[str]:
    """What no Megatron-LM flag carries, set in the plan's ``data``: FP8 attention (a Megatron-Core field), the
    run's length, the userbuffer config object; the notes saying so."""
    notes = []
    if merged.get("mixed_precision.fp8_dot_product_attention"):
        data["options"]["fp8_dot_product_attention"] = True
        if data["options"].get("fp4"):
            notes.append(
                "FP8 attention with NVFP4 linears: priced as Transformer Engine runs it with "
                f"{DPA_FP8_RECIPE} in the launch environment (its per-tensor FP8 kernel); the export sets it"
            )
    notes += _run_length(merged, given, data["training"], base, spelled)
    userbuffers, said = recipe_userbuffers(merged)
    if userbuffers is not None:
        data["options"]["tp_comm_overlap_cfg"] = userbuffers
    return notes + said


RUN_FIELDS = ("train.train_iters", "train.train_samples", "train.num_epochs")


def _run_length(merged: dict, given: dict, training: dict, base: dict | None, spelled: dict) -> list[str]:
    """The run's tokens from train.train_iters or train.train_samples (``importer.run_length``, as Megatron-LM's
    --train-iters/--train-samples give them), set in ``training``, and the note saying so. Bridge takes exactly one
    of them (or v0.6.0's train.num_epochs, whose run's length needs the dataset's size): TrainingConfig.finalize
    asserts it (training/config.py @ v0.2.1, v0.6.0), so two set is one line naming them."""
    from planner.megatron.importer import run_length

    values = {key: _run_value(merged, key) for key in RUN_FIELDS}
    set_ = [key for key, value in values.items() if value is not None]
    if len(set_) > 1:
        shown = " and ".join(f"{k}={values[k]}{_whose(k, given, base)}" for k in set_)
        raise PlannerError(
            f"{shown} are both set; Bridge takes one (TrainingConfig.finalize asserts it): set the other null "
            f"(e.g. --bridge-override {set_[0] if set_[0] not in given else set_[1]}=null)"
        )
    if set_ == ["train.num_epochs"]:
        return [
            f"train.num_epochs={values['train.num_epochs']}: the run's length needs the dataset's size, which the "
            "config does not hold; days and cost are for --tokens (300B by default)"
        ]
    names = tuple(spelled.get(k) or f"{k}{_whose(k, given, base)}" for k in RUN_FIELDS[:2])
    return run_length(values["train.train_iters"], values["train.train_samples"], training, names)


def _whose(key: str, given: dict, base: dict | None) -> str:
    return " (the base recipe's)" if base and key not in given and key in base else ""


def _run_value(merged: dict, key: str):
    """train.train_iters / train_samples / num_epochs: None, or a number > 0 (a whole number but for the epochs)."""
    value = merged.get(key)
    if value is None:
        return None
    epochs = key.endswith("num_epochs")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or (not epochs and value != int(value)):
        allowed = "a number > 0" if epochs else "a whole number ≥ 1"
        raise PlannerError(f"{key}={value!r}: allowed: {allowed}, or null")
    return value if epochs else int(value)


def _size(merged: dict, key: str) -> int:
    """A parallel size of the merged config (1 when unset); a value that is not a whole number ≥ 1
    (``--bridge-override model.tensor_model_parallel_size=two``) is one line naming the field."""
    value = merged.get(key)
    try:
        size = int(value) if value is not None else 1
    except (TypeError, ValueError):
        size = 0
    if size < 1 or (isinstance(value, float) and value != size):
        raise PlannerError(f"{key}={value!r}: allowed: a whole number ≥ 1")
    return size


def _cluster_from_name(name: str, gpus, hardware, notes: list[str]):
    """The GPUs and hardware a recipe's name states (``..._32gpu_h100_...``), where the options leave them out,
    each with a note; the options given win."""
    from planner.bridge.workloads import cluster_in_name

    named = cluster_in_name(name)
    if named is None or (gpus is not None and hardware is not None):
        return gpus, hardware
    took = []
    if gpus is None:
        gpus = named[0]
        took.append(f"{gpus} GPUs")
    if hardware is None:
        hardware = named[1]
        took.append(f"hardware {hardware}")
    notes.append(f"{' and '.join(took)} from the recipe's name {name} (--gpus / --hardware override)")
    return gpus, hardware


def request_from_bridge(fields: dict, **kw):
    """The plan request a Bridge config describes (``bridge_import_fields``, built and checked)."""
    from planner.plan_file import request_from_fields

    read = bridge_import_fields(fields, **kw)
    return BridgeImport(request_from_fields(read.data), read.notes, read.warnings, tuple(read.argv))


_MODEL_PATHS = {*MODEL_ROWS.values(), *MLA_PATHS.values(), *(p for row in MODEL_TAG_ROWS for p in row.paths.values())}
_READ_PATHS = {row.read for row in ROWS} | {"train.global_batch_size", "train.micro_batch_size", "model.seq_length"}


def _shown(base: dict, keys: list[str]) -> str:
    text = ", ".join(f"{k.split('.', 1)[1]}={base[k]}" for k in keys[:12])
    return text + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")


def _refuse_python_without_name(text: str, path: str) -> None:
    """A Python file of Bridge's performance recipes given without ``#NAME`` is refused with the names it
    defines (fresh user trial 8: it was read as a dotlist, "Bridge override '\"\"\"GB200 performance recipes
    ...\"\"\"': expected KEY=VALUE", which did not say what to give)."""
    import ast

    if not path.endswith(".py"):
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        raise PlannerError(f"--bridge-config {path!r}: a Python file that does not parse") from None
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.endswith("_config")]
    names += [
        t.id
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name) and t.id.endswith("_CONFIG")
    ]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    if not names:
        raise PlannerError(
            f"--bridge-config {path!r} is a Python file without Bridge performance workloads (no *_config function "
            "or *_CONFIG); give an override YAML or dotlist, a saved ConfigContainer YAML or a perf recipe as "
            "FILE#NAME"
        )
    defines = f"; it defines {shown}"
    raise PlannerError(
        f"--bridge-config {path!r} is a Python file: name one of its Bridge performance workloads as "
        f"--bridge-config {path}#NAME{defines}"
    )


def read_bridge_source(values: dict) -> tuple[object, str]:
    """A Bridge config from the plan options: --bridge-config FILE (its ``# megaplan-import:`` line gives
    defaults), --bridge-override KEY=VALUE (repeatable), --bridge-recipe, --bridge-version; (fields, where).
    The file may also be a NeMo 2 command line or a Megatron-LM ``MODEL_ARGS:`` YAML."""
    from planner.plan_sources import read_text

    path = values.get("bridge_config")
    path, hashed, workload = (path or "").partition("#")
    if hashed and not (path and workload):
        missing = "no workload name after" if path else "no file before"
        raise PlannerError(
            f"--bridge-config {values['bridge_config']!r}: {missing} '#'; give FILE#NAME (a perf recipe)"
        )
    text = read_text(path) if path else ""
    if workload:
        return _workload(text, workload, values, Path(path))
    _refuse_python_without_name(text, path)
    if file_kind(text) == "run_recipe":
        text = run_recipe_text(text, gpus_given=bool(values.get("gpus")))
    head = header_options(text)
    gpus = values.get("gpus") or (int(head["gpus"]) if head.get("gpus") else None)
    where = f"--gpus {gpus}" if values.get("gpus") else f"the Bridge config's {gpus} GPUs"
    common = {"gpus": gpus, "hardware": values.get("hardware") or head.get("hardware"), "model": values.get("model")}
    kind = file_kind(text)
    if kind == "mlm-yaml":
        from planner.bridge.formats import mlm_yaml_argv
        from planner.megatron.importer import import_fields

        _refuse_variables(text, path)
        if gpus is None:
            raise PlannerError("the world size is unknown: pass --gpus N (a MODEL_ARGS YAML does not hold it)")
        return import_fields(mlm_yaml_argv(text)[0], **common), where
    if kind == "nemo2":
        return _nemo2_source(text, values, head, common, where)
    fields = read_bridge_text(text) if path else {}
    _refuse_other_configs(text, fields, path)
    overrides = parse_dotlist(list(values.get("bridge_override") or ()))
    tag = values.get("bridge_version") or head.get("bridge_version") or NEWEST
    unread = _unknown_overrides(overrides, tag)
    fields.update(overrides)
    recipe, said = _recipe_of(values, head, tag, path)
    if path:
        _refuse_field_typos(fields, tag, path)
    _refuse_without_model(fields, recipe, values, path, tag)
    read = bridge_import_fields(fields, tag=tag, recipe=recipe, env=head.get("env", ()), **common)
    if gpus is None:  # the recipe's name stated them (bridge_import_fields says so in a note)
        where = f"the recipe name's {read.data['gpus']} GPUs"
    return replace(read, warnings=(*unread, *read.warnings), notes=(*said, *read.notes)), where


def _nemo2_source(text: str, values: dict, head: dict, common: dict, where: str) -> tuple[object, str]:
    """`read_bridge_source` of a NeMo 2 command line: its world size (trainer.num_nodes × trainer.devices) unless
    --gpus gives it, its fields over the factory's defaults, then --bridge-override."""
    from planner.bridge.formats import (
        NEMO2_NO_LIMIT,
        NEMO2_RUN,
        nemo2_defaults,
        nemo2_fields,
        nemo2_given,
        nemo2_launch,
    )

    world, unread = nemo2_launch(text)
    if common["gpus"] is None and world is not None:
        common["gpus"], where = world, f"the NeMo 2 line's {world} GPUs (trainer.num_nodes × trainer.devices)"
    elif common["gpus"] is None:
        raise PlannerError(
            "the world size is unknown: pass --gpus N, or give trainer.num_nodes and trainer.devices on the NeMo 2 line"
        )
    fields, preset, (assumed, factory) = nemo2_fields(text)
    model = common["model"] or preset or ""
    if model.startswith(NEMO2_PERMUTE_FUSION_MODELS):  # their NeMo 2 model configs turn it on, the others leave it off
        fields.setdefault("model.moe_permute_fusion", True)
    overrides = parse_dotlist(list(values.get("bridge_override") or ()))
    steps = {**nemo2_defaults(factory), **nemo2_given(text)}.get(NEMO2_RUN)
    spelled = {}
    if "train.train_iters" in fields and "train.train_iters" not in overrides:  # the run's length, as NeMo names it
        spelled["train.train_iters"] = NEMO2_RUN + (f" (the {factory} recipe's)" if NEMO2_RUN in assumed else "")
    fields.update(overrides)
    read = bridge_import_fields(
        fields, env=head.get("env", ()), spelled=spelled, **{**common, "model": common["model"] or preset}
    )
    said = (_nemo2_note(assumed, factory), *read.notes)
    if steps == -1 and not any(k in overrides for k in RUN_FIELDS):
        unread = (*unread, NEMO2_NO_LIMIT)
    return replace(read, notes=said, warnings=(*unread, *read.warnings)), where


MODEL_SHAPE = ("model.num_layers", "model.hidden_size", "model.num_attention_heads")


def _refuse_without_model(fields: dict, recipe: str | None, values: dict, path: str, tag: str) -> None:
    """Overrides with neither the recipe they override nor the model's shape (Bridge's own
    *_override_example.yaml files, a dotlist written by hand): Bridge's run_recipe.py always starts from a
    recipe, so the recipe is asked for (fresh user trial 10: "the command line does not define the model:
    --num-layers, --hidden-size, --num-attention-heads missing", of a file that holds no command line)."""
    if recipe or values.get("model") or all(k in fields for k in MODEL_SHAPE):
        return
    known = sorted(recipes.RECIPES.get(tag, {}))
    stem = Path(path).name.lower() if path else ""
    named = [n for n in known if n.removesuffix("_config") in stem]
    example = max(named, key=len) if named else "llama3_8b_pretrain_config"
    what = path or "--bridge-override"
    raise PlannerError(
        f"{what}: Bridge overrides without the recipe they override (Bridge's run_recipe.py starts from one): "
        f"give --bridge-recipe NAME (e.g. --bridge-recipe {example}; megaplan's own exports name it in their first "
        "line), or --model PRESET"
    )


def _refuse_field_typos(fields: dict, tag: str, path: str) -> None:
    """A field of an override file one letter from a field of its Bridge section (model.tensor_model_paralel_size):
    refused naming the field meant, as --bridge-override is (fresh user trial 10: the file's typo ended in "no
    Megatron-LM entry point (pretrain_*.py, train*.py) or flags found"). Other unknown keys of a file are left to
    the reading below: a saved ConfigContainer holds fields of subclasses megaplan does not list."""
    import difflib

    sections = recipes.section_fields(tag)
    for key in fields:
        section, dot, field = key.partition(".")
        name = field.split(".")[0]
        if not dot or section not in sections or name in sections[section] or key in _READ_PATHS:
            continue
        near = difflib.get_close_matches(name, sorted(sections[section]), n=1, cutoff=0.9)
        if near:
            raise PlannerError(
                f"{path}: {key}: no {name!r} in Bridge {tag}'s {section} config; did you mean {near[0]}?"
            )


def _refuse_other_configs(text: str, fields: dict, path: str) -> None:
    """A plan JSON, a NeMo 1 model config or an unresolved OmegaConf ``${...}`` given as --bridge-config: one line
    saying what it is and what reads it (fresh user trial 7: "the world size is unknown", and NeMo's
    megatron_gpt_config.yaml ended in "--max-position-embeddings expects an integer, got '${.encoder_seq_length}'")."""
    if text.lstrip()[:1] in ("{", "[") and '"parallel"' in text and '"model"' in text:
        raise PlannerError(f"{path}: a megaplan plan file (JSON), not a Bridge config: read it with --plan {path}")
    if "model.encoder_seq_length" in fields or "model.megatron_amp_O2" in fields:
        raise PlannerError(
            f"{path}: a NeMo 1 model config (megatron_gpt_config.yaml), which megaplan does not read: give its model "
            "and sizes as --megatron-args '--num-layers N ...' or --model PRESET, or use a NeMo 2 line"
        )
    interpolated = [k for k, v in fields.items() if isinstance(v, str) and "${" in v]
    if interpolated:
        key = interpolated[0]
        raise PlannerError(
            f"{path}: {key}={fields[key]} is an OmegaConf interpolation megaplan does not resolve: write its value "
            f"(or --bridge-override {key}=VALUE)"
        )


def _refuse_variables(text: str, path: str) -> None:
    """A moe-modelzoo MODEL_ARGS YAML holds ${TP}, ${PP} ... that its launcher fills in: read as a launch script
    with --env they are filled in too (fresh user trial 7: --bridge-config ended in "--tensor-model-parallel-size
    expects an integer, got '${TP}'", and --env is refused beside --bridge-config)."""
    from planner.megatron.modelzoo import VARIABLE

    names = list(dict.fromkeys(m.group(1) or m.group(2) for m in VARIABLE.finditer(text.partition("MODEL_ARGS:")[2])))
    if names:
        shown = ", ".join("${" + n + "}" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        raise PlannerError(
            f"{path}: its MODEL_ARGS use {shown}, which its launcher fills in; read it as a launch script, "
            f"--megatron-args-file {path} (it names the --env NAME=VALUE each flag the estimate needs takes)"
        )


def _recipe_of(values: dict, head: dict, tag: str, path: str) -> tuple[str | None, list[str]]:
    """The base recipe the overrides apply over: --bridge-recipe, the file header's, or, for --bridge-override
    alone beside --model, Bridge's recipe of that model, said in a note (Bridge always starts from a recipe;
    fresh user trial 5 priced `--model llama3-8b --bridge-override ...` at Megatron-LM's defaults: fp32, batch 4)."""
    recipe = values.get("bridge_recipe") or head.get("bridge_recipe")
    if recipe or path or not values.get("model"):
        return recipe, []
    from planner.presets import load_model

    name = recipes.resolve(tag, None, load_model(values["model"]).name)[0]
    return name, [
        f"--bridge-override over {name}, Bridge {tag}'s recipe of {values['model']} (--bridge-recipe: another)"
    ]


def _unknown_overrides(overrides: dict, tag: str) -> list[str]:
    """--bridge-override keys that are not fields of Bridge's ConfigContainer at ``tag`` (its sections' dataclass
    fields, dumped): an unknown section, or a field one letter from a real one, is refused with the name meant;
    another unknown field (a model provider subclass may add its own, MLA's q_lora_rank) is a warning, never
    dropped without a word (fresh user trial 5: model.tensor_parallel_size=2 was ignored silently)."""
    import difflib

    sections, unread = recipes.section_fields(tag), []
    for key in overrides:
        section, dot, field = key.partition(".")
        known = field.split(".")[0] in sections.get(section, ()) or key in _READ_PATHS or key in _MODEL_PATHS
        if tag in TAGS and sections and not dot:
            _check_whole_section(key, overrides[key], sections, tag)
        if tag not in TAGS or not sections or not dot or known:
            continue
        names = sorted(sections) if section not in sections else sorted(sections[section])
        wrong = section if section not in sections else field.split(".")[0]
        near = difflib.get_close_matches(wrong, names, n=1, cutoff=0.8)
        if section not in sections or near:
            hint = f"did you mean {near[0]}?" if near else f"allowed sections: {', '.join(names)}"
            raise PlannerError(f"--bridge-override {key}: no {wrong!r} in Bridge {tag}'s ConfigContainer; {hint}")
        unread.append(
            f"--bridge-override {key}: not a field of Bridge {tag}'s {section} config megaplan knows; ignored"
        )
    return unread


def _check_whole_section(key: str, value, sections: dict, tag: str) -> None:
    """An override without a dot names a whole section: removed (``~train``, None) or, for mixed_precision, a
    preset's name. ``tensor_model_parallel_size=4`` (the section left out) and ``train=1`` were ignored without
    a word; they name the field meant."""
    if key in sections and (value is None or (key == "mixed_precision" and isinstance(value, str))):
        return
    if key in sections:
        raise PlannerError(
            f"--bridge-override {key}={value}: {key} is a section of Bridge {tag}'s ConfigContainer, not a field; "
            f"allowed: {key}.FIELD=VALUE"
        )
    owners = [name for name, fields in sections.items() if key in fields]
    hint = f"did you mean {owners[0]}.{key}?" if owners else f"allowed sections: {', '.join(sorted(sections))}"
    raise PlannerError(f"--bridge-override {key}: no {key!r} in Bridge {tag}'s ConfigContainer; {hint}")


def _nemo2_note(assumed: dict, factory: str) -> str:
    """Which NeMo 2 recipe fields the import assumed (the command line left them as the recipe sets them)."""
    from planner.bridge.formats import NEMO2_TAG, nemo2_defaults

    if not nemo2_defaults(factory):
        return (
            f"NeMo 2 recipe {factory or '(no --factory)'} not read at NeMo {NEMO2_TAG}: what the command line leaves "
            "out is Megatron-LM's default"
        )
    shown = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in list(assumed.items())[:12])
    more = f" and {len(assumed) - 12} more" if len(assumed) > 12 else ""
    return f"assumed from NeMo 2 recipe {factory} (NeMo {NEMO2_TAG}): {shown or 'nothing'}{more}"


RUN_RECIPE = re.compile(r"(?:^|[\s/])run_recipe\.py\b")


def _run_recipe_world(launcher: list[str], gpus_given: bool) -> int | None:
    """The GPUs torchrun starts for a run_recipe.py line, read as the Megatron-LM launch reader reads torchrun
    (``launch.torch_count``: Python's int(), --nnodes MIN:MAX only with MIN = MAX); None without
    --nproc-per-node. Counts that give no one size (an elastic range, gpu/auto/cpu, --standalone over several
    nodes, a form torchrun refuses) are one line naming them unless --gpus is given (``script.world_unknown``);
    before, the nodes of a range or of 2_0 were dropped and the world was one node's."""
    from planner.megatron.script import torch_world_unknown
    from planner.megatron.shell.launch import _TORCH, torch_count

    opts = {}
    for i, word in enumerate(launcher):
        name, eq, value = word.partition("=")
        if name in _TORCH:
            opts[_TORCH[name]] = (value if eq else (launcher[i + 1] if i + 1 < len(launcher) else ""), frozenset())
    nproc, nnodes = (torch_count(opts.get(k), k, {}, []) for k in ("nproc", "nnodes"))
    if nnodes is not None and nnodes > 1 and "--standalone" in launcher:
        opts["nnodes"], nnodes = (f"{opts['nnodes'][0]} with --standalone", frozenset()), None
    unread = [k for k, n in (("nproc", nproc), ("nnodes", nnodes)) if k in opts and n is None]
    if unread and not gpus_given:
        counts = {k: v[0] for k, v in opts.items()}
        raise PlannerError(
            torch_world_unknown(counts)
            or f"the world size is unknown: torchrun {' '.join(f'{k} = {counts[k]}' for k in unread)} on the "
            "run_recipe.py line is no number megaplan reads; pass --gpus N"
        )
    return None if unread or nproc is None else nproc * (nnodes or 1)


def run_recipe_text(text: str, gpus_given: bool = False) -> str:
    """Bridge's launch line, ``torchrun --nproc-per-node 8 --nnodes 2 scripts/training/run_recipe.py --recipe NAME
    key=value ...`` (the README's), as the dotlist of its overrides under a ``# megaplan-import:`` line with the
    recipe and the GPUs torchrun starts (fresh user trial 7: it was "the world size is unknown")."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise PlannerError(f"run_recipe.py line: {err}") from None
    at = next(i for i, w in enumerate(words) if RUN_RECIPE.search(w))
    launcher, args = words[:at], words[at + 1 :]
    world = _run_recipe_world(launcher, gpus_given)
    substituted = re.search(r"\$\([^)]*\)|`[^`]*`", text)
    if substituted:
        raise PlannerError(
            f"the run_recipe.py line takes overrides from {substituted.group()}, a command megaplan does not run: give "
            "that file with --bridge-config FILE, the recipe with --bridge-recipe NAME and --gpus N"
        )
    head = []
    for i, word in enumerate(args):
        if word.startswith("--recipe"):
            head.append("--bridge-recipe " + (word.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")))
    if world is not None:
        head.append(f"--gpus {world}")
    overrides = [w for w in args if "=" in w and not w.startswith("-")]
    return f"# megaplan-import: {' '.join(head)}\n" + "\n".join(overrides) + "\n"


def file_kind(text: str) -> str:
    """What a --bridge-config file holds: a Megatron-LM MODEL_ARGS YAML, a NeMo 2 command line, Bridge's
    run_recipe.py launch line, or Bridge's own config."""
    if re.search(r"^MODEL_ARGS:", text, re.M):
        return "mlm-yaml"
    lines = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if RUN_RECIPE.search(lines) and not re.search(r"^\s*[\w.]+\s*:", text, re.M):
        return "run_recipe"  # a comment naming run_recipe.py is no launch line (an export's header, ux18)
    if re.search(r"\bnemo\s+llm\b|^\s*trainer\.strategy\.|\strainer\.strategy\.", text, re.M):
        return "nemo2"
    return "bridge"


def _workload(text: str, name: str, values: dict, path: Path | None = None) -> tuple[object, str]:
    """--bridge-config FILE#NAME: one of Bridge's performance workloads (planner.bridge.workloads)."""
    from planner.bridge.workloads import post_overrides, read_workload

    w = read_workload(text, name, path)
    gpus = values.get("gpus") or w.gpus
    hardware = values.get("hardware") or w.hardware
    post = partial(post_overrides, w, gpus=gpus, user_gbs=values.get("global_batch"))
    read = bridge_import_fields(
        w.fields, tag=w.tag, recipe=w.recipe, gpus=gpus, hardware=hardware, model=w.model, env=w.env, post=post
    )
    note = f"workload {w.name} (Megatron-Bridge {w.tag} performance scripts): {w.gpus} GPUs of {w.hardware}"
    where = f"--gpus {gpus}" if values.get("gpus") else f"the workload's {w.gpus} GPUs"
    return replace(read, notes=(note, *read.notes)), where


ARCH_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_moe_experts")


def preset_for(fields: dict) -> str | None:
    """The model preset whose layers, widths, heads and experts a full config's model fields match."""
    from planner.presets import load_model, preset_names

    given = {k: fields.get(f"model.{k}") for k in ARCH_KEYS}
    if given["num_layers"] is None or given["hidden_size"] is None:
        return None
    for name in preset_names("models"):
        m = load_model(name)
        mine = (m.num_layers, m.hidden_size, m.ffn, m.num_attention_heads, m.num_experts or None)
        if mine == tuple(given[k] or None for k in ARCH_KEYS):
            return name
    return None
