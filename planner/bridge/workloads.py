"""Megatron-Bridge's performance workloads read into plans, without running Bridge (the file is parsed, never
executed):

- v0.2.1: ``scripts/performance/configs/<family>/workload_base_configs.py``, module-level
  ``NAME = WorkloadBaseConfig(...)`` / ``NAME = replace(BASE, ...)`` with names
  ``<MODEL>_<GPU>_<DTYPE>_BASE_CONFIG``. The perf scripts apply one over the family's library recipe as
  ``utils/helpers.py: set_workload_base_configs`` does (parallel sizes, SP = TP > 1, batches, Megatron FSDP,
  CUDA graphs, CPU offloading, recomputation, the MoE A2A overlap) with ``get_precision_config(dtype)``
  (FP8 current scaling without BF16 end layers) and ``grad_reduce_in_fp32`` off (``set_<family>_common_configs``).
- v0.6.0: ``megatron/bridge/perf_recipes/<family>/<gpu>/<model>.py``, one function per workload
  (``<model>_pretrain_<N>gpu_<gpu>_<dtype>_config``) assigning ``cfg.<section>.<field> = <literal>``,
  ``cfg.mixed_precision = _perf_precision("<dtype>")`` (which also turns ``grad_reduce_in_fp32`` off) and
  ``cfg.comm_overlap = CommOverlapConfig(...)`` over the library recipe it starts from.

What the perf scripts set in code this reader does not follow (family-specific tweaks beyond these) is left
at the base recipe's value; tests/test_bridge_workloads.py checks the reading against Bridge's own code.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from planner.bridge.perf_reader import read_perf_recipe
from planner.errors import PlannerError
from planner.hardware.names import PRESET_BY_GPU

GPUS = {gpu: PRESET_BY_GPU[gpu] for gpu in ("H100", "B200", "B300", "GB200", "GB300")}  # the GPUs its workloads name
MODELS = {  # workload name prefix -> (megaplan preset, its v0.2.1 library recipe)
    "LLAMA3_8B": ("llama3-8b", "llama3_8b_pretrain_config"),
    "LLAMA3_70B": ("llama3-70b", "llama3_70b_pretrain_config"),
    "LLAMA31_405B": ("llama3.1-405b", "llama31_405b_pretrain_config"),
    "QWEN3_30B_A3B": ("qwen3-30b-a3b", "qwen3_30b_a3b_pretrain_config"),
    "QWEN3_235B_A22B": ("qwen3-235b-a22b", "qwen3_235b_a22b_pretrain_config"),
    "DEEPSEEK_V3": ("deepseek-v3", "deepseek_v3_pretrain_config"),
    "GPT_OSS_120B": ("gpt-oss-120b", "gpt_oss_120b_pretrain_config"),
}
DTYPES = {  # the perf scripts' compute dtype -> Bridge's preset (helpers.get_precision_config / _perf_precision)
    "BF16": "bf16_mixed",
    "FP8_CS": "bf16_with_fp8_current_scaling_mixed",
    "FP8_MX": "bf16_with_mxfp8_mixed",
    "FP8_SC": "bf16_with_fp8_subchannel_scaling_mixed",
}
_NO_RECOMPUTE = {
    "model.recompute_granularity": None,
    "model.recompute_method": None,
    "model.recompute_num_layers": None,
}
FAMILY_V021 = {  # set_<family>_common_configs and the recipe arguments of configs/<family>/<family>_llm_pretrain.py
    "LLAMA3": {"model.seq_length": 8192, "dataset.sequence_length": 8192},
    "LLAMA31": {"model.seq_length": 8192, "dataset.sequence_length": 8192},
    "QWEN3": {"model.seq_length": 4096, "dataset.sequence_length": 4096, **_NO_RECOMPUTE}
    | {"comm_overlap._target_": "CommOverlapConfig", "comm_overlap.tp_comm_overlap": True},
    "DEEPSEEK": {"model.seq_length": 4096, "dataset.sequence_length": 4096, "model.recompute_granularity": "selective"}
    | {"model.pipeline_model_parallel_layout": "Et|(tt|)*30mL", "model.virtual_pipeline_model_parallel_size": None},
    "GPT": {},
}
V021_NAME = re.compile(
    r"^(?P<model>[A-Z0-9_]+?)_(?P<gpu>H100|B200|B300|GB200|GB300)_(?P<dtype>[A-Z0-9_]+)_BASE_CONFIG$"
)
WORKLOAD_DEFAULTS = {  # utils/utils.py WorkloadBaseConfig at v0.2.1
    "num_gpus": 1,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "context_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "expert_model_parallel_size": 1,
    "expert_tensor_parallel_size": None,
    "global_batch_size": 1,
    "micro_batch_size": 1,
    "use_megatron_fsdp": None,
    "cuda_graph_impl": None,
    "cuda_graph_scope": None,
    "cpu_offloading_num_layers": None,
    "recompute_num_layers": None,
    "recompute_modules": None,
    "moe_flex_dispatcher_backend": None,
    "moe_a2a_overlap": False,
}


@dataclass(frozen=True)
class Workload:
    """One workload read: its Bridge fields, base recipe, model, GPUs and hardware."""

    name: str
    tag: str
    fields: dict
    recipe: str
    model: str
    gpus: int
    hardware: str
    env: tuple[str, ...] = ()  # the launch environment the recipe sets (v0.6.0 cfg.env_vars), NAME=VALUE
    dtype: str = "bf16"  # the perf scripts' compute dtype: bf16, fp8_cs, fp8_mx, fp8_sc


def _literal(node: ast.AST, name: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise PlannerError(f"workload {name}: {ast.unparse(node)!r} is not a literal megaplan can read") from None


def read_v021(text: str) -> dict[str, dict]:
    """Every ``NAME = WorkloadBaseConfig(...)`` / ``replace(BASE, ...)`` of a workload_base_configs.py."""
    out: dict[str, dict] = {}
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in out:  # NAME = OTHER_NAME
            out[node.targets[0].id] = dict(out[node.value.id])
            continue
        if not isinstance(node.value, ast.Call):
            continue
        target, call = node.targets[0], node.value
        func = getattr(call.func, "id", getattr(call.func, "attr", ""))
        if not isinstance(target, ast.Name) or func not in ("WorkloadBaseConfig", "replace"):
            continue
        base = dict(WORKLOAD_DEFAULTS)
        if func == "replace" and call.args:
            base = dict(out.get(getattr(call.args[0], "id", ""), WORKLOAD_DEFAULTS))
        base.update({kw.arg: _literal(kw.value, target.id) for kw in call.keywords if kw.arg})
        out[target.id] = base
    return out


def v021_fields(w: dict, dtype: str) -> dict:
    """A workload base config as Bridge fields, as set_workload_base_configs and the perf scripts set them."""
    f = {f"model.{k}": w[k] for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size")}
    f |= {f"model.{k}": w[k] for k in ("context_parallel_size", "virtual_pipeline_model_parallel_size")}
    f |= {"model.expert_model_parallel_size": w["expert_model_parallel_size"]}
    f |= {"model.expert_tensor_parallel_size": w["expert_tensor_parallel_size"]}
    f |= {"model.sequence_parallel": w["tensor_model_parallel_size"] > 1}
    f |= {"train.global_batch_size": w["global_batch_size"], "train.micro_batch_size": w["micro_batch_size"]}
    f |= {"mixed_precision": DTYPES[dtype], "mixed_precision.grad_reduce_in_fp32": False}
    f["mixed_precision.first_last_layers_bf16"] = False
    if w["use_megatron_fsdp"]:
        f |= {"ddp.use_megatron_fsdp": True, "ddp.data_parallel_sharding_strategy": "optim_grads_params"}
    if w["cuda_graph_impl"] is not None:
        f["model.cuda_graph_impl"] = w["cuda_graph_impl"]
    if w["cuda_graph_scope"] is not None:
        f["model.cuda_graph_scope"] = w["cuda_graph_scope"]
    if w["cpu_offloading_num_layers"] is not None:
        f |= {"model.cpu_offloading": True, "model.cpu_offloading_num_layers": w["cpu_offloading_num_layers"]}
    if w["recompute_num_layers"] is not None:
        f |= {"model.recompute_granularity": "full", "model.recompute_method": "block"}
        f["model.recompute_num_layers"] = w["recompute_num_layers"]
    if w["recompute_modules"] is not None:
        f |= {"model.recompute_granularity": "selective", "model.recompute_modules": w["recompute_modules"]}
    if w["moe_flex_dispatcher_backend"] == "deepep":
        f |= {"model.moe_token_dispatcher_type": "flex", "model.moe_enable_deepep": True}
    if w["moe_a2a_overlap"]:
        f |= {"comm_overlap.overlap_moe_expert_parallel_comm": True, "model.moe_shared_expert_overlap": False}
    return f


def workload_v021(text: str, name: str) -> Workload:
    """The workload ``name`` of a v0.2.1 workload_base_configs.py."""
    configs = read_v021(text)
    if name not in configs:
        pretrain = sorted(n for n in configs if V021_NAME.match(n))
        raise PlannerError(f"workload {name}: not in the file; allowed: {', '.join(pretrain) or 'none'}")
    m = V021_NAME.match(name)
    model = m and MODELS.get(m["model"])
    if not m or model is None or m["gpu"] not in GPUS or m["dtype"] not in DTYPES:
        raise PlannerError(
            f"workload {name}: megaplan reads <MODEL>_<GPU>_<DTYPE>_BASE_CONFIG for models {', '.join(MODELS)}, "
            f"GPUs {', '.join(GPUS)} and dtypes {', '.join(DTYPES)}"
        )
    w = configs[name]
    fields = FAMILY_V021[m["model"].split("_")[0]] | v021_fields(w, m["dtype"])
    if m["model"].startswith("DEEPSEEK"):  # the layout places the stages; the recipe takes PP and VPP beside it
        fields["model.virtual_pipeline_model_parallel_size"] = None
    if m["model"].startswith("LLAMA3_") and m["dtype"] == "FP8_MX":  # llama3_llm_pretrain.py: NaN grad norm otherwise
        fields |= {"comm_overlap.overlap_param_gather": False, "ddp.overlap_param_gather": False}
    dtype = m["dtype"].lower()
    return Workload(name, "v0.2.1", fields, model[1], model[0], w["num_gpus"], GPUS[m["gpu"]], dtype=dtype)


V060_NAME = re.compile(
    r"^(?P<model>[a-z0-9_]+?)_pretrain_(?P<gpus>\d+)gpu_(?P<gpu>h100|b200|b300|gb200|gb300)_(?P<dtype>[a-z0-9]+)"
)


def cluster_in_name(name: str) -> tuple[int, str] | None:
    """The GPUs and hardware preset a recipe's name states (``<model>_pretrain_<N>gpu_<gpu>_<dtype>_config``, the
    v0.6.0 naming of library recipes such as ``recipes/llama/h100/llama3.py`` and of perf recipes), else None."""
    m = V060_NAME.match(name)
    return (int(m["gpus"]), GPUS[m["gpu"].upper()]) if m else None


V060_MODELS = {  # perf recipe name prefix -> megaplan preset (the library recipe it starts from, at v0.6.0)
    "llama3_8b": "llama3-8b",
    "llama3_70b": "llama3-70b",
    "llama31_405b": "llama3.1-405b",
    "qwen3_30b_a3b": "qwen3-30b-a3b",
    "qwen3_235b_a22b": "qwen3-235b-a22b",
    "deepseek_v3": "deepseek-v3",
    "gpt_oss_20b": "gpt-oss-20b",
    "gpt_oss_120b": "gpt-oss-120b",
}
V060_DTYPES = {"bf16": "bf16_mixed", "fp8cs": "bf16_with_fp8_current_scaling_mixed", "fp8mx": "bf16_with_mxfp8_mixed"}
V060_DTYPES |= {"fp8sc": "bf16_with_fp8_subchannel_scaling_mixed"}
PERF_DTYPE = {"bf16": "bf16", "fp8_cs": "fp8cs", "fp8_mx": "fp8mx", "fp8_sc": "fp8sc"}


def perf_precision(dtype, name: str) -> dict:
    """``_perf_precision(dtype)`` (v0.6.0 perf_recipes/_common.py) as Bridge fields: the preset, gradients reduced
    in BF16, and for FP8 current scaling no BF16 end layers."""
    preset = PERF_DTYPE.get(dtype) if isinstance(dtype, str) else None
    if preset is None:
        raise PlannerError(f"workload {name}: _perf_precision({dtype!r}) is a precision megaplan does not price")
    fields = {"mixed_precision": V060_DTYPES[preset], "mixed_precision.grad_reduce_in_fp32": False}
    return fields | ({"mixed_precision.first_last_layers_bf16": False} if preset == "fp8cs" else {})


def workload_v060(text: str, name: str, path: Path | None = None) -> Workload:
    """The perf recipe ``name`` of a v0.6.0 perf_recipes module."""
    m = V060_NAME.match(name)
    preset = m and V060_MODELS.get(m["model"])
    if not m or preset is None or m["dtype"] not in V060_DTYPES:
        raise PlannerError(
            f"workload {name}: megaplan reads <model>_pretrain_<N>gpu_<gpu>_<dtype>_config for models "
            f"{', '.join(V060_MODELS)} and dtypes {', '.join(V060_DTYPES)}"
        )
    from planner.bridge.table import RECIPES

    fields, env, base = read_perf_recipe(text, name, path)
    known = RECIPES["v0.6.0"]  # the library recipe it starts from, else the model's first known one
    recipe = base if base in known else next(r for r, (_, p) in known.items() if p == preset)
    env = tuple(f"{k}={v}" for k, v in sorted(env.items()))
    dtype = {v: k for k, v in PERF_DTYPE.items()}[m["dtype"]]
    return Workload(name, "v0.6.0", fields, recipe, preset, int(m["gpus"]), GPUS[m["gpu"].upper()], env, dtype)


def read_workload(text: str, name: str, path: Path | None = None) -> Workload:
    """A workload from its file: a v0.2.1 workload_base_configs.py or a v0.6.0 perf_recipes module (whose helpers
    are read from the perf-recipe modules it imports, found beside ``path``). A file that is not Python, or a
    name that is none of a perf module's recipe functions, is one error naming what is there."""
    defs = re.findall(r"^\s*def\s+(\w+)\s*\(", text, re.M)
    try:
        if name in defs:
            return workload_v060(text, name, path)
        recipes = [d for d in defs if V060_NAME.match(d)]
        if recipes:
            near = difflib.get_close_matches(name, recipes, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise PlannerError(f"workload {name}: not in the file{hint}; allowed: {', '.join(recipes)}")
        return workload_v021(text, name)
    except SyntaxError as err:
        real = err.filename and not err.filename.startswith("<")
        where = Path(err.filename).name if real else (path.name if path is not None else "the workload file")
        raise PlannerError(f"{where}: not Python megaplan can read (line {err.lineno}: {err.msg})") from None


def _layout(fields: dict) -> tuple[int, int, int, int]:
    """TP, PP, CP and VP of merged Bridge fields (unset: 1)."""
    names = ("tensor_model", "pipeline_model", "context", "virtual_pipeline_model")
    t, p, c, v = (int(fields.get(f"model.{name}_parallel_size") or 1) for name in names)
    return t, p, c, v


def scaled_global_batch(w: Workload, base_gbs: int, dp_base: int, dp: int, gpus: int) -> int:
    """The global batch the perf scripts run at ``gpus`` when the user gives none. v0.2.1
    (utils/helpers.py get_model_recipe_with_user_overrides): int(B_0 / N_0 · N) when N ≠ N_0 (gbs_scaling_factor,
    utils/utils.py:65). v0.6.0 (utils/overrides.py set_post_overrides → scripts/common/benchmark_parallelism.py
    weak_scaled_global_batch_size): B_0 · DP / DP_0 when DP ≠ DP_0, refused unless whole."""
    if w.tag == "v0.2.1":
        return int(base_gbs / w.gpus * gpus) if gpus != w.gpus else base_gbs
    if dp == dp_base:
        return base_gbs
    if base_gbs * dp % dp_base:
        raise PlannerError(
            f"workload {w.name} at {gpus} GPUs: Bridge's weak scaling of its global batch {base_gbs} from DP {dp_base} "
            f"to DP {dp} is not whole, which Bridge refuses; give --global-batch"
        )
    return base_gbs * dp // dp_base


def post_overrides(w: Workload, merged: dict, gpus: int, user_gbs: int | None) -> tuple[dict, list[str]]:
    """What the perf scripts set over the workload before training, as Bridge fields, and a note saying so:
    v0.2.1 utils/helpers.py set_user_overrides and get_model_recipe_with_user_overrides (254-300), on every run;
    v0.6.0 utils/overrides.py set_post_overrides (645-705), which run_script.py (_prepare_perf_recipe) applies
    only at a GPU count no flat recipe is named for: at its own count a v0.6.0 recipe runs as written.

    - BF16 with Adam: the precision-aware optimizer (Transformer Engine's FusedAdam; v0.2.1 for every bf16 run).
    - DP, PP and VP all > 1 (v0.6.0: not for fp8_mx or nvfp4): the parameter all-gather overlapped with the
      optimizer step; read and reported, not modelled (``option_flags.NOT_MODELLED``).
    - The global batch weak-scaled to ``gpus`` (``scaled_global_batch``) unless the user gives one."""
    if w.tag != "v0.2.1" and gpus == w.gpus:  # run_script.py _prepare_perf_recipe: the flat recipe is final
        return {}, []
    out: dict = {}
    t, p, c, v = _layout(merged)
    dp = gpus // (t * p * c) if gpus % (t * p * c) == 0 else 1
    adam = str(merged.get("optimizer.optimizer") or "adam") == "adam"
    if w.dtype == "bf16" and (adam or w.tag == "v0.2.1"):
        out["optimizer.use_precision_aware_optimizer"] = True
    if dp > 1 and p > 1 and v > 1 and (w.tag == "v0.2.1" or w.dtype not in ("fp8_mx", "nvfp4")):
        out["optimizer.overlap_param_gather_with_optimizer_step"] = True
    base_gbs = int(merged.get("train.global_batch_size") or 1)
    dp_base = w.gpus // (t * p * c) if w.gpus % (t * p * c) == 0 else 1
    if user_gbs is None and (gbs := scaled_global_batch(w, base_gbs, dp_base, dp, gpus)) != base_gbs:
        out["train.global_batch_size"] = gbs
    said = [f"{k.split('.', 1)[1]}={v}" for k, v in out.items() if merged.get(k) != v or k.endswith("_step")]
    if "train.global_batch_size" in out:
        said[-1] += f" (weak scaling from {base_gbs} at {w.gpus} GPUs)"
    if out.get("optimizer.overlap_param_gather_with_optimizer_step"):
        said = [s + " (not modelled)" if s.startswith("overlap_param_gather_with") else s for s in said]
    note = f"set by the perf scripts after the workload ({SCRIPTS[w.tag]}): {', '.join(said)}"
    if w.tag != "v0.2.1":
        note += f"; a recipe Bridge names for {gpus} GPUs, if it has one, is what run_script.py runs instead"
    return out, [note] if said else []


SCRIPTS = {"v0.2.1": "utils/helpers.py set_user_overrides", "v0.6.0": "utils/overrides.py set_post_overrides"}
