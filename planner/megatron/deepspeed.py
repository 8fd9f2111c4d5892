"""Megatron-DeepSpeed and older Megatron-LM flags in a launch script, mapped where they change the plan.

DeepSpeed's ZeRO shards what Megatron's own options shard (Rajbhandari et al. 2020, "ZeRO"): stage 1
the optimizer states and stage 2 also the gradients over data parallelism, which the planner prices
as Megatron-LM's distributed optimizer; stage 3 also the weights, priced as Megatron FSDP. The stage
is the one in the DeepSpeed JSON config when the script writes it (``cat <<EOF > ds_config.json``),
else ``--zero-stage``. ``--no-pipeline-parallel`` means one pipeline stage, ``--num-key-value-heads``
grouped-query attention, ``--pad-vocab-size-to`` the padded vocabulary and
``--ds-sequence-parallel-size`` (DeepSpeed-Ulysses) splits the sequence like context parallelism
(priced as Megatron's context parallelism, which a note says). Every other such flag is read, and
listed once as not changing the estimate, or as an architecture feature the planner does not model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from planner.megatron.dialects import fork_flag

NOT_MODELLED = {  # fork flags that change the architecture but are not in the cost model
    "--embed-layernorm": "a LayerNorm after the word embedding (BLOOM)",
    "--mlp-type": "pyramid-residual MoE MLPs",
}
CHECKPOINTING = ("--deepspeed-activation-checkpointing", "--partition-activations", "--contigious-checkpointing")


@dataclass
class ForkPlan:
    """What the fork flags change: model fields, plan fields, training fields, and the notes to say."""

    model: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # how a flag was read
    warnings: list[str] = field(default_factory=list)  # where the estimate departs from what the script runs


def _int(words: list[str]) -> int | None:
    try:
        return int(words[0].replace("_", "")) if words else None
    except ValueError:
        return None


def ds_config(fork: dict[str, list[str]], files: dict[str, str]) -> tuple[dict | None, str | None]:
    """(the DeepSpeed JSON config the script writes, its path); (None, path) when it is not readable."""
    words = fork.get("--deepspeed_config") or fork.get("--deepscale_config")
    if not words:
        return None, None
    path = words[0]
    text = files.get(path)
    if text is None:
        return None, path
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None, path
    return (data if isinstance(data, dict) else None), path


def _zero_stage(fork: dict[str, list[str]], config: dict | None, out: ForkPlan) -> int | None:
    flag_stage = _int(fork.get("--zero-stage", []))
    zero = config.get("zero_optimization") if config else None
    json_stage = zero.get("stage") if isinstance(zero, dict) and isinstance(zero.get("stage"), int) else None
    if json_stage is not None and flag_stage is not None and json_stage != flag_stage:
        out.warnings.append(
            f"the DeepSpeed config says ZeRO stage {json_stage}, --zero-stage says {flag_stage}: "
            f"the config's (what DeepSpeed runs) is used"
        )
    return json_stage if json_stage is not None else flag_stage


def _batch(config: dict | None, path: str | None, values: dict, out: ForkPlan) -> None:
    if config is None:
        if path is not None:
            out.notes.append(f"the DeepSpeed config {path} is not written by the script: batch and ZeRO from its flags")
        return
    tbs, mbs = config.get("train_batch_size"), config.get("train_micro_batch_size_per_gpu")
    gbs = values.get("global_batch_size")
    if isinstance(tbs, int) and gbs is None:
        out.training["global_batch"] = tbs
        out.notes.append(f"global batch {tbs} from the DeepSpeed config's train_batch_size")
    elif isinstance(tbs, int) and tbs != gbs:
        out.warnings.append(
            f"the DeepSpeed config's train_batch_size {tbs} differs from --global-batch-size {gbs}; "
            f"the estimate uses {gbs} (Megatron's)"
        )
    if isinstance(mbs, int) and values.get("micro_batch_size") is None:
        out.plan["micro_batch"] = mbs


MICROSOFT = "Megatron-DeepSpeed (Microsoft)"


def _microsoft(fork: dict[str, list[str]]) -> bool:
    """Whether a command line is Microsoft Megatron-DeepSpeed's: DeepSpeed's --deepspeed, or a flag only it has."""
    return "--deepspeed" in fork or any(MICROSOFT in getattr(fork_flag(f), "dialects", ()) for f in fork)


def _deepspeed_moe(fork: dict[str, list[str]], values: dict, out: ForkPlan) -> None:
    """Microsoft Megatron-DeepSpeed's mixture of experts (megatron/arguments.py, model/transformer.py at
    f4157bea): ``--num-experts 1`` (its default) is a dense MLP; more experts route ``--topk`` tokens
    (default 1) and sit on every ``--expert-interval``-th layer (default 2; layer numbers from 1,
    ``get_num_experts_per_layer``), where Megatron-LM's defaults are top-2 on every layer."""
    experts = values.get("num_experts")
    if experts is None or not _microsoft(fork):
        return
    if int(experts) == 1:
        out.model["num_experts"] = None
        out.notes.append("--num-experts 1: Megatron-DeepSpeed's single expert is a dense MLP (no mixture of experts)")
        return
    topk = _int(fork.get("--topk", [])) or 1
    interval = _int(fork.get("--expert-interval", [])) or 2
    layers = values.get("num_layers")
    out.model["moe_router_topk"] = topk
    if interval > 1 and layers:
        out.model["moe_layer_freq"] = tuple(int((i + 1) % interval == 0) for i in range(int(layers)))
    out.notes.append(
        f"Megatron-DeepSpeed's experts: top-{topk} routing (--topk), on one layer in {interval} (--expert-interval)"
    )


def map_fork_flags(fork: dict[str, list[str]], values: dict, files: dict[str, str]) -> ForkPlan:
    """The plan changes and notes that the fork and old-release flags of a parsed command line imply."""
    out = ForkPlan()
    _deepspeed_moe(fork, values, out)
    config, path = ds_config(fork, files)
    stage = _zero_stage(fork, config, out)
    if stage in (1, 2):
        out.plan["distributed_optimizer"] = True
        out.notes.append(f"ZeRO stage {stage} priced as Megatron-LM's distributed optimizer (sharded optimizer states)")
    elif stage == 3:
        out.plan.update(fsdp=True, distributed_optimizer=True)
        out.notes.append("ZeRO stage 3 priced as Megatron FSDP (weights, gradients and optimizer states sharded)")
    _batch(config, path, values, out)
    if "--no-pipeline-parallel" in fork:
        out.plan["pp"] = 1
    kv = _int(fork.get("--num-key-value-heads", []))
    if kv is not None:
        out.model["num_query_groups"] = kv
    pad = _int(fork.get("--pad-vocab-size-to", []))
    if pad is not None:
        out.model.update(vocab_size=pad, make_vocab_size_divisible_by=1)
    _sequence_and_split(fork, out)
    ep = _int(fork.get("--moe-expert-parallel-size", []))
    if ep is not None:
        out.plan["ep"] = ep
    if any(f in fork for f in CHECKPOINTING) and values.get("recompute_granularity") != "full":
        out.warnings.append("DeepSpeed activation checkpointing without --checkpoint-activations: no recomputation")
    _unmodelled_and_ignored(fork, values, out)
    return out


def _sequence_and_split(fork: dict[str, list[str]], out: ForkPlan) -> None:
    """DeepSpeed-Ulysses as context parallelism, and the pipeline partition method as Megatron-LM's split."""
    ulysses = _int(fork.get("--ds-sequence-parallel-size", []))
    if ulysses and ulysses > 1:
        out.plan["cp"] = ulysses
        out.warnings.append(
            f"DeepSpeed-Ulysses sequence parallelism {ulysses} priced as Megatron context parallelism {ulysses} "
            "(ring attention, not Ulysses' all-to-all)"
        )
    method = "".join(fork.get("--pp-partition-method", [])).replace(" ", "")
    if method and set(method.removeprefix("type:").split("|")) == {"transformer", "embedding"}:
        # DeepSpeed's PipelineModule balances layers whose class matches: the tied embedding at both ends
        # counts as a layer, as Megatron-LM's --account-for-embedding/loss-in-pipeline-split do
        out.plan["stage_split"] = "embedding+loss"
        out.notes.append(
            f"--pp-partition-method {method}: the embedding at each end counts as a layer, as "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
        )
    elif method and method != "type:transformer":
        out.warnings.append(f"--pp-partition-method {method} not modelled: layers split evenly over the stages")


def _unmodelled_and_ignored(fork: dict[str, list[str]], values: dict, out: ForkPlan) -> None:
    """A warning naming the fork flags the estimate leaves out, a note naming those it reads and ignores."""
    unmodelled = [f"{f} ({NOT_MODELLED[f]})" for f in fork if NOT_MODELLED.get(f)]
    if unmodelled:
        out.warnings.append(f"not modelled, the estimate leaves out: {'; '.join(unmodelled)}")
    mapped = {
        "--zero-stage",
        "--no-pipeline-parallel",
        "--num-key-value-heads",
        "--pad-vocab-size-to",
        "--ds-sequence-parallel-size",
        "--moe-expert-parallel-size",
        "--deepspeed_config",
        "--tokenizer-name-or-path",
        "--pp-partition-method",
        *(("--topk", "--expert-interval") if values.get("num_experts") and _microsoft(fork) else ()),
        *NOT_MODELLED,
    }
    ignored = [f for f in fork if f not in mapped]
    if ignored:
        origins = dict.fromkeys(fork_flag(f).origin for f in ignored)
        out.notes.append(
            f"read and ignored, they do not change the estimate: {' '.join(ignored)} (from {'; '.join(origins)})"
        )
