"""Two more ways to write a plan, and read it back:

- ``mlm-yaml``: the ``ENV_VARS:`` / ``MODEL_ARGS:`` YAML that Megatron-LM's functional-test and MoE model-zoo
  configs use (``tests/functional_tests/test_cases/*/model_config.yaml`` at d98e8a64) and Bridge's
  translator reads (``scripts/translate_mlm_to_bridge.py: parse_yaml_config`` at v0.6.0): every
  ``--flag: value``, switches as ``true``, lists as YAML lists.
- ``nemo2``: NeMo 2 ``llm`` recipe overrides, as ``nemo llm pretrain --factory RECIPE`` takes them
  (``key=value``), from the mapping table's NeMo 2 column.
"""

from __future__ import annotations

import functools
import json
import shlex
from importlib import resources

import yaml

from planner.api import PlanRequest
from planner.bridge.export import MOE_DESTS
from planner.bridge.table import ROWS
from planner.bridge.values import TORCH_DTYPES
from planner.errors import PlannerError
from planner.megatron.export import environment_lines, megatron_argv, train_iterations
from planner.megatron.flags import parse_megatron_argv
from planner.whole import typed_int


def _pairs(argv: list[str]) -> list[tuple[str, list[str]]]:
    out, i = [], 0
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        out.append((argv[i], argv[i + 1 : j]))
        i = j
    return out


def _scalar(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def mlm_yaml(req: PlanRequest) -> str:
    """The plan's Megatron-LM flags as ENV_VARS / MODEL_ARGS YAML."""
    env = {}
    for line in environment_lines(req):
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").split("  #")[0].strip().partition("=")
            env[name] = _scalar(value)
    args = {}
    for flag, values in _pairs(megatron_argv(req)):
        args[flag] = True if not values else _scalar(values[0]) if len(values) == 1 else [_scalar(v) for v in values]
    body = yaml.safe_dump({"ENV_VARS": env, "MODEL_ARGS": args}, sort_keys=False, default_flow_style=False)
    return f"# megaplan: {req.ctx.model.name} on {req.gpus} GPUs of {req.ctx.hardware.name}\n" + body


def mlm_yaml_argv(text: str) -> tuple[str, dict]:
    """A MODEL_ARGS YAML as a command line the Megatron-LM importer reads (``export`` lines for ENV_VARS)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PlannerError(f"MODEL_ARGS YAML: {err.problem}") from None
    if not isinstance(data, dict) or not isinstance(data.get("MODEL_ARGS", data), dict):
        raise PlannerError("MODEL_ARGS YAML: expected a mapping with MODEL_ARGS: {--flag: value}")
    words = []
    for flag, value in data.get("MODEL_ARGS", data).items():
        if value is False:
            continue
        words.append(str(flag))
        if isinstance(value, list):
            words += [str(v) for v in value]
        elif value is not True and value is not None:
            words.append(str(value))
    env = {str(k): str(v) for k, v in (data.get("ENV_VARS") or {}).items()}
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return exports + shlex.join(words), env


NEMO2_ALWAYS = {
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "micro_batch_size",
    "global_batch_size",
    "seq_length",
    "sequence_parallel",
    "use_distributed_optimizer",
    # the model configs differ: on for Qwen3 and DeepSeek (nemo/collections/llm/gpt/model/qwen3.py:65, deepseek.py:127
    # @ v2.4.0), Megatron-Core's off for the others; MoE models only (MOE_DESTS)
    "moe_permute_fusion",
}
NEMO2_PLUGINS = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}  # recipes/precision/mixed_precision.py factories
# NeMo 2 llm recipe factories -> megaplan model presets (nemo/collections/llm/recipes/<name>.py)
NEMO2_FACTORIES = {
    "llama2_7b": "llama2-7b",
    "llama2_13b": "llama2-13b",
    "llama2_70b": "llama2-70b",
    "llama3_8b": "llama3-8b",
    "llama3_70b": "llama3-70b",
    "llama31_405b": "llama3.1-405b",
    "mixtral_8x7b": "mixtral-8x7b",
    "mixtral_8x22b": "mixtral-8x22b",
    "nemotron4_15b": "nemotron-4-15b",
    "nemotron4_340b": "nemotron-4-340b",
    "gpt3_175b": "gpt3-175b",
    "deepseek_v3": "deepseek-v3",
    "qwen3_30b_a3b": "qwen3-30b-a3b",
    "qwen3_235b_a22b": "qwen3-235b-a22b",
}


@functools.cache
def _nemo2_data() -> dict:
    text = resources.files("planner.bridge.data").joinpath("nemo2_defaults.json").read_text("utf-8")
    return json.loads(text)


def nemo2_defaults(factory: str | None) -> dict:
    """What NeMo 2's ``llm`` recipe ``factory`` sets (NeMo key -> value) at the tag of data/nemo2_defaults.json,
    generated from NeMo's source by scripts/dump_nemo2_defaults.py; {} for a factory not read."""
    return dict(_nemo2_data()["factories"].get(factory or "", {}))


NEMO2_TAG = "v2.4.0"  # the NeMo tag data/nemo2_defaults.json was read at


def nemo2_lines(req: PlanRequest, factory: str | None = None) -> list[str]:
    """``key=value`` overrides of a NeMo 2 ``llm`` recipe for the plan, from the table's NeMo 2 column: every field
    that differs from what the recipe ``factory`` sets (or, for a field it does not set, from Megatron-LM's
    default), the parallel sizes and batch always, and trainer.max_steps: the plan's --tokens in whole global
    batches, rounded up (the factory's own run, e.g. 1,168,251 steps for llama3_8b, is not the plan's)."""
    values = parse_megatron_argv(megatron_argv(req)).values
    recipe = nemo2_defaults(factory)
    lines = [f"trainer.plugins={NEMO2_PLUGINS.get(req.ctx.precision, 'bf16_mixed')}"]
    for row in ROWS:
        if not row.nemo2 or row.nemo2[0] == "trainer.plugins" or "callbacks" in row.nemo2[0]:
            continue
        if (row.dest in ("fp8_recipe", "fp8_param_gather") and "fp8" not in values) or row.dest == "ckpt_format":
            continue
        if row.dest in MOE_DESTS and not req.ctx.model.is_moe:
            continue
        default = True if row.kind == "off" else row.default
        value = values.get(row.dest, default)
        value = TORCH_DTYPES[value] if row.convert == "dtype" and value is not None else value
        value = (not value) if row.convert == "not" else value
        key = row.nemo2[0]
        if key in recipe:
            if recipe[key] != value or row.dest in NEMO2_ALWAYS:
                lines.append(f"{key}={_nemo_value(value)}")
            continue
        plain = (not default) if row.convert == "not" else default
        if value is None or (value == plain and row.dest not in NEMO2_ALWAYS):
            continue
        lines.append(f"{key}={_nemo_value(value)}")
    tr = req.ctx.training  # the run the estimate's days count, as the Bridge export's train.train_iters
    lines.append(f"{NEMO2_RUN}={train_iterations(tr)}")
    return lines


def _nemo_value(value) -> str:
    if value is None:
        return "None"  # NeMo-Run's command line reads Python literals
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def nemo2_text(req: PlanRequest) -> tuple[str, list[str]]:
    """The NeMo 2 launch line: ``nemo llm pretrain --factory NAME`` with the plan's overrides (not NVFP4: the table
    writes no NeMo 2 path for MegatronMixedPrecision's fp4 fields)."""
    if req.ctx.options.fp4 is not None:
        from planner.errors import PlannerError

        raise PlannerError(
            "--fp4 in the NeMo 2 format: megaplan writes no trainer.plugins.fp4 override (not in its table); "
            "allowed: --format bridge, or the Megatron-LM flags"
        )
    factory = next((k for k, v in NEMO2_FACTORIES.items() if v == req.ctx.model.name), "RECIPE")
    lines = nemo2_lines(req, factory)
    head = f"# megaplan: {req.ctx.model.name} on {req.gpus} GPUs of {req.ctx.hardware.name}; NeMo 2 llm recipe\n"
    env = [line.removeprefix("export ").split("  #")[0].strip() for line in environment_lines(req)]
    head += f"# megaplan-env: {' '.join(env)}\n" if env else ""
    body = " \\\n".join([f"nemo llm pretrain --factory {factory}", *(f"    {line}" for line in lines)])
    notes = []
    o = req.ctx.options
    if o.tp_comm_overlap or (req.plan.vpp > 1 and not o.overlap_p2p_comm):
        notes.append(
            f"add MegatronCommOverlapCallback(tp_comm_overlap={o.tp_comm_overlap}, overlap_p2p_comm="
            f"{o.overlap_p2p_comm}) to trainer.callbacks: NeMo 2 sets these there, not by a key=value override"
        )
    sms = [
        f"{flag} {value}"
        for flag, value, default in (
            ("--moe-flex-dispatcher-num-sms", o.moe_flex_dispatcher_num_sms, None),
            ("--moe-hybridep-num-sms-preprocessing", o.moe_hybridep_num_sms_preprocessing, 108),
        )
        if value != default and req.plan.moe_token_dispatcher.value == "flex"
    ]
    if sms:
        notes.append(f"not written (no NeMo 2 key in megaplan's table): {', '.join(sms)}; the run takes the defaults")
    if factory == "RECIPE":
        notes.append(f"no NeMo 2 recipe factory for {req.ctx.model.name} is known: replace RECIPE")
    return head + body + "\n", notes


def nemo2_fields(text: str) -> tuple[dict, str | None, tuple[dict, str]]:
    """A NeMo 2 command line (``nemo llm pretrain --factory NAME key=value ...``) or override list as Bridge
    fields (through the table's NeMo 2 column) over what the factory's recipe sets (``nemo2_defaults``), the model
    preset its factory names, and (the recipe's fields the line leaves as they are, the factory)."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise PlannerError(f"NeMo 2 command line: {err}") from None
    factory = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--factory", "-f")), None)
    name = (factory or "").split(".")[-1].removesuffix("_pretrain")
    by_key = {row.nemo2[0]: row for row in ROWS if row.nemo2}
    given = nemo2_given(text)
    recipe = nemo2_defaults(name)
    fields: dict = {}
    for key, value in (recipe | given).items():
        if key == "trainer.plugins":
            plugin = str(value).replace("-", "_")
            fields["model.bf16"], fields["model.fp16"] = plugin.startswith("bf16"), plugin.startswith("fp16")
            continue
        if key == NEMO2_RUN:
            steps = nemo2_max_steps(value)
            if steps is not None:
                fields["train.train_iters"] = steps  # Bridge's field for the same count: its run length
            continue
        row = by_key.get(key)
        if row is None:
            continue
        fields[row.read] = value  # NeMo 2 and Bridge share Megatron-Core's names and meanings
    assumed = sorted(k for k in recipe if k not in given)
    return fields, NEMO2_FACTORIES.get(name), ({k: recipe[k] for k in assumed}, name)


def nemo2_given(text: str) -> dict:
    """A NeMo 2 line's ``key=value`` overrides, each value as NeMo-Run reads it (a YAML scalar)."""
    given = {}
    for word in shlex.split(text.replace("\\\n", " "), comments=True):
        key, eq, text_value = word.partition("=")
        if eq and not key.startswith("-"):
            value = None if text_value in ("", "None", "null") else yaml.safe_load(text_value)
            given[key] = typed_int(value, text_value, f"NeMo 2 override {word!r}")
    return given


NEMO2_RUN = "trainer.max_steps"  # Lightning's Trainer(max_steps=...): optimizer steps, one global batch each
NEMO2_NO_LIMIT = (
    "trainer.max_steps=-1: Lightning's no step limit (the run ends at trainer.max_epochs, whose length needs the "
    "dataset's size, which the line does not hold); days and cost are for --tokens (300B by default)"
)


def nemo2_max_steps(value) -> int | None:
    """NeMo 2's ``trainer.max_steps`` as the run's iterations (each one optimizer step over a global batch, as
    Megatron-LM's --train-iters: NeMo's MegatronStrategy steps the optimizer once per global batch): a whole number
    ≥ 1; -1 (Lightning's default, no step limit) and None are no length (None), which the import says
    (``NEMO2_NO_LIMIT``); anything else, which Lightning refuses too (``max_steps`` must be -1 or ≥ 0; 0 trains
    nothing), is one error line naming the key and what is allowed."""
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise PlannerError(
            f"NeMo 2 {NEMO2_RUN}={value!r}: allowed: a whole number ≥ 1 (the run's optimizer steps), or -1 (no "
            "limit: days and cost for --tokens)"
        )
    return int(value)


NEMO2_NOT_PLAN = (
    "log.",
    "resume.",
    "data.tokenizer",
    "data.paths",
    "trainer.val_check_interval",
    "trainer.limit_val_batches",
    "trainer.limit_test_batches",
    "trainer.log_every_n_steps",
    "trainer.enable_checkpointing",
    "optim.config.lr",
    "optim.lr_scheduler",
    "trainer.callbacks",
)


def nemo2_launch(text: str) -> tuple[int | None, list[str]]:
    """What else a NeMo 2 line says (fresh user trial 7): its world size, trainer.num_nodes × trainer.devices
    when it gives both (NeMo's recipes differ in their defaults, so one alone is not read), and a warning for
    each key megaplan does not read that may change the plan (one was dropped without a word); a misspelt
    --factory is refused with the name meant."""
    import difflib

    words = shlex.split(text.replace("\\\n", " "), comments=True)
    factory = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--factory", "-f")), None)
    name = (factory or "").split(".")[-1].removesuffix("_pretrain")
    known = sorted(_nemo2_data()["factories"])
    if factory and name not in known:
        near = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.8)
        if near:
            raise PlannerError(
                f"NeMo 2 --factory {factory}: did you mean {near[0]}? (megaplan reads {', '.join(known)})"
            )
    given = dict(w.partition("=")[::2] for w in words if "=" in w and not w.startswith("-"))
    by_key = {row.nemo2[0] for row in ROWS if row.nemo2} | {"trainer.plugins", "trainer.num_nodes", "trainer.devices"}
    by_key.add(NEMO2_RUN)  # the run's length (nemo2_fields)
    unread = [k for k in given if k not in by_key and not k.startswith(NEMO2_NOT_PLAN)]
    warnings = [f"NeMo 2 key {k}: not one megaplan reads; ignored" for k in unread]
    try:
        world = int(given["trainer.num_nodes"]) * int(given["trainer.devices"])
    except (KeyError, ValueError):
        world = None
    return (world if world and world > 0 else None), warnings
