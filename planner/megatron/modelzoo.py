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


_YQ_PATH = re.compile(r'(?:\.(?:"[^"]*"|[A-Za-z_][\w-]*))+')
_YQ_PAIRS = re.compile(r'\[\s*\.key\s*\+\s*"([^"]*)"\s*\+\s*\.value\s*\]')


def yq(expr: str, text: str) -> str | None:
    """What ``yq EXPR FILE`` prints for the expressions sbatch_benchmarking.sh uses, or None for any other:
    a path (``.MODEL_ARGS."--max-position-embeddings"``: the value, ``null`` when absent), and a mapping's
    entries as ``KEY SEP VALUE`` lines (``.MODEL_ARGS | to_entries | .[] | [select(.value != "false") |]
    [with(select(.value == "true"); .value = "") |] [.key + SEP + .value] | join(...)``), one per line."""
    import yaml

    steps = [s.strip() for s in re.sub(r"\s+", " ", expr).split("|")]
    steps = [s for s in steps if s not in ('... comments=""', "...")]
    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)  # every scalar as its text, as yq prints it
    except yaml.YAMLError:
        return None
    if not steps or not _YQ_PATH.fullmatch(steps[0]):
        return None
    for key in re.findall(r'\.(?:"([^"]*)"|([A-Za-z_][\w-]*))', steps[0]):
        data = data.get(key[0] or key[1]) if isinstance(data, dict) else None
    if len(steps) == 1:
        return "null" if data is None else data if isinstance(data, str) else None
    pairs = _YQ_PAIRS.fullmatch(steps[-2]) if len(steps) >= 4 else None
    known = {"to_entries", ".[]", 'select(.value != "false")', 'with(select(.value == "true"); .value = "")'}
    if not isinstance(data, dict) or pairs is None or not set(steps[1:-2]) <= known:
        return None
    if not steps[-1].startswith("join("):
        return None
    lines = []
    for key, value in data.items():
        value = value if isinstance(value, str) else ""
        if 'select(.value != "false")' in steps and value == "false":
            continue
        if 'with(select(.value == "true"); .value = "")' in steps and value == "true":
            value = ""
        lines.append(f"{key}{pairs.group(1)}{value}")
    return "\n".join(lines)
