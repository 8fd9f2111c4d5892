"""How a Megatron-LM flag's value becomes Bridge field values and back (the ``convert`` of a table row).

``to_bridge(row, value, tag, ctx)`` gives {Bridge path: value} for every path the row writes at ``tag``;
``to_flags(row, fields, tag, ctx)`` gives the Megatron-LM argv words the Bridge fields stand for. ``ctx``
carries what a conversion needs of the rest of the plan (vpp, precision, whether the model is MoE).
"""

from __future__ import annotations

from planner.bridge.table import DATASET_SEQ, Row
from planner.errors import PlannerError
from planner.whole import DIGITS, whole_number

TORCH_DTYPES = {"fp32": "torch.float32", "fp16": "torch.float16", "bf16": "torch.bfloat16", "fp8": "torch.uint8"}
DTYPES_BACK = {v: k for k, v in TORCH_DTYPES.items()} | {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
V021_GRAPH_SCOPES = {(): "full", ("attn",): "attn"}  # core_v0.15.2 cuda_graph_scope: one string, full or attn
UNFUSED_BACKENDS = ("unfused", "local")


def _all(row: Row, tag: str, value) -> dict:
    return dict.fromkeys(row.paths(tag), value)


def to_bridge(row: Row, value, tag: str, ctx: dict) -> dict:
    """{Bridge path: value} for one row; refuses a value the tag cannot carry (one line, naming it)."""
    kind = row.convert
    if tag not in row.tags:
        if value in (row.default, None, False):
            return {}
        raise PlannerError(f"{row.flag} has no Megatron-Bridge field at {tag} ({row.source}); allowed: leave it off")
    if kind == "vpp":
        return _all(row, tag, None if value in (None, 1) else int(value))
    if kind == "dtype":
        return _all(row, tag, TORCH_DTYPES[value])
    if kind == "not":
        return _all(row, tag, not value)
    if kind == "offload":
        return {"model.cpu_offloading_num_layers": int(value or 0), "model.cpu_offloading": bool(value)}
    if kind == "p2p":
        return _all(row, tag, bool(value)) if ctx.get("vpp", 1) > 1 else {}
    if kind == "flex":
        return _flex(value, tag, ctx)
    if kind == "graph_modules":
        return _graph_modules(value, tag)
    if row.dest == "seq_length":
        return {"model.seq_length": value, DATASET_SEQ[tag]: value}
    if row.kind == "list":
        return _all(row, tag, list(value) if value else value)
    return _all(row, tag, value)


def _flex(value, tag: str, ctx: dict) -> dict:
    if not ctx.get("flex"):
        return {}
    if tag == "v0.2.1":
        raise PlannerError(
            "--moe-token-dispatcher-type flex: Megatron-Bridge v0.2.1 sets the flex dispatcher only through a "
            "recipe's moe_flex_dispatcher_backend argument (training/flex_dispatcher_backend.py; validate() reads "
            "an attribute no override reaches); allowed: alltoall or allgather, or --bridge-version v0.6.0"
        )
    return {"model.moe_flex_dispatcher_backend": value}


def _graph_modules(value, tag: str) -> dict:
    modules = tuple(value or ())
    if tag == "v0.2.1":
        if modules not in V021_GRAPH_SCOPES:
            raise PlannerError(
                f"--cuda-graph-modules {' '.join(modules)}: Megatron-Bridge v0.2.1 (Megatron-Core core_v0.15.2) "
                "takes cuda_graph_scope full or attn only; allowed: no modules, attn, or --bridge-version v0.6.0"
            )
        return {"model.cuda_graph_scope": V021_GRAPH_SCOPES[modules]}
    # d98e8a64 refuses cuda_graph_scope and cuda_graph_modules together; the recipes set the old scope
    return {"model.cuda_graph_modules": list(modules), "model.cuda_graph_scope": None}


def field_value(fields: dict, path: str, default=None):
    return fields.get(path, default)


def to_flags(row: Row, fields: dict, tag: str, ctx: dict) -> list[str]:
    """The Megatron-LM argv words a row's Bridge fields stand for (after Bridge's runtime update)."""
    path = row.read_at(tag)
    if tag not in row.tags or path not in fields:
        return []
    value = fields[path]
    kind = row.convert
    if kind == "vpp":  # a layout places the virtual stages itself (Bridge derives the size from it)
        return [row.flag, str(value)] if value not in (None, 1) and not ctx.get("layout") else []
    if kind == "dtype":
        name = DTYPES_BACK.get(str(value).removeprefix("torch."), DTYPES_BACK.get(str(value), "fp32"))
        return [row.flag, name] if name != row.default else []
    if kind == "not":
        return [row.flag] if value is False and ctx.get("precision") == "bf16" else []
    if kind == "offload":
        layers = int(value or 0) if fields.get("model.cpu_offloading", bool(value)) else 0
        return [row.flag, str(layers)] if layers else []
    if kind == "p2p":
        return [row.flag] if value is False and ctx.get("vpp", 1) > 1 else []
    if kind == "flex":
        if not ctx.get("flex"):
            return []
        backend = ("deepep" if value else None) if tag == "v0.2.1" else value
        return [row.flag, backend] if backend else []
    if kind == "graph_modules":
        return _graph_flags(row, value, tag)
    return _plain_flags(row, value, ctx)


def _graph_flags(row: Row, value, tag: str) -> list[str]:
    if isinstance(value, str):
        value = [] if value in ("full", "") else [value]
    modules = [str(m).rsplit(".", 1)[-1] for m in value or ()]
    return [row.flag, *modules] if modules else []


LAYOUT_LETTERS = {
    "embedding": "E",
    "decoder": "t",
    "mtp": "m",
    "loss": "L",
}  # Megatron-Core PipelineParallelLayerLayout


def layout_text(value) -> str:
    """A pipeline layout as Megatron-LM's flag writes it; Bridge may hold it parsed, a list of stages of layer
    names (Megatron-Core pipeline_parallel_layer_layout.py)."""
    if isinstance(value, str):
        return value
    return "|".join("".join(LAYOUT_LETTERS.get(str(x), "?") for x in stage) for stage in value)


def bridge_bool(path: str, value):
    """A Bridge boolean field's value as OmegaConf's BooleanNode reads it (true/false, yes/no, on/off, y/n, a whole
    number); other text is refused: a quoted '2_0' was taken as true, being a non-empty string (err16 fuzz)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "y"):
        return True
    if text in ("false", "no", "off", "n"):
        return False
    if DIGITS.fullmatch(text):
        return whole_number(text) != 0
    raise PlannerError(f"Bridge field {path} is {value!r}; allowed: true or false")


def _plain_flags(row: Row, value, ctx: dict) -> list[str]:
    if row.dest == "pipeline_model_parallel_layout" and value:
        return [row.flag, layout_text(value)]
    if row.dest == "attention_backend":
        name = str(value).rsplit(".", 1)[-1]  # AttnBackend.flash or flash
        return [row.flag, "unfused" if name in UNFUSED_BACKENDS else "flash" if name == "flash" else "auto"]
    if row.dest in ("fp8_recipe", "fp8_param_gather") and not ctx.get("fp8"):
        return []
    if row.dest == "recompute_modules" and ctx.get("recompute") != "selective":
        return []
    if row.dest in ("data_parallel_sharding_strategy", "outer_dp_sharding_strategy", "ckpt_format") and not ctx.get(
        "fsdp"
    ):
        return []  # Megatron FSDP's own settings; the recipes leave no_shard / torch_dist without it
    if row.kind in ("on", "off"):
        value = bridge_bool(row.read, value)
    if row.kind == "on":
        return [row.flag] if value else []
    if row.kind == "off":
        return [row.flag] if value is False else []
    if value is None or value == "":
        return []
    if row.kind == "list":
        items = [value] if isinstance(value, str) else list(value)
        return [row.flag, *map(str, items)] if items else []
    return [row.flag, str(value)]
