"""A model config of Megatron-LM's examples/moe-modelzoo (``model_configs/benchmarking/<MODEL>.yaml``: an
``ENV_VARS`` and a ``MODEL_ARGS`` mapping) read as the command line its launcher builds from it.

``sbatch_benchmarking.sh`` runs ``envsubst`` over the YAML, then ``yq`` turns ``MODEL_ARGS`` into flags:
``select(.value != "false") | with(select(.value == "true"); .value = "") | [.key + " " + .value]``, i.e.
a ``false`` value drops the flag, ``true`` gives it alone, anything else follows it; the words are split
on spaces (the flags reach ``python ${TRAINING_SCRIPT_PATH} ${TRAINING_PARAMS}`` unquoted). The script's
entry point is ``pretrain_gpt.py`` (runtime_configs/benchmarking/common.conf). megaplan runs neither
envsubst nor yq: the variables given with --env are substituted first, as envsubst would; the others stay
``${NAME}`` for the launch reader, which names each one a plan needs. The flags the launcher adds itself
(dispatcher, FP8, virtual stages, uneven pipeline) are not in the YAML; they can be given with
--megatron-args."""

from __future__ import annotations

import re
from collections.abc import Mapping

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
ENTRY_POINT = "pretrain_gpt.py"
READ_NOTE = (
    "read as a Megatron-LM moe-modelzoo model config, as sbatch_benchmarking.sh passes its MODEL_ARGS to "
    "pretrain_gpt.py; the flags that script adds itself are not in the file (the dispatcher, FP8, "
    "--num-virtual-stages-per-pipeline-rank, --decoder-first/last-pipeline-num-layers for uneven stages): give "
    "them with --megatron-args"
)


def modelzoo_command(text: str, env: Mapping[str, str]) -> str | None:
    """The command line sbatch_benchmarking.sh builds from a moe-modelzoo config (see the module), or None
    when ``text`` is not one."""
    args = _model_args(text, env)
    if args is None:
        return None
    words = [ENTRY_POINT]
    for flag, value in args.items():
        if value == "false":
            continue
        words.append(flag)
        words += [] if value == "true" else [_double_quoted(w) for w in value.split()]
    return " ".join(words)


def _model_args(text: str, env: Mapping[str, str]) -> dict[str, str] | None:
    import yaml

    if "MODEL_ARGS" not in text:
        return None
    substituted = VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
    try:
        data = yaml.load(substituted, Loader=yaml.BaseLoader)  # every scalar as its text, as yq prints it
    except yaml.YAMLError:
        return None
    args = data.get("MODEL_ARGS") if isinstance(data, dict) else None
    if not isinstance(args, dict) or not all(isinstance(k, str) and k.startswith("-") for k in args):
        return None
    return {flag: value if isinstance(value, str) else "" for flag, value in args.items()}


def _double_quoted(word: str) -> str:
    """``word`` in double quotes, its ``$NAME`` still expanded by the launch reader."""
    return '"' + re.sub(r'(["\\`])', r"\\\1", word) + '"'
