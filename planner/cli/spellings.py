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
    "--attention-backend": "--attention-kernel",
    "--moe-token-dispatcher-type": "--moe-token-dispatcher",
    "--moe-expert-capacity-factor": "--moe-capacity-factor",
    "--overlap-p2p-communication": "--overlap-p2p-comm",
    "--no-overlap-p2p-communication": "--no-overlap-p2p-comm",
    "--train-tokens": "--tokens",
}


def megatron_spelling_hint(flag: str) -> str | None:
    """What to type instead of a Megatron-LM flag given to a planner command, or None if it is not one."""
    from planner.megatron.flags import ALIASES, flag_table

    name = flag.split("=")[0]
    if name in MEGATRON_SPELLINGS:
        return f"{name} is Megatron-LM's spelling; megaplan's option is {MEGATRON_SPELLINGS[name]}"
    if name in flag_table() or name in ALIASES:
        return (
            f"{name} is a Megatron-LM flag, not a megaplan option; describe the model with --model (a preset or "
            "YAML), or read a whole command line with --megatron-args '...' or --megatron-args-file FILE"
        )
    return None
