"""Two more ways to write a plan, and read it back:

- ``mlm-yaml``: the ``ENV_VARS:`` / ``MODEL_ARGS:`` YAML that Megatron-LM's functional-test and MoE model-zoo
  configs use (``tests/functional_tests/test_cases/*/model_config.yaml`` at d98e8a64) and Bridge's
  translator reads (``scripts/translate_mlm_to_bridge.py: parse_yaml_config`` at v0.6.0): every
  ``--flag: value``, switches as ``true``, lists as YAML lists.
- ``nemo2``: NeMo 2 ``llm`` recipe overrides, as ``nemo llm pretrain --factory RECIPE`` takes them
  (``key=value``), from the mapping table's NeMo 2 column.
"""

from __future__ import annotations

import shlex

import yaml

from planner.api import PlanRequest
from planner.bridge.table import ROWS
from planner.errors import PlannerError
from planner.megatron.export import environment_lines, megatron_argv
from planner.megatron.flags import parse_megatron_argv


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


NEMO2_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32"}


def nemo2_lines(req: PlanRequest) -> list[str]:
    """``key=value`` overrides of a NeMo 2 ``llm`` recipe for the plan, from the table's NeMo 2 column."""
    values = parse_megatron_argv(megatron_argv(req)).values
    lines = []
    for row in ROWS:
        if not row.nemo2 or row.nemo2[0].startswith("trainer.plugins") or "callbacks" in row.nemo2[0]:
            continue
        if row.dest not in values and row.kind in ("on", "off"):
            continue
        value = values.get(row.dest, row.default)
        if value is None:
            continue
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, list | tuple) else value
        text = str(text).lower() if isinstance(value, bool) else text
        lines.append(f"{row.nemo2[0]}={text}")
    o = req.ctx.options
    lines.append(f"trainer.plugins.precision={NEMO2_PRECISION[req.ctx.precision]}")
    if o.fp8 is not None:
        lines += [f"trainer.plugins.fp8={o.fp8.value}", f"trainer.plugins.fp8_recipe={o.fp8_recipe.value}"]
        lines.append(f"trainer.plugins.fp8_param_gather={str(o.fp8_param_gather).lower()}")
    return lines


def nemo2_text(req: PlanRequest) -> tuple[str, list[str]]:
    lines = nemo2_lines(req)
    head = (
        f"# megaplan: {req.ctx.model.name} on {req.gpus} GPUs of {req.ctx.hardware.name}; NeMo 2 llm recipe overrides\n"
    )
    notes = []
    if req.ctx.options.tp_comm_overlap:
        notes.append(
            "TP overlap in NeMo 2 is the MegatronCommOverlapCallback(tp_comm_overlap=True) in trainer.callbacks, "
            "not a key=value override"
        )
    return head + "".join(line + "\n" for line in lines), notes
