"""Megatron-LM flag spellings typed to a planner command, pointed to the planner's option."""

from __future__ import annotations

MEGATRON_SPELLINGS = {  # a Megatron-LM flag typed to a planner command -> the planner's option
    "--tensor-model-parallel-size": "--tp",
    "--pipeline-model-parallel-size": "--pp",
    "--context-parallel-size": "--cp",
    "--expert-model-parallel-size": "--ep",
    "--expert-tensor-parallel-size": "--etp",
    "--num-virtual-stages-per-pipeline-rank": "--vpp",
    "--num-layers-per-virtual-pipeline-stage": "--vpp (chunks per stage, not layers per chunk)",
    "--micro-batch-size": "--micro-batch",
    "--global-batch-size": "--global-batch",
    "--seq-length": "--seq-len",
    "--recompute-granularity": "--recompute",
    "--recompute-activations": "--recompute selective",
    "--use-distributed-optimizer": "--distributed-optimizer",
    "--use-megatron-fsdp": "--fsdp",
    "--bf16": "--precision bf16",
    "--fp16": "--precision fp16",
    "--fp8-format": "--fp8",
    "--fp4-format": "--fp4",
    "--attention-backend": "--attention-kernel",
    "--moe-token-dispatcher-type": "--moe-token-dispatcher",
    "--moe-expert-capacity-factor": "--moe-capacity-factor",
    "--overlap-p2p-communication": "--overlap-p2p-comm",
    "--no-overlap-p2p-communication": "--no-overlap-p2p-comm",
    "--train-tokens": "--tokens",
}


_GPUS = "--gpus N (the nodes × GPUs per node)"
OTHER_SPELLINGS = {  # names other tools (NeMo, DeepSpeed, torchrun, papers) give a knob -> the planner's option
    **dict.fromkeys(("--tensor-parallel", "--tensor-parallel-size", "--tp-size", "--tensor-model-parallel"), "--tp"),
    **dict.fromkeys(("--pipeline-parallel", "--pipeline-parallel-size", "--pp-size"), "--pp"),
    **dict.fromkeys(("--context-parallel", "--cp-size"), "--cp"),
    **dict.fromkeys(("--expert-parallel", "--expert-parallel-size", "--ep-size"), "--ep"),
    **dict.fromkeys(("--data-parallel", "--data-parallel-size", "--dp-size"), "--dp"),
    **dict.fromkeys(("--num-gpus", "--ngpus", "--n-gpus", "--world-size", "--gpu-count"), "--gpus"),
    **dict.fromkeys(("--nodes", "--num-nodes", "--nnodes", "--node-count"), _GPUS),
    **dict.fromkeys(("--sequence-length", "--seqlen", "--max-seq-len"), "--seq-len"),
    **dict.fromkeys(("--mbs",), "--micro-batch"),
    **dict.fromkeys(("--gbs", "--batch-size"), "--global-batch"),
    **dict.fromkeys(("--gpu", "--cluster", "--system"), "--hardware (a preset or YAML: megaplan presets hardware)"),
}


def megatron_spelling_hint(flag: str) -> str | None:
    """What to type instead of a Megatron-LM flag (or another tool's name of a knob) given to a planner command, or
    None if it is neither."""
    from planner.megatron.flags import ALIASES, flag_table

    name = flag.split("=")[0]
    if name.replace("_", "-") in OTHER_SPELLINGS:
        return f"no option {name}; megaplan's option is {OTHER_SPELLINGS[name.replace('_', '-')]}"
    if name in MEGATRON_SPELLINGS:
        return f"{name} is Megatron-LM's spelling; megaplan's option is {MEGATRON_SPELLINGS[name]}"
    if name in flag_table() or name in ALIASES:
        return (
            f"{name} is a Megatron-LM flag, not a megaplan option; describe the model with --model (a preset or "
            "YAML), or read a whole command line with --megatron-args '...' or --megatron-args-file FILE"
        )
    return None


def pasted_character_hint(args: list[str]) -> str | None:
    """An argument pasted from a document: an option that begins with a typographic dash (``—gpus``: click
    said "Got unexpected extra arguments (—gpus 64)") or holds a no-break space (``--gpus\\u00a064``)."""
    from planner.errors import typographic_dash_hint

    for arg in args:
        if hint := typographic_dash_hint(arg):
            return hint
        if "\u00a0" in arg:
            shown = arg.replace("\u00a0", "\u2423")
            return f"'{shown}' holds a no-break space (shown as \u2423, pasted from a web page): type a plain space"
    return None


def single_dash_hint(err, args: list[str]) -> str | None:
    """``-tp 2`` read by click as the short option -t: the long option it meant, when the command has it."""
    command = err.ctx.command if err.ctx else None
    if command is None:
        return None
    names = {name for param in command.params for name in getattr(param, "opts", ())}
    for arg in args:
        word = arg.split("=")[0]
        if word.startswith(err.option_name) and word[:2] != "--" and len(word) > 2 and "-" + word in names:
            return f"no option {word}: long options take two hyphens, -{word}"
    return None
